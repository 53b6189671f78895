"""A read-only bind mount of a directory beside a Compose file, on the real lab fleet
through the real command line: shipped from the controller to each host that runs a task
(every host here is reached over SSH), its files in the task, read-only; a change to one
file rolls out (every task replaced, the new content seen, the other file unchanged)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock

COMPOSE = """\
name: {cluster}
x-minidock:
  inventory: {inventory}
services:
  web:
    image: {image}
    deploy:
      replicas: {replicas}
      update_config: {{parallelism: 3}}
    volumes:
      - ./conf:/etc/app:ro
"""


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture
def md(fleet: Fleet, tmp_path: Path) -> Minidock:
    """The command line on the lab, with probes given time (a shared, loaded machine)."""
    doc = tomllib.loads(fleet.inventory.read_text())
    for key in ("identity_file", "known_hosts"):
        doc["defaults"][key] = str((fleet.inventory.parent / doc["defaults"][key]).resolve())
    doc["defaults"]["probe_timeout"] = "30s"
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(tomli_w.dumps(doc))
    return Minidock(fleet, tmp_path, inventory=inventory)


def running(md: Minidock) -> dict[str, list[str]]:
    """The cluster's running tasks by host (container names)."""
    found: dict[str, list[str]] = {}
    for host in md.fleet.hosts:
        names = [line.split()[0] for line in md.containers(host) if line.endswith(" running")]
        found[host] = sorted(names)
    return found


def read(fleet: Fleet, host: str, name: str, path: str) -> str:
    return ok(fleet.docker(host, "exec", name, "cat", path))


def test_a_read_only_directory_reaches_each_host_and_a_changed_file_rolls_out(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    conf = tmp_path / "conf"
    (conf / "sites").mkdir(parents=True)
    (conf / "app.conf").write_text("listen = 8080\n")
    (conf / "sites" / "shop").write_text("name = first\n")
    replicas = len(fleet.hosts)
    assert md.inventory is not None
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        COMPOSE.format(
            cluster=md.cluster, inventory=md.inventory, image=WEB5_IMAGE, replicas=replicas
        )
    )
    ok(md("apply", str(compose), "--wait", "--timeout", "120s"))
    tasks = running(md)
    assert sum(len(names) for names in tasks.values()) == replicas
    assert all(tasks.values()), tasks  # a task on every host, each reached over SSH
    for host, names in tasks.items():
        for name in names:
            assert read(fleet, host, name, "/etc/app/app.conf") == "listen = 8080\n"
            assert read(fleet, host, name, "/etc/app/sites/shop") == "name = first\n"
            write = fleet.docker(host, "exec", name, "sh", "-c", "echo x > /etc/app/sites/shop")
            assert write.returncode != 0
            assert "Read-only file system" in write.stderr
    old = {n for names in tasks.values() for n in names}

    (conf / "sites" / "shop").write_text("name = second\n")
    ok(md("apply", str(compose), "--wait", "--timeout", "180s"))
    tasks = running(md)
    new = {n for names in tasks.values() for n in names}
    assert len(new) == replicas
    assert not new & old  # every task replaced
    for host, names in tasks.items():
        for name in names:
            assert read(fleet, host, name, "/etc/app/sites/shop") == "name = second\n"
            assert read(fleet, host, name, "/etc/app/app.conf") == "listen = 8080\n"
