"""A pass's part in the slots' backups (core/backing.py): the operator's and the schedules'
intents recorded, what each backup's slot does, the acts it needs, and what those acts
learned folded back. Pure.

`reconcile` asks `hold` first for every slot with a backup: while a backup holds it (stopped
for the copy), the slot's tasks are stopped (drained first, by the traffic gate), none
starts, and no exit of theirs is counted; else the slot is decided as any other, and
`ready` moves the backup on once its task is ready again. `acts` gives the pass's hooks,
copies, `keep`s and restore drills; the act path (minidock.act.backups) reports `Hooked`,
`Copied`, `BackupKept`, `BackupEnded` or `VerifyEnded`, which `fold_backup` records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from minidock.core.backing import (
    BackupAct,
    BackupInput,
    BackupPhase,
    BackupStep,
    LastBackup,
    SlotBackup,
    Verified,
    VerifyAct,
)
from minidock.core.failover import holding, slot_snapshot
from minidock.core.fold import Effects, View, with_slot
from minidock.core.hosts import HostPhase
from minidock.core.plan import Stop, Waiting, WaitKind
from minidock.core.rollout import slot_target
from minidock.core.schedule import Times
from minidock.core.slots import TERMINAL, relocate
from minidock.core.state import ControllerState, ServiceState
from minidock.core.supervise import ready as is_ready
from minidock.model import Container, Event
from minidock.units import approx_size

__all__ = [
    "BackupEnded",
    "BackupKept",
    "BackupOutcome",
    "Copied",
    "Hooked",
    "VerifyEnded",
    "acts",
    "backed_slots",
    "begin",
    "begin_verify",
    "fold_backup",
    "hold",
    "ready",
    "scheduled",
    "stranded",
    "unwanted",
    "waiting",
]


# -- the operator's and the schedules' word ------------------------------------------------------
def begin(
    ss: ServiceState, slot: int, now: float, *, stop: bool, hook: bool, scheduled: float = 0.0
) -> ServiceState:
    """Record slot's backup (the same asked again while one runs changes nothing)."""
    if slot in ss.backups.slots:
        return ss
    intent = SlotBackup.begun(now, stop=stop, hook=hook, scheduled=scheduled)
    return replace(ss, backups=replace(ss.backups, slots={**ss.backups.slots, slot: intent}))


def begin_verify(ss: ServiceState, slot: int) -> ServiceState:
    """Record slot's restore drill (asked again while one is asked: nothing changes)."""
    if slot in ss.backups.verifying:
        return ss
    verifying = tuple(sorted((*ss.backups.verifying, slot)))
    return replace(ss, backups=replace(ss.backups, verifying=verifying))


def backed_slots(ss: ServiceState) -> tuple[int, ...]:
    """The slots a backup of the whole service takes: each wanted slot with a host."""
    return tuple(n for n in ss.slot_numbers() if ss.slot(n).host)


def scheduled(
    ss: ServiceState,
    backup: Times | str | None,
    verify: Times | str | None,
    now: float,
) -> tuple[ServiceState, tuple[Event, ...]]:
    """A service's backup and verify schedules at this pass: a schedule first seen is armed
    at its latest time (no backup for a time before it was applied); a later time begins a
    backup of each slot with a host (once, however many times were missed), or a restore
    drill of each. A schedule that gives no time (`str`: why) is said once, as a job's."""
    book, events = ss.backups, list[Event]()
    spec, name = ss.spec, ss.spec.name
    why = next((t for t in (backup, verify) if isinstance(t, str)), "")
    if why and why != book.unscheduled:
        events.append(Event(now, "backup-schedule-failed", f"no backup decided: {why}", name))
    book = replace(book, unscheduled=why) if book.unscheduled != why else book
    if isinstance(backup, Times):
        if book.due == 0.0 or backup.latest <= book.due:
            book = replace(book, due=book.due or backup.latest)
        else:
            book = replace(book, due=backup.latest)
            ss = replace(ss, backups=book)
            policy = spec.backup
            stop = policy is not None and policy.stop
            for n in backed_slots(ss):
                ss = begin(
                    ss,
                    n,
                    now,
                    stop=stop,
                    hook=spec.before_backup is not None,
                    scheduled=backup.latest,
                )
            book = ss.backups
            events.append(Event(now, "backup-scheduled", f"scheduled backup of {name}", name))
    if isinstance(verify, Times):
        if book.verify_due == 0.0 or verify.latest <= book.verify_due:
            book = replace(book, verify_due=book.verify_due or verify.latest)
        else:
            book = replace(book, verify_due=verify.latest)
            ss = replace(ss, backups=book)
            for n in backed_slots(ss):
                ss = begin_verify(ss, n)
            book = ss.backups
    return (ss if ss.backups is book else replace(ss, backups=book)), tuple(events)


