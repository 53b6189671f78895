"""Supervision: restart policy and backoff, the crash-loop limit, desired stopped and
dependencies, on the model-level World (tests/sim.py) with its injected clock (`w.now`).

Tasks here mostly exit when the test says so (`exit_task`), at the World's current time, so
every timing below is exact: no test sleeps. The scenarios that need no hand-made exit
(a crash:1 image crash-looping to Failed, desired stopped and back, stopping in dependency
order) take the `world` fixture and run on RunnerWorld too: the real `run_pass` over
FakeDocker and a real Store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from minidock.act.acts import Acts
from minidock.core import Plan, SlotPhase, SlotState, reconcile, reset
from minidock.core.slots import account_exit, count_failure
from minidock.core.supervise import CARRIED_BACKOFF, backoff, carried, should_restart
from minidock.masking import kept_masker
from minidock.model import (
    Container,
    HealthCheck,
    Observed,
    RestartCondition,
    RestartPolicy,
    Service,
    UpdatePolicy,
)
from minidock.runner import PassResult, run_pass
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode, verdict
from tests.fakes import FakeExecutor, ok
from tests.sim import MakeWorld, RunnerWorld, World, host, hosts, svc

EXIT_OK, EXIT_FAILED, EXIT_NOT_CONVERGED = ExitCode.OK, ExitCode.FAILED, ExitCode.NOT_CONVERGED

HC = HealthCheck(("true",))


def fleet(n: int = 2) -> World:
    return World(hosts(n))


def policy(**kw: object) -> RestartPolicy:
    base: dict[str, object] = {
        "condition": "any",
        "delay": 2.0,
        "max_delay": 8.0,
        "max_attempts": 0,
        "window": 1000.0,
    }
    return RestartPolicy(**{**base, **kw})  # type: ignore[arg-type]


def live_in(w: World, service: str, slot: int) -> Container:
    (c,) = [c for c in w.live(service) if c.slot == slot]
    return c


def exit_task(w: World, service: str, slot: int, code: int = 1) -> Container:
    """The slot's live task exits now, with `code`."""
    c = live_in(w, service, slot)
    gone = replace(c, state="exited", exit_code=code, finished_at=w.now)
    w.containers[c.host] = [gone if x.id == c.id else x for x in w.containers[c.host]]
    return gone


def at(w: World, t: float) -> Plan:
    """One pass at exactly time t (acts and records, like the runner)."""
    w.now = t
    plan = w.plan()
    w.act(plan)
    w.state = plan.state
    w.log.append(plan)
    return plan


def runs_of(plan: Plan, service: str = "web") -> list[int]:
    return [r.slot for r in plan.run if r.service.name == service]


def slot(w: World, n: int = 1, service: str = "web") -> SlotState:
    return w.state.services[service].slot(n)


def exit_code(plan: Plan) -> int:
    """The verdict of a pass that made `plan` and whose acts all succeeded."""
    return verdict(PassResult(plan, Observed({})))


