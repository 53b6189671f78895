"""What the controller decided and keeps in its store: the durable side of every machine.

`ControllerState` is the one value a pass reads and returns. It holds, per service, the
effective spec (after any rollback), the previous one, the rollout and every slot's record;
per host, its phase, availability and last probe. Pure values, no behaviour.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from minidock.core.autoscale import Scaling, count
from minidock.core.backing import Backups
from minidock.core.hosts import HostState
from minidock.core.passes import PassStats
from minidock.core.schedule import JobRecord
from minidock.core.serving import SERVING, ServingMode
from minidock.core.slots import SlotState
from minidock.core.tls import TlsState
from minidock.core.volumes import VolumeMove
from minidock.model import Service

__all__ = [
    "ACTIVE",
    "CHANGED_BY",
    "ControllerState",
    "HookOutcome",
    "HookRecord",
    "Rollout",
    "RolloutPhase",
    "ServiceState",
    "Transition",
]


# -- a rollout's record (its machine: core/rollout.py) ----------------------------------------
class RolloutPhase(enum.StrEnum):
    NONE = "none"  # no rollout since the service was created
    UPDATING = "updating"
    CANARY = "canary"  # canary tasks of the new spec beside the old, until promoted
    PAUSED = "paused"  # a failure paused it: the operator applies again, or rolls back
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"


ACTIVE = (RolloutPhase.UPDATING, RolloutPhase.CANARY, RolloutPhase.ROLLING_BACK)


@dataclass(frozen=True)
class Rollout:
    phase: RolloutPhase = RolloutPhase.NONE
    reason: str = ""
    failures: int = 0
    total: int = 0
    done: tuple[int, ...] = ()  # slots that reached the target spec in this rollout
    inflight: tuple[int, ...] = ()  # slots whose new task is started but not yet through the gate
    healthy_since: tuple[tuple[int, float], ...] = ()  # gate clock per in-flight slot
    first_seen: tuple[tuple[int, float], ...] = ()  # when the controller first saw its task
    last_batch_at: float = 0.0  # when the latest task passed its gate (for update.delay)
    rollback: bool = field(default=False)  # its direction: back to the previous spec
    relocating: bool = False  # moves tasks off hosts they may no longer use: no spec to undo
    # a canary's slots (core/canary.py): (slot, the old task it runs beside, its host), so
    # a rollback gives each slot back to its old task; and the operator's `promote`
    canary: tuple[tuple[int, str, str], ...] = ()
    promoted: bool = False

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def paused(self) -> bool:
        return self.phase is RolloutPhase.PAUSED

    @property
    def in_canary(self) -> bool:
        return self.phase is RolloutPhase.CANARY

    def canary_slots(self) -> tuple[int, ...]:
        return tuple(n for n, _, _ in self.canary)


# -- a before_update hook's record (its rules: core/hooks.py) ----------------------------------
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
    # the spec hash of the latest spec whose hook succeeded: its tasks may run while a
    # later generation's hook is to run or runs, and a generation of that same spec
    # (one that only scales, or changes only the hook) runs no hook
    cleared: str = ""

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
        """Its outcome: succeeded when it exited 0 (its spec then cleared), else failed,
        saying `why`."""
        if exit_code == 0:
            return replace(
                self,
                finished=now,
                exit_code=0,
                outcome=HookOutcome.SUCCEEDED,
                why="",
                cleared=self.spec,
            )
        return replace(self, finished=now, exit_code=exit_code, outcome=HookOutcome.FAILED, why=why)

    def renewed(self, generation: int, spec: str, attempt: int, run: str = "") -> HookRecord:
        """A fresh record for a generation's hook (what was cleared is kept)."""
        cleared = self.spec if self.succeeded and not self.cleared else self.cleared
        return HookRecord(generation, spec, attempt, run, cleared=cleared)


# -- the controller's state --------------------------------------------------------------------
_EMPTY_SLOT = SlotState()


@dataclass(frozen=True)
class ServiceState:
    """The effective spec of a service (after any rollback) and its bookkeeping."""

    spec: Service
    generation: int
    previous: Service | None = None
    previous_generation: int | None = None
    rollout: Rollout = field(default_factory=Rollout)
    slots: dict[int, SlotState] = field(default_factory=dict)
    removed: bool = False  # pruned from the spec: stopped (dependents first), then dropped
    global_slots: dict[str, int] = field(default_factory=dict)  # mode "global": host -> slot
    rebalance: tuple[tuple[int, str], ...] = ()  # (slot, host to move it off), one at a time
    previous_failed: str = ""  # why `previous` was rolled back as failed ("" if it was not)
    job: JobRecord = field(default_factory=JobRecord)  # a scheduled job's runs (core/schedule.py)
    hook: HookRecord = field(default_factory=HookRecord)  # its before_update hook (core/hooks.py)
    # specs older than `previous` that tasks may still run (applies within one rollout):
    # kept so each such task is judged by what it runs (core/specs.py) until none is seen
    older: tuple[Service, ...] = ()
    serving: ServingMode = SERVING  # its routes: serving, maintenance or paused (core/serving.py)
    moves: dict[int, VolumeMove] = field(default_factory=dict)  # slot -> its move (core/volumes.py)
    backups: Backups = field(default_factory=Backups)  # its backups and drills (core/backing.py)
    # its autoscaled count as the passes decided it, and why (core/autoscale.py)
    scaling: Scaling = field(default_factory=Scaling)

    def through(self, transition: Transition, **changes: object) -> ServiceState:
        """This state after `transition`: `changes` set, every other field carried as it
        is. A field the transition may not change (`CHANGED_BY`) is a bug: AssertionError."""
        stray = sorted(k for k in changes if transition not in CHANGED_BY[k])
        if stray:
            raise AssertionError(f"{transition.name} may not change {', '.join(stray)}")
        return replace(self, **changes)  # type: ignore[arg-type]

    def slot(self, n: int) -> SlotState:
        found = self.slots.get(n)
        return _EMPTY_SLOT if found is None else found

    def slot_numbers(self) -> tuple[int, ...]:
        """The slots the service wants filled: 1..replicas, or a global service's one per
        eligible host."""
        if self.spec.mode == "global":
            return tuple(sorted(self.global_slots.values()))
        return tuple(range(1, self.replicas() + 1))

    def replicas(self) -> int:
        """The count it wants: the autoscaled one when a pass decided it, else the spec's."""
        return count(self.spec, self.scaling)

    def wanted(self) -> int:
        return len(self.slot_numbers())

    def host_of(self, slot: int) -> str:
        """A global service's slot's host ("" for a replicated service, whatever hosts it
        had while it was global)."""
        if self.spec.mode != "global":
            return ""
        return next((h for h, n in self.global_slots.items() if n == slot), "")


