"""Durable state carried by construction (issue 43, deliverable 2): every transition of a
service's state (an apply, `scale`, every kind of rollback, `promote`, `reset`, maintenance
and pause) keeps every field its row of `core.state.CHANGED_BY` does not name. Each test
below starts from one state with a value other than the default in every field, runs the
transition as the command (or the pass) runs it, and holds every other field to its value:
a field added to ServiceState fails here until it has a row and a value below."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.core import (
    admit,
    begin_restore,
    promote,
    reset,
    rollback,
    scale,
    set_drained,
    set_serving,
)
from minidock.core.autoscale import Scaling
from minidock.core.backing import Backups
from minidock.core.rollout import failure_action
from minidock.core.schedule import JobRecord
from minidock.core.serving import SERVING, in_maintenance, paused
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.state import (
    CHANGED_BY,
    ControllerState,
    HookOutcome,
    HookRecord,
    Rollout,
    RolloutPhase,
    ServiceState,
    Transition,
)
from minidock.core.volumes import MovePhase, VolumeMove
from minidock.model import Cluster, HealthCheck, Route, UpdatePolicy, Volume
from tests.sim import World, hosts, svc

ROUTE = (Route("", "/", 8080),)
HC = HealthCheck(("wget", "-qO-", "http://127.0.0.1:8080/"), interval=1, timeout=1, retries=2)
POLICY = UpdatePolicy(failure_action="rollback", canary=1, promote="manual")


def web(image: str, replicas: int = 3) -> object:
    return svc(image=image, replicas=replicas, ingress=ROUTE, update=POLICY)


SPEC, PREVIOUS, OLDER = web("web:6"), web("web:5"), web("web:4")

# one value other than its default for every field of ServiceState
FULL = ServiceState(
    spec=SPEC,  # type: ignore[arg-type]
    generation=4,
    previous=PREVIOUS,  # type: ignore[arg-type]
    previous_generation=3,
    rollout=Rollout(RolloutPhase.UPDATING, total=3, done=(1,), inflight=(2,), failures=2),
    slots={
        1: SlotState(SlotPhase.RUNNING, task="t1", host="host1"),
        2: SlotState(SlotPhase.FAILED, task="t2", host="host2", attempts=(1.0, 2.0)),
    },
    removed=True,
    global_slots={"host1": 1},
    rebalance=((3, "host3"),),
    previous_failed="web:5 crashed",
    job=JobRecord(due=100.0, skipped=1),
    hook=HookRecord(4, "abc", 1, "run1", outcome=HookOutcome.SUCCEEDED, cleared="abc"),
    older=(OLDER,),  # type: ignore[arg-type]
    serving=in_maintenance("back soon", 50.0),
    moves={1: VolumeMove("host2", "host1", MovePhase.COPYING, since=40.0)},
    backups=Backups(due=3600.0, verifying=(2,)),
    scaling=Scaling(4, changed=30.0, reason="out: 180 req/s", rate=180.0),
)
CANARY = Rollout(RolloutPhase.CANARY, total=3, inflight=(1,), canary=((1, "t0", "host3"),))


def _state(ss: ServiceState) -> ControllerState:
    return ControllerState(cluster="test", generation=ss.generation, services={"web": ss})


def _applied(spec: object) -> Callable[[ServiceState], ServiceState]:
    def run(ss: ServiceState) -> ServiceState:
        cluster = Cluster("test", "cluster.toml", "inventory.toml", (spec,))  # type: ignore[arg-type]
        return admit(_state(ss), cluster, 9, retry=True).services["web"]

    return run


def _through(command: Callable[[ControllerState], ControllerState]) -> Callable[..., ServiceState]:
    return lambda ss: command(_state(ss)).services["web"]


def _failed(ss: ServiceState) -> ServiceState:
    return failure_action(ss, "task exited 1", 60.0, tolerable=False)[0]


# (transition, what it is, the state it starts from, the transition as it runs)
CASES: list[tuple[Transition, str, ServiceState, Callable[[ServiceState], ServiceState]]] = [
    (Transition.ADMIT, "apply of a changed spec", FULL, _applied(web("web:7"))),
    (Transition.ADMIT, "apply of a new count", FULL, _applied(web("web:6", 5))),
    (
        Transition.ADMIT,
        "apply during a canary",
        replace(FULL, rollout=CANARY),
        _applied(web("web:7")),
    ),
    (
        Transition.ADMIT,
        "the same spec again, resuming a paused update",
        replace(FULL, rollout=Rollout(RolloutPhase.PAUSED), removed=False),
        _applied(SPEC),
    ),
    (Transition.SCALE, "scale", FULL, _through(lambda s: scale(s, "web", 7, 9))),
    (
        Transition.ROLLBACK,
        "the operator's rollback",
        replace(FULL, removed=False),
        _through(lambda s: rollback(s, "web", force=True)),
    ),
    (Transition.ROLLBACK, "update.failure_action's rollback", FULL, _failed),
    (Transition.ROLLBACK, "a failed canary's rollback", replace(FULL, rollout=CANARY), _failed),
    (
        Transition.PROMOTE,
        "promote",
        replace(FULL, rollout=CANARY),
        _through(lambda s: promote(s, "web")),
    ),
    (Transition.RESET, "reset", FULL, _through(lambda s: reset(s, "web"))),
    (
        Transition.SERVE,
        "maintenance off",
        FULL,
        _through(lambda s: set_serving(s, "web", SERVING)),
    ),
]


def test_the_table_has_a_row_for_every_field() -> None:
    assert set(CHANGED_BY) == {f.name for f in dataclasses.fields(ServiceState)}


def test_the_starting_state_has_a_value_other_than_the_default_in_every_field() -> None:
    for f in dataclasses.fields(ServiceState):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue  # spec and generation: no default, and every transition case sets them
        assert getattr(FULL, f.name) != default, f"give FULL a value of {f.name}"


@pytest.mark.parametrize(
    ("transition", "before", "run"),
    [pytest.param(t, before, run, id=what) for t, what, before, run in CASES],
)
def test_every_field_outside_its_row_survives_the_transition(
    transition: Transition,
    before: ServiceState,
    run: Callable[[ServiceState], ServiceState],
) -> None:
    after = run(before)
    assert after != before  # the transition happened
    for f in dataclasses.fields(ServiceState):
        if transition not in CHANGED_BY[f.name]:
            assert getattr(after, f.name) == getattr(before, f.name), f"{transition} lost {f.name}"


def test_every_transition_is_in_a_case() -> None:
    assert {t for t, *_ in CASES} == set(Transition)


def test_a_transition_that_sets_a_field_outside_its_row_is_refused() -> None:
    with pytest.raises(AssertionError, match="RESET may not change moves, serving"):
        FULL.through(Transition.RESET, slots={}, moves={}, serving=in_maintenance("", 0.0))


# -- what the table means, on the model-level fleet (issue 43, breaks 1, 7 and 8) ---------
DB = svc("db", volumes=(Volume("data", "/data"),))
SNAPSHOT = (("data", "4f2a9c1e" + "0" * 56),)


def test_a_restore_cut_mid_stream_holds_its_slot_across_apply_scale_and_rollback() -> None:
    # break 1: an apply that changed the pinned service (one env value), a scale or a
    # rollback dropped the recorded restore, and the next pass started the task on the
    # half-written volume
    w = World(hosts(3))
    w.apply(DB)
    w.converge()
    (task,) = w.live("db")
    w.state = begin_restore(w.state, "db", 1, task.host, SNAPSHOT, w.now)
    for _ in range(3):  # stopped, then streaming: the stream never ends (the controller was
        w.step()  # killed mid-stream; nothing here carries out a copy)
    assert w.state.services["db"].moves[1].phase is MovePhase.COPYING
    commands = {
        "apply": lambda: w.apply(replace(DB, env=(("LOG", "debug"),))),
        "scale": lambda: setattr(w, "state", scale(w.state, "db", 1, w.generation + 1)),
        "rollback": lambda: setattr(w, "state", rollback(w.state, "db")),
    }
    for name, command in commands.items():
        command()
        for _ in range(4):
            plan = w.step()
            assert not plan.run, f"after {name}: {plan.run}"
        assert w.state.services["db"].moves[1].phase is MovePhase.COPYING, name
    assert not w.live("db")


def _served(*, failing: bool = False) -> World:
    """web:5 converged behind a route, in maintenance; then web:6 (web:broken) applied."""
    w = World(hosts(3))
    policy = UpdatePolicy(failure_action="rollback", monitor=0.0)
    given = {"replicas": 2, "ingress": ROUTE, "update": policy, "health": HC}
    w.apply(svc(image="web:5", **given))
    w.converge()
    w.state = set_serving(w.state, "web", in_maintenance("back soon", w.now))
    image = "web:broken" if failing else "web:6"
    w.apply(svc(image=image, **given))
    return w


@pytest.mark.parametrize("kind", ["the operator's", "failure_action's"])
def test_a_rollback_keeps_maintenance_on(kind: str) -> None:
    # break 7: every rollback switched maintenance and pause off
    w = _served(failing=kind == "failure_action's")
    if kind == "the operator's":
        w.step()
        w.state = rollback(w.state, "web")
    w.converge()
    ss = w.state.services["web"]
    assert (ss.spec.image, ss.rollout.phase) == ("web:5", RolloutPhase.ROLLED_BACK)
    assert ss.serving.line() == in_maintenance("back soon", 0.0).line()


def test_scale_after_the_operators_rollback_scales_the_rolled_back_to_spec() -> None:
    # break 8: `scale` after `rollback web` (web:6 back to web:5) rolled forward to web:6
    w = _served()
    w.converge()
    w.state = rollback(w.state, "web")
    w.converge()
    w.state = scale(w.state, "web", 3, w.generation + 1)
    w.converge()
    assert w.images() == ["web:5"] * 3
    assert w.rollout().phase == "rolled_back"
    w.state = rollback(w.state, "web")  # forward again: the count is kept
    w.converge()
    assert w.images() == ["web:6"] * 3


def test_scale_after_an_automatic_rollback_keeps_the_count_and_never_retries() -> None:
    # break 8: after a failed update rolled back, `scale` retried the failed image, which
    # failed again and rolled back to the old count
    w = _served(failing=True)
    w.converge()
    assert w.rollout().phase == "rolled_back"
    w.state = scale(w.state, "web", 3, w.generation + 1)
    before = len(w.log)
    plan = w.converge()
    assert w.images() == ["web:5"] * 3
    assert "web:broken" not in {r.service.image for p in w.log[before:] for r in p.run}
    assert w.state.services["web"].previous_failed  # `rollback` still refuses to go back
    assert not plan.run


@pytest.mark.parametrize("mode", ["maintenance", "pause"])
def test_the_operators_rollback_keeps_maintenance_and_pause(mode: str) -> None:
    w = _served()
    w.step()
    held = in_maintenance("back soon", w.now) if mode == "maintenance" else paused(10.0, w.now)
    w.state = set_serving(w.state, "web", held)
    w.state = rollback(w.state, "web")
    w.converge()
    assert w.state.services["web"].serving == held


def test_a_pruned_service_has_nothing_to_roll_back() -> None:
    w = _served()
    w.converge()
    w.apply(DB)  # web pruned
    with pytest.raises(ValueError, match="service web was pruned: it has nothing to roll back"):
        rollback(w.state, "web")


# -- the operator's commands drawn in any order (a focused property) ---------------------
WEB_POLICY = UpdatePolicy(canary=1, promote="manual", canary_monitor=0.0, monitor=0.0)


def _web(image: int, replicas: int) -> object:
    return svc(image=f"web:{image}", replicas=replicas, ingress=ROUTE, update=WEB_POLICY, health=HC)


OPERATOR = ["apply", "scale", "rollback", "promote", "reset", "drain", "on", "off", "pause"]
COMMANDS = st.lists(
    st.sampled_from([*OPERATOR, "rollback db"]),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(commands=COMMANDS, counts=st.lists(st.integers(1, 3), min_size=8, max_size=8))
def test_any_commands_carry_a_recorded_restore_and_the_serving_mode(
    commands: list[str], counts: list[int]
) -> None:
    """A restore cut mid-stream (db.1) and web's serving mode survive any sequence of
    apply, scale, rollback, promote, reset, drain; during a canary no old task is replaced by the
    new spec (the canary never grows past update.canary), and no slot ever holds three
    live tasks."""
    w = World(hosts(3))
    image, replicas = 5, 2
    w.apply(DB, _web(image, replicas))
    w.converge()
    (task,) = w.live("db")
    w.state = begin_restore(w.state, "db", 1, task.host, SNAPSHOT, w.now)
    w.step()
    w.step()
    serving, had = w.state.services["web"].serving, set[int]()
    for command, count in zip(commands, counts, strict=False):
        db_env = (("GEN", str(image)),)
        if command == "apply":
            image, replicas = image + 1, count
            w.apply(replace(DB, env=db_env), _web(image, replicas))
            had = {c.slot for c in w.live("web")}  # a slot that had a task: its old spec
        elif command == "scale":
            w.state = scale(w.state, "web", count, w.generation + 1)
            w.generation += 1
        elif command in ("rollback", "rollback db"):
            with contextlib.suppress(ValueError):  # nothing to go back to
                w.state = rollback(w.state, command.split()[-1] if " " in command else "web")
        elif command == "promote":
            with contextlib.suppress(ValueError):  # no canary
                w.state = promote(w.state, "web")
        elif command == "drain":  # one host drained at a time
            for h in w.hosts:
                w.state = set_drained(w.state, h.name, h.name == f"host{count}")
        elif command == "reset":
            w.state = reset(reset(w.state, "web"), "db")
        else:
            serving = {
                "on": in_maintenance("back soon", w.now),
                "off": SERVING,
                "pause": paused(10.0, w.now),
            }[command]
            w.state = set_serving(w.state, "web", serving)
        for _ in range(3):
            w.step()
            ss = w.state.services["web"]
            assert w.state.services["db"].moves[1].phase is MovePhase.COPYING
            assert not w.live("db")  # never on the half-written volume
            assert ss.serving == serving
            assert all(len(tasks) <= 2 for tasks in w.slots("web").values())
            had &= set(ss.slots)  # a slot scaled away (its record gone) never had a task
            if ss.rollout.in_canary:  # (a slot that never had a task gets the new spec)
                beside = had - set(ss.rollout.canary_slots())
                newest = ss.spec.spec_hash()
                assert not [c for c in w.live("web") if c.spec == newest and c.slot in beside]
