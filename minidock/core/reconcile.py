"""The reconcile pass: (desired, observed, state, now) -> Plan. Pure: no I/O, no clock.

Level-based, like controller-runtime and Nomad's reconciler: every pass reads the whole
observed state, diffs it against the effective specs in the controller state and returns
what to do, named by verb (`run`, `stop`), plus the next controller state. Running it again
on the converged result returns an empty plan.

The pass is a short fold:
1. every host's probe goes through the host machine (`hosts.probe_step`);
2. every service, in the applied order, decides each of its slots (`_decide_service`):
   stops at once, and *wants* (a task to place) as typed values;
3. the wants are placed in priority order: due restarts, new tasks, drain moves
   (`_place_wants`), then rolling updates take what room is left (`rollout.advance`).

The rollout machine is whole in `rollout.py` (its gate, its advance, its failure action);
the values every part shares (`View`, `Effects`) are in `fold.py`.
"""

from __future__ import annotations

import enum
import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from minidock.core import failover, hooks, moving, rollout, saving, slots
from minidock.core import hosts as host_machine
from minidock.core.evolve import evolve
from minidock.core.fold import (
    Effects,
    View,
    avoided,
    deps_block,
    set_slot,
    with_slot,
    with_slots,
)
from minidock.core.hosts import HostState, SeenTask
from minidock.core.plan import Pending, Plan, Run, Stop, Waiting, WaitKind
from minidock.core.rollout import Outdated, slot_target
from minidock.core.scheduler import Fleet, counted_as, over_capacity, place
from minidock.core.state import ControllerState, ServiceState
from minidock.core.supervise import carried, exit_line, ready, still_starting
from minidock.core.traffic import Traffic
from minidock.model import Cluster, Container, Event, Inventory, Observed, Service

__all__ = ["reconcile"]


# -- values the fold passes along -------------------------------------------------------------
class WantKind(enum.IntEnum):
    """Why a slot wants a task placed; the value is its placement priority."""

    RESTART = 0  # lost capacity comes back first
    NEW = 1
    MOVE = 2  # off a drained host, start-first
    FAILOVER = 3  # a down host's pinned slot restored elsewhere (core/failover.py)


@dataclass(frozen=True)
class Want:
    kind: WantKind
    service: str
    slot: int
    target: Service
    old: Container | None = None  # MOVE: the task that stays until its replacement is ready
    why: str = ""
    only: str = ""  # the one host it may go to (pinned by its volume, or a global task's)
    failover: failover.Due | None = None  # FAILOVER: what it restores, off which host
    rebalance: bool = False  # MOVE: `minidock rebalance`'s, off `old`'s host
    after: float = 0.0  # the rest of its restart backoff, its start held for it (Run.after)


class SlotDecision(NamedTuple):
    """What deciding one slot gives: the service state after it, its effects, and at most
    one of a task to place or move (`want`) and its task, outdated, for the rollout to
    replace (`outdated`). A named tuple: as cheap as the bare tuple it replaced."""

    state: ServiceState
    effects: Effects = Effects()
    want: Want | None = None
    outdated: Container | None = None


class RolloutWork(NamedTuple):
    """A decided service's part for the rollout step, after placement: its slots whose
    task is outdated, and whether every slot already runs a ready task of the target."""

    service: str
    outdated: tuple[Outdated, ...]
    complete: bool


@dataclass(frozen=True)
class ServiceDecision:
    state: ServiceState
    effects: Effects = field(default_factory=Effects)
    wants: tuple[Want, ...] = ()
    outdated: tuple[Outdated, ...] = ()
    complete: bool = False  # every slot runs a ready task of the target spec


def _published(others: Sequence[Container]) -> frozenset[str]:
    """The host ports other clusters' live tasks publish: MiniDock's, not foreign."""
    return frozenset(p for c in others if c.live for p in c.host_ports)


# -- the pass ---------------------------------------------------------------------------------
def reconcile(
    desired: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    force_down: bool = False,
    traffic: Traffic | None = None,
) -> Plan:
    """One decision: what to run and stop so the observed fleet matches the desired state.
    `traffic` (what the proxies hold) lets a rolling update drain a task out of every route
    before it replaces it stop-first (`minidock.core.decide` hands it over; without it, as
    in `plan`'s simulation, nothing drains).

    When the mass-loss guard holds (too many hosts failed this pass's probes, and not
    `force_down`), only the probes are recorded: no host goes down, nothing is decided."""
    guard, guard_fx = _guard(inventory, observed, state, now, forced=force_down)
    hosts, fx = _probe_hosts(inventory, observed, state, now, guard_holds=bool(guard))
    fx = fx + guard_fx
    if guard:
        held = replace(state, hosts=hosts, guard=guard)
        return Plan(state=held, waiting=fx.waiting, events=fx.events, guard=guard)
    view = _view(desired, inventory, observed, hosts, now, state, traffic)
    services, decided, wants, updates = _decide_services(view, state)
    fx = fx + decided
    fleet = None  # the scheduler's fleet, built only when something is to be placed
    if wants or any(u.outdated or services[u.service].rollout.inflight for u in updates):
        fleet = _fleet(desired, inventory, observed, hosts, decided.stops)
        services, placed = _place_wants(wants, services, fleet, view)
        fx = fx + placed
    for u in updates:
        ss, advanced = rollout.advance(
            services[u.service], u.outdated, u.complete, services, fleet, view
        )
        services[u.service] = ss
        fx = fx + advanced
    rebuilt, rebuilt_fx = _rebuilt(state, view)
    fx = fx + rebuilt_fx
    return Plan(
        state=replace(
            state,
            hosts=hosts,
            services=services,
            order=tuple(n for n in state.order if n in services),
            guard="",
            adopting=False,
            rebuilt=rebuilt,
        ),
        run=tuple(sorted(fx.runs, key=lambda r: not r.restart)),  # due restarts first
        stop=fx.stops,
        pending=fx.pending,
        waiting=fx.waiting,
        events=fx.events,
        drains=fx.drains,
        moves=moving.acts(services, view),
        backups=saving.acts(services, view),
    )


