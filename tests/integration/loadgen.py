"""A load generator that records every response: asyncio HTTP/1.1 clients, one request per
connection, against a loopback port (the lab host's published port 80). Used by the
ingress tests (every failure counts) and benchmarks/bench_ingress.py."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar, Self

__all__ = ["Load", "Reply", "get", "get_any"]


@dataclass(frozen=True)
class Reply:
    """One request: when it started, how long it took, its status (0: no answer) and body
    or error."""

    started: float
    seconds: float
    status: int
    text: str

    @property
    def ok(self) -> bool:
        return self.status == 200


async def get_any(ports: tuple[int, ...], host: str, first: int = 0) -> tuple[Reply, int]:
    """A client behind DNS round-robin: the GET to `ports[first]`, and to the next address
    in turn while one gives no byte of a reply (refused; in the lab, docker's userland
    proxy in front renders a refused connection as one closed before any reply). The last
    reply, and how many addresses it took."""
    for tried in range(len(ports)):
        reply = await get(ports[(first + tried) % len(ports)], host)
        if reply.status != 0 or not (reply.text == "" or reply.text.startswith(_NO_REPLY)):
            return reply, tried + 1
    return reply, len(ports)


_NO_REPLY = ("ConnectionRefusedError", "ConnectionResetError")  # and "": closed, no byte


async def get(port: int, host: str, path: str = "/", timeout: float = 30.0) -> Reply:
    """One GET to 127.0.0.1:port with this Host header, recorded whatever happens."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
        writer.close()
    except (OSError, TimeoutError) as exc:
        return Reply(started, time.monotonic() - started, 0, f"{type(exc).__name__}: {exc}")
    head, _, body = raw.partition(b"\r\n\r\n")
    words = head.split(b" ", 2)
    status = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
    return Reply(started, time.monotonic() - started, status, body.decode(errors="replace"))


@dataclass
class Background:
    """A load generator's thread: its `_run` goes on in an event loop of its own from the
    start of a `with` block until the block ends (then `_stop` is set)."""

    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True)
    _thread: threading.Thread | None = field(default=None, kw_only=True)
    join_timeout: ClassVar[float] = 60.0

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=self.join_timeout)

    async def _run(self) -> None:
        raise NotImplementedError


@dataclass
class Load(Background):
    """`with Load(port, "app.test") as load:` keeps `clients` requests in flight (each
    client sends its next request when its last one ends, after `pause` seconds) until the
    block ends; `replies` holds every one. With no pause the clients take all the CPU they
    can get (about 260 requests a second and more than one core of two here, proxies and
    backends included); the lab tests pause (docs/testing.md "Suite time")."""

    port: int
    host: str
    clients: int = 4
    pause: float = 0.0
    others: tuple[int, ...] = ()  # more addresses of the name (DNS round-robin): get_any
    replies: list[Reply] = field(default_factory=list)
    fallbacks: int = 0  # requests that took another address than their first

    async def _client(self, n: int) -> None:
        ports = (self.port, *self.others)
        while not self._stop.is_set():
            if self.others:  # each request to the next address, as round-robin DNS spreads
                reply, took = await get_any(ports, self.host, first=n)
                self.fallbacks += took > 1
                n += 1
            else:
                reply = await get(self.port, self.host)
            self.replies.append(reply)
            if self.pause:
                await asyncio.sleep(self.pause)

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(n) for n in range(self.clients)))

    def failed(self) -> list[Reply]:
        return [r for r in self.replies if not r.ok]

    def bodies(self) -> set[str]:
        return {r.text for r in self.replies if r.ok}
