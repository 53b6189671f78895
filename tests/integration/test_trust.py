"""Trust it unattended (issue 9), on the real lab fleet: the controller cut off from most
of its fleet replaces nothing; a service that must not run twice waits for its host; the
controller's record decides which task of a slot survives; a lost state directory loses
nothing that runs. Faults are real: iptables inside the hosts, stopped host containers."""

from __future__ import annotations

import time

from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_converge import live_by_host, reconcile_until_converged, slots_of

SPREAD = """
[services.route]
image = "minidock-lab/web:5"
replicas = 4

[services.route.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""

DB = """
[services.db]
image = "minidock-lab/web:5"
on_host_loss = "wait"
"""


def running_ids(md: Minidock, fleet: Fleet) -> set[str]:
    """Every running container of the test cluster, by name, read inside the hosts."""
    found = live_by_host(md, fleet, fleet.hosts)
    return {name for names in found.values() for name in names}


def test_controller_cut_off_from_most_hosts_replaces_nothing_and_heals_without_churn(
    md: Minidock, fleet: Fleet
) -> None:
    res = md("apply", str(md.spec(SPREAD)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    before = running_ids(md, fleet)
    cut = fleet.hosts[: len(fleet.hosts) // 2 + 1]  # more than half of the fleet
    for h in cut:
        fleet.kill(h, "partition")
    for _ in range(5):
        res = md("reconcile")
        assert res.returncode == 1, res.stdout + res.stderr
        assert "mass-loss guard" in res.stderr
        assert "started" not in res.stdout
        assert "stopped" not in res.stdout
    doc = md.status()
    assert "mass-loss guard" in doc["guard"]
    assert not any(h["state"] == "down" for h in doc["hosts"])
    for h in cut:
        fleet.revive(h)
    printed = reconcile_until_converged(md)
    assert not [line for line in printed if line.startswith(("started", "stopped"))], printed
    assert running_ids(md, fleet) == before  # the very same containers: zero churn
    log = md("events", "-n", "200").stdout
    assert log.count(" mass-loss-guard: ") == 1  # recorded once, when it started to hold
    assert " mass-loss-guard-released: " in log


def test_force_down_overrides_the_guard(md: Minidock, fleet: Fleet) -> None:
    res = md("apply", str(md.spec(SPREAD)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    cut = fleet.hosts[: len(fleet.hosts) // 2 + 1]
    for h in cut:
        fleet.kill(h, "stop")
    assert md("reconcile").returncode == 1
    forced = [md("reconcile", "--force-down") for _ in range(2)]
    assert any("overridden by --force-down" in r.stdout for r in forced), forced
    doc = md.status()
    assert {h["name"] for h in doc["hosts"] if h["state"] == "down"} == set(cut)


def test_a_wait_service_is_not_replaced_while_its_host_is_partitioned(
    md: Minidock, fleet: Fleet
) -> None:
    res = md("apply", str(md.spec(DB)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    ((host, (name,)),) = [(h, n) for h, n in live_by_host(md, fleet, fleet.hosts).items() if n]
    fleet.kill(host, "partition")
    for _ in range(5):
        res = md("reconcile")
        assert "started" not in res.stdout, res.stdout
        time.sleep(0.3)
    db = next(s for s in md.status()["services"] if s["name"] == "db")
    assert db["running"] == 0  # its host is not seen: the task is not counted, nor replaced
    waiting = " ".join(md.status()["waiting"])
    assert f"stays on {host}, which is down" in waiting
    fleet.revive(host)
    reconcile_until_converged(md)
    assert running_ids(md, fleet) == {name}  # the same container runs on, and only it


def test_the_assigned_replacement_keeps_its_slot_when_the_lost_host_returns(
    md: Minidock, fleet: Fleet
) -> None:
    res = md("apply", str(md.spec(SPREAD)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    by_host = live_by_host(md, fleet, fleet.hosts)
    lost = next(h for h, names in by_host.items() if names)
    stale = set(by_host[lost])
    fleet.kill(lost, "partition")
    reconcile_until_converged(md)
    replacements = running_ids(md, fleet) - stale
    fleet.revive(lost)
    printed = reconcile_until_converged(md)
    assert any("fenced" in line for line in printed), printed
    after = running_ids(md, fleet)
    assert replacements <= after  # the controller's choice survived, whatever the clocks say
    assert not (stale & after)
    assert slots_of(sorted(after)) == slots_of(sorted(replacements | (after - stale)))
    assert sorted(slots_of(sorted(after)).values()) == [1, 1, 1, 1]


def test_losing_the_state_database_loses_nothing_that_runs(md: Minidock, fleet: Fleet) -> None:
    spec = md.spec(SPREAD + DB)
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    before = running_ids(md, fleet)
    for f in md.state.glob("state.db*"):
        f.unlink()
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "started" not in res.stdout
    assert "stopped" not in res.stdout
    assert running_ids(md, fleet) == before
    doc = md.status()
    assert "rebuilt" in doc["rebuilt"]


ONE_IN_ZONE_A = """
[services.app]
image = "minidock-lab/web:5"
constraints = ["zone == a"]
restart = { delay = "1s", max_delay = "2s" }
"""


def _settle_on_another_host(md: Minidock, bad: str) -> list[str]:
    """Reconcile like cron until the service runs; what the passes printed."""
    printed: list[str] = []
    for _ in range(20):
        res = md("reconcile")
        printed += (res.stdout + res.stderr).splitlines()
        tasks = md.tasks("app")
        if res.returncode == 0 and tasks:
            break
        time.sleep(0.5)
    (task,) = md.tasks("app")
    assert task["host"] != bad, printed
    return printed


def test_a_full_disk_on_one_host_sends_the_task_elsewhere_after_its_backoff(
    md: Minidock, fleet: Fleet
) -> None:
    fleet.kill("host1", "disk")  # host1 answers, but cannot create a container
    try:
        res = md("apply", str(md.spec(ONE_IN_ZONE_A)))  # the first choice is host1
        assert res.returncode == 1, res.stdout + res.stderr
        assert "no space left on device" in res.stderr
        printed = _settle_on_another_host(md, "host1")
        started = [line for line in printed if line.startswith("started app.1.")]
        assert len(started) == 1  # one retry, elsewhere: no loop on the full host
        assert md.containers("host1") == []
    finally:
        fleet.revive("host1")


def test_a_missing_image_on_one_host_sends_the_task_elsewhere(md: Minidock, fleet: Fleet) -> None:
    fleet.docker("host1", "rmi", "minidock-lab/web:5", check=True)
    try:
        res = md("apply", str(md.spec(ONE_IN_ZONE_A)))
        assert res.returncode == 1, res.stdout + res.stderr
        assert "is not on host1 and cannot be pulled" in res.stderr
        _settle_on_another_host(md, "host1")
    finally:
        fleet.lab.load_images("host1")


def test_a_short_secret_appears_nowhere_minidock_writes(md: Minidock) -> None:
    secret = md.workdir / "secret"
    secret.write_text("abc\n")
    secret.chmod(0o600)
    spec = md.spec("""
