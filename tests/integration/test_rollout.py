"""Rolling updates on the real lab fleet, driven by the real CLI (issue 4).

Each test reads the hosts themselves (docker exec on every host) as well as `status
--json`; the health check and monitor are short (1 s) to keep the file fast.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.conftest import Fleet, Minidock

WEB5, WEB6 = "minidock-lab/web:5", "minidock-lab/web:6"
BROKEN = "minidock-lab/web:broken"
REPLICAS, PARALLELISM = 4, 1


def spec(image: str, *, failure_action: str = "rollback", replicas: int = REPLICAS) -> str:
    """The web service; its health check's 5 s timeout gives a loaded machine room (CI saw a
    1 s one time out and roll a good update back), and web:broken still fails at once:
    nothing listens, so wget is refused."""
    return f"""
[services.web]
image = "{image}"
replicas = {replicas}

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 2

[services.web.update]
parallelism = {PARALLELISM}
monitor = "1s"
failure_action = "{failure_action}"
"""


@dataclass(frozen=True)
class Task:
    host: str
    name: str
    image: str
    status: str  # docker ps "Status", e.g. "Up 3 seconds (healthy)"

    @property
    def slot(self) -> int:
        return int(self.name.split(".")[1])

    @property
    def healthy(self) -> bool:
        return self.status.startswith("Up") and "(healthy)" in self.status


def tasks(md: Minidock, fleet: Fleet) -> list[Task]:
    """Every running container of the test cluster, read on all hosts at once."""

    def one(host: str) -> list[Task]:
        res = fleet.docker(
            host,
            "ps",
            "--filter",
            f"label=minidock.cluster={md.cluster}",
            "--format",
            "{{.Names}}|{{.Image}}|{{.Status}}",
        )
        assert res.returncode == 0, res.stderr
        rows = [line.split("|", 2) for line in res.stdout.splitlines() if line.strip()]
        return [Task(host, name, image, status) for name, image, status in rows]

    with ThreadPoolExecutor(len(fleet.hosts)) as pool:
        return [t for found in pool.map(one, fleet.hosts) for t in found]


def images(md: Minidock, fleet: Fleet) -> list[str]:
    return sorted(t.image for t in tasks(md, fleet))


def apply(md: Minidock, body: str, name: str = "cluster.toml") -> Any:
    return md("apply", str(md.spec(body, name)), "--wait", "--timeout", "90s")


def deploy(md: Minidock, fleet: Fleet, image: str, **kw: Any) -> None:
    res = apply(md, spec(image, **kw), "base.toml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert images(md, fleet) == [image] * kw.get("replicas", REPLICAS)


def web(doc: dict[str, Any]) -> dict[str, Any]:
    (svc,) = [s for s in doc["services"] if s["name"] == "web"]
    found: dict[str, Any] = svc
    return found


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Patient probes: a rollout test counts starts, and a host marked down by two slow
    probes on a loaded machine would add a replacement the rollout did not make."""
    return patient_md


# -- the rollout -------------------------------------------------------------------------------
def test_web5_to_web6_keeps_replicas_minus_parallelism_healthy(md: Minidock, fleet: Fleet) -> None:
    deploy(md, fleet, WEB5)
    proc = md.popen("apply", str(md.spec(spec(WEB6))), "--wait", "--timeout", "120s")
    samples: list[list[Task]] = []
    try:
        while proc.poll() is None:
            samples.append(tasks(md, fleet))
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    samples.append(tasks(md, fleet))

    floor = REPLICAS - PARALLELISM
    for sample in samples:
        healthy = {t.slot for t in sample if t.healthy}
        assert len(healthy) >= floor, sample
    mixed = [s for s in samples if {t.image for t in s if t.healthy} == {WEB5, WEB6}]
    assert len(samples) >= 5, samples
    assert mixed, "no sample fell inside the rollout"

    final = tasks(md, fleet)
    assert sorted(t.image for t in final) == [WEB6] * REPLICAS
    assert sorted(t.slot for t in final) == [1, 2, 3, 4]
    doc = md.status()
    svc = web(doc)
    assert svc["state"] == "converged"
    assert svc["rollout"] == {
        "status": "completed",
        "done": REPLICAS,
        "total": REPLICAS,
        "failures": 0,
        "reason": "",
        "canary": None,
    }
    assert {t["generation"] for t in doc["tasks"]} == {2}
    # one slot at a time: the hosts' own record of starts, one new task per batch
    starts = [line for line in out.splitlines() if line.startswith("started web.")]
    assert len(starts) == REPLICAS, out


