"""When `watch` runs its next round: the bell its event streams ring, on the use case's
clock, over the pure timer (core.watching.PassTimer)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

from minidock.core.watching import PassTimer
from minidock.usecases.runtime import Clock

__all__ = ["Bell"]

log = logging.getLogger(__name__)


class Bell:
    """Rung by a host's event stream (`ring`); `wait` returns when the next round is due:
    at the resync, SETTLE after the first ring since the round began, or soon after a
    round that left work under way."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._timer = PassTimer(interval)
        self._rung = asyncio.Event()
        self.rings = 0  # how many times it was rung (tests)

    def ring(self, host: str = "", *, settle: bool = True) -> None:
        """An event on `host` (or its stream broke): a round is due soon (at once, not
        SETTLE after, for one that no other follows: `settle` False)."""
        self.rings += 1
        log.debug("rung by %s", host)
        self._timer = self._timer.event(self._clock.monotonic(), settle=settle)
        self._rung.set()

    def rung_from(
        self, loop: asyncio.AbstractEventLoop, by: str, *, settle: bool = True
    ) -> Callable[[], None]:
        """A ring for another thread (etcd's watch): `ring(by)` on `loop`'s own, soon."""

        def ring() -> None:
            loop.call_soon_threadsafe(functools.partial(self.ring, by, settle=settle))

        return ring

    def etcd_rings(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """The rings for etcd's news, from its watch's thread (roster.Heartbeat): a share's
        or an owner's write, settled as an event; an order for this watch's host, at once."""
        loop = asyncio.get_running_loop()
        return self.rung_from(loop, "etcd"), self.rung_from(loop, "etcd: an order", settle=False)

    def started(self) -> bool:
        """A round begins: the rings before now are its own. Whether it is a resync (its
        passes probe every host), else its passes probe only the hosts that need it."""
        now = self._clock.monotonic()
        full = self._timer.resync_due(now)
        self._timer = self._timer.started(now, full=full)
        self._rung.clear()
        return full

    def finished(self, *, under_way: bool, backoff_left: float | None = None) -> None:
        """The round ended, leaving work under way (a pass exited 3) or not; `backoff_left`:
        seconds to the soonest restart backoff's end, if one runs."""
        now = self._clock.monotonic()
        self._timer = self._timer.finished(now, under_way=under_way, backoff_left=backoff_left)

    async def wait(self) -> None:
        """Until the next round is due (the clock's sleep, cut short by a ring)."""
        while True:
            left = self._timer.wait(self._clock.monotonic())
            if left <= 0 and (self._timer.woken is not None or self._timer.busy is not None):
                return
            sleeping = asyncio.ensure_future(self._clock.sleep(left))
            rung = asyncio.ensure_future(self._rung.wait())
            done, _ = await asyncio.wait({sleeping, rung}, return_when=asyncio.FIRST_COMPLETED)
            for task in (sleeping, rung):
                if task not in done:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if sleeping in done:
                sleeping.result()  # a clock that ends the command (tests) raises here
                log.debug("next round after %.2fs", left)
                return
            self._rung.clear()  # rung: wait out the settle, then go