# -- restart policy and backoff -------------------------------------------------------------
def test_backoff_doubles_from_delay_and_is_capped_at_max_delay() -> None:
    p = policy(delay=1.0, max_delay=10.0)
    assert [backoff(p, n) for n in range(8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


@pytest.mark.parametrize(
    ("condition", "code", "restarts"),
    [
        ("any", 0, True),
        ("any", 1, True),
        ("any", 137, True),
        ("on-failure", 0, False),
        ("on-failure", 1, True),
        ("on-failure", None, True),  # never started: a failure
        ("none", 0, False),
        ("none", 1, False),
    ],
)
def test_should_restart_judges_the_exit_code(
    condition: RestartCondition, code: int | None, restarts: bool
) -> None:
    assert should_restart(policy(condition=condition), code) is restarts


@pytest.mark.parametrize(
    ("condition", "code", "restarts"),
    [
        ("any", 0, True),
        ("any", 3, True),
        ("on-failure", 0, False),
        ("on-failure", 3, True),
        ("none", 0, False),
        ("none", 3, False),
    ],
)
def test_an_exited_task_is_replaced_in_its_slot_by_condition(
    condition: RestartCondition, code: int, restarts: bool
) -> None:
    w = fleet()
    w.apply(svc(replicas=2, restart=policy(condition=condition, delay=0.0)))
    w.converge()
    untouched = slot(w, 1)  # a running slot's record: its phase and its task, no failures
    exit_task(w, "web", 2, code)
    plan = at(w, w.now + 1)
    assert [s.container.slot for s in plan.stop] == [2]  # the exited task is removed either way
    assert runs_of(plan) == ([2] if restarts else [])
    if restarts:
        assert plan.run[0].restart
        assert plan.run[0].reason == "restart"
        assert len(slot(w, 2).attempts) == 1
    else:
        assert slot(w, 2).complete
        assert slot(w, 2).attempts == ()  # not a failure: never counted toward the limit
        assert f"exited with code {code}" in slot(w, 2).last_exit
        assert at(w, w.now + 100).converged  # a completed slot is left alone
        assert exit_code(w.log[-1]) == EXIT_OK
    assert slot(w, 1) == untouched  # the other slot is untouched


def test_backoff_timing_doubles_between_restarts_and_is_capped() -> None:
    """delay 2 s, max_delay 8 s: each restart is due exactly 2, 4, 8, 8 s after its exit."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=2.0, max_delay=8.0)))
    at(w, 1000.0)
    t = 1000.0
    for expected in (2.0, 4.0, 8.0, 8.0):
        t += 5.0
        w.now = t
        exit_task(w, "web", 1)
        first = at(w, t)  # the exit is seen: counted, backing off
        assert runs_of(first) == []
        assert slot(w).next_start == t + expected
        assert any("restart backoff" in line for line in first.waiting)
        assert exit_code(first) == EXIT_NOT_CONVERGED
        early = at(w, t + expected - CARRIED_BACKOFF - 0.01)
        assert runs_of(early) == []
        assert exit_code(early) == EXIT_NOT_CONVERGED
        due = at(w, t + expected)
        assert runs_of(due) == [1]
        assert [r.after for r in due.run] == [0.0]
        t += expected
    assert len(slot(w).attempts) == 4


def test_a_short_backoff_is_carried_by_the_pass_that_counts_the_exit() -> None:
    """delay 100 ms: the pass that sees the exit counts it and decides the restart, its
    start held for the backoff's rest (Run.after); the slot is assigned, not backing off.
    A backoff longer than CARRIED_BACKOFF waits for a later pass, as before."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=0.1, max_delay=8.0)))
    at(w, 1000.0)
    exit_task(w, "web", 1)
    seen = at(w, 1005.0)
    assert runs_of(seen) == [1]
    assert [r.after for r in seen.run] == [pytest.approx(0.1)]
    assert slot(w).next_start == pytest.approx(1005.1)
    assert slot(w).phase is SlotPhase.STARTING
    assert not any("restart backoff" in line for line in seen.waiting)
    # the next failures back off 0.2, 0.4 (carried), then 0.8 s (longer: a later pass)
    for delay, carried_now in ((0.2, True), (0.4, True), (0.8, False)):
        t = w.now + 5.0
        w.now = t
        exit_task(w, "web", 1)
        plan = at(w, t)
        assert (runs_of(plan) == [1]) is carried_now
        if carried_now:
            assert [r.after for r in plan.run] == [pytest.approx(delay)]
        else:
            assert any("restart backoff" in line for line in plan.waiting)
            assert [r.after for r in at(w, t + delay).run] == [0.0]


def test_a_carried_backoff_holds_the_start_never_sooner() -> None:
    """The start decided with the rest of its backoff (Run.after) runs `docker run` no
    sooner than that after its acts began (which is after the decision)."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=0.3, max_delay=8.0)))
    at(w, 1000.0)
    exit_task(w, "web", 1)
    w.now = 1005.0
    (run,) = w.plan().run
    assert run.after == pytest.approx(0.3)
    started: list[float] = []

    def handler(h, argv, stdin):  # type: ignore[no-untyped-def]
        if argv[:2] in (["docker", "run"], ["docker", "create"]):
            started.append(time.monotonic())
        return ok()

    acts = Acts(FakeExecutor(handler), w.inventory, "test", w.now)
    acts.networked.add(run.host)  # its network confirmed: the start alone is timed
    asyncio.run(acts.run(run))
    assert not acts.failures
    assert len(started) == 1
    assert started[0] >= acts.begun + run.after


def test_carried_is_the_backoffs_rest_up_to_its_bound() -> None:
    assert carried(0.0, 100.0) == 0.0  # no backoff, or over: at once
    assert carried(99.0, 100.0) == 0.0
    assert carried(100.25, 100.0) == 0.25
    assert carried(100.0 + CARRIED_BACKOFF, 100.0) == CARRIED_BACKOFF
    assert carried(100.01 + CARRIED_BACKOFF, 100.0) is None


def test_attempts_are_counted_per_slot() -> None:
    w = fleet()
    w.apply(svc(replicas=2, restart=policy(delay=1.0, max_delay=60.0)))
    w.converge()
    t = w.now
    exit_task(w, "web", 1)
    at(w, t)
    at(w, t + 1)  # slot 1 restarted
    w.now = t + 2
    exit_task(w, "web", 1)
    exit_task(w, "web", 2)
    at(w, t + 2)
    assert len(slot(w, 1).attempts) == 2
    assert len(slot(w, 2).attempts) == 1
    assert slot(w, 1).next_start == t + 2 + 2.0  # second failure: twice the delay
    assert slot(w, 2).next_start == t + 2 + 1.0  # its own first failure


def test_attempts_outside_the_window_expire_and_backoff_starts_over() -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=1.0, max_delay=60.0, max_attempts=3, window=30.0)))
    at(w, 1000.0)
    exit_task(w, "web", 1)
    at(w, 1000.0)
    at(w, 1001.0)  # restart 1
    w.now = 1010.0
    exit_task(w, "web", 1)
    at(w, 1010.0)
    assert len(slot(w).attempts) == 2
    at(w, 1012.0)  # restart 2
    w.now = 1035.0  # the first failure (t=1000) is now 35 s old: outside the window
    exit_task(w, "web", 1)
    plan = at(w, 1035.0)
    assert slot(w).attempts == (1010.0, 1035.0)
    assert not slot(w).failed  # only 2 failures within the window, not 3
    assert slot(w).next_start == 1035.0 + 2.0
    w.now = 1100.0  # long after all of them
    at(w, 1100.0)
    exit_task(w, "web", 1)
    at(w, 1100.0)
    assert slot(w).attempts == (1100.0,)
    assert slot(w).next_start == 1100.0 + 1.0  # backoff back at `delay`
    assert exit_code(plan) == EXIT_NOT_CONVERGED


def test_window_zero_never_expires_attempts() -> None:
    s = SlotState()
    p = policy(window=0.0, max_attempts=0)
    for i, t in enumerate((0.0, 1e6, 2e6)):
        s = count_failure(s, f"t{i}", t, "x", p)
    assert s.attempts == (0.0, 1e6, 2e6)


# -- the crash-loop limit ---------------------------------------------------------------------
def crash_loop(w: World, limit: int, step: float = 10.0) -> list[Plan]:
    """Let slot 1 crash `limit` times, a pass each time; return every pass's plan."""
    plans = [at(w, w.now)] if not w.live("web") else []
    for _ in range(limit):
        w.now += step
        exit_task(w, "web", 1)
        plans.append(at(w, w.now))  # the exit is seen and counted
        plans.append(at(w, w.now + step))  # past the backoff: restarted, unless Failed
    return plans


def test_crash_loop_is_failed_exactly_at_max_attempts() -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=1.0, max_delay=4.0, max_attempts=3, window=300.0)))
    plans = crash_loop(w, 2)
    assert not slot(w).failed
    assert sum(len(runs_of(p)) for p in plans) == 3  # the first and 2 restarts
    plans += crash_loop(w, 1)
    assert slot(w).failed
    assert sum(len(runs_of(p)) for p in plans) == 3  # exactly 3 attempts, no 4th
    assert "exited with code 1" in slot(w).last_exit
    events = [e for p in plans for e in p.events if e.kind == "failed"]
    assert len(events) == 1
    assert events[0].service == "web"
    assert events[0].slot == 1
    assert plans[-1].failed_slots() == [("web", 1, slot(w).last_exit)]
    assert exit_code(plans[-1]) == EXIT_FAILED