def _fleet(
    desired: Cluster,
    inventory: Inventory,
    observed: Observed,
    hosts: Mapping[str, HostState],
    stops: Sequence[Stop],
) -> Fleet:
    """Every host's load as this pass leaves it once its stops are done: the live tasks
    (other clusters' too), and the host ports held outside MiniDock. A stopped task's host
    ports stay taken: the traffic gate may hold its stop while it drains (core.traffic),
    and Docker refuses a start on a port a live container holds."""
    live = [counted_as(c, desired.name) for c in observed.load() if c.host in hosts and c.live]
    eligible = {h: hs.why_not_eligible() for h, hs in hosts.items()}
    foreign = {h: o.ports_in_use - _published(o.others) for h, o in observed.hosts.items() if o.ok}
    fleet = Fleet.build(inventory.hosts, eligible, live, foreign)
    for s in stops:
        if s.container.live:
            fleet.free(s.container, keep_ports=True)
    return fleet


def _guard(
    inventory: Inventory, observed: Observed, state: ControllerState, now: float, *, forced: bool
) -> tuple[str, Effects]:
    """The mass-loss guard's line while it holds (else ""), and its events: one when it
    starts to hold, one when it lets go, one each time `--force-down` overrides it."""
    answered = {n for n, o in observed.hosts.items() if o.ok or o.refused}  # refused answered
    failed = sum(1 for h in inventory.hosts if h.name not in answered)
    holds, line = host_machine.mass_loss(
        failed, len(inventory.hosts), inventory.max_down_fraction, forced=forced
    )
    if holds:
        started = () if state.guard else (Event(now, "mass-loss-guard", line),)
        return line, Effects(events=started)
    if line:  # forced
        return "", Effects(events=(Event(now, "mass-loss-guard-overridden", line),))
    if state.guard:
        released = Event(now, "mass-loss-guard-released", "mass-loss guard released")
        return "", Effects(events=(released,))
    return "", Effects()


def _rebuilt(state: ControllerState, view: View) -> tuple[str, Effects]:
    """A brand-new store's first pass that finds this cluster's tasks already running is
    running on rebuilt state (e.g. after state.db was lost): say what it cannot know."""
    found = [c for c in view.mine if c.live] if state.adopting else []
    if not found:
        return state.rebuilt, Effects()
    line = (
        f"running on state rebuilt from {len(found)} running tasks: drains, Failed slots "
        "and rollout progress from before are not known"
    )
    return line, Effects(events=(Event(view.now, "state-rebuilt", line),))


def _probe_hosts(
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    guard_holds: bool,
) -> tuple[dict[str, HostState], Effects]:
    """Every inventory host through the host machine, with this pass's probe."""
    hosts: dict[str, HostState] = {}
    events: list[Event] = []
    waiting: list[Waiting] = []
    for host in inventory.hosts:
        obs = observed.hosts.get(host.name)
        old = state.host(host.name)
        answered = _seen(old.tasks, obs.containers) if obs is not None and obs.ok else None
        error = obs.error if obs is not None else "not probed"
        new, event = host_machine.probe_step(
            host.name,
            old,
            answered=answered,
            error=error,
            down_after=host.down_after,
            now=now,
            guard_holds=guard_holds,
            slow=obs is not None and obs.slow,
            refused=obs is not None and obs.refused,
        )
        new = host_machine.engine_step(evolve(new, last_known=host), obs, now)
        if new.unreachable and obs is not None and obs.refused:
            waiting.append(Waiting(host.name, str(new.last_error), WaitKind.HOST_PROBES))
        elif new.unreachable:
            reason = f"unreachable ({new.failures}/{host.down_after} failed probes)"
            waiting.append(Waiting(host.name, f"{reason}: {new.last_error}", WaitKind.HOST_PROBES))
        events += [event] if event else []
        hosts[host.name] = new
    return hosts, Effects(waiting=tuple(waiting), events=tuple(events))


def _seen(before: tuple[SeenTask, ...], containers: Sequence[Container]) -> tuple[SeenTask, ...]:
    """The live tasks a host answered with, as its record keeps them: the record's own
    tuple when they are the same as last time (the case of almost every host on a pass)."""
    live = [c for c in containers if c.live]
    same = len(live) == len(before) and all(
        t.task == c.task and t.service == c.service and t.slot == c.slot and t.spec == c.spec
        for t, c in zip(before, live, strict=True)
    )
    return before if same else tuple(SeenTask(c.service, c.slot, c.task, c.spec) for c in live)


