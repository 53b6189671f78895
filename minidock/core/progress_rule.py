"""Whether a pass can progress by itself: the rule behind exit codes 3 and 4. Pure.

A pass *progresses* (exit 3) only when something will happen without a change of the
world: an act this pass (a task started or stopped), a start under way (a health check
settling, a replacement starting, a rollout's new task in its gate), a restart backoff or
an update delay that will expire, or a host's failed probes counting towards
`down_after`. Whatever else remains waits on the world: a host that is down, a full
resource or a held host port (a slot that no host takes), a task held on a down host or by
its named volume, a task paused by hand, or a dependency that itself cannot progress.
When that is all that remains, the pass is *degraded* (exit 4), and `stuck` says why.

The rule reads only the plan's values (its acts, the kind of each wait, the dependency of
each pending slot), never their wording.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from minidock.core.plan import Pending, Plan

__all__ = ["Outlook", "outlook"]


@dataclass(frozen=True)
class Outlook:
    """What of a pass moves on by itself (`moving`), and what waits on a change of the
    world (`stuck`), each as display lines."""

    moving: tuple[str, ...] = ()
    stuck: tuple[str, ...] = ()

    @property
    def progressing(self) -> bool:
        """Another pass will do or find something new with nothing else changed (exit 3)."""
        return bool(self.moving)


def outlook(plan: Plan) -> Outlook:
    """The plan's outlook: acts and waits that move, dependencies followed to the end."""
    moves = moving_services(plan)
    moving = [*_acts(plan), *(w for w in plan.waiting if w.kind.moves)]
    waiting_on = [p for p in plan.pending if p.dependency]
    moving += [_line(p) for p in waiting_on if p.dependency in moves]
    down = [f"{name} down" for name, hs in sorted(plan.state.hosts.items()) if hs.down]
    unplaced = [f"{p.service}.{p.slot} pending" for p in plan.pending if not p.dependency]
    held = [str(w) for w in plan.waiting if not w.kind.moves and w.kind.degraded]
    still = [str(w) for w in plan.waiting if not (w.kind.moves or w.kind.degraded)]
    blocked = [
        f"{p.service}.{p.slot} pending on {p.dependency}"
        for p in waiting_on
        if p.dependency not in moves
    ]
    stuck = [*down, *unplaced, *held, *blocked]
    if not stuck and not moving:
        stuck = still  # a rollout's count line alone: its slots wait on nothing that moves
    return Outlook(tuple(moving), tuple(stuck))


def moving_services(plan: Plan) -> frozenset[str]:
    """The services something moves for: an act or a moving wait of theirs, or a pending
    slot whose dependency moves (followed through chains of dependencies)."""
    moving = {r.service.name for r in plan.run}
    moving |= {s.container.service for s in plan.stop}
    moving |= {w.service for w in plan.waiting if w.service and w.kind.moves}
    waits: Iterable[Pending] = [p for p in plan.pending if p.dependency]
    while True:
        more = {p.service for p in waits if p.dependency in moving} - moving
        if not more:
            return frozenset(moving)
        moving |= more


def _acts(plan: Plan) -> list[str]:
    lines = [f"{len(plan.run)} {_tasks(len(plan.run))} starting"] if plan.run else []
    return lines + ([f"{len(plan.stop)} {_tasks(len(plan.stop))} stopping"] if plan.stop else [])


def _tasks(n: int) -> str:
    return "task" if n == 1 else "tasks"


def _line(p: Pending) -> str:
    return f"{p.service}.{p.slot} pending: {p.reason}"
