"""The scalable scheduler decides exactly as today's exhaustive one (tests/reference_scheduler.py).

Two levels, both on random fleets (host sizes, labels, drained and down hosts, ports held
outside MiniDock, tasks of other services and clusters) and random services (spread labels,
cpus and memory with decimal fractions that do not add up exactly, host ports, constraints):

- operation by operation: the same sequence of `place` (with `avoid`, `only`),
  `place_replacing`, `free` and `unreserve` on both fleets gives the same placements, the
  same per-host reasons, the same `score` of every host, the same `spread_counts` and the
  same load on every host, float for float;
- pass by pass: whole `reconcile()` and `rebalance.moves()` calls with the reference
  scheduler patched in return the same plans as with the real one, while the world deploys,
  loses hosts, gets them back, drains one and rolls out a new spec.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.reference_scheduler as reference
from minidock.core import rebalance, rollout, scheduler
from minidock.core.intents import set_drained
from minidock.model import Constraint, Container, Host, PortMapping, Service
from tests.sim import World, host, svc

# the module (`minidock.core.reconcile` the attribute is the function of that name)
reconcile_module = importlib.import_module("minidock.core.reconcile")
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HypothesisHealth.too_slow]
)
MIB = 1 << 20
NAMES = ["web", "db", "api"]
PORTS = ["80/tcp", "8080/tcp", "53/udp"]
CPUS = [0.0, 0.1, 0.2, 0.3, 0.25, 0.7, 1.0]
MEMORY = [0, 100 * MIB, 256 * MIB, 300 * MIB, 700 * MIB]


@st.composite
def fleet_hosts(draw: st.DrawFn) -> list[Host]:
    names = draw(st.lists(st.sampled_from("abcdefghijkl"), max_size=9, unique=True))
    out = []
    for n in names:
        labels = {}
        zone = draw(st.sampled_from([None, "a", "b", "c"]))
        if zone is not None:
            labels["zone"] = zone
        if draw(st.booleans()):
            labels["rack"] = draw(st.sampled_from(["r1", "r2"]))
        out.append(
            host(
                f"h{n}",
                cpus=draw(st.sampled_from([None, 0.5, 1.0, 1.5, 2.0, 3.0])),
                memory=draw(st.sampled_from([None, 512 * MIB, 1024 * MIB, 2048 * MIB])),
                **labels,
            )
        )
    return out


@st.composite
def services(draw: st.DrawFn, hosts: list[Host]) -> Service:
    keys = [f"h{c}" for c in "abc"] + [h.name for h in hosts[:2]]
    constraints = draw(
        st.lists(
            st.one_of(
                st.builds(Constraint, st.just("zone"), st.sampled_from(["==", "!="]), st.just("a")),
                st.builds(Constraint, st.just("host"), st.just("!="), st.sampled_from(keys)),
                st.builds(Constraint, st.just("rack"), st.just("=="), st.just("r1")),
            ),
            max_size=2,
        )
    )
    return svc(
        draw(st.sampled_from(NAMES)),
        cpus=draw(st.sampled_from(CPUS)),
        memory=draw(st.sampled_from(MEMORY)),
        ports=tuple(
            PortMapping(int(p.split("/")[0]), 80, p.split("/")[1])  # type: ignore[arg-type]
            for p in draw(st.lists(st.sampled_from(PORTS), max_size=2, unique=True))
        ),
        constraints=tuple(constraints),
        spread=draw(st.sampled_from([None, "zone", "rack"])),
    )


@st.composite
def containers(draw: st.DrawFn, hosts: list[Host]) -> Container:
    n = next(_ids)
    return Container(
        id=f"c{n}",
        name=f"x.{n}",
        host=draw(st.sampled_from([h.name for h in hosts] + ["ghost"])),
        cluster=draw(st.sampled_from(["test", "other"])),
        service=draw(st.sampled_from(NAMES)),
        slot=1,
        task=f"t{n}",
        spec="s",
        image="i",
        state=draw(st.sampled_from(["running", "running", "created", "exited"])),
        cpus=draw(st.sampled_from(CPUS)),
        memory=draw(st.sampled_from(MEMORY)),
        host_ports=tuple(draw(st.lists(st.sampled_from(PORTS), max_size=2, unique=True))),
    )


_ids = iter(range(1, 10**9))


def load_of(fleet: Any, name: str) -> tuple[float, int, frozenset[str], list[tuple[str, int]]]:
    """One host's load, comparable across both schedulers (tasks as a multiset)."""
    load = fleet.load[name]
    tasks = load.tasks if isinstance(load.tasks, dict) else Counter(load.tasks)
    return (load.cpus, load.memory, frozenset(load.ports), sorted(tasks.items()))


def assert_same(new: scheduler.Fleet, ref: reference.Fleet, specs: list[Service]) -> None:
    assert [h.name for h in new.hosts] == [h.name for h in ref.hosts]
    for h in ref.hosts:
        assert load_of(new, h.name) == load_of(ref, h.name), h.name
    for s in specs:
        spread = reference.spread_counts(s, ref)  # type: ignore[arg-type]
        assert scheduler.spread_counts(s, new) == spread
        for h in ref.hosts:
            want = reference.score(h, s, ref, spread)  # type: ignore[arg-type]
            assert scheduler.score(h, s, new, spread) == want


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    hosts = draw(fleet_hosts())
    names = [h.name for h in hosts]
    eligible = {
        n: draw(st.sampled_from([None, None, None, "down (refused)", "drained", ""])) for n in names
    }
    held = {n: frozenset(draw(st.lists(st.sampled_from(PORTS), max_size=1))) for n in names}
    found = draw(st.lists(containers(hosts), max_size=12)) if hosts else []
    specs = draw(st.lists(services(hosts), min_size=1, max_size=4))
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["place", "place", "place", "avoid", "only", "replace", "free"]),
                st.integers(0, 100),
                st.integers(0, 100),
            ),
            min_size=3,
            max_size=30,
        )
    )
    return {
        "hosts": hosts,
        "eligible": eligible,
        "held": held,
        "found": found,
        "specs": specs,
        "ops": ops,
    }