def _view(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    hosts: Mapping[str, HostState],
    now: float,
    state: ControllerState,
    traffic: Traffic | None = None,
) -> View:
    """The pass's view. "Mine" are this cluster's tasks this store's controller owns, on
    hosts that answered: another controller's tasks are never counted, stopped or moved."""
    unseen: dict[tuple[str, int], list[str]] = {}
    for name, hs in hosts.items():
        if hs.failures:
            for t in hs.tasks:
                unseen.setdefault((t.service, t.slot), []).append(name)
    mine = tuple(
        c
        for c in observed.containers()
        if c.cluster == cluster.name
        and state.owns(c.controller)
        and c.host in hosts
        and hosts[c.host].failures == 0
    )
    held = {k: tuple(v) for k, v in unseen.items()}
    evict: dict[str, str] = {}
    by_host: dict[str, list[Container]] = defaultdict(list)
    for c in mine:
        by_host[c.host].append(c)
    for h in inventory.hosts:
        obs = observed.hosts.get(h.name)
        if obs is not None and obs.ok:
            live = [c for c in obs.containers if c.live]
            here = by_host.get(h.name, ())  # read only when the host is over capacity
            movable = (c for c in here if c.live and not _pinned(state, c))
            evict |= over_capacity(h, live, movable)
    inventory_hosts = {h.name: h for h in inventory.hosts}
    seen = {n: o.seen_at for n, o in observed.hosts.items() if o.seen_at is not None}
    return View(cluster, now, hosts, mine, held, inventory_hosts, evict, traffic, seen)


def _pinned(state: ControllerState, c: Container) -> bool:
    """A task that cannot move to another host: pinned by its volume, or a global task."""
    ss = state.services.get(c.service)
    return ss is not None and (ss.spec.pinned or ss.spec.mode == "global")


# -- services ---------------------------------------------------------------------------------
def _decide_services(
    view: View, state: ControllerState
) -> tuple[dict[str, ServiceState], Effects, list[Want], list[RolloutWork]]:
    """Every service in the applied order; a service no longer in the spec is stopped."""
    services = dict(state.services)
    by_service: dict[str, list[Container]] = defaultdict(list)
    for c in view.mine:
        by_service[c.service].append(c)
    fx = Effects()
    for name, found in sorted(by_service.items()):
        if name not in services:
            reason = f"service {name} is no longer in the spec"
            fx = fx + Effects(stops=tuple(Stop(c, reason) for c in found))
    wants: list[Want] = []
    updates: list[RolloutWork] = []
    for name in state.order or tuple(services):
        if name not in services:
            continue
        found = by_service.get(name, [])
        if services[name].removed and not found and not view.unseen_of(name):
            del services[name]  # pruned, and every task of it is gone
            fx = fx + Effects(events=(Event(view.now, "service-removed", f"removed {name}"),))
            continue
        if services[name].spec.desired == "stopped":
            fx = fx + _stop_service(name, found, services, view)
            continue
        d = _decide_service(services[name], found, services, view)
        services[name] = d.state
        fx = fx + d.effects
        wants += d.wants
        updates.append(RolloutWork(name, d.outdated, d.complete))
    return services, fx, wants, updates


def _stop_service(
    name: str, found: list[Container], services: Mapping[str, ServiceState], view: View
) -> Effects:
    """Desired stopped: remove its tasks, after every stopping dependent is gone."""
    dependents = [
        other
        for other, ss in services.items()
        if name in ss.spec.depends_on and ss.spec.desired == "stopped"
    ]
    blocking = sorted({c.service for c in view.mine if c.service in dependents and c.live})
    if blocking and any(c.live for c in found):
        why = f"waiting for {', '.join(blocking)} to stop"
        return Effects(waiting=(Waiting(name, why, WaitKind.STOPPING, name),))
    pruned = services[name].removed if name in services else False
    reason = f"service {name} was pruned" if pruned else f"service {name} is desired stopped"
    return Effects(
        stops=tuple(Stop(c, reason) for c in sorted(found, key=lambda c: (c.live, c.slot)))
    )


