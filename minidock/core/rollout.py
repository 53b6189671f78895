"""The rollout machine: a rolling update (or rollback) of one service. Pure.

A rollout replaces outdated tasks `parallelism` at a time; each new task is *in flight*
until it passes its health gate (healthy, or running, for `monitor`), then *done*. A
failure applies `update.failure_action`: pause, roll back to the previous spec, or go on.
`step` is the only place a rollout's phase changes, through `TABLE`; progress (which
slots are in flight or done) changes through the small functions below it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from minidock.model import Event

__all__ = [
    "TABLE",
    "Rollout",
    "RolloutInput",
    "RolloutPhase",
    "begin",
    "step",
]


class RolloutPhase(enum.StrEnum):
    NONE = "none"  # no rollout since the service was created
    UPDATING = "updating"
    PAUSED = "paused"  # a failure paused it: the operator applies again, or rolls back
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"


class RolloutInput(enum.StrEnum):
    BEGIN = "apply changes what tasks run"
    BEGIN_ROLLBACK = "rollback: the operator's, or update.failure_action's"
    RESUME = "same spec applied again"
    FAILURE_TOLERATED = "failure within max_failure_ratio, or continue"
    FAILURE_PAUSE = "failure: pause"
    SETTLED = "every slot runs the target spec, ready"


ACTIVE = (RolloutPhase.UPDATING, RolloutPhase.ROLLING_BACK)

# (phase, input) -> next phase. A new rollout (an apply that changes what tasks run, or a
# rollback) starts afresh from any phase, whatever the old one was doing.
TABLE: dict[tuple[RolloutPhase, RolloutInput], RolloutPhase] = {
    **{(p, RolloutInput.BEGIN): RolloutPhase.UPDATING for p in RolloutPhase},
    **{(p, RolloutInput.BEGIN_ROLLBACK): RolloutPhase.ROLLING_BACK for p in RolloutPhase},
    (RolloutPhase.PAUSED, RolloutInput.RESUME): RolloutPhase.UPDATING,
    (RolloutPhase.UPDATING, RolloutInput.FAILURE_TOLERATED): RolloutPhase.UPDATING,
    (RolloutPhase.UPDATING, RolloutInput.FAILURE_PAUSE): RolloutPhase.PAUSED,
    (RolloutPhase.UPDATING, RolloutInput.SETTLED): RolloutPhase.COMPLETED,
    (RolloutPhase.ROLLING_BACK, RolloutInput.FAILURE_TOLERATED): RolloutPhase.ROLLING_BACK,
    (RolloutPhase.ROLLING_BACK, RolloutInput.FAILURE_PAUSE): RolloutPhase.PAUSED,
    (RolloutPhase.ROLLING_BACK, RolloutInput.SETTLED): RolloutPhase.ROLLED_BACK,
}


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

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def paused(self) -> bool:
        return self.phase is RolloutPhase.PAUSED


def begin(
    old: Rollout,
    total: int,
    *,
    rollback: bool = False,
    reason: str = "",
    relocating: bool = False,
) -> Rollout:
    """A new rollout of `total` slots (replacing `old`), forward to the new spec or back
    to the previous one; `relocating` when it only moves tasks (constraints changed)."""
    given = RolloutInput.BEGIN_ROLLBACK if rollback else RolloutInput.BEGIN
    return step(
        Rollout(phase=old.phase),
        given,
        total=total,
        rollback=rollback,
        reason=reason,
        relocating=relocating,
    )


def step(r: Rollout, given: RolloutInput, **changes: object) -> Rollout:
    """The one transition: look the phase up in TABLE; a pair not in it is a bug."""
    return replace(r, phase=TABLE[(r.phase, given)], **changes)  # type: ignore[arg-type]


# -- progress within a phase -------------------------------------------------------------------
def started(r: Rollout, slots: Iterable[int]) -> Rollout:
    return replace(r, inflight=(*r.inflight, *slots))


def settle(r: Rollout, name: str, now: float) -> tuple[Rollout, Event]:
    """Every slot runs the target spec and is ready: completed (or rolled back)."""
    r = step(r, RolloutInput.SETTLED, inflight=(), healthy_since=())
    return r, Event(now, f"rollout-{r.phase}", f"{name}: rollout {r.phase}", service=name)


def dropped(r: Rollout, slot: int) -> Rollout:
    """An in-flight slot failed (its act, or its gate): no longer in flight, one failure."""
    return replace(r, inflight=tuple(s for s in r.inflight if s != slot), failures=r.failures + 1)


def undone(r: Rollout, slot: int) -> Rollout:
    """A slot that had passed its gate failed later in the same rollout."""
    return replace(r, done=tuple(n for n in r.done if n != slot), failures=r.failures + 1)