def test_max_attempts_one_fails_on_the_first_failure() -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(max_attempts=1)))
    plans = crash_loop(w, 1)
    assert slot(w).failed
    assert sum(len(runs_of(p)) for p in plans) == 1


def test_max_attempts_zero_is_unlimited() -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=1.0, max_delay=2.0, max_attempts=0, window=0.0)))
    plans = crash_loop(w, 25)
    assert not slot(w).failed
    assert len(slot(w).attempts) == 25
    assert sum(len(runs_of(p)) for p in plans) == 26


def failed_world(**kw: object) -> World:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=1.0, max_delay=2.0, max_attempts=2, window=50.0), **kw))
    crash_loop(w, 2)
    assert slot(w).failed
    return w


def test_failed_is_never_revived_by_reconcile() -> None:
    w = failed_world()
    for t in (1, 10, 60, 500, 5000):  # well past the backoff and the window
        plan = at(w, w.now + t)
        assert plan.run == ()
        assert plan.failed_slots()
        assert exit_code(plan) == EXIT_FAILED
    assert w.live("web") == []


def test_failed_survives_a_controller_restart(tmp_path: Path) -> None:
    w = failed_world()
    with SQLiteStore.open(tmp_path) as store:
        store.commit(w.state, [])
    with SQLiteStore.open(tmp_path) as store:
        w.state = store.load()
    assert slot(w).failed
    assert at(w, w.now + 1000).run == ()


