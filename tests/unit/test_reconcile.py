"""The reconcile pass, scenario by scenario, in the style of Nomad's reconciler tests.

Decisions are checked on the model-level World (tests/sim.py), where containers can be
edited by hand. The product contract's scenarios (host loss, a host's return, drain,
scale, a removed service) take the `world` fixture and run twice: on World, and end to end
on RunnerWorld (the real `run_pass` over FakeDocker and a real Store).
"""

from __future__ import annotations

from dataclasses import replace

from minidock.core import admit, set_drained
from minidock.model import Constraint, Container, HealthCheck, PortMapping
from tests.sim import MakeWorld, World, assert_results, host, hosts, svc


def fleet(n: int = 3) -> World:
    return World(hosts(n))


def test_place_no_existing_spreads_over_hosts() -> None:
    w = fleet(3)
    w.apply(svc(replicas=4))
    plan = w.step()
    assert_results(plan, run=4)
    assert [r.slot for r in plan.run] == [1, 2, 3, 4]
    assert [r.host for r in plan.run] == ["host1", "host2", "host3", "host1"]
    assert {r.name.split(".")[0] for r in plan.run} == {"web"}


def test_converged_gives_empty_plan_twice(world: MakeWorld) -> None:
    """Merged with test_a_converged_plan_is_idempotent_twice: the plan decided from the
    converged plan's own next state is empty too."""
    w = world(3)
    w.apply(svc(replicas=4))
    w.converge()
    again = w.plan()
    assert again.converged
    assert_results(again)
    twice = w.plan(again.state)
    assert twice.converged


def test_host_loss_replaces_exactly_the_lost_slots(world: MakeWorld) -> None:
    w = world(3)
    w.apply(svc(replicas=4))
    w.converge()
    assert w.slots("web") == {1: ["host1"], 2: ["host2"], 3: ["host3"], 4: ["host1"]}
    w.kill_host("host1")
    first = w.step()  # one failed probe: not down yet (down_after = 2)
    assert_results(first)
    assert not first.converged
    second = w.step()
    assert_results(second, run=2)
    assert sorted(r.slot for r in second.run) == [1, 4]
    assert {r.host for r in second.run} <= {"host2", "host3"}
    assert any(e.kind == "host-down" for e in second.events)
    w.converge()
    assert len(w.live("web")) == 4


def test_returning_host_has_its_stale_tasks_removed(world: MakeWorld) -> None:
    w = world(3)
    w.apply(svc(replicas=4))
    w.converge()
    w.kill_host("host1")
    w.converge()
    w.revive_host("host1")
    plan = w.step()
    assert_results(plan, stop=2)
    assert {s.container.host for s in plan.stop} == {"host1"}
    w.converge()
    slots = w.slots("web")
    assert sorted(slots) == [1, 2, 3, 4]
    assert all(len(hosts) == 1 for hosts in slots.values())


def test_unreachable_host_holds_its_slots_until_down(world: MakeWorld) -> None:
    w = world(2)
    w.apply(svc(replicas=2))
    w.converge()
    w.kill_host("host2")
    plan = w.step()
    assert_results(plan)
    assert plan.state.hosts["host2"].failures == 1
    assert not plan.state.hosts["host2"].down


def test_scale_up_fills_lowest_free_slots_and_down_removes_highest(world: MakeWorld) -> None:
    w = world(3)
    w.apply(svc(replicas=2))
    w.converge()
    w.apply(svc(replicas=5))
    up = w.step()
    assert sorted(r.slot for r in up.run) == [3, 4, 5]
    w.converge()
    w.apply(svc(replicas=1))
    down = w.step()
    assert sorted(s.container.slot for s in down.stop) == [2, 3, 4, 5]
    w.converge()
    assert w.slots("web") == {1: ["host1"]}


def test_scale_down_stops_non_running_first() -> None:
    w = fleet(1)
    w.apply(svc(replicas=3))
    w.converge()
    c3 = next(c for c in w.live() if c.slot == 3)
    w.containers["host1"] = [replace(c, state="paused") if c is c3 else c for c in w.live()]
    w.apply(svc(replicas=1))
    plan = w.plan()
    assert [s.container.slot for s in plan.stop] == [3, 2]


def test_removed_service_is_removed(world: MakeWorld) -> None:
    w = world(2)
    w.apply(svc("web", replicas=2), svc("api", replicas=1))
    w.converge()
    w.apply(svc("web", replicas=2))
    plan = w.step()
    assert [s.container.service for s in plan.stop] == ["api"]
    w.converge()
    assert w.live("api") == []


def test_other_clusters_containers_are_never_counted() -> None:
    w = fleet(1)
    w.apply(svc(replicas=1))
    w.converge()
    mine = w.live()[0]
    w.containers["host1"].append(replace(mine, id="x1", cluster="other", slot=1))
    assert w.plan().converged


def test_two_live_tasks_in_a_slot_keep_the_assigned_one_whatever_the_clocks() -> None:
    """Authority is the controller's (issue 9): the twin claims to be an hour newer (a host
    clock ahead), and still loses to the task the controller assigned to the slot."""
    w = fleet(2)
    w.apply(svc(replicas=1))
    w.converge()
    first = w.live()[0]
    assert w.state.services["web"].slot(1).task == first.task  # the record
    later = first.created_at + 3600
    twin = replace(first, id="twin", host="host2", task="t2", created_at=later, started_at=later)
    w.containers["host2"].append(twin)
    plan = w.step()
    assert_results(plan, stop=1)
    assert plan.stop[0].container.id == "twin"  # fenced: no record explains it
    assert plan.stop[0].reason == f"fenced: web.1 is assigned to task {first.task}"
    assert [c.id for c in w.live()] == [first.id]


