"""Trust it unattended (issue 9), pure: the controller's own faults, services that must not
run twice, and the controller's authority over which task fills a slot."""

from __future__ import annotations

from minidock.core import ControllerState, forget, set_drained
from minidock.core.outcomes import note_failure
from minidock.model import PortMapping
from tests.sim import World, assert_results, host, svc


def fleet(n: int = 3) -> World:
    return World([host(f"host{i}") for i in range(1, n + 1)])


def carried(w: World, service: str = "db") -> str:
    (c,) = w.live(service)
    return c.host


# -- on_host_loss = "wait" --------------------------------------------------------------------
def test_wait_service_is_never_replaced_while_its_host_is_lost() -> None:
    w = fleet(3)
    w.apply(svc("db", replicas=1, on_host_loss="wait"), svc("web", replicas=2))
    w.converge()
    lost = carried(w)
    before = w.live("db")[0]
    w.kill_host(lost)
    for _ in range(5):
        plan = w.step()
        assert [r.service.name for r in plan.run if r.service.name == "db"] == []
        assert not plan.converged
    assert plan.state.hosts[lost].down
    (why,) = [line for line in plan.waiting if line.subject == "db.1"]
    assert f"stays on {lost}, which is down" in why.reason
    assert f"forget {lost}" in why.reason
    w.revive_host(lost)
    w.converge()
    assert w.live("db") == [before]  # the same container runs on


def test_a_replace_service_on_the_same_host_is_replaced() -> None:
    w = fleet(3)
    w.apply(svc("db", replicas=1, on_host_loss="wait"), svc("web", replicas=3))
    w.converge()
    lost = carried(w)
    web_there = [c.slot for c in w.live("web") if c.host == lost]
    w.kill_host(lost)
    w.step()
    plan = w.step()
    assert sorted(r.slot for r in plan.run) == web_there
    assert {r.service.name for r in plan.run} == {"web"}


def test_draining_the_lost_host_moves_a_wait_service() -> None:
    w = fleet(3)
    w.apply(svc("db", replicas=1, on_host_loss="wait"))
    w.converge()
    lost = carried(w)
    w.kill_host(lost)
    w.step()
    w.step()
    w.state = set_drained(w.state, lost, True)
    plan = w.step()
    assert_results(plan, run=1)
    assert plan.run[0].host != lost
    w.converge()
    w.revive_host(lost)
    plan = w.step()  # the stale copy is stopped as soon as its host answers
    assert [s.container.host for s in plan.stop] == [lost]
    w.converge()
    assert len(w.live("db")) == 1


def test_forgetting_the_lost_host_records_its_tasks_lost_and_moves_them() -> None:
    w = fleet(3)
    w.apply(svc("db", replicas=1, on_host_loss="wait"), svc("web", replicas=3))
    w.converge()
    lost = carried(w)
    w.kill_host(lost)
    for _ in range(3):
        w.step()
    state, events = forget(w.state, lost, w.now)
    kinds = [e.kind for e in events]
    assert kinds[0] == "host-forgotten"
    assert {(e.service, e.slot) for e in events[1:]} >= {("db", 1)}
    assert state.host(lost).tasks == ()
    w.state = state
    plan = w.step()
    assert [r.slot for r in plan.run if r.service.name == "db"] == [1]
    assert lost not in {r.host for r in plan.run}


def test_forgetting_a_host_whose_slots_were_refilled_keeps_the_replacements_records() -> None:
    """Issue 27: once host1 was down and its slots refilled on the other hosts, forget
    host1 loses only the stale tasks host1 ran (by their own ids); every slot keeps the
    record of its replacement, and the next pass changes nothing."""
    w = fleet(3)
    w.apply(svc("web", replicas=3))
    w.converge()
    stale = {c.slot: c.task for c in w.live("web") if c.host == "host1"}
    w.kill_host("host1")
    w.converge()
    records = {n: (r.task, r.host) for n, r in w.state.services["web"].slots.items()}
    assert all(host != "host1" for _, host in records.values())
    state, events = forget(w.state, "host1", w.now)
    lost = [(e.slot, e.message) for e in events if e.kind == "task-lost"]
    assert lost == [(n, f"web.{n}: task {t} lost with host1") for n, t in sorted(stale.items())]
    after = {n: (r.task, r.host) for n, r in state.services["web"].slots.items()}
    assert after == records
    w.state = state
    assert_results(w.step())


