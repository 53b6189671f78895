"""The rollout machine, whole: a rolling update (or rollback) of one service. Pure.

A rollout replaces outdated tasks `parallelism` at a time; each new task is *in flight*
until it passes its health gate (healthy, or running, for `monitor`), then *done*. A
failure applies `update.failure_action`: pause, roll back to the previous spec, or go on.
`step` is the only place a rollout's phase changes, through `TABLE`; progress (which
slots are in flight or done) changes through the small functions below it.

Each pass, `reconcile` hands every service to this module twice: `gate` judges the slots
in flight before the service's slots are decided, and `advance` starts the next
replacements (or completes the rollout) once the pass's wants are placed. What a failure
does (`failure_action`), which spec a slot runs meanwhile (`slot_target`) and a rollback's
swap of specs (`rolled_back`) are here too: no other module decides anything of a rollout.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from minidock.core import canary, hooks, slots
from minidock.core.fold import Effects, View, avoided, deps_block, set_slot, with_slot
from minidock.core.plan import Pending, Run, Stop, Waiting, WaitKind
from minidock.core.scheduler import Fleet, place, place_replacing, service_ports
from minidock.core.state import Rollout, RolloutPhase, ServiceState, Transition
from minidock.core.supervise import health_gate, ready
from minidock.model import Container, Event, Service
from minidock.units import format_duration

__all__ = [
    "TABLE",
    "Outdated",
    "RolloutInput",
    "act_failed",
    "advance",
    "back_to_previous",
    "begin",
    "beside",
    "failed_after_gate",
    "failure_action",
    "gate",
    "given_back",
    "hook_gate",
    "placed",
    "rolled_back",
    "slot_target",
    "step",
]


class RolloutInput(enum.StrEnum):
    BEGIN = "apply changes what tasks run"
    BEGIN_CANARY = "apply changes what tasks run, with update.canary"
    PROMOTE = "every canary passed, and promote is auto or the operator's"
    BEGIN_ROLLBACK = "rollback: the operator's, or update.failure_action's"
    RESUME = "same spec applied again"
    FAILURE_TOLERATED = "failure within max_failure_ratio, or continue"
    FAILURE_PAUSE = "failure: pause"
    SETTLED = "every slot runs the target spec, ready"


# (phase, input) -> next phase. A new rollout (an apply that changes what tasks run, or a
# rollback) starts afresh from any phase, whatever the old one was doing.
TABLE: dict[tuple[RolloutPhase, RolloutInput], RolloutPhase] = {
    **{(p, RolloutInput.BEGIN): RolloutPhase.UPDATING for p in RolloutPhase},
    **{(p, RolloutInput.BEGIN_ROLLBACK): RolloutPhase.ROLLING_BACK for p in RolloutPhase},
    **{(p, RolloutInput.BEGIN_CANARY): RolloutPhase.CANARY for p in RolloutPhase},
    (RolloutPhase.CANARY, RolloutInput.PROMOTE): RolloutPhase.UPDATING,
    (RolloutPhase.CANARY, RolloutInput.FAILURE_PAUSE): RolloutPhase.PAUSED,  # no previous spec
    (RolloutPhase.CANARY, RolloutInput.SETTLED): RolloutPhase.COMPLETED,  # no slot to canary
    (RolloutPhase.PAUSED, RolloutInput.RESUME): RolloutPhase.UPDATING,
    (RolloutPhase.UPDATING, RolloutInput.FAILURE_TOLERATED): RolloutPhase.UPDATING,
    (RolloutPhase.UPDATING, RolloutInput.FAILURE_PAUSE): RolloutPhase.PAUSED,
    (RolloutPhase.UPDATING, RolloutInput.SETTLED): RolloutPhase.COMPLETED,
    (RolloutPhase.ROLLING_BACK, RolloutInput.FAILURE_TOLERATED): RolloutPhase.ROLLING_BACK,
    (RolloutPhase.ROLLING_BACK, RolloutInput.FAILURE_PAUSE): RolloutPhase.PAUSED,
    (RolloutPhase.ROLLING_BACK, RolloutInput.SETTLED): RolloutPhase.ROLLED_BACK,
}


# What a transition says, by its input: an event's kind and message, with {name} (the
# service), {phase} (the phase it enters) and {why} filled in. It is said only when the
# caller names the service: BEGIN and BEGIN_ROLLBACK asked for by a command (apply,
# rollback) are said by the command's own event (`intents.rollouts_started`) and lines.
SAYS: dict[RolloutInput, tuple[str, str]] = {
    RolloutInput.BEGIN: ("rollout-started", "{name}: {why}"),
    RolloutInput.BEGIN_ROLLBACK: ("rollout-rollback", "{name}: rolling back: {why}"),
    RolloutInput.BEGIN_CANARY: ("rollout-canary", "{name}: canary: {why}"),
    RolloutInput.PROMOTE: ("rollout-promoted", "{name}: canary promoted: {why}"),
    RolloutInput.FAILURE_TOLERATED: ("rollout-failure", "{name}: {why}; continuing"),
    RolloutInput.FAILURE_PAUSE: ("rollout-paused", "{name}: paused: {why}"),
    RolloutInput.SETTLED: ("rollout-{phase}", "{name}: rollout {phase}"),
}

Said = tuple[Event, ...]


def begin(
    old: Rollout,
    total: int,
    *,
    rollback: bool = False,
    reason: str = "",
    relocating: bool = False,
    canaries: bool = False,
    said: Event | None = None,
) -> tuple[Rollout, Said]:
    """A new rollout of `total` slots (replacing `old`), forward to the new spec or back
    to the previous one; `relocating` when it only moves tasks (constraints changed);
    `canaries`: forward, canary tasks first (core/canary.py).
    `said`: an event whose service, time and reason the transition's event takes (none:
    the command that asked says it)."""
    given = RolloutInput.BEGIN_ROLLBACK if rollback else RolloutInput.BEGIN
    if canaries and not (rollback or relocating):
        given = RolloutInput.BEGIN_CANARY
    fresh = Rollout(phase=old.phase)
    changes = {"total": total, "rollback": rollback, "reason": reason, "relocating": relocating}
    return step(fresh, given, said=said, **changes)


def step(
    r: Rollout, given: RolloutInput, *, said: Event | None = None, **changes: object
) -> tuple[Rollout, Said]:
    """The one transition: look the phase up in TABLE (a pair not in it is a bug), and
    the event SAYS gives it, made from `said` (its service, its time, and its message as
    {why}; no event without it)."""
    after = replace(r, phase=TABLE[(r.phase, given)], **changes)  # type: ignore[arg-type]
    if said is None or given not in SAYS:
        return after, ()
    fill = {"name": said.service, "phase": after.phase, "why": said.message}
    kind, message = (part.format(**fill) for part in SAYS[given])
    return after, (Event(said.at, kind, message, service=said.service),)


def cue(name: str, now: float, why: str = "") -> Event:
    """What `step` needs to say a transition: the service, the time, the why."""
    return Event(now, "", why, service=name)


# -- progress within a phase -------------------------------------------------------------------
def started(r: Rollout, slots: Iterable[int]) -> Rollout:
    return replace(r, inflight=(*r.inflight, *slots))


def settle(r: Rollout, name: str, now: float) -> tuple[Rollout, Said]:
    """Every slot runs the target spec and is ready: completed (or rolled back)."""
    return step(r, RolloutInput.SETTLED, said=cue(name, now), inflight=(), healthy_since=())


def dropped(r: Rollout, slot: int) -> Rollout:
    """An in-flight slot failed (its act, or its gate): no longer in flight, one failure."""
    return replace(r, inflight=tuple(s for s in r.inflight if s != slot), failures=r.failures + 1)


def undone(r: Rollout, slot: int) -> Rollout:
    """A slot that had passed its gate failed later in the same rollout."""
    return replace(r, done=tuple(n for n in r.done if n != slot), failures=r.failures + 1)


# -- the service as its rollout moves it ------------------------------------------------------
def slot_target(ss: ServiceState, slot: int, *, refill: bool = False) -> Service:
    """The spec a slot should run: a paused rollout keeps slots it has not reached on the
    previous spec, so a failed update costs no capacity. A slot that had a task, refilled
    (`refill`: it has no live task) during a canary, outside it, gets the previous spec
    too (where its hook, if it has one, succeeded), its host forgotten too: the new spec
    runs in the canary's tasks, until promoted. (A slot that never had a task gets the
    new spec.)"""
    r = ss.rollout
    if r.paused and not r.rollback and slot not in r.done and ss.previous:
        return ss.previous
    record = ss.slot(slot)
    # a slot that had a task: its record names it, or `forget` took it (an empty record)
    had = bool(record.task) or (slot in ss.slots and record.phase is slots.SlotPhase.EMPTY)
    beside = r.in_canary and slot not in r.canary_slots() and had
    if refill and beside and ss.previous and hooks.cleared(ss.hook, ss.previous):
        return ss.previous
    if ss.previous and hooks.holds(ss):  # nothing of the new spec before its hook,
        # and the previous spec only where its own hook succeeded (it may never have)
        return ss.previous if hooks.cleared(ss.hook, ss.previous) else ss.spec
    return ss.spec


def back_to_previous(ss: ServiceState, failed: list[int]) -> ServiceState:
    """Where a failure paused an update, its failed slots go back to the previous spec,
    known good, at once: the restart backoff the new spec's failure set does not apply."""
    if not ss.rollout.paused or ss.rollout.rollback or not failed:
        return ss
    again = {n: slots.skip_backoff(ss.slot(n)) for n in failed}
    return replace(ss, slots={**ss.slots, **again})


