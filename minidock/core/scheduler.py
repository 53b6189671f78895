"""Placement: filters that explain, then spread-first, bin-pack-second scoring. Pure.

The orchestrator (core/reconcile.py) decides *that* a slot needs a task; this module decides
*where*. Every filter answers `check(host)` and, when it refuses, `explain(host)`, so a task
that fits nowhere says why for each host (SwarmKit's filter.go pattern). Each filter's test
is defined once, as a static method on its class (`ReadyFilter.passes`,
`ConstraintFilter.passes`, `ResourceFilter.fits`, `PortFilter.free`) on plain values: `check`
and `explain` run it to explain, and the index below runs the very same function to choose.

The choice is the host with the lowest `score` among those every filter passes, exactly as
if every host were filtered and scored, but found in O(log hosts) amortised per task:

- the fleet keeps its counts incrementally (per host: reservations, ports, tasks per
  service; per service: the hosts that run it and its tasks per `spread` label value) and
  logs every host whose load changes;
- each service (what placement weighs of it: name, cpus, memory, ports, constraints,
  spread) gets a `_Candidates` index on first use: the hosts its static filters pass (ready,
  constraints), in one heap per spread value, keyed by the rest of the score (tasks of the
  service on the host, fullness after placement, name). Before each use it re-keys only
  the hosts changed since (a fresh, versioned entry; stale entries are skipped when they
  surface);
- resources and ports are checked lazily on the heap tops: a host they refuse leaves the
  heap until its load changes again;
- the per-host reasons of a task that fits nowhere are worked out, host by host, only then.

Building a service's index costs O(hosts) once per pass; every placement after that costs
O(log hosts) per host it changes, plus one comparison per spread value.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from minidock.model import Constraint, Container, Host, Service
from minidock.units import format_size

__all__ = [
    "FILTERS",
    "Fleet",
    "HostLoad",
    "Placement",
    "counted_as",
    "fullness",
    "over_capacity",
    "place",
    "place_replacing",
    "score",
    "service_ports",
    "spread_counts",
]


def counted_as(c: Container, cluster: str) -> Container:
    """A live task as the scheduler counts it for `cluster`: another cluster's under its own
    name, so it fills capacity and ports but never counts toward this cluster's spread."""
    return c if c.cluster == cluster else replace(c, service=f"{c.cluster}/{c.service}")


class HostLoad:
    """What is reserved on one host: by live tasks, plus this plan's placements. Changed
    only through its `Fleet`, which keeps its indexes in step."""

    __slots__ = ("cpus", "foreign", "gpus", "memory", "ports", "tasks")

    def __init__(self, foreign: frozenset[str] = frozenset()) -> None:
        self.cpus = 0.0
        self.memory = 0
        self.gpus = 0  # GPUs its tasks were given (each holds its own device ids)
        self.ports: set[str] = set()
        self.tasks: dict[str, int] = {}  # service name -> its tasks here
        self.foreign = foreign  # host ports held by what MiniDock does not manage

    def count(self, service: str) -> int:
        """Tasks of `service` on the host."""
        return self.tasks.get(service, 0)


def service_ports(service: Service) -> tuple[str, ...]:
    """The host ports a task of `service` holds ("8080/tcp"), worked out once per value."""
    known: tuple[str, ...] | None = service.__dict__.get("_host_ports")
    if known is None:
        known = tuple(f"{p.host_port}/{p.protocol}" for p in service.ports)
        object.__setattr__(service, "_host_ports", known)
    return known


Entry = tuple[int, float, str, int]  # tasks of the service here, -fullness after, name, version
Member = tuple[str, str | None, HostLoad, float | None, int | None]  # name, spread value,
# load, declared cpus and memory of a host a service may use


