"""Failover from backups (`on_host_loss = "restore"`) and the recovery point. Pure.

A backup that completes records the snapshot of each volume in the slot's record
(`snapshot_taken`, called by whoever took it): the pass then knows, without I/O, the
newest snapshot of every pinned slot and its time (`recovery_points`: status, metrics,
the dashboard) and what a failover restores.

A pinned slot of a service with `on_host_loss = "restore"` whose host is down (its
`down_after` failed probes counted, so never sooner) and has not answered for
`restore_after` is restored by the pass itself: `due` says so, and the reconcile fold
places the restore (the scheduler picks the host, as for any task) and records it as a
restore intent (core/volumes.py, `failover`), carried out like the operator's. The old
host holds nothing back meanwhile; if it answers again, its task of the slot is stopped
(fenced: never two running copies) and its volume kept and listed (`kept_on`): it may
hold writes newer than the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from minidock.core.fold import View, with_slot
from minidock.core.plan import Waiting, WaitKind
from minidock.core.slots import SlotState
from minidock.core.state import ControllerState, ServiceState
from minidock.core.volumes import MovePhase, VolumeMove
from minidock.model import Event

__all__ = [
    "RecoveryPoint",
    "due",
    "failover_move",
    "holding",
    "kept_line",
    "never_target",
    "recovery_points",
    "snapshot_taken",
]


def snapshot_taken(
    state: ControllerState, service: str, slot: int, volume: str, snapshot: str, at: float
) -> ControllerState:
    """A backup of `service.slot`'s `volume` completed as `snapshot`, of the data as it was
    at `at`: the slot's newest of that volume, unless an even newer one is recorded."""
    ss = state.services.get(service)
    if ss is None:
        return state
    changed = slot_snapshot(ss, slot, volume, snapshot, at)
    return state if changed is ss else replace(state, services={**state.services, service: changed})


def slot_snapshot(
    ss: ServiceState, slot: int, volume: str, snapshot: str, at: float
) -> ServiceState:
    """`snapshot_taken` for one service: what a backup the passes carried out records
    (core/saving.py) and what `minidock backup` recorded before it did."""
    record = ss.slot(slot)
    known = {v: (ident, when) for v, ident, when in record.backups}
    if volume in known and known[volume][1] > at:
        return ss
    known[volume] = (snapshot, at)
    backups = tuple((v, ident, when) for v, (ident, when) in sorted(known.items()))
    return with_slot(ss, slot, replace(record, backups=backups))


def _picks(ss: ServiceState, record: SlotState) -> tuple[tuple[str, str], ...]:
    """The snapshot of each named volume the slot's record knows, the spec's order; ()
    when one of them has none."""
    known = {v: ident for v, ident, _ in record.backups}
    named = [v.source for v in ss.spec.volumes if v.named]
    if not named or any(v not in known for v in named):
        return ()
    return tuple((v, known[v]) for v in named)


@dataclass(frozen=True)
class Due:
    """A slot a failover restores now: from `snapshots`, off `old` (its down host)."""

    old: str
    snapshots: tuple[tuple[str, str], ...]
    down_for: float


def due(ss: ServiceState, n: int, held: tuple[str, ...], view: View) -> Due | Waiting | None:
    """Whether the pass restores slot `n` elsewhere now (`Due`), waits to (a `Waiting`
    that says when, or why it cannot: no snapshot known), or is none of a failover's
    business (None: not `on_host_loss = "restore"`, a move under way, a Failed slot (its
    failover restores failed `max_attempts` times: the operator's), a holder that is only
    unreachable, not down). A failed restore backs off as a failed start does."""
    if ss.spec.on_host_loss != "restore" or not ss.spec.pinned:
        return None
    underway = ss.moves.get(n)
    if underway is not None and underway.phase is not MovePhase.DISCARDING:
        return None
    record = ss.slot(n)
    if record.failed:  # a failed failover restore: the operator's (restore again, or reset)
        return None
    hs = view.hosts.get(record.host)
    if hs is None or not hs.down or any(not view.hosts[h].down for h in held if h in view.hosts):
        return None
    subject = f"{ss.spec.name}.{n}"
    picks = _picks(ss, record)
    if not picks:
        why = (
            f"on_host_loss = restore: {record.host} is down and no snapshot of it is known "
            f"(none taken since MiniDock keeps them): `minidock forget {record.host}`, then "
            f"`minidock restore {subject}`"
        )
        return Waiting(subject, why, WaitKind.HELD_DOWN, ss.spec.name)
    if view.now < record.next_start:  # a failover restore failed: its backoff first
        why = (
            f"on_host_loss = restore: {record.host} is down; the last restore failed "
            f"({record.last_exit}); snapshot {picks[0][1][:8]} is restored on another host "
            f"in {record.next_start - view.now:.0f}s (restart backoff)"
        )
        return Waiting(subject, why, WaitKind.FAILOVER, ss.spec.name)
    down_for = view.now - (hs.last_seen if hs.last_seen is not None else view.now)
    left = ss.spec.restore_after - down_for
    if left > 0:
        why = (
            f"on_host_loss = restore: {record.host} is down; snapshot {picks[0][1][:8]} is "
            f"restored on another host in {left:.0f}s (restore_after)"
        )
        return Waiting(subject, why, WaitKind.FAILOVER, ss.spec.name)
    return Due(record.host, picks, down_for)


