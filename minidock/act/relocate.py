"""A pass's volume-move acts (`Plan.moves`, decided by core/moving.py) carried out on the
hosts: a slot's named volumes copied host to host through the controller
(minidock.act.volumecopy), or a snapshot streamed in (a restore, through `Snapshots`), or the
source's volumes removed once the target's task is ready (or, a move that failed once its
copy may have begun, the target's partial volumes once it answers). Each act's result is an outcome
for the core (`VolumesCopied`, `MoveFailed`, `SourceCleaned`); it decides nothing.

A copy starts from nothing on the target every time (its volume removed first): a copy cut
off by a kill is simply done again by the next pass, and the target's volume is never in
use before the copy is recorded.

A restore reads each snapshot with `restic dump` from the service's backup repository (the
password read now, as a backup reads it) and takes its first chunk before it touches the
volume: a repository that does not open, a snapshot that is not there, or a tar whose top
directory is not the task's mount point fails the restore with the volume as it was. Once
a volume's stream has begun, its old content is gone; a stream that fails then removes
the volumes it had begun to write (nothing half-restored is ever started on).
"""

from __future__ import annotations

import contextlib
import posixpath
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from minidock import restic
from minidock.act.acts import ActFailed, Acts, ensure_image
from minidock.act.volumecopy import (
    CopyError,
    close_volume,
    copy_volume,
    open_volume,
    remove_volume,
    stream_in,
)
from minidock.commands.docker import volume_name
from minidock.core.moving import MoveFailed, SourceCleaned, VolumesCopied
from minidock.core.volumes import MoveAct, MovePhase
from minidock.model import Host, Service
from minidock.restic import Repository, ResticError
from minidock.spec import SpecError
from minidock.spec.backup import password_value
from minidock.ssh import CommandTimeout, Unreachable

__all__ = ["ResticSnapshots", "Snapshots", "carry_move", "slot_volumes"]

_FAILURES = (CopyError, ActFailed, ResticError, Unreachable, CommandTimeout)


class Snapshots(Protocol):
    """Where a restore's stream comes from: the tar a snapshot holds of one volume (named
    as the spec names it), chunk by chunk; a failure raises (CopyError, ResticError)."""

    def stream(self, snapshot: str, volume: str) -> AsyncGenerator[bytes, None]: ...


@dataclass(frozen=True)
class ResticSnapshots:
    """Snapshots read from a restic repository: `restic dump` of the file a backup took
    (`restic.stdin_name`)."""

    repository: Repository

    def stream(self, snapshot: str, volume: str) -> AsyncGenerator[bytes, None]:
        return restic.dump(self.repository, snapshot, "/" + restic.stdin_name(volume))


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
        source = acts.hosts.get(act.removes_on)  # the source's, or a failed copy's target
        try:
            for volume, _ in slot_volumes(acts.cluster, act.spec, act.slot):
                acts.fence()
                if source is not None:
                    await remove_volume(acts.executor, source, volume)
        except (CopyError, Unreachable, CommandTimeout) as exc:
            discarding = act.move.phase is MovePhase.DISCARDING
            what = "a failed copy's partial volumes" if discarding else "its old volumes"
            acts.record("act-failed", f"{subject}: removing {what}: {exc}", where)
            return
        acts.outcomes.append(SourceCleaned(act.service, act.slot))
        return
    started = clock()
    try:
        if act.move.restore:
            size = await _restore(acts, act, snapshots)
        else:
            size = await _copy(acts, act)
    except _FAILURES as exc:
        # a restore removes what it began itself; a move's partial copy not removed here
        # (the target lost) is removed by a later pass (DISCARDING)
        discarded = not act.move.restore and await _discard(acts, act)
        acts.outcomes.append(MoveFailed(act.service, act.slot, str(exc), discarded))
        return
    acts.outcomes.append(VolumesCopied(act.service, act.slot, size, clock() - started))


def _host(acts: Acts, name: str) -> Host:
    found = acts.hosts.get(name)
    if found is None:
        raise CopyError(f"{name} is not in the inventory")
    return found