def failure_action(
    ss: ServiceState, why: str, now: float, *, tolerable: bool = True
) -> tuple[ServiceState, Said]:
    """Apply `update.failure_action` once the failure ratio is exceeded; a failure that
    is not `tolerable` (the generation's hook) pauses or rolls back at once."""
    r = ss.rollout
    policy = ss.spec.update
    said = cue(ss.spec.name, now, why)
    if r.in_canary:  # a canary's failure is never tolerated: its traffic returns at once
        return _canary_failed(ss, why, said)
    if tolerable and (
        policy.failure_action == "continue"
        or r.failures / max(1, r.total) <= policy.max_failure_ratio
    ):
        tolerated, events = step(r, RolloutInput.FAILURE_TOLERATED, said=said, reason=why)
        return replace(ss, rollout=tolerated), events
    rollback = policy.failure_action == "rollback" and not r.relocating  # nothing to undo
    if rollback and r.phase is RolloutPhase.UPDATING and ss.previous:
        return rolled_back(ss, f"rolled back: {why}", failed=why, said=said)
    paused, events = step(
        r, RolloutInput.FAILURE_PAUSE, said=said, reason=why, inflight=(), healthy_since=()
    )
    return replace(ss, rollout=paused), events


def _canary_failed(ss: ServiceState, why: str, said: Event) -> tuple[ServiceState, Said]:
    """A canary failed (its gate, its start, a before_update hook): rolled back, whatever
    `failure_action` says (the old tasks never stopped); paused without a previous spec."""
    if ss.previous is not None:
        return rolled_back(ss, f"rolled back: canary {why}", failed=why, said=said)
    paused, events = step(
        ss.rollout, RolloutInput.FAILURE_PAUSE, said=said, reason=why, inflight=(), canary=()
    )
    return replace(ss, rollout=paused), events