def test_backoff_timer_survives_a_controller_restart(tmp_path: Path) -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=30.0, max_delay=60.0)))
    at(w, 1000.0)
    w.now = 1005.0
    exit_task(w, "web", 1)
    at(w, 1005.0)
    with SQLiteStore.open(tmp_path) as store:
        store.commit(w.state, [])
    with SQLiteStore.open(tmp_path) as store:
        w.state = store.load()
    assert slot(w).next_start == 1035.0
    assert runs_of(at(w, 1034.0)) == []
    assert runs_of(at(w, 1035.0)) == [1]


def forgotten(record: SlotState) -> SlotState:
    """A slot's record once its failures are forgotten (`reset`, a changed apply): its
    attempts, Failed and backoff gone; which task it names, and where, kept."""
    return SlotState(
        task=record.task,
        host=record.host,
        counted=record.counted,
        last_exit=record.last_exit,
        avoid=record.avoid,
    )


def test_reset_clears_failed_and_the_slot_runs_again() -> None:
    w = failed_world()
    before = slot(w)
    w.state = reset(w.state, "web")
    assert slot(w) == forgotten(before)
    plan = at(w, w.now + 1)
    assert runs_of(plan) == [1]
    assert not plan.failed_slots()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"env": (("MODE", "a"),)}, {}, id="env"),
        pytest.param({}, {"image": "web:6"}, id="image"),
    ],
)
def test_an_apply_that_changes_the_service_clears_failed(
    world: MakeWorld, before: dict[str, object], after: dict[str, object]
) -> None:
    """Merged with test_reconcile's test_admit_keeps_previous_spec_and_clears_failures: a
    crash:1 task crash-loops to Failed (through the runner, on RunnerWorld); an apply that
    changes the service clears its failures (its record kept), keeps the previous spec, and
    the slot runs again."""
    w = world(1)
    restart = policy(delay=1.0, max_delay=2.0, max_attempts=2, window=50.0)
    w.apply(svc(**{"image": "crash:1", "restart": restart, **before}))
    w.run_until(lambda p: p.state.services["web"].slot(1).failed)
    assert w.state.services["web"].slot(1).failed
    record = w.state.services["web"].slot(1)
    w.apply(svc(**{"image": "crash:1", "restart": restart, **after}))
    ss = w.state.services["web"]
    assert not ss.slot(1).failed
    assert slot(w) == forgotten(record)
    assert ss.previous is not None
    assert ss.previous.image == "crash:1"
    assert runs_of(w.step()) == [1]


