"""Rolling updates, decision by decision, with an injected clock (issue 4).

Most tests drive `reconcile()` through the model-level World (tests/sim.py) or call the
pure transitions (`admit`, `rollback`, `note_failure`, `health_gate`, `summarize`)
directly; the clock is `World.now`, advanced by `step(dt)`. Tests that need the runner's
acts (an image that cannot be pulled, a failed task's log tail) and the scenarios worth
seeing end to end run on RunnerWorld too (the `world` fixture): the real `run_pass` over
FakeDocker and a real Store.

Images behave by tests/behaviour.py's table (the tag decides): web:N turns healthy one
tick after it starts; web:broken turns unhealthy (with HEALTH_LOG); web:slow never leaves
"starting"; web:late exits 2 LATE seconds after it starts; crash:N exits 1 one tick after
it starts; web:nope cannot be pulled.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

import pytest

from minidock.act.acts import Acts
from minidock.core import (
    ControllerState,
    Plan,
    admit,
    failed_updates,
    failure_action,
    rollback,
    rollouts_started,
    slot_target,
)
from minidock.core.outcomes import fold, note_exit
from minidock.core.supervise import NO_CHECK_RAN, health_gate, ready
from minidock.documents.status import summarize
from minidock.masking import NO_SECRETS
from minidock.model import (
    Constraint,
    Container,
    HealthCheck,
    LogConfig,
    PortMapping,
    RegistryAuth,
    RestartPolicy,
    Service,
    Ulimit,
    UpdatePolicy,
)
from tests.behaviour import HEALTH_LOG
from tests.fakes import FakeExecutor, fail, ok
from tests.sim import ONLY_RUNNER, FleetDouble, MakeWorld, RunnerWorld, World, host, hosts, svc

HC = HealthCheck(("wget", "-qO-", "http://127.0.0.1:8080/"), interval=1, timeout=1, retries=2)


def fleet(n: int = 3) -> World:
    return World(hosts(n))


def web(
    image: str = "web:5", replicas: int = 4, *, health: HealthCheck | None = HC, **update: object
) -> Service:
    policy = UpdatePolicy(**{"monitor": 2.0, **update})  # type: ignore[arg-type]
    return svc(image=image, replicas=replicas, health=health, update=policy)


def updated(w: FleetDouble, image: str, replicas: int = 4, **update: object) -> FleetDouble:
    """`w` converged on web:5 (or `image` of the first apply), then `image` applied."""
    w.apply(web("web:5", replicas, **update))
    w.converge()
    assert w.images() == ["web:5"] * replicas
    w.apply(web(image, replicas, **update))
    return w


def replacing(plan: Plan) -> list[int]:
    return sorted(r.slot for r in plan.run)


# -- spec hash: what makes a task outdated -----------------------------------------------------
@pytest.mark.parametrize(
    "change",
    [
        {"image": "web:6"},
        {"command": ("httpd", "-p", "9090")},
        {"env": (("MODE", "prod"),)},
        {"ports": (PortMapping(8080, 8080),)},
        {"cpus": 0.5},
        {"memory": 64 << 20},
        {"health": replace(HC, retries=5)},
        {"health": None},
        # the docker run surface (issue 15)
        {"labels": (("team", "payments"),)},
        {"user": "1000:1000"},
        {"workdir": "/srv"},
        {"entrypoint": ("/bin/sh", "-c")},
        {"entrypoint": ()},
        {"stop_signal": "SIGQUIT"},
        {"stop_grace_period": 30.0},
        {"init": True},
        {"read_only": True},
        {"cap_add": ("NET_ADMIN",)},
        {"cap_drop": ("ALL",)},
        {"ulimits": (Ulimit("nofile", 1024, 2048),)},
        {"log": LogConfig("json-file", (("max-size", "10m"),))},
        {"extra_hosts": (("db.internal", "10.0.0.5"),)},
        {"dns": ("10.0.0.2",)},
        {"networks": ("backend",)},
    ],
)
def test_everything_a_task_runs_is_in_the_spec_hash(change: dict[str, object]) -> None:
    base = web()
    assert replace(base, **change).spec_hash() != base.spec_hash()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"replicas": 7},
        {"update": UpdatePolicy(parallelism=3)},
        {"restart": RestartPolicy(max_attempts=9)},
        {"constraints": (Constraint("zone", "==", "a"),)},
        {"spread": "zone"},
        {"depends_on": ("db",)},
        # where the image comes from, and with which credentials: the same image runs
        {"image_source": "controller"},
        {"registry_auth": RegistryAuth("reg.example:5000", "ci", "pw")},
    ],
)
def test_settings_that_do_not_change_a_task_keep_it_current(change: dict[str, object]) -> None:
    base = web()
    changed = replace(base, **change)  # type: ignore[arg-type]
    assert changed.spec_hash() == base.spec_hash()
    state = admit(admit(ControllerState(), _cluster(base), 1), _cluster(changed), 2)
    assert state.services["web"].rollout.phase == "none"


def _cluster(*services: Service):  # type: ignore[no-untyped-def]
    from minidock.model import Cluster

    return Cluster("test", "cluster.toml", "inventory.toml", services)


def test_admit_starts_a_rollout_and_keeps_the_previous_spec_generation() -> None:
    state = admit(ControllerState(), _cluster(web("web:5")), 1)
    state = admit(state, _cluster(web("web:6")), 2)
    ss = state.services["web"]
    assert (ss.rollout.phase, ss.rollout.total) == ("updating", 4)
    assert (ss.spec.image, ss.generation) == ("web:6", 2)
    assert ss.previous is not None
    assert (ss.previous.image, ss.previous_generation) == ("web:5", 1)


def test_swarmkit_defaults() -> None:
    assert UpdatePolicy() == UpdatePolicy(
        parallelism=1,
        delay=0.0,
        order="stop-first",
        monitor=5.0,
        failure_action="pause",
        max_failure_ratio=0.0,
    )


# -- batches: parallelism, delay, order ---------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_batches_replace_parallelism_at_a_time_and_keep_the_rest_healthy(
    world: MakeWorld, parallelism: int
) -> None:
    w = updated(world(3), "web:6", replicas=6, parallelism=parallelism)
    starts: list[int] = []
    while True:
        plan = w.step()
        starts.append(len(plan.run))
        inflight = w.state.services["web"].rollout.inflight
        assert len(inflight) <= parallelism
        new_not_passed = [
            c for c in w.live() if c.image == "web:6" and c.slot not in w.rollout().done
        ]
        assert len(new_not_passed) <= parallelism
        assert w.healthy_slots() >= 6 - parallelism
        if plan.converged:
            break
    assert max(starts) == parallelism
    assert starts[0] == parallelism  # the first batch is a full one
    runs = [r for p in w.log for r in p.run if r.service.image == "web:6"]
    assert len(runs) == 6
    assert all(r.replaces is not None for r in runs)  # stop-first
    assert w.images() == ["web:6"] * 6
    assert (w.rollout().phase, len(w.rollout().done)) == ("completed", 6)


def test_a_batch_waits_for_every_task_in_flight_before_the_next() -> None:
    w = updated(fleet(3), "web:6", replicas=4, parallelism=2)
    first = w.step()
    assert replacing(first) == [1, 2]
    nxt = w.run_until(lambda p: bool(p.run))
    assert replacing(nxt) == [3, 4]
    assert nxt.state.services["web"].rollout.done == (1, 2)
    # healthy one tick after the start, seen healthy at t+1, 2 s of monitor: passed at t+3
    assert len(w.log) - w.log.index(first) - 1 == 3


@pytest.mark.parametrize("health", [HC, None], ids=["health-check", "no-health-check"])
def test_delay_spaces_batches_from_the_last_gate_passed(
    world: MakeWorld, health: HealthCheck | None
) -> None:
    """Merged with test_reconcile's test_update_delay_spaces_batches (no health check)."""
    w = updated(world(3), "web:6", replicas=3, delay=10.0, monitor=0.0, health=health)
    w.step(dt=1)  # slot 1 replaced
    passed = w.run_until(lambda p: 1 in p.state.services["web"].rollout.done)
    at = passed.state.services["web"].rollout.last_batch_at
    assert passed.run == ()  # the pass that saw the gate pass starts nothing
    assert "web: update delay" in passed.waiting
    nxt = w.run_until(lambda p: bool(p.run))
    assert replacing(nxt) == [2]
    assert nxt.state.services["web"].rollout.last_batch_at == at
    started_at = w.now - 1  # step() advanced the clock after deciding
    assert at + 10 <= started_at < at + 11
    w.converge()
    starts = [t for t, p in w.passes() for r in p.run if r.service.image == "web:6"]
    assert len(starts) == 3
    assert all(b - a >= 10 for a, b in itertools.pairwise(starts))