def test_broken_update_rolls_back_to_web6_and_status_says_why(md: Minidock, fleet: Fleet) -> None:
    deploy(md, fleet, WEB6)
    res = apply(md, spec(BROKEN))
    assert res.returncode == 1, res.stdout + res.stderr  # converged, but the update failed
    assert "web: rolled back: task " in res.stderr
    assert images(md, fleet) == [WEB6] * REPLICAS
    assert "rollout-rollback" in res.stdout, res.stdout
    doc = md.status()
    svc = web(doc)
    assert svc["image"] == WEB6
    assert svc["rollout"]["status"] == "rolled_back"
    reason = svc["rollout"]["reason"]
    assert reason.startswith("rolled back: task "), reason
    assert "unhealthy" in reason, reason
    assert "wget" in reason, reason  # the health command's own last output
    assert svc["last_failure"] == reason
    assert {t["generation"] for t in doc["tasks"]} == {1}
    text = md("status")
    assert text.returncode == 0
    assert "rolled_back" in text.stdout
    assert f"web: last failure: {reason}" in text.stdout
    broken_runs = [line for line in res.stdout.splitlines() if line.startswith("started ")]
    assert len([line for line in broken_runs if BROKEN in line]) == 1, res.stdout


def test_broken_update_with_pause_stops_after_the_first_batch(md: Minidock, fleet: Fleet) -> None:
    deploy(md, fleet, WEB6, failure_action="pause")
    res = apply(md, spec(BROKEN, failure_action="pause"))
    assert res.returncode == 1, res.stdout + res.stderr
    started = [line for line in res.stdout.splitlines() if line.startswith("started ")]
    assert len([line for line in started if BROKEN in line]) == 1, res.stdout
    # apply --wait returns once the failed slot is back on the old spec, not with it empty
    assert images(md, fleet) == [WEB6] * REPLICAS, res.stdout
    svc = web(md.status())
    assert svc["state"] == "paused"
    assert svc["rollout"]["status"] == "paused"
    assert (svc["rollout"]["failures"], svc["rollout"]["done"]) == (1, 0)
    assert "unhealthy" in svc["last_failure"]
    assert "wget" in svc["last_failure"]
    # nothing moves on while paused: a later pass starts nothing and still exits 1
    again = md("reconcile")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "started " not in again.stdout
    final = tasks(md, fleet)
    assert sorted(t.image for t in final) == [WEB6] * REPLICAS
    assert sorted(t.slot for t in final) == [1, 2, 3, 4]
    svc = web(md.status())
    assert svc["rollout"]["status"] == "paused"
    assert "paused" in md("status").stdout


