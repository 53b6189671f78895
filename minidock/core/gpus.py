"""Which GPU device ids each task that wants GPUs is given. Pure.

A host's GPUs are its inventory `gpus` (device ids). The scheduler places a task only
where as many as it wants are free (`scheduler.GpuFilter`, by count); this module gives
each run its own ids, as `task_ports` gives host ports: the ids the slot's previous task
on that host had when they are free (a task restarted keeps its GPUs), else the first
free ones in the inventory's order. Held are the ids of every live task on the host
(its `minidock.gpus` label) but the one a stop-first run replaces, and those given to
the runs before it on that host in this pass: an id is never given to two live tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

from minidock.model import Container, Observed

__all__ = ["NO_GPUS", "GpuIds", "choose", "held", "previous"]


@dataclass(frozen=True)
class GpuIds:
    """The device ids given to a task; `refused` says why it could not have them."""

    ids: tuple[str, ...] = ()
    refused: str = ""


NO_GPUS = GpuIds()


def held(observed: Observed) -> dict[str, set[str]]:
    """The GPU ids live tasks (of any cluster) hold on each answering host."""
    return {
        name: {g for c in (*seen.containers, *seen.others) if c.live for g in c.gpus}
        for name, seen in observed.hosts.items()
        if seen.ok
    }


def previous(containers: Iterable[Container], service: str, slot: int) -> tuple[str, ...]:
    """The ids the slot's latest task on the host had (none: ())."""
    mine = [c for c in containers if c.service == service and c.slot == slot and c.gpus]
    return max(mine, key=lambda c: c.created_at).gpus if mine else ()


def choose(
    host: str, gpus: Sequence[str], wanted: int, held: Set[str], prefer: Sequence[str] = ()
) -> GpuIds:
    """`wanted` ids of the host's `gpus` that `held` does not hold: `prefer` when all of
    them are free and there are as many, else the first free ones."""
    if wanted <= 0:
        return NO_GPUS
    if len(prefer) == wanted and all(g in gpus and g not in held for g in prefer):
        return GpuIds(tuple(prefer))
    free = [g for g in gpus if g not in held]
    if len(free) < wanted:
        return GpuIds(refused=f"{host} has {len(free)} free GPUs of {len(gpus)}, {wanted} wanted")
    return GpuIds(tuple(free[:wanted]))