# -- a pass's part --------------------------------------------------------------------------
def _with(ss: ServiceState, n: int, intent: SlotBackup | None) -> ServiceState:
    slots = {k: v for k, v in ss.backups.slots.items() if k != n}
    slots = slots if intent is None else {**slots, n: intent}
    return replace(ss, backups=replace(ss.backups, slots=slots))


def _ended(
    ss: ServiceState, n: int, intent: SlotBackup, now: float, forgotten: int
) -> ServiceState:
    """The backup over: dropped, and kept as the slot's last."""
    last = LastBackup(
        now,
        intent.scheduled,
        intent.snapshots,
        intent.size,
        intent.seconds,
        forgotten,
        intent.failed,
    )
    ss = _with(ss, n, None)
    if not intent.failed:  # the slot's recovery point, and what a failover restores
        for volume, snapshot in intent.snapshots:
            ss = slot_snapshot(ss, n, volume, snapshot, intent.since)
    return replace(ss, backups=replace(ss.backups, last={**ss.backups.last, n: last}))


def _answered(view: View, host: str) -> bool:
    hs = view.hosts.get(host)
    return hs is not None and hs.phase is HostPhase.READY


def hold(
    ss: ServiceState, n: int, here: Sequence[Container], view: View
) -> tuple[ServiceState, Effects] | None:
    """A slot stopped for its backup's copy: its tasks stopped (drained first by the traffic
    gate), none started and no exit of theirs counted, and the backup on to COPYING once no
    task of the slot is seen or held anywhere; None for a slot decided as others."""
    intent = ss.backups.slots.get(n)
    if intent is None or not intent.holds:
        return None
    name, subject = ss.spec.name, f"{ss.spec.name}.{n}"
    stops = tuple(Stop(c, f"{subject} {intent.line()}") for c in here)
    if not ss.slot(n).host:  # its host was forgotten: nothing to copy, the slot is let go
        failed = replace(intent, failed="its host was forgotten")
        line = f"{subject}: backup failed: its host was forgotten"
        event = Event(view.now, "backup-failed", line, service=name, slot=n)
        return _with(ss, n, failed.step(BackupInput.FAILED)), Effects(stops=stops, events=(event,))
    held = holding(ss, n, view)  # a failover's old host: fenced, never waited for
    if intent.phase is BackupPhase.STOPPING and not here and not held:
        intent = intent.step(BackupInput.STOPPED)
        ss = _with(ss, n, intent)
    line = intent.line()
    if held:
        line += f" (waiting for {', '.join(held)} to answer)"
    return ss, Effects(stops=stops, waiting=(Waiting(subject, line, WaitKind.BACKUP, name),))


