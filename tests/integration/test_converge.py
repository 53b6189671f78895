"""Convergence on the real lab fleet: host loss, return, drain, crashes of the controller,
one writer. Every assertion reads the hosts themselves (docker exec) or the real CLI."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from minidock.store.directory import StateLock
from tests.integration.conftest import Fleet, Minidock

WORKERS = """
[services.route]
image = "minidock-lab/web:5"
replicas = 4
constraints = ["zone != c"]

[services.route.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""


def live_by_host(md: Minidock, fleet: Fleet, hosts: list[str]) -> dict[str, list[str]]:
    """Running containers of the test cluster per host, read inside each host."""
    out = {}
    for h in hosts:
        out[h] = [line.split()[0] for line in md.containers(h) if line.endswith("running")]
    return out


def slots_of(names: list[str]) -> Counter[int]:
    return Counter(int(n.split(".")[1]) for n in names)


def reconcile_until_converged(md: Minidock, passes: int = 15) -> list[str]:
    """Run `minidock reconcile` like cron would, until no pass can do more: exit 0, or 4
    (degraded: a host is down, all else runs); return what it printed."""
    printed: list[str] = []
    for _ in range(passes):
        res = md("reconcile")
        assert res.returncode in (0, 3, 4), res.stderr
        printed += res.stdout.splitlines()
        if res.returncode in (0, 4):
            return printed
        time.sleep(0.5)
    raise AssertionError(f"not converged after {passes} passes:\n" + "\n".join(printed))


def up(md: Minidock) -> None:
    res = md("apply", str(md.spec(WORKERS)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr


def test_lost_host_with_two_workers_gets_exactly_two_replacements(
    md: Minidock, fleet: Fleet
) -> None:
    up(md)
    eligible = ["host1", "host2", "host3"]  # host4 is zone c
    before = live_by_host(md, fleet, eligible)
    assert sum(len(v) for v in before.values()) == 4
    lost = next(h for h, names in before.items() if len(names) == 2)

    fleet.kill(lost, "stop")
    printed = reconcile_until_converged(md)
    # replacements are placements; a task restarted in place (a slow check) is not one
    started = [line for line in printed if line.startswith("started ") and "(place," in line]
    assert len(started) == 2, printed
    assert all(f" on {lost} " not in line for line in started)
    survivors = [h for h in eligible if h != lost]
    after = live_by_host(md, fleet, survivors)
    assert slots_of([n for v in after.values() for n in v]) == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    assert any(h["name"] == lost and h["state"] == "down" for h in md.status()["hosts"])

    fleet.revive(lost)
    printed = reconcile_until_converged(md)
    everywhere = live_by_host(md, fleet, eligible)
    assert slots_of([n for v in everywhere.values() for n in v]) == Counter(
        {1: 1, 2: 1, 3: 1, 4: 1}
    )
    assert md.containers(lost) == []  # its stale workers were stopped and removed
    assert any(line.startswith("host-up") for line in printed)


@pytest.mark.parametrize("mode", ["pause", "dockerd", "partition"])
def test_every_kind_of_host_loss_replaces_only_the_lost_tasks(
    md: Minidock, fleet: Fleet, mode: str
) -> None:
    up(md)
    eligible = ["host1", "host2", "host3"]
    before = live_by_host(md, fleet, eligible)
    lost = next(h for h, names in before.items() if len(names) == 1)

    fleet.kill(lost, mode)  # type: ignore[arg-type]
    first = md("reconcile")
    assert first.returncode == 3  # one failed probe: not down yet, nothing replaced
    assert "started" not in first.stdout
    printed = reconcile_until_converged(md)
    assert len([line for line in printed if line.startswith("started ")]) == 1
    fleet.revive(lost)
    reconcile_until_converged(md)
    everywhere = live_by_host(md, fleet, eligible)
    assert slots_of([n for v in everywhere.values() for n in v]) == Counter(
        {1: 1, 2: 1, 3: 1, 4: 1}
    )


def test_drain_never_dips_below_replicas_and_activate_takes_tasks_again(
    md: Minidock, fleet: Fleet
) -> None:
    up(md)
    eligible = ["host1", "host2", "host3"]
    target = next(h for h, names in live_by_host(md, fleet, eligible).items() if names)
    proc = md.popen("drain", target, "--timeout", "60s")
    samples = []
    while proc.poll() is None:
        healthy = 0
        for h in eligible:
            res = fleet.docker(
                h,
                "ps",
                "--filter",
                "label=minidock.cluster=itest",
                "--filter",
                "health=healthy",
                "-q",
            )
            healthy += len(res.stdout.split())
        samples.append(healthy)
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    assert samples
    assert min(samples) >= 4, samples
    assert md.containers(target) == []
    hosts = {h["name"]: h for h in md.status()["hosts"]}
    assert hosts[target]["drained"] is True

    res = md("activate", target)
    assert res.returncode == 0, res.stderr
    assert {h["name"]: h for h in md.status()["hosts"]}[target]["drained"] is False


def test_drain_of_an_unknown_host_lists_the_known_ones(md: Minidock) -> None:
    up(md)
    res = md("drain", "host9")
    assert res.returncode == 2
    assert "host1, host2, host3" in res.stderr
    assert "Traceback" not in res.stderr


def test_kill_9_during_apply_then_reconcile_loses_nothing_and_duplicates_nothing(
    md: Minidock, fleet: Fleet
) -> None:
    spec = md.spec(WORKERS)
    proc = md.popen("apply", str(spec), "--wait", "--timeout", "60s")
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "generation 1: ..." is printed after the commit
    assert line.startswith("generation 1"), line
    line = proc.stdout.readline()  # the first act has happened
    proc.send_signal(signal.SIGKILL)
    proc.communicate()

    reconcile_until_converged(md)
    everywhere = live_by_host(md, fleet, ["host1", "host2", "host3", "host4"])
    assert slots_of([n for v in everywhere.values() for n in v]) == Counter(
        {1: 1, 2: 1, 3: 1, 4: 1}
    )
    doc = md.status()
    assert doc["generation"] == 1
    assert [s["name"] for s in doc["services"]] == ["route"]
    assert md("reconcile").returncode == 0  # and a second pass does nothing


def test_a_second_reconcile_exits_75_at_once(md: Minidock) -> None:
    up(md)
    with StateLock(md.state):  # a writer in the middle of its pass
        res = md("reconcile")
    assert res.returncode == 75, res.stdout + res.stderr
    assert "locked" in res.stderr
    assert res.stdout == ""
    assert md("reconcile").returncode == 0


def test_two_concurrent_reconciles_one_works_one_exits_75(md: Minidock) -> None:
    up(md)
    md.fleet.kill("host2", "pause")  # a pass now lasts at least the 2 s connect timeout
    try:
        both = [md.popen("reconcile"), md.popen("reconcile")]
        codes = sorted(p.wait(timeout=60) for p in both)
        for p in both:
            p.communicate()
    finally:
        md.fleet.revive("host2")
    assert codes == [3, 75]


def test_watch_takes_the_lock_per_pass_so_apply_gets_its_turn(md: Minidock) -> None:
    up(md)
    watcher = md.popen("watch", "--interval", "1s")
    try:
        more = WORKERS.replace("replicas = 4", "replicas = 5")
        res = md("apply", str(md.spec(more)), "--wait", "--timeout", "60s")
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(md.tasks("route")) == 5
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.communicate(timeout=30)


def test_plan_changes_nothing(md: Minidock, fleet: Fleet) -> None:
    spec = md.spec(WORKERS)
    res = md("plan", str(spec))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("run route.") == 4
    assert all(md.containers(h) == [] for h in ["host1", "host2", "host3"])
    assert not (md.state / "state.db").exists()


def test_other_clusters_and_unlabelled_containers_are_never_touched(
    md: Minidock, fleet: Fleet
) -> None:
    fleet.docker("host1", "run", "-d", "--name", "bystander", "minidock-lab/web:5", check=True)
    fleet.docker(
        "host1",
        "run",
        "-d",
        "--name",
        "other.1.x",
        "--label",
        "minidock.cluster=other",
        "--label",
        "minidock.service=route",
        "--label",
        "minidock.slot=1",
        "--label",
        "minidock.task=x",
        "--label",
        "minidock.spec=y",
        "minidock-lab/web:5",
        check=True,
    )
    try:
        up(md)
        reconcile_until_converged(md)
        names = fleet.docker("host1", "ps", "--format", "{{.Names}}").stdout.split()
        assert "bystander" in names
        assert "other.1.x" in names
        assert len(md.tasks("route")) == 4
    finally:
        fleet.docker("host1", "rm", "-f", "bystander", "other.1.x")