def test_a_rollout_is_driven_to_completion_by_reconcile_runs_only_then_rolled_back(
    md: Minidock, fleet: Fleet
) -> None:
    n = 3
    deploy(md, fleet, WEB5, replicas=n)
    first = md("apply", str(md.spec(spec(WEB6, replicas=n))))  # one pass, no --wait
    assert first.returncode == 3, first.stdout + first.stderr
    assert images(md, fleet).count(WEB6) <= PARALLELISM
    runs: list[tuple[int, int]] = []  # (exit code, web:6 tasks started) per cron-like run
    for _ in range(80):
        res = md("reconcile")
        assert res.returncode in (0, 3), res.stdout + res.stderr
        started = [line for line in res.stdout.splitlines() if line.startswith("started ")]
        assert all(WEB6 in line for line in started), res.stdout
        runs.append((res.returncode, len(started)))
        if res.returncode == 0:
            break
        time.sleep(0.3)
    assert runs[-1][0] == 0, runs
    assert sum(n for _, n in runs) == n - 1, runs  # the apply's pass started one
    assert max(n for _, n in runs) == PARALLELISM, runs  # one batch per run at most
    assert images(md, fleet) == [WEB6] * n
    svc = web(md.status())
    assert (svc["rollout"]["status"], svc["rollout"]["done"]) == ("completed", n)
    quiet = md("reconcile")
    assert (quiet.returncode, quiet.stdout) == (0, "")  # a converged pass stays quiet

    # and `minidock rollback` by hand goes back to the previous generation, the same way
    res = md("rollback", "web", "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert images(md, fleet) == [WEB5] * n
    doc = md.status()
    svc = web(doc)
    assert svc["rollout"]["status"] == "rolled_back"
    assert svc["last_failure"] == "rolled back by the operator"
    assert Counter(t["generation"] for t in doc["tasks"]) == Counter({1: n})


def test_a_controller_killed_mid_rollout_resumes_with_reconcile(md: Minidock, fleet: Fleet) -> None:
    deploy(md, fleet, WEB5)
    proc = md.popen("apply", str(md.spec(spec(WEB6))), "--wait", "--timeout", "120s")
    try:
        deadline = time.monotonic() + 60
        while WEB6 not in {t.image for t in tasks(md, fleet) if t.healthy}:
            assert time.monotonic() < deadline, "the rollout never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)  # mid-rollout, at whatever point of a pass
    finally:
        proc.communicate(timeout=30)
    assert WEB5 in images(md, fleet)  # really cut short
    for _ in range(80):
        res = md("reconcile")
        assert res.returncode in (0, 3), res.stdout + res.stderr
        sample = tasks(md, fleet)
        assert len({t.slot for t in sample if t.healthy}) >= REPLICAS - PARALLELISM, sample
        if res.returncode == 0:
            break
        time.sleep(0.3)
    final = tasks(md, fleet)
    assert sorted(t.image for t in final) == [WEB6] * REPLICAS
    assert sorted(t.slot for t in final) == [1, 2, 3, 4]  # one task per slot, none lost
    assert web(md.status())["rollout"]["status"] == "completed"


def test_a_host_lost_mid_rollout_resumes_and_ends_with_one_task_per_slot(
    md: Minidock, fleet: Fleet
) -> None:
    deploy(md, fleet, WEB5)
    res = md("apply", str(md.spec(spec(WEB6))))  # one pass: the first replacement starts
    assert res.returncode == 3, res.stdout + res.stderr
    (started,) = [line for line in res.stdout.splitlines() if line.startswith("started web.")]
    lost = started.split(" on ")[1].split()[0]
    fleet.kill(lost, "stop")  # the host with the in-flight new task goes away
    alive = [h for h in fleet.hosts if h != lost]
    try:
        for _ in range(80):
            res = md("reconcile")
            assert res.returncode in (0, 3, 4), res.stdout + res.stderr
            if res.returncode in (0, 4):  # 4: settled, degraded by the host that is down
                break
            time.sleep(0.3)
        running = [
            line.split()[0] for h in alive for line in md.containers(h) if line.endswith("running")
        ]
        assert sorted(int(n.split(".")[1]) for n in running) == [1, 2, 3, 4], running
        doc = md.status()
        assert {t["image"] for t in doc["tasks"] if t["state"] == "running"} == {WEB6}
        assert web(doc)["rollout"]["status"] == "completed"
    finally:
        fleet.revive(lost)
    for _ in range(40):  # the host is back: its stale task goes, nothing doubles
        if md("reconcile").returncode == 0:
            break
        time.sleep(0.3)
    final = tasks(md, fleet)
    assert sorted(t.slot for t in final) == [1, 2, 3, 4]
    assert {t.image for t in final} == {WEB6}


def test_a_nonexistent_image_tag_stops_no_old_task(md: Minidock, fleet: Fleet) -> None:
    deploy(md, fleet, WEB6, failure_action="pause")
    before = sorted(t.name for t in tasks(md, fleet))
    missing = "minidock-lab/web:does-not-exist"
    res = apply(md, spec(missing, failure_action="pause"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "cannot be pulled" in res.stderr, res.stderr
    assert sorted(t.name for t in tasks(md, fleet)) == before  # not one task stopped
    svc = web(md.status())
    assert svc["state"] == "paused"
    assert missing in svc["last_failure"]
    assert "cannot be pulled" in svc["last_failure"]
    assert md("reconcile").returncode == 1
    assert sorted(t.name for t in tasks(md, fleet)) == before


@pytest.mark.parametrize("order", ["start-first"])
def test_start_first_with_a_held_host_port_falls_back_and_says_so(
    md: Minidock, fleet: Fleet, order: str
) -> None:
    body = spec(WEB5, replicas=len(fleet.hosts)).replace(
        "[services.web.health]", 'ports = ["18080:8080"]\n\n[services.web.health]'
    )
    body = body.replace('monitor = "1s"', f'monitor = "1s"\norder = "{order}"')
    assert apply(md, body, "base.toml").returncode == 0
    res = apply(md, body.replace(WEB5, WEB6))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "host port held by the old task, replacing stop-first" in res.stdout, res.stdout
    assert images(md, fleet) == [WEB6] * len(fleet.hosts)
