"""A lab host's Docker engine through its socket on this machine, spoken to in HTTP.

Each Docker lab host's dockerd also listens on a Unix socket the lab binds to
`.lab/engines/HOST/docker.sock` (docs/lab.md). `Lab.docker` runs the `docker` CLI against
it; the lab's reset between two tests needs only two calls of the Engine API (list the
containers, remove one), and making them here costs no process at all: a `docker` CLI
run is about 30 to 50 ms of CPU, and a reset made some twenty of them (docs/testing.md).
Three endpoints of the documented API, unversioned (the engine's own version answers),
with the standard library's HTTP client: no SDK for three requests.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from minidock.lab.errors import LabError

__all__ = ["answers", "labelled_containers", "remove_container", "remove_labelled"]


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 to the engine listening on a Unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _request(path: Path, method: str, url: str, timeout: float) -> tuple[int, bytes]:
    """(status, body) of one request; OSError when the engine cannot be reached."""
    conn = _UnixConnection(path, timeout)
    try:
        conn.request(method, url)
        response = conn.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as exc:  # not HTTP on the other end
        raise OSError(f"{path}: {exc!r}") from exc
    finally:
        conn.close()


def answers(path: Path, timeout: float = 0.5) -> bool:
    """Does a Docker engine answer a ping on the Unix socket `path` within `timeout`? A
    paused host's kernel still accepts the connection, so only an answer counts."""
    try:
        return _request(path, "GET", "/_ping", timeout)[0] == 200
    except OSError:  # absent, refused (stopped, dockerd dead), timed out (paused), not HTTP
        return False


def labelled_containers(path: Path, labels: Iterable[str], timeout: float = 10.0) -> list[str]:
    """The ids of the containers (any state) carrying any of the label keys `labels`."""
    status, body = _request(path, "GET", "/containers/json?all=1", timeout)
    if status != 200:
        raise LabError(f"{path}: listing containers answered {status}: {body[:200]!r}")
    wanted = set(labels)
    listed: list[dict[str, Any]] = json.loads(body)
    return [c["Id"] for c in listed if wanted & set(c.get("Labels") or {})]


def remove_container(path: Path, container: str, timeout: float = 30.0) -> None:
    """`docker rm -f -v CONTAINER`; one already gone (or going) is no failure."""
    url = f"/containers/{quote(container, safe='')}?force=1&v=1"
    status, body = _request(path, "DELETE", url, timeout)
    if status not in (204, 404, 409):  # 409: its removal is already in progress
        raise LabError(f"{path}: removing {container} answered {status}: {body[:200]!r}")


def remove_labelled(path: Path, labels: Iterable[str]) -> int:
    """Remove every container carrying any of `labels` (as the reset's CLEAN_SCRIPT does
    with the CLI); how many were removed."""
    ids = labelled_containers(path, labels)
    for container in ids:
        remove_container(path, container)
    return len(ids)
