"""Rebalance: opt-in moves that restore spread and bin-packing after hosts rejoin or join.
Pure.

A task is worth moving when the scheduler, placing it afresh on the fleet as it is now,
would choose another host that scores strictly better than the one it runs on (fewer of
its service there, then in its spread value, then fuller: `scheduler.score` without the
name). Moves are planned one after the other on the same simulated fleet, so a second
move already sees the first. They never run by themselves: `minidock rebalance` records
them, and the passes carry them out one at a time, start-first and health-gated (the old
task stops only once its replacement is ready), so a service never dips below its
replicas. Pinned and global services never move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from minidock.core.scheduler import Fleet, counted_as, place, score, spread_counts
from minidock.core.state import ControllerState, ServiceState
from minidock.core.supervise import ready
from minidock.model import Container, Event, Inventory, Observed

__all__ = ["Move", "moves", "record"]


@dataclass(frozen=True)
class Move:
    service: str
    slot: int
    task: str
    source: str  # the host it runs on
    target: str  # the host the scheduler would choose now
    why: str


def moves(
    state: ControllerState, inventory: Inventory, observed: Observed, service: str = ""
) -> tuple[Move, ...]:
    """The moves that would restore spread and packing, in the order they would run. Other
    clusters' tasks fill their hosts, but only this cluster's count toward its spread."""
    live = [counted_as(c, state.cluster) for c in observed.load() if c.live]
    eligible = {h: state.host(h).why_not_eligible() for h in (h.name for h in inventory.hosts)}
    fleet = Fleet.build(inventory.hosts, eligible, live)
    found: list[Move] = []
    for name, ss in sorted(state.services.items()):
        if (service and name != service) or not _movable(ss):
            continue
        mine = [c for c in live if c.cluster == state.cluster and c.service == name and ready(c)]
        found += _service_moves(ss, mine, fleet)
    return tuple(found)


def _movable(ss: ServiceState) -> bool:
    s = ss.spec
    return s.desired == "running" and s.mode == "replicated" and not s.pinned


def _service_moves(ss: ServiceState, tasks: Sequence[Container], fleet: Fleet) -> list[Move]:
    found = []
    hosts = {h.name: h for h in fleet.hosts}
    for c in sorted(tasks, key=lambda c: c.slot):
        if c.slot not in ss.slot_numbers() or c.host not in fleet.load:
            continue
        fleet.free(c)  # as if it were not there: where would the scheduler put it now?
        where = place(ss.spec, fleet)
        if where.host is not None:
            fleet.unreserve(where.host, ss.spec)
        target = where.host if where.host is not None else c.host
        spread = spread_counts(ss.spec, fleet)
        better = target != c.host and (
            score(hosts[target], ss.spec, fleet, spread)[:3]
            < score(hosts[c.host], ss.spec, fleet, spread)[:3]
        )
        fleet.reserve(target if better else c.host, ss.spec)
        if better:
            what = f"over {ss.spec.spread}" if ss.spec.spread else "and packing"
            why = f"rebalance {ss.spec.name} (spread {what}): {c.host} -> {target}"
            found.append(Move(ss.spec.name, c.slot, c.task, c.host, target, why))
    return found


def record(
    state: ControllerState, planned: Sequence[Move], now: float
) -> tuple[ControllerState, list[Event]]:
    """`minidock rebalance`: remember the moves for the passes to carry out."""
    services = dict(state.services)
    events = []
    for m in planned:
        ss = services[m.service]
        services[m.service] = replace(ss, rebalance=(*ss.rebalance, (m.slot, m.source)))
        line = f"{m.service}.{m.slot}: {m.why}"
        events.append(Event(now, "rebalance", line, m.service, m.slot, m.source))
    return replace(state, services=services), events