def test_an_unreachable_host_holds_its_slots_by_the_controllers_record() -> None:
    """A task started by this pass's decision on a host that then stops answering holds
    its slot, though the host never reported it: the slot's record says where it is."""
    w = fleet(2)
    w.apply(svc("web", replicas=1))
    plan = w.plan()
    (run,) = plan.run
    w.state = plan.state  # the decision is committed, then the host is cut off before acting
    w.kill_host(run.host)
    nxt = w.step()
    assert nxt.run == ()
    assert nxt.state.services["web"].slot(1).phase == "unreachable"


def test_two_copies_never_run_for_a_wait_service_through_flapping() -> None:
    w = fleet(3)
    w.apply(svc("db", replicas=1, on_host_loss="wait"))
    w.converge()
    lost = carried(w)
    for _ in range(3):
        w.kill_host(lost)
        for _ in range(4):
            w.step()
        w.revive_host(lost)
        w.step()
        assert len([c for cs in w.containers.values() for c in cs if c.live]) == 1
    assert [c.host for c in w.live("db")] == [lost]


def test_flapping_host_costs_one_replacement_per_lost_slot_per_outage_none_on_heal() -> None:
    w = fleet(3)
    w.apply(svc("web", replicas=4))
    w.converge()
    for _ in range(2):  # partition and heal, twice in a row (each time the busiest host)
        lost = max(sorted(w.containers), key=lambda h: len([c for c in w.live() if c.host == h]))
        carried_slots = sorted(c.slot for c in w.live("web") if c.host == lost)
        assert carried_slots
        w.kill_host(lost)
        runs = [r for _ in range(4) for r in w.step().run]
        assert sorted(r.slot for r in runs) == carried_slots  # once per lost slot
        w.revive_host(lost)
        healed = w.step()
        assert healed.run == ()  # none on heal: the host's stale copies are stopped
        assert [s.container.host for s in healed.stop] == [lost] * len(carried_slots)
        w.converge()
        assert sorted(w.slots("web")) == [1, 2, 3, 4]
        assert all(len(hs) == 1 for hs in w.slots("web").values())


# -- losing the state directory -----------------------------------------------------------------
def test_a_new_store_adopts_what_runs_and_says_its_state_is_rebuilt() -> None:
    w = fleet(3)
    specs = (svc("web", replicas=3), svc("db", replicas=1, on_host_loss="wait"))
    w.apply(*specs)
    w.converge()
    running = sorted(c.id for c in w.live())
    w.state, w.generation = ControllerState(), 0  # state.db is gone
    w.apply(*specs)
    plan = w.step()
    assert_results(plan)  # starts nothing, stops nothing
    assert "rebuilt from 4 running tasks" in plan.state.rebuilt
    assert [e.kind for e in plan.events] == ["state-rebuilt"]
    assert w.converge().converged
    assert sorted(c.id for c in w.live()) == running
    w.apply(*specs)  # a later apply to the same store is not a rebuild
    assert w.step().events == ()


def test_a_new_store_on_an_empty_fleet_is_not_rebuilt() -> None:
    w = fleet(2)
    w.apply(svc("web", replicas=2))
    plan = w.step()
    assert plan.state.rebuilt == ""
    assert not plan.state.adopting


# -- ports held outside the cluster -------------------------------------------------------------
def test_a_host_port_held_outside_minidock_is_seen_by_the_scheduler() -> None:
    w = fleet(2)
    w.held_ports = {"host1": frozenset({"8080/tcp"})}  # a foreign container, or a process
    w.apply(svc("web", replicas=2, ports=(PortMapping(8080, 80),)))
    plan = w.step()
    assert [r.host for r in plan.run] == ["host2"]
    (pending,) = plan.pending
    assert "host1: host port 8080/tcp (held outside MiniDock) in use" in pending.reason
    assert "host2: host port 8080/tcp in use" in pending.reason


# -- a host that cannot start the task ----------------------------------------------------------
def test_a_start_that_failed_on_one_host_is_tried_elsewhere_then_backs_off() -> None:
    """A missing image (or a full disk) on one host: the next attempt goes elsewhere,
    after the backoff; never a loop on the same host."""
    w = fleet(2)
    w.apply(svc("web", replicas=1))
    plan = w.plan()
    (run,) = plan.run
    failed, _ = note_failure(plan.state, "web", 1, run.task, "image web:5 is not on it", w.now)
    w.state = failed
    assert failed.services["web"].slot(1).avoid == run.host
    assert w.step().run == ()  # backing off
    w.now += 5
    (retry,) = w.step().run
    assert retry.host != run.host
    w.converge()
    assert w.state.services["web"].slot(1).avoid == ""