def test_stop_first_is_the_default_and_replaces_in_place_one_at_a_time(world: MakeWorld) -> None:
    """Merged with test_reconcile's test_rolling_update_stop_first_one_at_a_time."""
    w = updated(world(3), "web:6", replicas=3)
    plan = w.step()
    (run,) = plan.run
    assert run.replaces is not None
    assert run.replaces.slot == run.slot == 1
    assert plan.stop == ()  # the old task is stopped by the run itself, after the image check
    assert plan.state.services["web"].rollout.phase == "updating"
    for _ in range(20):
        plan = w.step()
        assert len(plan.run) <= 1
        if plan.converged:
            break
    assert sorted(c.image for c in w.live()) == ["web:6"] * 3
    assert w.rollout().phase == "completed"


def test_start_first_starts_the_new_task_on_another_host_before_stopping_the_old() -> None:
    w = updated(fleet(3), "web:6", replicas=2, order="start-first")
    old = {c.slot: c for c in w.live()}
    plan = w.step()
    (run,) = plan.run
    assert run.replaces is None
    assert run.host != old[run.slot].host
    assert len(w.live()) == 3  # both tasks of slot 1 run


def test_start_first_keeps_the_old_task_until_the_new_one_passes_monitor() -> None:
    w = updated(fleet(3), "web:6", replicas=1, order="start-first", monitor=5.0)
    old = w.live()[0]
    w.step()  # start web:6 beside web:5
    gate_passed = None
    for _ in range(12):
        plan = w.step()
        if 1 in plan.state.services["web"].rollout.done and gate_passed is None:
            gate_passed = plan
            break
        assert old.id in {c.id for c in w.live()}, f"old task stopped before the gate at {w.now}"
    assert gate_passed is not None
    assert [s.container.id for s in gate_passed.stop] == [old.id]