def _decide_service(
    ss: ServiceState, found: list[Container], services: Mapping[str, ServiceState], view: View
) -> ServiceDecision:
    """Scale down, judge the rollout's tasks in flight, then decide every slot in turn (a
    slot's failure may pause or roll back the rollout, changing the next slot's target)."""
    if ss.spec.mode == "global":
        ss = _global_hosts(ss, view)
    wanted = ss.slot_numbers()
    wanted_set = set(wanted)
    spec_before = ss.spec.spec_hash()
    unwanted = [c for c in found if c.slot not in wanted_set]
    ss = _scaled_away(ss, wanted_set, unwanted, view)
    fx = Effects(
        stops=tuple(
            Stop(c, _unwanted(ss, c)) for c in sorted(unwanted, key=lambda c: (c.live, -c.slot))
        )
    )
    ss, gated = rollout.gate(ss, [c for c in found if c.slot in wanted_set], view)
    fx = fx + gated
    wants: list[Want] = []
    outdated: list[Outdated] = []
    by_slot: dict[int, list[Container]] = defaultdict(list)
    for c in found:
        by_slot[c.slot].append(c)
    handled: set[str] = set()
    for n in wanted:
        if len(handled) != len(fx.stops):  # ids stopped so far (a container stops once)
            handled = {s.container.id for s in fx.stops}
        here = by_slot.get(n, [])
        if handled:
            here = [c for c in here if c.id not in handled]
        if _steady(ss, n, here, view):
            continue
        if n in ss.moves:  # a move whose host is lost ends (failed) before anything else
            ss, ended = moving.lost(ss, n, view)
            fx = fx + Effects(events=ended)
        held = moving.hold(ss, n, here, view) if n in ss.moves else None
        if held is None and n in ss.backups.slots:  # stopped for its backup's copy
            held = saving.hold(ss, n, here, view)
        if held is not None:  # its data on its way: its tasks stop, none starts
            ss, fx = held[0], fx + held[1]
            continue
        decided = _decide_slot(ss, n, here, services, view)
        ss, stale = decided.state, decided.outdated
        fx = fx + decided.effects
        if n in ss.moves:
            ss, moved = moving.ready(ss, n, here, view.now)
            fx = fx + Effects(events=moved)
        if n in ss.backups.slots:
            ss, stranded = saving.stranded(ss, n, here, view)
            ss, backed = saving.ready(ss, n, here, view.now)
            fx = fx + Effects(events=stranded + backed)
        wants += [decided.want] if decided.want else []
        if stale is not None and n not in ss.rollout.inflight:
            outdated.append(Outdated(n, stale, view.misplaced(slot_target(ss, n), stale)))
    ss, fx = _intents_after(ss, wanted_set, view, fx)
    handled = {s.container.id for s in fx.stops}
    settled = {c.slot for c in found if c.id not in handled and c.spec == spec_before and ready(c)}
    return ServiceDecision(ss, fx, tuple(wants), tuple(outdated), len(settled) >= len(wanted))


def _intents_after(
    ss: ServiceState, wanted: set[int], view: View, fx: Effects
) -> tuple[ServiceState, Effects]:
    """After the slots: a move or a backup of a slot scaled away ends, and the moves and
    backups still under way say what they wait for."""
    for n in sorted(ss.moves.keys() - wanted):  # nothing else would end it
        ss, ended = moving.unwanted(ss, n, view.now)
        fx = fx + Effects(events=ended)
    for n in sorted(ss.backups.slots.keys() - wanted):  # nor a backup's
        ss, ended = saving.unwanted(ss, n, view.now)
        fx = fx + Effects(events=ended)
    if ss.moves:
        fx = fx + Effects(waiting=moving.waiting(ss, view))
    if ss.backups.busy:
        fx = fx + Effects(waiting=saving.waiting(ss))
    return ss, fx


def _scaled_away(
    ss: ServiceState, wanted: set[int], unwanted: list[Container], view: View
) -> ServiceState:
    """A slot the service no longer wants keeps its record while a task of it remains
    (seen, or held by a host that did not answer: a pinned slot's by its down host too, so
    that scaled up again it waits for its data there rather than start a second copy on an
    empty volume), while a move of it is recorded, or while a restore's half-written volume
    holds it Failed (scaled up again, it starts nothing until `reset` or a restore); else
    the record goes with its last task, but a pinned slot's stays, without a task
    (`slots.scaled_away`): where its data is, or that it waits for a restore."""
    extra = ss.slots.keys() - wanted
    if not extra:
        return ss
    remaining = {c.slot for c in unwanted}
    gone = [
        n
        for n in extra
        if n not in remaining
        and (ss.spec.name, n) not in view.unseen
        and not view.holders(ss, n)
        and not ss.slots[n].half_written
        and n not in ss.moves  # `_intents_after` ends it first (`moving.unwanted`)
    ]
    if not gone:
        return ss
    records = {n: s for n, s in ss.slots.items() if n not in gone}
    if ss.spec.pinned:
        kept = {n: slots.scaled_away(ss.slots[n]) for n in gone if _holds_data(ss.slots[n])}
        if all(ss.slots[n] is s for n, s in kept.items()) and len(kept) == len(gone):
            return ss
        records.update(kept)
    return replace(ss, slots=records)


def _holds_data(record: slots.SlotState) -> bool:
    """Whether a pinned slot's record says where its data is, or how to get it back."""
    return bool(record.host or record.awaiting_restore or record.kept_on or record.backups)


def _unwanted(ss: ServiceState, c: Container) -> str:
    if ss.spec.mode == "global":
        return f"global service {ss.spec.name}: {c.host} is no longer eligible"
    return f"scale down {ss.spec.name} to {ss.replicas()}"


def _global_hosts(ss: ServiceState, view: View) -> ServiceState:
    """A global service's slot per eligible host (listed, not drained, its constraints met):
    a host keeps its slot number while eligible; a new one takes the number of a free slot
    whose task is there (a service made global keeps its tasks where they run), else the
    lowest number no eligible host's record holds. A slot on an eligible host that has
    another number is left unwanted (scaled away: a pinned one keeps its record and data),
    never handed to another host: its task would satisfy that host's slot from the wrong
    host, holding its host's ports, or a pinned slot's data, for ever."""
    eligible = [
        h.name
        for h in view.inventory.values()
        if not view.hosts[h.name].drained and all(k.allows(h) for k in ss.spec.constraints)
    ]
    kept = {h: n for h, n in ss.global_slots.items() if h in eligible}
    taken = set(kept.values())
    found: dict[str, int] = {}
    for n, record in sorted(ss.slots.items()):
        on = record.host
        if on in eligible and on not in kept and on not in found and n not in taken:
            found[on] = n
            taken.add(n)
    held = {n for n, record in ss.slots.items() if record.host in eligible}
    free = (n for n in itertools.count(1) if n not in taken | held)
    slots = {**kept, **found, **{h: next(free) for h in eligible if h not in kept | found}}
    return ss if slots == ss.global_slots else replace(ss, global_slots=slots)


