"""Canary updates on the lab's real proxy, under continuous load (docs/rollouts.md,
"Canary"): a canary at 20% takes between 10% and 30% of the route's requests beside the
old tasks, then `minidock promote` rolls the update on with no request failed; a canary of
a broken image fails its health check and is rolled back, with fewer than 20% of the
requests failed while it ran and none after."""

from __future__ import annotations

import time
from typing import Any

import pytest

from minidock.lab.images import WEB5_IMAGE as WEB5
from minidock.lab.images import WEB6_IMAGE as WEB6
from minidock.lab.images import WEB_BROKEN_IMAGE as BROKEN
from tests.caddyview import front
from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_ingress import (
    apply,
    assert_no_failure,
    converge,
    events,
    loaded,
    paced_load,
    spec,
)

pytestmark = pytest.mark.integration

CANARY = 'canary = 1, canary_weight = 20, promote = "manual", canary_monitor = "1s"'


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


def canary_spec(image: str) -> str:
    """The routed `web` of test_ingress (2 replicas), its update with a canary at 20%."""
    body = spec(image, replicas=2)
    return body.replace("[services.web.update]\n", f"[services.web.update]\n{_keys()}")


def _keys() -> str:
    return "".join(f"{pair.strip()}\n" for pair in CANARY.split(", "))


def web_status(md: Minidock) -> dict[str, Any]:
    found: list[dict[str, Any]] = [s for s in md.status()["services"] if s["name"] == "web"]
    return found[0]


def until_canary_passed(md: Minidock, passes: int = 60) -> dict[str, Any]:
    """Passes until the canary passed its gate and waits for the operator (exit 4)."""
    for _ in range(passes):
        code = md("reconcile").returncode
        web = web_status(md)
        if code == 4 and web["rollout"]["status"] == "canary":
            return web
        time.sleep(0.5)
    raise AssertionError(f"the canary did not pass: {web_status(md)['rollout']}")


def dials(fleet: Fleet, md: Minidock) -> list[str]:
    """The edge's loaded upstreams in turn order, each hand-off resolved (caddyview)."""
    routes = front(loaded(fleet, md))["routes"]
    return [u["dial"] for r in routes for h in r["handle"] for u in h.get("upstreams", [])]


def test_a_canary_at_20_percent_takes_its_share_and_is_promoted(fleet: Fleet, md: Minidock) -> None:
    apply(md, canary_spec(WEB5))
    with paced_load(fleet) as load:
        res = md("apply", str(md.spec(canary_spec(WEB6), "canary.toml")), "--wait", timeout=240)
        assert res.returncode in (3, 4), res.stdout + res.stderr
        web = until_canary_passed(md)
        turns = dials(fleet, md)
        measured_from = time.monotonic()
        time.sleep(6)
        measured_to = time.monotonic()
        promoted = md("promote", "web", "--wait", "--timeout", "3m", timeout=240)
        if promoted.returncode != 0:
            converge(md)
        done = time.monotonic()
        time.sleep(1)
    assert web["state"] == "canary"
    assert web["rollout"]["canary"] == {
        "tasks": 1, "wanted": 1, "weight": 20, "promote": "manual", "promoted": False
    }  # fmt: skip
    assert (len(turns), len(set(turns))) == (5, 3)  # 1 turn for the canary, 2 for each old
    window = [r for r in load.replies if measured_from <= r.started < measured_to and r.ok]
    share = sum(r.text == "web 6\n" for r in window) / len(window)
    assert 0.10 <= share <= 0.30, share
    assert_no_failure(load, fleet, md)
    assert events(md, "rollout-promoted")
    assert {t["image"] for t in md.tasks("web")} == {WEB6}
    after = [r for r in load.replies if r.started >= done]
    assert after
    assert {r.text for r in after} == {"web 6\n"}
    print(
        f"canary at 20%: {share:.1%} of {len(window)} requests in 6 s went to it; "
        f"{len(load.replies)} requests in all, 0 failed, through the promotion and update"
    )


def test_a_broken_canary_is_rolled_back_and_the_traffic_returns(fleet: Fleet, md: Minidock) -> None:
    apply(md, canary_spec(WEB5))
    old = {t["id"] for t in md.tasks("web")}
    with paced_load(fleet) as load:
        started = time.monotonic()
        res = md("apply", str(md.spec(canary_spec(BROKEN), "broken.toml")), "--wait", timeout=240)
        if res.returncode != 1:  # 1: the update this apply started was rolled back
            converge(md)
        rolled = time.monotonic()
        time.sleep(2)
    web = web_status(md)
    assert web["rollout"]["status"] == "rolled_back", web["rollout"]
    assert "canary" in web["rollout"]["reason"]
    assert {t["id"] for t in md.tasks("web")} == old  # the old tasks never stopped
    during = [r for r in load.replies if started <= r.started < rolled]
    after = [r for r in load.replies if r.started >= rolled]
    failed = [r for r in during if not r.ok]
    assert during
    assert len(failed) / len(during) < 0.20
    assert after
    assert all(r.ok for r in after)
    assert {r.text for r in after} == {"web 5\n"}
    print(
        f"broken canary: rolled back {rolled - started:.1f}s after the apply; "
        f"{len(failed)} of {len(during)} requests failed meanwhile, 0 of {len(after)} after "
        f"({web['rollout']['reason'][:80]})"
    )