def ready(
    ss: ServiceState, n: int, here: Sequence[Container], now: float
) -> tuple[ServiceState, tuple[Event, ...]]:
    """A slot whose task restarts after its backup, once decided: on to KEEPING (or over,
    when its copy failed) once the task its record names runs ready; a slot gone terminal
    meanwhile ends the backup (its task will not run again by itself)."""
    intent = ss.backups.slots.get(n)
    if intent is None or intent.phase is not BackupPhase.STARTING:
        return ss, ()
    record = ss.slot(n)
    if record.phase in TERMINAL:
        return _ended(ss, n, replace(intent, failed=intent.failed or record.last_exit), now, 0), ()
    if intent.failed and not record.host:  # failed, its host forgotten: the slot's own now
        return _ended(ss, n, intent, now, 0), ()
    if not any(c.task == record.task and is_ready(c) for c in here if record.task):
        return ss, ()
    stepped = intent.step(BackupInput.READY)
    if stepped.phase is BackupPhase.DONE:
        return _ended(ss, n, stepped, now, 0), ()
    return _with(ss, n, stepped), ()


def waiting(ss: ServiceState) -> tuple[Waiting, ...]:
    """A line for each backup or drill under way that does not hold its slot."""
    name = ss.spec.name
    lines = [
        Waiting(f"{name}.{n}", b.line(), WaitKind.BACKUP, name)
        for n, b in sorted(ss.backups.slots.items())
        if not b.holds
    ]
    lines += [
        Waiting(
            f"{name}.{n}", "restore drill: restoring its newest snapshot", WaitKind.BACKUP, name
        )
        for n in ss.backups.verifying
    ]
    return tuple(lines)


def acts(services: Mapping[str, ServiceState], view: View) -> tuple[BackupAct | VerifyAct, ...]:
    """The pass's backup acts (each on an answering host: the slot's recorded one) and
    restore drills; a slot whose hook or copy cannot run now waits (its line says so)."""
    if not any(ss.backups.busy for ss in services.values()):
        return ()
    running = {(c.service, c.slot): c for c in view.mine if c.state == "running"}
    seen = {(c.service, c.slot) for c in view.mine}
    found: list[BackupAct | VerifyAct] = []
    for name, ss in sorted(services.items()):
        for n, intent in sorted(ss.backups.slots.items()):
            host = ss.slot(n).host
            if intent.phase is BackupPhase.KEEPING:  # restic's alone: no host needed
                spec = slot_target(ss, n)
                found.append(BackupAct(name, n, BackupStep.KEEP, spec, host, "", ss.generation))
                continue
            if not host or not _answered(view, host):
                continue
            spec = slot_target(ss, n)
            task = running.get((name, n))
            if intent.phase is BackupPhase.HOOKING and task is not None:
                found.append(
                    BackupAct(name, n, BackupStep.HOOK, spec, task.host, task.id, ss.generation)
                )
            elif intent.phase is BackupPhase.COPYING and intent.stop and (name, n) not in seen:
                found.append(BackupAct(name, n, BackupStep.COPY, spec, host, "", ss.generation))
            elif intent.phase is BackupPhase.COPYING and not intent.stop and task is not None:
                found.append(
                    BackupAct(name, n, BackupStep.COPY, spec, task.host, task.id, ss.generation)
                )
        for n in ss.backups.verifying:
            host = _drill_host(ss.slot(n).host, view)
            if host:
                found.append(VerifyAct(name, n, slot_target(ss, n), host))
    return tuple(found)


def _drill_host(recorded: str, view: View) -> str:
    """Where a drill runs: the slot's host (it has the image) if it answers, else the first
    answering host that is not drained."""
    if recorded and _answered(view, recorded):
        return recorded
    return next(
        (
            h
            for h, hs in sorted(view.hosts.items())
            if hs.phase is HostPhase.READY and not hs.drained
        ),
        "",
    )


def unwanted(ss: ServiceState, n: int, now: float) -> tuple[ServiceState, tuple[Event, ...]]:
    """A backup of a slot the service no longer wants (scaled away) ends, as nothing else
    would end it (the passes decide wanted slots only): copied already, as done (its task
    does not start again: the slot is gone); else failed, nothing to start again. `keep`
    goes on (restic's alone, no slot needed)."""
    intent = ss.backups.slots.get(n)
    if intent is None or intent.phase is BackupPhase.KEEPING:
        return ss, ()
    if intent.phase is BackupPhase.STARTING and not intent.failed:
        return _ended(ss, n, intent, now, 0), ()
    why = intent.failed or "the slot is no longer wanted"
    line = f"{ss.spec.name}.{n}: backup failed: {why}"
    ended = _ended(ss, n, replace(intent, failed=why), now, 0)
    return ended, (Event(now, "backup-failed", line, service=ss.spec.name, slot=n),)


