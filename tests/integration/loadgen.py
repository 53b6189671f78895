"""A load generator that records every response: asyncio HTTP/1.1 clients, one request per
connection, against a loopback port (the lab host's published port 80), and HTTP/2 clients
over TLS (`H2Load`, the published port 443). Used by the ingress tests (every failure
counts) and benchmarks/bench_ingress.py."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar, Self

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)

__all__ = ["H2Load", "Load", "Paced", "Reply", "get", "get_any", "get_h2"]


@dataclass(frozen=True)
class Reply:
    """One request: when it started, how long it took, its status (0: no answer) and body
    or error."""

    started: float
    seconds: float
    status: int
    text: str
    refused: bool = False  # HTTP/2: the server said it did not process it (safe to retry)

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
        try:
            request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), timeout)
        finally:
            writer.close()  # a reply that timed out too: its socket is not left open
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


@dataclass
class Paced(Background):
    """`with Paced(port, "app.test", rate=3) as load:` starts a GET every 1 / `rate`
    seconds, whether the earlier ones have ended or not (an open loop: the rate the test
    sets is the rate the proxy sees, however slow a reply), until the block ends; the test
    may change `rate` in the block. `replies` holds every one, `sent` counts them as they
    start."""

    port: int
    host: str
    rate: float
    replies: list[Reply] = field(default_factory=list)
    sent: int = 0

    async def _one(self) -> None:
        self.replies.append(await get(self.port, self.host))

    async def _run(self) -> None:
        pending: set[asyncio.Task[None]] = set()
        due = time.monotonic()
        while not self._stop.is_set():
            task = asyncio.create_task(self._one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            self.sent += 1
            due = max(due + 1 / self.rate, time.monotonic() - 1.0)  # no burst after a stall
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        if pending:
            await asyncio.gather(*pending)

    def failed(self) -> list[Reply]:
        return [r for r in self.replies if not r.ok]


async def get_h2(port: int, host: str, root: str, path: str = "/", timeout: float = 30.0) -> Reply:
    """One GET over HTTP/2 on a connection of its own, as curl does: TLS to 127.0.0.1:port
    with SNI and :authority `host`, verified against the PEM CA `root`, ALPN h2 only; the
    preface, SETTINGS and the request's HEADERS sent at once. Recorded whatever happens; a
    reply `refused` when the server said it did not process the request: a GOAWAY whose
    last-stream-id is below the request's stream, or RST_STREAM REFUSED_STREAM, which RFC
    9113 (sections 6.8 and 8.7) lets a client retry on a new connection, whatever the
    method. A failed reply's text lists the frames received, in order.

    Frames, not Python's `h2` state machine: that one refuses every frame after a GOAWAY,
    even the response to a stream the GOAWAY says will be processed."""
    started = time.monotonic()
    context = ssl.create_default_context(cadata=root)
    context.set_alpn_protocols(["h2"])
    frames: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=host
            )
            try:
                return await _exchange(reader, writer, host, path, started, frames)
            finally:
                # aborted, not closed: a TLS close waits (up to 30 s) for the server's
                # close_notify or FIN, and the load's loop may end first, leaving the
                # socket open (an unclosed-socket error in the test's teardown)
                writer.transport.abort()
                await writer.wait_closed()
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        text = f"{type(exc).__name__}: {exc} after {frames}"
        return Reply(started, time.monotonic() - started, 0, text)


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
STREAM = 1  # the request's: the first a client opens
REFUSED_STREAM = 0x7


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    path: str,
    started: float,
    frames: list[str],
) -> Reply:
    def reply(status: int, text: str, refused: bool = False) -> Reply:
        return Reply(started, time.monotonic() - started, status, text, refused)

    tls = writer.get_extra_info("ssl_object")
    if tls is None or tls.selected_alpn_protocol() != "h2":
        return reply(0, "the server did not take h2 (ALPN)")
    head = [(":method", "GET"), (":scheme", "https"), (":authority", host), (":path", path)]
    flags = ["END_HEADERS", "END_STREAM"]
    request = HeadersFrame(STREAM, hpack.Encoder().encode(head), flags=flags)
    writer.write(PREFACE + SettingsFrame(0).serialize() + request.serialize())
    await writer.drain()
    decoder, block, status, body = hpack.Decoder(), b"", 0, bytearray()
    while True:
        frame, length = Frame.parse_frame_header(memoryview(await reader.readexactly(9)))
        frame.parse_body(memoryview(await reader.readexactly(length)))
        frames.append(_frame(frame))
        match frame:
            case SettingsFrame() if "ACK" not in frame.flags:
                writer.write(SettingsFrame(0, flags=["ACK"]).serialize())
            case PingFrame() if "ACK" not in frame.flags:
                writer.write(PingFrame(0, frame.opaque_data, flags=["ACK"]).serialize())
            case GoAwayFrame() if frame.last_stream_id < STREAM:
                return reply(0, f"not processed: {frames}", refused=True)
            case RstStreamFrame() if frame.stream_id == STREAM:
                return reply(0, f"reset: {frames}", refused=frame.error_code == REFUSED_STREAM)
            case HeadersFrame() | ContinuationFrame() if frame.stream_id == STREAM:
                block += frame.data
                if "END_HEADERS" in frame.flags:
                    status = status or int(dict(decoder.decode(block))[":status"])
                    block = b""
            case DataFrame() if frame.stream_id == STREAM:
                body += frame.data
        if frame.stream_id == STREAM and "END_STREAM" in frame.flags:
            return reply(status, body.decode(errors="replace"))
        await writer.drain()


def _frame(frame: Frame) -> str:
    """A received frame in a word, with what a GOAWAY or a reset said."""
    name = type(frame).__name__.removesuffix("Frame").upper()
    match frame:
        case GoAwayFrame():
            return f"GOAWAY(last_stream_id={frame.last_stream_id}, error={frame.error_code})"
        case RstStreamFrame():
            return f"RST_STREAM({frame.stream_id}, error={frame.error_code})"
    flags = f" {'|'.join(sorted(frame.flags))}" if frame.flags else ""
    return f"{name}({frame.stream_id}{flags})"


@dataclass
class H2Load(Background):
    """`with H2Load(port, "app.test", root) as load:` keeps `clients` HTTP/2 requests in
    flight over TLS, each on a connection of its own (`get_h2`), until the block ends;
    `replies` holds every one. With `retry`, a request the server refused (`Reply.refused`:
    not processed, per its GOAWAY) is sent again on a new connection, up to 3 times, as
    RFC 9113 allows and browsers do; `refusals` keeps each refused attempt. Without it, a
    refused request is a failure, as curl 7.88 makes it (exit 16)."""

    port: int
    host: str
    root: str
    clients: int = 4
    pause: float = 0.0
    retry: bool = True
    replies: list[Reply] = field(default_factory=list)
    refusals: list[Reply] = field(default_factory=list)

    async def _client(self) -> None:
        while not self._stop.is_set():
            first = reply = await get_h2(self.port, self.host, self.root)
            for _ in range(3 if self.retry else 0):
                if not reply.refused:
                    break
                self.refusals.append(reply)
                reply = await get_h2(self.port, self.host, self.root)
            seconds = reply.started + reply.seconds - first.started
            self.replies.append(replace(reply, started=first.started, seconds=seconds))
            if self.pause:
                await asyncio.sleep(self.pause)

    async def _run(self) -> None:
        await asyncio.gather(*(self._client() for _ in range(self.clients)))

    def failed(self) -> list[Reply]:
        return [r for r in self.replies if not r.ok]

    def bodies(self) -> set[str]:
        return {r.text for r in self.replies if r.ok}
