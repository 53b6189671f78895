"""The slot machine: one replica slot of a service, across the tasks that fill it. Pure.

A slot is filled by one task at a time (SwarmKit's slots). Its record keeps the phase, the
task the controller assigned to it (and where), and the restart bookkeeping that survives
the controller: failed attempts within the window, the backoff, the last failure's line.
Every function here that returns a new `SlotState` takes one `SlotInput` through `TABLE`;
nothing else in MiniDock assigns a slot's phase.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from minidock.core.evolve import evolve
from minidock.core.supervise import backoff, exit_line, should_restart
from minidock.model import Container, RestartPolicy

__all__ = [
    "KEEP_COUNTED",
    "TABLE",
    "TERMINAL",
    "SlotInput",
    "SlotPhase",
    "SlotState",
    "account_exit",
    "assign",
    "count_failure",
    "forgiven",
    "hold",
    "lose",
    "observe_task",
    "relocate",
    "renew",
    "renewed",
    "reset",
    "restore_failed",
    "restored",
    "scaled_away",
    "skip_backoff",
    "start_failed",
    "stopped_for",
    "unplaced",
    "vanish",
]

KEEP_COUNTED = 20  # how many counted task ids a slot remembers (enough to never count twice)


class SlotPhase(enum.StrEnum):
    EMPTY = "empty"  # no task, and none decided yet
    PENDING = "pending"  # a task is wanted, but no host fits or a dependency is not ready
    STARTING = "starting"  # its task is assigned, not yet ready
    RUNNING = "running"  # its task is ready: running, and healthy where checked
    UNREACHABLE = "unreachable"  # its task's host does not answer: the task holds the slot
    BACKING_OFF = "backing_off"  # its last task failed; the next one waits for the backoff
    FAILED = "failed"  # crash-loop limit, or a failed restore (`half_written`): see `reset`
    COMPLETE = "complete"  # its task exited and, by restart.condition, is not restarted


class SlotInput(enum.StrEnum):
    ASSIGNED = "task assigned"
    UNPLACED = "cannot place"
    READY = "task ready"
    NOT_READY = "task not ready"
    HELD = "host unreachable"
    VANISHED = "no task"
    LOST = "host forgotten"
    FAILED_RETRY = "task failed"
    FAILED_LIMIT = "task failed max_attempts times"
    EXITED_DONE = "task exited, no restart"
    RESTORE_FAILED = "restore failed"
    RESET = "reset"


_NEXT: dict[SlotInput, SlotPhase] = {
    SlotInput.ASSIGNED: SlotPhase.STARTING,
    SlotInput.UNPLACED: SlotPhase.PENDING,
    SlotInput.READY: SlotPhase.RUNNING,
    SlotInput.NOT_READY: SlotPhase.STARTING,
    SlotInput.HELD: SlotPhase.UNREACHABLE,
    SlotInput.VANISHED: SlotPhase.EMPTY,
    SlotInput.LOST: SlotPhase.EMPTY,
    SlotInput.FAILED_RETRY: SlotPhase.BACKING_OFF,
    SlotInput.FAILED_LIMIT: SlotPhase.FAILED,
    SlotInput.EXITED_DONE: SlotPhase.COMPLETE,
    SlotInput.RESTORE_FAILED: SlotPhase.FAILED,
    SlotInput.RESET: SlotPhase.EMPTY,
}
TERMINAL = (SlotPhase.FAILED, SlotPhase.COMPLETE)  # only RESET (`reset`, `renew`) leaves them


def _next(phase: SlotPhase, given: SlotInput) -> SlotPhase:
    if phase in TERMINAL and given is not SlotInput.RESET:
        return phase
    if phase is SlotPhase.BACKING_OFF and given in (SlotInput.VANISHED, SlotInput.UNPLACED):
        return phase  # still waiting out its backoff (or for room once it is over)
    return _NEXT[given]


TABLE: dict[tuple[SlotPhase, SlotInput], SlotPhase] = {
    (p, i): _next(p, i) for p in SlotPhase for i in SlotInput
}


@dataclass(frozen=True)
class SlotState:
    """One slot's record: phase, assigned task, and restart bookkeeping."""

    phase: SlotPhase = SlotPhase.EMPTY
    task: str = ""  # the task the controller assigned (or adopted) for this slot
    host: str = ""  # where that task runs
    attempts: tuple[float, ...] = ()  # controller times of counted failures, within the window
    counted: tuple[str, ...] = ()  # task ids whose failure is already counted
    next_start: float = 0.0  # backoff: no new task before this time
    last_exit: str = ""  # one line: exit code and log tail, or the health failure
    avoid: str = ""  # a host where starting its task failed (image missing, disk full...)
    # its host was forgotten and a snapshot of it exists: no task starts (on an empty
    # volume) until `minidock restore` (which clears it) or `restore --empty`; the newest
    # snapshot known then, "ID of TIME", shown (core/intents.py: forget, start_empty)
    awaiting_restore: str = ""
    # the newest snapshot of each of its named volumes, (volume, snapshot id, when taken),
    # as backups recorded them (core/failover.py): its recovery point, what a failover
    # restores, known to a pass without I/O
    backups: tuple[tuple[str, str, float], ...] = ()
    # a host where a failover (on_host_loss = "restore") left its old volume: kept, never
    # removed by MiniDock (it may hold writes newer than the snapshot), and listed
    kept_on: str = ""
    # a restore's stream into its volume failed or was cut (core/moving.py): the volume may
    # be empty or half written, so the slot is Failed and no task starts on it until the
    # operator says so (`minidock reset SERVICE`) or a restore's copy completes; an apply,
    # `scale` or a rollback keeps it (`renew`). The line that says why ("": whole)
    half_written: str = ""

    @property
    def failed(self) -> bool:
        return self.phase is SlotPhase.FAILED

    @property
    def complete(self) -> bool:
        return self.phase is SlotPhase.COMPLETE


