"""Read-only use cases: `status` (observed now, recording nothing) and the event log. They
take no lock, so they answer while `watch` or another writer works."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import replace

from minidock.core import ControllerState, Plan
from minidock.documents.status import StatusDocument, status_document
from minidock.model import Event
from minidock.runner import PassResult, decide_pass
from minidock.store import StateLocation
from minidock.usecases.access import Desired, read_desired, reading, require_applied
from minidock.usecases.clusters import Held, chosen
from minidock.usecases.outcomes import EventFilter, EventsOutcome, StatusOutcome, unknown
from minidock.usecases.runtime import Runtime, connected
from minidock.usecases.shares import host_owners, owner_name

EVERY = EventFilter()  # no filter: every event


async def status(
    directory: StateLocation, runtime: Runtime, *, cluster: str | None = None
) -> StatusOutcome:
    """Services, tasks and hosts of every cluster the store holds (or of `cluster`): the
    stored state, a fresh observation and the plan a pass would make of it (pending
    reasons, what it waits for), secrets masked."""
    require_applied(directory)
    documents = [await _status(h.location, runtime) for h in chosen(directory, cluster)]
    owners = host_owners(directory)  # the owner keys are the root state's
    return StatusOutcome(tuple(owned_by(doc, owners) for doc in documents))


def owned_by(doc: StatusDocument, owners: Mapping[str, str]) -> StatusDocument:
    """`doc` with each host's controller: whose owner key holds it (docs/scale.md)."""
    if not owners:
        return doc
    hosts = tuple(
        replace(h, controller=owners.get(owner_name(doc.cluster, h.name), "")) for h in doc.hosts
    )
    return replace(doc, hosts=hosts)


async def _status(location: StateLocation, runtime: Runtime) -> StatusDocument:
    require_applied(location)
    with reading(location) as store:
        current = store.load()
        desired = read_desired(store, location)
        async with connected(runtime) as executor:
            result = await decide_pass(
                desired.cluster, desired.inventory, current, executor, clock=runtime.clock.now
            )
        plan = runtime.masks.of(store, result.plan.state, result.observed).plan(result.plan)
    return status_of(current, desired, result, plan)


def status_of(
    current: ControllerState, desired: Desired, result: PassResult, plan: Plan
) -> StatusDocument:
    """The status document of a pass decided from `current` (`plan`: its plan, masked):
    the route table it decided, the ingress config it rendered (`result.rendered`), its
    certificates' renewal as the cluster's ACME settings say. `status` and `serve` both."""
    ingress = desired.cluster.ingress
    acme = ingress.acme if ingress is not None else None
    renew = acme.renew_before if acme is not None else None
    digest, observed = result.rendered.digest, result.observed  # the pass's render
    return status_document(current, desired.inventory, observed, plan, plan.routes, digest, renew)


def events(
    directory: StateLocation,
    *,
    limit: int = 50,
    where: EventFilter = EVERY,
    cluster: str | None = None,
) -> EventsOutcome:
    """The newest `limit` events that `where` keeps, oldest first (0: all of them), of
    every cluster the store holds (or of `cluster`), each named by its cluster. A filter
    on a service or host that neither the state nor any event names is `BadInput`."""
    require_applied(directory)
    logs: list[list[tuple[int, Event]]] = []
    targets = chosen(directory, cluster)
    services: set[str] = set()
    hosts: set[str] = set()
    for h in targets:
        with reading(h.location) as store:
            logged = store.events(limit=0)
            state = store.load()
        logs.append([(i, replace(e, cluster=h.name)) for i, e in logged if where.keeps(e)])
        services |= {*state.services, *(e.service for _, e in logged if e.service)}
        hosts |= {*state.hosts, *(e.host for _, e in logged if e.host)}
    if where.service and where.service not in services:
        raise unknown("service", where.service, sorted(services))
    if where.host and where.host not in hosts:
        raise unknown("host", where.host, sorted(hosts))
    # interleaved by time; each log's own order is kept
    found = list(heapq.merge(*logs, key=lambda pair: pair[1].at))
    shown = found[-limit:] if limit > 0 else found
    events_shown = tuple(e for _, e in shown)
    return EventsOutcome(events_shown, ids=tuple(i for i, _ in shown), several=len(targets) > 1)


async def follow_events(
    directory: StateLocation,
    runtime: Runtime,
    seen: Callable[[int, Event], None],
    *,
    after: int | None = None,
    where: EventFilter = EVERY,
    interval: float = 1.0,
    cluster: str | None = None,
) -> None:
    """`events --follow`: every new event `where` keeps, as it is committed, until
    cancelled (Ctrl-C), of every cluster (or of `cluster`), a cluster applied meanwhile
    included. `after` is the id already seen of a store with one cluster; else each log
    is followed from its end. Reads only: no lock, so it runs beside `watch` or cron."""
    require_applied(directory)
    first = chosen(directory, cluster)
    last = {first[0].name: after} if after is not None and len(first) == 1 else {}
    while True:
        for h in chosen(directory, cluster):
            if h.name not in last:
                last[h.name] = _last_id(h)
            with reading(h.location) as store:
                new = store.events(limit=0, since_id=last[h.name])
            for i, e in new:
                last[h.name] = i
                if where.keeps(e):
                    seen(i, replace(e, cluster=h.name))
        await runtime.clock.sleep(interval)


def _last_id(h: Held) -> int:
    with reading(h.location) as store:
        newest = store.events(limit=1)
    return newest[-1][0] if newest else 0
