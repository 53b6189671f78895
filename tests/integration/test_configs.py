"""Configs (issue 23 item 3) on the real lab fleet, through the real command line: a file
from the controller in every task, read-only, with its content; a changed content rolled
out (every task replaced, the new content seen); an unchanged re-apply restarting
nothing; the file on each host named by its sha256, read-only."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock

APP_CONF = "listen = 8080\nname = first\n"


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture
def md(fleet: Fleet, tmp_path: Path) -> Minidock:
    """The command line on the lab, with probes given time: a task on every host of a
    machine that eight test sessions share must not read as a mass host loss."""
    doc = tomllib.loads(fleet.inventory.read_text())
    for key in ("identity_file", "known_hosts"):
        doc["defaults"][key] = str((fleet.inventory.parent / doc["defaults"][key]).resolve())
    doc["defaults"]["probe_timeout"] = "30s"
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(tomli_w.dumps(doc))
    return Minidock(fleet, tmp_path, inventory=inventory)


def spec(md: Minidock, conf: Path, replicas: int) -> Path:
    return md.spec(
        f"""
[services.web]
image = "{WEB5_IMAGE}"
replicas = {replicas}
update = {{ parallelism = 3 }}
[services.web.configs]
"/etc/app/app.conf" = {{ file = "{conf}" }}
"/www/motd.txt" = {{ content = "hello\\n" }}
"""
    )


def tasks_by_host(md: Minidock) -> dict[str, list[str]]:
    """Every running task of the cluster, by host: container name -> started at."""
    found: dict[str, list[str]] = {}
    for host in md.fleet.hosts:
        names = [line.split()[0] for line in md.containers(host) if line.endswith(" running")]
        found[host] = sorted(names)
    return found


def started(fleet: Fleet, host: str, name: str) -> str:
    return ok(fleet.docker(host, "inspect", "--format", "{{.State.StartedAt}}", name)).strip()


def in_task(fleet: Fleet, host: str, name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return fleet.docker(host, "exec", name, *argv)


def test_a_config_is_in_every_task_read_only_and_an_unchanged_apply_restarts_nothing(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    conf = tmp_path / "app.conf"
    conf.write_text(APP_CONF)
    replicas = len(fleet.hosts)
    ok(md("apply", str(spec(md, conf, replicas)), "--wait", "--timeout", "90s"))
    tasks = tasks_by_host(md)
    assert sum(len(names) for names in tasks.values()) == replicas
    digest = hashlib.sha256(APP_CONF.encode()).hexdigest()
    for host, names in tasks.items():
        for name in names:
            assert ok(in_task(fleet, host, name, "cat", "/etc/app/app.conf")) == APP_CONF
            assert ok(in_task(fleet, host, name, "cat", "/www/motd.txt")) == "hello\n"
            write = in_task(fleet, host, name, "sh", "-c", "echo x > /etc/app/app.conf")
            assert write.returncode != 0
            assert "Read-only file system" in write.stderr
            mounts = json.loads(
                ok(fleet.docker(host, "inspect", "--format", "{{json .Mounts}}", name))
            )
            conf_mount = next(m for m in mounts if m["Destination"] == "/etc/app/app.conf")
            assert conf_mount["RW"] is False
            assert conf_mount["Source"] == f"/root/.minidock/configs/{digest}"
        if names:  # the host's copy: named by its content's sha256, read-only for everyone
            on_host = ok(fleet.exec(host, "stat", "-c", "%a", f"/root/.minidock/configs/{digest}"))
            assert on_host.strip() == "444"
    before = {(h, n): started(fleet, h, n) for h, names in tasks.items() for n in names}

    again = ok(md("apply", str(spec(md, conf, replicas)), "--wait", "--timeout", "60s"))
    assert tasks_by_host(md) == tasks, again
    after = {(h, n): started(fleet, h, n) for h, names in tasks.items() for n in names}
    assert after == before


def test_a_changed_config_rolls_out_to_every_task(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    conf = tmp_path / "app.conf"
    conf.write_text(APP_CONF)
    replicas = len(fleet.hosts)
    ok(md("apply", str(spec(md, conf, replicas)), "--wait", "--timeout", "90s"))
    old = {n for names in tasks_by_host(md).values() for n in names}

    conf.write_text("listen = 8080\nname = second\n")
    ok(md("apply", str(spec(md, conf, replicas)), "--wait", "--timeout", "120s"))
    tasks = tasks_by_host(md)
    new = {n for names in tasks.values() for n in names}
    assert len(new) == replicas
    assert not new & old
    for host, names in tasks.items():
        for name in names:
            seen = ok(in_task(fleet, host, name, "cat", "/etc/app/app.conf"))
            assert seen == "listen = 8080\nname = second\n"
