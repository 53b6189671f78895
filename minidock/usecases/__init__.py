"""The use cases: what each command does, as functions with explicit inputs and typed
outcomes. The layer between the command line and the machinery.

Each use case takes paths, options, a `Runtime` (an executor factory and a clock) and,
where it runs passes, a `Report` callback for progress; it returns a frozen outcome with an
`exit_code` (`ExitCode`), or raises `BadInput` (exit 2) or `Busy` (exit 75) having changed
nothing. The writer lock and its patience live here (`access.Writer`). Dependencies point
inward: cli -> usecases -> runner, store, spec, status -> the core.
"""

from minidock.ssh import Terminal  # what `exec -it` joins a task to: the CLI builds it
from minidock.usecases.access import Writer, patience
from minidock.usecases.desired import apply, plan, scale, validate
from minidock.usecases.images import push
from minidock.usecases.intents import activate, drain, reset, rollback
from minidock.usecases.outcomes import (
    ApplyOutcome,
    BadInput,
    Busy,
    ConvergeOutcome,
    Ending,
    EventsOutcome,
    ExecOutcome,
    ExitCode,
    FailedUpdate,
    GenerationStored,
    HostProblem,
    IntentOutcome,
    IntentRecorded,
    LogLine,
    LogsOutcome,
    OnLogLine,
    OnPushProgress,
    PassDone,
    PassSkipped,
    PlanOutcome,
    Progress,
    PsOutcome,
    PushOutcome,
    PushProgress,
    Report,
    ScaleOutcome,
    StatusOutcome,
    TaskRow,
    UseCaseError,
    ValidateOutcome,
    ignore,
    verdict,
)
from minidock.usecases.passes import converge, reconcile, watch, watch_step
from minidock.usecases.reads import events, status
from minidock.usecases.runtime import Clock, EngineFactory, ExecutorFactory, Runtime
from minidock.usecases.tasks import exec_task, logs, ps

__all__ = [
    "ApplyOutcome",
    "BadInput",
    "Busy",
    "Clock",
    "ConvergeOutcome",
    "Ending",
    "EngineFactory",
    "EventsOutcome",
    "ExecOutcome",
    "ExecutorFactory",
    "ExitCode",
    "FailedUpdate",
    "GenerationStored",
    "HostProblem",
    "IntentOutcome",
    "IntentRecorded",
    "LogLine",
    "LogsOutcome",
    "OnLogLine",
    "OnPushProgress",
    "PassDone",
    "PassSkipped",
    "PlanOutcome",
    "Progress",
    "PsOutcome",
    "PushOutcome",
    "PushProgress",
    "Report",
    "Runtime",
    "ScaleOutcome",
    "StatusOutcome",
    "TaskRow",
    "Terminal",
    "UseCaseError",
    "ValidateOutcome",
    "Writer",
    "activate",
    "apply",
    "converge",
    "drain",
    "events",
    "exec_task",
    "ignore",
    "logs",
    "patience",
    "plan",
    "ps",
    "push",
    "reconcile",
    "reset",
    "rollback",
    "scale",
    "status",
    "validate",
    "verdict",
    "watch",
    "watch_step",
]
