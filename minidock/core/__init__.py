"""The decision core: pure functions of (desired, observed, state, now), no I/O.

Three state machines, each a module with its phase enum and transition table: the host
(`hosts`), the slot (`slots`) and the rollout (`rollout`). `reconcile` folds one pass over
them and returns a `Plan`; `intents` are the operator's words as state transitions;
`scheduler` chooses hosts. Modules here import only `minidock.model`, `minidock.units`
and each other (tests/unit/test_layers.py holds them to it).
"""

from minidock.core.fold import task_id
from minidock.core.hosts import Availability, HostPhase, HostState, SeenTask
from minidock.core.intents import (
    admit,
    begin_move,
    begin_restore,
    declined_retries,
    failed_updates,
    foreign_controllers,
    forget,
    pinned_on,
    promote,
    removals,
    reset,
    rollback,
    rollouts_started,
    scale,
    scaled_cluster,
    set_drained,
    set_serving,
    start_empty,
)
from minidock.core.outcomes import ActOutcome, ExitNoted, StartFailed
from minidock.core.outcomes import fold as fold_outcomes
from minidock.core.plan import Pending, Plan, Run, Stop, Waiting
from minidock.core.reconcile import reconcile
from minidock.core.rollout import failure_action, slot_target
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.state import ControllerState, Rollout, RolloutPhase, ServiceState

__all__ = [
    "ActOutcome",
    "Availability",
    "ControllerState",
    "ExitNoted",
    "HostPhase",
    "HostState",
    "Pending",
    "Plan",
    "Rollout",
    "RolloutPhase",
    "Run",
    "SeenTask",
    "ServiceState",
    "SlotPhase",
    "SlotState",
    "StartFailed",
    "Stop",
    "Waiting",
    "admit",
    "begin_move",
    "begin_restore",
    "declined_retries",
    "failed_updates",
    "failure_action",
    "fold_outcomes",
    "foreign_controllers",
    "forget",
    "pinned_on",
    "promote",
    "reconcile",
    "removals",
    "reset",
    "rollback",
    "rollouts_started",
    "scale",
    "scaled_cluster",
    "set_drained",
    "set_serving",
    "slot_target",
    "start_empty",
    "task_id",
]