def rolled_back(
    ss: ServiceState, reason: str, *, failed: str = "", said: Event | None = None
) -> tuple[ServiceState, Said]:
    """Swap to the previous spec and roll every task back the same way; a failing rollback
    pauses (never loops), since a rollback's failure action is never another rollback.
    `failed`: why the spec being left failed (then `rollback` will not return to it). The
    slots' records (`slots.renewed`; a canary's given back to their old tasks) change;
    every other durable field (core/state.py, CHANGED_BY) is carried: maintenance or
    pause, a recorded move or restore, a rebalance, a global service's hosts, the hook.
    `said`: as for `begin` (the failure action's rollback is said; the operator's is not)."""
    assert ss.previous is not None
    back, events = begin(ss.rollout, ss.wanted(), rollback=True, reason=reason, said=said)
    state = ss.through(
        Transition.ROLLBACK,
        spec=ss.previous,
        generation=ss.previous_generation or ss.generation,
        previous=ss.spec,
        previous_generation=ss.generation,
        rollout=back,
        slots=given_back(slots.renewed(ss.slots), ss.rollout),
        job=ss.job.across(ss.spec.schedule, ss.previous.schedule),
        previous_failed=failed,
    )
    return state, events


def given_back(records: dict[int, slots.SlotState], r: Rollout) -> dict[int, slots.SlotState]:
    """A canary's slots given back to the old tasks they ran beside (a canary rolled
    back, or superseded by a new apply): each such slot keeps its old task, and its
    canary task is the one to stop (drained out of the routes first, core/traffic.py)."""
    if not r.in_canary:
        return records
    empty = slots.SlotState()
    back = {n: slots.assign(records.get(n, empty), task, host) for n, task, host in r.canary}
    return {**records, **back}


