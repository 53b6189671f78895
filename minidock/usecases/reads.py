"""Read-only use cases: `status` (observed now, recording nothing) and the event log. They
take no lock, so they answer while `watch` or another writer works."""

from __future__ import annotations

from collections.abc import Callable

from minidock.model import Event
from minidock.runner import all_secrets, decide, redacted
from minidock.status import status_document
from minidock.store import StateLocation
from minidock.usecases.access import read_desired, reading, require_applied
from minidock.usecases.outcomes import EventFilter, EventsOutcome, StatusOutcome
from minidock.usecases.runtime import Runtime, connected

EVERY = EventFilter()  # no filter: every event


async def status(directory: StateLocation, runtime: Runtime) -> StatusOutcome:
    """Services, tasks and hosts: the stored state, a fresh observation and the plan a
    pass would make of it (pending reasons, what it waits for), secrets masked."""
    require_applied(directory)
    with reading(directory) as store:
        current = store.load()
        desired = read_desired(store, directory)
    async with connected(runtime) as executor:
        result = await decide(
            desired.cluster, desired.inventory, current, executor, clock=runtime.clock.now
        )
    plan = redacted(result.plan, all_secrets(result.plan.state))
    return StatusOutcome(status_document(current, desired.inventory, result.observed, plan))


def events(
    directory: StateLocation, *, limit: int = 50, where: EventFilter = EVERY
) -> EventsOutcome:
    """The newest `limit` events that `where` keeps, oldest first (0: all of them)."""
    require_applied(directory)
    with reading(directory) as store:
        found = [(i, e) for i, e in store.events(limit=0) if where.keeps(e)]
    shown = found[-limit:] if limit > 0 else found
    return EventsOutcome(tuple(e for _, e in shown), ids=tuple(i for i, _ in shown))


async def follow_events(
    directory: StateLocation,
    runtime: Runtime,
    seen: Callable[[int, Event], None],
    *,
    after: int,
    where: EventFilter = EVERY,
    interval: float = 1.0,
) -> None:
    """`events --follow`: every new event `where` keeps, as it is committed, until
    cancelled (Ctrl-C). Reads only: no lock, so it runs beside `watch` or cron."""
    require_applied(directory)
    while True:
        with reading(directory) as store:
            new = store.events(limit=0, since_id=after)
        for i, e in new:
            after = i
            if where.keeps(e):
                seen(i, e)
        await runtime.clock.sleep(interval)