class Transition(enum.StrEnum):
    """The operator's and the rollout's transitions of a service's whole state."""

    ADMIT = "apply: a spec admitted"
    SCALE = "scale SERVICE=N"
    ROLLBACK = "rollback: the operator's, update.failure_action's, a failed canary's"
    PROMOTE = "promote SERVICE"
    RESET = "reset SERVICE"
    SERVE = "maintenance SERVICE on|off, pause SERVICE, resume SERVICE"


_T = Transition

# Every field of ServiceState, with the transitions that may change it: every other
# transition carries it as it is (`ServiceState.through`, which each of them goes through).
# An intent (a recorded move or restore, maintenance or pause, a rebalance) ends only by
# its own completion or the operator's word for it, so no transition here resets it. A
# field added to ServiceState fails tests/unit/test_durable.py until it has its row.
CHANGED_BY: dict[str, frozenset[Transition]] = {
    "spec": frozenset({_T.ADMIT, _T.SCALE, _T.ROLLBACK}),
    "generation": frozenset({_T.ADMIT, _T.SCALE, _T.ROLLBACK}),
    "previous": frozenset({_T.ADMIT, _T.SCALE, _T.ROLLBACK}),  # SCALE: its count too
    "previous_generation": frozenset({_T.ADMIT, _T.ROLLBACK}),
    "rollout": frozenset({_T.ADMIT, _T.SCALE, _T.ROLLBACK, _T.PROMOTE}),
    # failures and backoff forgotten; a superseded or failed canary's slots given back
    "slots": frozenset({_T.ADMIT, _T.SCALE, _T.ROLLBACK, _T.RESET}),
    "removed": frozenset({_T.ADMIT}),  # a pruned service named again by the file
    "global_slots": frozenset(),
    "rebalance": frozenset(),
    "previous_failed": frozenset({_T.ADMIT, _T.ROLLBACK}),
    "job": frozenset({_T.ADMIT, _T.ROLLBACK}),  # a changed schedule is armed afresh
    "hook": frozenset({_T.ADMIT}),  # the same spec applied again runs a failed hook again
    "older": frozenset({_T.ADMIT}),
    "serving": frozenset({_T.SERVE}),
    "moves": frozenset(),
    "backups": frozenset(),  # backups under way, scheduled times, the last drill: the passes'
    # the decided count: kept by an apply of the same `replicas` (within the new bounds),
    # else the file's or the operator's count again (core/autoscale.py, `admitted`)
    "scaling": frozenset({_T.ADMIT, _T.SCALE}),
}


@dataclass(frozen=True)
class ControllerState:
    cluster: str = ""
    generation: int = 0
    order: tuple[str, ...] = ()  # service names in the order of the applied file
    services: dict[str, ServiceState] = field(default_factory=dict)
    hosts: dict[str, HostState] = field(default_factory=dict)
    guard: str = ""  # the mass-loss guard's line while it holds the passes, else ""
    controller: str = ""  # this store's controller id, on the label of every task it starts
    adopted: tuple[str, ...] = ()  # other controllers' ids whose tasks `apply --adopt` took
    adopting: bool = False  # a brand-new store's first apply: what runs is adopted
    rebuilt: str = ""  # set when that first pass found tasks already running: what is lost
    # routed tasks taken out of every route before they stop: task id -> since when
    # (minidock.core.traffic)
    draining: dict[str, float] = field(default_factory=dict)
    passes: PassStats = field(default_factory=PassStats)  # every pass so far, for metrics
    tls: TlsState = field(default_factory=TlsState)  # ACME account and certificates

    def host(self, name: str) -> HostState:
        return self.hosts.get(name, HostState())

    def owns(self, controller: str) -> bool:
        """Whether a task labelled with `controller` is this store's to manage: its own,
        an adopted controller's, or unlabelled (started before tasks carried the label)."""
        return not (controller and self.controller) or controller in (
            self.controller,
            *self.adopted,
        )