def test_start_first_never_dips_below_replicas(world: MakeWorld) -> None:
    """Merged with test_reconcile's test_rolling_update_start_first_never_dips."""
    w = updated(world(3), "web:6", replicas=3, order="start-first", parallelism=2)
    for _ in range(30):
        plan = w.step()
        assert w.healthy_slots() == 3
        assert len([c for c in w.live() if c.health == "healthy"]) >= 3
        if plan.converged:
            break
    assert w.images() == ["web:6"] * 3


@pytest.mark.parametrize("n", [1, 2], ids=["one-host", "every-host-holds-the-port"])
def test_start_first_falls_back_to_stop_first_where_the_old_task_holds_the_host_port(
    world: MakeWorld, n: int
) -> None:
    """Merged with test_reconcile's test_start_first_with_a_held_host_port_falls_back_to_stop_first
    (one host, one replica)."""
    port = (PortMapping(8080, 8080),)
    w = world(n)
    pol = UpdatePolicy(monitor=0.0, order="start-first")
    w.apply(svc(replicas=n, ports=port, update=pol))
    w.converge()
    w.apply(svc(image="web:6", replicas=n, ports=port, update=pol))
    plan = w.step()
    (run,) = plan.run
    assert run.replaces is not None  # stop-first: the port is free only once the old stops
    assert run.host == run.replaces.host
    (event,) = [e for e in plan.events if e.kind == "rollout-stop-first"]
    assert "host port held by the old task" in event.message
    assert event.slot == run.slot


def test_start_first_with_a_free_host_for_the_port_stays_start_first() -> None:
    port = (PortMapping(8080, 8080),)
    w = fleet(3)
    pol = UpdatePolicy(monitor=0.0, order="start-first")
    w.apply(svc(replicas=2, ports=port, update=pol))
    w.converge()
    w.apply(svc(image="web:6", replicas=2, ports=port, update=pol))
    plan = w.step()
    (run,) = plan.run
    assert run.replaces is None
    assert run.host == "host3"
    assert not any(e.kind == "rollout-stop-first" for e in plan.events)


def test_start_first_without_room_and_without_a_port_conflict_waits() -> None:
    w = World([host("h1", cpus=1)])
    pol = UpdatePolicy(monitor=0.0, order="start-first")
    w.apply(svc(replicas=1, cpus=1.0, update=pol))
    w.converge()
    w.apply(svc(image="web:6", replicas=1, cpus=1.0, update=pol))
    plan = w.step()
    assert plan.run == ()
    (pending,) = plan.pending
    assert "needs 1 cpus, 0 free" in pending.reason
    assert w.images() == ["web:5"]  # nothing stopped for it


# -- the health gate ---------------------------------------------------------------------------
def _task(**kw: object) -> Container:
    base = Container(
        "c1", "web.1.t1", "host1", "test", "web", 1, "t1", "s", "web:6", "running",
        health="healthy", created_at=100.0, started_at=100.0,
    )  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def test_gate_without_a_task_waits() -> None:
    assert health_gate(None, web(), None, 100.0)[0] == "wait"


def test_gate_passes_a_healthy_task_after_it_stays_healthy_for_monitor() -> None:
    s = web(monitor=5.0)
    assert health_gate(_task(), s, None, 103.0)[0] == "wait"  # first seen healthy now
    assert health_gate(_task(), s, 103.0, 107.9)[0] == "wait"
    verdict, why = health_gate(_task(), s, 103.0, 108.0)
    assert (verdict, why) == ("ready", "")


def test_gate_passes_a_task_without_health_check_after_running_for_monitor() -> None:
    s = replace(web(monitor=5.0), health=None)
    t = _task(health="none")
    assert health_gate(t, s, None, 104.9)[0] == "wait"
    assert health_gate(t, s, None, 105.0)[0] == "ready"


@pytest.mark.parametrize("state", ["exited", "dead"])
def test_gate_fails_a_task_that_exits(state: str) -> None:
    verdict, why = health_gate(_task(state=state, exit_code=3), web(), 101.0, 102.0)
    assert verdict == "fail"
    assert why == "task t1 exited with code 3"


def test_gate_fails_an_unhealthy_task_with_the_health_commands_last_output() -> None:
    t = _task(health="unhealthy", health_log=HEALTH_LOG)
    verdict, why = health_gate(t, web(), None, 101.0)
    assert verdict == "fail"
    assert why == f"task t1 unhealthy: {HEALTH_LOG}"


def test_gate_fails_a_task_not_healthy_by_its_deadline() -> None:
    s = web(monitor=2.0)  # deadline: start_period 0 + 2 retries x 1 s + timeout 1 s + monitor 2
    limit = HC.deadline() + 2.0
    assert limit == 5.0
    starting = _task(health="starting")
    assert health_gate(starting, s, None, 100.0 + limit)[0] == "wait"
    verdict, why = health_gate(starting, s, None, 100.0 + limit + 0.1)
    assert (verdict, why) == (
        "fail",
        f"task t1 not healthy after 5s (running, starting); {NO_CHECK_RAN}",  # never checked
    )


def test_gate_deadline_failure_says_what_the_health_command_last_printed() -> None:
    starting = _task(health="starting", health_log=HEALTH_LOG)
    verdict, why = health_gate(starting, web(monitor=2.0), None, 106.0)
    assert verdict == "fail"
    assert why == f"task t1 not healthy after 5s (running, starting); last check: {HEALTH_LOG}"