async def _copy(acts: Acts, act: MoveAct) -> int:
    """Every named volume of the slot onto the target, afresh; the bytes streamed."""
    source, target = _host(acts, act.move.source), _host(acts, act.move.target)
    await ensure_image(acts, target.name, act.spec, (act.service, act.slot, target.name, ""))
    size = 0
    for volume, path in slot_volumes(acts.cluster, act.spec, act.slot):
        acts.fence()
        await remove_volume(acts.executor, target, volume)
        mount = (path, act.spec.image)
        engines = (acts.engine_of(source.name), acts.engine_of(target.name))
        copied = await copy_volume(acts.executor, source, target, volume, mount, engines=engines)
        size += copied.size
    return size


def _repository(acts: Acts, spec: Service) -> Snapshots:
    """The service's backup repository (its `backup`, else the inventory's), its password
    read now."""
    policy = spec.backup or acts.inventory.backup
    if policy is None:
        raise CopyError(f"{spec.name} has no backup repository to restore from")
    try:
        return ResticSnapshots(Repository(policy.repository, password_value(policy)))
    except SpecError as exc:
        raise CopyError(str(exc)) from None


async def _restore(acts: Acts, act: MoveAct, snapshots: Snapshots | None) -> int:
    """Each named volume of the slot made afresh on the target from its snapshot (module
    doc); the bytes streamed. A failure once a stream began removes the volumes begun."""
    target = _host(acts, act.move.target)
    source = snapshots if snapshots is not None else _repository(acts, act.spec)
    await ensure_image(acts, target.name, act.spec, (act.service, act.slot, target.name, ""))
    begun: list[str] = []
    size = 0
    try:
        for v in act.spec.volumes:
            if v.named:
                volume = volume_name(acts.cluster, act.spec.name, act.slot, v.source)
                snapshot = act.move.snapshot_of(v.source)
                if not snapshot:
                    raise CopyError(f"the restore names no snapshot for {v.source}")
                stream = source.stream(snapshot, v.source)
                async with contextlib.aclosing(stream):
                    first = await anext(stream, b"")
                    _check_top(first, snapshot, v.source, v.target)
                    acts.fence()
                    begun.append(volume)
                    await remove_volume(acts.executor, target, volume)
                    size += await _pour(acts, target, volume, v.target, act, first, stream)
    except _FAILURES:
        for volume in begun:
            with contextlib.suppress(*_FAILURES):
                await remove_volume(acts.executor, target, volume)
        raise
    return size


async def _pour(
    acts: Acts,
    target: Host,
    volume: str,
    path: str,
    act: MoveAct,
    first: bytes,
    rest: AsyncIterator[bytes],
) -> int:
    """A snapshot's stream (its first chunk already read) into a fresh volume."""

    async def whole() -> AsyncIterator[bytes]:
        yield first
        async for chunk in rest:
            yield chunk

    helper = await open_volume(acts.executor, target, volume, path, act.spec.image)
    try:
        engine = acts.engine_of(target.name)
        return await stream_in(
            acts.executor, target, helper, path, whole(), engine=engine, volume=volume
        )
    finally:
        await close_volume(acts.executor, target, volume)


def _check_top(first: bytes, snapshot: str, volume: str, path: str) -> None:
    """The snapshot's tar starts with the directory the task mounts the volume at (its
    name: a backup of `/data` is `data/...`), else its files would land beside the volume.
    Only a plain ustar header is read (a pax or GNU long-name header first: not judged)."""
    if len(first) == 0:
        raise CopyError(f"snapshot {snapshot[:8]} of {volume} is empty")
    if len(first) < 512 or first[257:262] != b"ustar" or first[156:157] in (b"x", b"g", b"L"):
        return
    name = first[:100].split(b"\0", 1)[0].decode(errors="replace")
    top = name.removeprefix("./").lstrip("/").split("/", 1)[0]
    expected = posixpath.basename(posixpath.normpath(path))
    if top != expected:
        raise CopyError(
            f"snapshot {snapshot[:8]} of {volume} holds {top}/, but the task mounts {volume} "
            f"at {path}: restore it by hand (restic dump) or mount it where it was"
        )


async def _discard(acts: Acts, act: MoveAct) -> bool:
    """A failed copy's volumes on the target removed; whether they were (not: the target
    did not answer, and a later pass removes them, DISCARDING)."""
    target = acts.hosts.get(act.move.target)
    if target is None:
        return False
    for volume, _ in slot_volumes(acts.cluster, act.spec, act.slot):
        try:
            await remove_volume(acts.executor, target, volume)
        except (CopyError, Unreachable, CommandTimeout):
            return False
    return True