def stranded(
    ss: ServiceState, n: int, here: Sequence[Container], view: View
) -> tuple[ServiceState, tuple[Event, ...]]:
    """A backup whose hook or unstopped copy has no running task to run in (the slot is
    Failed, Complete, or never ran; or its host is down, or drained with no task of the
    slot running there, which waits for the operator) ends, failed: nothing is stopped,
    nothing to start."""
    intent = ss.backups.slots.get(n)
    if intent is None or intent.phase not in (BackupPhase.HOOKING, BackupPhase.COPYING):
        return ss, ()
    if intent.holds or any(c.state == "running" for c in here):
        return ss, ()
    record = ss.slot(n)
    hs = view.hosts.get(record.host)
    if record.phase in TERMINAL or not record.host:
        why = "no running task to back up"
    elif hs is not None and hs.down:
        why = f"its host {record.host} is down"
    elif hs is not None and hs.drained:  # its task starts there only once it is activated
        why = f"its host {record.host} is drained and its task does not run there"
    else:
        return ss, ()
    ended = _ended(ss, n, replace(intent, failed=why), view.now, 0)
    line = f"{ss.spec.name}.{n}: backup failed: {why}"
    return ended, (Event(view.now, "backup-failed", line, service=ss.spec.name, slot=n),)


# -- what the acts learned -------------------------------------------------------------------------
@dataclass(frozen=True)
class Hooked:
    """The slot's before_backup hook exited 0."""

    service: str
    slot: int


@dataclass(frozen=True)
class Copied:
    """Every named volume of the slot saved: (volume, snapshot id) each."""

    service: str
    slot: int
    snapshots: tuple[tuple[str, str], ...]
    size: int
    seconds: float


@dataclass(frozen=True)
class BackupKept:
    """`keep` applied to the slot's snapshots: how many it forgot."""

    service: str
    slot: int
    forgotten: int


@dataclass(frozen=True)
class BackupEnded:
    """A step failed (`line`, masked): the hook, the copy, or `keep`."""

    service: str
    slot: int
    line: str


@dataclass(frozen=True)
class VerifyEnded:
    """A restore drill's outcome: the snapshot restored, whether the command passed."""

    service: str
    slot: int
    snapshot: str
    ok: bool
    line: str


BackupOutcome = Hooked | Copied | BackupKept | BackupEnded | VerifyEnded


