"""The `before_update` hook: once per new generation, a one-off task of the new spec that
must succeed before any task of that spec starts. Pure (docs/jobs.md#hooks).

A service's `HookRecord` says which generation its hook was run for and how it went.
`holds` is the fold's question (core/rollout.py, core/reconcile.py): while the current
generation's hook has not succeeded, no task of its spec starts, and its rollout waits
(or, once the hook failed, fails). `step` is the decision's (core/decide.py, its steps
carried out by minidock.act.carry): what to do about the hook now, from the record and the
hook one-offs the hosts show. The run's id
is a hash of the service, the generation and the attempt, so a pass that decides again
after a crash names the same container; the record is committed before each act and after
each outcome, so a kill -9 anywhere neither loses the hook nor runs it twice: one still
running is waited for, one finished is read, one created and never started is started.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from minidock.core.state import ControllerState, HookRecord, ServiceState
from minidock.model import OneOff, Service
from minidock.units import format_duration

__all__ = [
    "HOOK_KIND",
    "HookAct",
    "HookStep",
    "assumed_succeeded",
    "awaited",
    "cleared",
    "failed_line",
    "failing_hooks",
    "holds",
    "hook_run_id",
    "retried",
    "step",
    "superseded",
    "timed_out",
    "waiting_line",
]

HOOK_KIND = "hook"  # the minidock.oneoff label of a hook's one-off task


def holds(ss: ServiceState) -> bool:
    """Whether the service's current generation waits for its hook: it has one, it is
    running, it is not a rollback (the old generation's hook does not run again), and the
    hook has not succeeded for this generation, nor for an earlier one of the very same
    spec (a generation that only scales, or changes only the hook, runs nothing new)."""
    spec, record = ss.spec, ss.hook
    if spec.before_update is None or spec.desired != "running" or ss.rollout.rollback:
        return False
    if ss.removed or record.generation > ss.generation:  # rolled back below the hook's
        return False
    return not cleared(record, spec)


def cleared(record: HookRecord, spec: Service) -> bool:
    """Whether tasks of `spec` may start as far as hooks go: it has no hook, or its hook
    succeeded (for this generation or an earlier one of the very same spec)."""
    if spec.before_update is None:
        return True
    digest = spec.spec_hash()
    return record.cleared == digest or (record.succeeded and record.spec == digest)


def failing_hooks(state: ControllerState) -> list[tuple[str, str]]:
    """(service, line) of each service whose current generation's hook failed: no task of
    it starts, and every pass exits 1, until an apply runs it again. (A rollout still
    active has its failure action to come, at the next pass: it is not listed yet.)"""
    return [
        (name, f"{name}: {ss.hook.why}")
        for name, ss in sorted(state.services.items())
        if ss.hook.failed
        and ss.hook.generation == ss.generation
        and holds(ss)
        and not ss.rollout.active
    ]


def retried(record: HookRecord, generation: int) -> HookRecord:
    """The record once the operator applies the same spec again after its hook failed:
    the hook runs again (a new attempt, a new name); anything else is kept."""
    if record.failed and record.generation == generation:
        return record.renewed(generation, record.spec, record.attempt + 1)
    return record


def hook_run_id(cluster: str, service: str, generation: int, attempt: int) -> str:
    """The hook run of a generation (and attempt): the same decision names the same one."""
    key = f"{cluster}/{service}/hook/{generation}/{attempt}"
    return hashlib.sha256(key.encode()).hexdigest()[:10]


class HookAct(enum.StrEnum):
    """What the hook pass does about a service's hook this pass."""

    NONE = "none"  # no hook due, or it has its outcome
    START = "start"  # create it (a created one of its name is kept) and start it
    WAIT = "wait"  # it runs, or may run on a host that did not answer
    COLLECT = "collect"  # it finished: read the end of its output, record the outcome
    TIME_OUT = "time out"  # it ran past its timeout: failed; read its output, remove it
    LOST = "lost"  # started, and on no host while every host answered: failed
    REMOVE = "remove"  # a hook one-off still running that its outcome is already kept for
    SUPERSEDE = "supersede"  # an older generation's hook still runs: ended before the next


@dataclass(frozen=True)
class HookStep:
    """The record to commit before acting, the act, and the one-off it is about; for a
    start, where the hook runs (`host`, with the volumes of `slot`) and what (`spec`: its
    generation's spec with the hook's command)."""

    record: HookRecord
    act: HookAct
    oneoff: OneOff | None = None
    service: str = ""
    host: str = ""
    slot: int = 1
    spec: Service | None = None


def step(
    cluster: str, ss: ServiceState, seen: Sequence[OneOff], now: float, *, all_seen: bool = True
) -> HookStep:
    """One pass's decision for a service's hook, from its record and its hook one-offs on
    the hosts that answered (`all_seen`: every host answered). Hooks run one at a time: a
    hook of an older generation (a newer apply came, or a rollback) that still runs is
    ended first (`SUPERSEDE`), and the next generation's starts only once no host shows
    it running (one that may run on a host that did not answer is waited for)."""
    spec, generation, record = ss.spec, ss.generation, ss.hook
    name = spec.name
    mine = [o for o in seen if record.run and o.run == record.run and o.service == name]
    running = [o for o in mine if not o.finished]
    if record.done and running:  # timed out or superseded: the pass that said so stopped
        return HookStep(record, HookAct.REMOVE, running[0], name)
    if record.run and not record.done and record.generation != generation:
        if running:
            return HookStep(
                superseded(record, generation, now), HookAct.SUPERSEDE, running[0], name
            )
        if not mine and not all_seen and record.started:
            return HookStep(record, HookAct.WAIT, None, name)  # on a host that did not answer?
        record = superseded(record, generation, now)  # finished or gone: nothing to end
    if not holds(ss) or (record.done and record.generation == generation):
        return HookStep(record, HookAct.NONE, None, name)
    if record.generation != generation or not record.run:
        attempt = record.attempt if record.generation == generation else 0
        run = hook_run_id(cluster, name, generation, attempt)
        return HookStep(
            record.renewed(generation, spec.spec_hash(), attempt, run), HookAct.START, None, name
        )
    if not mine:
        if not all_seen:  # it may be on a host that did not answer: never a second one
            return HookStep(record, HookAct.WAIT, None, name)
        if record.started:
            why = failed_line(record, "is gone from every host (removed by hand?)", "")
            return HookStep(record.ended(None, why, now), HookAct.LOST, None, name)
        return HookStep(record, HookAct.START, None, name)
    found = mine[0]
    if found.finished:
        return HookStep(record, HookAct.COLLECT, found, name)
    if found.state == "created":  # a crash between its create and its start
        return HookStep(record, HookAct.START, found, name)
    timeout = spec.before_update.timeout if spec.before_update else 0.0
    record = record.started_on(found.host, now)  # found running after a crash: from now
    if now >= record.started + timeout:  # failed now; the act reads its output, removes it
        why = failed_line(record, timed_out(spec), "")
        return HookStep(record.ended(None, why, now), HookAct.TIME_OUT, found, name)
    return HookStep(record, HookAct.WAIT, found, name)


def superseded(record: HookRecord, generation: int, now: float) -> HookRecord:
    """An older generation's hook, ended because generation `generation` replaced it."""
    why = failed_line(record, f"ended: generation {generation} superseded it", "")
    return record.ended(None, why, now)


def assumed_succeeded(state: ControllerState) -> ControllerState:
    """The state as `plan` simulates it: each hook that holds and has not failed has
    succeeded (as it assumes every new task becomes healthy); a failed one still holds."""
    services = {
        name: replace(ss, hook=_succeeded(ss))
        for name, ss in state.services.items()
        if holds(ss) and not (ss.hook.failed and ss.hook.generation == ss.generation)
    }
    return replace(state, services={**state.services, **services}) if services else state


def _succeeded(ss: ServiceState) -> HookRecord:
    run = ss.hook.run if ss.hook.generation == ss.generation else ""
    fresh = ss.hook.renewed(ss.generation, ss.spec.spec_hash(), ss.hook.attempt, run)
    return fresh.ended(0, "", 0.0)


def awaited(state: ControllerState) -> frozenset[str]:
    """The run ids of the hooks a pass waits for: their one-offs, once finished, are the
    hook pass's to read (the pass's cleanup of finished one-offs leaves them)."""
    return frozenset(
        ss.hook.run
        for ss in state.services.values()
        if ss.hook.run and not ss.hook.done and holds(ss)
    )


def failed_line(record: HookRecord, what: str, tail: str) -> str:
    """The line a failed hook says: which run, what happened, and its output's end."""
    return f"before_update hook {record.run} {what}" + (f": {tail}" if tail else "")


def timed_out(spec: Service) -> str:
    timeout = spec.before_update.timeout if spec.before_update else 0.0
    return f"timed out after {format_duration(timeout)}"


def waiting_line(record: HookRecord, generation: int, now: float) -> str:
    """What status and plan say while the hook holds the service."""
    if record.generation != generation or not record.run:
        return f"before_update hook of generation {generation}: to run"
    if record.failed:
        return record.why
    if record.started:
        took = now - record.started
        return f"before_update hook {record.run} running on {record.host} ({took:.0f}s)"
    return f"before_update hook {record.run}: starting"
