"""What acting learned, as values, and the one place it becomes state and events. Pure.

The act path carries out a plan and reports what happened that the state must know: a
start that failed on its host (`StartFailed`), the diagnosis of a task that failed
(`ExitNoted`: its log tail), a hook started or ended (`HookStarted`, `HookEnded`), a
scheduled job's run started or ended (`JobStarted`, `JobEnded`), a certificate's order
started, answered, issued or refused (`CertOrdered`, `CertAnswered`, `CertIssued`,
`CertFailed`). It never derives events itself: `fold` turns each
outcome into the controller state's next value *and* its domain events (a slot that
reached its crash-loop limit, a rollout paused or rolled back by a failed start, a hook's
outcome), the same way `decide` does for what it decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from minidock.core import hooks, rollout, slots, tls
from minidock.core.moving import MoveFailed, SourceCleaned, VolumesCopied, fold_move
from minidock.core.saving import BackupOutcome, fold_backup
from minidock.core.schedule import JobRun, record_run
from minidock.core.state import ControllerState, ServiceState
from minidock.core.tls import AcmeAccount, PendingOrder
from minidock.model import Event
from minidock.units import format_duration

__all__ = [
    "ActOutcome",
    "CertAnswered",
    "CertFailed",
    "CertIssued",
    "CertOrdered",
    "ExitNoted",
    "HookEnded",
    "HookStarted",
    "JobEnded",
    "JobStarted",
    "StartFailed",
    "fold",
    "note_exit",
    "note_failure",
]


@dataclass(frozen=True)
class StartFailed:
    """A task could not be started on its host (`docker run` refused, image missing...)."""

    service: str
    slot: int
    task: str
    line: str  # why, masked


@dataclass(frozen=True)
class ExitNoted:
    """A failed task's diagnosis: its exit and log tail (`line`); `reason` is the failure
    as the decision put it, without the log (replaced by `line` where a rollout quotes it)."""

    service: str
    slot: int
    line: str
    reason: str = ""


@dataclass(frozen=True)
class HookStarted:
    """A hook's one-off task started on `host` (`fresh`: this act created it)."""

    service: str
    run: str
    host: str
    fresh: bool = True


@dataclass(frozen=True)
class HookEnded:
    """A hook's end as the act found it: its exit code (None: it never ran to an end:
    could not start, timed out), what happened (`what`, "" for an exit) and the end of its
    output (masked), and how long it ran."""

    service: str
    run: str
    exit_code: int | None
    tail: str = ""
    what: str = ""
    took: float = 0.0


@dataclass(frozen=True)
class JobStarted:
    """A scheduled job's run started on `host` (`fresh`: this act created it)."""

    job: str
    run: str
    host: str
    fresh: bool = True


@dataclass(frozen=True)
class JobEnded:
    """A scheduled job's run ended (or never started: `run.exit_code` None)."""

    job: str
    run: JobRun


@dataclass(frozen=True)
class CertIssued:
    """A certificate the ACME CA issued for `name` (`at`: when, on the controller's clock)."""

    name: str
    chain: str
    key: str = field(repr=False)
    issuer: str
    not_after: float
    directory: str
    account: AcmeAccount
    at: float
    until: str = ""  # `not_after` as a reader reads it ("2027-03-02 10:00 UTC")
    not_before: float = 0.0  # the leaf's start (0: not known)


@dataclass(frozen=True)
class CertOrdered:
    """An ACME order a pass started for `name`, its HTTP-01 responses in `order`, with the
    account it used: the next pass loads the responses and tells the CA, later passes
    collect it."""

    name: str
    order: PendingOrder
    account: AcmeAccount
    directory: str
    at: float


@dataclass(frozen=True)
class CertAnswered:
    """The CA told `name`'s responses are up, after the pass had loaded them."""

    name: str
    at: float


@dataclass(frozen=True)
class CertFailed:
    """An order for `name` that failed, why, and the CA's Retry-After (epoch, 0: none)."""

    name: str
    reason: str
    at: float
    retry_after: float = 0.0


ActOutcome = (
    StartFailed
    | ExitNoted
    | HookStarted
    | HookEnded
    | JobStarted
    | JobEnded
    | CertIssued
    | CertOrdered
    | CertAnswered
    | CertFailed
    | VolumesCopied
    | MoveFailed
    | SourceCleaned
    | BackupOutcome
)


def fold(
    state: ControllerState, outcomes: Iterable[ActOutcome], now: float
) -> tuple[ControllerState, list[Event]]:
    """Every outcome of a pass's acts, in order, into the state and its events."""
    events: list[Event] = []
    for o in outcomes:
        if isinstance(o, StartFailed):
            state, more = note_failure(state, o.service, o.slot, o.task, o.line, now)
        elif isinstance(o, ExitNoted):
            state, more = note_exit(state, o.service, o.slot, o.line, o.reason), []
        elif isinstance(o, HookStarted | HookEnded):
            state, more = _hook(state, o, now)
        elif isinstance(o, JobStarted | JobEnded):
            state, more = _job(state, o, now)
        elif isinstance(o, VolumesCopied | MoveFailed | SourceCleaned):
            state, more = fold_move(state, o, now)
        elif isinstance(o, BackupOutcome):
            state, more = fold_backup(state, o, now)
        else:
            state, more = _certificate(state, o)
        events += more
    return state, events


