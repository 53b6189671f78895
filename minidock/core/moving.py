"""A pass's part in the slots' volume moves (core/volumes.py): what each move's slot does,
the acts it needs, and what those acts learned folded back. Pure.

`reconcile` asks `hold` first for every slot with a move: while the move holds (stopping,
copying), the slot's tasks are stopped (drained first, by the traffic gate) and nothing
starts one; else the slot is decided as any other, its record naming the target, and
`ready` moves the move on once the target's task is ready. `acts` gives the pass's copies
and removals; the act path reports `VolumesCopied`, `MoveFailed` or `SourceCleaned`,
which `fold_move` records. A restore (a move from a snapshot) ends with `restored`; one
whose stream failed or was cut leaves its slot Failed (`restore-failed`): its volume may
be empty or partly written, so no task starts on it, across any apply, scale or rollback
(`SlotState.half_written`), until the operator restores again or resets. A failover's
restore that fails is undone instead (its partial copy is on the target; the old host's
volume is the slot's data again) and tried again after the restart backoff.

Every move ends: `lost` ends one whose target or source is down (or gone from the
inventory) before its copy is recorded, as failed, the slot's record still naming where
its data is; a partial copy the target may hold is removed when it answers again
(DISCARDING). A move waiting on a host that is down says so as a degraded wait (exit 4),
never as progress.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from minidock.core.failover import holding, kept_line
from minidock.core.fold import Effects, View, with_slot
from minidock.core.hosts import HostPhase
from minidock.core.plan import Stop, Waiting, WaitKind
from minidock.core.rollout import slot_target
from minidock.core.slots import count_failure, relocate, restore_failed, restored, stopped_for
from minidock.core.state import ControllerState, ServiceState
from minidock.core.supervise import ready as is_ready
from minidock.core.volumes import MoveAct, MoveInput, MovePhase, VolumeMove
from minidock.model import Container, Event
from minidock.units import approx_size

__all__ = [
    "MoveFailed",
    "MoveOutcome",
    "SourceCleaned",
    "VolumesCopied",
    "acts",
    "fold_move",
    "hold",
    "lost",
    "ready",
    "unwanted",
    "waiting",
]


@dataclass(frozen=True)
class VolumesCopied:
    """Every named volume of the slot streamed to the move's target."""

    service: str
    slot: int
    size: int
    seconds: float


@dataclass(frozen=True)
class MoveFailed:
    """The copy failed (`line`, masked): the move ends, the slot stays where it was. A
    move's act removes its partial copy on the target (`discarded`); one it could not (the
    target lost half-way) is removed once the target answers (DISCARDING)."""

    service: str
    slot: int
    line: str
    discarded: bool = False


@dataclass(frozen=True)
class SourceCleaned:
    """The slot's volumes on the move's source were removed (a DISCARDING move's: its
    partial copy on the target)."""

    service: str
    slot: int


MoveOutcome = VolumesCopied | MoveFailed | SourceCleaned


def _answered(view: View, host: str) -> bool:
    hs = view.hosts.get(host)
    return hs is not None and hs.phase is HostPhase.READY


def _with_move(ss: ServiceState, n: int, move: VolumeMove | None) -> ServiceState:
    moves = {k: v for k, v in ss.moves.items() if k != n}
    return replace(ss, moves=moves if move is None else {**moves, n: move})


def _gone(view: View, host: str) -> bool:
    """Whether `host` is out of the pass's hosts (forgotten and unlisted)."""
    return host not in view.hosts


def _lost(view: View, host: str) -> str:
    """Why `host` cannot take part in a copy now ("" when it may): down, or gone."""
    hs = view.hosts.get(host)
    if hs is None:
        return f"{host} is gone from the inventory"
    return f"{host} is down" if hs.down else ""


