"""Real workloads (issue 15), the core's part, pure: a named volume pins a slot to
the host that holds its data; global services run one task on every eligible host."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from minidock.commands.docker import run_argv, volume_name
from minidock.core import rebalance, set_drained
from minidock.model import Constraint, HealthCheck, PortMapping, UpdatePolicy, Volume
from tests.sim import World, assert_results, host, hosts, svc

PGDATA = (Volume("pgdata", "/var/lib/postgresql/data"),)
HC = HealthCheck(("true",))


def db(image: str = "pg:16", **kw: object):  # type: ignore[no-untyped-def]
    return svc("db", image=image, volumes=PGDATA, **kw)


def where(w: World, service: str = "db") -> dict[int, str]:
    return {c.slot: c.host for c in w.live(service)}


# -- volumes ----------------------------------------------------------------------------------
def test_a_named_volume_is_the_slots_own_and_a_bind_mount_goes_as_is() -> None:
    s = svc("db", volumes=(*PGDATA, Volume("/srv/conf", "/etc/app", read_only=True)))
    argv, _ = run_argv(s, "prod", 2, "t1", s.spec_hash())
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert mounts == ["prod_db.2_pgdata:/var/lib/postgresql/data", "/srv/conf:/etc/app:ro"]
    assert volume_name("prod", "db", 2, "pgdata") == "prod_db.2_pgdata"  # as it always was

    assert s.pinned
    assert not svc("web", volumes=(Volume("/srv/conf", "/etc/app"),)).pinned
    assert replace(s, volumes=PGDATA).spec_hash() != s.spec_hash()  # a change rolls out


def test_volume_names_are_unambiguous_across_clusters_and_services() -> None:
    assert volume_name("shop_eu", "db", 1, "data") != volume_name("shop", "eu_db", 1, "data")
    assert volume_name("a", "b.1_c", 2, "x") != volume_name("a", "b", 1, "c.2_x")
    names = [
        (c, s, n, v)
        for c in ("shop", "shop_eu", "shop_eu_db", "eu", "shop.eu", "shop-eu")
        for s in ("db", "eu_db", "db_1", "db.1", "eu", "1")
        for n in (1, 2, 12)
        for v in ("data", "db_data", "1_data", "Data", "d.1")
    ]
    made = {volume_name(*parts) for parts in names}
    assert len(made) == len(names)
    assert all(re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", m) for m in made)  # Docker's rule


def test_a_pinned_slot_is_never_replaced_elsewhere_while_its_host_is_lost() -> None:
    w = World(hosts(3))
    w.apply(db(replicas=2))
    w.converge()
    lost = where(w)[1]
    w.kill_host(lost)
    for _ in range(5):
        plan = w.step()
        assert [r for r in plan.run if r.slot == 1] == []
    assert plan.degraded()  # exit 4: it waits for its host, and says so
    w.revive_host(lost)
    w.converge()
    assert where(w)[1] == lost


def test_a_pinned_slot_restarts_on_its_own_host_and_updates_there_stop_first() -> None:
    w = World(hosts(3))
    w.apply(db(replicas=1, health=HC, update=UpdatePolicy(order="start-first", monitor=0)))
    w.converge()
    home = where(w)[1]
    (c,) = w.live("db")
    w.containers[home] = [replace(c, state="exited", exit_code=1, finished_at=w.now)]
    w.step()  # the exit is seen: its backoff starts
    w.now += 10
    restart = w.step()
    assert [r.host for r in restart.run] == [home]
    w.converge()
    w.apply(db(replicas=1, image="pg:17", health=HC, update=UpdatePolicy(order="start-first")))
    plan = w.step()
    (run,) = plan.run
    assert (run.host, run.replaces is not None) == (home, True)  # never two on one volume
    w.converge()
    assert where(w) == {1: home}


def test_draining_a_pinned_host_keeps_the_task_unless_told_to_move_it() -> None:
    w = World(hosts(2))
    w.apply(db(replicas=1), svc("web", replicas=1))
    w.converge()
    home = where(w)[1]
    w.state = set_drained(w.state, home, True)
    plan = w.step()
    (pending,) = [p for p in plan.pending if p.service == "db"]
    assert "--move-volumes-unsafe" in pending.reason
    assert where(w) == {1: home}
    w.state = set_drained(w.state, home, True, move_volumes=True)
    w.converge()
    assert where(w)[1] != home


def test_a_shrunk_host_does_not_evict_a_pinned_task() -> None:
    w = World([host("h1", cpus=2), host("h2", cpus=4)])
    w.apply(db(replicas=1, cpus=2.0), svc("web", replicas=1, cpus=1.0, constraints=()))
    w.converge()
    home = where(w)[1]
    w.hosts = [host(h.name, cpus=1 if h.name == home else 4) for h in w.hosts]
    plan = w.step()
    assert [r.service.name for r in plan.run] in ([], ["web"])
    assert where(w)[1] == home


def test_ports_and_volumes_do_not_block_each_other() -> None:
    w = World(hosts(2))
    w.apply(db(replicas=2, ports=(PortMapping(5432, 5432),)))
    plan = w.step()
    assert_results(plan, run=2)
    assert {r.host for r in plan.run} == {"host1", "host2"}


# -- global services --------------------------------------------------------------------------
def exporter(image: str = "node-exporter:1", **kw: object):  # type: ignore[no-untyped-def]
    return svc("exporter", image=image, mode="global", replicas=0, **kw)


def per_host(w: World) -> dict[str, int]:
    return {c.host: c.slot for c in w.live("exporter")}


def test_a_global_service_runs_one_task_on_every_eligible_host() -> None:
    w = World([host("h1", zone="a"), host("h2", zone="a"), host("h3", zone="b")])
    w.apply(exporter(ports=(PortMapping(9100, 9100),)))
    w.converge()
    assert per_host(w) == {"h1": 1, "h2": 2, "h3": 3}
    assert w.state.services["exporter"].wanted() == 3


def test_a_global_service_follows_hosts_in_and_out() -> None:
    w = World([host("h1"), host("h2")])
    w.apply(exporter())
    w.converge()
    w.hosts = [host("h1"), host("h2"), host("h3")]  # a host joins
    w.containers["h3"] = []
    w.converge()
    assert per_host(w) == {"h1": 1, "h2": 2, "h3": 3}
    w.state = set_drained(w.state, "h2", True)  # drained: its task is removed, not moved
    plan = w.step()
    assert [s.container.host for s in plan.stop] == ["h2"]
    assert plan.run == ()
    w.converge()
    assert per_host(w) == {"h1": 1, "h3": 3}
    w.state = set_drained(w.state, "h3", True)  # to leave the inventory, a host is drained
    w.state = set_drained(w.state, "h2", False)
    w.converge()
    assert per_host(w) == {"h1": 1, "h2": 2}
    w.hosts = [host("h1"), host("h2")]
    assert w.converge().state.services["exporter"].global_slots == {"h1": 1, "h2": 2}


def test_a_global_service_honours_constraints_and_a_lost_host_is_not_refilled_elsewhere() -> None:
    w = World([host("h1", zone="a"), host("h2", zone="a"), host("h3", zone="b")])
    w.apply(exporter(constraints=(Constraint("zone", "==", "a"),)))
    w.converge()
    assert per_host(w) == {"h1": 1, "h2": 2}
    w.kill_host("h1")
    for _ in range(4):
        plan = w.step()
        assert all(r.host != "h3" for r in plan.run)
    assert "h1 down" in plan.degraded()
    assert [p.slot for p in plan.pending] == [1]  # its host is down: pending there, exit 4


@pytest.mark.parametrize("image", ["node-exporter:1", "node-exporter:2"])
def test_a_global_service_whose_constraints_move_it_to_other_hosts_converges(image: str) -> None:
    """The hosts that leave free their slot numbers for the one that joins: slot 1 goes
    to h1 while its old task still runs on h2. That task is replaced on h1 (stop-first),
    not in place on h2, which the constraints refuse (it was pending there forever)."""
    w = World(hosts(3))
    w.apply(exporter(constraints=(Constraint("host", "!=", "host1"),)))
    w.converge()
    assert per_host(w) == {"host2": 1, "host3": 2}
    w.apply(exporter(image=image, constraints=(Constraint("host", "==", "host1"),)))
    w.converge(limit=10)
    assert per_host(w) == {"host1": 1}
    assert {c.image for c in w.live("exporter")} == {image}


def test_a_service_made_global_keeps_its_tasks_where_they_run() -> None:
    """A replicated service's task on host2 becomes the global service's task of host2:
    given host1's number, it satisfied slot 1 from host2 and held host2's port against
    slot 2 for ever (found by test_whole_decision at random)."""
    port = (PortMapping(9100, 9100),)
    w = World(hosts(3))
    w.apply(
        svc("exporter", replicas=1, ports=port, constraints=(Constraint("host", "==", "host2"),))
    )
    w.converge()
    (before,) = w.live("exporter")
    assert before.host == "host2"
    w.apply(exporter(ports=port))
    w.converge(limit=30)
    assert per_host(w) == {"host1": 2, "host2": before.slot, "host3": 3}


def test_a_pinned_service_made_global_keeps_one_slot_a_host_and_the_others_data() -> None:
    """Two pinned slots on host1 made global: host1 keeps one, the other is scaled away
    (its record and volume kept), and host2 and host3 get numbers of their own. Handed to
    host2, slot 2 ran on host1 by its data for ever: two tasks on host1, none on host2
    (found by test_whole_decision at random)."""
    w = World(hosts(3))
    w.apply(db(replicas=2, constraints=(Constraint("host", "==", "host1"),)))
    w.converge()
    assert where(w) == {1: "host1", 2: "host1"}
    w.apply(db(mode="global", replicas=0))
    w.converge(limit=30)
    assert sorted(c.host for c in w.live("db")) == ["host1", "host2", "host3"]
    ss = w.state.services["db"]
    assert ss.global_slots["host1"] == 1
    assert 2 not in ss.global_slots.values()
    assert ss.slots[2].host == "host1"  # slot 2's data stays where it is, for the operator


def test_a_global_service_made_replicated_places_its_slots_anywhere_it_may() -> None:
    """The hosts a global service's slots were on are not a replicated one's: slot 1 was
    host3's, and a replicated spec that keeps off host3 places it elsewhere (it was pending
    on host3 for ever)."""
    w = World(hosts(3))
    w.apply(exporter(constraints=(Constraint("host", "==", "host3"),)))
    w.converge()
    assert per_host(w) == {"host3": 1}
    w.apply(svc("exporter", replicas=2, constraints=(Constraint("host", "!=", "host3"),)))
    w.containers["host3"] = []  # slot 1's task gone (its stop-first run cut short): refilled
    w.converge(limit=20)
    assert sorted(c.host for c in w.live("exporter")) == ["host1", "host2"]


def test_a_global_service_updates_in_place_per_host() -> None:
    w = World(hosts(3))
    w.apply(exporter(health=HC, update=UpdatePolicy(parallelism=1, monitor=0)))
    w.converge()
    before = per_host(w)
    w.apply(exporter(image="node-exporter:2", health=HC, update=UpdatePolicy(monitor=0)))
    plan = w.step()
    (run,) = plan.run
    assert run.replaces is not None
    assert run.host == run.replaces.host
    w.converge()
    assert per_host(w) == before
    assert {c.image for c in w.live("exporter")} == {"node-exporter:2"}


# -- several clusters on one fleet -------------------------------------------------------------
def test_other_clusters_tasks_hold_capacity_and_ports_but_are_never_touched() -> None:
    w = World([host("h1", cpus=2), host("h2", cpus=2)])
    w.apply(svc("web", replicas=1, cpus=2.0, ports=(PortMapping(80, 80),)))
    w.converge()
    (ours,) = w.live()
    theirs = replace(ours, id="x1", cluster="other", host="h2", task="o1")
    w.containers["h2"].append(theirs)
    w.apply(svc("web", replicas=2, cpus=2.0, ports=(PortMapping(80, 80),)))
    plan = w.step()
    (pending,) = plan.pending
    assert "h2: needs 2 cpus, 0 free" in pending.reason
    assert theirs not in [s.container for s in plan.stop]


def test_another_clusters_published_port_is_minidocks_not_held_outside() -> None:
    w = World([host("h1"), host("h2")])
    w.apply(svc("web", replicas=1, ports=(PortMapping(80, 80),)))
    w.converge()
    (ours,) = w.live()
    other = "h2" if ours.host == "h1" else "h1"
    theirs = replace(ours, id="x1", cluster="other", host=other, task="o1")
    w.containers[other].append(theirs)
    w.held_ports[other] = frozenset({"80/tcp"})  # the probe sees it bound, as on a real host
    w.apply(svc("web", replicas=2, ports=(PortMapping(80, 80),)))
    (pending,) = w.step().pending
    assert f"{other}: host port 80/tcp in use" in pending.reason
    assert "held outside MiniDock" not in pending.reason


def test_another_clusters_tasks_of_the_same_name_do_not_count_toward_spread() -> None:
    w = World([host("h1"), host("h2")])
    w.apply(svc("web", replicas=1))
    w.converge()
    (ours,) = w.live()
    other = "h2" if ours.host == "h1" else "h1"
    theirs = [replace(ours, id=f"x{n}", cluster="other", host=other, task=f"o{n}") for n in (1, 2)]
    w.containers[other].extend(theirs)  # two of another cluster's `web` on the other host
    w.apply(svc("web", replicas=2))
    (run,) = w.step().run
    assert run.host == other  # spread counts this cluster's web alone


def test_rebalance_counts_only_its_own_clusters_tasks_toward_spread() -> None:
    w = World(hosts(3))
    w.apply(svc("web", replicas=2))
    w.converge()
    assert sorted(c.host for c in w.live()) == ["host1", "host2"]  # spread: nothing to move
    ours = next(c for c in w.live() if c.host == "host2")
    for n in (1, 2):  # another cluster's "web", twice on host2
        theirs = replace(ours, id=f"x{n}", cluster="other", task=f"o{n}", slot=n)
        w.containers["host2"].append(theirs)
    assert rebalance.moves(w.state, w.inventory, w.observe()) == ()
