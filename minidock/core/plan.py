"""What a pass decides, as values: the verbs (`run`, `stop`), what cannot happen yet
(`pending`, `waiting`), the events, and the next controller state. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from minidock.core.state import ControllerState
from minidock.model import Container, Event, Service, task_name

__all__ = ["Pending", "Plan", "Run", "Stop", "Waiting"]


@dataclass(frozen=True)
class Run:
    """Start a new task for a slot on a host. With `replaces`, stop-first: confirm the image on
    the host, then stop and remove the old task, then run."""

    service: Service
    slot: int
    host: str
    task: str
    reason: str
    replaces: Container | None = None
    restart: bool = False

    @property
    def name(self) -> str:
        return task_name(self.service.name, self.slot, self.task)


@dataclass(frozen=True)
class Stop:
    """Stop (if live) and remove a task; with `failure`, keep its log tail first."""

    container: Container
    reason: str
    failure: bool = False


@dataclass(frozen=True)
class Pending:
    """A slot that wants a task and cannot have one this pass, and why (host by host)."""

    service: str
    slot: int
    reason: str
    dependency: bool = False  # waits for a dependency (progress), not for a host (degraded)


class Waiting(str):
    """Progress not possible yet (a backoff, a health gate, an unreachable host), as its one
    display line `SUBJECT: REASON`, with its parts kept for whoever formats it. `degraded`:
    no pass will change it by itself (a task held on a host that is down)."""

    subject: str
    reason: str
    degraded: bool

    def __new__(cls, subject: str, reason: str, degraded: bool = False) -> Waiting:
        line = super().__new__(cls, f"{subject}: {reason}")
        line.subject, line.reason, line.degraded = subject, reason, degraded
        return line

    def __reduce__(self) -> tuple[type[Waiting], tuple[str, str, bool]]:  # copy and pickle
        return Waiting, (self.subject, self.reason, self.degraded)


@dataclass(frozen=True)
class Plan:
    state: ControllerState
    run: tuple[Run, ...] = ()
    stop: tuple[Stop, ...] = ()
    pending: tuple[Pending, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    events: tuple[Event, ...] = ()
    guard: str = ""  # the mass-loss guard held this pass: nothing was decided but probes

    @property
    def actions(self) -> int:
        return len(self.run) + len(self.stop)

    @property
    def converged(self) -> bool:
        """Nothing to do and nothing to wait for (a degraded fleet can be converged)."""
        return not (self.run or self.stop or self.pending or self.waiting or self.guard)

    @property
    def progressing(self) -> bool:
        """Acts, or waits that passes resolve by themselves (exit 3, not yet converged)."""
        return bool(
            self.run
            or self.stop
            or any(p.dependency for p in self.pending)
            or any(not w.degraded for w in self.waiting)
        )

    def degraded(self) -> list[str]:
        """What runs less than wanted and no pass will fix alone: hosts down, tasks that no
        host can take, tasks held on a host that is down (exit 4, every pass)."""
        down = [f"{name} down" for name, hs in sorted(self.state.hosts.items()) if hs.down]
        unplaced = [f"{p.service}.{p.slot} pending" for p in self.pending if not p.dependency]
        held = [str(w.subject) + " held on a down host" for w in self.waiting if w.degraded]
        return down + unplaced + held

    def paused(self) -> list[str]:
        """Services whose rollout is paused: they wait for an operator, like Failed slots."""
        return [name for name, ss in self.state.services.items() if ss.rollout.paused]

    def failed_slots(self) -> list[tuple[str, int, str]]:
        return [
            (name, n, slot.last_exit)
            for name, ss in self.state.services.items()
            if ss.spec.desired == "running"
            for n, slot in sorted(ss.slots.items())
            if slot.failed and n in ss.slot_numbers()
        ]
