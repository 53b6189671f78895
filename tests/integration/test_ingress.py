"""The ingress on the lab fleet (docs/ingress.md): a real Caddy proxy on the ingress host,
routes loaded from the reconcile, and request-level zero downtime, measured with a load
generator that records every response through the host's published port 80."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from minidock.commands.caddy import AUTOSAVE, proxy_name
from tests.caddyview import front
from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import H2Load, Load, Paced, get

pytestmark = pytest.mark.integration

WEB5, WEB6 = "minidock-lab/web:5", "minidock-lab/web:6"
DOMAIN = "app.test"
EDGE = "host1"


def spec(image: str = WEB5, *, order: str = "stop-first", replicas: int = 3, on: str = "") -> str:
    """The routed service `web` behind the edge's proxy (on host `on` only, if given)."""
    placed = f'constraints = ["host == {on}"]\n' if on else ""
    return f"""
[ingress]
hosts = ["{EDGE}"]

[services.web]
image = "{image}"
replicas = {replicas}
{placed}ingress = {{ host = "{DOMAIN}", port = 8080 }}
drain_timeout = "1s"

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3

[services.web.update]
parallelism = 1
monitor = "1s"
order = "{order}"
"""


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Patient probes: a slow `docker ps` on a loaded machine says nothing about traffic."""
    return patient_md


def http_port(fleet: Fleet, host: str = EDGE) -> int:
    return fleet.lab.host(host).http_port


# Each of the 4 clients waits this long between two requests: any window longer than it
# and one request's time (10 ms quiet) meets a request from every client; at most about
# 110 requests a second in all (4 / 35 ms). Unpaced they took 260 a second on a quiet lab
# and more than one core of the two, starving the other worker (docs/testing.md
# "Suite time").
LOAD_PAUSE = 0.025


def paced_load(fleet: Fleet) -> Load:
    """The load generator on the edge's published port 80, paced (LOAD_PAUSE)."""
    return Load(http_port(fleet), DOMAIN, pause=LOAD_PAUSE)


def loaded(fleet: Fleet, md: Minidock) -> dict[str, Any]:
    """The config the edge's proxy has loaded (its autosave), read with docker exec."""
    out = fleet.docker(EDGE, "exec", proxy_name(md.cluster), "cat", AUTOSAVE, check=True)
    document: dict[str, Any] = json.loads(out.stdout)
    return document


def upstreams(fleet: Fleet, md: Minidock) -> list[str]:
    """The upstreams the edge's loaded routes send to, each hand-off to a route's own
    server resolved (tests/caddyview.py)."""
    routes = front(loaded(fleet, md))["routes"]
    return sorted(u["dial"] for r in routes for h in r["handle"] for u in h.get("upstreams", []))


def apply(md: Minidock, body: str, *args: str) -> None:
    """`apply --wait`, then cron passes while a loaded machine's probes time out."""
    res = md("apply", str(md.spec(body)), "--wait", "--timeout", "3m", *args, timeout=240)
    if res.returncode != 0:
        converge(md)


def events(md: Minidock, kind: str) -> list[str]:
    res = md("events", "--json", "--limit", "2000")
    assert res.returncode == 0, res.stderr
    document = json.loads(res.stdout)
    found = document["events"] if isinstance(document, dict) else document
    return [e["message"] for e in found if e["kind"] == kind]


def test_routes_are_the_healthy_tasks_and_load_only_when_they_change(
    fleet: Fleet, md: Minidock
) -> None:
    apply(md, spec())
    hosts = {t["host"] for t in md.tasks("web")}
    addresses = {fleet.lab.host(h).private_address for h in hosts}
    dials = upstreams(fleet, md)
    assert len(dials) == 3
    assert {d.rpartition(":")[0] for d in dials} == addresses
    with paced_load(fleet) as load:
        time.sleep(2)
    assert load.replies
    assert load.failed() == []
    assert load.bodies() == {"web 5\n"}
    loads = len(events(md, "routes-loaded"))
    res = md("reconcile")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(events(md, "routes-loaded")) == loads  # nothing changed: nothing loaded
    planned = md("plan", str(md.spec(spec(replicas=2), "fewer.toml")))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert f"routes on {EDGE}: load\n  ~ {DOMAIN}/: -" in planned.stdout  # slot 3 drains first


def test_an_unknown_host_name_gets_no_route(fleet: Fleet, md: Minidock) -> None:
    apply(md, spec(replicas=1))
    import asyncio

    reply = asyncio.run(get(http_port(fleet), "other.test"))
    assert (reply.status, reply.text) == (404, "no route\n")


def converge(md: Minidock, passes: int = 60, ok: tuple[int, ...] = (0,)) -> int:
    """Cron's way: `reconcile` until it exits with one of `ok` (0 converged)."""
    code = -1
    for _ in range(passes):
        code = md("reconcile").returncode
        if code in ok:
            return code
        time.sleep(0.5)
    raise AssertionError(f"not converged after {passes} passes (last exit {code})")


