"""A Compose file on the real lab fleet, driven by the real CLI (issue 21): apply it and
converge, roll an update by editing it, prune a service it no longer names; its secrets
(a file and an environment variable) are files in every task with their owner and mode,
never in clear in the state or in a file of the host's outside Docker's root-only data
directory, and a changed secret is in the updated tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.conftest import Minidock

COMPOSE = """\
name: {cluster}
x-minidock:
  inventory: {inventory}

x-health: &health
  healthcheck:
    test: ["CMD", "wget", "-qO-", "http://127.0.0.1:8080/"]
    interval: 1s
    timeout: 1s
    retries: 2

services:
  web:
    <<: *health
    image: minidock-lab/web:${{WEB_TAG:-5}}
    labels:
      app.from: compose
    environment:
      MODE: ${{MODE}}
    deploy:
      replicas: 2
      placement:
        preferences: [{{spread: node.labels.zone}}]
      update_config:
        parallelism: 1
        order: start-first
        monitor: 1s
        failure_action: rollback
    secrets:
      - db_password
      - {{source: api_token, target: /etc/app/token, uid: "1000", mode: 0400}}
{api}
secrets:
  db_password:
    file: ./db_password.txt
  api_token:
    environment: LAB_API_TOKEN
"""

API = """\
  api:
    <<: *health
    image: minidock-lab/web:5
    depends_on:
      web: {condition: service_healthy}
"""


PASSWORD = "db-pw-3a9e7c\nsecond line\n"  # a secret file's text: given as it is
TOKEN = "lab-tok-51f0d2"


def compose(md: Minidock, *, tag: str = "5", api: bool = True, password: str = PASSWORD) -> Path:
    """compose.yaml for md's cluster on the lab inventory, its .env (MODE) and secrets."""
    path = md.workdir / "compose.yaml"
    text = COMPOSE.format(cluster=md.cluster, inventory=md.fleet.inventory, api=API if api else "")
    path.write_text(text.replace("${WEB_TAG:-5}", f"${{WEB_TAG:-{tag}}}"))
    (md.workdir / ".env").write_text("MODE=lab\n")
    secret = md.workdir / "db_password.txt"
    secret.write_text(password)
    secret.chmod(0o600)
    md.extra_env["LAB_API_TOKEN"] = TOKEN
    return path


def secret_files_seen(md: Minidock, password: str, *, on_hosts: bool = True) -> None:
    """Every web task holds both secret files, owned and moded as the file says; on its
    host they are only in the task's layer under Docker's root-only data directory
    (another user cannot read them) and in no file MiniDock wrote; the state holds none."""
    fleet = md.fleet
    tasks = [t for t in seen_whole(md)["tasks"] if t["service"] == "web"]
    assert len(tasks) == 2
    for task in tasks:
        host, name = task["host"], task["name"]
        upper = fleet.docker(
            host, "inspect", "--format", "{{.GraphDriver.Data.UpperDir}}", name, check=True
        ).stdout.strip()  # the task's own layer, under Docker's data directory on the host
        for path, owner, text in (
            ("/run/secrets/db_password", "444 0 0", password),
            ("/etc/app/token", "400 1000 0", TOKEN),
        ):
            assert fleet.docker(host, "exec", name, "cat", path, check=True).stdout == text
            shown = fleet.exec(host, "stat", "-c", "%a %u %g", f"{upper}{path}", check=True)
            assert shown.stdout.strip() == owner
        if not on_hosts:
            continue
        on_host = f"{upper}/run/secrets/db_password"
        other = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", on_host)
        assert "Permission denied" in fleet.exec(host, *other).stderr
        places = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/dev/shm", "/etc")
        found = fleet.exec(host, "grep", "-rlsF", "db-pw-3a9e7c", *places)
        assert found.stdout == "", found.stdout  # no copy outside Docker's data directory
    for state_file in md.state.rglob("*"):
        if state_file.is_file():
            blob = state_file.read_bytes()
            assert b"db-pw-3a9e7c" not in blob
            assert TOKEN.encode() not in blob, state_file


def seen_whole(md: Minidock) -> dict[str, Any]:
    """`status --json` from a pass in which every host answered: on a loaded machine a
    probe can time out, and a host that did not answer shows no tasks (never "none")."""
    for _ in range(10):
        status = md.status()
        if all(h["state"] == "ready" for h in status["hosts"]):
            return status
    raise AssertionError(f"some host never answered: {json.dumps(status['hosts'])}")


def images(md: Minidock, service: str) -> list[str]:
    """The images of the service's running tasks."""
    tasks = seen_whole(md)["tasks"]
    return sorted(t["image"] for t in tasks if t["service"] == service and t["state"] == "running")


def test_a_compose_file_applies_updates_by_editing_and_prunes(md: Minidock) -> None:
    path = compose(md)
    assert md("validate", str(path)).returncode == 0
    applied = md("apply", str(path), "--wait", "--timeout", "120s")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert images(md, "web") == ["minidock-lab/web:5"] * 2
    assert images(md, "api") == ["minidock-lab/web:5"]
    task = next(t for t in seen_whole(md)["tasks"] if t["service"] == "web")
    inspected = md.fleet.docker(task["host"], "inspect", task["name"], check=True)
    config = json.loads(inspected.stdout)[0]["Config"]
    assert config["Labels"]["app.from"] == "compose"
    assert "MODE=lab" in config["Env"]  # from .env, through interpolation
    secret_files_seen(md, PASSWORD)
    assert "db-pw-3a9e7c" not in applied.stdout + applied.stderr

    again = md("apply", str(path), "--wait", "--timeout", "60s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert images(md, "web") == ["minidock-lab/web:5"] * 2  # an unchanged file changes nothing

    compose(md, tag="6", password="db-pw-3a9e7c changed\n")  # the edit: tag and a secret
    updated = md("apply", str(path), "--wait", "--timeout", "120s")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert images(md, "web") == ["minidock-lab/web:6"] * 2
    secret_files_seen(md, "db-pw-3a9e7c changed\n", on_hosts=False)
    assert images(md, "api") == ["minidock-lab/web:5"]  # untouched
    web = next(s for s in seen_whole(md)["services"] if s["name"] == "web")
    assert (web["running"], web["healthy"]) == (2, 2)

    compose(md, tag="6", api=False, password="db-pw-3a9e7c changed\n")
    refused = md("apply", str(path))
    assert refused.returncode == 2
    assert "no longer names service api" in refused.stderr
    assert images(md, "api") == ["minidock-lab/web:5"]  # nothing stopped
    pruned = md("apply", str(path), "--prune", "--wait", "--timeout", "120s")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert images(md, "api") == []
    assert images(md, "web") == ["minidock-lab/web:6"] * 2
