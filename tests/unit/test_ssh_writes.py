"""minidock.ssh's TCP transport for asyncssh: the writes of one turn of the event loop
leave in one send, in order, and nothing written is lost to a close or an abort. (A
stream into a host was two sends per 32 KiB: asyncssh's ignore packet, then the data.)"""

from __future__ import annotations

import asyncio
from typing import Any

from minidock.ssh import _Direct, _GatheredWrites


class Recorded(asyncio.Transport):
    """A transport that records each send (one `write` or `writelines` call)."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[bytes] = []
        self.ended = ""

    def write(self, data: Any) -> None:
        self.sends.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.sends.append(b"".join(list_of_data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return bool(self.ended)

    def close(self) -> None:
        self.ended = "closed"

    def abort(self) -> None:
        self.ended = "aborted"

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("10.0.0.1", 22)}.get(name, default)


def test_the_writes_of_one_turn_leave_in_one_send_in_order() -> None:
    async def scenario() -> list[bytes]:
        under = Recorded()
        gathered = _GatheredWrites(under)
        for packet in (b"ignore", b"data-1", b"ignore", b"data-2"):
            gathered.write(packet)
        assert under.sends == []  # not before the turn ends
        assert gathered.get_write_buffer_size() == 24
        await asyncio.sleep(0)
        gathered.write(b"next")
        await asyncio.sleep(0)
        assert gathered.get_extra_info("peername") == ("10.0.0.1", 22)
        return under.sends

    assert asyncio.run(scenario()) == [b"ignoredata-1ignoredata-2", b"next"]


def test_a_close_or_an_abort_sends_what_is_waiting_first() -> None:
    async def scenario(end: str) -> tuple[list[bytes], str]:
        under = Recorded()
        gathered = _GatheredWrites(under)
        gathered.write(b"disconnect")
        gathered.close() if end == "close" else gathered.abort()
        gathered.write(b"too late")
        await asyncio.sleep(0)
        return under.sends, under.ended

    assert asyncio.run(scenario("close")) == ([b"disconnect"], "closed")
    assert asyncio.run(scenario("abort")) == ([b"disconnect"], "aborted")


def test_a_direct_connection_hands_its_protocol_the_gathered_transport() -> None:
    """Over a real TCP connection (a local listener): what asyncssh's connection is given
    gathers its writes, and the bytes arrive whole and in order."""
    received = bytearray()

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            received.extend(data)

    class Connection(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

    async def scenario() -> None:
        server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, connection = await _Direct().create_connection(Connection, "127.0.0.1", port)
        assert isinstance(connection.transport, _GatheredWrites)
        for i in range(100):
            connection.transport.write(b"%03d" % i)
        connection.transport.close()
        while len(received) < 300:
            await asyncio.sleep(0.01)
        server.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert bytes(received) == b"".join(b"%03d" % i for i in range(100))