def _step(slot: SlotState, given: SlotInput, **changes: object) -> SlotState:
    return evolve(slot, phase=TABLE[(slot.phase, given)], **changes)


def assign(slot: SlotState, task: str, host: str) -> SlotState:
    """A new task was decided for the slot (committed before it is started)."""
    return _step(slot, SlotInput.ASSIGNED, task=task, host=host)


def unplaced(slot: SlotState) -> SlotState:
    return _step(slot, SlotInput.UNPLACED)


def observe_task(slot: SlotState, c: Container, *, ready: bool) -> SlotState:
    """The slot's live task as this pass sees it (a task no record explains is adopted)."""
    given = SlotInput.READY if ready else SlotInput.NOT_READY
    # the host a start failed on is forgotten once a task the controller started after it
    # is ready (not when the task it was to replace still serves: a drain or a rebalance)
    started = ready and c.task == slot.task and slot.phase is SlotPhase.STARTING
    avoid = "" if started and c.host != slot.avoid else slot.avoid
    unchanged = (slot.task, slot.host, slot.avoid) == (c.task, c.host, avoid)
    if unchanged and TABLE[(slot.phase, given)] is slot.phase:
        return slot  # what `_step` would return, equal, without building it again
    return _step(slot, given, task=c.task, host=c.host, avoid=avoid)


def start_failed(
    slot: SlotState, task: str, at: float, line: str, policy: RestartPolicy
) -> SlotState:
    """Its task could not even be started on its host (`docker run` or the image pull
    failed there): a failed attempt, and that host is avoided for the next one."""
    return replace(count_failure(slot, task, at, line, policy), avoid=slot.host)


def hold(slot: SlotState) -> SlotState:
    """The slot's task is on a host that did not answer: it keeps the slot for now."""
    return _step(slot, SlotInput.HELD)


def vanish(slot: SlotState) -> SlotState:
    """No task fills the slot (and none is held by an unreachable host)."""
    return _step(slot, SlotInput.VANISHED)


def relocate(slot: SlotState, host: str) -> SlotState:
    """A moved slot's data is on `host` now (core/volumes.py): its record names that host
    and no task, so its next task starts there (the phase is the pass's to say); a slot
    that awaited a restore has its data back (and a kept old volume on `host` was just
    made afresh: no longer listed)."""
    kept = "" if slot.kept_on == host else slot.kept_on
    return replace(slot, task="", host=host, avoid="", awaiting_restore="", kept_on=kept)


def restored(slot: SlotState, host: str) -> SlotState:
    """A restore's copy completed on `host` (core/moving.py): `relocate`d there, and a
    slot held Failed by an earlier restore's half-written volume is whole again (its
    Failed and backoff forgotten: its task starts on the snapshot)."""
    moved = relocate(slot, host)
    return reset(moved) if moved.half_written else moved


def scaled_away(slot: SlotState) -> SlotState:
    """A pinned slot the service no longer wants, its last task gone: no task, but where
    its volumes stay (its host), a wait for a restore and a kept old volume, so that scaled
    back it starts on its own data, or waits as it did, never afresh on an empty volume."""
    if not slot.task and TABLE[(slot.phase, SlotInput.VANISHED)] is slot.phase:
        return slot  # kept so already: the same record, not built again every pass
    return _step(slot, SlotInput.VANISHED, task="")


def restore_failed(slot: SlotState, line: str) -> SlotState:
    """A restore's stream failed or was cut (core/moving.py): Failed, and `half_written`
    (`line`), so no task starts on a volume it may have emptied, across any change, until
    the operator restores again or `reset`s the service."""
    return _step(slot, SlotInput.RESTORE_FAILED, last_exit=line, half_written=line)


