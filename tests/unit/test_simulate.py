"""Whole-change plans and what-ifs (issue 11), pure: the passes a change takes, simulated
on the model with every new task healthy at once."""

from __future__ import annotations

from dataclasses import replace

from minidock.core.simulate import FieldChange, simulate, spec_diff
from minidock.model import Cluster, HealthCheck, UpdatePolicy
from tests.sim import World, host, hosts, svc

HC = HealthCheck(("true",))


def web(image: str = "web:5", replicas: int = 4, **update: object):  # type: ignore[no-untyped-def]
    return svc(image=image, replicas=replicas, health=HC, update=UpdatePolicy(**update))  # type: ignore[arg-type]


def cluster(*services: object) -> Cluster:
    return Cluster("test", "cluster.toml", "inventory.toml", services)  # type: ignore[arg-type]


def converged(n: int = 3, *services: object) -> World:
    w = World(hosts(n))
    w.apply(*(services or (web(),)))  # type: ignore[arg-type]
    w.converge()
    return w


def test_a_change_of_image_and_replicas_shows_every_step_to_convergence() -> None:
    w = converged(3, web(parallelism=2))
    w.apply(web("web:6", replicas=6, parallelism=2))
    sim = simulate(w.cluster, w.inventory, w.observe(), w.state, w.now)  # type: ignore[arg-type]
    runs = [r for step in sim.steps for r in step.run]
    assert sorted(r.slot for r in runs) == [1, 2, 3, 4, 5, 6]
    assert all(r.service.image == "web:6" for r in runs)
    updates = [[r.slot for r in s.run if r.replaces] for s in sim.steps]
    assert [u for u in updates if u] == [[1, 2], [3, 4]]  # batches of parallelism 2
    assert sim.converged
    assert sim.below == ()
    assert w.live()
    assert all(c.image == "web:5" for c in w.live())  # nothing happened


def test_what_if_a_host_is_lost_shows_where_its_tasks_would_land() -> None:
    w = converged(3)
    carried = sorted(c.slot for c in w.live() if c.host == "host1")
    sim = simulate(w.cluster, w.inventory, w.observe(), w.state, w.now, lose=["host1"])  # type: ignore[arg-type]
    (step,) = sim.steps
    assert sorted(r.slot for r in step.run) == carried
    assert {r.host for r in step.run} <= {"host2", "host3"}
    assert (sim.converged, sim.pending, sim.below) == (True, (), ())


def test_what_if_says_what_would_fall_below_its_replicas_and_why() -> None:
    w = World([host("h1", cpus=2), host("h2", cpus=2)])
    w.apply(svc(replicas=2, cpus=2.0))
    w.converge()
    sim = simulate(w.cluster, w.inventory, w.observe(), w.state, w.now, lose=["h1"])  # type: ignore[arg-type]
    assert sim.steps == ()
    (pending,) = sim.pending
    assert "h1: down" in pending.reason
    assert "h2: needs 2 cpus, 0 free" in pending.reason
    assert sim.below == (("web", 1, 2),)


def test_what_if_a_drain_moves_the_hosts_tasks_first() -> None:
    w = converged(3)
    sim = simulate(w.cluster, w.inventory, w.observe(), w.state, w.now, drain=["host2"])  # type: ignore[arg-type]
    runs = [r for s in sim.steps for r in s.run]
    stops = [s for step in sim.steps for s in step.stop]
    assert all(r.host != "host2" for r in runs)
    assert {s.container.host for s in stops} == {"host2"}
    assert sim.converged


def test_the_spec_diff_names_fields_and_env_keys_never_values() -> None:
    old = svc(image="web:5", replicas=4, env=(("MODE", "a"), ("TOKEN", "s3cret")))
    new = replace(old, image="web:6", replicas=6, env=(("MODE", "b"), ("NEW", "x")))
    diff = {c.field: c for c in spec_diff(old, new)}
    assert diff["image"] == FieldChange("image", "web:5", "web:6")
    assert diff["replicas"] == FieldChange("replicas", "4", "6")
    assert diff["env"].new == "+NEW -TOKEN ~MODE"
    assert "s3cret" not in repr(diff)
    assert "b" not in diff["env"].new.split()
    assert spec_diff(old, old) == ()


# -- rebalance ----------------------------------------------------------------------------------
def test_rebalance_after_a_host_rejoins_restores_spread_one_move_at_a_time() -> None:
    from minidock.core.rebalance import moves, record

    w = World(hosts(3))
    w.apply(web(replicas=0))
    w.kill_host("host3")
    w.step()
    w.step()  # host3 is down before the service scales up
    w.apply(web(replicas=6))
    w.converge()
    w.revive_host("host3")
    w.converge()
    assert sorted(c.host for c in w.live()).count("host3") == 0  # nothing moves by itself
    planned = moves(w.state, w.inventory, w.observe())
    assert [m.target for m in planned] == ["host3", "host3"]
    assert {m.source for m in planned} == {"host1", "host2"}
    w.state, events = record(w.state, planned, w.now)
    assert [e.kind for e in events] == ["rebalance", "rebalance"]
    for _ in range(30):
        plan = w.step()
        assert len(plan.run) <= 1  # one at a time
        assert w.healthy_slots() == 6  # start-first, health-gated: never below replicas
        if plan.converged:
            break
    assert sorted(c.host for c in w.live()) == [
        "host1",
        "host1",
        "host2",
        "host2",
        "host3",
        "host3",
    ]
    assert moves(w.state, w.inventory, w.observe()) == ()  # balanced: nothing more to move


def test_rebalance_leaves_pinned_and_global_services_alone() -> None:
    from minidock.core.rebalance import moves
    from minidock.model import Volume

    w = World(hosts(2))
    w.apply(svc("db", replicas=0, volumes=(Volume("d", "/d"),)))
    w.kill_host("host2")
    w.step()
    w.step()
    w.apply(svc("db", replicas=2, volumes=(Volume("d", "/d"),)))
    w.converge()
    w.revive_host("host2")
    w.converge()
    assert moves(w.state, w.inventory, w.observe()) == ()
