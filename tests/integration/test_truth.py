"""Operator truth on the lab fleet (issue 27): exit codes decided from what can progress,
causes carried to the top, `forget` that probes first, interrupts that lose no event."""

from __future__ import annotations

from tests.integration.conftest import Fleet, Minidock

HEALTH = """
[services.{name}.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "1s"
retries = 2
"""

WEB_AND_API = (
    """
[services.web]
image = "minidock-lab/web:5"
replicas = 3
ports = ["8080:8080"]
constraints = ["zone != c"]
"""
    + HEALTH.format(name="web")
    + """
[services.api]
image = "minidock-lab/web:5"
replicas = 3
depends_on = ["web"]
constraints = ["zone != c"]
"""
    + HEALTH.format(name="api")
)


def test_a_paused_host_that_leaves_nothing_able_to_progress_exits_4_every_pass(
    md: Minidock, fleet: Fleet
) -> None:
    """The issue's outage: host2 paused; web.2 fits nowhere (8080 is taken on host1 and
    host3, host4 is zone c), so web is never all healthy and api.2 never starts. Nothing
    can progress: once host2 is down every pass exits 4 (it exited 3 for ever)."""
    res = md("apply", str(md.spec(WEB_AND_API)), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    fleet.kill("host2", "pause")
    first = md("reconcile")
    assert first.returncode == 3, first.stderr  # one failed probe of down_after = 2
    assert "host2: unreachable (1/2 failed probes)" in first.stderr
    passes = [md("reconcile") for _ in range(3)]
    assert [p.returncode for p in passes] == [4, 4, 4], [p.stderr for p in passes]
    line = passes[-1].stderr
    assert line.startswith("minidock: degraded: host2 down; web.2 pending; api.2 pending on web")
    assert line.count("\n") == 1, line
    status = md.status()
    assert {s["name"]: s["state"] for s in status["services"]}["web"] == "degraded"
