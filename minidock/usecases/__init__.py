"""The use cases: what each command does, as functions with explicit inputs and typed
outcomes. The layer between the command line and the machinery.

Each use case takes paths, options, a `Runtime` (an executor factory and a clock) and,
where it runs passes, a `Report` callback for progress; it returns a frozen outcome with an
`exit_code` (`ExitCode`), or raises `BadInput` (exit 2) or `Busy` (exit 75) having changed
nothing. The writer lock and its patience live here (`access.Writer`). Dependencies point
inward: cli -> usecases -> runner, store, spec, status -> the core.
"""

from minidock.usecases.access import Writer, patience
from minidock.usecases.desired import apply, drain_plan, plan, validate
from minidock.usecases.intents import activate, drain, forget, rebalance, reset, rollback
from minidock.usecases.outcomes import (
    ApplyOutcome,
    BadInput,
    Busy,
    ConvergeOutcome,
    Ending,
    EventFilter,
    EventsOutcome,
    ExitCode,
    FailedUpdate,
    GenerationStored,
    IntentOutcome,
    IntentRecorded,
    PassDone,
    PassSkipped,
    PlanOutcome,
    Progress,
    RebalanceOutcome,
    Report,
    StatusOutcome,
    UseCaseError,
    ValidateOutcome,
    ignore,
    verdict,
    waited_for,
    why,
)
from minidock.usecases.passes import converge, reconcile, watch, watch_step
from minidock.usecases.reads import events, follow_events, status
from minidock.usecases.runtime import Clock, ExecutorFactory, Runtime

__all__ = [
    "ApplyOutcome",
    "BadInput",
    "Busy",
    "Clock",
    "ConvergeOutcome",
    "Ending",
    "EventFilter",
    "EventsOutcome",
    "ExecutorFactory",
    "ExitCode",
    "FailedUpdate",
    "GenerationStored",
    "IntentOutcome",
    "IntentRecorded",
    "PassDone",
    "PassSkipped",
    "PlanOutcome",
    "Progress",
    "RebalanceOutcome",
    "Report",
    "Runtime",
    "StatusOutcome",
    "UseCaseError",
    "ValidateOutcome",
    "Writer",
    "activate",
    "apply",
    "converge",
    "drain",
    "drain_plan",
    "events",
    "follow_events",
    "forget",
    "ignore",
    "patience",
    "plan",
    "rebalance",
    "reconcile",
    "reset",
    "rollback",
    "status",
    "validate",
    "verdict",
    "waited_for",
    "watch",
    "watch_step",
    "why",
]
