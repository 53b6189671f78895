"""The traffic machine: a routed task leaves every route before it is stopped. Pure.

kamal-proxy's order, as task phases: a task joins the routes once it takes traffic
(`minidock.core.routes.takes_traffic`); when a pass decides to stop it (a rolling update
in either order, a drain, a rebalance, a scale-down, a move, a stale task, a prune, desired
stopped), the stop is held and the task is *draining*: out of the route table, so this
pass loads every reachable proxy without it. It is *drained*, and its stop goes ahead,
once no reachable proxy's loaded config still sends to it and `drain_timeout` has passed
since the last pass that saw it in one. The durable side is `ControllerState.draining`
(task id -> that time), committed with the decision, so a controller killed mid-drain
resumes it. `gate` applies the machine to a pass's plan; `step` is the only place a
task's traffic phase changes. An exposed service's tasks (`expose`) go through the same
machine: the name proxies' loaded servers count beside the ingress proxies' upstreams.
docs/ingress.md, docs/discovery.md.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from minidock.core.plan import Plan, Waiting, WaitKind
from minidock.core.routes import takes_traffic, upstream
from minidock.core.specs import TaskSpecs
from minidock.core.state import ControllerState
from minidock.model import Cluster, Container, Event, Inventory, Observed

__all__ = [
    "TABLE",
    "Traffic",
    "TrafficInput",
    "TrafficPhase",
    "gate",
    "loaded_upstreams",
    "step",
]


class TrafficPhase(enum.StrEnum):
    UNROUTED = "unrouted"  # takes no traffic: starting, unhealthy, or on a silent host
    ROUTED = "routed"  # in the route table every proxy loads
    DRAINING = "draining"  # its stop is decided: out of the routes, requests finishing
    DRAINED = "drained"  # out of every loaded route for drain_timeout: it may stop


class TrafficInput(enum.StrEnum):
    READY = "takes traffic"
    NOT_READY = "takes no traffic"
    STOP_LOADED = "stop: in a loaded route"
    STOP_WAITING = "stop: drain_timeout running"
    STOP_DONE = "stop: out of every route for drain_timeout"
    KEPT = "stop no longer decided"


_P, _I = TrafficPhase, TrafficInput


def _next(phase: TrafficPhase, given: TrafficInput) -> TrafficPhase:
    draining = phase in (_P.DRAINING, _P.DRAINED)
    if given in (_I.READY, _I.NOT_READY):
        if draining:
            return phase  # only the stop's fate moves a draining task
        return _P.ROUTED if given is _I.READY else _P.UNROUTED
    if given is _I.KEPT:
        return _P.UNROUTED if draining else phase
    if given is _I.STOP_LOADED or phase is _P.ROUTED:
        return _P.DRAINING  # a routed task always leaves the routes first
    if given is _I.STOP_DONE or phase is _P.UNROUTED:
        return _P.DRAINED  # never routed and in no loaded route: nothing to drain
    return phase  # DRAINING / DRAINED, still waiting out drain_timeout


TABLE: dict[tuple[TrafficPhase, TrafficInput], TrafficPhase] = {
    (p, i): _next(p, i) for p in TrafficPhase for i in TrafficInput
}


def step(phase: TrafficPhase, given: TrafficInput) -> TrafficPhase:
    """The one transition function of a task's traffic phase."""
    return TABLE[(phase, given)]


def loaded_upstreams(observed: Observed) -> frozenset[str]:
    """Every upstream a reachable proxy has loaded a route to, and every server an answering
    host's name proxy sends to (a proxy that did not answer is not waited for: its
    requests to a stopped task are retried elsewhere)."""
    found: set[str] = set()
    for proxy in observed.proxies.values():
        if proxy.ok:
            found |= proxy.upstreams
    for names in observed.names.values():
        for name_proxy in (names or {}).values():
            found |= name_proxy.upstreams
    return frozenset(found)