class Fleet:
    """The hosts a placement may choose from, with their current load; updated as we place.

    `eligible` maps a host to None if it may take tasks, else why not; it is read when a
    service's index is built, so it is not changed afterwards."""

    def __init__(
        self,
        hosts: Sequence[Host],
        eligible: Mapping[str, str | None],
        load: Mapping[str, HostLoad] | None = None,
    ) -> None:
        self.hosts = tuple(hosts)
        self.eligible = dict(eligible)
        self.load: dict[str, HostLoad] = dict(load or {})
        self.by_name = {h.name: h for h in self.hosts}
        self.labels = {h.name: dict(h.labels) for h in self.hosts}
        self.changed: list[str] = []  # every host whose load changed, in order
        self._running: dict[str, dict[str, int]] = {}  # service -> host -> its tasks there
        self._spread: dict[str, dict[str, dict[str | None, int]]] = {}  # service -> label -> counts
        self._candidates: dict[tuple[object, ...], _Candidates] = {}
        self._allowed: dict[tuple[Constraint, ...], list[Host]] = {}
        self._groups: dict[tuple[tuple[Constraint, ...], str | None], dict[str, str | None]] = {}
        self._templates: dict[tuple[object, ...], _Template] = {}
        self._members: dict[tuple[tuple[Constraint, ...], str | None], list[Member]] = {}
        self._values: dict[str, tuple[str | None, ...]] = {}  # label -> the values hosts have
        self._nowhere: dict[tuple[object, ...], tuple[int, tuple[str, ...]]] = {}
        for name, load_ in self.load.items():
            for service, n in load_.tasks.items():
                self._running.setdefault(service, {})[name] = n

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
        fleet = cls(sorted(hosts, key=lambda h: h.name), eligible)
        loads = fleet.load = {h.name: HostLoad(held.get(h.name, frozenset())) for h in hosts}
        running = fleet._running
        for c in containers:  # `add` written out: nothing is indexed yet
            load = loads.get(c.host) if c.live else None
            if load is not None:
                load.cpus = load.cpus + c.cpus
                load.memory = load.memory + c.memory
                load.gpus += len(c.gpus)
                load.ports.update(c.host_ports)
                load.tasks[c.service] = load.tasks.get(c.service, 0) + 1
                on = running.setdefault(c.service, {})
                on[c.host] = on.get(c.host, 0) + 1
        return fleet

    def reserve(self, host: str, service: Service) -> None:
        ports = service_ports(service)
        self.add(host, service.name, service.cpus, service.memory, ports, service.gpus)

    def unreserve(self, host: str, service: Service) -> None:
        """Undo one `reserve` of `service` on `host`."""
        ports = service_ports(service)
        self.release(host, service.name, service.cpus, service.memory, ports, service.gpus)

    def free(self, c: Container, *, keep_ports: bool = False) -> None:
        """A task's load given back (`keep_ports`: but its host ports, held till it goes)."""
        if c.host in self.load:
            ports = () if keep_ports else c.host_ports
            self.release(c.host, c.service, c.cpus, c.memory, ports, len(c.gpus))

    def add(
        self,
        host: str,
        service: str,
        cpus: float,
        memory: int,
        ports: Iterable[str],
        gpus: int = 0,
    ) -> None:
        """One task's reservation more on `host`."""
        load = self.load[host]
        load.cpus = load.cpus + cpus
        load.memory = load.memory + memory
        load.gpus += gpus
        load.ports.update(ports)
        load.tasks[service] = load.tasks.get(service, 0) + 1
        self._count(host, service, 1)

    def release(
        self,
        host: str,
        service: str,
        cpus: float,
        memory: int,
        ports: Iterable[str],
        gpus: int = 0,
    ) -> None:
        """One task's reservation less on `host` (never below nothing)."""
        load = self.load[host]
        if load.tasks.get(service):
            load.tasks[service] -= 1
            if not load.tasks[service]:
                del load.tasks[service]
            self._count(host, service, -1)
        else:
            self.changed.append(host)
        load.cpus = max(0.0, load.cpus - cpus)
        load.memory = max(0, load.memory - memory)
        load.gpus = max(0, load.gpus - gpus)
        load.ports.difference_update(ports)

    def _count(self, host: str, service: str, delta: int) -> None:
        running = self._running.setdefault(service, {})
        running[host] = running.get(host, 0) + delta
        if not running[host]:
            del running[host]
        spread = self._spread.get(service)
        if spread:
            labels = self.labels[host]
            for key, counts in spread.items():
                value = labels.get(key)
                counts[value] = counts.get(value, 0) + delta
        self.changed.append(host)

    def running(self, service: str) -> Mapping[str, int]:
        """The hosts that run tasks of `service`, with how many each."""
        return self._running.get(service, {})

    def spread(self, service: str, key: str) -> dict[str | None, int]:
        """Tasks of `service` per value of label `key` (every value a host has, even at 0;
        hosts without the label share None), kept up to date as the fleet changes."""
        by_key = self._spread.setdefault(service, {})
        counts = by_key.get(key)
        if counts is None:
            values = self._values.get(key)
            if values is None:  # every value of the label, in host name order
                values = self._values[key] = tuple(
                    dict.fromkeys(self.labels[h.name].get(key) for h in self.hosts)
                )
            counts = by_key[key] = dict.fromkeys(values, 0)
            for name, n in self.running(service).items():
                counts[self.labels[name].get(key)] += n
        return counts

    def allowed(self, constraints: tuple[Constraint, ...]) -> list[Host]:
        """The hosts that may take tasks (eligible) and meet `constraints`, in name order."""
        found = self._allowed.get(constraints)
        if found is None:
            eligible, ready, meets = self.eligible, ReadyFilter.passes, ConstraintFilter.passes
            found = self._allowed[constraints] = [
                h for h in self.hosts if ready(eligible, h.name) and meets(h, constraints)
            ]
        return found

    def groups(
        self, constraints: tuple[Constraint, ...], spread: str | None
    ) -> dict[str, str | None]:
        """The hosts `allowed` under `constraints`, each with its `spread` label value."""
        found = self._groups.get((constraints, spread))
        if found is None:
            hosts, labels = self.allowed(constraints), self.labels
            found = self._groups[(constraints, spread)] = {
                h.name: labels[h.name].get(spread) if spread else None for h in hosts
            }
        return found

    def template(self, service: Service) -> _Template:
        """The heaps a service of this shape starts from: made again once as many
        changes as there are hosts have happened since (catching up would cost more).
        Host ports are not part of the shape: `_Candidates.fits` checks them on every
        heap top, so services alike but for their ports share one template."""
        shape = (service.cpus, service.memory, service.constraints, service.spread)
        known = self._templates.get(shape)
        if known is None or len(self.changed) - known.position > len(self.hosts):
            known = self._templates[shape] = _ranked(self, service)
        return known

    def members(self, constraints: tuple[Constraint, ...], spread: str | None) -> list[Member]:
        """`groups` with what `_ranked` reads of each host, in one tuple per host."""
        key = (constraints, spread)
        found = self._members.get(key)
        if found is None:
            load, by_name = self.load, self.by_name
            found = self._members[key] = [
                (name, value, load[name], by_name[name].cpus, by_name[name].memory)
                for name, value in self.groups(constraints, spread).items()
            ]
        return found

    def candidates(self, service: Service) -> _Candidates:
        """The service's index, brought up to date with every change since its last use."""
        key = _weighed(service)
        index = self._candidates.get(key)
        if index is None:
            index = self._candidates[key] = _Candidates(self, service)
        else:
            index.sync()
        return index


