"""What the use cases return and report: one exit-code enum, typed refusals, progress
records and frozen outcomes. No I/O; the CLI turns these into lines, tables and exit codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.core import Plan
from minidock.core.causes import failed_probes
from minidock.core.hooks import failing_hooks
from minidock.core.jobs import failing_jobs
from minidock.core.plan import WaitKind
from minidock.core.progress_rule import outlook
from minidock.model import ContainerState, Event, Health
from minidock.spec.messages import did_you_mean

if TYPE_CHECKING:  # the types of fields and arguments only: a command loads what it runs
    from minidock.act.push import Pushed
    from minidock.core.rebalance import Move
    from minidock.documents.plan import PlanDocument
    from minidock.documents.status import StatusDocument
    from minidock.runner import PassResult
    from minidock.store import StateLocation


class ExitCode(enum.IntEnum):
    """The process exit codes of PRODUCT.md, the only place they are defined."""

    OK = 0  # done, or converged
    FAILED = 1  # an act failed, a slot is Failed, a rollout is paused or was rolled back
    USAGE = 2  # bad input or usage
    NOT_CONVERGED = 3  # progress made or pending; `--wait` timed out
    DEGRADED = 4  # everything that can run runs, but hosts are down or tasks unplaceable
    INTERRUPTED = 130  # SIGINT or SIGTERM: the pass under way finished and was recorded
    LOCKED = 75  # EX_TEMPFAIL: another writer holds the state directory's lock


class UseCaseError(Exception):
    """A use case refused before it changed anything: one line, and the exit code."""

    exit_code = ExitCode.FAILED


class BadInput(UseCaseError):
    """A bad file, an unknown host or service, nothing applied yet: exit 2."""

    exit_code = ExitCode.USAGE


def unknown(noun: str, name: str, known: Sequence[str], *, where: str = "") -> BadInput:
    """The refusal of a name that is not there (`noun` is "host", "service", ...): the
    file loader's did-you-mean, then every known one, e.g. `unknown service 'wbe' (did
    you mean 'web'?); known services: db, web`; `where` (a file) goes first."""
    head = f"{where}: " if where else ""
    listed = ", ".join(known) or "none"
    return BadInput(
        f"{head}unknown {noun} {name!r}{did_you_mean(name, known)}; known {noun}s: {listed}"
    )


class Busy(UseCaseError):
    """Another writer kept the state directory's lock past this command's patience: exit 75."""

    exit_code = ExitCode.LOCKED


class Deposed(UseCaseError):
    """This controller lost the writer lock in the middle of its work (etcd: its lease
    expired while it was paused or cut off): it committed nothing more and stopped acting;
    another controller may be acting now. Exit 75, like a taken lock."""

    exit_code = ExitCode.LOCKED


class StoreDown(UseCaseError):
    """The state store does not answer (no etcd endpoint answers, or etcd has no quorum):
    nothing was decided or done. Exit 1: an operator must look."""

    exit_code = ExitCode.FAILED


def verdict(result: PassResult) -> ExitCode:
    """A pass's exit code: 1 an act failed, the mass-loss guard held the pass, a service
    has Failed slots or a paused rollout (1 wins over 3); 3 when something moves on by
    itself (core/progress_rule.py); 4 when what remains waits on a change of the world
    (hosts down, tasks no host takes, dependencies that cannot progress); else 0."""
    plan = result.plan
    if result.failures or plan.guard or plan.failed_slots() or plan.paused():
        return ExitCode.FAILED
    if failing_jobs(plan.state) or failing_hooks(plan.state):
        return ExitCode.FAILED
    seen = outlook(plan)
    if seen.progressing:
        return ExitCode.NOT_CONVERGED
    return ExitCode.DEGRADED if seen.stuck else ExitCode.OK


def why(result: PassResult, code: ExitCode) -> str:
    """The one line a non-zero exit prints (short: cron mails it every pass)."""
    plan = result.plan
    probes = "; ".join(failed_probes(result.observed))
    if code is ExitCode.FAILED:
        reasons = []
        if plan.guard:  # the hosts' own reasons, not only the guard's advice
            reasons.append(f"{plan.guard}; probes failed: {probes}" if probes else plan.guard)
        reasons += [f"{_count(len(result.failures), 'act')} failed"] if result.failures else []
        reasons += [f"{s}.{n} Failed" for s, n, _ in plan.failed_slots()]
        reasons += [f"{s} rollout paused" for s in plan.paused()]
        reasons += [line for _, line in failing_jobs(plan.state)]
        reasons += [line for _, line in failing_hooks(plan.state)]
        return "failed: " + _few(reasons)
    seen = outlook(plan)
    if code is ExitCode.DEGRADED:
        down = probes and any(hs.down for hs in plan.state.hosts.values())
        return (
            "degraded: " + _few(list(seen.stuck)) + (f"; probes failed: {probes}" if down else "")
        )
    if code is ExitCode.NOT_CONVERGED:
        return "not converged: " + _few([*seen.moving, *seen.stuck])
    return ""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def waited_for(result: PassResult) -> tuple[str, ...]:
    """What the pass still waits for: the hosts' failed probes grouped by cause, its waits,
    then its pending slots."""
    plan = result.plan
    probes = tuple(f"probes failed: {line}" for line in failed_probes(result.observed))
    pending = (f"{p.service}.{p.slot} pending: {p.reason}" for p in plan.pending)
    return (*probes, *plan.waiting, *pending)


def _few(items: list[str], most: int = 3) -> str:
    shown = "; ".join(items[:most])
    return shown + (f" (and {len(items) - most} more)" if len(items) > most else "")


# -- progress: what a use case reports while it works ---------------------------------------
@dataclass(frozen=True)
class GenerationStored:
    """`apply` stored the cluster file as generation `generation` in `directory`."""

    generation: int
    cluster: str
    services: int
    directory: StateLocation  # the state directory, or the etcd URL
    changed: bool = True  # False: the file is what `generation` already holds ("no changes")
    warnings: tuple[str, ...] = ()  # the file's secret-looking env keys (spec, once each)


@dataclass(frozen=True)
class IntentRecorded:
    """An operator's word (drain, activate, rollback, reset) is recorded; passes follow."""

    message: str
    cluster: str = ""  # which cluster recorded it, when the intent acts in several


@dataclass(frozen=True)
class PassDone:
    """One reconcile pass ran: what it did, and its verdict."""

    result: PassResult
    exit_code: ExitCode
    cluster: str = ""  # which cluster's pass, when the store holds several
    seconds: float = 0.0  # how long a `watch`'s pass took (0: not timed)


@dataclass(frozen=True)
class PassSkipped:
    """A `watch` pass found another writer at work (or lost the lock to one mid-way:
    `deposed`), or was left to the `watch` that makes the cluster's passes (`deferred`,
    core.deciding); the next pass sees its result."""

    reason: str
    deposed: bool = False
    deferred: bool = False
    cluster: str = ""  # which cluster's pass, when the store holds several
    standby: int = 0  # hosts this standby holds a warm connection to (passes.stand_by)
    hosts: int = 0  # of how many in the inventory
    keeps: int | None = None  # how many it keeps connected (its share and standby set; None: all)
    names: tuple[str, ...] = ()  # the inventory's hosts (() when it could not be read)
    probed: int = 0  # hosts of its share it probed and wrote (usecases.borrowing)


@dataclass(frozen=True)
class ImageBuilt:
    """`apply` built a service's image on the controller (`seconds` taken), or found the
    content tag there already (`built` False: nothing to build)."""

    service: str
    image: str
    seconds: float
    built: bool = True


Progress = GenerationStored | IntentRecorded | PassDone | PassSkipped | ImageBuilt
Report = Callable[[Progress], None]


def labelled(report: Report, cluster: str) -> Report:
    """`report`, with the passes it is told of named by `cluster` (when it is not "")."""
    if not cluster:
        return report

    def named(progress: Progress) -> None:
        if isinstance(progress, IntentRecorded | PassDone | PassSkipped):
            progress = replace(progress, cluster=cluster)
        report(progress)

    return named


def ignore(progress: Progress) -> None:
    """A Report that shows nothing."""


# -- outcomes ----------------------------------------------------------------------------------
class Ending(enum.Enum):
    """How a run of passes ended."""

    NO_WAIT = "no wait"  # one pass, no waiting asked for: the pass's verdict is the outcome
    CONVERGED = "converged"  # waited, and a pass found nothing left to do
    STOPPED = "stopped"  # waited, and a pass failed (exit 1): waiting cannot help
    TIMED_OUT = "timed out"  # waited until the timeout; work remains
    INTERRUPTED = "interrupted"  # a signal came: the pass under way finished, none after


@dataclass(frozen=True)
class ConvergeOutcome:
    """The passes of `converge`: how they ended, after how many, and (on a timeout) what
    the last pass still waited for."""

    exit_code: ExitCode
    ending: Ending
    passes: int
    timeout: float
    waiting: tuple[str, ...] = ()
    why: str = ""  # for a non-zero exit: the one line that says why


@dataclass(frozen=True)
class FailedUpdate:
    """A rolling update the apply started that was rolled back automatically, and why."""

    service: str
    reason: str


@dataclass(frozen=True)
class ApplyOutcome:
    generation: int
    convergence: ConvergeOutcome
    failed_updates: tuple[FailedUpdate, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        """1 when an update this apply started was rolled back, though the fleet converged
        (an interrupt's 130 wins: the passes stopped before they could say)."""
        if self.convergence.ending is Ending.INTERRUPTED:
            return self.convergence.exit_code
        return ExitCode.FAILED if self.failed_updates else self.convergence.exit_code


@dataclass(frozen=True)
class RebalanceOutcome:
    """The moves rebalance found (and, unless only planned, the passes that made them)."""

    moves: tuple[Move, ...]
    convergence: ConvergeOutcome | None

    @property
    def exit_code(self) -> ExitCode:
        return self.convergence.exit_code if self.convergence else ExitCode.OK


@dataclass(frozen=True)
class IntentOutcome:
    message: str
    convergence: ConvergeOutcome

    @property
    def exit_code(self) -> ExitCode:
        return self.convergence.exit_code


@dataclass(frozen=True)
class PlanOutcome:
    """What one pass would do now; nothing was written."""

    plan: Plan
    exit_code: ExitCode = ExitCode.OK
    removals: tuple[str, ...] = ()  # services the file no longer names
    pruned: bool = False  # whether the plan removes them (`--prune`)
    document: PlanDocument | None = None  # every step to convergence, simulated
    failed_probes: tuple[str, ...] = ()  # hosts that did not answer, grouped by cause
    schedules: tuple[str, ...] = ()  # when each scheduled backup and drill runs next

    @property
    def hooks_first(self) -> tuple[str, ...]:
        """The before_update hooks to run or running now: the passes shown assume that
        each succeeds (core/simulate.py)."""
        return tuple(w for w in self.plan.waiting if w.kind is WaitKind.HOOK)

    @property
    def promotes(self) -> tuple[str, ...]:
        """The canaries that passed and wait for the operator's `minidock promote`."""
        return tuple(w for w in self.plan.waiting if w.kind is WaitKind.PROMOTE)


@dataclass(frozen=True)
class StatusOutcome:
    documents: tuple[StatusDocument, ...]  # one per cluster, the store's own first
    exit_code: ExitCode = ExitCode.OK

    @property
    def document(self) -> StatusDocument:
        """The first cluster's (a store's only one, mostly)."""
        return self.documents[0]


@dataclass(frozen=True)
class EventsOutcome:
    events: tuple[Event, ...]
    exit_code: ExitCode = ExitCode.OK
    ids: tuple[int, ...] = ()  # each event's id in its cluster's log (they only grow)
    several: bool = False  # the events are of several clusters (each names its own)


@dataclass(frozen=True)
class EventFilter:
    """Which events `minidock events` shows: of a service, of a host, since a time."""

    service: str = ""
    host: str = ""
    since: float = 0.0  # epoch seconds; 0: from the start

    def keeps(self, e: Event) -> bool:
        return (
            (not self.service or e.service == self.service)
            and (not self.host or e.host == self.host)
            and e.at >= self.since
        )


@dataclass(frozen=True)
class MigrateOutcome:
    """A state copied whole from `source` to `target` (`replaced`: over a state there)."""

    source: StateLocation
    target: StateLocation
    generations: int
    events: int
    replaced: bool = False
    exit_code: ExitCode = ExitCode.OK


@dataclass(frozen=True)
class ValidateOutcome:
    """A valid file: a cluster (with its service count) or an inventory alone."""

    file: Path
    hosts: int
    cluster: str | None = None  # None: the file is an inventory
    services: int = 0
    exit_code: ExitCode = ExitCode.OK
    warnings: tuple[str, ...] = ()  # secret-looking env keys: move them to `secrets`
    schedules: tuple[str, ...] = ()  # when each scheduled backup and drill runs next


# -- operator commands on tasks and images (ps, logs, exec, scale, push) ----------------------
@dataclass(frozen=True)
class TaskRow:
    """One task as `minidock ps` shows it: where it runs, its state and its host ports.
    `id` is the task id (as `status --json` gives it), `container` Docker's id."""

    id: str
    name: str
    service: str
    slot: int
    host: str
    image: str
    state: ContainerState
    health: Health
    ports: tuple[str, ...]  # published host ports, "8080/tcp"
    exit_code: int | None = None
    cluster: str = ""
    container: str = ""
    traffic: str = ""  # "routed" (takes ingress traffic), "draining", or ""


@dataclass(frozen=True)
class HostProblem:
    """A host that could not be observed, and why: what a read of the tasks missed."""

    host: str
    error: str


@dataclass(frozen=True)
class PsOutcome:
    tasks: tuple[TaskRow, ...]
    unreachable: tuple[HostProblem, ...] = ()
    exit_code: ExitCode = ExitCode.OK


@dataclass(frozen=True)
class LogLine:
    """One line of a task's output (secrets masked), and the stream docker gave it on."""

    task: str
    stream: str  # "stdout" or "stderr"
    text: str


OnLogLine = Callable[[LogLine], None]


@dataclass(frozen=True)
class LogsOutcome:
    """The tasks whose logs were read; `failed` lines say which could not be (and why)."""

    tasks: tuple[str, ...]
    failed: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if self.failed else ExitCode.OK


@dataclass(frozen=True)
class ExecOutcome:
    """The command ran in `task` on `host` and exited with `status` (minidock's exit code)."""

    task: str
    host: str
    status: int

    @property
    def exit_code(self) -> int:
        return self.status


@dataclass(frozen=True)
class PushProgress:
    """Bytes of `image` streamed to `host` so far, of about `total`."""

    host: str
    image: str
    sent: int
    total: int


OnPushProgress = Callable[[PushProgress], None]


@dataclass(frozen=True)
class PushOutcome:
    """What `minidock push` did on each host: pushed (or found there), or failed and why."""

    image: str
    size: int
    pushed: tuple[Pushed, ...]
    failed: tuple[HostProblem, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if self.failed else ExitCode.OK


@dataclass(frozen=True)
class ScaleOutcome:
    """`scale SERVICE=N` stored as generation `generation` (from `before` replicas), then
    converged."""

    service: str
    before: int
    replicas: int
    generation: int
    convergence: ConvergeOutcome

    @property
    def exit_code(self) -> ExitCode:
        return self.convergence.exit_code
