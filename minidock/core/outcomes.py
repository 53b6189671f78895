"""What acting learned, as values, and the one place it becomes state and events. Pure.

The runner carries out a plan's verbs and reports what happened that the next decision
must know: a start that failed on its host (`StartFailed`), the diagnosis of a task that
failed (`ExitNoted`: its log tail). It never derives events itself: `fold` turns each
outcome into the controller state's next value *and* its domain events (a slot that
reached its crash-loop limit, a rollout paused or rolled back by a failed start), the same
way `reconcile` does for what it decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from minidock.core import rollout, slots
from minidock.core.state import ControllerState, ServiceState
from minidock.model import Event

__all__ = ["ActOutcome", "ExitNoted", "StartFailed", "fold", "note_exit", "note_failure"]


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


ActOutcome = StartFailed | ExitNoted


def fold(
    state: ControllerState, outcomes: Iterable[ActOutcome], now: float
) -> tuple[ControllerState, list[Event]]:
    """Every outcome of a pass's acts, in order, into the state and its events."""
    events: list[Event] = []
    for outcome in outcomes:
        if isinstance(outcome, StartFailed):
            o = outcome
            state, more = note_failure(state, o.service, o.slot, o.task, o.line, now)
            events += more
        else:
            state = note_exit(state, outcome.service, outcome.slot, outcome.line, outcome.reason)
    return state, events


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