def nowhere(fleet: Fleet, service: Service) -> tuple[str, ...]:
    """Why no host takes `service`, host by host in name order, each host's first filter
    that refuses it (remembered by the fleet while no host's load changes)."""
    key = _weighed(service)
    known = fleet._nowhere.get(key)
    if known is not None and known[0] == len(fleet.changed):
        return known[1]
    reasons: list[str] = []
    for host in fleet.hosts:
        refused = next((f for f in FILTERS if not f.check(host, service, fleet)), None)
        if refused is not None:
            reasons.append(f"{host.name}: {refused.explain(host, service, fleet)}")
    fleet._nowhere[key] = (len(fleet.changed), tuple(reasons))
    return tuple(reasons)


def _weighed(service: Service) -> tuple[object, ...]:
    """What placement weighs of a service: two services alike in these place alike
    (worked out once per value: every placement asks it)."""
    known: tuple[object, ...] | None = service.__dict__.get("_weighed")
    if known is None:
        known = (
            service.name,
            service.cpus,
            service.memory,
            service_ports(service),
            service.constraints,
            service.spread,
            service.gpus,
        )
        object.__setattr__(service, "_weighed", known)
    return known


@dataclass(frozen=True)
class _Template:
    """The candidate heaps of every service of one shape (what placement weighs of it but
    its name), as the fleet was at `position` in its change log, counting no tasks of the
    service on any host: a service's index starts as a copy, then catches up."""

    position: int
    heaps: dict[str | None, list[Entry]]


