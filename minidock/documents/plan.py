"""What `minidock plan` reports, as one JSON-ready document. Pure.

The document is the `plan --json` contract (docs/cli.md, minidock/schemas/plan.schema.json):
per service, what changes field by field (env and secret keys, never values); then every
step the simulated passes take until convergence (placements, rolling-update batches,
stops); what would stay pending and why; and which services would run below what they
want. It assumes, and says, that every new task becomes healthy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from minidock.commands.proxies import Rendered
from minidock.core import ControllerState
from minidock.core.autoscale import target
from minidock.core.routes import RouteTable, route_changes
from minidock.core.simulate import FieldChange, Simulation, spec_diff
from minidock.model import Cluster, ProxyObservation

__all__ = [
    "ASSUMPTION",
    "PlanDocument",
    "RouteLoad",
    "ServingNote",
    "plan_document",
    "plan_schema",
    "route_loads",
    "serving_notes",
]

ASSUMPTION = "every new task becomes healthy (as its health check or monitor would confirm)"


@dataclass(frozen=True)
class ServiceChange:
    name: str
    change: str  # "new", "changed", "unchanged", "removed"
    diff: tuple[FieldChange, ...]


@dataclass(frozen=True)
class RunStep:
    task: str
    service: str
    slot: int
    host: str
    image: str
    reason: str
    replaces: str | None


@dataclass(frozen=True)
class StopStep:
    task: str
    service: str
    slot: int
    host: str
    reason: str


@dataclass(frozen=True)
class Step:
    number: int
    run: tuple[RunStep, ...]
    stop: tuple[StopStep, ...]


@dataclass(frozen=True)
class PendingSlot:
    service: str
    slot: int
    reason: str


@dataclass(frozen=True)
class RouteLoad:
    """What the first pass does to one ingress host's proxy: `load` (with the route
    changes), `start` (a proxy missing, stopped or of another spec, then its routes),
    `waits` (of another spec, replaced by a later pass: why, then the route changes it
    loads meanwhile), `unchanged`, or `unreachable` (the host did not answer: it keeps
    what it has)."""

    host: str
    action: str
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingNote:
    """A routed service whose routes do not serve its tasks now, as the operator set it
    (docs/ingress.md#maintenance-and-pause): `maintenance` (with the page's message) or
    `paused` (each request held up to `timeout` seconds). A plan changes neither."""

    service: str
    mode: str
    message: str
    timeout: float


@dataclass(frozen=True)
class AutoscaleNote:
    """An autoscaled service's count as the first pass decides it, and why
    (docs/autoscale.md): its bounds, its target in words, the rate it read (requests a
    second over its routes; None: no data)."""

    service: str
    min: int
    max: int
    replicas: int
    target: str
    rate: float | None
    reason: str


@dataclass(frozen=True)
class Below:
    service: str
    running: int
    wanted: int


@dataclass(frozen=True)
class PlanDocument:
    cluster: str
    assumption: str
    lost: tuple[str, ...]
    drained: tuple[str, ...]
    services: tuple[ServiceChange, ...]
    steps: tuple[Step, ...]
    pending: tuple[PendingSlot, ...]
    below: tuple[Below, ...]
    converged: bool
    routes: tuple[RouteLoad, ...] = ()  # the first pass's loads on the ingress proxies
    serving: tuple[ServingNote, ...] = ()  # routed services in maintenance or paused
    autoscale: tuple[AutoscaleNote, ...] = ()  # the first pass's count and why, each

    def to_json(self) -> dict[str, Any]:
        """The `plan --json` document (dicts, lists and scalars)."""
        doc: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return doc


def plan_schema() -> dict[str, Any]:
    """The JSON Schema of `PlanDocument.to_json()`, shipped in the package."""
    text = (resources.files("minidock") / "schemas" / "plan.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def plan_document(
    before: ControllerState,
    desired: Cluster,
    sim: Simulation,
    *,
    lost: tuple[str, ...] = (),
    drained: tuple[str, ...] = (),
    removals: tuple[str, ...] = (),
    mask: Callable[[str], str] = str,
) -> PlanDocument:
    """The document of a simulation; `mask` redacts every line that may echo a secret."""
    return PlanDocument(
        cluster=desired.name,
        assumption=ASSUMPTION,
        lost=lost,
        drained=drained,
        services=_changes(before, desired, removals),
        steps=tuple(_step(s.number, s.run, s.stop, mask) for s in sim.steps),
        pending=tuple(PendingSlot(p.service, p.slot, mask(p.reason)) for p in sim.pending),
        below=tuple(Below(*b) for b in sim.below),
        converged=sim.converged and not sim.below,
        serving=serving_notes(before, desired),
    )


def route_loads(
    table: RouteTable, rendered: Rendered, seen: Mapping[str, ProxyObservation]
) -> tuple[RouteLoad, ...]:
    """What the first pass does to each observed ingress host's proxy, as it rendered
    its config (`rendered.proxies`: each step's load), with the changes to route table
    `table` a load makes."""
    by_host = {x.step.host: x for x in rendered.proxies}
    loads = []
    for host, proxy in sorted(seen.items()):
        x = by_host.get(host)
        if x is None:
            loads.append(RouteLoad(host, "unreachable"))
        elif x.step.start:
            loads.append(RouteLoad(host, "start", route_changes(table, ())))  # every route new
        elif x.step.waits:
            changes = route_changes(table, proxy.routes, proxy.modes) if x.load else ()
            loads.append(RouteLoad(host, "waits", (x.step.waits, *changes)))
        elif not x.load:
            loads.append(RouteLoad(host, "unchanged"))
        else:
            loads.append(RouteLoad(host, "load", route_changes(table, proxy.routes, proxy.modes)))
    return tuple(loads)


def autoscale_notes(state: ControllerState, desired: Cluster) -> tuple[AutoscaleNote, ...]:
    """The desired file's autoscaled services, with the count and reason in `state` (the
    first pass's decision)."""
    found = []
    for svc in desired.services:
        ss = state.services.get(svc.name)
        policy = svc.autoscale
        if ss is None or policy is None:
            continue
        reason = ss.scaling.reason or "no decision yet"
        words = target(policy)
        note = AutoscaleNote(
            svc.name, policy.min, policy.max, ss.replicas(), words, ss.scaling.rate, reason
        )
        found.append(note)
    return tuple(found)


def serving_notes(state: ControllerState, desired: Cluster) -> tuple[ServingNote, ...]:
    """The desired file's routed services whose routes are in maintenance or paused."""
    found = []
    for svc in desired.services:
        ss = state.services.get(svc.name)
        if ss is not None and svc.ingress and not ss.serving.on:
            m = ss.serving
            found.append(ServingNote(svc.name, m.serving.value, m.message, m.timeout))
    return tuple(found)


def _changes(
    before: ControllerState, desired: Cluster, removals: tuple[str, ...]
) -> tuple[ServiceChange, ...]:
    changes = []
    for svc in desired.services:
        old = before.services.get(svc.name)
        if old is None:
            changes.append(ServiceChange(svc.name, "new", ()))
            continue
        diff = spec_diff(old.spec, svc)
        changes.append(ServiceChange(svc.name, "changed" if diff else "unchanged", diff))
    changes += [ServiceChange(name, "removed", ()) for name in removals]
    return tuple(changes)


def _step(
    number: int, runs: tuple[Any, ...], stops: tuple[Any, ...], mask: Callable[[str], str]
) -> Step:
    return Step(
        number,
        tuple(
            RunStep(
                r.task,
                r.service.name,
                r.slot,
                r.host,
                r.service.image,
                mask(r.reason),
                r.replaces.name if r.replaces else None,
            )
            for r in runs
        ),
        tuple(
            StopStep(
                s.container.task,
                s.container.service,
                s.container.slot,
                s.container.host,
                mask(s.reason),
            )
            for s in stops
        ),
    )