def lost(ss: ServiceState, n: int, view: View) -> tuple[ServiceState, tuple[Event, ...]]:
    """The slot's move ended when a host it needs is lost (down, or gone from the
    inventory) before its copy is recorded: failed, the record still naming where the
    data is (the source; a restore's recorded host, or none). A copy that may have begun
    (COPYING) leaves the target DISCARDING its partial copy once it answers; a restore in
    place that may have begun makes the slot Failed (its volume may be half written). A
    DISCARDING move ends when its target is gone; a CLEANING one when its source is."""
    move = ss.moves.get(n)
    if move is None:
        return ss, ()
    if move.phase is MovePhase.DISCARDING:
        return (_with_move(ss, n, None), ()) if _gone(view, move.target) else (ss, ())
    if move.phase is MovePhase.CLEANING and move.source and _gone(view, move.source):
        return _with_move(ss, n, None), ()  # its old volumes went with their host
    if not move.holds:
        return ss, ()
    in_place = move.source == move.target
    why = _lost(view, move.target)
    if not why and move.source and not in_place and not move.failover:
        why = _lost(view, move.source)  # a failover's source is down: why it was recorded
    if not why:
        return ss, ()
    ended = move.step(MoveInput.LOST)
    discarding = ended.phase is MovePhase.DISCARDING and not _gone(view, move.target)
    ss = _with_move(ss, n, ended if discarding else None)
    ss = with_slot(ss, n, stopped_for(ss.slot(n)))  # its task stopped by the move: no exit
    subject = f"{ss.spec.name}.{n}"
    began = move.phase is MovePhase.COPYING
    if move.failover and began:
        ss, kind, line = _failover_failed(ss, n, move, why, view.now, discarding=discarding)
        return ss, (Event(view.now, kind, line, service=ss.spec.name, slot=n, host=move.target),)
    if move.restore:
        kind = "restore-failed"
        line = f"{subject}: restore of snapshot {move.snapshot} on {move.target} failed: {why}"
        if in_place and began:
            line += f"; the slot is Failed (its volume on {move.target} may be half written): "
            line += f"`minidock restore {subject}` tries again, `minidock reset {ss.spec.name}` "
            line += "starts it on what its volume holds"
            ss = with_slot(ss, n, restore_failed(ss.slot(n), line.removeprefix(f"{subject}: ")))
        elif move.source and not in_place:
            line += f"; it stays on {move.source}"
    else:
        kind = "move-failed"
        line = f"{subject}: move to {move.target} failed, it stays on {move.source}: {why}"
    if discarding:
        line += f"; its partial copy on {move.target} is removed once {move.target} answers"
    event = Event(view.now, kind, line, service=ss.spec.name, slot=n, host=move.target)
    return ss, (event,)


def _copy_failed(
    ss: ServiceState, o: MoveFailed, move: VolumeMove, now: float
) -> tuple[ServiceState, str, str]:
    """A copy that failed, folded: the task the move stopped is no exit of its own; a
    restore in place leaves its slot Failed, half written; a move's (or a failover's)
    partial copy on its target is removed (DISCARDING, unless its act did), the slot
    staying where its data is."""
    ss = with_slot(ss, o.slot, stopped_for(ss.slot(o.slot)))
    subject = f"{o.service}.{o.slot}"
    if move.restore and not move.failover:
        ss = _with_move(ss, o.slot, None)
        line = f"{subject}: restore of snapshot {move.snapshot} on {move.target} failed: {o.line}"
        line += f"; the slot is Failed: `minidock restore {subject}` tries again, `minidock "
        line += f"reset {o.service}` starts it on what its volume holds"
        why = line.removeprefix(f"{subject}: ")
        return with_slot(ss, o.slot, restore_failed(ss.slot(o.slot), why)), "restore-failed", line
    ended = None if o.discarded else move.step(MoveInput.LOST)
    discarding = ended is not None and ended.phase is MovePhase.DISCARDING
    ss = _with_move(ss, o.slot, ended if discarding else None)
    if move.failover:
        return _failover_failed(ss, o.slot, move, o.line, now, discarding=discarding)
    stays = move.source or "where the scheduler places it"
    line = f"{subject}: move to {move.target} failed, it stays on {stays}: {o.line}"
    if discarding:  # else a start there later would run on the half-written copy
        line += f"; its partial copy on {move.target} is removed once {move.target} answers"
    return ss, "move-failed", line


def _failover_failed(
    ss: ServiceState, n: int, move: VolumeMove, why: str, now: float, *, discarding: bool
) -> tuple[ServiceState, str, str]:
    """A failover's restore (core/failover.py) whose copy failed or was cut: undone. Its
    partial copy is on the target (removed, or DISCARDING); the slot's record still names
    its old host, whose volume is its data again (no longer kept: if that host answers,
    its task runs there). The failure is counted as a failed attempt of the slot, so the
    failover tries again after the restart backoff, and at `max_attempts` the slot is
    Failed (the operator's: `minidock restore`, or `reset`)."""
    subject = f"{ss.spec.name}.{n}"
    line = f"{subject}: restore of snapshot {move.snapshot} on {move.target} failed: {why}"
    tried = f"failover {move.snapshot} at {move.since:.3f}"  # counted once, as a task is
    record = replace(ss.slot(n), kept_on="")
    record = count_failure(record, tried, now, line.removeprefix(f"{subject}: "), ss.spec.restart)
    line += f"; it stays on {move.source}, where its task runs if {move.source} answers"
    if record.failed:
        line += (
            f"; the slot is Failed after {len(record.attempts)} failed restores: `minidock "
            f"restore {subject}` tries again, `minidock reset {ss.spec.name}` starts it on "
            f"{move.source} when it answers"
        )
    else:
        line += f"; the failover tries again in {record.next_start - now:.0f}s"
    if discarding:
        line += f"; its partial copy on {move.target} is removed once {move.target} answers"
    return with_slot(ss, n, record), "restore-failed", line


