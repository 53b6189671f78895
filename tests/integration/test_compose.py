"""A Compose file on the real lab fleet, driven by the real CLI (issue 21): apply it and
converge, roll an update by editing it, prune a service it no longer names."""

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
{api}"""

API = """\
  api:
    <<: *health
    image: minidock-lab/web:5
    depends_on:
      web: {condition: service_healthy}
"""


def compose(md: Minidock, *, tag: str = "5", api: bool = True) -> Path:
    """compose.yaml for md's cluster on the lab inventory, and its .env (MODE)."""
    path = md.workdir / "compose.yaml"
    text = COMPOSE.format(cluster=md.cluster, inventory=md.fleet.inventory, api=API if api else "")
    path.write_text(text.replace("${WEB_TAG:-5}", f"${{WEB_TAG:-{tag}}}"))
    (md.workdir / ".env").write_text("MODE=lab\n")
    return path


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

    again = md("apply", str(path), "--wait", "--timeout", "60s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert images(md, "web") == ["minidock-lab/web:5"] * 2  # an unchanged file changes nothing

    compose(md, tag="6")  # the edit: the default tag in the Compose file
    updated = md("apply", str(path), "--wait", "--timeout", "120s")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert images(md, "web") == ["minidock-lab/web:6"] * 2
    assert images(md, "api") == ["minidock-lab/web:5"]  # untouched
    web = next(s for s in seen_whole(md)["services"] if s["name"] == "web")
    assert (web["running"], web["healthy"]) == (2, 2)

    compose(md, tag="6", api=False)
    refused = md("apply", str(path))
    assert refused.returncode == 2
    assert "no longer names service api" in refused.stderr
    assert images(md, "api") == ["minidock-lab/web:5"]  # nothing stopped
    pruned = md("apply", str(path), "--prune", "--wait", "--timeout", "120s")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert images(md, "api") == []
    assert images(md, "web") == ["minidock-lab/web:6"] * 2
