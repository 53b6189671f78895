"""Read-only use cases: `status` (observed now, recording nothing) and the event log. They
take no lock, so they answer while `watch` or another writer works."""

from __future__ import annotations

from minidock.runner import all_secrets, decide, redacted
from minidock.status import status_document
from minidock.store import StateLocation
from minidock.usecases.access import read_desired, reading, require_applied
from minidock.usecases.outcomes import EventsOutcome, StatusOutcome
from minidock.usecases.runtime import Runtime, connected


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


def events(directory: StateLocation, *, limit: int = 50) -> EventsOutcome:
    """The newest `limit` events, oldest first (0: all of them)."""
    require_applied(directory)
    with reading(directory) as store:
        return EventsOutcome(tuple(e for _, e in store.events(limit=limit)))
