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

from dataclasses import dataclass

from minidock.core.routes import effective_services, takes_traffic, upstream
from minidock.core.state import ControllerState
from minidock.model import Cluster, Inventory, Observed, Service

__all__ = ["Endpoints", "endpoint_table", "exposed_services", "names_in_use"]


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
    kept = (spec for ss in state.services.values() for spec in (ss.spec, ss.previous))
    return any(spec is not None and spec.expose for spec in kept)


def endpoint_table(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
) -> tuple[Endpoints, ...]:
    """Every exposed (service, port), with the upstreams of its tasks that take traffic
    now (draining tasks left out), by service name then port."""
    services = exposed_services(cluster, state)
    held = _held(observed, inventory, state)
    table: list[Endpoints] = []
    for name, service in sorted(services.items()):
        live = [
            c
            for c in observed.containers()
            if c.service == name and c.task not in state.draining and takes_traffic(c, service, now)
        ]
        for port in sorted(service.expose):
            found = {
                (address, c.task)
                for c in live
                if (address := upstream(c, port, inventory)) is not None
            }
            addresses = {a for a, _ in found}
            found |= {(a, t) for a, t in held.get((name, port), set()) if a not in addresses}
            pairs = sorted(found)
            table.append(
                Endpoints(name, port, tuple(a for a, _ in pairs), tuple(t for _, t in pairs))
            )
    return tuple(table)


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
