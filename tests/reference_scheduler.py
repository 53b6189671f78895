"""Today's exhaustive scheduler, kept verbatim as the reference that minidock/core/scheduler.py
must agree with (tests/unit/test_scheduler_scale.py compares them on random fleets).

This is the scheduler as it was before the scalable one (issue 12): every placement
filters and scores every host, O(hosts) per task. Do not optimise it: its value is that it
is obviously what docs/architecture.md's "Scheduling" section says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from minidock.model import Container, Host, Service
from minidock.units import format_size


@dataclass(frozen=True)
class HostLoad:
    """What is reserved on one host: by live tasks, plus this plan's placements."""

    cpus: float = 0.0
    memory: int = 0
    ports: frozenset[str] = frozenset()
    tasks: tuple[str, ...] = ()  # service name per task, one entry each
    foreign: frozenset[str] = frozenset()  # host ports held by what MiniDock does not manage

    def add(self, service: str, cpus: float, memory: int, ports: Iterable[str]) -> HostLoad:
        return HostLoad(
            self.cpus + cpus,
            self.memory + memory,
            self.ports | frozenset(ports),
            (*self.tasks, service),
            self.foreign,
        )

    def release(self, service: str, cpus: float, memory: int, ports: Iterable[str]) -> HostLoad:
        tasks = list(self.tasks)
        if service in tasks:
            tasks.remove(service)
        return HostLoad(
            max(0.0, self.cpus - cpus),
            max(0, self.memory - memory),
            self.ports - frozenset(ports),
            tuple(tasks),
            self.foreign,
        )


def service_ports(service: Service) -> tuple[str, ...]:
    return tuple(f"{p.host_port}/{p.protocol}" for p in service.ports)


@dataclass
class Fleet:
    """The hosts a placement may choose from, with their current load; updated as we place."""

    hosts: tuple[Host, ...]
    eligible: dict[str, str | None]  # host -> None if it may take tasks, else why not
    load: dict[str, HostLoad] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        hosts: Sequence[Host],
        eligible: dict[str, str | None],
        containers: Iterable[Container],
        foreign: Mapping[str, frozenset[str]] | None = None,
    ) -> Fleet:
        """The load of every host from its live tasks, and the host ports each probe found
        held outside MiniDock (`foreign`: another container, a process)."""
        held = foreign or {}
        load = {h.name: HostLoad(foreign=held.get(h.name, frozenset())) for h in hosts}
        for c in containers:
            if c.live and c.host in load:
                load[c.host] = load[c.host].add(c.service, c.cpus, c.memory, c.host_ports)
        return cls(tuple(sorted(hosts, key=lambda h: h.name)), dict(eligible), load)

    def reserve(self, host: str, service: Service) -> None:
        self.load[host] = self.load[host].add(
            service.name, service.cpus, service.memory, service_ports(service)
        )

    def unreserve(self, host: str, service: Service) -> None:
        """Undo one `reserve` of `service` on `host`."""
        self.load[host] = self.load[host].release(
            service.name, service.cpus, service.memory, service_ports(service)
        )

    def free(self, container: Container, *, keep_ports: bool = False) -> None:
        """A task's load given back (`keep_ports`: but its host ports, held till it goes)."""
        if container.host in self.load:
            ports = () if keep_ports else container.host_ports
            self.load[container.host] = self.load[container.host].release(
                container.service, container.cpus, container.memory, ports
            )


class Filter(Protocol):
    def check(self, host: Host, service: Service, fleet: Fleet) -> bool: ...
    def explain(self, host: Host, service: Service, fleet: Fleet) -> str: ...


class ReadyFilter:
    """Only hosts that answered this pass and are not drained."""

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return fleet.eligible.get(host.name) is None

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        return fleet.eligible.get(host.name) or "not eligible"


class ConstraintFilter:
    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return all(c.allows(host) for c in service.constraints)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        failed = [str(c) for c in service.constraints if not c.allows(host)]
        return "constraint " + ", ".join(failed) + " not met"


class ResourceFilter:
    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return not self._shortfall(host, service, fleet)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        return "; ".join(self._shortfall(host, service, fleet))

    @staticmethod
    def _shortfall(host: Host, service: Service, fleet: Fleet) -> list[str]:
        load = fleet.load.get(host.name, HostLoad())
        short = []
        cpus, memory = service.cpus, service.memory
        if host.cpus is not None and cpus > 0 and load.cpus + cpus > host.cpus + 1e-9:
            short.append(f"needs {cpus:g} cpus, {max(0.0, host.cpus - load.cpus):g} free")
        if host.memory is not None and memory > 0 and load.memory + memory > host.memory:
            free = max(0, host.memory - load.memory)
            short.append(f"needs {format_size(service.memory)} memory, {format_size(free)} free")
        return short


class PortFilter:
    """A host port serves one task per host."""

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return not self._taken(host, service, fleet)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        return "host port " + ", ".join(self._taken(host, service, fleet)) + " in use"

    @staticmethod
    def _taken(host: Host, service: Service, fleet: Fleet) -> list[str]:
        load = fleet.load.get(host.name, HostLoad())
        return [
            p if p not in load.foreign else f"{p} (held outside MiniDock)"
            for p in service_ports(service)
            if p in load.ports or p in load.foreign
        ]