def test_an_identical_apply_keeps_failed() -> None:
    w = failed_world()
    w.apply(svc(restart=policy(delay=1.0, max_delay=2.0, max_attempts=2, window=50.0)))
    assert slot(w).failed
    assert at(w, w.now + 1).run == ()


def test_an_unhealthy_task_counts_toward_the_limit() -> None:
    w = fleet(1)
    w.apply(svc(health=HC, restart=policy(delay=1.0, max_attempts=2)))
    at(w, 1000.0)
    for _ in range(2):
        c = live_in(w, "web", 1)
        w.containers[c.host] = [replace(c, health="unhealthy", health_log="refused")]
        plan = at(w, w.now + 10)
        assert [s.container.id for s in plan.stop] == [c.id]
        assert plan.stop[0].failure
        at(w, w.now + 10)
    assert slot(w).failed
    assert "unhealthy: refused" in slot(w).last_exit
    failed = [e for p in w.log for e in p.events if e.kind == "failed"]
    assert [(e.service, e.slot) for e in failed] == [("web", 1)]  # the event log says so


def test_the_same_exit_is_never_counted_twice() -> None:
    w = fleet(1)
    w.apply(svc(restart=policy(delay=100.0, max_delay=100.0)))
    at(w, 1000.0)
    w.now = 1001.0
    gone = exit_task(w, "web", 1)
    for t in (1001.0, 1002.0, 1003.0):
        # decided but never acted on: the `docker rm` did not happen
        plan = reconcile(w.cluster, w.inventory, w.observe(), w.state, t)  # type: ignore[arg-type]
        w.state = plan.state
        assert [s.container.id for s in plan.stop] == [gone.id]
    assert slot(w).attempts == (1001.0,)
    assert slot(w).counted == (gone.task,)
    assert slot(w).next_start == 1101.0
    s = slot(w)
    assert account_exit(s, gone, policy(), 2000.0) is s


def test_an_unhealthy_task_that_outlives_its_stop_is_counted_once() -> None:
    w = fleet(1)
    w.apply(svc(health=HC, restart=policy(delay=100.0, max_delay=100.0)))
    at(w, 1000.0)
    c = live_in(w, "web", 1)
    w.containers[c.host] = [replace(c, health="unhealthy")]
    for t in (1010.0, 1011.0, 1012.0):  # the `docker stop` keeps failing: still there
        plan = reconcile(w.cluster, w.inventory, w.observe(), w.state, t)  # type: ignore[arg-type]
        w.state = plan.state
        assert [s.container.id for s in plan.stop] == [c.id]
    assert slot(w).attempts == (1010.0,)
    s = slot(w)
    assert count_failure(s, c.task, 2000.0, "again", policy()) is s


def test_counting_guard_holds_for_completed_tasks_too() -> None:
    s = account_exit(SlotState(), _exited(0), policy(condition="on-failure"), 10.0)
    assert s.complete
    assert account_exit(s, _exited(0), policy(condition="on-failure"), 20.0) is s


def _exited(code: int) -> Container:
    return Container(
        "id1", "web.1.t1", "host1", "test", "web", 1, "t1", "s", "web:5", "exited",
        exit_code=code, finished_at=5.0,
    )  # fmt: skip


# -- due restarts first -------------------------------------------------------------------------
def test_due_restarts_run_first_in_the_pass() -> None:
    """A slot whose backoff ran out is a due restart: it runs before new placements, even
    though its exited task was removed in an earlier pass."""
    crashy = svc("crashy", restart=policy(delay=5.0, max_delay=5.0))
    w = fleet(1)
    w.apply(crashy)
    at(w, 1000.0)
    w.now = 1010.0
    exit_task(w, "crashy", 1)
    assert runs_of(at(w, 1010.0), "crashy") == []  # backing off until 1015
    w.apply(svc("fresh", replicas=2), crashy)  # fresh is first in the file
    plan = at(w, 1015.0)
    assert sorted(r.service.name for r in plan.run) == ["crashy", "fresh", "fresh"]
    assert plan.run[0].service.name == "crashy"
    assert plan.run[0].restart


