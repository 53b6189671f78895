"""What a real SSH session finds on each lab host, through the controller's own path.

Hosts are probed with `minidock.ssh.SSHExecutor` (the executor `minidock reconcile` uses:
the lab's key, the pinned known_hosts, no ~/.ssh/config) running `minidock.commands`
argv, so "the lab is ready" means exactly "the controller can reach it". `connect` gives
a raw asyncssh session built from the same options, for tests that assert on asyncssh's
own exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from minidock.commands.facts import ParseError, parse_ids, running_ids_argv
from minidock.lab.directory import CONNECT_TIMEOUT, LOOPBACK, SSH_USER, LabHost
from minidock.lab.errors import LabError
from minidock.model import Host
from minidock.ssh import CommandTimeout, SSHExecutor, Unreachable, connect_options

__all__ = ["HostStatus", "Probe", "connect", "probe_hosts", "ssh_host", "wait_until_ready"]

PROBE_TIMEOUT = CONNECT_TIMEOUT * 5  # `docker ps` on a host that answered SSH


@dataclass(frozen=True)
class HostStatus:
    """What `lab status` shows for a host."""

    name: str
    container: str
    state: str  # docker's container state: running, paused, exited, ... or "missing"
    port: int
    ssh: bool  # an SSH session with the lab's key, verified against known_hosts
    docker: bool  # `docker ps` over that session succeeded
    running: int | None  # containers running on the host (None when docker did not answer)
    error: str = ""
    http_port: int = 0  # loopback port of the host's port 80 (0: not published)
    https_port: int = 0  # loopback port of the host's port 443
    private_address: str = ""  # the address other hosts reach it on (the lab network's)

    def document(self) -> dict[str, object]:
        """This host in `lab status --json` (docs/lab.md)."""
        return {
            "name": self.name,
            "ssh_port": self.port,
            "http_port": self.http_port,
            "https_port": self.https_port,
            "private_address": self.private_address,
            "container": self.container,
            "state": self.state,
            "ssh": self.ssh,
            "docker": self.docker,
            "running": self.running,
            "error": self.error,
        }


@dataclass(frozen=True)
class Probe:
    """One probe of one host: could SSH log in, did docker answer, how many containers run."""

    ssh: bool
    docker: bool
    running: int | None
    error: str = ""

    @property
    def ready(self) -> bool:
        return self.ssh and self.docker


def ssh_host(host: LabHost, key: Path, known_hosts: Path) -> Host:
    """A lab host as the controller's model sees it (what inventory/lab.toml says)."""
    return Host(
        name=host.name,
        address=LOOPBACK,
        port=host.port,
        user=SSH_USER,
        identity_file=str(key),
        known_hosts=str(known_hosts),
        connect_timeout=CONNECT_TIMEOUT,
        command_timeout=PROBE_TIMEOUT,
    )


async def probe(executor: SSHExecutor, host: Host) -> Probe:
    """SSH in and run `docker ps`: the whole readiness check of a lab host."""
    try:
        result = await executor.run(host, running_ids_argv())
    except (Unreachable, CommandTimeout) as exc:
        return Probe(False, False, None, f"ssh: {exc.reason}")
    if result.exit_status != 0:
        return Probe(True, False, None, f"docker: {result.stderr.strip()}")
    try:
        return Probe(True, True, len(parse_ids(result.stdout)))
    except ParseError as exc:
        return Probe(True, False, None, f"docker: {exc}")


async def probe_hosts(hosts: Sequence[Host]) -> list[Probe]:
    """Probe every host once, concurrently, on fresh connections."""
    executor = SSHExecutor()
    try:
        return await asyncio.gather(*(probe(executor, h) for h in hosts))
    finally:
        await executor.close()


async def wait_until_ready(hosts: Sequence[Host], timeout: float) -> None:
    """Probe each host until it is ready; LabError naming the first that is not in time."""
    deadline = time.monotonic() + timeout
    executor = SSHExecutor()

    async def one(host: Host) -> None:
        while True:
            found = await probe(executor, host)
            if found.ready:
                return
            if time.monotonic() > deadline:
                raise LabError(f"{host.name}: not ready after {timeout:.0f}s: {found.error}")
            await asyncio.sleep(0.2)

    try:
        await asyncio.gather(*(one(h) for h in hosts))
    finally:
        await executor.close()


@contextlib.asynccontextmanager
async def connect(host: Host, **overrides: Any) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A raw asyncssh session to a host with the executor's options (keyword arguments
    override asyncssh.connect options, e.g. `known_hosts=`)."""
    options = {**connect_options(host), **overrides}
    async with asyncssh.connect(host.address, **options) as conn:
        yield conn
