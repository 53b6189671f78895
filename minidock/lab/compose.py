"""The host containers' definition: how they get the rights to run dockerd (detected, not
assumed), and the compose document that declares them.

The document is written as JSON, which Compose reads as it reads YAML (Debian's
docker-compose 1.29 runs it here, file format 2.4), so no YAML writer is needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from minidock.lab import docker, local
from minidock.lab.acme import ACME, LabAcme, acme_service
from minidock.lab.bastion import BASTION, bastion_service
from minidock.lab.directory import LabBastion, LabHost
from minidock.lab.faults import ENGINE_SOCKET_DIR, START_DOCKERD
from minidock.lab.images import (
    DEFAULT_KIND,
    HOST_KINDS,
    LAB_LABEL,
    WEB5_IMAGE,
    data,
    kind_image_tag,
)

__all__ = [
    "PROC_SYS_RW",
    "DindMode",
    "compose_document",
    "compose_text",
    "detect_dind_mode",
    "dind_options",
]

DindMode = Literal["privileged", "caps"]
COMPOSE_FORMAT = "2.4"
HOST_LABEL = "minidock.lab.host"


def detect_dind_mode(probe_image: str = WEB5_IMAGE) -> DindMode:
    """How host containers get the rights to run dockerd: `--privileged` if a tiny test
    container may use it here, else an explicit capability set (FLEET-NOTES: the kernel may
    withhold CAP_SYS_RESOURCE, which makes `--privileged` fail). $MINIDOCK_LAB_DIND forces."""
    forced = os.environ.get("MINIDOCK_LAB_DIND", "")
    if forced == "privileged":
        return "privileged"
    if forced == "caps":
        return "caps"
    proc = local.run(docker.privileged_probe_argv(probe_image), check=False, timeout=60)
    return "privileged" if proc.returncode == 0 else "caps"


def dind_options(dind: str) -> tuple[dict[str, Any], list[str]]:
    """(compose service keys, extra volumes) that let a host container run dockerd."""
    if dind == "privileged":
        return {"privileged": True}, []
    options = {
        "cap_add": ["ALL"],
        "cap_drop": ["SYS_RESOURCE"],
        "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
        "device_cgroup_rules": ["a *:* rwm"],
    }
    return options, ["/sys/fs/cgroup:/sys/fs/cgroup:rw"]


def compose_document(
    project: str,
    hosts: Sequence[LabHost],
    image: str,
    dind: str,
    extra_labels: dict[str, str],
    bastion: LabBastion | None = None,
    acme: LabAcme | None = None,
    engines: Path | None = None,
) -> dict[str, Any]:
    """The compose document for these hosts: one service per host, sshd and the ingress
    ports 80 and 443 on pinned loopback ports, /var/lib/docker on a named volume, PID 1
    the lab's init script; the bastion's service when there is one
    (minidock.lab.bastion), and the ACME server's (minidock.lab.acme). With `engines`, a
    Docker host's engine socket directory is bound to `engines`/HOST on this machine."""
    init = data("host-init.sh").decode()
    options, dind_volumes = dind_options(dind)
    services: dict[str, Any] = {}
    volumes: dict[str, Any] = {}
    for host in hosts:
        kind = HOST_KINDS[host.kind]
        engine_dir = "/var/lib/containers" if kind.engine == "podman" else "/var/lib/docker"
        services[host.name] = {
            "image": image if host.kind == DEFAULT_KIND else kind_image_tag(host.kind),
            "container_name": host.container,
            "hostname": host.name,
            "entrypoint": ["/bin/sh", "-c", _init(init, host.kind)],
            "ports": [
                f"127.0.0.1:{host.port}:22",
                *([f"127.0.0.1:{host.http_port}:80"] if host.http_port else []),
                *([f"127.0.0.1:{host.https_port}:443"] if host.https_port else []),
            ],
            "stop_grace_period": "5s",
            "tmpfs": ["/run"],
            "labels": {LAB_LABEL: project, HOST_LABEL: host.name, **extra_labels},
            **options,
            "volumes": [
                f"{host.name}-docker:{engine_dir}",
                *dind_volumes,
                *_engine_socket(engines, host.name, kind.engine),
            ],
        }
        volumes[f"{host.name}-docker"] = {"labels": {LAB_LABEL: project}}
    if bastion is not None:
        services[BASTION] = bastion_service(project, bastion, image, extra_labels)
    if acme is not None:
        services[ACME] = acme_service(project, acme, image, extra_labels)
    return {
        "version": COMPOSE_FORMAT,
        "x-generated-by": "minidock lab (minidock/lab/compose.py); do not edit",
        "services": services,
        "volumes": volumes,
    }


# Docker 26 and 28 (and Podman) write IPv6 sysctls that a container's read-only /proc/sys
# refuses ("failed to disable IPv6 on container's interface eth0"). The docker CLI's
# `--security-opt systempaths=unconfined` lifts it, but as the CLI's own translation: the
# engine refuses that option from Compose 1.29 ("invalid --security-opt"). With the caps a
# host has, its PID 1 makes /proc/sys writable itself (measured: `docker run` then works).
PROC_SYS_RW = "mount -o remount,rw /proc/sys 2>/dev/null || true\n"


def _engine_socket(engines: Path | None, host: str, engine: str) -> list[str]:
    """The bind of a Docker host's second dockerd socket to this machine (none for Podman,
    which has no daemon, or without `engines`)."""
    if engines is None or engine == "podman":
        return []
    return [f"{engines / host}:{ENGINE_SOCKET_DIR}"]


def _init(init: str, kind: str) -> str:
    """A host's PID 1 script: the default kind's as it is; the others make /proc/sys
    writable first, and a Podman host has no daemon to start."""
    if kind == DEFAULT_KIND:
        return init
    if HOST_KINDS[kind].engine == "podman":
        init = init.replace(START_DOCKERD, ":")
    return PROC_SYS_RW + init


def _escape(value: Any) -> Any:
    """Every string with "$" doubled: "$" is Compose's interpolation sigil."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {key: _escape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escape(item) for item in value]
    return value


def compose_text(document: dict[str, Any]) -> str:
    """The compose file's text: the document as JSON, interpolation escaped."""
    return json.dumps(_escape(document), indent=2) + "\n"
