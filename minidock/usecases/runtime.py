"""What the use cases reach the world through, passed in explicitly: hosts (an executor
factory), time (a clock) and the controller's own Docker engine (for pushed images). The
CLI wires the real ones; tests wire fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from minidock.push import ControllerEngine, LocalEngine
from minidock.ssh import Executor

ExecutorFactory = Callable[[], Executor]
EngineFactory = Callable[[], ControllerEngine]


@dataclass(frozen=True)
class Clock:
    """Wall time (decisions, events), a monotonic clock (deadlines: `--timeout`, lock
    patience) and the pause between passes or lock attempts."""

    now: Callable[[], float]
    monotonic: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]


def unheard(notice: str) -> None:
    """A `Runtime.notice` that tells no one."""


@dataclass(frozen=True)
class Runtime:
    """`notice` gets the one line a command prints before it waits (for another
    writer's lock): the CLI sends it to stderr, so no wait is silent."""

    executor: ExecutorFactory
    clock: Clock
    engine: EngineFactory = LocalEngine
    notice: Callable[[str], None] = unheard


@asynccontextmanager
async def connected(runtime: Runtime) -> AsyncIterator[Executor]:
    """A fresh executor for one use case, closed afterwards (its SSH connections too)."""
    executor = runtime.executor()
    try:
        yield executor
    finally:
        await executor.close()
