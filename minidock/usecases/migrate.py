"""Moving a state between stores: `minidock state migrate` copies a SQLite state into etcd
(or back, or between any two stores), so an operator can start embedded and grow."""

from __future__ import annotations

from minidock.store import StateLocation
from minidock.usecases.access import Writer, has_state, writing
from minidock.usecases.outcomes import BadInput, MigrateOutcome, StoreDown
from minidock.usecases.runtime import Clock


async def migrate(
    source: StateLocation, target: StateLocation, clock: Clock, *, force: bool = False
) -> MigrateOutcome:
    """Copy everything (generations, controller state, events with their ids) from `source`
    to `target`, holding both writer locks, and read the copy back to check it. A target
    that holds a state is refused unless `force`. The source is left as it was."""
    if source == target:
        raise BadInput(f"--from and --to both name {source}: nothing to migrate")
    if not has_state(source):
        raise BadInput(f"nothing to migrate: no state in {source}")
    async with writing(source, clock, Writer.OPERATOR) as origin:
        snapshot = origin.snapshot()
        async with writing(target, clock, Writer.OPERATOR) as destination:
            present = destination.snapshot()
            if not present.empty and not force:
                raise BadInput(
                    f"{target} already holds a state ({len(present.generations)} generations, "
                    f"{len(present.events)} events): add --force to replace it"
                )
            destination.restore(snapshot)
            if destination.snapshot() != snapshot:
                raise StoreDown(f"the copy in {target} differs from {source}: migrate again")
    return MigrateOutcome(
        source,
        target,
        generations=len(snapshot.generations),
        events=len(snapshot.events),
        replaced=not present.empty,
    )