def unwanted(ss: ServiceState, n: int, now: float) -> tuple[ServiceState, tuple[Event, ...]]:
    """A move of a slot the service no longer wants (scaled away) ends:
    before its copy, as failed (the data stays where it was: the record names it); while
    copying, its partial copy on the target removed once it answers (a restore in place's
    slot held Failed: its own volume may be half written, and scaled back it starts on
    nothing until `reset` or a restore); copied, with the record naming the target, where
    a slot scaled back starts. Nothing else would end it."""
    move = ss.moves.get(n)
    if move is None or move.phase in (MovePhase.DISCARDING, MovePhase.CLEANING):
        return ss, ()
    ended = move.step(MoveInput.LOST) if move.holds else None
    discarding = ended is not None and ended.phase is MovePhase.DISCARDING
    ss = _with_move(ss, n, ended if discarding else None)
    subject, kind = f"{ss.spec.name}.{n}", "restore-failed" if move.restore else "move-failed"
    line = f"{subject}: {move.line()} ended: the slot is no longer wanted"
    if move.phase is MovePhase.STARTING:
        line += f"; its data is on {move.target}"
    elif discarding:
        line += f"; its partial copy on {move.target} is removed once {move.target} answers"
    elif move.restore and move.phase is MovePhase.COPYING:  # in place: its own volume
        line += f"; the slot is Failed (its volume on {move.target} may be half written): "
        line += f"`minidock restore {subject}` tries again, `minidock reset {ss.spec.name}` "
        line += "starts it on what its volume holds"
        why = line.removeprefix(f"{subject}: ")
        ss = with_slot(ss, n, restore_failed(ss.slot(n), why))
    return ss, (Event(now, kind, line, service=ss.spec.name, slot=n, host=move.target),)


def hold(
    ss: ServiceState, n: int, here: Sequence[Container], view: View
) -> tuple[ServiceState, Effects] | None:
    """A holding move's slot: its tasks stopped, none started, and the move on to COPYING
    once no task of the slot is seen or held anywhere; None for a slot decided as others.
    A slot with no host (its host forgotten) that would start afresh while its failed
    move's partial copy on an answering target is being removed waits for that removal
    (the pass's runs come before its removals: started there, it would run on the copy)."""
    move = ss.moves.get(n)
    name, subject = ss.spec.name, f"{ss.spec.name}.{n}"
    discarding = move is not None and move.phase is MovePhase.DISCARDING
    if discarding and move is not None and not ss.slot(n).host and _answered(view, move.target):
        return ss, Effects(waiting=(Waiting(subject, move.line(), WaitKind.MOVE, name),))
    if move is None or not move.holds:
        return None
    stops = tuple(Stop(c, f"{subject} {move.line()}{_fenced(ss, n, c)}") for c in here)
    held = _holders(ss, n, move, view)
    if move.phase is MovePhase.STOPPING and not here and not held:
        move = move.step(MoveInput.STOPPED)
        ss = _with_move(ss, n, move)
    line = move.line()
    if held:
        line += f" (waiting for {', '.join(held)} to answer)"
    wait = Waiting(subject, line, WaitKind.MOVE, name)
    return ss, Effects(stops=stops, waiting=(wait,))


def _holders(ss: ServiceState, n: int, move: VolumeMove, view: View) -> tuple[str, ...]:
    """The hosts the move waits for (`View.holders`), but a failover's down source (of
    this move, or of an earlier one: the slot's `kept_on`): the pass restored elsewhere
    because it is down, and fences its task if it answers."""
    return holding(ss, n, view, move.source if move.failover else "")


def _fenced(ss: ServiceState, n: int, c: Container) -> str:
    record = ss.slot(n)
    return kept_line(record, c.host)