def assert_no_failure(load: Load | H2Load | Paced, fleet: Fleet, md: Minidock) -> None:
    """No request failed; if one did, the message carries the edge proxy's own errors."""
    failed = load.failed()
    assert load.replies, "the load generator sent nothing"
    if failed:
        log = fleet.docker(EDGE, "logs", "--tail", "400", proxy_name(md.cluster))
        lines = (log.stdout + log.stderr).splitlines()
        errors = [line for line in lines if '"error"' in line][-10:]
        loads = [line[:120] for line in lines if '"load complete"' in line][-10:]
        at = [f"{wall_clock(r.started):.3f} {r.status} {r.text[:80]!r}" for r in failed[:5]]
        detail = "\n".join([*errors, "failed at:", *at, "loads:", *loads, "events:", *timeline(md)])
        raise AssertionError(f"{len(failed)} of {len(load.replies)} failed: {failed[:5]}\n{detail}")


def wall_clock(monotonic: float) -> float:
    """A time.monotonic() reading as a Unix time, to set beside the proxy's log and the
    events."""
    return time.time() - time.monotonic() + monotonic


def timeline(md: Minidock) -> list[str]:
    """The last events that change routes or hosts, with their times (to set beside the
    proxy's own log when a request failed)."""
    res = md("events", "--json", "--limit", "2000")
    document = json.loads(res.stdout) if res.returncode == 0 else {"events": []}
    found = document["events"] if isinstance(document, dict) else document
    kinds = {"routes-loaded", "host-down", "host-up", "draining", "proxy-started"}
    return [f"{e.get('at')} {e['kind']} {e['message']}" for e in found if e["kind"] in kinds][-15:]


def latency(load: Load | H2Load | Paced) -> str:
    times = sorted(r.seconds for r in load.replies)
    p99 = times[int(len(times) * 0.99) - 1] if len(times) >= 100 else times[-1]
    p50, top = times[len(times) // 2], times[-1]
    return f"{len(times)} requests, p50 {p50:.3f}s p99 {p99:.3f}s max {top:.3f}s"


@pytest.mark.parametrize("order", ["stop-first", "start-first"])
def test_a_rolling_update_fails_no_request(fleet: Fleet, md: Minidock, order: str) -> None:
    apply(md, spec(order=order))
    with paced_load(fleet) as load:
        apply(md, spec(WEB6, order=order))
        time.sleep(1)
    assert_no_failure(load, fleet, md)
    assert load.bodies() == {"web 5\n", "web 6\n"}
    assert {t["image"] for t in md.tasks("web")} == {WEB6}
    assert events(md, "draining")  # each replaced task left the routes first
    print(f"rolling update ({order}): {latency(load)}")


def test_a_drain_then_a_rebalance_fail_no_request(fleet: Fleet, md: Minidock) -> None:
    """Four tasks on four hosts; the drain moves the victim's task onto a host that has one
    (two there), and once the victim is active again the rebalance moves one back."""
    apply(md, spec(replicas=4))
    victim = next(t["host"] for t in md.tasks("web") if t["host"] != EDGE)
    with paced_load(fleet) as load:
        if md("drain", victim, timeout=240).returncode != 0:
            converge(md)  # the drain is recorded; passes finish it
        assert victim not in {t["host"] for t in md.tasks("web")}
        assert md("activate", victim).returncode == 0
        res = md("rebalance", "web", "--timeout", "3m", timeout=240)
        if res.returncode != 0:
            converge(md)
        time.sleep(1)
    assert_no_failure(load, fleet, md)
    assert sorted(t["host"] for t in md.tasks("web")) == sorted(fleet.hosts)  # one each again
    assert len(upstreams(fleet, md)) == 4
    print(f"drain and rebalance: {latency(load)}")


def test_scaling_down_and_up_fails_no_request(fleet: Fleet, md: Minidock) -> None:
    apply(md, spec())
    with paced_load(fleet) as load:
        for count in (1, 3):
            if md("scale", f"web={count}", "--wait", timeout=240).returncode != 0:
                converge(md)
            assert len(md.tasks("web")) == count
            assert len(upstreams(fleet, md)) == count
        time.sleep(1)
    assert_no_failure(load, fleet, md)
    print(f"scale 3 -> 1 -> 3: {latency(load)}")


@pytest.mark.parametrize("mode", ["stop", "pause"])
def test_a_lost_host_fails_no_request(fleet: Fleet, md: Minidock, mode: str) -> None:
    apply(md, spec())
    victim = next(t["host"] for t in md.tasks("web") if t["host"] != EDGE)
    with paced_load(fleet) as load:
        fleet.kill(victim, mode)  # type: ignore[arg-type]
        converge(md, ok=(4,))  # degraded: the host is down, its task replaced elsewhere
        fleet.revive(victim)
        converge(md)
        time.sleep(1)
    assert_no_failure(load, fleet, md)
    assert len(md.tasks("web")) == 3
    print(f"host {mode}: {latency(load)}")


def test_a_controller_killed_mid_update_fails_no_request(fleet: Fleet, md: Minidock) -> None:
    apply(md, spec())
    with paced_load(fleet) as load:
        proc = md.popen("apply", str(md.spec(spec(WEB6))), "--wait", "--timeout", "3m")
        for _ in range(600):  # mid-update: the first old task draining
            if events(md, "draining") or proc.poll() is not None:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)  # reaped, its pipes closed
        converge(md)
        time.sleep(1)
    assert_no_failure(load, fleet, md)
    assert {t["image"] for t in md.tasks("web")} == {WEB6}
    print(f"kill -9 mid-update: {latency(load)}")
