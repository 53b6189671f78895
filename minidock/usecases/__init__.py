"""The use cases: what each command does, as functions with explicit inputs and typed
outcomes. The layer between the command line and the machinery.

Each use case takes paths, options, a `Runtime` (an executor factory and a clock) and,
where it runs passes, a `Report` callback for progress; it returns a frozen outcome with an
`exit_code` (`ExitCode`), or raises `BadInput` (exit 2) or `Busy` (exit 75) having changed
nothing. The writer lock and its patience live here (`access.Writer`). Dependencies point
inward: cli -> usecases -> runner, store, spec, status -> the core.
"""

from minidock.store import StateLocation
from minidock.usecases.access import Writer, patience, state_location
from minidock.usecases.desired import apply, plan, validate
from minidock.usecases.intents import activate, drain, reset, rollback
from minidock.usecases.migrate import migrate
from minidock.usecases.outcomes import (
    ApplyOutcome,
    BadInput,
    Busy,
    ConvergeOutcome,
    Deposed,
    Ending,
    EventsOutcome,
    ExitCode,
    FailedUpdate,
    GenerationStored,
    IntentOutcome,
    IntentRecorded,
    MigrateOutcome,
    PassDone,
    PassSkipped,
    PlanOutcome,
    Progress,
    Report,
    StatusOutcome,
    StoreDown,
    UseCaseError,
    ValidateOutcome,
    ignore,
    verdict,
)
from minidock.usecases.passes import converge, reconcile, watch, watch_step
from minidock.usecases.reads import events, status
from minidock.usecases.runtime import Clock, ExecutorFactory, Runtime

__all__ = [
    "ApplyOutcome",
    "BadInput",
    "Busy",
    "Clock",
    "ConvergeOutcome",
    "Deposed",
    "Ending",
    "EventsOutcome",
    "ExecutorFactory",
    "ExitCode",
    "FailedUpdate",
    "GenerationStored",
    "IntentOutcome",
    "IntentRecorded",
    "MigrateOutcome",
    "PassDone",
    "PassSkipped",
    "PlanOutcome",
    "Progress",
    "Report",
    "Runtime",
    "StateLocation",
    "StatusOutcome",
    "StoreDown",
    "UseCaseError",
    "ValidateOutcome",
    "Writer",
    "activate",
    "apply",
    "converge",
    "drain",
    "events",
    "ignore",
    "migrate",
    "patience",
    "plan",
    "reconcile",
    "reset",
    "rollback",
    "state_location",
    "status",
    "validate",
    "verdict",
    "watch",
    "watch_step",
]
