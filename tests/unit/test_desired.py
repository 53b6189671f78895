"""The whole desired state, honoured (issue 13), pure: constraint changes move tasks like a
rolling update, hosts that shrink move what no longer fits, removals are explicit."""

from __future__ import annotations

from dataclasses import replace

from minidock.core import failure_action
from minidock.model import Constraint, HealthCheck, UpdatePolicy
from tests.sim import World, assert_results, host, svc

HC = HealthCheck(("true",))
NOT_A = (Constraint("zone", "!=", "a"),)


def zones() -> World:
    """host1 and host2 in zone a, host3 in zone b (the issue's lab)."""
    return World([host("host1", zone="a"), host("host2", zone="a"), host("host3", zone="b")])


def placed(w: World, service: str = "web") -> dict[int, str]:
    return {c.slot: c.host for c in w.live(service)}


def test_a_constraint_change_moves_the_tasks_it_excludes_start_first_never_below() -> None:
    w = zones()
    pol = UpdatePolicy(order="start-first", monitor=0.0)
    w.apply(svc(replicas=2, health=HC, update=pol, constraints=(Constraint("zone", "==", "a"),)))
    w.converge()
    assert set(placed(w).values()) == {"host1", "host2"}
    w.apply(svc(replicas=2, health=HC, update=pol, constraints=NOT_A))
    first = w.step()
    assert not first.converged
    (started,) = [e for e in first.events if e.kind == "rollout-started"]
    assert "moving 2 tasks: host1 no longer meets constraint zone != a" in started.message
    assert all(r.host == "host3" for r in first.run)
    assert all(r.reason.startswith("move: host") for r in first.run)
    for _ in range(20):
        plan = w.step()
        assert len({c.slot for c in w.live() if c.health == "healthy"}) == 2  # never below
        if plan.converged:
            break
    assert placed(w) == {1: "host3", 2: "host3"}
    assert w.state.services["web"].rollout.phase == "completed"


def test_an_inventory_label_change_under_a_running_task_moves_it() -> None:
    w = zones()
    w.apply(svc(replicas=1, health=HC, update=UpdatePolicy(monitor=0.0), constraints=NOT_A))
    w.converge()
    assert placed(w) == {1: "host3"}
    w.hosts = [host("host1", zone="a"), host("host2", zone="b"), host("host3", zone="a")]
    plan = w.step()
    # a move (the same spec) surges start-first where another host has room, whatever the
    # update order: nothing of the new task clashes with the old (docs/rollouts.md)
    assert_results(plan, run=1, replaces=0)
    assert plan.run[0].host == "host2"
    w.converge()
    assert placed(w) == {1: "host2"}


def test_status_is_not_converged_while_a_task_violates_its_placement() -> None:
    w = zones()
    w.apply(svc(replicas=1, constraints=(Constraint("zone", "==", "a"),)))
    w.converge()
    w.apply(svc(replicas=1, constraints=(Constraint("zone", "==", "c"),)))  # nowhere to go
    plan = w.step()
    assert not plan.converged
    assert plan.pending  # says why it cannot move, host by host
    assert "constraint zone == c not met" in plan.pending[0].reason
    assert len(w.live()) == 1  # and the task runs on meanwhile


def test_a_failed_move_pauses_rather_than_rolling_back_to_an_older_spec() -> None:
    """A move has no spec to undo: `failure_action = "rollback"` pauses it instead of
    going back to whatever older spec the service kept as its previous one."""
    w = zones()
    pol = UpdatePolicy(monitor=0.0, failure_action="rollback")
    w.apply(svc(image="web:5", replicas=1, health=HC, update=pol))
    w.converge()
    w.apply(svc(image="web:6", replicas=1, health=HC, update=pol))
    w.converge()  # its previous spec is web:5
    w.apply(svc(image="web:6", replicas=1, health=HC, update=pol, constraints=NOT_A))
    w.step()
    ss = w.state.services["web"]
    assert ss.rollout.relocating
    failed, (event,) = failure_action(
        replace(ss, rollout=replace(ss.rollout, failures=1)), "x", 1.0
    )
    assert (failed.rollout.phase, event.kind) == ("paused", "rollout-paused")
    assert failed.spec.image == "web:6"


# -- resources that shrink ----------------------------------------------------------------------
def test_a_host_that_shrinks_moves_what_no_longer_fits_highest_slots_first() -> None:
    w = World([host("h1", cpus=4), host("h2", cpus=4)])
    w.apply(svc(replicas=4, cpus=1.0, health=HC))
    w.converge()
    assert placed(w) == {1: "h1", 2: "h2", 3: "h1", 4: "h2"}
    w.hosts = [host("h1", cpus=1), host("h2", cpus=4)]  # the inventory now says 1 cpu
    plan = w.step()
    (run,) = plan.run
    assert (run.slot, run.host) == (3, "h2")
    assert run.reason == "h1 is over-committed (cpus 2/1)"
    assert len(w.live()) == 5  # start-first: the old task stays until the new one is ready
    w.converge()
    assert placed(w) == {1: "h1", 2: "h2", 3: "h2", 4: "h2"}


def test_a_shrunk_host_with_nowhere_to_move_keeps_its_tasks_and_says_why() -> None:
    w = World([host("h1", cpus=2)])
    w.apply(svc(replicas=2, cpus=1.0))
    w.converge()
    w.hosts = [host("h1", cpus=1)]
    plan = w.step()
    (pending,) = plan.pending
    assert pending.slot == 2
    assert pending.reason.startswith("h1 is over-committed (cpus 2/1): ")
    assert len(w.live()) == 2
