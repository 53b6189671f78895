"""Operator intents as pure state transitions: apply, rollback, reset, drain/activate,
forget. What the runner learns while acting is `core.outcomes`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from minidock.core import autoscale, canary, failover, hooks, rollout, slots
from minidock.core import hosts as host_machine
from minidock.core.autoscale import Scaling
from minidock.core.hosts import HostState
from minidock.core.rollout import RolloutInput, rolled_back
from minidock.core.serving import ServingMode
from minidock.core.state import ControllerState, Rollout, ServiceState, Transition
from minidock.core.volumes import MoveInput, MovePhase, VolumeMove
from minidock.model import Cluster, Event, Observed, Service

__all__ = [
    "admit",
    "begin_move",
    "begin_restore",
    "declined_retries",
    "failed_updates",
    "foreign_controllers",
    "forget",
    "pinned_on",
    "promote",
    "removals",
    "reset",
    "rollback",
    "rollouts_started",
    "scale",
    "scaled_cluster",
    "set_drained",
    "set_serving",
    "start_empty",
]


def foreign_controllers(state: ControllerState, observed: Observed, cluster: str) -> dict[str, int]:
    """Live tasks of `cluster` labelled by controllers this store does not own (another
    state store's), counted per controller id: a new store adopts them only when told."""
    found: dict[str, int] = {}
    for c in observed.containers():
        if c.cluster == cluster and c.live and not state.owns(c.controller):
            found[c.controller] = found.get(c.controller, 0) + 1
    return found


def removals(state: ControllerState, cluster: Cluster) -> list[str]:
    """Services the state runs that `cluster` no longer names (an apply needs `--prune`)."""
    wanted = {s.name for s in cluster.services}
    return [n for n, ss in state.services.items() if n not in wanted and not ss.removed]


def admit(
    state: ControllerState,
    cluster: Cluster,
    generation: int,
    *,
    prune: bool = False,
    retry: bool = False,
) -> ControllerState:
    """Take a newly applied cluster spec as the desired state.

    A service whose run settings changed starts a rollout and keeps its old spec for
    rollback; any change to a service clears its Failed slots and backoff, and keeps every
    slot's record (which task fills it, on which host: the record rule); the same spec
    again resumes a paused update. Services the spec no longer names stay as they are,
    unless `prune`: then they are removed (desired stopped, in reverse dependency order,
    then dropped). Removals are explicit: `apply` refuses them without `--prune`. The spec
    of an update rolled back as failed, applied again, changes nothing unless `retry`
    (`declined_retries` says so)."""
    declined = set() if retry else {name for name, _ in declined_retries(state, cluster)}
    services = {
        svc.name: _admitted(state.services.get(svc.name), svc, generation, svc.name in declined)
        for svc in cluster.services
    }
    kept = [n for n in state.services if n not in services]
    for name in kept:
        old = state.services[name]
        if prune or old.removed:
            old = replace(old, spec=replace(old.spec, desired="stopped"), removed=True)
        services[name] = old
    return replace(
        state,
        adopting=state.generation == 0 or state.adopting,
        cluster=cluster.name,
        generation=generation,
        order=(*(s.name for s in cluster.services), *kept),
        services=services,
    )


def _admitted(
    old: ServiceState | None, svc: Service, generation: int, declined: bool
) -> ServiceState:
    """One service's state once `svc` is applied (`admit`'s rules). Every field the
    admission may not change (core/state.py, CHANGED_BY) is carried: a recorded move or
    restore, maintenance or pause, a rebalance."""
    if old is None:
        return ServiceState(spec=svc, generation=generation)
    if declined:
        return old
    admitted = Transition.ADMIT
    if old.spec == svc and old.rollout.paused and not old.rollout.rollback:
        # said by the apply itself (its generation line), as a begun update is
        resumed, _ = rollout.step(old.rollout, RolloutInput.RESUME, failures=0, reason="")
        hook = hooks.retried(old.hook, old.generation)  # a failed hook runs again
        return old.through(admitted, rollout=resumed, hook=hook)
    if old.spec == svc:
        hook = hooks.retried(old.hook, old.generation)  # a failed hook runs again
        return old if hook is old.hook else old.through(admitted, hook=hook)
    if old.spec.spec_hash() == svc.spec_hash():  # no task changes: the same rollout
        return old.through(
            admitted,
            spec=svc,
            generation=generation,
            rollout=_resumed(old, svc),
            slots=slots.renewed(old.slots),
            removed=False,
            job=old.job.across(old.spec.schedule, svc.schedule),
            scaling=autoscale.admitted(old.scaling, old.spec, svc),
        )
    # a canary superseded before its promote never replaced the spec its slots run: that
    # one stays the previous spec (what a drain refills outside the new canary, and what a
    # rollback goes back to), and the canary's own spec joins the older ones
    superseded = old.rollout.in_canary and old.previous is not None
    base = old.previous if superseded and old.previous is not None else old.spec
    return old.through(
        admitted,
        spec=svc,
        generation=generation,
        previous=base,
        previous_generation=old.previous_generation if superseded else old.generation,
        rollout=_begun(old, svc),
        # a canary superseded: its slots go back to the old tasks they ran beside, so
        # its tasks leave the routes and stop, and the new update starts from there
        slots=rollout.given_back(slots.renewed(old.slots), old.rollout),
        removed=False,
        previous_failed="",
        job=old.job.across(old.spec.schedule, svc.schedule),
        older=_older(old, svc, base),
        scaling=autoscale.admitted(old.scaling, old.spec, svc),
    )


def _older(old: ServiceState, svc: Service, base: Service) -> tuple[Service, ...]:
    """The specs older than the new previous one (`base`) that tasks may still run: the
    old spec, the old previous and the old older ones, each once, none of the new or
    previous spec's hash (a pass drops each once no task of it is seen: core/decide.py)."""
    taken = {svc.spec_hash(), base.spec_hash()}
    found: list[Service] = []
    for spec in (old.spec, old.previous, *old.older):
        if spec is not None and spec.spec_hash() not in taken:
            taken.add(spec.spec_hash())
            found.append(spec)
    return tuple(found)


def declined_retries(state: ControllerState, cluster: Cluster) -> list[tuple[str, str]]:
    """Services `cluster` gives the very spec of an update that was rolled back as failed,
    with why it failed: applying it again is a no-op (the contract's unchanged re-apply)
    unless the operator asks for the update again (`apply --retry`). Its count does not
    make it another spec: `scale` after the rollback scaled the failed spec too."""
    return [
        (svc.name, ss.previous_failed)
        for svc in cluster.services
        if (ss := state.services.get(svc.name)) is not None
        and ss.previous_failed
        and ss.previous is not None
        and ss.previous == replace(svc, replicas=ss.previous.replicas)
        and ss.spec != svc
    ]


def _begun(old: ServiceState, svc: Service) -> Rollout:
    """The update an apply begins; `rollouts_started` says it, once admitted."""
    canaries = svc.update.canary > 0 and svc.mode != "global" and not svc.pinned
    begun, _ = rollout.begin(old.rollout, _wanted(svc, old), canaries=canaries)
    return begun


def _resumed(old: ServiceState, svc: Service) -> Rollout:
    """The rollout of a generation that changes no task: kept, but an update paused by its
    failed hook resumes (the new generation runs its hook again, core/hooks.py), and a
    canary the file no longer asks for (`update.canary` 0) is promoted, as by `minidock
    promote`: nothing else would end it."""
    r = old.rollout
    if r.paused and not r.rollback and old.hook.failed and old.hook.generation == old.generation:
        return rollout.step(r, RolloutInput.RESUME, failures=0, reason="")[0]
    if r.in_canary and svc.update.canary == 0:
        return replace(r, promoted=True)
    return r


def _wanted(svc: Service, old: ServiceState) -> int:
    if svc.mode == "global":
        return len(old.global_slots)
    return autoscale.count(svc, autoscale.admitted(old.scaling, old.spec, svc))


def rollouts_started(before: ControllerState, after: ControllerState, now: float) -> list[Event]:
    """A `rollout-started` event for each service that `admit` set updating (or began a
    canary of)."""
    return [
        Event(now, "rollout-started", f"{name}: {_verb(ss)} generation {ss.generation}", name)
        for name, ss in after.services.items()
        if ss.rollout.phase in ("updating", "canary")
        and (name not in before.services or before.services[name].rollout != ss.rollout)
    ]


def _verb(ss: ServiceState) -> str:
    if ss.rollout.in_canary:
        return f"canary of {canary.count(ss)} (update.canary) for"
    return "updating to"


def failed_updates(state: ControllerState, generation: int) -> list[tuple[str, str]]:
    """Services whose update from `generation` was rolled back automatically, with why:
    the apply that made that generation failed, though the fleet converged."""
    return [
        (name, ss.rollout.reason)
        for name, ss in state.services.items()
        if ss.rollout.rollback and ss.previous_generation == generation
    ]


def rollback(state: ControllerState, service: str, *, force: bool = False) -> ControllerState:
    """`minidock rollback SERVICE`: go back to the previous spec; never to one that was
    itself rolled back as failed, unless `force`."""
    ss = state.services[service]
    if ss.removed:
        raise ValueError(f"service {service} was pruned: it has nothing to roll back")
    if ss.previous is None:
        raise ValueError(f"service {service} has no previous spec to roll back to")
    if ss.previous_failed and not force:
        raise ValueError(
            f"{service}: its previous spec (generation {ss.previous_generation}) was rolled "
            f"back as failed ({ss.previous_failed}); `minidock rollback {service} --force` "
            "returns to it anyway"
        )
    back, _ = rolled_back(ss, "rolled back by the operator")  # the command says it
    return _with_service(state, back)


def scale(state: ControllerState, service: str, replicas: int, generation: int) -> ControllerState:
    """`minidock scale SERVICE=N` as generation `generation`: the count of the spec that
    runs (the effective one: after a rollback, the rolled-back-to spec, never the file's
    spec that was left), and of the previous spec, so that a rollback keeps the count
    too. No task changes spec, so no rollout begins; any other service is untouched.
    Every durable field is carried (core/state.py, CHANGED_BY). As any new generation,
    Failed slots and backoff are forgotten, and an update paused by its failed hook
    resumes (the hook runs again for the new generation)."""
    ss = state.services[service]
    previous = ss.previous and replace(ss.previous, replicas=replicas)
    scaled = ss.through(
        Transition.SCALE,
        spec=replace(ss.spec, replicas=replicas),
        generation=generation,
        previous=previous,
        rollout=_resumed(ss, ss.spec),
        slots=slots.renewed(ss.slots),
        scaling=Scaling(marks=ss.scaling.marks),  # the operator's count, until a pass decides
    )
    return replace(state, generation=generation, services={**state.services, service: scaled})


def scaled_cluster(state: ControllerState, cluster: Cluster, service: str) -> Cluster:
    """The generation `scale` stores: `cluster` with SERVICE's spec as the state runs it
    (its new count), so the stored desired state says what runs; the next `apply FILE`
    sets what the file says."""
    ss = state.services[service]
    return replace(
        cluster, services=tuple(ss.spec if s.name == service else s for s in cluster.services)
    )


def promote(state: ControllerState, service: str) -> ControllerState:
    """`minidock promote SERVICE`: its canary is promoted as soon as every canary task is
    ready (through `update.monitor`, whatever is left of `canary_monitor`), and the
    rolling update goes on. Kept in the rollout's record until then, so it survives a
    controller killed before the pass that acts on it. ValueError when there is no
    canary to promote."""
    ss = state.services[service]
    r = ss.rollout
    if not r.in_canary:
        shown = r.phase.value if r.phase.value != "none" else "no rollout yet"
        raise ValueError(
            f"service {service} has no canary to promote (its rollout: {shown}); a canary "
            "starts when an apply changes its tasks with update.canary set"
        )
    return _with_service(state, ss.through(Transition.PROMOTE, rollout=replace(r, promoted=True)))


def reset(state: ControllerState, service: str) -> ControllerState:
    """`minidock reset SERVICE`: clear crash-loop failures and backoff timers, and the
    hold of a volume a restore left half written: its task starts on what it holds."""
    ss = state.services[service]
    return _with_service(state, ss.through(Transition.RESET, slots=slots.forgiven(ss.slots)))


def set_serving(state: ControllerState, service: str, mode: ServingMode) -> ControllerState:
    """`minidock maintenance SERVICE on|off`, `pause SERVICE`, `resume SERVICE`: how the
    service's routes answer from the next pass on (core/serving.py). A service with no
    route (in its effective spec) has nothing to set: ValueError saying so."""
    ss = state.services[service]
    if not ss.spec.ingress:
        raise ValueError(
            f"service {service} has no ingress route: maintenance and pause act on a "
            "service's routes (give it `ingress = { host = .., port = .. }`)"
        )
    return _with_service(state, ss.through(Transition.SERVE, serving=mode))


_ON_THE_WAY = (MovePhase.STOPPING, MovePhase.COPYING, MovePhase.STARTING)  # needs its target


def pinned_on(state: ControllerState, host: str) -> list[str]:
    """The slots whose task, by the controller's record, runs on `host` with a named
    volume (a replicated service's or a global one's alike), or whose recorded move or
    restore is bringing its volumes there: a drain refuses them (a drained target would
    hold the copied data and take no task, and the move would never end)."""
    return [
        f"{name}.{n}"
        for name, ss in sorted(state.services.items())
        if ss.spec.pinned and ss.spec.desired == "running"
        for n in ss.slot_numbers()
        if (ss.slot(n).host == host and ss.slot(n).task)
        or ((m := ss.moves.get(n)) is not None and m.target == host and m.phase in _ON_THE_WAY)
    ]


def begin_move(
    state: ControllerState,
    service: str,
    slot: int,
    target: str,
    now: float,
    *,
    keep_source: bool = False,
    replace_kept: bool = False,
) -> ControllerState:
    """`minidock move SERVICE.SLOT --to HOST`: record the slot's move with its volumes
    (core/volumes.py), carried out by the passes from here on. The same move asked again
    (a command interrupted) changes nothing; ValueError (one line) when it cannot be (a
    target that keeps the slot's old volume, unless `replace_kept`: `refuse_kept`)."""
    ss = state.services[service]
    subject = f"{service}.{slot}"
    if ss.spec.mode == "global" or not ss.spec.pinned:
        why = "a global service's task belongs to its host" if ss.spec.mode == "global" else (
            "it has no named volume, so nothing pins it: `minidock rebalance` or a "
            "constraint moves it"
        )  # fmt: skip
        raise ValueError(f"{subject} cannot be moved with its volumes: {why}")
    if slot not in ss.slot_numbers():
        raise ValueError(f"{service} has no slot {slot} (slots 1..{ss.wanted()})")
    underway = _underway(ss, slot)
    if underway is not None:
        if underway.target == target and not underway.restore:
            return state
        raise ValueError(f"{subject} is already {underway.line()}; wait for it to end")
    record = ss.slot(slot)
    if record.half_written:  # its copy would carry the half-written volume along
        raise ValueError(
            f"{subject} is Failed by a restore that did not complete (its volume may be half "
            f"written): `minidock restore {subject} --host {target}` puts a snapshot there, "
            f"`minidock reset {service}` starts it on what its volume holds"
        )
    if not record.host:
        raise ValueError(f"{subject} has no recorded host: nothing to move (it starts anywhere)")
    if record.host == target:
        raise ValueError(f"{subject} is on {target} already")
    refuse_kept(subject, record, target, "move", replace_kept=replace_kept)
    move = VolumeMove(target, record.host, keep_source=keep_source, since=now)
    return _with_service(state, replace(ss, moves={**ss.moves, slot: move}))


def begin_restore(
    state: ControllerState,
    service: str,
    slot: int,
    target: str,
    snapshots: tuple[tuple[str, str], ...],
    now: float,
    *,
    replace_kept: bool = False,
) -> ControllerState:
    """`minidock restore SERVICE.SLOT`: record the slot's restore (a move whose source is
    `snapshots`, (volume, snapshot id) for each named volume) onto `target` (its recorded
    host, or another), carried out by the passes. The first snapshot is the one shown. A
    Failed slot is cleared, but one whose volume a restore left half written, which stays
    Failed until this restore's copy completes (`slots.restored`). The same restore asked
    again changes nothing; ValueError (one line) when it cannot be."""
    ss = state.services[service]
    subject = f"{service}.{slot}"
    if not ss.spec.pinned:
        raise ValueError(f"{subject} has no named volume: there is nothing to restore into")
    if ss.spec.desired != "running":
        raise ValueError(
            f"{service} is desired {ss.spec.desired}: a restore starts its task on the data; "
            f'apply it with desired = "running" first'
        )
    if slot not in ss.slot_numbers():
        raise ValueError(f"{service} has no slot {slot} (slots 1..{ss.wanted()})")
    wanted = {v.source for v in ss.spec.volumes if v.named}
    if {v for v, _ in snapshots} != wanted or not snapshots:
        raise ValueError(f"{subject}: a restore names one snapshot for each of {sorted(wanted)}")
    record = ss.slot(slot)
    if ss.spec.mode == "global" and target != record.host:
        raise ValueError(
            f"{subject}: a global service's task belongs to {record.host or 'its host'}"
        )
    shown = snapshots[0][1][:8]
    refuse_kept(subject, record, target, "restore", replace_kept=replace_kept)
    underway = _underway(ss, slot)
    if underway is not None:
        if underway.restore and (underway.target, underway.snapshots) == (target, snapshots):
            return state
        raise ValueError(f"{subject} is already {underway.line()}; wait for it to end")
    move = VolumeMove(target, record.host, snapshot=shown, snapshots=snapshots, since=now)
    record = slots.renew(record) if record.failed else record
    ss = replace(ss, moves={**ss.moves, slot: move}, slots={**ss.slots, slot: record})
    return _with_service(state, ss)


def refuse_kept(
    subject: str, record: slots.SlotState, target: str, verb: str, *, replace_kept: bool
) -> None:
    """A move or restore onto the host that keeps the slot's old volume (`kept_on`: a
    failover or `forget` left it, and it may hold writes newer than any snapshot) would
    write over it: refused (ValueError), unless the operator says `--replace-kept`. (A
    restore in place, onto the slot's own host, writes over its own volume.)"""
    if replace_kept or target not in failover.never_target(record) or target == record.host:
        return
    raise ValueError(
        f"{subject}: {target} keeps its old volume (left by a failover or `forget`; it may "
        f"hold writes newer than any snapshot): {verb} it to another host, or add "
        "--replace-kept to write over it"
    )


def _underway(ss: ServiceState, slot: int) -> VolumeMove | None:
    """The slot's move or restore a new one must wait for: none while the last one only
    discards its partial copy (a new copy onto that host starts afresh anyway)."""
    found = ss.moves.get(slot)
    return None if found is None or found.phase is MovePhase.DISCARDING else found


def start_empty(state: ControllerState, service: str, slot: int) -> ControllerState:
    """`minidock restore SERVICE.SLOT --empty`: a slot that waits for a restore (its host
    forgotten, a snapshot of it known) starts on empty volumes, as the operator says.
    ValueError (one line) for a slot that waits for nothing."""
    ss = state.services[service]
    subject = f"{service}.{slot}"
    record = ss.slot(slot)
    if slot not in ss.slot_numbers() or not record.awaiting_restore:
        raise ValueError(
            f"{subject} is not waiting for a restore: --empty only starts a slot whose host "
            "was forgotten while a snapshot of it exists"
        )
    if ss.moves.get(slot) is not None and ss.moves[slot].holds:
        raise ValueError(f"{subject} is already {ss.moves[slot].line()}; wait for it to end")
    cleared = replace(record, awaiting_restore="")
    if cleared.half_written:  # a restore that failed before: its volume went with its host
        cleared = slots.reset(cleared)
    return _with_service(state, replace(ss, slots={**ss.slots, slot: cleared}))


def set_drained(
    state: ControllerState, host: str, drained: bool, *, move_volumes: bool = False
) -> ControllerState:
    """`minidock drain HOST` (True) or `minidock activate HOST` (False)."""
    intent = host_machine.Intent.DRAIN if drained else host_machine.Intent.ACTIVATE
    changed = host_machine.availability_step(state.host(host), intent, move_volumes=move_volumes)
    return replace(state, hosts={**state.hosts, host: changed})


def forget(
    state: ControllerState,
    host: str,
    now: float,
    snapshots: Mapping[tuple[str, int], str] | None = None,
) -> tuple[ControllerState, list[Event]]:
    """`minidock forget HOST`: a host gone for good. The tasks that ran on it are recorded
    as lost, so their slots (`on_host_loss = "wait"` ones too) are refilled elsewhere, and
    nothing is left that would hold the host in the inventory. A slot whose record names a
    task on another host (a replacement, made while HOST was down) keeps its record: only
    the stale task HOST last ran for it is lost.

    Never empty by surprise: a pinned slot of which a snapshot exists (`snapshots`: the
    newest one of each (service, slot), "ID of TIME", as the use case listed them; else
    the newest its backups recorded in its record) is not refilled: it waits for
    `minidock restore` or `restore --empty` (its line says so); one with none starts
    afresh on an empty volume, and its line says that too."""
    old = state.host(host)
    lost: list[Event] = []
    services = dict(state.services)
    known = snapshots or {}
    for name, ss in state.services.items():
        ss, ended = _moves_forgotten(ss, host, now)
        lost += ended
        for n, record in sorted(ss.slots.items()):
            if not _ran_on(record, name, n, host, old):
                continue
            message = f"{name}.{n}: task {record.task or '?'} lost with {host}"
            snapshot = known.get((name, n), "") or _recorded(record) if ss.spec.pinned else ""
            if snapshot:
                message += (
                    f"; snapshot {snapshot} can restore it, so it waits: `minidock restore "
                    f"{name}.{n}` restores it, `--empty` starts it empty"
                )
            elif ss.spec.pinned and ss.spec.desired == "running":
                message += "; no snapshot of it is known: it starts afresh with empty volumes"
            lost.append(Event(now, "task-lost", message, service=name, slot=n, host=host))
            lost_record = slots.lose(record, snapshot, pinned=ss.spec.pinned)
            ss = replace(ss, slots={**ss.slots, n: lost_record})
        services[name] = ss
    for t in old.tasks:  # seen there, and no record of it lost above (stale, or rebuilt state)
        if not any(e.service == t.service and e.slot == t.slot for e in lost):
            message = f"{t.service}.{t.slot}: task {t.task} lost with {host}"
            lost.append(Event(now, "task-lost", message, service=t.service, slot=t.slot, host=host))
    hosts = {**state.hosts, host: host_machine.forgotten(old)}
    summary = Event(now, "host-forgotten", f"{host} forgotten: {len(lost)} tasks lost", host=host)
    return replace(state, hosts=hosts, services=services), [summary, *lost]


def _moves_forgotten(ss: ServiceState, host: str, now: float) -> tuple[ServiceState, list[Event]]:
    """The service's moves and restores that needed `host`, ended (every intent ends): one
    not yet copied fails (its slot stays where its data is); one starting on `host` goes
    back to its source, whose volumes are still whole; one whose source is `host` keeps
    going with nothing left to clean, and one cleaning there is over; one discarding its
    partial copy on `host` ends."""
    moves = dict(ss.moves)
    records = dict(ss.slots)
    events: list[Event] = []
    for n, move in sorted(ss.moves.items()):
        subject = f"{ss.spec.name}.{n}"
        involved = host in (move.target, move.source)
        if not involved:
            continue
        what = "restore" if move.restore else "move"
        line = ""
        if move.failover and move.source == host:  # restoring away from it already
            moves[n] = replace(move, source="")
        elif move.phase is MovePhase.DISCARDING and move.target == host:
            del moves[n]
        elif move.holds:
            # a copy that may have begun leaves its partial copy on the target to remove
            # (DISCARDING): the slot, its host forgotten, waits for that before it starts
            ended = move.step(MoveInput.LOST) if move.target != host else move
            if ended.phase is MovePhase.DISCARDING:
                moves[n] = replace(ended, source="")
            else:
                del moves[n]
            records[n] = slots.stopped_for(records.get(n, slots.SlotState()))  # its stop
            stays = move.source if move.source and move.source != host else ""
            line = f"{subject}: {what} to {move.target} failed: {host} forgotten"
            line += f"; it stays on {stays}" if stays else ""
            if ended.phase is MovePhase.DISCARDING:
                line += f"; its partial copy on {move.target} is removed once it answers"
        elif move.target == host and move.phase is MovePhase.STARTING and move.source:
            del moves[n]
            if not move.restore:  # its source's volumes are whole: the slot goes back there
                records[n] = slots.relocate(records.get(n, slots.SlotState()), move.source)
            line = f"{subject}: {what} to {move.target} failed: {host} forgotten"
            if not move.restore:
                line += f" before its task was ready; it starts again on {move.source}"
        elif move.target == host:
            del moves[n]
        elif move.source == host and move.phase is MovePhase.CLEANING:  # nothing to clean
            del moves[n]
            done = f"{subject}: moved to {move.target} (its old volumes went with {host})"
            events.append(Event(now, "moved", done, service=ss.spec.name, slot=n, host=move.target))
        elif move.source == host:  # nothing left to clean there once it is ready
            moves[n] = replace(move, source="", keep_source=True)
        if line:
            kind = "restore-failed" if move.restore else "move-failed"
            events.append(Event(now, kind, line, service=ss.spec.name, slot=n, host=host))
    if moves == ss.moves and records == ss.slots:
        return ss, events
    return replace(ss, moves=moves, slots=records), events


def _recorded(record: slots.SlotState) -> str:
    """The newest snapshot the slot's backups recorded (core/failover.py), shown by its
    short id ("": none): what `forget` knows when the repository could not be listed."""
    if not record.backups:
        return ""
    _, ident, _ = max(record.backups, key=lambda b: b[2])
    return ident[:8]


def _ran_on(record: slots.SlotState, service: str, n: int, host: str, old: HostState) -> bool:
    """Whether the slot's recorded task is the one HOST ran: the record says HOST, or it
    names no host and HOST last answered with a task of the slot."""
    if record.host:
        return record.host == host
    return any(t.service == service and t.slot == n for t in old.tasks)


def _with_service(state: ControllerState, ss: ServiceState) -> ControllerState:
    return replace(state, services={**state.services, ss.spec.name: ss})
