"""A slot's backup inside the pass: the durable intent, its phases and their table, and a
pass's part in it. Pure.

`minidock backup SERVICE[.SLOT]`, a service's `backup.schedule` and its
`backup.verify_schedule` record intents on the service (`Backups`, its own field of
`ServiceState`); every pass then decides each backup's next step from the intent and from
what it observes, so a backup interrupted anywhere (the command, the controller killed) goes
on at the next pass, and a task stopped for a backup is started again by the passes, never
taken for a clean exit:

- HOOKING: the service's `hooks.before_backup` runs in the slot's running task (an act);
- STOPPING (`backup.stop`): the task leaves every route (the traffic gate drains it) and
  stops; nothing starts one while the backup holds the slot (`holds`);
- COPYING: each named volume streams into the repository (an act; from the running task,
  or, stopped, through a helper holding the volume), done again from the start when a pass
  is cut off before its outcome was recorded (a restic snapshot is only ever added);
- STARTING (`backup.stop`): copied or not, the slot is decided as any other: its task starts
  again on its host, and the backup moves on once that task is ready;
- KEEPING: the snapshots are in: `keep` forgets the older ones (an act);
- DONE: the intent is dropped and what it did is the slot's `last` backup.

A failure (the hook, the copy) ends the backup, the task running: a backup that stopped its
task starts it again first. A restore drill (`minidock backup verify`) is one act, `verify`:
the newest snapshots streamed into a throwaway container's own volume on a host, the spec's
`backup.verify` command run in it, both removed; its outcome is the slot's `verified`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from minidock.model import Service

__all__ = [
    "HOLDING",
    "NO_BACKUPS",
    "TABLE",
    "BackupAct",
    "BackupInput",
    "BackupPhase",
    "BackupStep",
    "Backups",
    "LastBackup",
    "SlotBackup",
    "Verified",
    "VerifyAct",
]


class BackupPhase(enum.StrEnum):
    HOOKING = "hooking"  # its before_backup hook runs in the slot's task
    STOPPING = "stopping"  # backup.stop: the task drains and stops; none starts
    COPYING = "copying"  # each named volume streams into the repository
    STARTING = "starting"  # its task, stopped for the copy, starts again
    KEEPING = "keeping"  # `keep` forgets the older snapshots
    DONE = "done"  # over: the intent is dropped


class BackupInput(enum.StrEnum):
    HOOKED = "hook succeeded"
    STOPPED = "no task of the slot seen"
    COPIED = "volumes copied"
    READY = "task ready again"
    KEPT = "keep applied"
    FAILED = "failed"


TABLE: dict[tuple[BackupPhase, BackupInput], BackupPhase] = {
    (BackupPhase.HOOKING, BackupInput.HOOKED): BackupPhase.STOPPING,
    (BackupPhase.HOOKING, BackupInput.FAILED): BackupPhase.DONE,
    (BackupPhase.STOPPING, BackupInput.STOPPED): BackupPhase.COPYING,
    (BackupPhase.STOPPING, BackupInput.FAILED): BackupPhase.STARTING,
    (BackupPhase.COPYING, BackupInput.COPIED): BackupPhase.STARTING,
    (BackupPhase.COPYING, BackupInput.FAILED): BackupPhase.STARTING,
    (BackupPhase.STARTING, BackupInput.READY): BackupPhase.KEEPING,
    (BackupPhase.KEEPING, BackupInput.KEPT): BackupPhase.DONE,
    (BackupPhase.KEEPING, BackupInput.FAILED): BackupPhase.DONE,
}

HOLDING = (BackupPhase.STOPPING, BackupPhase.COPYING)


@dataclass(frozen=True)
class SlotBackup:
    """One slot's backup under way: in `phase` (the module), its task stopped for the
    copy when `stop`; `scheduled` the scheduled time it runs for (0: the operator's)."""

    phase: BackupPhase
    stop: bool = False
    since: float = 0.0
    scheduled: float = 0.0
    snapshots: tuple[tuple[str, str], ...] = ()  # (volume, snapshot id) saved
    size: int = 0  # bytes streamed
    seconds: float = 0.0
    failed: str = ""  # why it failed (masked): it ends once its task runs

    @classmethod
    def begun(cls, now: float, *, stop: bool, hook: bool, scheduled: float = 0.0) -> SlotBackup:
        """A backup just asked for: its first phase is its hook's, else its stop's, else
        its copy's."""
        phase = BackupPhase.HOOKING if hook else BackupPhase.COPYING
        if not hook and stop:
            phase = BackupPhase.STOPPING
        return cls(phase, stop=stop, since=now, scheduled=scheduled)

    @property
    def holds(self) -> bool:
        """Whether the slot must start no task: it is stopped for the copy."""
        return self.stop and self.phase in HOLDING

    def step(self, given: BackupInput) -> SlotBackup:
        """The next phase (the same when `given` does not apply). Without `stop` the
        STOPPING and STARTING phases are skipped (the task runs throughout); a failed backup
        keeps nothing."""
        phase = TABLE.get((self.phase, given), self.phase)
        if phase is BackupPhase.STOPPING and not self.stop:
            phase = BackupPhase.COPYING
        if phase is BackupPhase.STARTING and not self.stop:
            phase = BackupPhase.KEEPING
        if phase is BackupPhase.KEEPING and (self.failed or given is BackupInput.FAILED):
            phase = BackupPhase.DONE
        return self if phase is self.phase else replace(self, phase=phase)

    def line(self) -> str:
        """Where the backup is, as a status line says it."""
        if self.failed and self.phase is BackupPhase.STARTING:
            return f"backup failed ({self.failed}): starting its task again"
        return {
            BackupPhase.HOOKING: "backing up: its before_backup hook runs",
            BackupPhase.STOPPING: "backing up: stopping its task for the copy",
            BackupPhase.COPYING: "backing up: copying its volumes",
            BackupPhase.STARTING: "backed up: starting its task again",
            BackupPhase.KEEPING: "backed up: forgetting old snapshots by keep",
            BackupPhase.DONE: "backed up",
        }[self.phase]


@dataclass(frozen=True)
class LastBackup:
    """A slot's latest backup that ended: when, its snapshots, or why it failed."""

    at: float = 0.0
    scheduled: float = 0.0
    snapshots: tuple[tuple[str, str], ...] = ()
    size: int = 0
    seconds: float = 0.0
    forgotten: int = 0  # snapshots `keep` forgot after it
    failed: str = ""


@dataclass(frozen=True)
class Verified:
    """A slot's latest restore drill: the snapshot it restored, when, and its outcome."""

    snapshot: str = ""
    at: float = 0.0
    ok: bool = False
    line: str = ""  # the verify command's last output line, or why it could not run


@dataclass(frozen=True)
class Backups:
    """A service's backups (in its ServiceState): each slot's under way, each slot's last,
    the schedules' latest times accounted for, and the restore drills asked and done."""

    slots: dict[int, SlotBackup] = field(default_factory=dict)
    last: dict[int, LastBackup] = field(default_factory=dict)
    due: float = 0.0  # backup.schedule's latest time accounted for (0: not armed yet)
    verify_due: float = 0.0  # backup.verify_schedule's, likewise
    verifying: tuple[int, ...] = ()  # slots whose restore drill is asked, not yet done
    verified: dict[int, Verified] = field(default_factory=dict)
    unscheduled: str = ""  # why a schedule gives no time now ("": it does), said once

    @property
    def busy(self) -> bool:
        return bool(self.slots or self.verifying)


NO_BACKUPS = Backups()


class BackupStep(enum.StrEnum):
    HOOK = "hook"  # run hooks.before_backup in `container`
    COPY = "copy"  # stream each named volume (from `container`, else through a helper)
    KEEP = "keep"  # apply `keep` to the slot's snapshots


@dataclass(frozen=True)
class BackupAct:
    """What a pass does for a slot's backup on `host`. `spec` is the spec the slot runs
    (its named volumes, where its task mounts them, its image for a helper, its policy);
    `container` the running task's id ("" for a copy of a stopped slot: a helper)."""

    service: str
    slot: int
    step: BackupStep
    spec: Service
    host: str
    container: str = ""
    generation: int = 0


@dataclass(frozen=True)
class VerifyAct:
    """A restore drill of a slot on `host`: its newest snapshots into a throwaway
    container of `spec`'s image, `spec.backup.verify` run in it."""

    service: str
    slot: int
    spec: Service
    host: str
