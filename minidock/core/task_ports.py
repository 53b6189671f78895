"""Which host port a routed task publishes each routed container port on. Pure.

A routed service's task (one with `ingress` routes) is reached by the ingress proxies on
a host port from the ingress's `task_ports` range, bound to its host's private address.
The choice is the lowest port of the range that nothing on the host holds: every
MiniDock task's published ports, anything else's, and the ports given to the tasks started
on that host before it in the same pass: the decision gives each run its ports
(`minidock.core.decide`), host by host in the plan's order.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from minidock.model import Ingress, Observed, Service

__all__ = ["NO_PORTS", "TaskPorts", "choose", "held"]


@dataclass(frozen=True)
class TaskPorts:
    """The host ports given to a task: (address, host port, container port) for each
    routed container port, in order; `refused` says why the range ran out (then `bound`
    holds the ports given before it did, which the host's count keeps all the same)."""

    bound: tuple[tuple[str, int, int], ...] = ()
    refused: str = ""

    @property
    def taken(self) -> tuple[int, ...]:
        return tuple(port for _, port, _ in self.bound)


NO_PORTS = TaskPorts()


def held(observed: Observed) -> dict[str, set[int]]:
    """Host ports held on each answering host: every MiniDock task's and anything else's."""
    found: dict[str, set[int]] = {}
    for name, seen in observed.hosts.items():
        if seen.ok:
            ports = {p for c in (*seen.containers, *seen.others) for p in c.host_ports}
            ports |= seen.ports_in_use
            found[name] = {int(p.partition("/")[0]) for p in ports if p.partition("/")[0].isdigit()}
    return found


def choose(ingress: Ingress | None, service: Service, held: Set[int], reached_at: str) -> TaskPorts:
    """Each routed container port of `service` a host port from the ingress's task range,
    the lowest that neither `held` nor a port given before it holds, bound to
    `reached_at`; none when there is no ingress or the service has no routes."""
    if ingress is None or not service.ingress:
        return TaskPorts()
    first, last = ingress.task_ports
    given: set[int] = set()
    bound: list[tuple[str, int, int]] = []
    for port in service.routed_ports():
        free = next((p for p in range(first, last + 1) if p not in held and p not in given), None)
        if free is None:
            why = f"no free host port left in task_ports {first}-{last}"
            return TaskPorts(tuple(bound), why)
        given.add(free)
        bound.append((reached_at, free, port))
    return TaskPorts(tuple(bound))