[services.leaky]
image = "minidock-lab/crash:1"
command = ["sh", "-c", "echo the password is $DB_PASSWORD; sleep 1; exit 1"]
secrets = { DB_PASSWORD = { file = "secret" } }
restart = { delay = "1s", max_delay = "1s", max_attempts = 2, window = "5m" }
""")
    written = [md("apply", str(spec))]
    for _ in range(30):
        written.append(md("reconcile"))
        if written[-1].returncode == 1 and "Failed" in written[-1].stderr:
            break
        time.sleep(0.5)
    assert "leaky.1 Failed" in written[-1].stderr, written[-1].stderr
    written += [
        md("status"),
        md("status", "--json"),
        md("events", "-n", "0"),
        md("plan", str(spec)),
    ]
    text = "\n".join(r.stdout + r.stderr for r in written)
    assert "the password is ***" in text  # the log tail is kept, and masked
    assert "abc" not in text


def test_a_fresh_store_refuses_another_stores_tasks_unless_adopting(
    md: Minidock, fleet: Fleet
) -> None:
    spec = md.spec(SPREAD)
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    before = running_ids(md, fleet)
    other = Minidock(fleet, md.workdir / "elsewhere")
    other.workdir.mkdir()
    refused = other("apply", str(spec))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "4 running tasks of cluster itest belong to another state store's controller" in (
        refused.stderr
    )
    assert running_ids(md, fleet) == before  # a forgotten MINIDOCK_STATE stops nothing
    adopted = other("apply", str(spec), "--adopt", "--wait", "--timeout", "60s")
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    assert "started" not in adopted.stdout
    assert running_ids(md, fleet) == before
