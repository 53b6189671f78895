"""What the use cases reach the world through, passed in explicitly: hosts (an executor
factory), time (a clock) and the controller's own Docker engine (for pushed and built
images), and
what a command carries from start to end: its maskers (one per cluster: every line it
shows or records is masked by them) and its interrupt. The CLI wires the real ones; tests
wire fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from minidock.act.build import ImageBuilder, LocalBuilder
from minidock.act.push import ControllerEngine, LocalEngine
from minidock.masking import Masks
from minidock.ssh import Executor

ExecutorFactory = Callable[[], Executor]
EngineFactory = Callable[[], ControllerEngine]
BuilderFactory = Callable[[], ImageBuilder]


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
    writer's lock): the CLI sends it to stderr, so no wait is silent. `masks`: the
    command's maskers (minidock.masking.Masks), one per cluster, for all its passes and
    documents."""

    executor: ExecutorFactory
    clock: Clock
    engine: EngineFactory = LocalEngine
    builder: BuilderFactory = LocalBuilder  # the controller's engine, for built images
    notice: Callable[[str], None] = unheard
    interrupt: Interrupt = field(default_factory=lambda: Interrupt())
    masks: Masks = field(default_factory=Masks)


class Interrupt:
    """SIGINT or SIGTERM, as the use cases see it. While passes run (`gentle`), a signal
    only asks them to stop: the pass under way finishes (its acts finish or time out and
    are recorded) and no pass starts after it; the CLI installs the handlers and sets
    `signal`. Outside passes, or at a second signal, the command stops at once."""

    def __init__(self) -> None:
        self._signal = ""  # the signal's name once one came ("SIGINT", "SIGTERM")
        self._gentle = 0
        self._listeners: list[Callable[[], None]] = []
        self.doing = "finishing the pass under way"  # what a signal now waits for

    @property
    def signal(self) -> str:
        return self._signal

    @signal.setter
    def signal(self, name: str) -> None:
        """A signal came: it is recorded, and every listener is told at once."""
        self._signal = name
        for listener in list(self._listeners):
            listener()

    @contextmanager
    def listening(self, listener: Callable[[], None]) -> Iterator[None]:
        """Within the block, `listener` is called when a signal comes (a one-off task's
        wait is cancelled by it, so that its container is removed before the exit)."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    @property
    def requested(self) -> bool:
        return bool(self.signal)

    @property
    def gentle(self) -> bool:
        """Whether a signal now lets the work under way finish (passes are running)."""
        return self._gentle > 0

    @contextmanager
    def passes(self, doing: str = "finishing the pass under way") -> Iterator[None]:
        """The block runs passes (or other work that must end cleanly, `doing` it when a
        signal comes): a signal meanwhile is a request, not an abort."""
        self._gentle += 1
        before, self.doing = self.doing, doing
        try:
            yield
        finally:
            self.doing = before
            self._gentle -= 1


@asynccontextmanager
async def connected(runtime: Runtime) -> AsyncIterator[Executor]:
    """A fresh executor for one use case, closed afterwards (its SSH connections too)."""
    executor = runtime.executor()
    try:
        yield executor
    finally:
        await executor.close()