def test_gate_deadline_counts_the_start_period() -> None:
    s = replace(web(monitor=1.0), health=replace(HC, start_period=30.0))
    starting = _task(health="starting")
    assert health_gate(starting, s, None, 100.0 + 33.0)[0] == "wait"
    assert health_gate(starting, s, None, 100.0 + 34.5)[0] == "fail"


def test_gate_in_the_pass_judges_each_new_task_by_the_injected_clock() -> None:
    w = updated(fleet(3), "web:6", replicas=2, monitor=3.0)
    w.step()  # t: start slot 1 (stop-first)
    seen_healthy = None
    for _ in range(10):
        plan = w.step()
        r = plan.state.services["web"].rollout
        if seen_healthy is None and r.healthy_since:
            seen_healthy = dict(r.healthy_since)[1]
        if 1 in r.done:
            break
    assert seen_healthy is not None
    assert r.last_batch_at == seen_healthy + 3.0  # passed at the first pass after monitor


# -- failures: pause, rollback, continue --------------------------------------------------------
def test_pause_stops_after_the_first_batch_and_keeps_the_rest_on_the_old_spec(
    world: MakeWorld,
) -> None:
    """Merged with test_reconcile's test_failed_update_pauses_after_first_batch."""
    w = updated(world(3), "web:broken", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    r = w.rollout()
    assert (r.failures, r.done) == (1, ())
    assert r.reason == f"task {r.reason.split()[1]} unhealthy: {HEALTH_LOG}"
    runs = [r for p in w.log for r in p.run if r.service.image == "web:broken"]
    assert [r.slot for r in runs] == [1]  # only the first batch ever ran the new spec
    for _ in range(20):  # and nothing moves on afterwards: the failed slot goes back
        plan = w.step()
        assert all(r.service.image == "web:5" for r in plan.run)
    assert w.images() == ["web:5"] * 4
    assert w.state.services["web"].spec.image == "web:broken"  # desired is unchanged
    assert slot_target(w.state.services["web"], 2).image == "web:5"
    assert w.rollout().phase == "paused"
    assert w.kinds().count("rollout-paused") == 1


def test_pause_keeps_the_slots_already_updated_on_the_new_spec() -> None:
    w = updated(fleet(3), "web:slow", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    w.converge()
    assert w.images() == ["web:5"] * 4  # the slow task failed its deadline; slot 1 went back
    ss = w.state.services["web"]
    ss = replace(ss, rollout=replace(ss.rollout, done=(1,)))
    assert slot_target(ss, 1).image == "web:slow"
    assert slot_target(ss, 2).image == "web:5"


def test_rollback_returns_every_task_to_the_previous_spec_generation(world: MakeWorld) -> None:
    """Merged with test_reconcile's test_failed_update_rolls_back."""
    w = updated(world(3), "web:broken", failure_action="rollback")
    w.converge()
    assert w.images() == ["web:5"] * 4
    ss = w.state.services["web"]
    assert (ss.spec.image, ss.generation) == ("web:5", 1)
    assert ss.previous is not None
    assert ss.previous.image == "web:broken"
    r = ss.rollout
    assert r.phase == "rolled_back"
    assert r.reason.startswith("rolled back: task ")
    assert "unhealthy" in r.reason
    assert HEALTH_LOG in r.reason
    assert w.kinds().count("rollout-rollback") == 1
    assert w.kinds().count("rollout-rolled_back") == 1
    broken = [r for p in w.log for r in p.run if r.service.image == "web:broken"]
    assert len(broken) == 1


def test_rollback_also_undoes_batches_that_had_passed() -> None:
    w = updated(fleet(3), "web:6", failure_action="rollback", monitor=1.0)
    w.run_until(lambda p: len(p.state.services["web"].rollout.done) == 2)
    w.state = rollback(w.state, "web")
    w.converge()
    assert w.images() == ["web:5"] * 4
    assert w.rollout().phase == "rolled_back"


@pytest.mark.parametrize(
    ("previous", "image", "why"),
    [
        pytest.param("web:slow", "web:broken", "not healthy after", id="previous-never-healthy"),
        pytest.param("web:broken", "other:broken", "unhealthy", id="previous-unhealthy"),
    ],
)
def test_a_failing_rollback_pauses_and_never_loops(
    world: MakeWorld, previous: str, image: str, why: str
) -> None:
    """Merged with test_reconcile's test_rollback_that_fails_pauses_and_never_loops (the
    previous spec unhealthy rather than never healthy)."""
    w = world(3)
    pol = {"failure_action": "rollback", "monitor": 1.0}
    w.apply(web(previous, 2, **pol))  # the previous spec never turns healthy either
    for _ in range(3):
        w.step()
    w.apply(web(image, 2, **pol))
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused", limit=60)
    for _ in range(60):
        w.step()
    kinds = w.kinds()
    assert kinds.count("rollout-rollback") == 1
    assert kinds.count("rollout-paused") == 1
    r = w.rollout()
    assert (r.phase, r.rollback) == ("paused", True)
    assert why in r.reason
    assert w.state.services["web"].spec.image == previous  # rolled back, not forth again


def test_failure_action_is_taken_once_the_ratio_is_exceeded() -> None:
    ss = admit(
        admit(ControllerState(), _cluster(web("web:5", 4)), 1),
        _cluster(web("web:6", 4, max_failure_ratio=0.5, failure_action="pause")),
        2,
    ).services["web"]
    for failures, status in [(1, "updating"), (2, "updating"), (3, "paused")]:
        got, (event,) = failure_action(
            replace(ss, rollout=replace(ss.rollout, failures=failures)), "x", 0
        )
        assert got.rollout.phase == status
        assert got.rollout.reason == "x"
        assert event.kind == ("rollout-paused" if status == "paused" else "rollout-failure")


def test_pause_with_max_failure_ratio_tolerates_failures_up_to_the_ratio() -> None:
    w = updated(fleet(3), "web:broken", failure_action="pause", max_failure_ratio=0.5)
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    r = w.rollout()
    assert r.failures == 3  # 1/4 and 2/4 are within 0.5; 3/4 is not
    assert w.kinds().count("rollout-failure") == 2


def test_continue_goes_on_whatever_the_ratio(world: MakeWorld) -> None:
    """Merged with test_reconcile's test_continue_goes_on_despite_failures: once every slot
    has tried the new spec, every live task runs it (none went back to the old one)."""
    w = updated(world(3), "web:broken", failure_action="continue")
    start = len(w.log)

    def tried() -> set[int]:
        return {r.slot for p in w.log[start:] for r in p.run if r.service.image == "web:broken"}

    w.run_until(lambda p: tried() == {1, 2, 3, 4})
    assert {c.image for c in w.live()} == {"web:broken"}
    while len(w.log) - start < 40:
        w.step()
    r = w.rollout()
    assert r.phase == "updating"
    assert r.failures >= 4
    assert "paused" not in {p.state.services["web"].rollout.phase for p in w.log}
    replaced = {r.slot for p in w.log for r in p.run if r.service.image == "web:broken"}
    assert replaced == {1, 2, 3, 4}  # every slot was tried, not just the first


def test_a_failure_after_monitor_during_the_rollout_counts() -> None:
    w = updated(fleet(3), "web:late", failure_action="rollback", monitor=1.0)
    w.converge(limit=80)
    assert w.kinds().count("rollout-rollback") == 1
    r = w.rollout()
    assert r.phase == "rolled_back"
    assert "exited with code 2" in r.reason
    assert "after its monitor" in r.reason
    assert w.images() == ["web:5"] * 4


def test_a_failure_after_monitor_with_pause_puts_that_slot_back() -> None:
    w = updated(fleet(3), "web:late", failure_action="pause", monitor=1.0)
    plan = w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    r = plan.state.services["web"].rollout
    assert r.failures == 1
    assert "(after its monitor)" in r.reason
    w.converge()
    assert sorted(w.images()).count("web:late") <= 1  # a later batch may still be in flight
    assert w.rollout().phase == "paused"
    assert w.kinds().count("rollout-paused") == 1


def test_a_failure_once_the_rollout_completed_is_a_plain_restart() -> None:
    w = updated(fleet(3), "web:6", replicas=1, failure_action="rollback", monitor=1.0)
    w.converge()
    assert w.rollout().phase == "completed"
    (task,) = w.live()
    w.containers[task.host] = [replace(task, state="exited", exit_code=1, finished_at=w.now)]
    w.converge()
    assert w.rollout().phase == "completed"
    assert w.images() == ["web:6"]
    assert "rollout-rollback" not in w.kinds()


def test_an_old_task_failing_during_the_rollout_is_not_a_rollout_failure() -> None:
    w = updated(fleet(3), "web:6", failure_action="pause", monitor=3.0)
    w.step()  # slot 1 in flight
    old = next(c for c in w.live() if c.slot == 4)
    w.containers[old.host] = [
        replace(c, state="exited", exit_code=1, finished_at=w.now) if c.id == old.id else c
        for c in w.containers[old.host]
    ]
    w.converge()
    assert w.images() == ["web:6"] * 4
    r = w.rollout()
    assert (r.phase, r.failures) == ("completed", 0)


def test_a_new_task_that_exits_fails_its_gate_with_its_exit_code() -> None:
    w = updated(fleet(3), "crash:1", failure_action="pause")
    plan = w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    (stop,) = [s for s in plan.stop if s.failure]
    assert stop.container.image == "crash:1"
    assert (
        plan.state.services["web"].rollout.reason
        == f"task {stop.container.task} exited with code 1"
    )


def test_a_new_task_never_healthy_fails_at_its_deadline() -> None:
    w = updated(fleet(3), "web:slow", failure_action="pause", monitor=2.0)
    start = w.now
    plan = w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    failed_at = w.now - 1
    limit = HC.deadline() + 2.0
    assert limit < failed_at - start <= limit + 2  # the first pass past the deadline
    assert "not healthy after 5s (running, starting)" in plan.state.services["web"].rollout.reason


def test_manual_rollback_of_a_paused_update(world: MakeWorld) -> None:
    w = updated(world(3), "web:broken", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    w.state = rollback(w.state, "web")
    w.converge()
    ss = w.state.services["web"]
    assert (ss.spec.image, ss.rollout.phase) == ("web:5", "rolled_back")
    assert w.images() == ["web:5"] * 4


# -- bad images: no downtime --------------------------------------------------------------------
# Only the runner meets an image that cannot be pulled (web:nope): its `docker run` act checks
# the image first and notes the failure; the model-level World has no acts to fail.
@ONLY_RUNNER
def test_a_missing_image_pauses_without_stopping_anything(world: MakeWorld) -> None:
    w = updated(world(3), "web:nope", failure_action="pause")
    before = {c.id for c in w.live()}
    plan = w.step()
    assert [r.replaces is not None for r in plan.run] == [True]
    r = plan.state.services["web"].rollout
    assert r.phase == "paused"
    assert "cannot be pulled" in r.reason
    for _ in range(5):
        assert w.step().run == ()
    assert {c.id for c in w.live()} == before
    # issue 14: the act's failure paused it, and the event log says so, with the cause
    assert isinstance(w, RunnerWorld)
    logged = [e for _, e in w.store.events(limit=0) if e.kind == "rollout-paused"]
    assert len(logged) == 1
    assert "cannot be pulled" in logged[0].message


@ONLY_RUNNER
def test_a_missing_image_with_rollback_rolls_back_without_touching_a_task(world: MakeWorld) -> None:
    w = updated(world(3), "web:nope", failure_action="rollback")
    before = {c.id for c in w.live()}
    w.step()
    w.converge()
    assert w.rollout().phase == "rolled_back"
    assert {c.id for c in w.live()} == before


@ONLY_RUNNER
def test_continue_moves_on_past_a_slot_whose_image_cannot_be_pulled(world: MakeWorld) -> None:
    w = updated(world(3), "web:nope", failure_action="continue")
    tried: list[int] = []
    for _ in range(6):
        plan = w.step()
        tried += [r.slot for r in plan.run]
    assert set(tried) == {1, 2, 3, 4}  # not slot 1 over and over
    assert w.images() == ["web:5"] * 4


@ONLY_RUNNER
def test_a_failed_pull_backs_the_slot_off_before_it_is_tried_again(world: MakeWorld) -> None:
    w = updated(world(3), "web:nope", replicas=1, failure_action="continue")
    at = []
    for _ in range(8):
        plan = w.step()
        at += [w.now - 1 for _ in plan.run]
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert gaps
    assert gaps == sorted(gaps)
    assert gaps[-1] > 1


def test_runner_checks_the_image_before_stopping_the_old_task() -> None:
    w = updated(fleet(1), "web:nope", replicas=1)
    plan = w.plan()
    (run,) = plan.run
    assert run.replaces is not None

    def handler(h, argv, stdin):  # type: ignore[no-untyped-def]
        if argv[:3] == ["docker", "image", "inspect"]:
            return fail("Error: No such image: web:nope")
        if argv[:2] == ["docker", "pull"]:
            return fail("Error response from daemon: manifest for web:nope not found")
        return ok()

    ex = FakeExecutor(handler)
    acts = Acts(ex, w.inventory, "test", w.now, NO_SECRETS)
    asyncio.run(acts.run(run))
    assert [a[:2] for a in ex.argvs()] == [["docker", "image"], ["docker", "pull"]]
    state, events = fold(plan.state, acts.outcomes, w.now)
    assert [e.kind for e in events] == ["rollout-paused"]  # made by the core, not the runner
    r = state.services["web"].rollout
    assert r.phase == "paused"
    assert "manifest for web:nope not found" in r.reason
    assert acts.failures
    assert "cannot be pulled" in acts.failures[0]


# -- durable progress --------------------------------------------------------------------------
def test_a_new_apply_supersedes_a_rollout_in_flight(world: MakeWorld) -> None:
    """Merged with test_reconcile's test_new_apply_supersedes_a_rollout."""
    w = updated(world(3), "web:6", monitor=3.0)
    w.step()
    w.step()
    assert w.rollout().inflight == (1,)
    w.apply(web("web:7", 4, monitor=3.0))
    ss = w.state.services["web"]
    assert (ss.rollout.phase, ss.rollout.inflight, ss.rollout.done) == ("updating", (), ())
    assert ss.previous is not None
    assert ss.previous.image == "web:6"
    w.converge()
    assert w.images() == ["web:7"] * 4
    assert w.rollout().phase == "completed"


def test_a_new_apply_supersedes_a_paused_rollout() -> None:
    w = updated(fleet(3), "web:broken", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    w.apply(web("web:6", 4, failure_action="pause"))
    w.converge()
    assert w.images() == ["web:6"] * 4
    assert w.rollout().phase == "completed"


def test_manual_rollback_of_a_completed_update(world: MakeWorld) -> None:
    w = updated(world(3), "web:6")
    w.converge()
    w.state = rollback(w.state, "web")
    ss = w.state.services["web"]
    assert (ss.rollout.phase, ss.rollout.reason) == ("rolling_back", "rolled back by the operator")
    w.converge()
    assert w.images() == ["web:5"] * 4
    assert (w.rollout().phase, w.state.services["web"].generation) == ("rolled_back", 1)


def test_manual_rollback_without_a_previous_spec_is_refused() -> None:
    w = fleet(1)
    w.apply(web("web:5", 1))
    with pytest.raises(ValueError, match="no previous spec"):
        rollback(w.state, "web")


@pytest.mark.parametrize("crash_at", range(0, 12))
def test_a_controller_killed_before_acting_resumes_from_its_last_commit(crash_at: int) -> None:
    """Kill between commit and act on pass `crash_at`: the next pass starts from the state
    committed before the lost acts, and the rollout still finishes, one batch at a time."""
    w = updated(fleet(3), "web:6", monitor=1.0)
    for i in range(60):
        plan = w.plan()
        if i != crash_at:
            w.act(plan)
        w.state = plan.state
        w.log.append(plan)
        w.tick()
        assert w.healthy_slots() >= 3
        assert len({c.slot for c in w.live() if c.image == "web:6" and not ready(c)}) <= 1
        if plan.converged:
            break
    assert w.images() == ["web:6"] * 4
    assert w.rollout().phase == "completed"


def test_a_stop_first_act_cut_between_stop_and_run_refills_the_slot() -> None:
    w = updated(fleet(3), "web:6", monitor=1.0)
    plan = w.plan()
    (run,) = plan.run
    assert run.replaces is not None
    w.remove(run.replaces)  # the old task stopped, then the controller died
    w.state = plan.state
    w.tick()
    again = w.step()
    assert replacing(again) == [1]
    assert again.run[0].replaces is None
    w.converge()
    assert w.images() == ["web:6"] * 4


def test_a_rollout_advances_across_separate_runs_with_the_same_stored_state(
    world: MakeWorld,
) -> None:
    """Cron: each pass is a fresh process; only the committed state links them (on the
    runner, the Store in its directory)."""
    w = updated(world(3), "web:6", monitor=1.0)
    for _ in range(60):
        plan = w.step(30.0)  # cron: a minute-ish apart
        if plan.converged:
            break
    assert w.images() == ["web:6"] * 4
    assert w.state.services["web"].rollout.phase == "completed"


@pytest.mark.parametrize("which", ["new", "outdated"])
def test_a_host_lost_mid_rollout_resumes(world: MakeWorld, which: str) -> None:
    w = updated(world(3), "web:6", monitor=1.0)
    first = w.step()
    new_host = first.run[0].host
    victim = (
        new_host
        if which == "new"
        else next(c.host for c in w.live() if c.image == "web:5" and c.host != new_host)
    )
    w.kill_host(victim)
    w.converge()
    assert sorted(w.images()) == ["web:6"] * 4
    assert victim not in {c.host for c in w.live()}
    w.revive_host(victim)
    w.converge()
    assert w.images() == ["web:6"] * 4
    assert w.rollout().phase == "completed"


# -- what status shows -------------------------------------------------------------------------
def _status(w: FleetDouble) -> dict[str, Any]:
    plan = w.plan()
    return summarize(w.state, w.inventory, w.observe(), plan)


def test_status_shows_updating_n_of_m_and_each_tasks_generation() -> None:
    w = updated(fleet(3), "web:6", monitor=1.0)
    w.run_until(lambda p: len(p.state.services["web"].rollout.done) == 2)
    doc = _status(w)
    (s,) = doc["services"]
    assert s["state"] == "updating"
    assert s["rollout"]["status"] == "updating"
    assert (s["rollout"]["done"], s["rollout"]["total"]) == (2, 4)
    gens = sorted((t["image"], t["generation"]) for t in doc["tasks"])
    assert gens.count(("web:6", 2)) >= 2
    assert ("web:5", 1) in gens


def test_status_shows_paused_and_why() -> None:
    w = updated(fleet(3), "web:broken", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    (s,) = _status(w)["services"]
    assert s["state"] == "paused"
    assert (s["rollout"]["status"], s["rollout"]["failures"]) == ("paused", 1)
    assert HEALTH_LOG in s["last_failure"]
    assert "\n" not in s["last_failure"]


def test_status_shows_rolling_back_while_it_runs() -> None:
    w = updated(fleet(3), "web:6", monitor=1.0)
    w.converge()
    w.state = rollback(w.state, "web")
    w.step()
    (s,) = _status(w)["services"]
    assert (s["state"], s["rollout"]["status"]) == ("rolling_back", "rolling_back")
    assert s["image"] == "web:5"


def test_status_shows_rolled_back_and_why() -> None:
    w = updated(fleet(3), "web:broken", failure_action="rollback")
    w.converge()
    doc = _status(w)
    (s,) = doc["services"]
    assert s["rollout"]["status"] == "rolled_back"
    assert s["last_failure"].startswith("rolled back: task ")
    assert {t["generation"] for t in doc["tasks"]} == {1}


@ONLY_RUNNER
def test_status_last_failure_of_an_exit_carries_the_log_tail(world: MakeWorld) -> None:
    """The runner keeps a failed task's log tail (note_exit); status must show it."""
    w = updated(world(3), "crash:2", failure_action="pause")
    plan = w.run_until(lambda p: any(s.failure for s in p.stop))
    (stop,) = [s for s in plan.stop if s.failure]
    (s,) = _status(w)["services"]
    assert s["state"] == "paused"
    tail = "starting | httpd: bind: address in use"  # CRASH_LOG's last lines
    assert s["last_failure"] == f"task {stop.container.task} exited with code 1; log: {tail}"
    assert w.state.services["web"].slot(stop.container.slot).last_exit == s["last_failure"]


def test_note_exit_leaves_an_unrelated_rollout_reason_alone() -> None:
    w = updated(fleet(3), "web:broken", failure_action="pause")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    reason = w.rollout().reason
    state = note_exit(
        w.state, "web", 3, "task x exited with code 1; log: y", "task x exited with code 1"
    )
    assert state.services["web"].rollout.reason == reason
    assert state.services["web"].slot(3).last_exit == "task x exited with code 1; log: y"


def test_pause_puts_the_failed_slot_back_on_the_old_spec_in_the_same_pass() -> None:
    """`apply --wait` ends on the pass that pauses (exit 1): a stop-first slot whose new task
    failed must not be left empty, waiting out a restart backoff, until the next cron run."""
    w = updated(fleet(3), "web:broken", failure_action="pause")
    paused = w.run_until(lambda p: p.state.services["web"].rollout.phase == "paused")
    assert [(r.slot, r.service.image) for r in paused.run] == [(1, "web:5")]
    assert sorted(c.slot for c in w.live()) == [1, 2, 3, 4]


def test_gate_runs_on_the_controllers_clock_not_the_hosts() -> None:
    """A host whose clock is 1000 s behind: its tasks look old, yet pass only after monitor
    and fail their deadline only after the full limit, both measured from first sight."""
    s = replace(web(monitor=5.0), health=None)
    old = _task(health="none", started_at=-900.0, created_at=-900.0)
    assert health_gate(old, s, None, 100.0, seen_at=100.0)[0] == "wait"
    assert health_gate(old, s, 100.0, 104.9, seen_at=100.0)[0] == "wait"
    assert health_gate(old, s, 100.0, 105.0, seen_at=100.0)[0] == "ready"
    starting = _task(health="starting", started_at=-900.0, created_at=-900.0)
    limit = HC.deadline() + 5.0
    assert health_gate(starting, web(monitor=5.0), None, 100.0 + limit, seen_at=100.0)[0] == "wait"
    verdict, _ = health_gate(starting, web(monitor=5.0), None, 100.1 + limit, seen_at=100.0)
    assert verdict == "fail"


def test_a_host_clock_behind_does_not_rush_the_gate_in_a_pass() -> None:
    w = World([host("host1")])
    plain = replace(web(replicas=1, monitor=5.0), health=None)
    w.apply(plain)
    w.converge()
    w.apply(replace(plain, image="web:6"))
    w.step()  # stop-first: the web:6 task starts
    started = w.now  # the controller first sees it on this pass
    w.containers["host1"] = [
        replace(c, started_at=-1000.0, created_at=-1000.0) for c in w.containers["host1"]
    ]
    for _ in range(10):
        plan = w.step()
        if plan.state.services["web"].rollout.phase == "completed":
            break
    passed = w.now - 1.0  # the pass that completed it
    assert passed - started >= 5.0  # monitor, on the controller's clock


def test_applying_the_same_spec_again_resumes_a_paused_update() -> None:
    w = World([host("host1"), host("host2")])
    w.apply(web("web:6", replicas=2, failure_action="pause", monitor=0.0))
    w.converge()
    broken = web("web:broken", replicas=2, failure_action="pause", monitor=0.0)
    w.apply(broken)
    for _ in range(8):
        w.step()
    assert w.state.services["web"].rollout.phase == "paused"
    w.apply(broken)
    r = w.state.services["web"].rollout
    assert (r.phase, r.failures, r.reason) == ("updating", 0, "")
    plan = w.step()
    assert [run.service.image for run in plan.run] == ["web:broken"]


def test_an_in_flight_task_on_an_unreachable_host_still_counts_against_parallelism() -> None:
    w = World([host("host1"), host("host2"), host("host3")])
    w.apply(web("web:5", replicas=3, monitor=30.0))
    w.converge()
    w.apply(web("web:6", replicas=3, monitor=30.0))
    first = w.step()
    (run,) = first.run
    w.step()  # the new task is healthy now, in its monitor window
    w.kill_host(run.host)  # unreachable for one probe: not down yet
    plan = w.step()
    assert plan.run == ()
    assert plan.state.services["web"].rollout.inflight == (run.slot,)
    assert any("unreachable" in line for line in plan.waiting)


def test_apply_of_a_changed_service_records_rollout_started() -> None:
    w = World([host("host1")])
    w.apply(web("web:5", replicas=1))
    before = w.state
    w.apply(web("web:6", replicas=1))
    (event,) = rollouts_started(before, w.state, 7.0)
    assert (event.kind, event.service) == ("rollout-started", "web")
    assert rollouts_started(w.state, w.state, 8.0) == []


def test_failed_updates_names_the_generation_whose_update_was_rolled_back() -> None:
    w = fleet(3)
    w.apply(web("web:6", replicas=2, failure_action="rollback", monitor=0.0))
    w.converge()
    w.apply(web("web:broken", replicas=2, failure_action="rollback", monitor=0.0))
    w.converge()
    ((name, why),) = failed_updates(w.state, 2)
    assert name == "web"
    assert why.startswith("rolled back: task ")
    assert failed_updates(w.state, 1) == []


def test_rollback_never_returns_to_a_spec_that_was_rolled_back_as_failed() -> None:
    """Issue 14: after an automatic rollback, `minidock rollback` would swap back to the
    broken spec; it refuses, naming the generation and why, unless forced."""
    w = updated(World(hosts(3)), "web:broken", failure_action="rollback")
    w.run_until(lambda p: p.state.services["web"].rollout.phase == "rolled_back", limit=80)
    ss = w.state.services["web"]
    assert (ss.spec.image, ss.previous.image if ss.previous else None) == ("web:5", "web:broken")
    with pytest.raises(ValueError, match=r"previous spec \(generation 2\) was rolled back as"):
        rollback(w.state, "web")
    forced = rollback(w.state, "web", force=True)
    assert forced.services["web"].spec.image == "web:broken"
    assert forced.services["web"].previous_failed == ""  # an operator's rollback: not failed