def _decide_slot(
    ss: ServiceState,
    n: int,
    here: list[Container],
    services: Mapping[str, ServiceState],
    view: View,
) -> SlotDecision:
    """One slot: what its tasks did, and whether it wants a task, a move, or an update.
    (A `_steady` slot never gets here: it changes nothing and decides nothing.)"""
    live = [c for c in here if c.live and c.state != "created"]
    dead = [c for c in here if not (c.live and c.state != "created")]
    held = view.holders(ss, n)
    # a failover's old host holds nothing (nor does any while a restore is awaited), and
    # its exited tasks are not the slot's exits: removed
    held = tuple(h for h in held if not _kept_away(ss, n, h))
    fenced = Effects(stops=tuple(_fenced_exit(ss, n, c) for c in dead if _on_kept(ss, n, c)))
    dead = [c for c in dead if not _on_kept(ss, n, c)]
    if not (live or held):
        decided = _slot_without_task(ss, n, dead, services, view)
        return decided._replace(effects=fenced + decided.effects)
    fx = fenced + Effects(stops=tuple(Stop(c, f"{c.name} superseded") for c in dead))
    ss, live, unhealthy = _unhealthy_out(ss, n, live, view)
    fx = fx + unhealthy + _fence_kept(ss, n, live, view)
    live = [c for c in live if not _on_kept(ss, n, c)]
    target = slot_target(ss, n)
    if held:
        ss = with_slot(ss, n, slots.hold(ss.slot(n)))
        due = failover.due(ss, n, held, view)
        if isinstance(due, failover.Due):  # on_host_loss = "restore": placed with the wants
            want = Want(WantKind.FAILOVER, ss.spec.name, n, target, failover=due)
            return SlotDecision(ss, fx, want)
        if due is not None:
            return SlotDecision(ss, fx + Effects(waiting=(due,)))
        return SlotDecision(ss, fx + _held_waiting(ss, n, held, view))
    if not live:
        filled = _fill(ss, n, slot_target(ss, n, refill=True), True, services, view)
        return filled._replace(effects=fx + filled.effects)
    return _slot_with_tasks(ss, n, live, target, view, fx)


def _kept_away(ss: ServiceState, n: int, host: str) -> bool:
    """Whether `host` is the one a failover restored the slot away from (core/failover.py),
    or any host while the slot waits for `minidock restore` with no host (its host
    forgotten): a task of it found running elsewhere is a stale copy (an older failover's
    old host, back), never adopted in place of the restore the operator is asked for."""
    record = ss.slot(n)
    if record.awaiting_restore and not record.host:
        return True
    return bool(record.kept_on) and host == record.kept_on != record.host


def _on_kept(ss: ServiceState, n: int, c: Container) -> bool:
    """A task of the slot on the host a failover restored it away from."""
    return _kept_away(ss, n, c.host)


def _fenced_exit(ss: ServiceState, n: int, c: Container) -> Stop:
    """An exited task of the slot on the host a failover left (stopped there by a fence
    the controller did not live to remove, or stopped with its host): removed, never
    counted as the slot's exit (a clean one would make a restored slot Complete)."""
    return Stop(c, f"{c.name} left by a failover{failover.kept_line(ss.slot(n), c.host)}")


def _fence_kept(ss: ServiceState, n: int, live: list[Container], view: View) -> Effects:
    """The old host of a failover answers again with its task of the slot: stopped at
    once (never two running copies), its volume kept, both said."""
    stale = [c for c in live if _on_kept(ss, n, c)]
    if not stale:
        return Effects()
    record, subject, host = ss.slot(n), f"{ss.spec.name}.{n}", stale[0].host
    if record.host:
        line = f"fenced: {subject} was restored on {record.host}"
        line += failover.kept_line(record, record.kept_on)
    else:  # its host forgotten, a snapshot known: what runs elsewhere is an older copy
        line = f"fenced: {subject} waits for `minidock restore {subject}`; its volume on "
        line += f"{host} is kept (an older copy of its data)"
    event = Event(view.now, "fenced", f"{subject}: task {stale[0].task} on {host} {line}",
                  service=ss.spec.name, slot=n, host=host)  # fmt: skip
    return Effects(stops=tuple(Stop(c, line) for c in stale), events=(event,))


def _steady(ss: ServiceState, n: int, here: list[Container], view: View) -> bool:
    """The converged slot, the case of almost every slot on almost every pass, answered
    without building anything: one ready task of the slot's target spec, the one its record
    names, on a host that keeps it (answered, not drained, not over capacity, constraints
    met), outside any rollout or rebalance. For such a slot `_decide_slot` changes nothing
    and decides nothing; this only says so sooner (tests/unit/test_steady_slots.py holds
    the two to the same plans)."""
    if len(here) != 1 or ss.rebalance or n in ss.rollout.inflight or n in ss.moves:
        return False
    if n in ss.backups.slots:
        return False
    c = here[0]
    if c.state != "running" or not ready(c) or c.id in view.evict:
        return False
    record = ss.slot(n)
    if slots.observe_task(record, c, ready=True) is not record:
        return False  # else its record names this task on this host, which answered:
    if (ss.spec.name, n) in view.unseen and view.holders(ss, n):  # only an unseen host holds
        return False
    target = slot_target(ss, n)
    if c.spec != target.spec_hash() or view.hosts[c.host].drained:
        return False
    return not (target.constraints and view.misplaced(target, c))


