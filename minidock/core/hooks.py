"""The `before_update` hook: once per new generation, a one-off task of the new spec that
must succeed before any task of that spec starts. Pure (docs/jobs.md#hooks).

A service's `HookRecord` says which generation its hook was run for and how it went.
`holds` is the fold's question (core/rollout.py, core/reconcile.py): while the current
generation's hook has not succeeded, no task of its spec starts, and its rollout waits
(or, once the hook failed, fails). `step` is the hook pass's (minidock.hookpass): what to
do about the hook now, from the record and the hook one-offs the hosts show. The run's id
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
from typing import TYPE_CHECKING

from minidock.model import OneOff, Service
from minidock.units import format_duration

if TYPE_CHECKING:  # the service's record holds a HookRecord: state.py imports this module
    from minidock.core.state import ControllerState, ServiceState

__all__ = [
    "HOOK_KIND",
    "HookAct",
    "HookRecord",
    "HookStep",
    "assumed_succeeded",
    "awaited",
    "failed_line",
    "failing_hooks",
    "holds",
    "hook_run_id",
    "retried",
    "step",
    "timed_out",
    "waiting_line",
]

HOOK_KIND = "hook"  # the minidock.oneoff label of a hook's one-off task


class HookOutcome(enum.StrEnum):
    NONE = ""  # decided, started or running: not finished yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class HookRecord:
    """A service's before_update hook, as far as it went (in its ServiceState)."""

    generation: int = 0  # the generation it runs (ran) for: 0, none yet
    spec: str = ""  # that generation's spec hash
    attempt: int = 0  # 1 more each time the operator re-applies after it failed
    run: str = ""  # its run id ("": not decided for this generation and attempt yet)
    host: str = ""
    started: float = 0.0  # when a pass saw it started (0: decided, not started yet)
    finished: float = 0.0
    exit_code: int | None = None
    outcome: HookOutcome = HookOutcome.NONE
    why: str = ""  # a failure's line, with the end of the hook's output (masked)

    @property
    def name(self) -> str:
        return f"hook {self.run}"

    @property
    def done(self) -> bool:
        return self.outcome is not HookOutcome.NONE

    @property
    def succeeded(self) -> bool:
        return self.outcome is HookOutcome.SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.outcome is HookOutcome.FAILED

    def started_on(self, host: str, now: float) -> HookRecord:
        return replace(self, host=host, started=self.started or now)

    def ended(self, exit_code: int | None, why: str, now: float) -> HookRecord:
        """Its outcome: succeeded when it exited 0, else failed, saying `why`."""
        outcome = HookOutcome.SUCCEEDED if exit_code == 0 else HookOutcome.FAILED
        said = "" if outcome is HookOutcome.SUCCEEDED else why
        return replace(self, finished=now, exit_code=exit_code, outcome=outcome, why=said)


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
    return not (record.succeeded and record.spec == spec.spec_hash())


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
        return HookRecord(generation, record.spec, record.attempt + 1)
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
    TIME_OUT = "time out"  # it ran past its timeout: read, record it failed, remove it
    LOST = "lost"  # started, and on no host while every host answered
    REMOVE = "remove"  # a hook one-off still running that its outcome is already kept for


@dataclass(frozen=True)
class HookStep:
    """The record to commit before acting, the act, and the one-off it is about."""

    record: HookRecord
    act: HookAct
    oneoff: OneOff | None = None


def step(
    cluster: str, ss: ServiceState, seen: Sequence[OneOff], now: float, *, all_seen: bool = True
) -> HookStep:
    """One pass's decision for a service's hook, from its record and its hook one-offs on
    the hosts that answered (`all_seen`: every host answered)."""
    spec, generation, record = ss.spec, ss.generation, ss.hook
    mine = [o for o in seen if record.run and o.run == record.run and o.service == spec.name]
    if not holds(ss) or (record.done and record.generation == generation):
        running = [o for o in mine if not o.finished] if record.done else []
        if running:  # it timed out, and the pass that said so stopped before removing it
            return HookStep(record, HookAct.REMOVE, running[0])
        return HookStep(record, HookAct.NONE)
    if record.generation != generation or not record.run:
        attempt = record.attempt if record.generation == generation else 0
        run = hook_run_id(cluster, spec.name, generation, attempt)
        return HookStep(HookRecord(generation, spec.spec_hash(), attempt, run), HookAct.START)
    if not mine:
        if not all_seen:  # it may be on a host that did not answer: never a second one
            return HookStep(record, HookAct.WAIT)
        return HookStep(record, HookAct.LOST if record.started else HookAct.START)
    found = mine[0]
    if found.finished:
        return HookStep(record, HookAct.COLLECT, found)
    if found.state == "created":  # a crash between its create and its start
        return HookStep(record, HookAct.START, found)
    timeout = spec.before_update.timeout if spec.before_update else 0.0
    record = record.started_on(found.host, now)  # found running after a crash: from now
    if now >= record.started + timeout:
        return HookStep(record, HookAct.TIME_OUT, found)
    return HookStep(record, HookAct.WAIT, found)


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
    outcome = HookOutcome.SUCCEEDED
    return HookRecord(ss.generation, ss.spec.spec_hash(), ss.hook.attempt, run, outcome=outcome)


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