def stopped_for(slot: SlotState) -> SlotState:
    """The slot's task was stopped by the controller for a move or restore that then
    ended: its exit (0, from `docker stop`) is never taken for the task's own clean exit
    (with `restart = on-failure` that made the slot Complete, never started again)."""
    if not slot.task or slot.task in slot.counted:
        return slot
    return replace(slot, counted=(*slot.counted, slot.task)[-KEEP_COUNTED:])


def lose(slot: SlotState, awaiting_restore: str = "", *, pinned: bool = False) -> SlotState:
    """`minidock forget HOST`: the host is gone for good and its task with it; with
    `awaiting_restore` (a pinned slot's newest snapshot), it waits for a restore. A pinned
    slot's old volume stays on that host (`kept_on`): if it ever answers again, its task
    is fenced and the volume listed, never used."""
    kept = slot.host if pinned and slot.host else slot.kept_on
    return _step(
        slot, SlotInput.LOST, task="", host="", awaiting_restore=awaiting_restore, kept_on=kept
    )


def reset(slot: SlotState) -> SlotState:
    """`minidock reset`: forget the failed attempts, Failed and the backoff, and a
    half-written volume's hold (the operator said: start it on what its volume holds), and
    nothing else. The record (the task assigned to the slot, its host, the host a start
    failed on, the tasks already counted) is kept: pinning, fencing and the survivor of
    the slot are decided from it (docs/state.md, the record rule)."""
    if slot.half_written:
        slot = replace(slot, half_written="")
    if slot.phase not in _RESET_FROM and not slot.attempts and not slot.next_start:
        return slot  # nothing to forget: the record stays as it is, phase and all
    return _step(slot, SlotInput.RESET, attempts=(), next_start=0.0)


_RESET_FROM = (*TERMINAL, SlotPhase.BACKING_OFF)


def renew(slot: SlotState) -> SlotState:
    """One slot across a change of spec (an apply, `scale`, a rollback): `reset`, but a
    slot whose volume a restore left half written stays as it is, Failed: a change says
    nothing about its data (only `reset` or a restore does)."""
    return slot if slot.half_written else reset(slot)


def renewed(records: Mapping[int, SlotState]) -> dict[int, SlotState]:
    """Every slot's record across a change (a new generation, a rollback): its failed
    attempts, Failed and backoff forgotten (`renew`: not a half-written volume's hold),
    its task and host kept. Only a task that replaces the slot's task changes them, and a
    slot scaled away leaves with its last task."""
    return {n: renew(s) for n, s in records.items()}


def forgiven(records: Mapping[int, SlotState]) -> dict[int, SlotState]:
    """Every slot's record after `minidock reset SERVICE`: `reset`, half-written volumes
    included (the operator's word that its tasks start on what their volumes hold)."""
    return {n: reset(s) for n, s in records.items()}


def skip_backoff(slot: SlotState) -> SlotState:
    """Try again at once (a paused update's failed slot goes back to its known-good spec)."""
    return replace(slot, next_start=0.0)


def count_failure(
    slot: SlotState, task: str, at: float, line: str, policy: RestartPolicy
) -> SlotState:
    """One failed attempt (exit, unhealthy, failed gate or act): prune the window, back off,
    and at `max_attempts` within the window, Failed. A task is counted once."""
    if task in slot.counted:
        return slot
    recent = tuple(a for a in slot.attempts if policy.window <= 0 or at - a < policy.window)
    attempts = (*recent, at)
    limit = policy.max_attempts > 0 and len(attempts) >= policy.max_attempts
    return _step(
        slot if not slot.complete else replace(slot, phase=SlotPhase.EMPTY),
        SlotInput.FAILED_LIMIT if limit else SlotInput.FAILED_RETRY,
        attempts=attempts,
        counted=(*slot.counted, task)[-KEEP_COUNTED:],
        next_start=at + backoff(policy, len(attempts)),
        last_exit=line,
    )


def account_exit(slot: SlotState, c: Container, policy: RestartPolicy, now: float) -> SlotState:
    """Fold one exited (or never started) task into the slot, by its restart condition."""
    if c.task in slot.counted:
        return slot
    line = exit_line(c)
    if not should_restart(policy, c.exit_code):
        counted = (*slot.counted, c.task)[-KEEP_COUNTED:]
        return _step(slot, SlotInput.EXITED_DONE, counted=counted, last_exit=line)
    # counted at `now`, the controller's clock (when it saw the exit), never the host's
    # FinishedAt: a host clock that is off neither stretches nor skips the backoff
    return count_failure(slot, c.task, now, line, policy)