def test_a_task_no_record_explains_is_adopted_only_into_an_empty_slot() -> None:
    """With no record (a rebuilt state), a slot's one live task is adopted and recorded;
    when two claim it, the choice is deterministic (by task id), never by clock."""
    w = fleet(2)
    w.apply(svc(replicas=1))
    w.converge()
    first = w.live()[0]
    w.state = replace(w.state, services={"web": replace(w.state.services["web"], slots={})})
    twin = replace(first, id="twin", host="host2", task="a0", created_at=first.created_at - 99)
    w.containers["host2"].append(twin)
    plan = w.step()
    assert_results(plan, stop=1)
    assert plan.stop[0].container.task == max(first.task, "a0")
    assert plan.state.services["web"].slot(1).task == min(first.task, "a0")


def test_same_decision_replayed_names_the_same_task() -> None:
    w = fleet(2)
    w.apply(svc(replicas=2))
    a, b = w.plan(), w.plan()
    assert [r.name for r in a.run] == [r.name for r in b.run]


def test_drain_starts_replacement_before_stopping(world: MakeWorld) -> None:
    w = world(3)
    w.apply(svc(replicas=3, health=HealthCheck(("true",))))
    w.converge()
    w.state = set_drained(w.state, "host1", True)
    plan = w.step()
    assert_results(plan, run=1)
    assert plan.run[0].host != "host1"
    assert len(w.live()) == 4  # nothing stopped yet: the replacement was still starting
    plan = w.step()
    assert_results(plan, stop=1)
    assert plan.stop[0].container.host == "host1"
    w.converge()
    assert "host1" not in {c.host for c in w.live()}
    assert len(w.live()) == 3


def test_drain_with_nowhere_to_go_keeps_the_task_and_says_why(world: MakeWorld) -> None:
    w = world(1)
    w.apply(svc(replicas=1))
    w.converge()
    w.state = set_drained(w.state, "host1", True)
    plan = w.step()
    assert_results(plan, pending=1)
    assert "host1: drained" in plan.pending[0].reason
    assert len(w.live()) == 1


def test_activate_lets_a_host_take_tasks_again(world: MakeWorld) -> None:
    w = world(2)
    w.state = set_drained(w.state, "host2", True)
    w.apply(svc(replicas=2))
    w.converge()
    assert {c.host for c in w.live()} == {"host1"}
    w.state = set_drained(w.state, "host2", False)
    w.apply(svc(replicas=3))
    w.converge()
    assert "host2" in {c.host for c in w.live()}


def test_pending_says_why_for_every_host() -> None:
    w = World([host("h1", cpus=1, zone="a"), host("h2", cpus=4, zone="c")])
    w.apply(svc(replicas=1, cpus=2.0, constraints=(Constraint("zone", "!=", "c"),)))
    plan = w.step()
    assert_results(plan, pending=1)
    reason = plan.pending[0].reason
    assert "h1: needs 2 cpus, 1 free" in reason
    assert "h2: constraint zone != c not met" in reason


def test_host_port_serves_one_task_per_host() -> None:
    w = fleet(2)
    w.apply(svc(replicas=3, ports=(PortMapping(8080, 8080),)))
    plan = w.step()
    assert_results(plan, run=2, pending=1)
    assert {r.host for r in plan.run} == {"host1", "host2"}
    assert "port 8080/tcp in use" in plan.pending[0].reason


def test_spread_label_first() -> None:
    w = World([host("a1", zone="a"), host("a2", zone="a"), host("b1", zone="b")])
    w.apply(svc(replicas=2, spread="zone"))
    plan = w.step()
    assert {r.host for r in plan.run} == {"a1", "b1"}


def test_binpack_prefers_the_fullest_host_that_fits() -> None:
    w = World([host("big", cpus=8), host("small", cpus=2)])
    w.apply(svc("a", replicas=1, cpus=1.0), svc("b", replicas=1, cpus=1.0))
    plan = w.step()
    # both services' first task: no spread conflict, so the fuller-after-placement host wins
    assert [r.host for r in plan.run] == ["small", "small"]


def test_down_host_tasks_do_not_count_against_capacity(world: MakeWorld) -> None:
    w = world([host("h1", cpus=1), host("h2", cpus=1)])
    w.apply(svc(replicas=1, cpus=1.0))
    w.converge()
    lost = w.live()[0].host
    w.kill_host(lost)
    w.converge()
    assert {c.host for c in w.live()} == {"h1", "h2"} - {lost}


def test_admit_first_apply_sets_order_and_generation() -> None:
    w = fleet(1)
    w.apply(svc("db"), svc("web"))
    assert w.state.order == ("db", "web")
    assert w.state.generation == 1
    state = admit(w.state, w.cluster, 2)  # type: ignore[arg-type]
    assert state.services["web"] is w.state.services["web"]


def test_created_container_never_started_is_removed_and_replaced() -> None:
    w = fleet(1)
    w.apply(svc(replicas=1))
    w.converge()
    c = w.live()[0]
    w.containers["host1"] = [replace(c, state="created")]
    plan = w.step()
    assert_results(plan, stop=1)
    assert plan.state.services["web"].slot(1).last_exit.endswith("never started")
    w.converge()
    assert [c.state for c in w.live()] == ["running"]


def test_foreign_container_fields() -> None:
    c = Container("id", "n", "h", "other", "web", 1, "t", "s", "img", "running")
    assert c.live