def act_failed(ss: ServiceState, slot: int, line: str, now: float) -> tuple[ServiceState, Said]:
    """A start of the rollout's (a slot in flight) failed as an act: no longer in flight,
    one failure, and the failure action; other slots' failed starts leave it as it is."""
    r = ss.rollout
    if not (r.active and slot in r.inflight):
        return ss, ()
    return failure_action(replace(ss, rollout=dropped(r, slot)), line, now)


def placed(ss: ServiceState, slot: int) -> ServiceState:
    """A slot given a new task by placement (a restart or a new slot, not a move) while
    the rollout is active and has not reached it: its task is in flight, through the gate."""
    r = ss.rollout
    if r.active and slot not in r.done + r.inflight and not (hooks.holds(ss) or r.in_canary):
        return replace(ss, rollout=started(r, [slot]))
    return ss


def beside(ss: ServiceState, slot: int) -> bool:
    """Whether the slot's canary task runs beside its old task (both stay, until the
    canary is promoted or rolled back)."""
    return ss.rollout.in_canary and slot in ss.rollout.canary_slots()


# -- the gate: judging the tasks in flight ----------------------------------------------------
def gate(ss: ServiceState, found: list[Container], view: View) -> tuple[ServiceState, Effects]:
    """Judge every in-flight slot's new task; pass, wait, or fail with the failure action.
    A canary that passes stays in flight beside its old task until it is promoted."""
    r = ss.rollout
    if not r.active or not (r.inflight or r.in_canary):
        return ss, Effects()
    # a canary with no task in flight is promoted too: one the file stopped asking for
    # (update.canary 0), or whose slots were scaled away, has nothing else to end it
    ss, fx = _promotion(ss, found, view.now)
    r = ss.rollout
    if not r.inflight:
        return ss, fx
    name, spec, now = ss.spec.name, ss.spec.spec_hash(), view.now
    judged = canary.judged(ss) if r.in_canary else ss.spec
    since, seen = dict(r.healthy_since), dict(r.first_seen)
    done, inflight, failures, failed = list(r.done), [], [], []
    for n in r.inflight:
        newest = _gate_task(ss, n, [c for c in found if c.slot == n and c.spec == spec])
        if newest is not None:  # the gate runs on the controller's clock, not the host's
            seen.setdefault(n, now)
            if ready(newest):
                since.setdefault(n, now)
        verdict, why = health_gate(newest, judged, since.get(n), now, seen_at=seen.get(n))
        held = verdict == "ready" and r.in_canary  # beside its old task until promoted
        if (verdict != "wait" and not held) or newest is None:
            seen.pop(n, None)
        if held:
            inflight.append(n)
            fx = fx + Effects(waiting=(_canary_waiting(ss, n),))
        elif verdict == "ready":
            done.append(n)
            since.pop(n, None)
            r = replace(r, last_batch_at=now)
            fx = fx + _passed(n, newest, found)
        elif verdict == "fail" and newest is not None:
            failures.append(why)
            failed.append(n)
            since.pop(n, None)
            state = slots.count_failure(ss.slot(n), newest.task, now, why, ss.spec.restart)
            ss, events = set_slot(ss, n, state, now)
            fx = fx + Effects(stops=(Stop(newest, why, failure=True),), events=events)
        elif newest is None and view.holders(ss, n):
            inflight.append(n)  # on a host that did not answer: still counts in flight
            fx = fx + Effects(waiting=(_unseen_gate(ss, n, view),))
        elif newest is None:
            since.pop(n, None)  # its run never happened: the slot is decided afresh
        else:
            inflight.append(n)
            fx = fx + Effects(waiting=(Waiting(f"{name}.{n}", why, WaitKind.GATE, name),))
    r = replace(
        r,
        done=tuple(sorted(set(done))),
        inflight=tuple(inflight),
        healthy_since=tuple(sorted(since.items())),
        first_seen=tuple(sorted(seen.items())),
        failures=r.failures + len(failures),
    )
    return _gated(replace(ss, rollout=r), failures, failed, now, fx)


