"""Hooks (issue 25): `hooks.before_update` on the real lab fleet, through the real command
line: a migration-like hook that writes a marker runs once per generation, before the
first task of it (on the first apply too), and not again on a pass or an unchanged apply;
a failing hook pauses the rollout, its masked output in the event; a controller killed -9
while the hook runs does not start it a second time, and the next passes read it; a hook
past its timeout is removed and pauses the rollout."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import pytest

from minidock.lab.images import WEB5_IMAGE, WEB6_IMAGE
from tests.integration.conftest import Fleet, Minidock


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Hooks are not about host loss: probes patient beside a loaded engine."""
    return patient_md


TOKEN = "tok-h25-5e7f"


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def spec(image: str, marks: str, script: str, extra: str = "", timeout: str = "1m") -> str:
    """A web service whose hook runs `script` with the marker directory at /marks."""
    return f"""
[services.web]
image = "{image}"
replicas = 1
volumes = ["{marks}:/marks"]
secrets = {{ TOKEN = {{ file = "token" }} }}
update = {{ monitor = "1s" }}
{extra}
[services.web.hooks.before_update]
command = ["sh", "-c", {json.dumps(script)}]
timeout = "{timeout}"
"""


def marks(fleet: Fleet, where: str) -> list[str]:
    """Every line the hooks wrote to the marker file, on every host."""
    lines = []
    for h in fleet.hosts:
        found = fleet.exec(h, "cat", f"{where}/ran")
        lines += found.stdout.split() if found.returncode == 0 else []
    return lines


def events(md: Minidock) -> list[dict[str, Any]]:
    return list(json.loads(ok(md("events", "--json"))))


def hooks_left(fleet: Fleet, md: Minidock) -> list[str]:
    return [line for h in fleet.hosts for line in md.containers(h) if ".hook." in line]


def wait_for(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def setup(md: Minidock) -> str:
    token = md.workdir / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return f"/tmp/marks-{uuid.uuid4().hex[:8]}"


def test_a_hook_runs_once_per_generation_first_and_its_failure_pauses_the_rollout_masked(
    md: Minidock, fleet: Fleet
) -> None:
    where = setup(md)
    migrate = "echo migrating; echo $MIGRATION >> /marks/ran"
    first = spec(WEB5_IMAGE, where, migrate, 'env = { MIGRATION = "m1" }')
    ok(md("apply", str(md.spec(first)), "--wait", "--timeout", "60s"))
    assert marks(fleet, where) == ["m1"]  # on the very first apply, before any task
    kinds = [e["kind"] for e in events(md)]
    assert kinds.index("hook-succeeded") < kinds.index("run"), kinds

    second = spec(WEB6_IMAGE, where, migrate, 'env = { MIGRATION = "m2" }')
    ok(md("apply", str(md.spec(second)), "--wait", "--timeout", "60s"))
    ok(md("apply", str(md.spec(second)), "--wait", "--timeout", "60s"))  # unchanged: no hook
    ok(md("reconcile"))
    assert marks(fleet, where) == ["m1", "m2"]  # once per generation
    said = events(md)
    new = [i for i, e in enumerate(said) if e["kind"] == "run" and "web:6" in e["message"]]
    ran = [i for i, e in enumerate(said) if e["kind"] == "hook-succeeded"]
    assert len(ran) == 2, [e["kind"] for e in said]
    assert ran[1] < new[0], [e["kind"] for e in said]
    assert hooks_left(fleet, md) == []

    failing = spec(WEB5_IMAGE, where, "echo migration refused for $TOKEN; exit 3")
    res = md("apply", str(md.spec(failing)), "--wait", "--timeout", "60s")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "web rollout paused" in res.stderr, res.stderr
    (paused,) = [e for e in events(md) if e["kind"] == "rollout-paused"]
    assert "failed (exit 3): migration refused for ***" in paused["message"], paused
    assert TOKEN not in json.dumps(events(md)) + res.stdout + res.stderr
    doc = md.status()
    assert {t["image"] for t in doc["tasks"]} == {WEB6_IMAGE}  # no task of the new spec
    assert hooks_left(fleet, md) == []


def test_a_controller_killed_while_its_hook_runs_never_starts_it_twice(
    md: Minidock, fleet: Fleet
) -> None:
    where = setup(md)
    first = spec(WEB5_IMAGE, where, "echo run >> /marks/ran")
    ok(md("apply", str(md.spec(first)), "--wait", "--timeout", "60s"))
    gate = "echo run >> /marks/ran; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo migrated"
    update = md.spec(spec(WEB6_IMAGE, where, gate))
    applying = md.popen("apply", str(update), "--wait", "--timeout", "60s")
    wait_for("the hook to run", lambda: any(" running" in h for h in hooks_left(fleet, md)))
    applying.kill()  # kill -9 while the hook runs
    applying.communicate(timeout=10)

    res = md("reconcile")  # the hook is found by its label, waited for, not started again
    assert res.returncode == 3, res.stdout + res.stderr
    (running,) = hooks_left(fleet, md)
    plan = md("plan", str(update))
    assert "before_update hook" in plan.stdout + plan.stderr, plan.stdout + plan.stderr
    doc = md.status()
    assert any("before_update hook" in w for w in doc["waiting"]), doc["waiting"]
    assert doc["services"][0]["hook"]["state"] == "running"
    host = next(h for h in fleet.hosts if any(".hook." in c for c in md.containers(h)))
    ok(fleet.docker(host, "exec", running.split()[0], "sh", "-c", ": > /tmp/go"))
    wait_for("the hook to end", lambda: any(" exited" in h for h in hooks_left(fleet, md)))

    ok(md("apply", str(update), "--wait", "--timeout", "60s"))  # reads it: no second run
    assert marks(fleet, where) == ["run", "run"]  # the first generation's, and this one's
    kinds = [e["kind"] for e in events(md)]
    assert (kinds.count("hook-started"), kinds.count("hook-succeeded")) == (2, 2), kinds
    assert {t["image"] for t in md.status()["tasks"]} == {WEB6_IMAGE}
    assert hooks_left(fleet, md) == []

    hanging = spec(WEB5_IMAGE, where, "sleep 120", timeout="3s")  # past its timeout: failed
    res = md("apply", str(md.spec(hanging)), "--wait", "--timeout", "60s")
    assert res.returncode == 1, res.stdout + res.stderr
    (paused,) = [e for e in events(md) if e["kind"] == "rollout-paused"]
    assert "timed out after 3s" in paused["message"], paused
    assert hooks_left(fleet, md) == []  # removed, which killed it
    assert {t["image"] for t in md.status()["tasks"]} == {WEB6_IMAGE}
