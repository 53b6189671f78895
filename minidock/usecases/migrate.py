"""Moving a state between stores: `minidock state migrate` copies a SQLite state into etcd
(or back, or between any two stores), so an operator can start embedded and grow."""

from __future__ import annotations

from minidock import store as stores
from minidock.store import StateLocation
from minidock.usecases.access import Writer, has_state, writing
from minidock.usecases.clusters import held
from minidock.usecases.outcomes import BadInput, MigrateOutcome, StoreDown
from minidock.usecases.runtime import Clock


async def migrate(
    source: StateLocation, target: StateLocation, clock: Clock, *, force: bool = False
) -> MigrateOutcome:
    """Copy everything (generations, controller state, events with their ids) from `source`
    to `target`, every cluster it holds to the same place there, each holding both writer
    locks, and read each copy back to check it. A target that holds a state is refused
    unless `force`. The source is left as it was."""
    if source == target:
        raise BadInput(f"--from and --to both name {source}: nothing to migrate")
    if not has_state(source):
        raise BadInput(f"nothing to migrate: no state in {source}")
    pairs = [
        (h.location, target if h.location == source else stores.cluster_location(target, h.name))
        for h in held(source)
    ]
    taken = [str(there) for _, there in pairs[1:] if has_state(there)]
    if taken and not force:  # the further clusters' first (the store's own is copied first)
        raise BadInput(f"{', '.join(taken)} already holds a state: add --force to replace it")
    generations = events = 0
    replaced = False
    for here, there in pairs:
        copied = await _copy(here, there, clock, force=force)
        generations, events = generations + copied[0], events + copied[1]
        replaced = replaced or copied[2]
    return MigrateOutcome(source, target, generations, events, replaced)


async def _copy(
    source: StateLocation, target: StateLocation, clock: Clock, *, force: bool
) -> tuple[int, int, bool]:
    """One store's copy: its generations and events counted, and whether it replaced one."""
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
    return len(snapshot.generations), len(snapshot.events), not present.empty
