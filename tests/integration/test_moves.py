"""Moves of a routed service by a constraint change, on the lab fleet (issue 31, break 1;
docs/ingress.md): `constraints = ["host == host2"]` becomes `["host == host3"]` under
continuous load through the edge's proxy, in both update orders and with one replica.
Each move must converge (`apply --wait` exits 0 within MOVE_TIMEOUT), leave every task
on the new host and every upstream there, and fail no request.

One decision is written into these tests: a move (a constraint change) of a routed service
surges start-first when the target host has room, as Swarm and Kubernetes do (issue 31,
"Deliver" 3), whatever `update.order` says, so even one replica under the default
stop-first order is moved with no failed request: the new task is healthy and in the
routes before the old one leaves them."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_ingress import (
    apply,
    assert_no_failure,
    events,
    latency,
    paced_load,
    spec,
    timeline,
    upstreams,
)

pytestmark = pytest.mark.integration

SOURCE, TARGET = "host2", "host3"  # neither is the edge: every request crosses hosts
# A move converges in some 15 s here (drain 1 s, health every 1 s, monitor 1 s, a slot at
# a time), 35 s on a machine loaded by two labs and more; the bound leaves room for that,
# and is what a move that never converges costs the suite.
MOVE_TIMEOUT = "2m"


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Patient probes: a slow `docker ps` on a loaded machine says nothing about a move."""
    return patient_md


def web_on(fleet: Fleet, md: Minidock, host: str) -> list[str]:
    """The web containers on a host that run (docker exec: cheaper than `status`)."""
    return [c for c in md.containers(host) if c.startswith("web.") and c.endswith(" running")]


@pytest.mark.parametrize(
    ("order", "replicas"),
    [
        pytest.param("stop-first", 2, id="2-stop-first"),
        pytest.param("start-first", 2, id="2-start-first"),
        pytest.param("stop-first", 1, id="1-stop-first"),
    ],
)
def test_a_routed_service_moved_by_a_constraint_change_converges_failing_no_request(
    fleet: Fleet, md: Minidock, order: str, replicas: int
) -> None:
    apply(md, spec(on=SOURCE, replicas=replicas, order=order))
    source, target = (fleet.lab.host(h).private_address for h in (SOURCE, TARGET))
    assert [d.rpartition(":")[0] for d in upstreams(fleet, md)] == [source] * replicas
    moved = md.spec(spec(on=TARGET, replicas=replicas, order=order), "moved.toml")
    with paced_load(fleet) as load:
        started = time.monotonic()
        res = md("apply", str(moved), "--wait", "--timeout", MOVE_TIMEOUT, timeout=240)
        took = time.monotonic() - started
        time.sleep(1)
    failed = load.failed()
    kinds = Counter(f"{r.status} {r.text.strip()[:50]}" for r in failed).most_common(3)
    figures = (
        f"move {order} x{replicas}: apply --wait exit {res.returncode} after {took:.1f} s; "
        f"{len(failed)} of {len(load.replies)} requests failed {kinds}"
    )
    print(figures)
    if res.returncode != 0:
        drains, loads = (len(events(md, kind)) for kind in ("draining", "routes-loaded"))
        figures += f"; {drains} draining events, {loads} route loads"
        print(figures)
        status = md("status")
        detail = [res.stdout[-600:], res.stderr[-300:], status.stdout, *timeline(md)[-6:]]
        raise AssertionError("\n".join([figures, *detail]))
    assert web_on(fleet, md, SOURCE) == []
    assert len(web_on(fleet, md, TARGET)) == replicas
    assert [d.rpartition(":")[0] for d in upstreams(fleet, md)] == [target] * replicas
    assert_no_failure(load, fleet, md)
    assert load.bodies() == {"web 5\n"}
    print(f"{figures}; {latency(load)}")