def _held_waiting(ss: ServiceState, n: int, held: tuple[str, ...], view: View) -> Effects:
    """Why a held slot waits, where the host-level line (unreachable, n/m probes) does not
    say it: a `wait` service's task on a host that is down."""
    down = [h for h in held if view.hosts[h].down]
    if not down:
        return Effects()
    h = down[0]
    why = f"on_host_loss = wait: stays on {h}, which is down (drain or forget {h} to move it)"
    name = ss.spec.name
    return Effects(waiting=(Waiting(f"{name}.{n}", why, WaitKind.HELD_DOWN, name),))


def _slot_without_task(
    ss: ServiceState,
    n: int,
    dead: list[Container],
    services: Mapping[str, ServiceState],
    view: View,
) -> SlotDecision:
    """Fold the slot's exited tasks into its restart bookkeeping, then want a new task."""
    target = slot_target(ss, n, refill=True)
    state = ss.slot(n)
    stops: list[Stop] = []
    lapsed: list[Container] = []
    for c in sorted(dead, key=lambda c: c.finished_at or 0.0):
        before = state
        state = slots.account_exit(state, c, target.restart, view.seen_at(c.host))
        # its own line: a task whose start failed was counted (and said so) by that act
        stops.append(Stop(c, exit_line(c), failure=state is not before))
        if state is not before and not state.complete:
            lapsed.append(c)
    ss, events = set_slot(ss, n, state, view.now)
    fx = Effects(stops=tuple(stops), events=events)
    if lapsed:
        ss, target, after = rollout.failed_after_gate(ss, n, lapsed[-1], state.last_exit, view.now)
        fx = fx + after
    # a restart is due also when the exited task was removed in an earlier pass
    restart = bool(dead or state.attempts)
    filled = _fill(ss, n, target, restart, services, view)
    return filled._replace(effects=fx + filled.effects)


def _unhealthy_out(
    ss: ServiceState, n: int, live: list[Container], view: View
) -> tuple[ServiceState, list[Container], Effects]:
    """A running task Docker reports unhealthy (outside a rollout's gate) is stopped and
    counted as a failed attempt, as in Swarm."""
    fx = Effects()
    kept = list(live)
    for c in [c for c in live if c.health == "unhealthy" and n not in ss.rollout.inflight]:
        line = f"task {c.task} unhealthy: {c.health_log or 'health check failed'}"
        restart = slot_target(ss, n).restart
        state = slots.count_failure(ss.slot(n), c.task, view.seen_at(c.host), line, restart)
        ss, events = set_slot(ss, n, state, view.now)
        fx = fx + Effects(stops=(Stop(c, line, failure=True),), events=events)
        kept.remove(c)
        ss, _, after = rollout.failed_after_gate(ss, n, c, line, view.now)
        fx = fx + after
    return ss, kept, fx


def _slot_with_tasks(
    ss: ServiceState, n: int, live: list[Container], target: Service, view: View, fx: Effects
) -> SlotDecision:
    """Keep one live task (the newest ready one of the target spec), then see whether it
    must move (drained host) or be updated (outdated spec)."""
    name, spec = ss.spec.name, target.spec_hash()
    if len(live) > 1:
        keep = _survivor(ss, n, live, spec, view)
        if keep is None and rollout.beside(ss, n):  # a canary and its old task: both stay
            pair = {ss.slot(n).task, *(old for m, old, _ in ss.rollout.canary if m == n)}
            why = f"{name}.{n}: a stale task beside its canary and the task it runs beside"
            stale = tuple(Stop(c, why) for c in live if c.task not in pair)  # a host back
            return SlotDecision(ss, fx + Effects(stops=stale))
        if keep is None:  # the assigned task is still starting: the others serve till then
            wait = Waiting(f"{name}.{n}", "replacement starting", WaitKind.REPLACEMENT, name)
            return SlotDecision(ss, fx + Effects(waiting=(wait,)))
        reason = _fence_reason(ss, n, keep)
        fx = fx + Effects(stops=tuple(Stop(c, reason) for c in live if c is not keep))
        live = [keep]
    task = live[0]
    ss = with_slot(ss, n, slots.observe_task(ss.slot(n), task, ready=ready(task)))
    if view.hosts[task.host].drained or task.id in view.evict:
        why = f"drain {task.host}" if view.hosts[task.host].drained else view.evict[task.id]
        moved = slot_target(ss, n, refill=True)  # an old task, during a canary: its spec
        return SlotDecision(ss, fx, Want(WantKind.MOVE, name, n, moved, old=task, why=why))
    ss, rebalancing = _rebalanced(ss, n, task)
    if rebalancing and ready(task) and task.spec == spec:
        why = f"rebalance: off {task.host}"
        want = Want(WantKind.MOVE, name, n, target, old=task, why=why, rebalance=True)
        return SlotDecision(ss, fx, want)
    misplaced = view.misplaced(target, task)
    if misplaced and target.pinned and task.spec == spec:
        why = f"{misplaced}, but it holds its named volume there: `minidock move {name}.{n}`"
        held = Waiting(f"{name}.{n}", why, WaitKind.PINNED, name)
        return SlotDecision(ss, fx + Effects(waiting=(held,)))
    if task.spec != spec or misplaced:
        return SlotDecision(ss, fx, outdated=task)  # the rollout replaces it (constraints too)
    if not ready(task):
        kind = WaitKind.STARTING if task.state == "running" else WaitKind.STALLED
        why = f"task {task.task} {task.state} ({task.health})"
        late = still_starting(task, target, view.now)
        line = Waiting(f"{name}.{n}", f"{why}: {late}" if late else why, kind, name)
        fx = fx + Effects(waiting=(line,))
    return SlotDecision(ss, fx)


