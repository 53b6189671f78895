"""Test doubles for the executor seam (httpx MockTransport style): unit tests only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from minidock.model import Host
from minidock.ssh import Result

Handler = Callable[[Host, list[str], str | None], Result]


@dataclass(frozen=True)
class Call:
    host: str
    argv: list[str]
    input: str | None
    timeout: float | None


class FakeExecutor:
    """An Executor whose hosts are one function: handler(host, argv, input) -> Result.

    The handler may raise Unreachable or CommandTimeout like the real executor. Every call
    is recorded in `calls`; `max_in_flight` shows how many ran at once (each call yields to
    the event loop before answering, so concurrent callers really overlap).
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[Call] = []
        self.closed = False
        self.in_flight = 0
        self.max_in_flight = 0

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        self.calls.append(Call(host.name, list(argv), input, timeout))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            return self.handler(host, list(argv), input)
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        self.closed = True

    def argvs(self, host: str | None = None) -> list[list[str]]:
        """The argvs run so far, on one host or all."""
        return [c.argv for c in self.calls if host is None or c.host == host]


def ok(stdout: str = "") -> Result:
    return Result(0, stdout, "")


def fail(stderr: str, exit_status: int = 1) -> Result:
    return Result(exit_status, "", stderr)