def _passed(n: int, newest: Container | None, found: list[Container]) -> Effects:
    """A slot's new task passed its gate: the slot's other live tasks stop."""
    old = [c for c in found if c.slot == n and c is not newest and c.live]
    by = newest.task if newest else ""
    return Effects(stops=tuple(Stop(c, f"replaced by {by}") for c in old))


def _gated(
    ss: ServiceState, failures: list[str], failed: list[int], now: float, fx: Effects
) -> tuple[ServiceState, Effects]:
    """The gate's failures, if any, through the failure action."""
    if not failures:
        return ss, fx
    ss, said = failure_action(ss, failures[-1], now)
    ss = back_to_previous(ss, failed)
    return ss, fx + Effects(events=said)


def _canary_waiting(ss: ServiceState, n: int) -> Waiting:
    """A canary task that passed, beside its old task: waiting for the other canaries (or
    for the next pass, which promotes it), or for the operator's `minidock promote`."""
    name = ss.spec.name
    if canary.due(ss):
        return Waiting(f"{name}.{n}", "canary passed, promoting", WaitKind.GATE, name)
    line = f"canary passed; `minidock promote {name}` promotes it (or rollback removes it)"
    return Waiting(f"{name}.{n}", line, WaitKind.PROMOTE, name)


def _canary_complete(ss: ServiceState, found: list[Container], spec: str) -> bool:
    """Whether every canary task the update can start has started: `update.canary` of
    them, or fewer where fewer old tasks remain to stand beside (a slot with no task takes
    none: 2 canaries for a service that had one task is one)."""
    r = ss.rollout
    if len(r.canary) >= canary.count(ss):
        return True
    mine = set(r.canary_slots())
    return not any(c.spec != spec and c.slot not in mine for c in found)


def _promotion(
    ss: ServiceState, found: list[Container], now: float
) -> tuple[ServiceState, Effects]:
    """A canary whose every task passed its gate (as the last pass judged it) is promoted
    when it is due (auto, or the operator's word): the rollout updates, and the gate
    then passes the canaries' slots, stopping their old tasks."""
    r, spec = ss.rollout, ss.spec.spec_hash()
    if not r.in_canary or not canary.due(ss) or not _canary_complete(ss, found, spec):
        return ss, Effects()
    judged = canary.judged(ss)
    since, seen = dict(r.healthy_since), dict(r.first_seen)
    for n in r.canary_slots():
        newest = _gate_task(ss, n, [c for c in found if c.slot == n and c.spec == spec])
        verdict, _ = health_gate(newest, judged, since.get(n), now, seen_at=seen.get(n))
        if n not in r.inflight or verdict != "ready":
            return ss, Effects()
    healthy = f"healthy for {format_duration(judged.update.monitor)}"
    why = "by the operator" if r.promoted else healthy
    promoted, said = step(r, RolloutInput.PROMOTE, said=cue(ss.spec.name, now, why), canary=())
    return replace(ss, rollout=promoted), Effects(events=said)


def _unseen_gate(ss: ServiceState, n: int, view: View) -> Waiting:
    """An in-flight task on a host that did not answer: it waits for the host's probes to
    count (moves), or, held on a host that is down, for the operator (does not)."""
    name, held = ss.spec.name, view.holders(ss, n)
    if any(view.hosts[h].unreachable for h in held):
        return Waiting(f"{name}.{n}", "its host is unreachable", WaitKind.HOST_PROBES, name)
    return Waiting(f"{name}.{n}", f"its host {held[0]} is down", WaitKind.HELD_DOWN, name)