def fold_backup(
    state: ControllerState, o: BackupOutcome, now: float
) -> tuple[ControllerState, list[Event]]:
    """A backup act's outcome into the slot's intent (and, stopped, its record), with its
    event."""
    ss = state.services.get(o.service)
    if ss is None:
        return state, []
    if isinstance(o, VerifyEnded):
        return _fold_verify(state, ss, o, now)
    intent = ss.backups.slots.get(o.slot)
    if intent is None:
        return state, []
    subject = f"{o.service}.{o.slot}"
    events: list[Event] = []
    if isinstance(o, Hooked) and intent.phase is BackupPhase.HOOKING:
        ss = _with(ss, o.slot, intent.step(BackupInput.HOOKED))
    elif isinstance(o, Copied) and intent.phase is BackupPhase.COPYING:
        done = replace(intent, snapshots=o.snapshots, size=o.size, seconds=o.seconds)
        ss = _restart(_with(ss, o.slot, done.step(BackupInput.COPIED)), o.slot, done)
        ids = ", ".join(f"{v} {s[:8]}" for v, s in o.snapshots)
        rate = f", {approx_size(int(o.size / o.seconds))}/s" if o.seconds > 0 else ""
        line = f"{subject}: backed up ({ids}; {approx_size(o.size)}{rate})"
        events.append(Event(now, "backed-up", line, service=o.service, slot=o.slot))
    elif isinstance(o, BackupKept) and intent.phase is BackupPhase.KEEPING:
        ss = _ended(ss, o.slot, intent.step(BackupInput.KEPT), now, o.forgotten)
    elif isinstance(o, BackupEnded) and intent.phase is BackupPhase.KEEPING:
        ss = _ended(ss, o.slot, replace(intent, failed=f"keep: {o.line}"), now, 0)
        line = f"{subject}: backed up, but keep failed: {o.line}"
        events.append(Event(now, "backup-keep-failed", line, service=o.service, slot=o.slot))
    elif isinstance(o, BackupEnded) and intent.phase in (BackupPhase.HOOKING, BackupPhase.COPYING):
        failed = replace(intent, failed=o.line)
        stepped = failed.step(BackupInput.FAILED)
        if stepped.phase is BackupPhase.DONE:
            ss = _ended(ss, o.slot, stepped, now, 0)
        else:  # stopped for the copy: it starts again first
            ss = _restart(_with(ss, o.slot, stepped), o.slot, failed)
        line = f"{subject}: backup failed: {o.line}"
        events.append(Event(now, "backup-failed", line, service=o.service, slot=o.slot))
    else:
        return state, []
    return replace(state, services={**state.services, o.service: ss}), events


def _restart(ss: ServiceState, n: int, intent: SlotBackup) -> ServiceState:
    """A slot stopped for its copy, copied: its record names no task, so the next pass starts
    a new one on its host (no exit counted: the backup stopped it)."""
    if not intent.stop:
        return ss
    return with_slot(ss, n, relocate(ss.slot(n), ss.slot(n).host))


def _fold_verify(
    state: ControllerState, ss: ServiceState, o: VerifyEnded, now: float
) -> tuple[ControllerState, list[Event]]:
    if o.slot not in ss.backups.verifying:
        return state, []
    verifying = tuple(n for n in ss.backups.verifying if n != o.slot)
    result = Verified(o.snapshot, now, o.ok, o.line)
    book = replace(
        ss.backups, verifying=verifying, verified={**ss.backups.verified, o.slot: result}
    )
    ss = replace(ss, backups=book)
    subject = f"{o.service}.{o.slot}"
    what = f"snapshot {o.snapshot[:8]}" if o.snapshot else "its newest snapshot"
    if o.ok:
        kind, line = (
            "backup-verified",
            f"{subject}: {what} verified" + (f": {o.line}" if o.line else ""),
        )
    else:
        kind, line = "backup-verify-failed", f"{subject}: {what} failed its verify: {o.line}"
    event = Event(now, kind, line, service=o.service, slot=o.slot)
    return replace(state, services={**state.services, o.service: ss}), [event]


def backup_key(service: str) -> str:
    """The key of a service's `backup.schedule` times in a pass's `times`."""
    return f"backup:{service}"


def verify_key(service: str) -> str:
    """The key of a service's `backup.verify_schedule` times in a pass's `times`."""
    return f"verify:{service}"


def schedule_all(
    state: ControllerState, times: Mapping[str, Times | str], now: float
) -> tuple[ControllerState, tuple[Event, ...]]:
    """Every service's backup and drill schedules at this pass (`scheduled`): `times` holds
    each schedule's times around now (or why it has none), under `backup_key` and
    `verify_key`; a service with neither is left as it is."""
    services = dict(state.services)
    events: list[Event] = []
    for name, ss in state.services.items():
        policy = ss.spec.backup
        if policy is None or ss.removed or ss.spec.desired != "running":
            continue
        backup = times.get(backup_key(name)) if policy.schedule else None
        verify = times.get(verify_key(name)) if policy.verify_schedule else None
        if backup is None and verify is None:
            continue
        after, said = scheduled(ss, backup, verify, now)
        if after is not ss:
            services[name] = after
        events += said
    if services == state.services:
        return state, tuple(events)
    return replace(state, services=services), tuple(events)