def _ranked(fleet: Fleet, service: Service) -> _Template:
    """Every candidate host whose resources fit now (`ResourceFilter.fits`), in its heap,
    keyed as `_Candidates.push` keys it (`_fullness` written out, as this runs for every
    host). A host its resources refuse now joins its heap when its load changes."""
    cpus, memory, fits = service.cpus, service.memory, ResourceFilter.fits
    members = fleet.members(service.constraints, service.spread)
    heaps: dict[str | None, list[Entry]] = {m[1]: [] for m in members}
    for name, value, load, hc, hm in members:
        c, m = load.cpus + cpus, load.memory + memory
        if not fits(hc, hm, c, m, cpus, memory):
            continue
        # `_fullness`, written out
        after = ((c / hc + m / hm) / 2 if hm else c / hc) if hc else (m / hm if hm else 0.0)
        heaps[value].append((0, -after, name, 0))
    for heap in heaps.values():
        heapq.heapify(heap)
    return _Template(len(fleet.changed), heaps)


class _Candidates:
    """One service's candidate hosts (ready, constraints met), one heap per spread value,
    keyed by (tasks of the service on the host, -fullness after placement, name)."""

    def __init__(self, fleet: Fleet, service: Service) -> None:
        self.fleet = fleet
        self.name, self.cpus, self.memory = service.name, service.cpus, service.memory
        self.ports = service_ports(service)
        self.gpus = service.gpus
        self.spread = service.spread
        self.group = fleet.groups(service.constraints, self.spread)  # host -> spread value
        self.version: dict[str, int] = {}  # host -> its entries' version (none yet: 0)
        template = fleet.template(service)
        self.heaps = {value: list(heap) for value, heap in template.heaps.items()}
        self.tops: dict[str | None, Entry | None] = {}  # each heap's `_top`, until it changes
        self.synced = template.position
        self.sync()

    def sync(self) -> None:
        """A fresh entry for every candidate host whose load changed since the last use."""
        changed = self.fleet.changed
        if self.synced == len(changed):
            return
        group = self.group
        for name in set(changed[self.synced :]):
            if name in group:
                self.push(name)
        self.synced = len(changed)

    def push(self, name: str) -> None:
        """A fresh entry for a candidate host, keyed by its load now; its older ones are
        stale from now on."""
        version = self.version[name] = self.version.get(name, 0) + 1
        load = self.fleet.load[name]
        after = _fullness(
            self.fleet.by_name[name], load.cpus + self.cpus, load.memory + self.memory
        )
        entry = (load.tasks.get(self.name, 0), -after, name, version)
        value = self.group[name]
        heapq.heappush(self.heaps[value], entry)
        self.tops.pop(value, None)

    def fits(self, name: str) -> bool:
        """The resource and port filters, on the host's current load."""
        host, load, cpus, memory = (
            self.fleet.by_name[name],
            self.fleet.load[name],
            self.cpus,
            self.memory,
        )
        after_cpus, after_memory = load.cpus + cpus, load.memory + memory
        if not ResourceFilter.fits(host.cpus, host.memory, after_cpus, after_memory, cpus, memory):
            return False
        if not GpuFilter.fits(len(host.gpus), load.gpus, self.gpus):
            return False
        return PortFilter.free(self.ports, load)

    def best(self, avoid: frozenset[str]) -> str | None:
        """The host with the lowest score that every filter passes, outside `avoid` if any
        such host fits; None when none fits."""
        counts = self.fleet.spread(self.name, self.spread) if self.spread else {}
        chosen: tuple[int, int, float, str] | None = None
        fallback: tuple[int, int, float, str] | None = None
        aside: list[tuple[str | None, Entry]] = []
        tops = self.tops
        for value, heap in self.heaps.items():
            if avoid or value not in tops:  # else no entry came or went since it was found
                tops[value] = self._top(value, heap, avoid, aside)
            top = tops[value]
            if top is not None:
                ranked = (top[0], counts.get(value, 0), top[1], top[2])
                chosen = ranked if chosen is None or ranked < chosen else chosen
        for value, e in aside:
            ranked = (e[0], counts.get(value, 0), e[1], e[2])
            fallback = ranked if fallback is None or ranked < fallback else fallback
            heapq.heappush(self.heaps[value], e)
        if avoid:
            tops.clear()  # found with entries put aside
        winner = chosen or fallback
        return None if winner is None else winner[3]

    def _top(
        self,
        value: str | None,
        heap: list[Entry],
        avoid: frozenset[str],
        aside: list[tuple[str | None, Entry]],
    ) -> Entry | None:
        """The heap's best current entry that fits and is not avoided; stale entries and
        refused hosts leave the heap, avoided ones that fit are put `aside`.

        A template's entry counts no task of the service: on a host that runs some, the
        host's key is worse than the entry says, so it is keyed afresh when it surfaces
        (every other entry is exact: a host whose load changes gets a fresh one)."""
        tasks = self.name
        while heap:
            top = heap[0]
            name = top[2]
            if top[3] != self.version.get(name, 0) or not self.fits(name):
                heapq.heappop(heap)
            elif top[0] != self.fleet.load[name].tasks.get(tasks, 0):
                self.push(name)  # the template's entry is stale from now on
            elif name in avoid:
                aside.append((value, heapq.heappop(heap)))
            else:
                return top
        return None


