"""The lab's loopback ports: each lab host publishes SSH (and HTTP, HTTPS) on a port of
127.0.0.1 picked at random in PORT_RANGE.

Labs start side by side (the pytest workers, the demo's lab beside the tests'), and a
port that looks free may not be: another lab may have picked it a moment ago and not yet
started its containers, or a host of another lab may be stopped (a fault), its port
unbound but still its own when it starts again. Both made `compose up` fail with "port is
already allocated". So a lab chooses its ports under one machine-wide lock, held until
its containers hold them (`choosing_ports`), and never takes a port any other container
on the engine publishes, running or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from minidock.lab import docker, local
from minidock.lab.errors import LabError

__all__ = [
    "PORT_RANGE",
    "choosing_ports",
    "keep_or_pick",
    "pick_port",
    "port_free",
    "port_lock",
    "published_elsewhere",
]

PORT_RANGE = (20000, 32000)  # below the kernel's ephemeral range, so pinned ports stay free
LOCK_PATH = Path(tempfile.gettempdir()) / "minidock-lab-ports.lock"


@contextlib.contextmanager
def choosing_ports(project: str, lock_path: Path = LOCK_PATH) -> Iterator[set[int]]:
    """Hold the machine's port lock; yield the ports other containers publish (not
    `project`'s own, which its hosts keep). Hold it until the lab's containers are
    created, so the ports they publish are seen by the next lab to choose."""
    with port_lock(lock_path):
        yield published_elsewhere(project)


@contextlib.contextmanager
def port_lock(lock_path: Path = LOCK_PATH) -> Iterator[None]:
    """The machine-wide lock of port choice (an flock, freed with the process). Read
    access is all an flock needs, so the file is opened read-only and made readable by
    every user whatever the umask: a lab of another user on the machine waits on the
    same lock rather than failing to open it."""
    fd = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def published_elsewhere(project: str) -> set[int]:
    """Every host port a container outside `project` publishes, in any state."""
    ids = docker.parse_words(local.run(docker.all_containers_argv()).stdout)
    if not ids:
        return set()
    # check=False: a container removed between the two commands is only left out
    proc = local.run(docker.published_ports_argv(ids), check=False)
    return docker.parse_published_ports(proc.stdout, except_project=project)


def port_free(port: int) -> bool:
    """Whether a socket may bind 127.0.0.1:port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(taken: set[int]) -> int:
    """A port of PORT_RANGE outside `taken` that nothing on 127.0.0.1 listens on; added
    to `taken`."""
    for _ in range(500):
        port = random.randrange(*PORT_RANGE)
        if port not in taken and port_free(port):
            taken.add(port)
            return port
    raise LabError(f"no free port on 127.0.0.1 in {PORT_RANGE}")


def keep_or_pick(previous: int, kept: bool, taken: set[int]) -> int:
    """A host's loopback port: its previous one while its container exists (unless it is
    taken), else a free one; added to `taken`."""
    if kept and previous and previous not in taken:
        taken.add(previous)
        return previous
    return pick_port(taken)
