"""The whole desired state, honoured (issue 13), on the real lab fleet: a constraint change
moves tasks without a moment below replicas; a host leaves the inventory only once drained,
leaving no orphan; removing services needs --prune."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.integration.conftest import Minidock
from tests.integration.test_converge import live_by_host

HEALTH = """
[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""


def web(constraint: str, order: str = "start-first") -> str:
    return (
        f"""
[services.web]
image = "minidock-lab/web:5"
replicas = 2
constraints = ["{constraint}"]
update = {{ order = "{order}", monitor = "1s" }}
"""
        + HEALTH
    )


def inventory_copy(md: Minidock, drop: str | None = None) -> Path:
    """The lab inventory (paths made absolute), optionally without one host."""
    doc: dict[str, Any] = tomllib.loads(md.fleet.inventory.read_text())
    base = md.fleet.inventory.parent
    for key in ("identity_file", "known_hosts"):
        doc["defaults"][key] = str((base / doc["defaults"][key]).resolve())
    doc["hosts"] = [h for h in doc["hosts"] if h["name"] != drop]
    path = md.workdir / "inventory.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def spec_on(md: Minidock, inventory: Path, body: str) -> Path:
    path = md.workdir / "cluster.toml"
    path.write_text(f'cluster = "{md.cluster}"\ninventory = "{inventory}"\n\n{body}')
    return path


def healthy_web(md: Minidock) -> int:
    return len(
        {t["slot"] for t in md.tasks("web") if t["state"] == "running" and t["health"] == "healthy"}
    )


def test_a_constraint_change_moves_both_tasks_never_below_replicas(md: Minidock) -> None:
    inv = inventory_copy(md)
    res = md("apply", str(spec_on(md, inv, web("zone == a"))), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert {t["host"] for t in md.tasks("web")} <= {"host1", "host2"}
    plan = md("plan", str(spec_on(md, inv, web("zone != a"))))
    assert "move: host" in plan.stdout, plan.stdout  # plan shows the moves
    proc = md.popen("apply", str(spec_on(md, inv, web("zone != a"))), "--wait", "--timeout", "90s")
    lowest = 2
    while proc.poll() is None:
        lowest = min(lowest, healthy_web(md))
        time.sleep(0.3)
    out, errs = proc.communicate()
    assert proc.returncode == 0, out + errs
    assert lowest == 2  # start-first: never a moment below replicas
    assert {t["host"] for t in md.tasks("web")}.isdisjoint({"host1", "host2"})
    assert md.status()["converged"]


def test_a_host_leaves_the_inventory_only_drained_and_leaves_no_orphan(md: Minidock) -> None:
    inv = inventory_copy(md)
    body = web("zone != c")
    res = md("apply", str(spec_on(md, inv, body)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    carrier = next(t["host"] for t in md.tasks("web"))
    inventory_copy(md, drop=carrier)
    refused = md("reconcile")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"no longer lists host {carrier}, which carries web." in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    drained = md("drain", carrier, "--timeout", "60s")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert md.containers(carrier) == []  # no orphan on the host that left
    assert md("reconcile").returncode == 0
    assert carrier not in {h["name"] for h in md.status()["hosts"]}
    assert len(md.tasks("web")) == 2
    running = live_by_host(md, md.fleet, [h for h in md.fleet.hosts if h != carrier])
    assert sum(len(v) for v in running.values()) == 2


def test_an_empty_spec_is_refused_without_prune(md: Minidock) -> None:
    inv = inventory_copy(md)
    res = md("apply", str(spec_on(md, inv, web("zone != c"))), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    empty = spec_on(md, inv, "")
    refused = md("apply", str(empty))
    assert refused.returncode == 2
    assert "no longer names service web" in refused.stderr
    assert len(md.tasks("web")) == 2  # nothing stopped
    pruned = md("apply", str(empty), "--prune", "--wait", "--timeout", "60s")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert md.tasks("web") == []