def _rebalanced(ss: ServiceState, n: int, task: Container) -> tuple[ServiceState, bool]:
    """`minidock rebalance`'s moves, one at a time: whether slot `n` is the one to move now
    (its task is still on the host it is to leave); a move done (the slot's task left that
    host), or no longer meaningful, is dropped from the list."""
    if not ss.rebalance:
        return ss, False
    (slot, source), rest = ss.rebalance[0], ss.rebalance[1:]
    if slot not in ss.slot_numbers():
        return replace(ss, rebalance=rest), False
    if slot != n:
        return ss, False
    if task.host != source:
        return replace(ss, rebalance=rest), False
    return ss, True


def _survivor(
    ss: ServiceState, n: int, live: list[Container], spec: str, view: View
) -> Container | None:
    """Which of a slot's live tasks stays: the one the controller assigned (committed before
    it was started), whatever the hosts' clocks say; None while that one is not ready yet
    (or, start-first, while the rollout's new task is in its gate). A task no record
    explains is adopted only when the slot's assigned task is gone."""
    assigned = next((c for c in live if c.task == ss.slot(n).task), None)
    if assigned is not None:
        in_gate = n in ss.rollout.inflight and assigned.spec == spec
        return None if in_gate or not ready(assigned) else assigned
    good = [c for c in live if c.spec == spec and not view.hosts[c.host].drained]
    settled = [c for c in good if ready(c)]
    if good and n in ss.rollout.inflight:
        return None  # start-first: the old task stays until the new one passes its gate
    if settled:
        return min(settled, key=lambda c: c.task)
    if good:
        return None
    return min(live, key=lambda c: (c.state != "running", c.task))


def _fence_reason(ss: ServiceState, n: int, keep: Container) -> str:
    name = ss.spec.name
    if keep.task == ss.slot(n).task:
        return f"fenced: {name}.{n} is assigned to task {keep.task}"
    return f"{name}.{n} keeps task {keep.task}"


def _fill(
    ss: ServiceState,
    n: int,
    target: Service,
    restart: bool,
    services: Mapping[str, ServiceState],
    view: View,
) -> SlotDecision:
    """An empty slot wants a task, unless Failed, complete, backing off or blocked."""
    name, state = ss.spec.name, ss.slot(n)
    if state.failed or state.complete or state.half_written:  # never on a half-written volume
        return SlotDecision(ss)
    if state.awaiting_restore:  # never started empty by surprise (core/intents.py: forget)
        return SlotDecision(ss, Effects(waiting=(_awaiting(ss, n, state.awaiting_restore),)))
    after = carried(state.next_start, view.now)
    if after is None:
        left = f"restart backoff, {state.next_start - view.now:.0f}s left"
        return SlotDecision(
            ss, Effects(waiting=(Waiting(f"{name}.{n}", left, WaitKind.BACKOFF, name),))
        )
    blocked = deps_block(services, view, ss)
    if blocked:
        ss = with_slot(ss, n, slots.unplaced(state))
        dep, why = blocked
        return SlotDecision(ss, Effects(pending=(Pending(name, n, why, dependency=dep),)))
    if target.spec_hash() == ss.spec.spec_hash() and hooks.holds(ss):
        return SlotDecision(ss)  # its generation's hook first (rollout.hook_gate says so)
    kind = WantKind.RESTART if restart else WantKind.NEW
    only = ss.host_of(n) or (state.host if target.pinned else "")  # its host, its data
    want = Want(kind, name, n, target, only=only, after=after)
    return SlotDecision(with_slot(ss, n, slots.vanish(state)), want=want)


def _awaiting(ss: ServiceState, n: int, snapshot: str) -> Waiting:
    """A pinned slot of a forgotten host that a snapshot can restore: what to run."""
    subject = f"{ss.spec.name}.{n}"
    why = (
        f"its host was forgotten and snapshot {snapshot} can restore it: `minidock restore "
        f"{subject}` (on a host the scheduler picks, or --host HOST), or `minidock restore "
        f"{subject} --empty` to start it empty"
    )
    return Waiting(subject, why, WaitKind.RESTORE, ss.spec.name)


