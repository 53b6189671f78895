"""The record rule (issue 19): a slot's record (which task fills it, on which host) survives
every change of spec: a new generation, scaling, rollback, reset. Only the task that
replaces the slot's task changes it; a slot scaled away leaves with its last task.
Pinning, fencing and the survivor of a slot are decided from it."""

from __future__ import annotations

from minidock.core import pinned_on, reset, rollback, set_drained
from minidock.core.slots import SlotPhase
from minidock.model import Constraint, RestartPolicy, UpdatePolicy, Volume
from tests.sim import MakeWorld, World, host, hosts, svc

PGDATA = (Volume("pgdata", "/var/lib/postgresql/data"),)
CRASH_TWICE = RestartPolicy(delay=1.0, max_delay=1.0, max_attempts=2, window=0)


def db(image: str = "pg:16", replicas: int = 1, **kw: object):  # type: ignore[no-untyped-def]
    return svc("db", image=image, replicas=replicas, volumes=PGDATA, cpus=1.0, **kw)


def filler(on: str):  # type: ignore[no-untyped-def]
    """A service that makes `on` the fullest host: a fresh placement would choose it."""
    return svc("filler", cpus=2.0, constraints=(Constraint("host", "==", on),))


def home_of(w: World | object, service: str = "db", slot: int = 1) -> str:
    return w.state.services[service].slot(slot).host  # type: ignore[attr-defined]


def test_a_pinned_slot_keeps_its_host_after_reset() -> None:
    w = World(hosts(3))
    w.apply(db("crash:1", restart=CRASH_TWICE))  # host1: every host is as empty
    w.run_until(lambda plan: w.state.services["db"].slot(1).failed, what="Failed")
    w.apply(db("crash:1", restart=CRASH_TWICE), filler("host2"))  # host2 is now the fullest
    w.converge()
    assert home_of(w) == "host1"
    w.state = reset(w.state, "db")
    record = w.state.services["db"].slot(1)
    assert (record.phase, record.host, record.attempts) == (SlotPhase.EMPTY, "host1", ())
    plan = w.step()
    assert [(r.slot, r.host) for r in plan.run if r.service.name == "db"] == [(1, "host1")]


def test_a_pinned_slot_keeps_its_host_across_an_apply_that_changes_anything() -> None:
    w = World(hosts(3))
    w.apply(db("crash:1", restart=CRASH_TWICE))
    w.run_until(lambda plan: w.state.services["db"].slot(1).failed, what="Failed")
    w.apply(db("crash:1", restart=CRASH_TWICE), filler("host2"))
    w.converge()
    w.apply(db("pg:16", replicas=2, restart=CRASH_TWICE), filler("host2"))  # a fix, and scale
    assert w.state.services["db"].slot(1).host == "host1"
    assert not w.state.services["db"].slot(1).failed  # a new apply clears Failed
    w.converge()
    assert home_of(w, slot=1) == "host1"
    assert {c.slot: c.host for c in w.live("db")}[1] == "host1"


def test_only_replicas_changed_keeps_the_record_and_its_host() -> None:
    w = World(hosts(3))
    w.apply(db())
    w.converge()
    w.apply(db(), filler("host2"))
    w.converge()
    (task,) = w.live("db")
    w.containers[task.host] = []  # its task is gone (removed by hand, or crashed and removed)
    w.apply(db(replicas=2), filler("host2"))
    assert w.state.services["db"].slot(1).task == task.task
    w.converge()
    assert {c.slot: c.host for c in w.live("db")}[1] == task.host == "host1"


def test_a_pinned_slot_keeps_its_host_after_a_rollback() -> None:
    w = World(hosts(3))
    policy = UpdatePolicy(monitor=0, failure_action="rollback")
    w.apply(db(update=policy))
    w.converge()
    w.apply(db(update=policy), filler("host2"))
    w.converge()
    assert home_of(w) == "host1"
    w.apply(db("crash:1", update=policy), filler("host2"))  # in place, stop-first: then fails
    w.run_until(lambda plan: w.rollout("db").rollback, what="the automatic rollback")
    assert home_of(w) == "host1"
    w.converge()
    assert {c.slot: (c.host, c.image) for c in w.live("db")} == {1: ("host1", "pg:16")}


