"""Docker's errors recognised: named causes read from a failed docker command's stderr."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DaemonDown",
    "DockerError",
    "ImageNotFound",
    "NameConflict",
    "NoSuchNetwork",
    "PortTaken",
    "daemon_down",
    "docker_error",
    "image_not_found",
    "name_conflict",
    "no_such_network",
    "port_taken",
]


# -- docker's errors --------------------------------------------------------------------------
# Docker says why a command failed only in words on stderr; each parser below reads one
# cause from them (tests/data/docker/errors/ holds the real outputs they are tested on).
# Docker puts the cause last ("...: Bind for 0.0.0.0:8080 failed: port is already
# allocated"); each value keeps Docker's own words for that cause in `said`.
@dataclass(frozen=True)
class NameConflict:
    """A container of that name exists already (`docker run`/`create`): for a task, the
    replay of a start whose record was lost, which the act path adopts."""

    name: str
    said: str

    @property
    def cause(self) -> str:
        return f"a container named {self.name} exists already"


@dataclass(frozen=True)
class PortTaken:
    """The host port is taken: published by another container ("port is already
    allocated") or held by a process outside Docker ("address already in use")."""

    address: str  # as Docker gives it: "0.0.0.0:8080", "127.0.0.1:8080"
    by_container: bool
    said: str

    @property
    def cause(self) -> str:
        holder = "another container" if self.by_container else "a process outside Docker"
        return f"host port {self.address} is taken by {holder}"


@dataclass(frozen=True)
class ImageNotFound:
    """The image is not on the host (`docker image inspect`, `run --pull never`) or its
    registry has no such image or tag (`docker pull`)."""

    image: str
    in_registry: bool
    said: str

    @property
    def cause(self) -> str:
        if self.in_registry:
            return f"image {self.image} is not in its registry (check the name and tag)"
        return f"image {self.image} is not on the host"


@dataclass(frozen=True)
class NoSuchNetwork:
    """A network the command names does not exist on the host."""

    network: str
    said: str

    @property
    def cause(self) -> str:
        return f"network {self.network} does not exist on the host"


@dataclass(frozen=True)
class DaemonDown:
    """The docker client found no daemon behind its socket (dockerd is not running)."""

    socket: str
    said: str

    @property
    def cause(self) -> str:
        return f"the Docker daemon is not running (nothing answers at {self.socket})"


DockerError = NameConflict | PortTaken | ImageNotFound | NoSuchNetwork | DaemonDown

_NAME_CONFLICT = re.compile(
    r'Conflict\. The container name "/?(?P<name>[^"]+)" is already in use by container'
    r' "[0-9a-f]+"'
)
_PORT_ALLOCATED = re.compile(r"Bind for (?P<address>\S+) failed: port is already allocated")
_ADDRESS_IN_USE = re.compile(
    r"listen (?:tcp|udp|sctp)[46]? (?P<address>\S+): bind: address already in use"
)
_NO_SUCH_IMAGE = re.compile(r"No such image: (?P<image>\S+)")
_NO_MANIFEST = re.compile(r"manifest for (?P<image>\S+) not found(?:: manifest unknown)*")
_PULL_DENIED = re.compile(
    r"pull access denied for (?P<image>[^\s,]+), repository does not exist or may require"
    r" 'docker login'"
)
_NO_SUCH_NETWORK = re.compile(r"network (?P<network>\S+) not found")
_DAEMON_DOWN = re.compile(
    r"Cannot connect to the Docker daemon at (?P<socket>\S+?)\.? Is the docker daemon running\?"
)


def name_conflict(stderr: str) -> NameConflict | None:
    """`Conflict. The container name "/NAME" is already in use by container "ID"`."""
    found = _NAME_CONFLICT.search(stderr)
    return NameConflict(found["name"], found[0]) if found else None


def port_taken(stderr: str) -> PortTaken | None:
    """`Bind for ADDRESS failed: port is already allocated` (another container), or the
    userland proxy's `listen tcp4 ADDRESS: bind: address already in use` (a process)."""
    found = _PORT_ALLOCATED.search(stderr)
    if found:
        return PortTaken(found["address"], True, found[0])
    found = _ADDRESS_IN_USE.search(stderr)
    return PortTaken(found["address"], False, found[0]) if found else None


def image_not_found(stderr: str) -> ImageNotFound | None:
    """`No such image: IMAGE` (not on the host), `manifest for IMAGE not found` or `pull
    access denied for IMAGE, repository does not exist ...` (not in the registry)."""
    found = _NO_SUCH_IMAGE.search(stderr)
    if found:
        return ImageNotFound(found["image"], False, found[0])
    found = _NO_MANIFEST.search(stderr) or _PULL_DENIED.search(stderr)
    return ImageNotFound(found["image"], True, found[0]) if found else None


def no_such_network(stderr: str) -> NoSuchNetwork | None:
    """`network NAME not found` (`docker run --network`, `docker network connect`)."""
    found = _NO_SUCH_NETWORK.search(stderr)
    return NoSuchNetwork(found["network"], found[0]) if found else None


def daemon_down(stderr: str) -> DaemonDown | None:
    """`Cannot connect to the Docker daemon at SOCKET. Is the docker daemon running?`"""
    found = _DAEMON_DOWN.search(stderr)
    return DaemonDown(found["socket"], found[0]) if found else None


def docker_error(stderr: str) -> DockerError | None:
    """The cause a failed docker command gives, when it is one of the named ones.

    Read in this order: no daemon (nothing else can be true), a taken port (whose text
    says "already in use" too, and is never a name conflict), the name conflict, a
    missing network, a missing image."""
    for parser in (daemon_down, port_taken, name_conflict, no_such_network, image_not_found):
        found = parser(stderr)
        if found is not None:
            return found
    return None