# -- placement --------------------------------------------------------------------------------
def _place_wants(
    wants: Sequence[Want], services: dict[str, ServiceState], fleet: Fleet, view: View
) -> tuple[dict[str, ServiceState], Effects]:
    """Place every want in priority order (due restarts, new tasks, drain moves), so lost
    capacity comes back before anything new takes the room. A slot has one want at most:
    its records are written back once per service, at the end."""
    parts: list[Effects] = []
    records: dict[str, dict[int, slots.SlotState]] = defaultdict(dict)
    for want in sorted(wants, key=lambda w: w.kind):
        ss = services[want.service]
        record = ss.slot(want.slot)
        if want.kind is WantKind.FAILOVER:
            services[want.service], placed = _failover(want, ss, fleet, view)
            parts.append(placed)
            continue
        if want.kind is WantKind.MOVE:
            run, placed = _move(want, services, fleet, view)
            if run is None and want.rebalance and placed.events:  # no other host: it ends
                services[want.service] = replace(ss, rebalance=ss.rebalance[1:])
                parts.append(placed)
                continue
        else:
            run, placed = _place_one(want, record.avoid, fleet, view)
        parts.append(placed)
        if run is None:
            records[want.service][want.slot] = slots.unplaced(record)
            continue
        records[want.service][want.slot] = slots.assign(record, run.task, run.host)
        if want.kind is not WantKind.MOVE:  # a new task in a rollout goes through its gate
            services[want.service] = rollout.placed(ss, want.slot)
    for name, changed in records.items():
        services[name] = with_slots(services[name], changed)
    return services, Effects.joined(parts)


def _failover(
    want: Want, ss: ServiceState, fleet: Fleet, view: View
) -> tuple[ServiceState, Effects]:
    """A failover's restore placed as a task is (the scheduler picks the host) and
    recorded as the slot's restore intent; pending when no host fits."""
    assert want.failover is not None
    never = failover.never_target(ss.slot(want.slot))  # an earlier failover's old volume
    where = place(want.target, fleet, avoid=(want.failover.old,), never=never)
    if where.host is None:
        why = f"on_host_loss = restore: no host can take it: {where.why}"
        return ss, Effects(pending=(Pending(want.service, want.slot, why),))
    ss, event = failover.failover_move(ss, want.slot, want.failover, where.host, view.now)
    return ss, Effects(events=(event,))


def _place_one(want: Want, avoid: str, fleet: Fleet, view: View) -> tuple[Run | None, Effects]:
    """A task for an empty slot; a host where its last start failed only if none other fits."""
    where = place(want.target, fleet, avoid=[avoid] if avoid else (), only=want.only)
    if where.host is None:
        return None, Effects(pending=(Pending(want.service, want.slot, where.why),))
    restart = want.kind is WantKind.RESTART
    reason = "restart" if restart else "place"
    run = view.run(want.target, want.slot, where.host, reason, restart=restart, after=want.after)
    return run, Effects(runs=(run,))


def _move(
    want: Want, services: Mapping[str, ServiceState], fleet: Fleet, view: View
) -> tuple[Run | None, Effects]:
    """Start-first replacement on another host; the old task stops once it is ready."""
    assert want.old is not None
    if want.target.pinned and not view.hosts[want.old.host].move_volumes:
        why = (
            f"{want.why}: it holds its named volume on {want.old.host}; "
            f"`minidock move {want.service}.{want.slot} --to HOST` moves it with its data "
            f"(`drain {want.old.host} --move-volumes-unsafe`: without it)"
        )
        return None, Effects(pending=(Pending(want.service, want.slot, why),))
    record = services[want.service].slot(want.slot)
    held = _start_held(want, record, view.now)
    if held is not None:
        return None, held
    blocked = deps_block(services, view, services[want.service])
    if blocked is not None:
        dep, why = blocked[0], f"{want.why}: {blocked[1]}"
        return None, Effects(pending=(Pending(want.service, want.slot, why, dependency=dep),))
    where = place(want.target, fleet, avoid=avoided(want.old.host, record))
    if want.rebalance and where.host in (None, want.old.host):
        return None, _rebalance_ended(want, where.host, fleet, view)
    if where.host is None:
        why = f"{want.why}: {where.why}"
        return None, Effects(pending=(Pending(want.service, want.slot, why),))
    run = view.run(want.target, want.slot, where.host, want.why)
    return run, Effects(runs=(run,))


def _rebalance_ended(want: Want, host: str | None, fleet: Fleet, view: View) -> Effects:
    """A rebalance move no other host can take now (the one it was planned for is down,
    drained or full): not worth doing any more, so it ends, said by an event (the next
    `minidock rebalance` plans again), rather than start its task beside itself on the
    host it moves off, or wait for ever."""
    assert want.old is not None
    if host is not None:
        fleet.unreserve(host, want.target)
    subject, source = f"{want.service}.{want.slot}", want.old.host
    line = f"{subject}: rebalance off {source} dropped: no other host can take it now"
    event = Event(view.now, "rebalance", line, want.service, want.slot, source)
    return Effects(events=(event,))


def _start_held(want: Want, record: slots.SlotState, now: float) -> Effects | None:
    """Every start is a start: a move (drain, rebalance, over capacity) waits out the
    slot's backoff, and a slot Failed by its failed starts moves no more (the drain stops
    there, saying why, until `reset` or a new apply); None when the move may start now."""
    subject = f"{want.service}.{want.slot}"
    if record.half_written:
        return Effects(pending=(Pending(want.service, want.slot, record.half_written),))
    if record.failed:
        why = (
            f"{want.why}: Failed after {len(record.attempts)} failed starts "
            f"({record.last_exit}); `minidock reset {want.service}` tries again"
        )
        return Effects(pending=(Pending(want.service, want.slot, why),))
    if now < record.next_start:
        left = f"{want.why}: restart backoff, {record.next_start - now:.0f}s left"
        return Effects(waiting=(Waiting(subject, left, WaitKind.BACKOFF, want.service),))
    return None
