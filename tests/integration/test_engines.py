"""A mixed fleet: one lab host of each kind (Debian 13's Docker 26 as a docker-group user and
through sudo, Debian unstable's Docker 28, Debian 13's Podman 5.4 rootful), one cluster over
them all: the probe reads each engine, a health-checked service gets healthy on the Podman
host (MiniDock runs its checks: no systemd there), apply and a rolling update converge,
logs and exec work through sudo (docs/hosts.md, docs/lab.md "Host kinds").

Its own small lab (the session's is Debian 12 only), taken down at the end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minidock.lab import Lab, engine_available

pytestmark = pytest.mark.integration

KINDS = ("trixie", "trixie-sudo", "sid", "podman")
ENGINES = {
    "host1": ("docker", "26."),
    "host2": ("docker", "26."),
    "host3": ("docker", "28."),
    "host4": ("podman", "5."),
}
WEB = """
[services.web]
image = "minidock-lab/web:{version}"
mode = "global"
update = {{ parallelism = 2, monitor = "1s" }}
health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 3 }}
"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab of one host per kind (only the workload images in them)."""
    assert engine_available(), "no Docker engine answers: run scripts/engine.sh"
    lab = Lab(
        tmp_path_factory.mktemp("engines"),
        # the session's prefix and labels: a lab left by a crashed run is reaped as its is
        project=f"minidock-labtest-engines-{os.getpid()}",
        labels={"minidock.lab.test-pid": str(os.getpid()),
                "minidock.lab.test-hostname": socket.gethostname()},
    )  # fmt: skip
    try:
        lab.up(len(KINDS), sets=("workloads",), kinds=KINDS, timeout=180)
        yield lab
    finally:
        lab.down()


def minidock(lab: Lab, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MINIDOCK_STATE": str(lab.root / "state"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "minidock", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def spec(lab: Lab, version: int) -> Path:
    path = lab.root / "cluster.toml"
    head = f'cluster = "engines"\ninventory = "{lab.inventory_path}"\n'
    path.write_text(head + WEB.format(version=version))
    return path


def status(lab: Lab) -> dict[str, Any]:
    done = minidock(lab, "status", "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_mixed_fleet_converges_and_updates_with_each_engine_read(mixed: Lab) -> None:
    applied = minidock(mixed, "apply", str(spec(mixed, 5)), "--wait", "--timeout", "150s")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    doc = status(mixed)
    engines = {h["name"]: h["engine"] for h in doc["hosts"]}
    for host, (kind, version) in ENGINES.items():
        assert engines[host]["kind"] == kind, engines
        assert engines[host]["version"].startswith(version), engines
    tasks = {t["host"]: t for t in doc["tasks"]}
    assert sorted(tasks) == sorted(ENGINES)  # a task on each host, the Podman one too
    assert all(t["health"] == "healthy" for t in tasks.values()), tasks
    text = minidock(mixed, "status").stdout
    assert "Podman 5.4" in text
    assert "Docker 28.5" in text

    updated = minidock(mixed, "apply", str(spec(mixed, 6)), "--wait", "--timeout", "150s")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    after = status(mixed)
    assert after["converged"]
    live = [t for t in after["tasks"] if t["state"] == "running"]
    assert sorted(t["host"] for t in live) == sorted(ENGINES)
    assert all(t["image"].endswith("web:6") and t["health"] == "healthy" for t in live), live


def test_logs_and_exec_work_through_sudo(mixed: Lab) -> None:
    doc = status(mixed)
    slot = next(t["slot"] for t in doc["tasks"] if t["host"] == "host2")  # sudoer, sudo = true
    ran = minidock(mixed, "exec", f"web.{slot}", "--", "cat", "/www/index.html")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("web 6")
    logs = minidock(mixed, "logs", "web", "--slot", str(slot), "--tail", "5")
    assert logs.returncode == 0, logs.stderr
    podman = next(t["slot"] for t in doc["tasks"] if t["host"] == "host4")
    logs = minidock(mixed, "logs", "web", "--slot", str(podman), "--tail", "5")
    assert logs.returncode == 0, logs.stderr
    assert "cgroups-v1" not in logs.stdout + logs.stderr  # the lab's Podman warns no more
    denied = mixed.run_ssh("host2", "docker ps", username="sudoer")  # not without sudo
    assert denied.exit_status != 0
