"""Whole-change plans and what-ifs: the passes a change will take, simulated. Pure.

`simulate` runs `reconcile` pass after pass on a simulated fleet, starting from what the
hosts run now: every `run` becomes a task that is running and healthy at once, every
`stop` takes its task away, and the clock moves on far enough for each health gate and
update delay. That is the one assumption, and the plan says so: every new task becomes
healthy (and each `before_update` hook to run succeeds, the plan saying first that it
will run). The result is every step until convergence (or until nothing moves any more),
so an operator sees the whole road: placements, rolling-update batches, stops, and what
stays pending and why. A what-if is the same simulation from a changed start: hosts lost
(`lose`) or drained (`drain`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from minidock.core.hooks import assumed_succeeded
from minidock.core.hosts import probe_step
from minidock.core.intents import set_drained
from minidock.core.plan import Pending, Plan, Run, Stop, WaitKind
from minidock.core.reconcile import reconcile
from minidock.core.scheduler import service_ports
from minidock.core.state import ControllerState
from minidock.model import Cluster, Container, HostObservation, Inventory, Observed, Service

__all__ = ["FieldChange", "Simulation", "Step", "simulate", "spec_diff"]

MAX_PASSES = 200


@dataclass(frozen=True)
class Step:
    """One simulated pass that acts: its runs and stops (a rolling update's batch)."""

    number: int  # 1 = the pass `apply` would run now
    run: tuple[Run, ...]
    stop: tuple[Stop, ...]


@dataclass(frozen=True)
class Simulation:
    steps: tuple[Step, ...]
    pending: tuple[Pending, ...]  # what the last pass could not place, and why
    converged: bool  # the road ends converged (else: it stops with work it cannot do)
    below: tuple[tuple[str, int, int], ...]  # (service, tasks that would run, wanted)
    final: Plan  # the last pass


@dataclass(frozen=True)
class FieldChange:
    """One changed setting of a service; env and secret changes name keys, never values."""

    field: str
    old: str
    new: str


def simulate(
    desired: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    lose: Iterable[str] = (),
    drain: Iterable[str] = (),
) -> Simulation:
    """Every pass until convergence, each new task assumed healthy at once."""
    lost = set(lose)
    for host in drain:
        state = set_drained(state, host, True)
    state = _lost(state, lost, now)
    tasks = {
        name: list(o.containers) if o.ok and name not in lost else []
        for name, o in observed.hosts.items()
    }
    steps: list[Step] = []
    plan = Plan(state)
    for number in range(1, MAX_PASSES + 1):
        seen = _observation(observed, tasks, lost)
        plan = reconcile(desired, inventory, seen, state, now)
        if plan.run or plan.stop:
            steps.append(Step(number, plan.run, plan.stop))
        elif not plan.waiting or _operators(plan):
            break  # converged, or only pending or the operator's: no pass changes it
        tasks = _acted(tasks, plan, desired.name, now)
        state, now = assumed_succeeded(plan.state), now + _pause(desired)
    return Simulation(
        tuple(steps), plan.pending, plan.converged, _below(plan.state, tasks, desired), plan
    )


def _operators(plan: Plan) -> bool:
    """Whether all the pass waits for that moves nothing is the operator's word (a canary
    that waits for `minidock promote`): no later pass would change anything."""
    return any(w.kind is WaitKind.PROMOTE for w in plan.waiting) and not any(
        w.kind.moves for w in plan.waiting
    )


def _lost(state: ControllerState, lost: set[str], now: float) -> ControllerState:
    """The lost hosts as down already (a what-if skips the `down_after` passes), through
    the host machine: a failed probe with nothing left of `down_after`."""
    hosts = dict(state.hosts)
    for h in lost:
        hosts[h], _ = probe_step(
            h, state.host(h), answered=None, error="lost (what-if)", down_after=1, now=now
        )
    return replace(state, hosts=hosts)


def _observation(observed: Observed, tasks: dict[str, list[Container]], lost: set[str]) -> Observed:
    return Observed(
        {
            name: HostObservation(name, False, error="lost (what-if)")
            if name in lost or not o.ok
            else replace(o, containers=tuple(tasks.get(name, ())))
            for name, o in observed.hosts.items()
        }
    )


def _acted(
    tasks: dict[str, list[Container]], plan: Plan, cluster: str, now: float
) -> dict[str, list[Container]]:
    """The fleet after the plan's acts, every new task running and healthy."""
    gone = {s.container.id for s in plan.stop} | {r.replaces.id for r in plan.run if r.replaces}
    after = {h: [c for c in cs if c.id not in gone] for h, cs in tasks.items()}
    for r in plan.run:
        after.setdefault(r.host, []).append(_started(r, cluster, now))
    return after


def _started(r: Run, cluster: str, now: float) -> Container:
    s = r.service
    return Container(
        id=f"sim-{r.task}",
        name=r.name,
        host=r.host,
        cluster=cluster,
        service=s.name,
        slot=r.slot,
        task=r.task,
        spec=s.spec_hash(),
        image=s.image,
        state="running",
        health="none" if s.health is None else "healthy",
        created_at=now,
        started_at=now,
        cpus=s.cpus,
        memory=s.memory,
        host_ports=service_ports(s),
    )


def _pause(cluster: Cluster) -> float:
    """Simulated time between passes: past any health gate and update delay at once."""
    longest = [s.update.monitor + s.update.delay for s in cluster.services]
    longest += [s.health.deadline() for s in cluster.services if s.health]
    longest += [s.restart.max_delay for s in cluster.services]
    return max([1.0, *longest]) + 1.0


def _below(
    state: ControllerState, tasks: dict[str, list[Container]], cluster: Cluster
) -> tuple[tuple[str, int, int], ...]:
    """Services that would run fewer tasks than they want, at the end of the road."""
    found = []
    for name, ss in state.services.items():
        if ss.spec.desired != "running":
            continue
        slots = {c.slot for cs in tasks.values() for c in cs if c.service == name and c.live}
        wanted = ss.wanted()
        if len(slots & set(ss.slot_numbers())) < wanted:
            found.append((name, len(slots), wanted))
    return tuple(found)


# the diff of a service whose secrets are the same but digested under another key (an
# older MiniDock's unkeyed digest, or a lost state's key): its tasks roll once
_REKEYED = "re-keyed (the tasks' labels were made without this state's key)"


def spec_diff(old: Service | None, new: Service | None) -> tuple[FieldChange, ...]:
    """What changed in a service, field by field (a new service: every set field; a removed
    one: nothing). Env and secret values, secret files and config contents are never shown,
    only which keys (paths in the task) changed."""
    if old is None or new is None:
        return ()
    changes: list[FieldChange] = []
    for f in dataclasses.fields(Service):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after:
            continue
        if f.name == "secret_digest":  # never shown; alone, the values are the same
            if not any(c.field in ("env", "secrets", "secret_files") for c in changes):
                changes.append(FieldChange("secrets", "(same values)", _REKEYED))
            continue
        if f.name in ("env", "secrets"):
            changes.append(FieldChange(f.name, *_keys_changed(before, after)))
        elif f.name == "configs":  # by path in the task: a content is too long to show
            digests = [[(c.target, c.digest) for c in side] for side in (before, after)]
            changes.append(FieldChange(f.name, *_keys_changed(*digests)))
        elif f.name == "secret_files":  # by path in the task: a secret is never shown
            digests = [[(c.target, c.digest()) for c in side] for side in (before, after)]
            changes.append(FieldChange(f.name, *_keys_changed(*digests)))
        else:
            changes.append(FieldChange(f.name, _shown(before), _shown(after)))
    return tuple(changes)


def _keys_changed(
    before: Sequence[tuple[str, str]], after: Sequence[tuple[str, str]]
) -> tuple[str, str]:
    old, new = dict(before), dict(after)
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    parts = [f"+{k}" for k in added] + [f"-{k}" for k in removed] + [f"~{k}" for k in changed]
    return ", ".join(sorted(old)) or "(none)", " ".join(parts)


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ", ".join(  # a field kept out of repr (a registry password) is never shown
            f"{f.name}={_shown(getattr(value, f.name)) if f.repr else '***'}"
            for f in dataclasses.fields(value)
            if f.metadata.get("shown") != "when-set" or getattr(value, f.name) != f.default
        )
    return "none" if value is None else str(value)
