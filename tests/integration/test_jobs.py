"""Jobs (issue 25) on the real lab fleet, through the real command line: `minidock run`'s
output (secrets masked), exit status, placement, interrupts and kill -9 (the next pass
removes the finished one-off and never counts it), and `-it` on a PTY."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock, on_terminal


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Jobs are not about host loss: probes patient beside a loaded engine."""
    return patient_md


TOKEN = "tok-9a8b7c"
SERVICE = f"""
[services.web]
image = "{WEB5_IMAGE}"
ports = ["8080:8080"]
env = {{ MODE = "prod" }}
secrets = {{ TOKEN = {{ file = "token" }} }}
"""


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def oneoffs(fleet: Fleet, md: Minidock, kind: str = ".run.") -> dict[str, list[str]]:
    """Each host's one-off containers of the cluster (`minidock run`'s, or a job's runs with
    ".job."), as "NAME STATE"."""
    return {h: [line for line in md.containers(h) if kind in line.split()[0]] for h in fleet.hosts}


def wait_for(what: str, check: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (callable(check) and check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


# the lab images' entrypoint runs the command in the background (stdin /dev/null): a
# console's one-off needs the command itself, under docker's init
CONSOLE = f"""
[services.console]
image = "{WEB5_IMAGE}"
entrypoint = []
command = ["sleep", "600"]
init = true
"""


def applied(md: Minidock, body: str = SERVICE) -> Minidock:
    token = md.workdir / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    ok(md("apply", str(md.spec(body)), "--wait", "--timeout", "60s"))
    return md


def test_run_streams_masked_output_passes_the_exit_status_and_leaves_nothing(
    md: Minidock, fleet: Fleet
) -> None:
    applied(md)
    script = "echo $TOKEN $MODE $EXTRA; echo to stderr >&2; exit 7"
    res = md("run", "web", "--env", "EXTRA=x", "--env", "MODE=debug", "--", "sh", "-c", script)
    assert (res.returncode, res.stdout) == (7, "*** debug x\n"), res.stderr
    assert "to stderr" in res.stderr
    assert TOKEN not in res.stderr
    assert all(not found for found in oneoffs(fleet, md).values())
    # the service's host port stays its task's: the one-off publishes nothing (host1 holds it)
    task_host = md.tasks("web")[0]["host"]
    assert ok(md("run", "web", "--host", task_host, "--", "true")) == ""
    bad = md("run", "web", "--host", "nohost", "--", "true")
    assert bad.returncode == 2
    assert "unknown host 'nohost'" in bad.stderr
    assert md("run", "nosuch", "--", "true").returncode == 2


def interrupted_and_killed_runs(md: Minidock, fleet: Fleet) -> None:
    """An interrupted run is removed at once; a killed one is kept while it runs and removed
    by the next pass after it ends, never counted as a task."""
    applied(md)
    host = fleet.hosts[-1]
    running = md.popen("run", "web", "--host", host, "--", "sleep", "120")
    wait_for("the one-off to run", lambda: any("running" in o for o in oneoffs(fleet, md)[host]))
    running.send_signal(signal.SIGINT)
    _, errors = running.communicate(timeout=60)
    assert running.returncode == 130, errors
    assert "interrupted: web.run." in errors
    assert oneoffs(fleet, md)[host] == []

    gate = "while [ ! -e /tmp/go ]; do sleep 0.2; done; exit 3"  # ends when told to
    killed = md.popen("run", "web", "--host", host, "--", "sh", "-c", gate)
    wait_for("the one-off to run", lambda: any("running" in o for o in oneoffs(fleet, md)[host]))
    killed.kill()
    killed.communicate(timeout=10)
    pass_while_it_runs = md("reconcile")
    assert pass_while_it_runs.returncode == 0, pass_while_it_runs.stderr
    (left,) = oneoffs(fleet, md)[host]  # a running one-off is its runner's: kept
    assert left.endswith(" running")
    ok(fleet.docker(host, "exec", left.split()[0], "sh", "-c", ": > /tmp/go"))
    wait_for("the one-off to end", lambda: any("exited" in o for o in oneoffs(fleet, md)[host]))
    doc = md.status()
    assert [(s["running"], s["replicas"]) for s in doc["services"]] == [(1, 1)]
    assert len(doc["tasks"]) == 1  # never counted as a task
    ok(md("reconcile"))
    assert oneoffs(fleet, md)[host] == []
    events = json.loads(ok(md("events", "--json")))
    removed = [e for e in events if e["kind"] == "oneoff-removed"]
    assert [e["host"] for e in removed] == [host], removed
    ok(md("reconcile"))
    assert len(json.loads(ok(md("events", "--json")))) == len(events)


def test_run_it_runs_on_a_terminal(md: Minidock, fleet: Fleet) -> None:
    applied(md, CONSOLE)
    proc, output = on_terminal(
        ["run", "-it", "console", "--", "sh"], md.env(), b"tty; echo $((40 + 2)); exit 3\n", 60
    )
    assert proc.wait(timeout=30) == 3, output
    text = output.decode(errors="replace")
    assert "/dev/pts/" in text, text
    assert "42" in text, text
    assert all(not found for found in oneoffs(fleet, md).values())


# -- scheduled jobs ---------------------------------------------------------------------------
JOBS = f"""
[services.tick]
image = "{WEB5_IMAGE}"
entrypoint = []
command = ["sh", "-c", "echo tick $TOKEN"]
schedule = "* * * * *"
secrets = {{ TOKEN = {{ file = "token" }} }}

[services.broken]
image = "{WEB5_IMAGE}"
entrypoint = []
command = ["sh", "-c", "echo broken >&2; exit 3"]
schedule = "* * * * *"
timezone = "Europe/Paris"
"""


def test_a_scheduled_job_runs_at_its_time_beside_interrupted_and_killed_runs(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    """The jobs' cluster is armed first; its pass at the next minute runs in a thread while
    another cluster on the same hosts has its `minidock run`s interrupted and killed, so the
    wait for the minute (up to 60 s) overlaps them (docs/testing.md "Suite time")."""
    jobs = Minidock(fleet, tmp_path / "jobs", cluster="jobs", inventory=md.inventory)
    jobs.workdir.mkdir()
    boundary = armed(jobs, fleet)
    with ThreadPoolExecutor(1) as pool:
        at_time = pool.submit(pass_at, jobs, boundary)
        interrupted_and_killed_runs(md, fleet)
        at_time.result()
    ran_recorded_and_removed(jobs, fleet, boundary)


def armed(md: Minidock, fleet: Fleet) -> float:
    """Apply JOBS: its first pass arms both jobs for the next minute (no run for a time
    before the apply). Returns that minute."""
    applied(md, JOBS)
    assert all(not found for found in oneoffs(fleet, md, ".job.").values())
    jobs = {s["name"]: s["job"] for s in md.status()["services"]}
    boundary: float = jobs["tick"]["next"]
    assert jobs["tick"]["last"] is None
    assert boundary == jobs["broken"]["next"]
    assert boundary % 60 == 0
    return boundary


def pass_at(md: Minidock, boundary: float) -> None:
    """A pass at or after `boundary`: one run of each job."""
    wait_for("the next minute", lambda: time.time() >= boundary, timeout=70)
    started = md("reconcile")
    assert started.returncode in (0, 3), started.stderr


def ran_recorded_and_removed(md: Minidock, fleet: Fleet, boundary: float) -> None:
    """After the pass at `boundary`: the runs end, the next pass records them (the failure
    is exit 1), the one after removes their containers; status and events say so."""
    wait_for(
        "both runs to end",
        lambda: (
            sum("exited" in o for found in oneoffs(fleet, md, ".job.").values() for o in found) == 2
        ),
    )
    collected = md("reconcile")
    assert collected.returncode == 1, collected.stderr
    assert "broken last run failed (exit 3)" in collected.stderr
    # the pass that reads a run records it; the next removes its container, once on record
    removed = md("reconcile")
    assert removed.returncode == 1, removed.stderr
    assert "removed finished one-off" in removed.stdout
    assert all(not found for found in oneoffs(fleet, md, ".job.").values())
    doc = {s["name"]: s for s in md.status()["services"]}
    tick, broken = doc["tick"]["job"], doc["broken"]["job"]
    assert (tick["last"]["exit_code"], tick["last"]["tail"]) == (0, "tick ***")
    assert tick["last"]["due"] == boundary
    assert tick["next"] == boundary + 60
    assert (broken["failing"], broken["last"]["exit_code"], doc["broken"]["state"]) == (
        True, 3, "failed",
    )  # fmt: skip
    assert doc["tick"]["replicas"] == 0
    assert md.tasks() == []  # a run is never a task
    kinds = [e["kind"] for e in json.loads(ok(md("events", "--json")))]
    assert kinds.count("job-started") == 2
    assert (kinds.count("job-succeeded"), kinds.count("job-failed")) == (1, 1)
    assert TOKEN not in ok(md("events", "--json"))
    assert "tick: job '* * * * *' (UTC, forbid); last run" in ok(md("status"))
