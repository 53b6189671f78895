"""Real workloads (issue 15), the core's part, on the real lab fleet: a stateful service
with a named volume survives a controller restart and a host outage without a second copy;
a global service follows hosts in and out."""

from __future__ import annotations

import time

from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_converge import reconcile_until_converged
from tests.integration.test_desired import inventory_copy, spec_on

DB = """
[services.db]
image = "minidock-lab/web:5"
command = ["sh", "-c", "date >> /data/boots; exec httpd -f -p 8080 -h /www"]
volumes = ["dbdata:/data"]
restart = { delay = "1s", max_delay = "1s" }
"""

EXPORTER = """
[services.exporter]
image = "minidock-lab/web:5"
mode = "global"
constraints = ["zone != c"]
"""


def boots(fleet: Fleet, host: str, container: str) -> list[str]:
    res = fleet.docker(host, "exec", container, "cat", "/data/boots", check=True)
    return res.stdout.splitlines()


def test_a_stateful_service_keeps_its_volume_through_an_outage_and_restarts(
    md: Minidock, fleet: Fleet
) -> None:
    res = md("apply", str(md.spec(DB)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    (task,) = md.tasks("db")
    home, name = task["host"], f"db.1.{task['id']}"
    assert len(boots(fleet, home, name)) == 1
    fleet.kill(home, "partition")  # an outage of its host: never a second copy
    for _ in range(5):
        res = md("reconcile")
        assert "started" not in res.stdout, res.stdout
        time.sleep(0.3)
    assert all(md.containers(h) == [] for h in fleet.hosts if h != home)
    fleet.revive(home)
    reconcile_until_converged(md)
    assert [(t["host"], t["id"]) for t in md.tasks("db")] == [(home, task["id"])]
    fleet.docker(home, "kill", name, check=True)  # the task dies: restarted on its host
    for _ in range(20):
        printed = "\n".join(reconcile_until_converged(md))
        if md.tasks("db") and md.tasks("db")[0]["id"] != task["id"]:
            break
        time.sleep(0.5)
    (again,) = md.tasks("db")
    assert again["host"] == home, printed
    assert len(boots(fleet, home, f"db.1.{again['id']}")) == 2  # the same volume, its data
    refused = md("drain", home)
    assert refused.returncode == 2
    assert "--move-volumes-unsafe" in refused.stderr


def test_a_global_service_follows_hosts_in_and_out(md: Minidock, fleet: Fleet) -> None:
    inv = inventory_copy(md, drop="host3")
    res = md("apply", str(spec_on(md, inv, EXPORTER)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(t["host"] for t in md.tasks("exporter")) == ["host1", "host2"]
    inventory_copy(md)  # host3 joins (host4 is zone c: not eligible)
    reconcile_until_converged(md)
    assert sorted(t["host"] for t in md.tasks("exporter")) == ["host1", "host2", "host3"]
    drained = md("drain", "host2", "--timeout", "60s")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert sorted(t["host"] for t in md.tasks("exporter")) == ["host1", "host3"]
    assert md.containers("host2") == []
    md("activate", "host2")
    reconcile_until_converged(md)
    assert sorted(t["host"] for t in md.tasks("exporter")) == ["host1", "host2", "host3"]
    doc = md.status()
    (exporter,) = [s for s in doc["services"] if s["name"] == "exporter"]
    assert (exporter["replicas"], exporter["running"]) == (3, 3)


MARKED = """
[services.db]
image = "minidock-lab/web:5"
command = ["httpd", "-f", "-p", "8080", "-h", "/www"]
volumes = ["dbdata:/data"]
env = {{ MODE = "{mode}" }}
replicas = {replicas}
"""

FILLER = """
[services.filler]
image = "minidock-lab/web:5"
cpus = 1.0
constraints = ["host == {host}"]
"""


def test_a_pinned_slot_keeps_its_host_and_data_after_reset_apply_and_rollback(
    md: Minidock, fleet: Fleet
) -> None:
    """The record rule on the lab: the slot's task is gone when the operator resets, applies
    a change (its replica count too) or rolls back; its next task starts on the host that
    holds its volume (not on the fullest host, where a fresh placement would go) and reads
    the file the first one wrote."""
    first = md.spec(MARKED.format(mode="1", replicas=1))
    res = md("apply", str(first), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    (task,) = md.tasks("db")
    home = task["host"]
    other = next(h for h in fleet.hosts if h != home)
    fleet.docker(home, "exec", f"db.1.{task['id']}", "sh", "-c", "echo kept > /data/mark")
    filler = FILLER.format(host=other)  # `other` is now the fullest host
    res = md("apply", str(md.spec(MARKED.format(mode="1", replicas=1) + filler)), "--wait")
    assert res.returncode == 0, res.stdout + res.stderr

    def task_gone_then(*command: str) -> dict[str, str]:
        (live,) = [t for t in md.tasks("db") if t["slot"] == 1]
        fleet.docker(live["host"], "rm", "-f", f"db.1.{live['id']}", check=True)
        res = md(*command)
        assert res.returncode in (0, 3), res.stdout + res.stderr
        reconcile_until_converged(md)
        (again,) = [t for t in md.tasks("db") if t["slot"] == 1]
        assert again["id"] != live["id"]
        return again

    for command in (
        ("reset", "db"),
        ("apply", str(md.spec(MARKED.format(mode="2", replicas=2) + filler))),
        ("rollback", "db"),
    ):
        again = task_gone_then(*command)
        assert again["host"] == home, command
        seen = fleet.docker(home, "exec", f"db.1.{again['id']}", "cat", "/data/mark")
        assert seen.stdout.strip() == "kept", command
