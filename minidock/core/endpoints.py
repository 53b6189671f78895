"""Endpoints as a function of observed tasks: for each exposed (service, port), where its
tasks that take traffic are reached from any host. Pure; the name proxies load it.

The same rule as the ingress's routes (`minidock.core.routes`): a task is an endpoint when
it runs and is healthy (or, without a health check, has run for `update.monitor`), its host
answered this pass, and it is not draining. It is reached at its host's `private_address`
and the host port Docker published for the exposed container port. A host that did not
answer this pass but is not down keeps the endpoints the answering name proxies have loaded
for it (as the routes do: the proxies retry elsewhere if it is really gone). The table is
recomputed every pass; nothing edits it. docs/discovery.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from minidock.core.routes import effective_services, takes_traffic, upstream
from minidock.core.specs import TaskSpecs
from minidock.core.state import ControllerState
from minidock.model import Cluster, Container, HostNames, Inventory, Observed, Service

__all__ = [
    "Endpoints",
    "NameStep",
    "endpoint_table",
    "exposed_services",
    "name_steps",
    "names_in_use",
]


@dataclass(frozen=True)
class Endpoints:
    """One exposed port of a service (`SERVICE:PORT` from any task) and the upstreams
    ("ADDRESS:HOSTPORT") of its tasks that take traffic, with their task ids, sorted."""

    service: str
    port: int
    upstreams: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()


def exposed_services(cluster: Cluster, state: ControllerState) -> dict[str, Service]:
    """Each service with `expose`, by name, in its effective spec (`effective_services`:
    pruned services expose nothing)."""
    return effective_services(cluster, state, lambda s: s.expose)


def names_in_use(cluster: Cluster, state: ControllerState) -> bool:
    """Whether a pass looks at the name proxies: a service exposes a port, or a spec the
    state keeps (current, previous, pruned) did, so proxies may be left to remove."""
    if any(s.expose for s in cluster.services):
        return True
    kept = (spec for ss in state.services.values() for spec in (ss.spec, ss.previous, *ss.older))
    return any(spec is not None and spec.expose for spec in kept)


def endpoint_table(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    specs: TaskSpecs | None = None,
) -> tuple[Endpoints, ...]:
    """Every exposed (service, port), with the upstreams of its tasks that take traffic
    now (draining tasks left out), by service name then port. A port is exposed while the
    service's effective spec exposes it or a live task's own spec does (`expose` turned
    off: the old tasks, which carry no alias, stay reachable by name until they are gone),
    and each task is judged by the spec it runs (`specs`)."""
    specs = specs if specs is not None else TaskSpecs.of_state(cluster, state)
    exposing = {name: set(s.expose) for name, s in exposed_services(cluster, state).items()}
    tasks: dict[str, list[tuple[Container, Service]]] = {}
    for c in observed.containers():
        own = specs.of(c)
        if own is None or not own.expose or not c.live:
            continue
        exposing.setdefault(c.service, set()).update(own.expose)
        tasks.setdefault(c.service, []).append((c, own))
    held = _held(observed, inventory, state)
    table: list[Endpoints] = []
    for name, ports in sorted(exposing.items()):
        taking = [
            (c, own)
            for c, own in tasks.get(name, ())
            if c.task not in state.draining and takes_traffic(c, own, now)
        ]
        for port in sorted(ports):
            found = {
                (address, c.task)
                for c, own in taking
                if port in own.expose and (address := upstream(c, port, inventory)) is not None
            }
            addresses = {a for a, _ in found}
            found |= {(a, t) for a, t in held.get((name, port), set()) if a not in addresses}
            pairs = sorted(found)
            table.append(
                Endpoints(name, port, tuple(a for a, _ in pairs), tuple(t for _, t in pairs))
            )
    return tuple(table)


@dataclass(frozen=True)
class NameStep:
    """One answering host's name proxies as this pass leaves them: the services whose
    proxy runs there (started where missing, loaded where its config differs), and those
    whose proxy is removed."""

    host: str
    run: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


def name_steps(
    table: Sequence[Endpoints],
    names: Mapping[str, HostNames],
    used: Set[str],
    aliased: Mapping[str, Set[str]],
) -> tuple[NameStep, ...]:
    """What each answering host's name proxies do this pass. On a host the cluster uses
    (`used`: it has a task there or starts one), a service's name proxy runs while its
    endpoints have an upstream; one already running with none is kept only where no task
    of the service on that host carries the service's alias (`aliased`: host -> services
    with such a task), since the proxy holds the alias too and an empty one would take a
    share of the name's lookups from the tasks that answer. A proxy is never started with
    no upstream to send to. Every other proxy of the cluster on the host is removed."""
    answering = {e.service for e in table if e.upstreams}
    exposed = sorted({e.service for e in table})
    steps: list[NameStep] = []
    for host, proxies in sorted(names.items()):
        if proxies is None:  # the host did not answer: left for a later pass
            continue
        run: list[str] = []
        if host in used:
            for service in exposed:
                running = service in proxies and proxies[service].running
                alias_here = service in aliased.get(host, ())
                if service in answering or (running and not alias_here):
                    run.append(service)
        remove = tuple(sorted(set(proxies) - set(run)))
        if run or remove:
            steps.append(NameStep(host, tuple(run), remove))
    return tuple(steps)


def _held(
    observed: Observed, inventory: Inventory, state: ControllerState
) -> dict[tuple[str, int], set[tuple[str, str]]]:
    """(address, task) the answering name proxies send to at hosts that did not answer
    this pass and are not down, by (service, port)."""
    silent = {
        h.reached_at
        for h in inventory.hosts
        if (seen := observed.hosts.get(h.name)) is not None
        and not seen.ok
        and not state.host(h.name).down
    }
    held: dict[tuple[str, int], set[tuple[str, str]]] = {}
    if not silent:
        return held
    for proxies in observed.names.values():
        for proxy in (proxies or {}).values():
            for port, task, address in proxy.servers:
                if address.rpartition(":")[0] in silent and task not in state.draining:
                    held.setdefault((proxy.service, port), set()).add((address, task))
    return held