FILTERS: tuple[Filter, ...] = (ReadyFilter(), ConstraintFilter(), ResourceFilter(), PortFilter())


def fullness(host: Host, load: HostLoad) -> float:
    """Mean fraction of capacity reserved; hosts without declared capacity count as empty."""
    parts = []
    if host.cpus:
        parts.append(load.cpus / host.cpus)
    if host.memory:
        parts.append(load.memory / host.memory)
    return sum(parts) / len(parts) if parts else 0.0


def spread_counts(service: Service, fleet: Fleet) -> dict[str | None, int]:
    """Tasks of the service per value of its `spread` label (hosts without it share None)."""
    counts: dict[str | None, int] = {}
    if service.spread is not None:
        for h in fleet.hosts:
            value = h.label(service.spread)
            counts[value] = counts.get(value, 0) + fleet.load[h.name].tasks.count(service.name)
    return counts


def score(
    host: Host, service: Service, fleet: Fleet, spread: dict[str | None, int]
) -> tuple[int, int, float, str]:
    """Lower is better: fewest of this service on the host, then in its spread value,
    then the fullest host after placement (bin-packing), then the name."""
    load = fleet.load[host.name]
    on_host = load.tasks.count(service.name)
    in_spread = spread.get(host.label(service.spread), 0) if service.spread else 0
    after = load.add(service.name, service.cpus, service.memory, ())
    return (on_host, in_spread, -fullness(host, after), host.name)


@dataclass(frozen=True)
class Placement:
    host: str | None  # None: fits nowhere
    reasons: tuple[str, ...] = ()  # per host, why it was refused

    @property
    def why(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "no hosts in the inventory"


def place(
    service: Service, fleet: Fleet, *, avoid: Iterable[str] = (), only: str = ""
) -> Placement:
    """Choose a host for one task of `service`, or explain why none fits.

    Hosts in `avoid` are used only when no other host fits (e.g. the host a task is being
    drained from is never in the candidate set at all, but a start-first replacement prefers
    another host than the old task's). With `only`, that host or none (a slot pinned to
    the host that holds its volume, a global service's task on its host)."""
    avoided = set(avoid)
    fitting: list[Host] = []
    reasons: list[str] = []
    for host in fleet.hosts:
        if only and host.name != only:
            continue
        refused = next((f for f in FILTERS if not f.check(host, service, fleet)), None)
        if refused is None:
            fitting.append(host)
        else:
            reasons.append(f"{host.name}: {refused.explain(host, service, fleet)}")
    if not fitting:
        return Placement(
            None, tuple(reasons) or ((f"{only}: not in the inventory",) if only else ())
        )
    preferred = [h for h in fitting if h.name not in avoided] or fitting
    spread = spread_counts(service, fleet)
    best = min(preferred, key=lambda h: score(h, service, fleet, spread))
    fleet.reserve(best.name, service)
    return Placement(best.name)


def over_capacity(
    host: Host, live: Sequence[Container], movable: Iterable[Container]
) -> dict[str, str]:
    """Tasks to move off a host whose declared cpus or memory dropped below what its live
    tasks reserve: of the `movable` ones (this cluster's), highest slot numbers first,
    until the rest fits. Container id -> why."""
    cpus = sum(c.cpus for c in live)
    memory = sum(c.memory for c in live)

    def over() -> bool:
        short_cpus = host.cpus is not None and cpus > host.cpus + 1e-9
        return short_cpus or (host.memory is not None and memory > host.memory)

    if not over():
        return {}
    why = f"{host.name} is over-committed ({_reserved(host, live)})"
    moves: dict[str, str] = {}
    for c in sorted(movable, key=lambda c: (-c.slot, c.service, c.task)):
        if not over():
            break
        if c.cpus or c.memory:
            moves[c.id] = why
            cpus, memory = cpus - c.cpus, memory - c.memory
    return moves


def _reserved(host: Host, live: Sequence[Container]) -> str:
    """What is over: "cpus 3/2", "memory 3GiB/2GiB"."""
    cpus, memory = sum(c.cpus for c in live), sum(c.memory for c in live)
    parts = []
    if host.cpus is not None and cpus > host.cpus + 1e-9:
        parts.append(f"cpus {cpus:g}/{host.cpus:g}")
    if host.memory is not None and memory > host.memory:
        parts.append(f"memory {format_size(memory)}/{format_size(host.memory)}")
    return ", ".join(parts)


def place_replacing(
    service: Service, fleet: Fleet, old: Container, *, only: str = "", avoid: Iterable[str] = ()
) -> Placement:
    """Stop-first: choose a host for `service` as if `old` were already gone (its host is
    allowed; with `only`, required; `avoid` as `place`'s); when nothing fits, the fleet is
    left as it was."""
    fleet.free(old)
    where = place(service, fleet, only=only, avoid=avoid)
    if where.host is None and old.live and old.host in fleet.load:
        fleet.load[old.host] = fleet.load[old.host].add(
            old.service, old.cpus, old.memory, old.host_ports
        )
    return where