def test_a_pinned_slot_keeps_its_host_after_the_operators_rollback() -> None:
    w = World(hosts(3))
    w.apply(db("pg:16"))
    w.converge()
    w.apply(db("pg:17"), filler("host2"))
    w.converge()
    (task,) = w.live("db")
    w.containers[task.host] = []
    w.state = rollback(w.state, "db")
    assert home_of(w) == "host1"
    w.converge()
    assert {c.slot: (c.host, c.image) for c in w.live("db")} == {1: ("host1", "pg:16")}


def test_a_scaled_away_slot_leaves_with_its_last_task() -> None:
    w = World(hosts(3))
    w.apply(svc("web", replicas=3))
    w.converge()
    w.apply(svc("web", replicas=2))
    assert 3 in w.state.services["web"].slots  # its task still runs
    w.converge()
    assert sorted(w.state.services["web"].slots) == [1, 2]


def test_fencing_after_a_change_keeps_the_replacement_the_record_names(world: MakeWorld) -> None:
    w = world(3)
    w.apply(svc("web", replicas=2))
    w.converge()
    first = {c.slot: c for c in w.live("web")}
    lost = first[1].host
    w.kill_host(lost)
    w.run_until(lambda plan: len(w.live("web")) == 2, what="slot 1 refilled")
    replacement = next(c for c in w.live("web") if c.slot == 1)
    assert replacement.host != lost
    w.apply(svc("web", replicas=3))  # a change while the old task is still out there
    w.revive_host(lost)
    w.converge()
    by_slot = {c.slot: c.task for c in w.live("web")}
    assert by_slot[1] == replacement.task  # the record decides, never the lowest task id
    assert all(c.task != first[1].task for c in w.live("web"))


def test_the_stale_task_loses_whichever_task_id_is_lower() -> None:
    """The same scenario at several clocks, so the stale task's id is sometimes the lower."""
    lower = 0
    for start in (1000.0, 1000.5, 1001.25, 1003.0, 1010.0, 1020.5):
        w = World(hosts(3), now=start)
        w.apply(svc("web", replicas=2))
        w.converge()
        stale = next(c for c in w.live("web") if c.slot == 1)
        w.kill_host(stale.host)
        w.run_until(lambda plan, w=w: len(w.live("web")) == 2, what="slot 1 refilled")
        replacement = next(c for c in w.live("web") if c.slot == 1)
        lower += stale.task < replacement.task
        w.apply(svc("web", replicas=3))
        w.revive_host(stale.host)
        w.converge()
        assert next(c.task for c in w.live("web") if c.slot == 1) == replacement.task
    assert lower  # at least one case where "the lowest task id" would have kept the stale one


def test_a_global_service_with_a_volume_is_pinned_on_every_host() -> None:
    w = World(hosts(3))
    w.apply(svc("agent", mode="global", replicas=1, volumes=PGDATA))
    w.converge()
    assert {h: pinned_on(w.state, h) for h in ("host1", "host2", "host3")} == {
        "host1": ["agent.1"],
        "host2": ["agent.2"],
        "host3": ["agent.3"],
    }


def test_drains_pinned_check_reads_the_kept_record() -> None:
    w = World([host("host1"), host("host2"), host("host3")])
    w.apply(db())
    w.converge()
    w.apply(db(replicas=2))  # a change: the record is kept, so the check still sees slot 1
    assert pinned_on(w.state, "host1") == ["db.1"]
    w.state = set_drained(w.state, "host1", True)
    plan = w.step()
    assert all(r.slot != 1 for r in plan.run)
