"""A canary, as Nomad's `update { canary, auto_promote }` and kamal-proxy's rollout
percentage: what the rollout machine (core/rollout.py, its CANARY phase) and the route
table (core/routes.py) ask of one. Pure.

An update whose policy has `canary = N` first starts N tasks of the new spec beside the
old ones (start-first, in the lowest outdated slots; nothing is stopped), each judged by
the health gate for `canary_monitor`. Meanwhile each of the service's routes sends
`canary_weight` percent of its requests to the new spec's tasks (the old ones share the
rest; without `canary_weight` each canary task is one more upstream). Once every canary
passed, `promote = "auto"` promotes it; `"manual"` waits for `minidock promote SERVICE`,
which promotes as soon as every canary is ready (through `update.monitor`). Promoted, the
canaries' slots are done, their old tasks drain and stop, and the rolling update goes on
with the other slots. A canary that fails, or `minidock rollback SERVICE`, rolls back: the
canary tasks are stopped and every slot is its old task's again. docs/rollouts.md#canary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from minidock.core.state import ServiceState
from minidock.model import Service

__all__ = [
    "SHARE_TOLERANCE",
    "count",
    "due",
    "judged",
    "running_spec",
    "share",
    "weights",
]

SHARE_TOLERANCE = 0.5  # percentage points the weights may miss `canary_weight` by


def count(ss: ServiceState) -> int:
    """How many canary tasks the service's update starts: `canary`, at most every slot."""
    return min(ss.spec.update.canary, ss.wanted())


def due(ss: ServiceState) -> bool:
    """Whether a canary that passed is promoted now: `promote = "auto"`, or the operator's
    `minidock promote`."""
    return ss.spec.update.promote == "auto" or ss.rollout.promoted


def judged(ss: ServiceState) -> Service:
    """The spec a canary task's health gate judges by: the service's, monitored for
    `canary_monitor`; once the operator promoted, for `update.monitor` only."""
    policy = ss.spec.update
    monitor = policy.monitor if ss.rollout.promoted else policy.canary_monitor
    return replace(ss.spec, update=replace(policy, monitor=monitor))


def running_spec(ss: ServiceState | None) -> str:
    """The spec hash the canary's tasks run while the service is in its canary ("" else)."""
    if ss is None or not ss.rollout.in_canary:
        return ""
    return ss.spec.spec_hash()


def share(percent: int, canaries: int, others: int) -> tuple[int, int]:
    """Each canary upstream's and each other upstream's weight, the smallest whole numbers
    that give the canaries `percent` of the requests within SHARE_TOLERANCE points."""
    if not (percent and canaries and others):
        return 1, 1
    exact = percent * others / ((100 - percent) * canaries)  # canary weight / other weight
    for other in range(1, 100 * canaries + 1):
        weight = round(other * exact)
        if weight >= 1 and abs(_percent(weight, other, canaries, others) - percent) <= (
            SHARE_TOLERANCE
        ):
            return weight, other
    return percent * others, (100 - percent) * canaries  # exact (never reached: other = 100n)


def _percent(weight: int, other: int, canaries: int, others: int) -> float:
    return 100.0 * weight * canaries / (weight * canaries + other * others)


def weights(percent: int, canary: Sequence[bool]) -> tuple[int, ...]:
    """The weight of each upstream (`canary`: whether it is a canary task's), so that the
    canaries get `percent` of the requests; () when all weigh the same."""
    canaries = sum(canary)
    weight, other = share(percent, canaries, len(canary) - canaries)
    if weight == other:
        return ()
    return tuple(weight if c else other for c in canary)