def _hook(
    state: ControllerState, o: HookStarted | HookEnded, now: float
) -> tuple[ControllerState, list[Event]]:
    """A hook's start or end into its record (only the run the record names)."""
    ss = state.services.get(o.service)
    if ss is None or ss.hook.run != o.run:
        return state, []
    record = ss.hook
    if isinstance(o, HookStarted):
        record = record.started_on(o.host, now)
        line = f"before_update hook {o.service}.hook.{o.run} started on {o.host}"
        said = [line] if o.fresh else []
        kind = "hook-started"
    elif o.exit_code == 0:
        record = record.ended(0, "", now)
        said, kind = (
            [f"before_update hook {o.run} succeeded ({max(0.0, o.took):.1f}s)"],
            "hook-succeeded",
        )
    elif o.exit_code is None and not o.what:  # timed out: failed already, its output read
        record = replace(record, why=record.why + (f": {o.tail}" if o.tail else ""))
        said, kind = [record.why], "hook-failed"
    else:
        what = o.what or f"failed (exit {o.exit_code})"
        record = record.ended(o.exit_code, hooks.failed_line(record, what, o.tail), now)
        said, kind = [record.why], "hook-failed"
    state = _with_service(state, replace(ss, hook=record))
    events = [
        Event(now, kind, f"{o.service}: {line}", service=o.service, task=o.run) for line in said
    ]
    return state, events


def _job(
    state: ControllerState, o: JobStarted | JobEnded, now: float
) -> tuple[ControllerState, list[Event]]:
    """A scheduled run's start or end into its job's record."""
    ss = state.services.get(o.job)
    if ss is None:
        return state, []
    if isinstance(o, JobStarted):
        record = ss.job.started(o.run)
        line = f"started {o.job}.job.{o.run} on {o.host}"
        events = (
            [Event(now, "job-started", line, o.job, host=o.host, task=o.run)] if o.fresh else []
        )
    else:
        record, event = record_run(ss.job, o.run, now)
        events = [replace(event, service=o.job)] if event is not None else []
    return _with_service(state, replace(ss, job=record)), events


def _certificate(
    state: ControllerState, o: CertIssued | CertOrdered | CertAnswered | CertFailed
) -> tuple[ControllerState, list[Event]]:
    """A certificate issued, an order started or answered, or an order refused (backing
    off), into the TLS state."""
    if isinstance(o, CertOrdered):
        after = tls.ordered(state.tls, o.name, o.order, o.account)
        line = (
            f"certificate for {o.name} ordered from {o.directory}: the next pass loads its"
            " challenge responses and tells the CA, a later pass collects it"
        )
        return replace(state, tls=after), [Event(o.at, "certificate-ordered", line)]
    if isinstance(o, CertAnswered):
        return replace(state, tls=tls.answered(state.tls, o.name)), []
    if isinstance(o, CertFailed):
        after = tls.failed(state.tls, o.name, o.reason, o.at, o.retry_after)
        wait = after.record(o.name).next_try - o.at
        line = (
            f"certificate for {o.name} not issued: {o.reason}; next try in {format_duration(wait)}"
        )
        return replace(state, tls=after), [Event(o.at, "certificate-failed", line)]
    after = tls.issued(
        replace(state.tls, account=o.account),
        o.name,
        o.chain,
        o.key,
        issuer=o.issuer,
        not_after=o.not_after,
        directory=o.directory,
        now=o.at,
        not_before=o.not_before,
    )
    line = f"certificate for {o.name} issued by {o.issuer}, valid until {o.until}"
    return replace(state, tls=after), [Event(o.at, "certificate-issued", line)]


def note_failure(
    state: ControllerState, service: str, slot: int, task: str, line: str, now: float
) -> tuple[ControllerState, list[Event]]:
    """An act failed (e.g. `docker run` refused, image missing): count it against the slot,
    and against the rollout when the slot was part of one. Its events: `failed` when the
    slot reaches its crash-loop limit, and the failure action's (paused, rolling back, or
    a tolerated failure)."""
    ss = state.services.get(service)
    if ss is None:
        return state, []
    before = ss.slot(slot)
    record = slots.start_failed(before, task, now, line, ss.spec.restart)
    events: list[Event] = []
    if record.failed and not before.failed:
        message = f"{service}.{slot} failed: {record.last_exit}"
        events.append(Event(now, "failed", message, service=service, slot=slot))
    ss = replace(ss, slots={**ss.slots, slot: record})
    ss, said = rollout.act_failed(ss, slot, line, now)
    events += said
    return _with_service(state, ss), events


def note_exit(
    state: ControllerState, service: str, slot: int, line: str, reason: str = ""
) -> ControllerState:
    """Keep the diagnosis (exit code and log tail) of a slot's last failure; where that
    failure (`reason`, without the log) is the rollout's reason, the rollout's too."""
    ss = state.services.get(service)
    if ss is None:
        return state
    ss = replace(ss, slots={**ss.slots, slot: replace(ss.slot(slot), last_exit=line)})
    r = ss.rollout
    if reason and reason != line and reason in r.reason:
        ss = replace(ss, rollout=replace(r, reason=r.reason.replace(reason, line, 1)))
    return _with_service(state, ss)


def _with_service(state: ControllerState, ss: ServiceState) -> ControllerState:
    return replace(state, services={**state.services, ss.spec.name: ss})
