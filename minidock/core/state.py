"""What the controller decided and keeps in its store: the durable side of every machine.

`ControllerState` is the one value a pass reads and returns. It holds, per service, the
effective spec (after any rollback), the previous one, the rollout and every slot's record;
per host, its phase, availability and last probe. Pure values, no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minidock.core.hooks import HookRecord
from minidock.core.hosts import HostState
from minidock.core.passes import PassStats
from minidock.core.rollout import Rollout
from minidock.core.schedule import JobRecord
from minidock.core.slots import SlotState
from minidock.core.tls import TlsState
from minidock.model import Service

__all__ = ["ControllerState", "ServiceState"]


_EMPTY_SLOT = SlotState()


@dataclass(frozen=True)
class ServiceState:
    """The effective spec of a service (after any rollback) and its bookkeeping."""

    spec: Service
    generation: int
    previous: Service | None = None
    previous_generation: int | None = None
    rollout: Rollout = field(default_factory=Rollout)
    slots: dict[int, SlotState] = field(default_factory=dict)
    removed: bool = False  # pruned from the spec: stopped (dependents first), then dropped
    global_slots: dict[str, int] = field(default_factory=dict)  # mode "global": host -> slot
    rebalance: tuple[tuple[int, str], ...] = ()  # (slot, host to move it off), one at a time
    previous_failed: str = ""  # why `previous` was rolled back as failed ("" if it was not)
    job: JobRecord = field(default_factory=JobRecord)  # a scheduled job's runs (core/schedule.py)
    hook: HookRecord = field(default_factory=HookRecord)  # its before_update hook (core/hooks.py)

    def slot(self, n: int) -> SlotState:
        found = self.slots.get(n)
        return _EMPTY_SLOT if found is None else found

    def slot_numbers(self) -> tuple[int, ...]:
        """The slots the service wants filled: 1..replicas, or a global service's one per
        eligible host."""
        if self.spec.mode == "global":
            return tuple(sorted(self.global_slots.values()))
        return tuple(range(1, self.spec.replicas + 1))

    def wanted(self) -> int:
        return len(self.slot_numbers())

    def host_of(self, slot: int) -> str:
        """A global service's slot's host ("" for a replicated service)."""
        return next((h for h, n in self.global_slots.items() if n == slot), "")


@dataclass(frozen=True)
class ControllerState:
    cluster: str = ""
    generation: int = 0
    order: tuple[str, ...] = ()  # service names in the order of the applied file
    services: dict[str, ServiceState] = field(default_factory=dict)
    hosts: dict[str, HostState] = field(default_factory=dict)
    guard: str = ""  # the mass-loss guard's line while it holds the passes, else ""
    controller: str = ""  # this store's controller id, on the label of every task it starts
    adopted: tuple[str, ...] = ()  # other controllers' ids whose tasks `apply --adopt` took
    adopting: bool = False  # a brand-new store's first apply: what runs is adopted
    rebuilt: str = ""  # set when that first pass found tasks already running: what is lost
    # routed tasks taken out of every route before they stop: task id -> since when
    # (minidock.core.traffic)
    draining: dict[str, float] = field(default_factory=dict)
    passes: PassStats = field(default_factory=PassStats)  # every pass so far, for metrics
    tls: TlsState = field(default_factory=TlsState)  # ACME account and certificates

    def host(self, name: str) -> HostState:
        return self.hosts.get(name, HostState())

    def owns(self, controller: str) -> bool:
        """Whether a task labelled with `controller` is this store's to manage: its own,
        an adopted controller's, or unlabelled (started before tasks carried the label)."""
        return not (controller and self.controller) or controller in (
            self.controller,
            *self.adopted,
        )