def test_a_due_restart_gets_capacity_before_a_new_placement() -> None:
    w = World([host("h1", cpus=1)])
    crashy = svc("crashy", cpus=1.0, restart=policy(delay=5.0, max_delay=5.0))
    w.apply(crashy)
    at(w, 1000.0)
    w.now = 1010.0
    exit_task(w, "crashy", 1)
    at(w, 1010.0)
    w.apply(svc("fresh", cpus=1.0), crashy)  # fresh is first in the file
    plan = at(w, 1015.0)
    assert [r.service.name for r in plan.run] == ["crashy"]
    assert [p.service for p in plan.pending] == ["fresh"]


def test_restart_seen_in_the_same_pass_runs_first() -> None:
    w = fleet(1)
    w.apply(svc("crashy", restart=policy(delay=0.0)))
    at(w, 1000.0)
    exit_task(w, "crashy", 1)
    w.apply(svc("fresh", replicas=2), svc("crashy", restart=policy(delay=0.0)))
    plan = at(w, 1001.0)
    assert [r.service.name for r in plan.run] == ["crashy", "fresh", "fresh"]


# -- desired stopped ---------------------------------------------------------------------------
def test_desired_stopped_removes_its_tasks_and_is_otherwise_left_alone() -> None:
    w = fleet(2)
    other = svc("api", replicas=1)
    w.apply(svc(replicas=3, health=HC), other)
    w.converge()
    api = w.live("api")
    exit_task(w, "web", 3, 0)  # an exited task is removed too
    w.apply(svc(replicas=3, health=HC, desired="stopped"), other)
    ss_before = w.state.services["web"]
    plan = at(w, w.now + 1)
    assert sorted(s.container.slot for s in plan.stop) == [1, 2, 3]
    assert all(s.container.service == "web" for s in plan.stop)
    assert plan.run == ()
    assert w.live("web") == []
    assert w.live("api") == api  # other services: untouched
    ss = w.state.services["web"]
    assert (ss.slots, ss.rollout, ss.spec) == (ss_before.slots, ss_before.rollout, ss_before.spec)
    for t in (1, 100):
        again = at(w, w.now + t)
        assert again.converged
        assert exit_code(again) == EXIT_OK
    assert not any(c.service == "web" for cs in w.containers.values() for c in cs)


def test_desired_stopped_does_not_revive_or_count_its_failed_slots() -> None:
    w = failed_world()
    w.apply(svc(restart=policy(delay=1.0, max_delay=2.0, max_attempts=2), desired="stopped"))
    plan = at(w, w.now + 1)
    assert plan.failed_slots() == []
    assert exit_code(plan) == EXIT_OK


def test_apply_back_to_running_restores_the_tasks(world: MakeWorld) -> None:
    w = world(2)
    w.apply(svc(replicas=3))
    w.converge()
    w.apply(svc(replicas=3, desired="stopped"))
    w.converge()
    assert w.live("web") == []
    w.apply(svc(replicas=3))
    plan = w.step()
    assert sorted(runs_of(plan)) == [1, 2, 3]
    w.converge()
    assert sorted(w.slots("web")) == [1, 2, 3]


# -- dependencies ------------------------------------------------------------------------------
def stack(db_replicas: int = 2, web_replicas: int = 1, **db: object) -> tuple[Service, Service]:
    return (
        svc("db", replicas=db_replicas, health=HC, **db),
        svc("web", replicas=web_replicas, depends_on=("db",)),
    )


def test_dependents_start_only_when_every_dependency_replica_is_running_and_healthy() -> None:
    w = fleet(3)
    w.apply(*stack())
    first = w.step()
    assert runs_of(first, "db") == [1, 2]
    assert runs_of(first, "web") == []
    assert [(p.service, p.reason) for p in first.pending] == [
        ("web", "waiting for dependency db to be healthy")
    ]
    assert exit_code(first) == EXIT_NOT_CONVERGED
    # one db replica healthy, the other still starting: web still waits
    db2 = live_in(w, "db", 2)
    w.containers[db2.host] = [
        replace(c, health="starting") if c.id == db2.id else c for c in w.containers[db2.host]
    ]
    assert {c.health for c in w.live("db")} == {"healthy", "starting"}
    assert runs_of(w.plan(), "web") == []
    # one db replica gone altogether: web waits too
    w.containers[db2.host] = [c for c in w.containers[db2.host] if c.id != db2.id]
    plan = w.plan()
    assert runs_of(plan, "web") == []
    assert runs_of(plan, "db") == [2]
    w.converge()
    assert sorted(w.slots("web")) == [1]
    db_hosts = {c.host for c in w.live("db")}
    assert len(db_hosts) == 2  # on other hosts than web's, wherever they run