def _gate_task(ss: ServiceState, n: int, new: list[Container]) -> Container | None:
    """The in-flight slot's new task: the one assigned to it (never the hosts' clocks, and
    never another task of the same spec: a move's old task has the very same spec)."""
    assigned = ss.slot(n).task
    if assigned:
        return next((c for c in new if c.task == assigned), None)
    return min(new, key=lambda c: c.task) if new else None


def failed_after_gate(
    ss: ServiceState, n: int, c: Container, why: str, now: float
) -> tuple[ServiceState, Service, Effects]:
    """A task that passed its health gate fails later in the same rollout: count it
    against the rollout (SwarmKit stops watching after `monitor`). Returns the slot's
    target spec afterwards (the failure action may pause or roll back)."""
    r = ss.rollout
    fx = Effects()
    if r.active and n in r.done and c.spec == ss.spec.spec_hash():
        ss, said = failure_action(
            replace(ss, rollout=undone(r, n)), f"{why} (after its monitor)", now
        )
        ss = back_to_previous(ss, [n])
        fx = Effects(events=said)
    return ss, slot_target(ss, n), fx


# -- advancing: the next replacements ---------------------------------------------------------
@dataclass(frozen=True)
class Outdated:
    """A slot whose task runs another spec than its target, or on a host its constraints
    no longer allow (`misplaced` says why): the rollout's work."""

    slot: int
    task: Container
    misplaced: str = ""


def _begin(ss: ServiceState, outdated: tuple[Outdated, ...], now: float) -> tuple[Rollout, Effects]:
    """The rollout's first pass: an update, or a move when every outdated task is only misplaced."""
    moving = [o for o in outdated if o.misplaced]
    relocating = len(moving) == len(outdated)
    what = f"updating {len(outdated)} tasks"
    if relocating:
        what = f"moving {len(moving)} tasks: {moving[0].misplaced}"
    r, said = begin(
        ss.rollout, ss.wanted(), relocating=relocating, said=cue(ss.spec.name, now, what)
    )
    return r, Effects(events=said)


def advance(
    ss: ServiceState,
    outdated: tuple[Outdated, ...],
    complete: bool,
    services: Mapping[str, ServiceState],
    fleet: Fleet | None,
    view: View,
) -> tuple[ServiceState, Effects]:
    """Start the next replacements, `parallelism` in flight at a time, `delay` apart;
    the rollout completes when every slot runs a ready task of the target spec."""
    name, now, r = ss.spec.name, view.now, ss.rollout
    if hooks.holds(ss):
        return hook_gate(ss, now)
    if not outdated and not r.inflight:
        if r.active and complete:
            r, said = settle(r, name, now)
            return replace(ss, rollout=r), Effects(events=said)
        return ss, Effects()
    assert fleet is not None  # reconcile builds it whenever a rollout has tasks to place
    if r.paused:
        return ss, Effects()
    if r.in_canary:
        return _canaries(ss, outdated, services, fleet, view)
    fx = Effects()
    if not r.active:
        r, fx = _begin(ss, outdated, now)
    room = _room(ss.spec, r, now)
    if not r.inflight and now < r.last_batch_at + ss.spec.update.delay:
        fx = fx + Effects(waiting=(Waiting(name, "update delay", WaitKind.DELAY, name),))
    blocked = deps_block(services, view, ss)
    due = _due(ss, outdated, view)
    fx = fx + _backing_off(ss, outdated, due, now)
    begun: list[int] = []
    for o in due[: max(0, room)]:
        if blocked:
            waits = Pending(name, o.slot, blocked[1], dependency=blocked[0])
            fx = fx + Effects(pending=(waits,))
            break
        home = ss.host_of(o.slot)  # a global service's slot: its host's
        run, replaced = _start_replacement(ss.spec, o, ss.slot(o.slot), fleet, view, home)
        fx = fx + replaced
        if run is not None:
            begun.append(o.slot)
            ss = with_slot(ss, o.slot, slots.assign(ss.slot(o.slot), run.task, run.host))
    if len(outdated) > len(begun) or begun or r.inflight:
        verb = "rolling back" if r.rollback else "updating"
        total = r.total or ss.wanted()
        count = f"{verb} {len(r.done) + len(begun)}/{total}"
        fx = fx + Effects(waiting=(Waiting(name, count, WaitKind.ROLLOUT, name),))
    return replace(ss, rollout=started(r, begun)), fx


