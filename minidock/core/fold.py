"""What the parts of a pass share: the view it decides from (`View`), what each part
decides (`Effects`), and the small record helpers every part uses. Pure.

`reconcile.py` folds the pass; `rollout.py` gates and advances rollouts; both decide from
one `View` and return `Effects`, concatenated in pass order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from minidock.core.evolve import evolve
from minidock.core.hosts import HostState
from minidock.core.plan import Pending, Run, Stop, Waiting
from minidock.core.slots import SlotState
from minidock.core.state import ServiceState
from minidock.core.supervise import ready
from minidock.core.traffic import Traffic
from minidock.model import Cluster, Container, Event, Host, Service

__all__ = [
    "Effects",
    "View",
    "avoided",
    "deps_block",
    "set_slot",
    "task_id",
    "with_slot",
    "with_slots",
]


def task_id(cluster: str, service: str, slot: int, spec: str, now: float) -> str:
    """A deterministic id: the same decision replayed names the same container, so Docker
    itself refuses a duplicate `docker run` (see runner: a name conflict is adoption)."""
    raw = f"{cluster}/{service}/{slot}/{spec}/{now:.6f}"
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Effects:
    """What one part of the pass decided, concatenated in pass order."""

    stops: tuple[Stop, ...] = ()
    runs: tuple[Run, ...] = ()
    pending: tuple[Pending, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    events: tuple[Event, ...] = ()
    drains: tuple[Container, ...] = ()  # tasks to take out of every route before a stop

    def __add__(self, other: Effects) -> Effects:
        if (
            not (other.stops or other.runs or other.pending or other.waiting or other.events)
            and not other.drains
        ):
            return self
        return Effects(
            self.stops + other.stops,
            self.runs + other.runs,
            self.pending + other.pending,
            self.waiting + other.waiting,
            self.events + other.events,
            self.drains + other.drains,
        )

    @staticmethod
    def joined(parts: Sequence[Effects]) -> Effects:
        """Many effects concatenated at once, in order (`+` in a loop copies quadratically)."""
        return Effects(
            tuple(x for p in parts for x in p.stops),
            tuple(x for p in parts for x in p.runs),
            tuple(x for p in parts for x in p.pending),
            tuple(x for p in parts for x in p.waiting),
            tuple(x for p in parts for x in p.events),
            tuple(x for p in parts for x in p.drains),
        )


@dataclass(frozen=True)
class View:
    """What the pass sees, read-only: hosts after their probes, this cluster's containers
    on hosts that answered, and the slots that hosts which did not answer last ran."""

    cluster: Cluster
    now: float
    hosts: Mapping[str, HostState]
    mine: tuple[Container, ...]
    unseen: Mapping[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    inventory: Mapping[str, Host] = field(default_factory=dict)
    evict: Mapping[str, str] = field(default_factory=dict)  # container id -> why it moves
    traffic: Traffic | None = None  # what the proxies hold: a stop-first replacement asks it
    seen: Mapping[str, float] = field(default_factory=dict)  # host -> when its answer was had

    def seen_at(self, host: str) -> float:
        """When this pass had `host`'s observation (never after `now`): what a task's exit
        or unhealthy turn is counted at, so a restart delay shorter than the pass's own
        observing is over by its decision (docs/supervision.md, "Backoff")."""
        return min(self.seen.get(host, self.now), self.now)

    def misplaced(self, target: Service, c: Container) -> str:
        """Why the task's host no longer satisfies the service's constraints ("" if it does):
        a spec change or an inventory label change."""
        host = self.inventory.get(c.host)
        failed = [str(k) for k in target.constraints if host is not None and not k.allows(host)]
        return f"{c.host} no longer meets constraint {', '.join(failed)}" if failed else ""

    def unseen_of(self, service: str) -> bool:
        """Whether a host that did not answer last ran a task of `service`."""
        return any(s == service for s, _ in self.unseen)

    def holders(self, ss: ServiceState, slot: int) -> tuple[str, ...]:
        """Hosts that may still run the slot's task though this pass cannot see it: those
        unreachable (not yet down), and for `on_host_loss = "wait"` those down too, until
        the operator drains or forgets them. The slot's own record counts, and so does
        what each host ran at its last answer."""
        record = ss.slot(slot)
        seen_there = self.unseen.get((ss.spec.name, slot), ())
        if not seen_there:  # the common case: only the record's host could hold it
            hs = self.hosts.get(record.host) if record.task and record.host else None
            if hs is None or not (hs.unreachable or hs.down):
                return ()
        wait = ss.spec.on_host_loss == "wait" or ss.spec.pinned
        candidates = {*seen_there}
        if record.task and record.host:
            candidates.add(record.host)
        return tuple(sorted(h for h in candidates if self._holds(h, wait=wait)))

    def _holds(self, host: str, *, wait: bool) -> bool:
        hs = self.hosts.get(host)
        if hs is None:
            return False
        return hs.unreachable or (wait and hs.down and not hs.drained)

    def holds(self, c: Container) -> bool:
        """Whether stopping `c` now must wait for it to drain out of every route."""
        return self.traffic is not None and self.traffic.holds(c)

    def run(self, target: Service, slot: int, host: str, reason: str, **kw: object) -> Run:
        tid = task_id(self.cluster.name, target.name, slot, target.spec_hash(), self.now)
        return Run(target, slot, host, tid, reason, **kw)  # type: ignore[arg-type]


def deps_block(
    services: Mapping[str, ServiceState], view: View, ss: ServiceState
) -> tuple[str, str] | None:
    """None when every dependency has all replicas running and healthy and is not rolling
    (updating or rolling back); else the first dependency that blocks, and why."""
    for dep in ss.spec.depends_on:
        dss = services.get(dep)
        if dss is None or dss.spec.desired != "running":
            return dep, f"waiting for dependency {dep} (not running)"
        if dss.rollout.active:
            return dep, f"waiting for dependency {dep} to finish its rollout"
        healthy = {c.slot for c in view.mine if c.service == dep and ready(c)}
        if len(healthy & set(dss.slot_numbers())) < dss.wanted():
            return dep, f"waiting for dependency {dep} to be healthy"
    return None


def with_slot(ss: ServiceState, n: int, state: SlotState) -> ServiceState:
    if ss.slot(n) == state:
        return ss
    return evolve(ss, slots={**ss.slots, n: state})


def with_slots(ss: ServiceState, changed: Mapping[int, SlotState]) -> ServiceState:
    """`with_slot` for many slots at once."""
    if all(ss.slot(n) == state for n, state in changed.items()):
        return ss
    return evolve(ss, slots={**ss.slots, **changed})


def set_slot(
    ss: ServiceState, n: int, state: SlotState, now: float
) -> tuple[ServiceState, tuple[Event, ...]]:
    """Keep a slot's record; reaching the crash-loop limit (by exits, unhealthy tasks or
    failed health gates alike) is an event."""
    name = ss.spec.name
    events: tuple[Event, ...] = ()
    if state.failed and not ss.slot(n).failed:
        message = f"{name}.{n} failed: {state.last_exit}"
        events = (Event(now, "failed", message, service=name, slot=n),)
    return with_slot(ss, n, state), events


def avoided(old_host: str, record: SlotState) -> tuple[str, ...]:
    """The hosts a replacement prefers not to use: the old task's, and the one where the
    slot's last start failed (used only when no other host fits)."""
    return (old_host, record.avoid) if record.avoid and record.avoid != old_host else (old_host,)
