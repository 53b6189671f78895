"""A slot's move with its data: the durable intent and its phases. Pure.

`minidock move SERVICE.SLOT --to HOST` records a `VolumeMove` on the slot's service; every
pass then decides the move's next step from it and from what it observes
(`core/moving.py`), so a move interrupted anywhere (the command, the controller killed)
goes on at the next pass, and at any instant at most one task of the slot runs:

- STOPPING: the slot's task is drained from every route and stopped; nothing starts it;
- COPYING: no task of the slot is seen (its source host answered): each named volume
  streams from the source to the target (an act, `MoveAct`, done again from the start
  when a pass is cut off before it was recorded: the target's copy is never yet used);
- STARTING: copied, and the slot's record names the target: its task starts there;
- CLEANING: the task on the target is ready: the source's volumes are removed (with
  `keep_source`, they stay and the move ends here).

A copy that fails ends the move (`failed`): the slot's record still names the source, so
its task starts there again on its own data. A host lost before the copy is recorded (the
target or the source down, forgotten, or gone from the inventory) ends the move as failed
too (core/moving.py, `lost`): every move ends. When the copy may have begun (COPYING), the
target's partial volume is then removed once the target answers again (DISCARDING, which
holds nothing and ends when the target is forgotten). A restore (`minidock restore`) is a move whose
source is a backup: `snapshots` names the snapshot streamed into each named volume,
`source` the host the slot was recorded on (the target itself, another host, or "" when
that host was forgotten). Its task is stopped wherever it runs; nothing is cleaned (a
volume left on another host stays); a failed restore makes the slot Failed instead of
starting a task on a volume it may have emptied (core/moving.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from minidock.model import Service

__all__ = ["TABLE", "MoveAct", "MoveInput", "MovePhase", "VolumeMove"]


class MovePhase(enum.StrEnum):
    STOPPING = "stopping"  # the slot's task drains and stops on the source
    COPYING = "copying"  # no task runs: the volumes stream to the target
    STARTING = "starting"  # copied: the slot's task starts on the target
    CLEANING = "cleaning"  # the target's task is ready: the source's volumes go
    DISCARDING = "discarding"  # failed after its copy began: the target's partial copy goes
    DONE = "done"  # the move is over (its record is dropped)


class MoveInput(enum.StrEnum):
    STOPPED = "no task of the slot seen"
    COPIED = "volumes copied"
    READY = "task ready on the target"
    CLEANED = "source volumes removed"
    FAILED = "copy failed"
    LOST = "a host lost before the copy was recorded"
    DISCARDED = "partial copy removed"


TABLE: dict[tuple[MovePhase, MoveInput], MovePhase] = {
    (MovePhase.STOPPING, MoveInput.STOPPED): MovePhase.COPYING,
    (MovePhase.COPYING, MoveInput.COPIED): MovePhase.STARTING,
    (MovePhase.COPYING, MoveInput.FAILED): MovePhase.DONE,
    (MovePhase.STOPPING, MoveInput.LOST): MovePhase.DONE,
    (MovePhase.COPYING, MoveInput.LOST): MovePhase.DISCARDING,
    (MovePhase.DISCARDING, MoveInput.DISCARDED): MovePhase.DONE,
    (MovePhase.STARTING, MoveInput.READY): MovePhase.CLEANING,
    (MovePhase.CLEANING, MoveInput.CLEANED): MovePhase.DONE,
}


@dataclass(frozen=True)
class VolumeMove:
    """One slot's move: from `source` to `target`, in `phase` (see the module)."""

    target: str
    source: str = ""
    phase: MovePhase = MovePhase.STOPPING
    keep_source: bool = False
    snapshot: str = ""  # a restore: the snapshot asked for (shown), streamed in instead
    snapshots: tuple[tuple[str, str], ...] = ()  # a restore: (volume, snapshot id) each
    since: float = 0.0  # when it was asked for
    # a restore the pass itself recorded (on_host_loss = "restore") because `source`, the
    # slot's host, was down: that host holds nothing back, and its task is fenced if it
    # answers again (core/failover.py)
    failover: bool = False
    size: int = 0  # bytes copied
    seconds: float = 0.0  # how long the copy took

    @property
    def restore(self) -> bool:
        return bool(self.snapshot)

    def snapshot_of(self, volume: str) -> str:
        """The snapshot a restore streams into `volume` (the spec's name of it), or ""."""
        return dict(self.snapshots).get(volume, "")

    @property
    def holds(self) -> bool:
        """Whether the slot must start no task: its data is on its way."""
        return self.phase in (MovePhase.STOPPING, MovePhase.COPYING)

    def step(self, given: MoveInput) -> VolumeMove:
        """The next phase (the same when `given` does not apply); CLEANING is skipped to
        DONE when the source stays (`keep_source`; a restore removes nothing), and
        DISCARDING when the target is the source (a restore in place: its slot's own volume,
        which the slot's Failed record guards)."""
        phase = TABLE.get((self.phase, given), self.phase)
        if phase is MovePhase.CLEANING and (self.keep_source or self.restore):
            phase = MovePhase.DONE
        if phase is MovePhase.DISCARDING and self.source == self.target:
            phase = MovePhase.DONE
        return self if phase is self.phase else replace(self, phase=phase)

    def line(self) -> str:
        """Where the move is, as a status line says it."""
        if self.restore:
            return self._restore_line()
        origin = self.source
        return {
            MovePhase.STOPPING: f"moving to {self.target}: stopping its task on {origin}",
            MovePhase.COPYING: f"moving to {self.target}: copying its volumes from {origin}",
            MovePhase.STARTING: f"moving to {self.target}: starting its task there",
            MovePhase.CLEANING: f"moved to {self.target}: removing its volumes on {origin}",
            MovePhase.DISCARDING: f"move to {self.target} failed: its partial copy there is "
            "removed once it answers",
            MovePhase.DONE: f"moved to {self.target}",
        }[self.phase]

    def _restore_line(self) -> str:
        where = f"restoring snapshot {self.snapshot} on {self.target}"
        return {
            MovePhase.STOPPING: f"{where}: stopping its task",
            MovePhase.COPYING: f"{where}: streaming it into its volumes",
            MovePhase.STARTING: f"{where}: starting its task there",
            MovePhase.CLEANING: f"{where}: starting its task there",
            MovePhase.DISCARDING: f"restore on {self.target} failed: its partial copy there is "
            "removed once it answers",
            MovePhase.DONE: f"restored snapshot {self.snapshot} on {self.target}",
        }[self.phase]


@dataclass(frozen=True)
class MoveAct:
    """What a pass does for a move: copy the slot's volumes to the target (`copy`), or
    remove them on the source (not `copy`; a DISCARDING move's: on the target, its partial
    copy). `spec` is the spec the slot runs: its named volumes, where its task mounts them,
    and its image (the helpers' on both hosts)."""

    service: str
    slot: int
    spec: Service
    move: VolumeMove
    copy: bool = True

    @property
    def removes_on(self) -> str:
        """The host a removal act removes the slot's volumes on."""
        return self.move.target if self.move.phase is MovePhase.DISCARDING else self.move.source