def _due(ss: ServiceState, outdated: tuple[Outdated, ...], view: View) -> list[Outdated]:
    """The outdated slots a rollout may replace now, in the order it takes them. A slot
    whose replacement failed waits out its backoff (or stays Failed) and goes after slots
    not tried yet: the rollout moves on rather than retry one every pass. A slot with
    another live task still to stop (a superseded canary's, draining) waits for it, so
    that no slot holds three live tasks. A slot whose old task drains already goes first:
    it holds its share of parallelism."""
    live = _live_per_slot(ss, view)
    due = [
        o
        for o in outdated
        if view.now >= ss.slot(o.slot).next_start
        and not ss.slot(o.slot).failed
        and live[o.slot] < 2
    ]
    draining = view.traffic.draining if view.traffic is not None else {}
    due.sort(key=lambda o: (o.task.task not in draining, len(ss.slot(o.slot).attempts)))
    return due


def _canaries(
    ss: ServiceState,
    outdated: tuple[Outdated, ...],
    services: Mapping[str, ServiceState],
    fleet: Fleet,
    view: View,
) -> tuple[ServiceState, Effects]:
    """The canary's tasks (`update.canary` of them): each of the lowest outdated slots
    gets a task of the new spec beside its old task (on another host where one fits, as
    start-first; nothing stops), and nothing else is replaced until it is promoted. A slot
    with another live task still to stop (a superseded canary draining out of the
    routes) waits for it: a slot never holds three live tasks."""
    name, now, r = ss.spec.name, view.now, ss.rollout
    kept = tuple(e for e in r.canary if e[0] in r.inflight)  # one whose run never happened
    want, fx = canary.count(ss), Effects()
    blocked = deps_block(services, view, ss)
    live = _live_per_slot(ss, view)
    begun: list[tuple[int, str, str]] = []
    for o in sorted(outdated, key=lambda o: o.slot):
        record = ss.slot(o.slot)
        if len(kept) + len(begun) >= want:
            break
        if record.failed or now < record.next_start or live[o.slot] > 1:
            continue
        if blocked:
            waits = Pending(name, o.slot, blocked[1], dependency=blocked[0])
            fx = fx + Effects(pending=(waits,))
            break
        where = place(ss.spec, fleet, avoid=avoided(o.task.host, record))
        if where.host is None:
            fx = fx + Effects(pending=(Pending(name, o.slot, where.why),))
            continue
        run = view.run(ss.spec, o.slot, where.host, "canary")
        fx = fx + Effects(runs=(run,))
        ss = with_slot(ss, o.slot, slots.assign(record, run.task, run.host))
        begun.append((o.slot, o.task.task, o.task.host))
    r = replace(started(r, [n for n, _, _ in begun]), canary=(*kept, *begun))
    line = f"canary {len(r.canary)}/{want} beside {r.total or ss.wanted()} tasks"
    fx = fx + Effects(waiting=(Waiting(name, line, WaitKind.ROLLOUT, name),))
    return replace(ss, rollout=r), fx


def _live_per_slot(ss: ServiceState, view: View) -> Counter[int]:
    """How many live tasks each of the service's slots holds, as the pass sees them."""
    return Counter(c.slot for c in view.mine if c.service == ss.spec.name and c.live)


def hook_gate(ss: ServiceState, now: float) -> tuple[ServiceState, Effects]:
    """The generation's before_update hook comes before its first task: wait while it is
    to run or runs; once it failed, the rollout fails (paused or rolled back at once: no
    task of a spec whose hook failed may start, whatever `continue` tolerates)."""
    name, r, record = ss.spec.name, ss.rollout, ss.hook
    if not record.failed or record.generation != ss.generation:
        line = hooks.waiting_line(record, ss.generation, now)
        return ss, Effects(waiting=(Waiting(name, line, WaitKind.HOOK, name),))
    if r.active and not r.rollback:
        failed, said = failure_action(ss, record.why, now, tolerable=False)
        return failed, Effects(events=said)
    return ss, Effects()  # paused (exit 1), or its first generation (core.hooks.failing_hooks)