def avoided(s: Service, ref: reference.Fleet) -> str | None:
    """The host the reference would choose now: the one worth avoiding."""
    trial = reference.Fleet(ref.hosts, dict(ref.eligible), dict(ref.load))
    return reference.place(s, trial).host  # type: ignore[arg-type]


@SETTINGS
@given(scenarios())
def test_every_operation_agrees_with_the_exhaustive_scheduler(case: dict[str, Any]) -> None:
    hosts, specs, found = case["hosts"], case["specs"], case["found"]
    new = scheduler.Fleet.build(hosts, case["eligible"], found, case["held"])
    ref = reference.Fleet.build(hosts, case["eligible"], found, case["held"])
    assert_same(new, ref, specs)
    placed: list[tuple[str, Service]] = []
    names = [h.name for h in hosts] + ["ghost"]
    for op, a, b in case["ops"]:
        s = specs[a % len(specs)]
        if op in ("place", "avoid", "only"):
            avoid = [avoided(s, ref) or names[b % len(names)]] if op == "avoid" else []
            only = names[b % len(names)] if op == "only" else ""
            got = scheduler.place(s, new, avoid=avoid, only=only)
            want = reference.place(s, ref, avoid=avoid, only=only)  # type: ignore[arg-type]
            assert (got.host, got.reasons, got.why) == (want.host, want.reasons, want.why)
            if got.host is not None:
                placed.append((got.host, s))
        elif op == "replace" and found:
            old = found[b % len(found)]
            only = old.host if a % 2 else ""
            got = scheduler.place_replacing(s, new, old, only=only)
            want = reference.place_replacing(s, ref, old, only=only)  # type: ignore[arg-type]
            assert (got.host, got.reasons) == (want.host, want.reasons)
        elif op == "free" and placed and b % 2:
            where, what = placed.pop(b % len(placed))
            new.unreserve(where, what)
            ref.unreserve(where, what)
        elif op == "free" and found:
            new.free(found[b % len(found)])
            ref.free(found[b % len(found)])
        assert_same(new, ref, specs)


def test_a_task_that_fits_nowhere_says_why_host_by_host() -> None:
    hosts = [host("h1", cpus=1.0, zone="a"), host("h2", cpus=4.0, zone="b"), host("h3")]
    fleet = scheduler.Fleet.build(hosts, {"h3": "drained"}, [])
    big = svc("web", cpus=2.0, constraints=(Constraint("zone", "!=", "b"),))
    where = scheduler.place(big, fleet)
    assert where.host is None
    assert where.reasons == (
        "h1: needs 2 cpus, 1 free",
        "h2: constraint zone != b not met",
        "h3: drained",
    )
    assert scheduler.place(big, fleet).reasons == where.reasons  # asked again: the same


# -- whole passes: reconcile() and rebalance with either scheduler --------------------------
REPLACED = ("Fleet", "place", "place_replacing", "over_capacity", "score", "spread_counts")


@contextmanager
def exhaustive_scheduler() -> Iterator[None]:
    """reconcile() and rebalance with tests/reference_scheduler.py in place of the real one."""
    with ExitStack() as stack:
        for module in (reconcile_module, rollout, rebalance):
            for name in REPLACED:
                if hasattr(module, name):
                    stack.enter_context(patch.object(module, name, getattr(reference, name)))
        yield


def same_pass(w: World) -> None:
    """This pass decided with either scheduler is the same plan, and the same rebalance."""
    plan = w.plan()
    moves = rebalance.moves(w.state, w.inventory, w.observe())
    with exhaustive_scheduler():
        assert w.plan() == plan
        assert rebalance.moves(w.state, w.inventory, w.observe()) == moves
    w.act(plan)
    w.record(plan)
    w.tick()


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Host], list[Service]]:
    hosts = draw(fleet_hosts().filter(lambda hs: len(hs) >= 2))
    specs = []
    for i in range(draw(st.integers(1, 4))):
        s = draw(services(hosts))
        specs.append(
            svc(
                f"s{i}",
                replicas=draw(st.integers(1, 7)),
                cpus=s.cpus,
                memory=s.memory,
                ports=s.ports,
                constraints=s.constraints,
                spread=s.spread,
                update=s.update,
            )
        )
    return hosts, specs


@settings(max_examples=40, deadline=None, suppress_health_check=[HypothesisHealth.too_slow])
@given(worlds(), st.data())
def test_whole_passes_agree_with_the_exhaustive_scheduler(
    fleet: tuple[list[Host], list[Service]], data: st.DataObject
) -> None:
    hosts, specs = fleet
    w = World(hosts)
    w.apply(*specs)
    for _ in range(3):
        same_pass(w)
    lost = data.draw(st.sampled_from(hosts))
    w.kill_host(lost.name)
    for _ in range(3):
        same_pass(w)
    w.revive_host(lost.name)
    same_pass(w)
    drained = data.draw(st.sampled_from(hosts)).name
    w.state = set_drained(w.state, drained, True)
    for _ in range(3):
        same_pass(w)
    w.apply(
        *(
            svc(
                s.name,
                image="web:6",
                replicas=s.replicas,
                cpus=s.cpus,
                memory=s.memory,
                ports=s.ports,
                constraints=s.constraints,
                spread=s.spread,
            )
            for s in specs
        )
    )
    for _ in range(4):
        same_pass(w)