def ready(
    ss: ServiceState, n: int, here: Sequence[Container], now: float
) -> tuple[ServiceState, tuple[Event, ...]]:
    """A starting move's slot once decided: on to CLEANING (or over, said by a `moved`
    event) when the task its record names runs ready on the target."""
    move = ss.moves.get(n)
    if move is None or move.phase is not MovePhase.STARTING:
        return ss, ()
    record = ss.slot(n)
    there = [c for c in here if c.host == move.target and c.task == record.task and is_ready(c)]
    if not there:
        return ss, ()
    moved = move.step(MoveInput.READY)
    if moved.phase is not MovePhase.DONE:
        return _with_move(ss, n, moved), ()
    subject = f"{ss.spec.name}.{n}"
    if move.restore:
        kind, line = "restored", f"{subject}: restored from snapshot {move.snapshot}"
        line += f" on {move.target}"
        if move.source and move.source != move.target:
            line += f" (its old volumes stay on {move.source})"
    else:
        kind, line = "moved", f"{subject}: moved to {move.target}"
        if move.keep_source and move.source:
            line += f" (its volumes stay on {move.source})"
    event = Event(now, kind, line, service=ss.spec.name, slot=n, host=move.target)
    return _with_move(ss, n, None), (event,)


def waiting(ss: ServiceState, view: View) -> tuple[Waiting, ...]:
    """A line for each move under way that does not hold its slot (starting, cleaning):
    a degraded one (exit 4) while the host it waits on is down. A DISCARDING move waits
    for nothing (its slot runs; its removal is done when the target answers)."""
    found: list[Waiting] = []
    for n, move in sorted(ss.moves.items()):
        if move.holds or move.phase is MovePhase.DISCARDING:
            continue
        on = move.target if move.phase is MovePhase.STARTING else move.source
        hs = view.hosts.get(on)
        down = hs is not None and hs.down
        line = move.line() + (f" ({on} is down)" if down else "")
        kind = WaitKind.HELD_DOWN if down else WaitKind.MOVE
        found.append(Waiting(f"{ss.spec.name}.{n}", line, kind, ss.spec.name))
    return tuple(found)


def acts(services: Mapping[str, ServiceState], view: View) -> tuple[MoveAct, ...]:
    """The pass's copies (a copying move whose slot has no task seen, its two hosts
    answering) and removals (a cleaning move whose source answers)."""
    if not any(ss.moves for ss in services.values()):
        return ()
    busy = {(c.service, c.slot) for c in view.mine}
    found: list[MoveAct] = []
    for name, ss in sorted(services.items()):
        for n, move in sorted(ss.moves.items()):
            spec = slot_target(ss, n)
            if move.phase is MovePhase.COPYING and (name, n) not in busy:
                source_ok = move.restore or _answered(view, move.source)
                if source_ok and _answered(view, move.target) and not _holders(ss, n, move, view):
                    found.append(MoveAct(name, n, spec, move))
            elif move.phase in (MovePhase.CLEANING, MovePhase.DISCARDING):
                act = MoveAct(name, n, spec, move, copy=False)
                if _answered(view, act.removes_on):
                    found.append(act)
    return tuple(found)


def fold_move(
    state: ControllerState, o: MoveOutcome, now: float
) -> tuple[ControllerState, list[Event]]:
    """A move act's outcome into the slot's move and record, with its event."""
    ss = state.services.get(o.service)
    move = ss.moves.get(o.slot) if ss is not None else None
    if ss is None or move is None:
        return state, []
    subject = f"{o.service}.{o.slot}"
    if isinstance(o, VolumesCopied) and move.phase is MovePhase.COPYING:
        moved = replace(move.step(MoveInput.COPIED), size=o.size, seconds=o.seconds)
        settle = restored if move.restore else relocate  # a restore's copy makes it whole
        record = settle(ss.slot(o.slot), move.target)
        ss = with_slot(_with_move(ss, o.slot, moved), o.slot, record)
        rate = f", {approx_size(int(o.size / o.seconds))}/s" if o.seconds > 0 else ""
        origin = f"snapshot {move.snapshot}" if move.restore else move.source
        kind = "volumes-copied"
        line = f"{subject}: volumes copied from {origin} to {move.target}"
        line += f" ({approx_size(o.size)}{rate})"
    elif isinstance(o, MoveFailed) and move.phase is MovePhase.COPYING:
        ss, kind, line = _copy_failed(ss, o, move, now)
    elif isinstance(o, SourceCleaned) and move.phase is MovePhase.CLEANING:
        ss = _with_move(ss, o.slot, None)
        kind, line = "moved", f"{subject}: moved to {move.target}"
    elif isinstance(o, SourceCleaned) and move.phase is MovePhase.DISCARDING:
        ss = _with_move(ss, o.slot, None)
        what = "restore" if move.restore else "move"
        kind = "partial-copy-removed"
        line = f"{subject}: the partial copy its failed {what} left on {move.target} was removed"
    else:
        return state, []
    event = Event(now, kind, line, service=o.service, slot=o.slot, host=move.target)
    return replace(state, services={**state.services, o.service: ss}), [event]
