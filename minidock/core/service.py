"""One service's state as its rollout moves it: which spec a slot should run, what a failure
does to the rollout, and a rollback's swap of specs. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from minidock.core import rollout, slots
from minidock.core.evolve import evolve
from minidock.core.rollout import RolloutInput, RolloutPhase
from minidock.core.slots import SlotState
from minidock.core.state import ServiceState
from minidock.model import Event, Service

__all__ = [
    "back_to_previous",
    "failure_action",
    "renewed",
    "rolled_back",
    "slot_target",
    "with_slot",
    "with_slots",
]


def slot_target(ss: ServiceState, slot: int) -> Service:
    """The spec a slot should run: a paused rollout keeps slots it has not reached on the
    previous spec, so a failed update costs no capacity."""
    r = ss.rollout
    if r.paused and not r.rollback and slot not in r.done and ss.previous:
        return ss.previous
    return ss.spec


def with_slot(ss: ServiceState, n: int, state: SlotState) -> ServiceState:
    if ss.slot(n) == state:
        return ss
    return evolve(ss, slots={**ss.slots, n: state})


def with_slots(ss: ServiceState, changed: Mapping[int, SlotState]) -> ServiceState:
    """`with_slot` for many slots at once."""
    if all(ss.slot(n) == state for n, state in changed.items()):
        return ss
    return evolve(ss, slots={**ss.slots, **changed})


def back_to_previous(ss: ServiceState, failed: list[int]) -> ServiceState:
    """Where a failure paused an update, its failed slots go back to the previous spec,
    known good, at once: the restart backoff the new spec's failure set does not apply."""
    if not ss.rollout.paused or ss.rollout.rollback or not failed:
        return ss
    again = {n: slots.skip_backoff(ss.slot(n)) for n in failed}
    return replace(ss, slots={**ss.slots, **again})


def failure_action(ss: ServiceState, why: str, now: float) -> tuple[ServiceState, Event]:
    """Apply `update.failure_action` once the failure ratio is exceeded."""
    r = ss.rollout
    policy = ss.spec.update
    name = ss.spec.name
    if (
        policy.failure_action == "continue"
        or r.failures / max(1, r.total) <= policy.max_failure_ratio
    ):
        return (
            replace(ss, rollout=rollout.step(r, RolloutInput.FAILURE_TOLERATED, reason=why)),
            Event(now, "rollout-failure", f"{name}: {why}; continuing", service=name),
        )
    rollback = policy.failure_action == "rollback" and not r.relocating  # nothing to undo
    if rollback and r.phase is RolloutPhase.UPDATING and ss.previous:
        return (
            rolled_back(ss, f"rolled back: {why}", failed=why),
            Event(now, "rollout-rollback", f"{name}: rolling back: {why}", service=name),
        )
    paused = rollout.step(r, RolloutInput.FAILURE_PAUSE, reason=why, inflight=(), healthy_since=())
    return (
        replace(ss, rollout=paused),
        Event(now, "rollout-paused", f"{name}: paused: {why}", service=name),
    )


def renewed(records: Mapping[int, SlotState]) -> dict[int, SlotState]:
    """Every slot's record across a change (a new generation, a rollback, `reset`): its
    failed attempts, Failed and backoff forgotten, its task and host kept. Only a task that
    replaces the slot's task changes them, and a slot scaled away leaves with its last task."""
    return {n: slots.reset(s) for n, s in records.items()}


def rolled_back(ss: ServiceState, reason: str, *, failed: str = "") -> ServiceState:
    """Swap to the previous spec and roll every task back the same way; a failing rollback
    pauses (never loops), since a rollback's failure action is never another rollback.
    `failed`: why the spec being left failed (then `rollback` will not return to it)."""
    assert ss.previous is not None
    return ServiceState(
        spec=ss.previous,
        generation=ss.previous_generation or ss.generation,
        previous=ss.spec,
        previous_generation=ss.generation,
        rollout=rollout.begin(ss.rollout, ss.wanted(), rollback=True, reason=reason),
        slots=renewed(ss.slots),
        global_slots=ss.global_slots,
        previous_failed=failed,
    )
