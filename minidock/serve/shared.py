"""What every request of `minidock serve` shares: one observation of the fleet, made at
most every `interval` seconds however many clients ask (single flight: who asks while one
is being made waits for it), and one follower of the event log fanned out to every
Server-Sent Events client. The asyncio work (SSH observation, event reads) runs on one
event-loop thread; the HTTP threads wait on it."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from minidock import usecases
from minidock.model import Event
from minidock.ssh import Executor
from minidock.usecases.fleetview import FleetReading, read_fleet

__all__ = ["EventHub", "LoopThread", "SharedReading"]

T = TypeVar("T")
RESTART_AFTER = 5.0  # seconds before the event follower starts again after a failure
OBSERVE_LIMIT = 120.0  # seconds an observation may take before it is given up (said so)


class LoopThread:
    """An asyncio event loop on a daemon thread, for coroutines run from other threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="loop", daemon=True)
        self.thread.start()

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """`work`'s result; after `timeout` seconds it is cancelled (TimeoutError)."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self.loop)

    def stop(self) -> None:
        """Cancel what runs on the loop (the event follower), stop it and close it."""
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.call(_cancel_others(), timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_others() -> None:
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


@dataclass
class SharedReading:
    """The fleet reading every request gets: observed afresh only when the last one is
    `interval` seconds old. One executor (its SSH connections pooled) serves them all."""

    directory: usecases.StateLocation
    runtime: usecases.Runtime
    loop: LoopThread
    interval: float
    cluster: str | None = None
    clock: Callable[[], float] = time.monotonic
    observations: int = 0  # how many observations were made (a test counts them)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: FleetReading | None = None
    _last_at: float = 0.0
    _executor: Executor | None = None

    def current(self) -> FleetReading:
        with self._lock:
            if self._last is None or self.clock() - self._last_at >= self.interval:
                try:
                    self._last = self.loop.call(self._observe(), timeout=OBSERVE_LIMIT)
                except TimeoutError:
                    now = self.runtime.clock.now()
                    why = f"observation gave up after {OBSERVE_LIMIT:g} s"
                    self._last = FleetReading(now, error=why)
                self._last_at = self.clock()
                self.observations += 1
            return self._last

    async def _observe(self) -> FleetReading:
        if self._executor is None:
            self._executor = self.runtime.executor()
        try:
            return await read_fleet(
                self.directory, self.runtime, cluster=self.cluster, executor=self._executor
            )
        except Exception as exc:  # the server keeps serving; the reading says what failed
            return FleetReading(self.runtime.clock.now(), error=f"observation failed: {exc}")

    def close(self) -> None:
        if self._executor is not None:
            self.loop.call(self._executor.close(), timeout=10)


@dataclass
class EventHub:
    """One follower of the event log (every cluster's) for all SSE clients: each client
    subscribes a queue and gets `(id, event)` pairs as they are committed."""

    directory: usecases.StateLocation
    runtime: usecases.Runtime
    cluster: str | None = None
    _subscribers: set[queue.Queue[tuple[int, Event]]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def subscribe(self) -> queue.Queue[tuple[int, Event]]:
        q: queue.Queue[tuple[int, Event]] = queue.Queue(maxsize=1000)
        with self._lock:
            self._subscribers.add(q)
        return q

    def unsubscribe(self, q: queue.Queue[tuple[int, Event]]) -> None:
        with self._lock:
            self._subscribers.discard(q)

    def _publish(self, i: int, e: Event) -> None:
        with self._lock:
            listeners = list(self._subscribers)
        for q in listeners:
            if not q.full():  # a client that stopped reading loses events, not the server
                q.put_nowait((i, e))

    async def follow(self) -> None:
        """Follow the log until cancelled; a store that fails is followed again later (each
        new reason said once on stderr)."""
        said = ""
        while True:
            try:
                await usecases.follow_events(
                    self.directory, self.runtime, self._publish, cluster=self.cluster
                )
            except Exception as exc:  # etcd down, nothing applied yet: try again later
                if str(exc) != said:
                    said = str(exc)
                    print(f"minidock serve: events: {said}", file=sys.stderr, flush=True)
            await asyncio.sleep(RESTART_AFTER)