def _backing_off(
    ss: ServiceState, outdated: Sequence[Outdated], due: Sequence[Outdated], now: float
) -> Effects:
    """The outdated slots whose failed replacement waits out its backoff: the rollout goes
    on when it expires."""
    name, later = ss.spec.name, [o.slot for o in outdated if o not in due]
    lines = (
        Waiting(f"{name}.{n}", f"restart backoff, {left:.0f}s left", WaitKind.BACKOFF, name)
        for n in later
        if (left := ss.slot(n).next_start - now) > 0 and not ss.slot(n).failed
    )
    return Effects(waiting=tuple(lines))


def _room(spec: Service, r: Rollout, now: float) -> int:
    """How many more replacements may start now: parallelism, less those in flight, and
    none before `update.delay` has passed since the last gate."""
    policy = spec.update
    if now < r.last_batch_at + policy.delay:
        return 0
    return policy.parallelism - len(r.inflight)


def _start_replacement(
    target: Service,
    o: Outdated,
    record: slots.SlotState,
    fleet: Fleet,
    view: View,
    home: str = "",
) -> tuple[Run | None, Effects]:
    """start-first: a new task on another host first. A move off a host the constraints no
    longer allow (the same spec) surges start-first wherever the order, when another host
    has room, as Swarm and Kubernetes surge: nothing of the new task clashes with the old.
    Stop-first (the order, or the old task holding a host port the new one needs): the old
    task is stopped by the run, once it has drained out of every route (`_stop_first`).
    A global service's slot is its host's (`home`): its task is replaced there, stop-first,
    which is in place unless the slot's old task runs on a host that left the service (its
    constraints changed, and the slot's number went to a host that joined)."""
    old, name = o.task, target.name
    verb = f"move: {o.misplaced}" if o.misplaced else "update"
    fx = Effects()
    if target.pinned or target.mode == "global":  # its host (its data): in place, stop-first
        host = home if target.mode == "global" and home else old.host
        where = place_replacing(target, fleet, old, only=host)
        if where.host is None:
            return None, Effects(pending=(Pending(name, o.slot, where.why),))
        return _stop_first(target, o, host, verb, view, fx)
    relocating = bool(o.misplaced) and old.spec == target.spec_hash()
    if target.update.order == "start-first" or relocating:
        where = place(target, fleet, avoid=avoided(old.host, record))
        if where.host is not None:
            run = view.run(target, o.slot, where.host, f"{verb} (start-first)")
            return run, Effects(runs=(run,))
        if target.update.order == "start-first":
            if not set(service_ports(target)) & set(old.host_ports):
                return None, Effects(pending=(Pending(name, o.slot, where.why),))
            message = f"{name}.{o.slot}: host port held by the old task, replacing stop-first"
            event = Event(view.now, "rollout-stop-first", message, service=name, slot=o.slot)
            fx = Effects(events=(event,))
    where = place_replacing(target, fleet, old, avoid=(record.avoid,) if record.avoid else ())
    if where.host is None:
        return None, fx + Effects(pending=(Pending(name, o.slot, where.why),))
    return _stop_first(target, o, where.host, verb, view, fx)


def _stop_first(
    target: Service, o: Outdated, host: str, verb: str, view: View, fx: Effects
) -> tuple[Run | None, Effects]:
    """The run that stops the old task and starts its replacement, once the old task is
    out of every route the proxies hold (kamal-proxy's order). Until then the old task
    drains (`Effects.drains`: the traffic gate records it and says so) and the slot is
    not in flight: the replacement is decided, and counted, only when it can start."""
    if view.holds(o.task):
        return None, fx + Effects(drains=(o.task,))
    run = view.run(target, o.slot, host, verb, replaces=o.task)
    return run, fx + Effects(runs=(run,))
