"""The lab: a local fleet of SSH + Docker hosts in containers, for demos and tests.

Loaded only by `minidock lab ...` (and the integration tests): `minidock reconcile` and the
other commands never import this package. The modules, one duty each:

- `directory`: the lab's files under its root (`.lab/`, `inventory/lab.toml`), its hosts
- `images`: the host image and the workload images, built locally and cached by recipe
- `compose`: the host containers' compose document (JSON) and their DinD rights
- `bastion`: the optional bastion (`up --bastion`), its SSH config and inventory
- `fleet`: `Lab`, up / down / status / provision / reset
- `faults`: the `kill` modes and how `revive` heals them
- `ownership`: which lab owns a compose project and a root's files (every command checks)
- `containers`: the host containers through the local engine (states, ports, docker exec)
- `probe`: readiness and status over SSH, through `minidock.ssh.SSHExecutor`
- `docker`: argv builders and parsers for the local Docker engine and docker-compose
- `local`: local commands, pipes, atomic writes
- `cli`: the typer app `lab_app`
- `prebuild`: `python3 -m minidock.lab.prebuild`, the image builds with the standard library only

See docs/lab.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minidock.lazy import lazy_names

if TYPE_CHECKING:
    from minidock.lab.cli import lab_app
    from minidock.lab.directory import DEFAULT_PROJECT, LabHost, zone_for
    from minidock.lab.errors import LabError, NotOwnedError, UnknownHostError
    from minidock.lab.faults import KILL_MODES, KillMode
    from minidock.lab.fleet import Lab, remove_project
    from minidock.lab.images import (
        CRASH_IMAGE,
        WEB5_IMAGE,
        WEB6_IMAGE,
        WEB_BROKEN_IMAGE,
        WORKLOAD_IMAGES,
    )
    from minidock.lab.local import engine_available
    from minidock.lab.probe import HostStatus

# Each name is imported from its module when first asked for (PEP 562), so a module that
# needs only the standard library (`python3 -m minidock.lab.prebuild`, run before MiniDock's
# dependencies are installed: scripts/setup.sh --demo) loads none of the others.
_HOMES = {
    "lab_app": ".cli",
    "DEFAULT_PROJECT": ".directory",
    "LabHost": ".directory",
    "zone_for": ".directory",
    "LabError": ".errors",
    "NotOwnedError": ".errors",
    "UnknownHostError": ".errors",
    "KILL_MODES": ".faults",
    "KillMode": ".faults",
    "Lab": ".fleet",
    "remove_project": ".fleet",
    "CRASH_IMAGE": ".images",
    "WEB5_IMAGE": ".images",
    "WEB6_IMAGE": ".images",
    "WEB_BROKEN_IMAGE": ".images",
    "WORKLOAD_IMAGES": ".images",
    "engine_available": ".local",
    "HostStatus": ".probe",
}


__getattr__ = lazy_names(__name__, _HOMES)


__all__ = [
    "CRASH_IMAGE",
    "DEFAULT_PROJECT",
    "KILL_MODES",
    "WEB5_IMAGE",
    "WEB6_IMAGE",
    "WEB_BROKEN_IMAGE",
    "WORKLOAD_IMAGES",
    "HostStatus",
    "KillMode",
    "Lab",
    "LabError",
    "LabHost",
    "NotOwnedError",
    "UnknownHostError",
    "engine_available",
    "lab_app",
    "remove_project",
    "zone_for",
]
