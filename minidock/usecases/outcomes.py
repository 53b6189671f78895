"""What the use cases return and report: one exit-code enum, typed refusals, progress
records and frozen outcomes. No I/O; the CLI turns these into lines, tables and exit codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minidock.core import Plan
from minidock.model import Event
from minidock.runner import PassResult
from minidock.status import StatusDocument
from minidock.store import StateLocation


class ExitCode(enum.IntEnum):
    """The process exit codes of PRODUCT.md, the only place they are defined."""

    OK = 0  # done, or converged
    FAILED = 1  # an act failed, a slot is Failed, a rollout is paused or was rolled back
    USAGE = 2  # bad input or usage
    NOT_CONVERGED = 3  # progress made or pending; `--wait` timed out
    # 4 is DEGRADED (PRODUCT.md): everything that can run runs, hosts down or tasks unplaced
    LOCKED = 75  # EX_TEMPFAIL: another writer holds the state directory's lock


class UseCaseError(Exception):
    """A use case refused before it changed anything: one line, and the exit code."""

    exit_code = ExitCode.FAILED


class BadInput(UseCaseError):
    """A bad file, an unknown host or service, nothing applied yet: exit 2."""

    exit_code = ExitCode.USAGE


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
    has Failed slots or a paused rollout (1 wins over 3); 0 converged; else 3 (backoff,
    rollout, health gates, unplaced tasks)."""
    plan = result.plan
    if result.failures or plan.guard or plan.failed_slots() or plan.paused():
        return ExitCode.FAILED
    return ExitCode.OK if result.plan.converged else ExitCode.NOT_CONVERGED


# -- progress: what a use case reports while it works ---------------------------------------
@dataclass(frozen=True)
class GenerationStored:
    """`apply` stored the cluster file as generation `generation` in `directory`."""

    generation: int
    cluster: str
    services: int
    directory: StateLocation  # the state directory, or the etcd URL


@dataclass(frozen=True)
class IntentRecorded:
    """An operator's word (drain, activate, rollback, reset) is recorded; passes follow."""

    message: str


@dataclass(frozen=True)
class PassDone:
    """One reconcile pass ran: what it did, and its verdict."""

    result: PassResult
    exit_code: ExitCode


@dataclass(frozen=True)
class PassSkipped:
    """A `watch` pass found another writer at work (or lost the lock to one mid-way:
    `deposed`); the next pass sees its result."""

    reason: str
    deposed: bool = False


Progress = GenerationStored | IntentRecorded | PassDone | PassSkipped
Report = Callable[[Progress], None]


def ignore(progress: Progress) -> None:
    """A Report that shows nothing."""


# -- outcomes ----------------------------------------------------------------------------------
class Ending(enum.Enum):
    """How a run of passes ended."""

    NO_WAIT = "no wait"  # one pass, no waiting asked for: the pass's verdict is the outcome
    CONVERGED = "converged"  # waited, and a pass found nothing left to do
    STOPPED = "stopped"  # waited, and a pass failed (exit 1): waiting cannot help
    TIMED_OUT = "timed out"  # waited until the timeout; work remains


@dataclass(frozen=True)
class ConvergeOutcome:
    """The passes of `converge`: how they ended, after how many, and (on a timeout) what
    the last pass still waited for."""

    exit_code: ExitCode
    ending: Ending
    passes: int
    timeout: float
    waiting: tuple[str, ...] = ()


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
        """1 when an update this apply started was rolled back, though the fleet converged."""
        return ExitCode.FAILED if self.failed_updates else self.convergence.exit_code


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


@dataclass(frozen=True)
class StatusOutcome:
    document: StatusDocument
    exit_code: ExitCode = ExitCode.OK


@dataclass(frozen=True)
class EventsOutcome:
    events: tuple[Event, ...]
    exit_code: ExitCode = ExitCode.OK


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