class Filter(Protocol):
    def check(self, host: Host, service: Service, fleet: Fleet) -> bool: ...
    def explain(self, host: Host, service: Service, fleet: Fleet) -> str: ...


class ReadyFilter:
    """Only hosts that answered this pass and are not drained."""

    @staticmethod
    def passes(eligible: Mapping[str, str | None], name: str) -> bool:
        """The test: the host is eligible (no reason it may not take tasks)."""
        return eligible.get(name) is None

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return self.passes(fleet.eligible, host.name)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        return fleet.eligible.get(host.name) or "not eligible"


class ConstraintFilter:
    """Only hosts whose labels (and name) meet every constraint of the service."""

    @staticmethod
    def passes(host: Host, constraints: tuple[Constraint, ...]) -> bool:
        """The test: every constraint allows the host."""
        return all(c.allows(host) for c in constraints)

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return self.passes(host, service.constraints)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        failed = [str(c) for c in service.constraints if not self.passes(host, (c,))]
        return "constraint " + ", ".join(failed) + " not met"


class ResourceFilter:
    """Only hosts with room for the task's cpus and memory reservations."""

    @staticmethod
    def fits(
        host_cpus: float | None,
        host_memory: int | None,
        cpus_after: float,
        memory_after: int,
        cpus: float,
        memory: int,
    ) -> bool:
        """The test: what the host would reserve with the task (`*_after`) is within what
        it declares; an undeclared capacity is unlimited, and a task that reserves none of
        a dimension fits it whatever the host holds."""
        if host_cpus is not None and cpus > 0 and cpus_after > host_cpus + 1e-9:
            return False
        return host_memory is None or memory <= 0 or memory_after <= host_memory

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        load = fleet.load.get(host.name) or HostLoad()
        cpus, memory = service.cpus, service.memory
        return self.fits(
            host.cpus, host.memory, load.cpus + cpus, load.memory + memory, cpus, memory
        )

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        load = fleet.load.get(host.name) or HostLoad()
        cpus, memory = service.cpus, service.memory
        short = []
        if not self.fits(host.cpus, None, load.cpus + cpus, 0, cpus, 0):
            free_cpus = max(0.0, (host.cpus or 0.0) - load.cpus)
            short.append(f"needs {cpus:g} cpus, {free_cpus:g} free")
        if not self.fits(None, host.memory, 0.0, load.memory + memory, 0.0, memory):
            free = max(0, (host.memory or 0) - load.memory)
            short.append(f"needs {format_size(memory)} memory, {format_size(free)} free")
        return "; ".join(short)


class GpuFilter:
    """Only hosts with as many free GPUs as the task wants (each task its own device ids:
    minidock.core.gpus gives them)."""

    @staticmethod
    def fits(host_gpus: int, given: int, wanted: int) -> bool:
        """The test: the host's GPUs less those its tasks were given leave `wanted`."""
        return wanted <= 0 or given + wanted <= host_gpus

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        load = fleet.load.get(host.name) or HostLoad()
        return self.fits(len(host.gpus), load.gpus, service.gpus)

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        load = fleet.load.get(host.name) or HostLoad()
        if not host.gpus:
            return f"needs {service.gpus} gpus, the host has none (inventory gpus)"
        free = max(0, len(host.gpus) - load.gpus)
        return f"needs {service.gpus} gpus, {free} free"


