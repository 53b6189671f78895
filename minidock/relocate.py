"""A pass's volume-move acts (`Plan.moves`, decided by core/moving.py) carried out on the
hosts: a slot's named volumes copied host to host through the controller
(minidock.volumecopy), or a snapshot streamed in (a restore, through `Snapshots`), or the
source's volumes removed once the target's task is ready. Each act's result is an outcome
for the core (`VolumesCopied`, `MoveFailed`, `SourceCleaned`); it decides nothing.

A copy starts from nothing on the target every time (its volume removed first): a copy cut
off by a kill is simply done again by the next pass, and the target's volume is never in
use before the copy is recorded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from minidock.acts import ActFailed, Acts
from minidock.commands.docker import volume_name
from minidock.core.moving import MoveFailed, SourceCleaned, VolumesCopied
from minidock.core.volumes import MoveAct
from minidock.model import Host, Service
from minidock.ssh import CommandTimeout, Unreachable
from minidock.volumecopy import (
    CopyError,
    close_volume,
    copy_volume,
    open_volume,
    remove_volume,
    stream_in,
)

__all__ = ["Snapshots", "carry_move", "slot_volumes"]


class Snapshots(Protocol):
    """Where a restore's stream comes from: a snapshot's tar of one volume (the backup's
    adapter: restic's `dump` of the file the backup streamed in)."""

    def stream(self, snapshot: str, volume: str) -> AsyncIterator[bytes]: ...


def slot_volumes(cluster: str, spec: Service, slot: int) -> list[tuple[str, str]]:
    """The slot's named volumes: (Docker volume name, where its task mounts it)."""
    return [
        (volume_name(cluster, spec.name, slot, v.source), v.target) for v in spec.volumes if v.named
    ]


async def carry_move(
    acts: Acts,
    act: MoveAct,
    snapshots: Snapshots | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """One move act; its outcome appended to `acts.outcomes`, its line to the pass's."""
    where = (act.service, act.slot, act.move.target, "")
    subject = f"{act.service}.{act.slot}"
    if not act.copy:
        source = acts.hosts.get(act.move.source)
        try:
            for volume, _ in slot_volumes(acts.cluster, act.spec, act.slot):
                acts.fence()
                if source is not None:
                    await remove_volume(acts.executor, source, volume)
        except (CopyError, Unreachable, CommandTimeout) as exc:
            acts.record("act-failed", f"{subject}: removing its old volumes: {exc}", where)
            return
        acts.outcomes.append(SourceCleaned(act.service, act.slot))
        return
    started = clock()
    try:
        size = await _copy(acts, act, snapshots)
    except (CopyError, ActFailed, Unreachable, CommandTimeout) as exc:
        await _discard(acts, act)
        acts.outcomes.append(MoveFailed(act.service, act.slot, str(exc)))
        return
    acts.outcomes.append(VolumesCopied(act.service, act.slot, size, clock() - started))


def _hosts(acts: Acts, act: MoveAct) -> tuple[Host | None, Host]:
    target = acts.hosts.get(act.move.target)
    if target is None:
        raise CopyError(f"{act.move.target} is not in the inventory")
    if act.move.restore:
        return None, target
    source = acts.hosts.get(act.move.source)
    if source is None:
        raise CopyError(f"{act.move.source} is not in the inventory")
    return source, target


async def _copy(acts: Acts, act: MoveAct, snapshots: Snapshots | None) -> int:
    """Every named volume of the slot onto the target, afresh; the bytes streamed."""
    source, target = _hosts(acts, act)
    await acts.ensure_image(target.name, act.spec, (act.service, act.slot, target.name, ""))
    size = 0
    for volume, path in slot_volumes(acts.cluster, act.spec, act.slot):
        acts.fence()
        await remove_volume(acts.executor, target, volume)
        if source is not None:
            mount = (path, act.spec.image)
            size += (await copy_volume(acts.executor, source, target, volume, mount)).size
            continue
        if snapshots is None:
            raise CopyError("no backup repository to restore from")
        helper = await open_volume(acts.executor, target, volume, path, act.spec.image)
        try:
            stream = snapshots.stream(act.move.snapshot, volume)
            size += await stream_in(acts.executor, target, helper, path, stream)
        finally:
            await close_volume(acts.executor, target, volume)
    return size


async def _discard(acts: Acts, act: MoveAct) -> None:
    """A failed copy's volumes on the target removed (best effort: the next copy removes
    them first anyway)."""
    target = acts.hosts.get(act.move.target)
    if target is None:
        return
    for volume, _ in slot_volumes(acts.cluster, act.spec, act.slot):
        try:
            await remove_volume(acts.executor, target, volume)
        except (CopyError, Unreachable, CommandTimeout):
            return
