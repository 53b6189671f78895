"""What a pass decides, as values: everything it will do, and the next controller state.
Pure.

A `Plan` is the whole of one pass's decision (`minidock.core.decide`): the task verbs
(`run`, `stop`), what cannot happen yet (`pending`, `waiting`), the events, and what every
proxy must hold (`routes` for the ingress proxies, `endpoints` for the name proxies, with
the steps of each proxy), the certificates to order, the hooks' and scheduled jobs' steps
and the finished one-off tasks to remove. The act path carries out its fields and decides
nothing of its own (minidock.act.acts)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from minidock.core.backing import BackupAct, VerifyAct
from minidock.core.endpoints import Endpoints, NameStep
from minidock.core.gpus import NO_GPUS, GpuIds
from minidock.core.hooks import HookStep
from minidock.core.jobs import JobAct
from minidock.core.routes import ProxyStep, RouteTable
from minidock.core.state import ControllerState
from minidock.core.task_ports import NO_PORTS, TaskPorts
from minidock.core.volumes import MoveAct
from minidock.model import Container, Event, OneOff, Service, task_name

__all__ = ["Pending", "Plan", "Run", "Stop", "WaitKind", "Waiting"]


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
    ports: TaskPorts = NO_PORTS  # the host ports its routed container ports publish on
    gpus: GpuIds = NO_GPUS  # the GPU device ids it is given (minidock.core.gpus)
    # seconds its start waits, from when its acts begin: the rest of its slot's restart
    # backoff, where that was short enough for the pass that counted the failure to carry
    # it (core.supervise.CARRIED_BACKOFF)
    after: float = 0.0

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
    dependency: str = ""  # the dependency it waits for ("": it waits for a host to take it)


class WaitKind(enum.Enum):
    """What a wait waits on. `moves`: passes resolve it with no change of the world (time
    passes, a task starts, a host's failed probes count to `down_after`); the others wait
    on the world (core/progress_rule.py decides the exit code from these)."""

    HOST_PROBES = "host probes"  # a host failed its probes, not yet down_after times
    BACKOFF = "backoff"  # a restart backoff that will expire
    STARTING = "starting"  # a task starting, its health check not settled yet
    REPLACEMENT = "replacement"  # a slot's new task starting while the old one serves
    GATE = "gate"  # a rollout's new task in its health gate or monitor
    DELAY = "delay"  # a rollout's `update.delay` between batches
    STOPPING = "stopping"  # dependents stopping first (desired stopped)
    ROLLOUT = "rollout"  # a rollout's count line: it moves when its slots do
    HELD_DOWN = "held down"  # a task held on a host that is down (on_host_loss = wait)
    PINNED = "pinned"  # a task held where its named volume is, though misplaced
    STALLED = "stalled"  # a task paused by hand: it waits for someone to unpause it
    DRAINING = "draining"  # a routed task out of every route, waiting out drain_timeout
    HOOK = "hook"  # a generation's before_update hook, to run or running (core/hooks.py)
    PROXY = "proxy"  # an ingress proxy to replace once another host's new one serves
    CERTIFICATE = "certificate"  # an ACME order started, answered or collected by a pass
    PROMOTE = "promote"  # a canary that passed, waiting for the operator's `minidock promote`
    MOVE = "move"  # a slot's move with its volumes under way (core/volumes.py)
    BACKUP = "backup"  # a slot's backup or restore drill under way (core/backing.py)
    RESTORE = "restore"  # a pinned slot of a forgotten host, waiting for `minidock restore`
    FAILOVER = "failover"  # a down host's pinned slot, restored elsewhere after restore_after

    @property
    def moves(self) -> bool:
        return self not in _STILL

    @property
    def degraded(self) -> bool:
        """No pass changes it by itself, and it says so on its own (exit 4)."""
        return self in (WaitKind.HELD_DOWN, WaitKind.PINNED, WaitKind.RESTORE)


_STILL = frozenset(
    {
        WaitKind.ROLLOUT,
        WaitKind.HELD_DOWN,
        WaitKind.PINNED,
        WaitKind.STALLED,
        WaitKind.PROMOTE,
        WaitKind.RESTORE,
    }
)


class Waiting(str):
    """Progress not possible yet (a backoff, a health gate, an unreachable host), as its one
    display line `SUBJECT: REASON`, with its parts kept for whoever formats it: what it waits
    on (`kind`), and the service it holds back ("" for a host's own line)."""

    subject: str
    reason: str
    kind: WaitKind
    service: str

    def __new__(cls, subject: str, reason: str, kind: WaitKind, service: str = "") -> Waiting:
        line = super().__new__(cls, f"{subject}: {reason}")
        line.subject, line.reason, line.kind, line.service = subject, reason, kind, service
        return line

    @property
    def degraded(self) -> bool:
        """No pass will change it by itself (a task held on a host that is down)."""
        return self.kind.degraded

    def __reduce__(self) -> tuple[type[Waiting], tuple[str, str, WaitKind, str]]:
        return Waiting, (self.subject, self.reason, self.kind, self.service)  # copy, pickle


@dataclass(frozen=True)
class Plan:
    state: ControllerState
    run: tuple[Run, ...] = ()
    stop: tuple[Stop, ...] = ()
    pending: tuple[Pending, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    events: tuple[Event, ...] = ()
    guard: str = ""  # the mass-loss guard held this pass: nothing was decided but probes
    routes: RouteTable = ()  # the route table every answering ingress proxy holds
    proxies: tuple[ProxyStep, ...] = ()  # each answering ingress proxy: started?, then loaded
    endpoints: tuple[Endpoints, ...] = ()  # every exposed (service, port) and its upstreams
    names: tuple[NameStep, ...] = ()  # each answering host's name proxies: run, remove
    certificates: tuple[str, ...] = ()  # host names an ACME order is started for now
    answer: tuple[str, ...] = ()  # host names whose order the CA is told of, once loaded
    collect: tuple[str, ...] = ()  # host names whose answered ACME order is looked at now
    challenges: tuple[tuple[str, str], ...] = ()  # HTTP-01 (path, response) the proxies serve
    hooks: tuple[HookStep, ...] = ()  # the before_update hooks' acts
    jobs: tuple[JobAct, ...] = ()  # the scheduled jobs' runs to start and runs to read
    removals: tuple[OneOff, ...] = ()  # finished one-off tasks to remove
    moves: tuple[MoveAct, ...] = ()  # volume moves' copies and removals (core/moving.py)
    backups: tuple[BackupAct | VerifyAct, ...] = ()  # backups' steps, drills (core/saving.py)
    drains: tuple[Container, ...] = ()  # within a decision: tasks the traffic gate drains

    @property
    def actions(self) -> int:
        return len(self.run) + len(self.stop)

    @property
    def converged(self) -> bool:
        """Nothing to do and nothing to wait for (a degraded fleet can be converged)."""
        return not (self.run or self.stop or self.pending or self.waiting or self.guard)

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

    def half_written(self) -> list[tuple[str, int, str]]:
        """The slots held Failed because a restore left their volume half written (no
        apply, scale or rollback starts them), each with its line: what clears it."""
        return [
            (name, n, slot.half_written)
            for name, ss in self.state.services.items()
            if ss.spec.desired == "running"
            for n, slot in sorted(ss.slots.items())
            if slot.half_written and n in ss.slot_numbers()
        ]

    def failed_slots(self) -> list[tuple[str, int, str]]:
        """The Failed slots the service wants, each with why (a restore's half-written
        volume: the restore's line, which outlives any later exit of its old task)."""
        return [
            (name, n, slot.half_written or slot.last_exit)
            for name, ss in self.state.services.items()
            if ss.spec.desired == "running"
            for n, slot in sorted(ss.slots.items())
            if slot.failed and n in ss.slot_numbers()
        ]
