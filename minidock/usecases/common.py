"""What several use cases share: an operator's word recorded and converged in its clusters
(drain, move, backup, restore...), the cluster a word about a host, a service or a task acts
in, the names it refers to checked against what is known, and the hosts a fleet-wide command
(push, check, prepare) reaches. Public here so that no use case imports another's private
helpers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from minidock.core import ControllerState
from minidock.model import Event, Host, Inventory
from minidock.spec import SpecError, load_inventory
from minidock.store import StateLocation
from minidock.usecases.access import (
    Desired,
    Writer,
    admissible,
    read_desired,
    reading,
    require_applied,
    writing,
)
from minidock.usecases.clusters import Held, chosen, each_intent, knowing_host, one, tagged
from minidock.usecases.clusters import one as one_cluster
from minidock.usecases.outcomes import (
    BadInput,
    IntentOutcome,
    IntentRecorded,
    Report,
    labelled,
    unknown,
)
from minidock.usecases.passes import converge_passes
from minidock.usecases.runtime import Runtime

__all__ = [
    "Change",
    "Check",
    "Forgets",
    "chosen_hosts",
    "cluster_of",
    "fleet_inventory",
    "known_host",
    "known_service",
    "of_host",
    "of_service",
    "record_intent",
]

Change = Callable[[ControllerState, Desired], ControllerState]  # may raise BadInput
Forgets = Callable[[ControllerState, Desired], tuple[ControllerState, list[Event]]]
Check = Callable[[ControllerState, Desired], Awaitable[None]]  # may raise BadInput


async def record_intent(
    targets: list[Held],
    runtime: Runtime,
    report: Report,
    change: Change | Forgets,
    message: str | Callable[[], str],
    *,
    wait: bool,
    timeout: float,
    check: Check | None = None,
) -> IntentOutcome:
    """Record the operator's `change` in each target cluster and converge it there; `check`
    (when given) looks at the world first, under the lock, and may refuse. `message` may be
    written by the check (a callable, called after it)."""

    async def one_cluster(h: Held) -> IntentOutcome:
        require_applied(h.location)
        shown = labelled(report, tagged(h, len(targets)))
        async with writing(h.location, runtime.clock, Writer.OPERATOR, runtime.notice) as store:
            desired = read_desired(store, h.location)
            if check is not None:
                await check(store.load(), desired)
            said = message() if callable(message) else message
            changed = change(store.load(), desired)
            changed, events = changed if isinstance(changed, tuple) else (changed, [])
            desired = admissible(changed, desired)  # e.g. a drain lets an unlisted host go
            store.commit(changed, [Event(runtime.clock.now(), "intent", said), *events])
            shown(IntentRecorded(said))
            convergence = await converge_passes(
                store, desired, runtime, shown, wait=wait, timeout=timeout
            )
        return IntentOutcome(said, convergence)

    return await each_intent(targets, one_cluster)


def of_host(directory: StateLocation, cluster: str | None, host: str) -> list[Held]:
    """The clusters an intent about HOST acts in: every one that knows it."""
    require_applied(directory)
    return knowing_host(directory, cluster, host)


def of_service(directory: StateLocation, cluster: str | None, service: str) -> list[Held]:
    """The one cluster an intent about SERVICE acts in."""
    require_applied(directory)
    return [Held("", one(directory, cluster, service))]


def known_host(inventory: Inventory, host: str, state: ControllerState) -> None:
    """A host of the inventory, or one it no longer lists that the state still knows."""
    if inventory.host(host) is None and state.host(host).last_known is None:
        raise unknown("host", host, [h.name for h in inventory.hosts], where=str(inventory.path))


def known_service(state: ControllerState, service: str) -> None:
    if service not in state.services:
        raise unknown("service", service, list(state.services))


def cluster_of(directory: StateLocation, cluster: str | None, target: str) -> StateLocation:
    """The cluster of SERVICE or SERVICE.SLOT (a known service name wins)."""
    try:
        return one_cluster(directory, cluster, target)
    except BadInput:
        service, dot, slot = target.rpartition(".")
        if not (dot and slot.isdigit()):
            raise
        return one_cluster(directory, cluster, service)


def fleet_inventory(directory: StateLocation, inventory: Path | None) -> Inventory:
    if inventory is not None:
        try:
            return load_inventory(inventory)
        except SpecError as exc:
            raise BadInput(str(exc)) from None
    require_applied(directory)
    hosts: dict[str, Host] = {}
    paths = []
    for h in chosen(directory, None):  # every cluster's hosts, a host named twice once
        with reading(h.location) as store:
            found = read_desired(store, h.location).inventory
        paths.append(found.path)
        hosts.update((host.name, host) for host in found.hosts if host.name not in hosts)
    return Inventory(", ".join(dict.fromkeys(paths)), tuple(hosts.values()))


def chosen_hosts(inventory: Inventory, names: Sequence[str] | None) -> list[Host]:
    if not names:
        return list(inventory.hosts)
    chosen: list[Host] = []
    for name in names:
        host = inventory.host(name)
        if host is None:
            known = [h.name for h in inventory.hosts]
            raise unknown("host", name, known, where=str(inventory.path))
        chosen.append(host)
    return chosen
