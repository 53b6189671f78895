"""`minidock serve`: Prometheus metrics, the status and events API and a live dashboard
over HTTP, read-only (docs/observability.md).

Built on the standard library (`http.server.ThreadingHTTPServer`, one thread per request,
and one asyncio loop thread for the SSH observation): no dependency to add and nothing for
`minidock reconcile` to import (the CLI loads this package only for `serve`). A handful of
browsers and a Prometheus are the load it is for; put a TLS proxy in front off loopback.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from minidock import usecases
from minidock.serve.access import Access, Listen, ServeInputError, load_token, parse_listen
from minidock.serve.http import App, Handler
from minidock.serve.shared import EventHub, LoopThread, SharedReading

__all__ = [
    "Access",
    "Listen",
    "ServeInputError",
    "Serving",
    "load_token",
    "parse_listen",
    "serve",
    "start",
]


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # an open event stream never holds up the exit

    def __init__(self, listen: Listen, handler: type[Handler]) -> None:
        if ":" in listen.host:
            self.address_family = socket.AF_INET6
        super().__init__((listen.host, listen.port), handler)


@dataclass
class Serving:
    """A server listening (at `url`) and what it shares; `run` serves until interrupted,
    `close` lets everything go."""

    server: _Server
    reading: SharedReading
    loop: LoopThread
    url: str

    def run(self) -> None:
        self.server.serve_forever(poll_interval=0.5)

    def close(self) -> None:
        self.server.server_close()
        self.reading.close()
        self.loop.stop()


def start(
    directory: usecases.StateLocation,
    runtime: usecases.Runtime,
    listen: Listen,
    access: Access,
    *,
    interval: float,
    cluster: str | None = None,
) -> Serving:
    """Listen (the port chosen when 0) and start following the event log. Off loopback
    without a token it refuses (ServeInputError) before it listens."""
    if not listen.loopback and access.token is None:
        raise ServeInputError(
            f"--listen {listen.host}:{listen.port} is off loopback: give --token-file FILE "
            "(a bearer token), or listen on 127.0.0.1"
        )
    loop = LoopThread()
    reading = SharedReading(directory, runtime, loop, interval, cluster)
    hub = EventHub(directory, runtime, cluster)
    app = App(access, reading, hub, directory, cluster)
    handler = type("BoundHandler", (Handler,), {"app": app})
    try:
        server = _Server(listen, handler)
    except OSError as exc:
        loop.stop()
        raise ServeInputError(f"--listen {listen.host}:{listen.port}: {exc.strerror}") from None
    loop.spawn(hub.follow())
    return Serving(server, reading, loop, listen.url(server.server_address[1]))


def serve(
    directory: usecases.StateLocation,
    runtime: usecases.Runtime,
    listen: Listen,
    access: Access,
    *,
    interval: float,
    cluster: str | None = None,
    ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve until interrupted; `ready(url)` once listening."""
    serving = start(directory, runtime, listen, access, interval=interval, cluster=cluster)
    try:
        ready(serving.url)
        serving.run()
    finally:
        serving.close()
