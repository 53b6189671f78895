"""Hosts that leave the inventory: never with tasks nobody moved. Pure.

A host the state says carries tasks (seen there at its last answer, or assigned there)
may leave the inventory only once drained: its tasks move off it first, as in a drain,
reaching it by the connection details the state kept (`HostState.last_known`); once empty
it is dropped. A host not drained is refused (Swarm's `node rm`, Nomad's drain first), and
`minidock forget HOST` writes off the tasks of one that is gone for good.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from minidock.core.state import ControllerState
from minidock.model import Host, Inventory

__all__ = ["Departure", "departures", "effective_inventory", "refusal"]


@dataclass(frozen=True)
class Departure:
    host: str
    tasks: tuple[str, ...]  # "service.slot (task)", what it still carries
    drained: bool
    last_known: Host | None


def departures(state: ControllerState, inventory: Inventory) -> tuple[Departure, ...]:
    """Hosts in the state, no longer in the inventory, that still carry tasks."""
    listed = {h.name for h in inventory.hosts}
    found = []
    for name, hs in sorted(state.hosts.items()):
        if name in listed:
            continue
        carried = {f"{t.service}.{t.slot} ({t.task})" for t in hs.tasks}
        carried |= {
            f"{svc}.{n} ({slot.task})"
            for svc, ss in state.services.items()
            for n, slot in ss.slots.items()
            if slot.host == name and slot.task and n in ss.slot_numbers()
        }
        if carried:
            found.append(Departure(name, tuple(sorted(carried)), hs.drained, hs.last_known))
    return tuple(found)


def refusal(state: ControllerState, inventory: Inventory) -> str:
    """Why this inventory cannot be used with this state ("" when it can): a host it no
    longer lists still carries tasks and was not drained."""
    refused = [d for d in departures(state, inventory) if not (d.drained and d.last_known)]
    if not refused:
        return ""
    d = refused[0]
    more = f" (and {len(refused) - 1} more hosts)" if len(refused) > 1 else ""
    return (
        f"{inventory.path} no longer lists host {d.host}, which carries {', '.join(d.tasks)}"
        f"{more}: list it again and run `minidock drain {d.host}`, then remove it; or, if "
        f"the machine is gone for good, `minidock forget {d.host}`"
    )


def effective_inventory(state: ControllerState, inventory: Inventory) -> Inventory:
    """The inventory a pass works on: the listed hosts, plus drained departing hosts that
    still carry tasks (by their last known details), so their tasks move off them."""
    leaving = [
        d.last_known for d in departures(state, inventory) if d.drained and d.last_known is not None
    ]
    if not leaving:
        return inventory
    return replace(inventory, hosts=(*inventory.hosts, *leaving))