def failover_move(
    ss: ServiceState, n: int, due: Due, target: str, now: float
) -> tuple[ServiceState, Event]:
    """The restore a failover records for slot `n` on `target` (the scheduler's pick), the
    old host's volume marked kept, and its event."""
    move = VolumeMove(
        target,
        due.old,
        snapshot=due.snapshots[0][1][:8],
        snapshots=due.snapshots,
        since=now,
        failover=True,
    )
    ss = replace(ss, moves={**ss.moves, n: move})
    ss = with_slot(ss, n, replace(ss.slot(n), kept_on=due.old))
    subject = f"{ss.spec.name}.{n}"
    line = (
        f"{subject}: {due.old} down for {due.down_for:.0f}s (on_host_loss = restore): "
        f"restoring snapshot {move.snapshot} on {target}; its volume on {due.old} is kept"
    )
    return ss, Event(now, "failover", line, service=ss.spec.name, slot=n, host=target)


def never_target(record: SlotState) -> dict[str, str]:
    """The host a copy of the slot never goes to unless the operator says so (`place`'s
    `never`): the one keeping its old volume, which may hold writes newer than any
    snapshot (a failover or `forget` left it)."""
    return {record.kept_on: "keeps the slot's old volume"} if record.kept_on else {}


def holding(ss: ServiceState, n: int, view: View, also: str = "") -> tuple[str, ...]:
    """The hosts a move's or a backup's stop waits for (`View.holders`), but a failover's
    old host while it is down (the slot's `kept_on`, and `also`: a failover's source): the
    pass restored elsewhere because it is down, and fences its task if it answers."""
    fenced = {ss.slot(n).kept_on, also} - {""}
    return tuple(h for h in view.holders(ss, n) if not (h in fenced and view.hosts[h].down))


def kept_line(record: SlotState, host: str) -> str:
    """What a stop of a slot's task on the host a failover left says ("" elsewhere)."""
    if not record.kept_on or record.kept_on != host:
        return ""
    return (
        f"; its volume on {host} is kept (it may hold writes newer than the snapshot "
        "restored elsewhere)"
    )


@dataclass(frozen=True)
class RecoveryPoint:
    """A pinned slot's newest snapshot of one volume: its id and when its copy began
    (None: none known; its age is the reader's `now` minus it), and the host a failover
    left the slot's old volume on ("": none)."""

    service: str
    slot: int
    volume: str
    snapshot: str
    taken: float | None
    kept_on: str = ""


def recovery_points(ss: ServiceState) -> tuple[RecoveryPoint, ...]:
    """The service's recovery points, per slot and named volume (none unless pinned)."""
    if not ss.spec.pinned or ss.removed:
        return ()
    named = [v.source for v in ss.spec.volumes if v.named]
    found: list[RecoveryPoint] = []
    for n in ss.slot_numbers():
        record = ss.slot(n)
        known = {v: (ident, when) for v, ident, when in record.backups}
        for volume in named:
            ident, when = known.get(volume, ("", None))
            found.append(RecoveryPoint(ss.spec.name, n, volume, ident, when, record.kept_on))
    return tuple(found)