class PortFilter:
    """A host port serves one task per host."""

    @staticmethod
    def free(ports: Iterable[str], load: HostLoad) -> bool:
        """The test: no task and nothing outside MiniDock holds any of the host ports."""
        return not any(p in load.ports or p in load.foreign for p in ports)

    def check(self, host: Host, service: Service, fleet: Fleet) -> bool:
        return self.free(service_ports(service), fleet.load.get(host.name) or HostLoad())

    def explain(self, host: Host, service: Service, fleet: Fleet) -> str:
        load = fleet.load.get(host.name) or HostLoad()
        taken = [
            p if p not in load.foreign else f"{p} (held outside MiniDock)"
            for p in service_ports(service)
            if not self.free((p,), load)
        ]
        return "host port " + ", ".join(taken) + " in use"


FILTERS: tuple[Filter, ...] = (
    ReadyFilter(),
    ConstraintFilter(),
    ResourceFilter(),
    GpuFilter(),
    PortFilter(),
)


def _fullness(host: Host, cpus: float, memory: int) -> float:
    """The mean of the declared parts (none declared: empty)."""
    hc, hm = host.cpus, host.memory
    if hc:
        return (cpus / hc + memory / hm) / 2 if hm else cpus / hc
    return memory / hm if hm else 0.0


def fullness(host: Host, load: HostLoad) -> float:
    """Mean fraction of capacity reserved; hosts without declared capacity count as empty."""
    return _fullness(host, load.cpus, load.memory)


def spread_counts(service: Service, fleet: Fleet) -> dict[str | None, int]:
    """Tasks of the service per value of its `spread` label (hosts without it share None)."""
    return dict(fleet.spread(service.name, service.spread)) if service.spread else {}


def score(
    host: Host, service: Service, fleet: Fleet, spread: dict[str | None, int]
) -> tuple[int, int, float, str]:
    """Lower is better: fewest of this service on the host, then in its spread value,
    then the fullest host after placement (bin-packing), then the name."""
    load = fleet.load[host.name]
    on_host = load.count(service.name)
    in_spread = spread.get(host.label(service.spread), 0) if service.spread else 0
    after = _fullness(host, load.cpus + service.cpus, load.memory + service.memory)
    return (on_host, in_spread, -after, host.name)


@dataclass(frozen=True)
class Placement:
    host: str | None  # None: fits nowhere
    reasons: tuple[str, ...] = ()  # per host, why it was refused

    @property
    def why(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "no hosts in the inventory"


def place(
    service: Service,
    fleet: Fleet,
    *,
    avoid: Iterable[str] = (),
    only: str = "",
    never: Mapping[str, str] | None = None,
) -> Placement:
    """Choose a host for one task of `service`, or explain why none fits.

    Hosts in `avoid` are used only when no other host fits (e.g. the host a task is being
    drained from is never in the candidate set at all, but a start-first replacement prefers
    another host than the old task's). Hosts in `never` (host -> why) are not used at all
    (a host that keeps a slot's old volume). With `only`, that host or none (a slot pinned
    to the host that holds its volume, a global service's task on its host)."""
    if only:
        return _place_on(service, fleet, only)
    never = never or {}
    candidates = fleet.candidates(service)
    best = candidates.best(frozenset({*avoid, *never}))
    if best in never:  # only avoided hosts fit: the best of them that may be used
        best = candidates.best(frozenset(never))
    if best is None or best in never:
        filtered = nowhere(fleet, service)  # and a host it never goes to, that fits
        named = {r.split(":", 1)[0] for r in filtered}
        kept = tuple(f"{h}: {why}" for h, why in sorted(never.items()) if h not in named)
        return Placement(None, filtered + kept)
    fleet.reserve(best, service)
    return Placement(best)


def _place_on(service: Service, fleet: Fleet, only: str) -> Placement:
    """`place` with `only`: that one host, if every filter passes it."""
    host = fleet.by_name.get(only)
    if host is None:
        return Placement(None, (f"{only}: not in the inventory",))
    refused = next((f for f in FILTERS if not f.check(host, service, fleet)), None)
    if refused is not None:
        return Placement(None, (f"{host.name}: {refused.explain(host, service, fleet)}",))
    fleet.reserve(host.name, service)
    return Placement(host.name)


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
        fleet.add(old.host, old.service, old.cpus, old.memory, old.host_ports, len(old.gpus))
    return where