def test_a_dependency_that_is_desired_stopped_blocks_its_dependents(world: MakeWorld) -> None:
    w = world(2)
    db, web = stack()
    w.apply(replace(db, desired="stopped"), web)
    plan = w.step()
    assert plan.run == ()
    assert [p.reason for p in plan.pending] == ["waiting for dependency db (not running)"]


def test_a_restart_waits_for_its_dependency() -> None:
    w = fleet(2)
    w.apply(*stack(db_replicas=1))
    w.converge()
    db1 = live_in(w, "db", 1)
    w.containers[db1.host] = [
        replace(c, health="unhealthy") if c.id == db1.id else c for c in w.containers[db1.host]
    ]
    exit_task(w, "web", 1)
    at(w, w.now)  # the exit is seen: its backoff counts from here, on the controller's clock
    plan = at(w, w.now + 5)  # past web's backoff
    assert runs_of(plan, "web") == []
    assert [(p.service, p.reason) for p in plan.pending] == [
        ("web", "waiting for dependency db to be healthy")
    ]
    assert len(slot(w, 1, "web").attempts) == 1


def test_dependents_wait_while_a_dependency_rolls(world: MakeWorld) -> None:
    """start-first keeps every db replica healthy through its rollout; web's new task must
    still wait until db's rollout has finished and db is healthy again."""
    w = world(3)
    up = UpdatePolicy(order="start-first", monitor=5.0)
    w.apply(*stack(db_replicas=1, update=up))
    w.converge()
    db6, _ = stack(db_replicas=1, update=up, image="web:6")
    w.apply(db6, stack(web_replicas=2)[1])  # db rolls; web needs a second task
    web_started, db_rolling = [], []
    for _ in range(30):
        plan = w.step()
        rolling = w.state.services["db"].rollout.phase == "updating"
        db_rolling.append(rolling)
        web_started += [rolling for r in plan.run if r.service.name == "web"]
        if plan.converged:
            break
    assert any(db_rolling)
    assert web_started == [False]  # web's new task started once, after db's rollout
    assert w.state.services["db"].rollout.phase == "completed"
    assert sorted(w.slots("web")) == [1, 2]


@pytest.mark.parametrize("order", [("db", "web"), ("web", "db")])
def test_stopping_goes_in_reverse_dependency_order(
    world: MakeWorld, order: tuple[str, str]
) -> None:
    w = world(2)
    services = dict(zip(("db", "web"), stack(db_replicas=1, web_replicas=2), strict=True))
    w.apply(*(services[n] for n in order))
    w.converge()
    w.apply(*(replace(services[n], desired="stopped") for n in order))
    first = w.step()
    assert {s.container.service for s in first.stop} == {"web"}
    assert any("db: waiting for web to stop" in line for line in first.waiting)
    assert exit_code(first) == EXIT_NOT_CONVERGED
    second = w.step()
    assert {s.container.service for s in second.stop} == {"db"}
    assert w.step().converged
    assert w.live() == []


def test_stopping_a_dependent_alone_leaves_the_dependency_running(world: MakeWorld) -> None:
    w = world(2)
    db, web = stack(db_replicas=1)
    w.apply(db, web)
    w.converge()
    w.apply(db, replace(web, desired="stopped"))
    plan = w.step()
    assert {s.container.service for s in plan.stop} == {"web"}
    w.converge()
    assert len(w.live("db")) == 1


# -- what the event log says ---------------------------------------------------------------------
def test_an_ordinary_env_value_does_not_mask_the_service_name_in_events() -> None:
    w = fleet(1)
    w.apply(
        svc("db", env=(("ROLE", "db"), ("DB_PASSWORD", "s3cret")), restart=policy(max_attempts=1))
    )
    at(w, 1000.0)
    w.now = 1001.0
    exit_task(w, "db", 1)
    plan = kept_masker(w.state).plan(w.plan())
    (failed,) = [e for e in plan.events if e.kind == "failed"]
    assert failed.message.startswith("db.1 failed")