@dataclass(frozen=True)
class Traffic:
    """What a pass knows of traffic, for the gate and for the rollouts that ask it before
    they replace a task stop-first: the spec each task runs, every upstream the answering
    proxies have loaded, the draining record, and the time."""

    specs: TaskSpecs
    inventory: Inventory
    loaded: frozenset[str]
    draining: Mapping[str, float]
    now: float

    @staticmethod
    def of(
        cluster: Cluster,
        inventory: Inventory,
        observed: Observed,
        state: ControllerState,
        now: float,
        specs: TaskSpecs | None = None,
    ) -> Traffic:
        specs = specs if specs is not None else TaskSpecs.of_state(cluster, state)
        return Traffic(specs, inventory, loaded_upstreams(observed), state.draining, now)

    def carries(self, c: Container) -> bool:
        """Whether the task's own spec routes or exposes: it drains before it stops."""
        own = self.specs.of(c)
        return own is not None and bool(own.ingress or own.expose)

    def loaded_in(self, c: Container) -> bool:
        own = self.specs.of(c)
        if own is None:
            return False
        ports = {*own.routed_ports(), *own.expose}
        addresses = {upstream(c, port, self.inventory) for port in ports}
        return bool(addresses & self.loaded)

    def phase(self, c: Container, stopping: bool) -> TrafficPhase:
        """This pass's phase of a task: its phase so far, stepped by what the pass saw."""
        own = self.specs.of(c)
        since = self.draining.get(c.task)
        if since is not None:
            before = TrafficPhase.DRAINING
        elif own is not None and takes_traffic(c, own, self.now):
            before = TrafficPhase.ROUTED
        else:
            before = TrafficPhase.UNROUTED
        if not stopping:
            return step(before, _I.KEPT if since is not None else _I.READY)
        if self.loaded_in(c):
            return step(before, _I.STOP_LOADED)
        timeout = own.drain_timeout if own is not None else 0.0
        waited = since is not None and self.now - since >= timeout
        return step(before, _I.STOP_DONE if waited else _I.STOP_WAITING)

    def holds(self, c: Container) -> bool:
        """Whether a stop of `c` decided now must wait: it carries traffic, is live, and is
        not drained yet (a rollout asks before it replaces a task stop-first)."""
        return c.live and self.carries(c) and self.phase(c, stopping=True) is _P.DRAINING


def _stopping(plan: Plan, traffic: Traffic) -> dict[str, Container]:
    """The live tasks carrying traffic that this plan stops or drains, by task id."""
    found = [s.container for s in plan.stop] + list(plan.drains)
    found += [r.replaces for r in plan.run if r.replaces]
    return {c.task: c for c in found if c.live and traffic.carries(c)}


def gate(plan: Plan, traffic: Traffic) -> Plan:
    """The plan with each stop of a task that routes or exposes held until it is drained,
    the draining record updated, a `draining` event when a task starts to drain and a wait
    line per held task. A stop-first replacement (a run that `replaces` a task) is never
    held here: the rollout asked `Traffic.holds` before deciding it, and drained its task
    first (`plan.drains`)."""
    state = plan.state
    stopping = _stopping(plan, traffic)
    if not stopping and not state.draining:
        return plan
    now = traffic.now
    draining: dict[str, float] = {}
    held: set[str] = set()
    events: list[Event] = []
    waiting: list[Waiting] = []
    for task, c in stopping.items():
        phase = traffic.phase(c, stopping=True)
        if phase is TrafficPhase.DRAINING:
            held.add(task)
            draining[task] = now if traffic.loaded_in(c) else state.draining.get(task, now)
            own = traffic.specs.of(c)
            timeout = own.drain_timeout if own is not None else 0.0
            left = timeout - (now - draining[task])
            line = f"draining {c.name}: {max(left, 0.0):.1f}s"
            waiting.append(Waiting(f"{c.service}.{c.slot}", line, WaitKind.DRAINING, c.service))
            if task not in state.draining:
                line = f"{c.name} on {c.host} leaves every route before it stops"
                events.append(Event(now, "draining", line, c.service, c.slot, c.host, task))
        elif task in state.draining:
            draining[task] = state.draining[task]  # drained: kept until it is gone
    assert not any(r.replaces.task in held for r in plan.run if r.replaces), "undrained run"
    return replace(
        plan,
        state=replace(state, draining=draining),
        stop=tuple(s for s in plan.stop if s.container.task not in held),
        drains=(),
        waiting=(*plan.waiting, *waiting),
        events=(*plan.events, *events),
    )
