"""The lab benchmarks' service: 4 replicas of the lab's web image on host1..host3 (zone c
excluded), health-checked every second."""

from __future__ import annotations

WEB = """cluster = "{cluster}"
inventory = "{inventory}"

[services.web]
image = "minidock-lab/web:{version}"
replicas = 4
constraints = ["zone != c"]

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "1s"
retries = 2
"""


def web_spec(cluster: str, inventory: object, version: str = "5", extra: str = "") -> str:
    """The cluster file's text, with `extra` TOML after the service."""
    return WEB.format(cluster=cluster, inventory=inventory, version=version) + extra