def seen_at(observed: Observed, t: float) -> Observed:
    """Every host's observation as had at `t` (the runner stamps each at its answer)."""
    return Observed({n: replace(o, seen_at=t) for n, o in observed.hosts.items()})


@pytest.mark.parametrize(("delay", "restarts"), [(0.1, [1]), (0.5, [1]), (2.0, [])])
def test_an_exit_counts_from_when_its_hosts_answer_was_had(
    delay: float, restarts: list[int]
) -> None:
    """The exit is counted at the observation's time, not the decision's: a restart delay
    that ran out while the pass was still observing (0.5 s here) restarts it in that very
    pass; a longer one waits, from the observation's time."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=delay, max_delay=8.0)))
    w.converge()
    t = w.now
    exit_task(w, "web", 1)
    assert w.cluster is not None
    plan = reconcile(w.cluster, w.inventory, seen_at(w.observe(), t), w.state, t + 0.5)
    record = plan.state.services["web"].slot(1)
    assert record.attempts == (t,)
    assert record.next_start == t + delay
    assert runs_of(plan) == restarts


def test_an_unhealthy_task_counts_from_when_its_hosts_answer_was_had() -> None:
    w = fleet(1)
    w.apply(svc(health=HC, restart=policy(delay=0.1, max_delay=8.0)))
    w.converge()
    t = w.now
    c = live_in(w, "web", 1)
    w.containers[c.host] = [replace(c, health="unhealthy", health_log="no")]
    assert w.cluster is not None
    plan = reconcile(w.cluster, w.inventory, seen_at(w.observe(), t), w.state, t + 0.5)
    assert plan.state.services["web"].slot(1).attempts == (t,)


def test_an_observation_stamped_after_the_decision_counts_at_the_decision() -> None:
    """Never later than the decision's own time (a clock stepped back between the two)."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=2.0, max_delay=8.0)))
    w.converge()
    t = w.now
    exit_task(w, "web", 1)
    assert w.cluster is not None
    plan = reconcile(w.cluster, w.inventory, seen_at(w.observe(), t + 60.0), w.state, t)
    assert plan.state.services["web"].slot(1).attempts == (t,)


def test_the_runner_counts_an_exit_at_its_probes_answer_and_decides_on_a_later_clock(
    tmp_path: Path,
) -> None:
    """Through `run_pass` over FakeDocker, on a clock that moves 0.2 s each time it is
    read: the exit is counted at the probe's answer and the decision comes later, so a
    restart delay of 0.1 s is over by then and the same pass starts the replacement (a
    pass that froze its clock at its start waited for the next one)."""
    w = RunnerWorld(hosts(1), tmp_path)
    w.apply(svc(image="crash:1", restart=policy(delay=0.1, max_delay=8.0)))
    w.step()
    w.docker.advance(2.0)  # the crash:1 task has exited

    def reading() -> float:
        return w.clock.advance(0.2)

    assert w.cluster is not None
    result = asyncio.run(run_pass(w.cluster, w.inventory, w.store, w.executor, clock=reading))
    (at_seen,) = w.state.services["web"].slot(1).attempts
    assert at_seen < result.now
    assert runs_of(result.plan) == [1]


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_backoff_and_window_count_on_the_controllers_clock(skew: float) -> None:
    """The host's clock is an hour off: its FinishedAt neither skips nor stretches the
    backoff, which counts from when the controller saw the exit."""
    w = fleet(1)
    w.apply(svc(restart=policy(delay=2.0, max_delay=8.0)))
    w.converge()
    t = w.now
    gone = exit_task(w, "web", 1)
    w.containers[gone.host] = [
        replace(c, finished_at=t + skew) if c.id == gone.id else c for c in w.containers[gone.host]
    ]
    at(w, t)
    assert slot(w).attempts == (t,)
    assert slot(w).next_start == t + 2.0
    assert runs_of(at(w, t + 1.9 - CARRIED_BACKOFF)) == []
    assert runs_of(at(w, t + 2.0)) == [1]
