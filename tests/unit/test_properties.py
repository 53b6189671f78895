"""Hypothesis properties of the decision core over random fleets, specs and faults."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.model import Host, PortMapping, Service
from tests.sim import World, host, svc

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HypothesisHealth.too_slow]
)


@st.composite
def hosts(draw: st.DrawFn, *, unlimited: bool = False) -> list[Host]:
    n = draw(st.integers(1, 5))
    out = []
    for i in range(1, n + 1):
        cpus = None if unlimited else draw(st.sampled_from([None, 1.0, 2.0, 4.0]))
        zone = draw(st.sampled_from(["a", "b", "c"]))
        out.append(host(f"host{i}", cpus=cpus, memory=None, zone=zone))
    return out


@st.composite
def services(draw: st.DrawFn, *, placeable: bool = False) -> list[Service]:
    n = draw(st.integers(1, 3))
    out = []
    for i in range(n):
        ports = () if placeable else draw(st.sampled_from([(), (PortMapping(8080, 80),)]))
        out.append(
            svc(
                f"s{i}",
                replicas=draw(st.integers(0, 6)),
                cpus=0.0 if placeable else draw(st.sampled_from([0.0, 0.5, 1.0])),
                ports=ports,
                spread=draw(st.sampled_from([None, "zone"])),
            )
        )
    return out


def check_invariants(w: World) -> None:
    """Nothing bad, ever: capacity, host ports, at most one live task per slot."""
    for h in w.hosts:
        live = [c for c in w.containers[h.name] if c.live]
        if h.cpus is not None:
            assert sum(c.cpus for c in live) <= h.cpus + 1e-9, h.name
        ports = Counter(p for c in live for p in c.host_ports)
        assert all(n == 1 for n in ports.values()), (h.name, ports)


def converge_checked(w: World, limit: int = 40) -> None:
    for _ in range(limit):
        plan = w.step()
        check_invariants(w)
        if plan.converged or (not plan.actions and not plan.waiting):
            return
    raise AssertionError("did not settle")


@SETTINGS
@given(hosts(), services())
def test_converged_state_gives_an_empty_plan(fleet: list[Host], specs: list[Service]) -> None:
    w = World(fleet)
    w.apply(*specs)
    converge_checked(w)
    again = w.plan()
    assert again.actions == 0
    for s in specs:
        slots = w.slots(s.name)
        assert all(len(hs) == 1 for hs in slots.values())
        assert set(slots) <= set(range(1, s.replicas + 1))
        pending = {p.slot for p in again.pending if p.service == s.name}
        assert set(slots) | pending == set(range(1, s.replicas + 1))


@SETTINGS
@given(hosts(unlimited=True), services(placeable=True), st.data())
def test_host_loss_replaces_exactly_the_lost_slots(
    fleet: list[Host], specs: list[Service], data: st.DataObject
) -> None:
    w = World(fleet, max_down_fraction=1.0)  # any share may be lost: the guard never holds
    w.apply(*specs)
    w.converge()
    names = [h.name for h in fleet]
    if len(names) < 2:
        return
    lost = data.draw(st.sets(st.sampled_from(names), min_size=1, max_size=len(names) - 1))
    lost_tasks = sum(1 for c in w.live() if c.host in lost)
    for h in lost:
        w.kill_host(h)
    runs = [r for _ in range(2) for r in w.step().run]  # down_after = 2
    assert len(runs) == lost_tasks
    assert all(r.host not in lost for r in runs)
    w.converge()
    assert len(w.live()) == sum(s.replicas for s in specs)


@SETTINGS
@given(hosts(unlimited=True), services(placeable=True), st.data())
def test_after_a_host_returns_every_slot_has_exactly_one_task(
    fleet: list[Host], specs: list[Service], data: st.DataObject
) -> None:
    w = World(fleet)
    w.apply(*specs)
    w.converge()
    if len(fleet) < 2:
        return
    gone = data.draw(st.sampled_from([h.name for h in fleet]))
    w.kill_host(gone)
    w.converge()
    w.revive_host(gone)
    w.converge()
    for s in specs:
        slots = w.slots(s.name)
        assert sorted(slots) == list(range(1, s.replicas + 1))
        assert all(len(hs) == 1 for hs in slots.values())


@SETTINGS
@given(hosts(), services())
def test_placement_is_deterministic(fleet: list[Host], specs: list[Service]) -> None:
    a, b = World(fleet), World(list(reversed(fleet)))
    a.apply(*specs)
    b.apply(*specs)
    pa, pb = a.plan(), b.plan()
    assert [(r.name, r.host) for r in pa.run] == [(r.name, r.host) for r in pb.run]
    assert pa.pending == pb.pending


@SETTINGS
@given(hosts(unlimited=True), services(placeable=True), st.integers(1, 3))
def test_reconcile_is_idempotent_from_any_interruption(
    fleet: list[Host], specs: list[Service], acted: int
) -> None:
    """Act on only part of a plan (a crash mid-pass), then carry on: no slot doubles."""
    w = World(fleet)
    w.apply(*specs)
    plan = w.plan()
    partial = type(plan)(plan.state, run=plan.run[:acted])
    w.act(partial)  # the crash: the state of this pass is never recorded
    w.tick()
    w.converge()
    for s in specs:
        assert all(len(hs) == 1 for hs in w.slots(s.name).values())
        assert len(w.live(s.name)) == s.replicas


@SETTINGS
@given(hosts(unlimited=True), services(placeable=True), st.data())
def test_the_mass_loss_guard_replaces_nothing_and_heals_without_churn(
    fleet: list[Host], specs: list[Service], data: st.DataObject
) -> None:
    """More than half the hosts failing one pass's probes holds every pass: no host goes
    down, nothing runs or stops, however long it lasts; healed, nothing moves."""
    w = World(fleet)
    w.apply(*specs)
    w.converge()
    names = [h.name for h in fleet]
    size = data.draw(st.integers(len(names) // 2 + 1, len(names)))
    lost = data.draw(st.sets(st.sampled_from(names), min_size=size, max_size=size))
    before = sorted(c.id for c in w.live())
    for h in lost:
        w.kill_host(h)
    for _ in range(5):
        plan = w.step()
        assert plan.guard
        assert (plan.run, plan.stop) == ((), ())
        assert not any(hs.down for hs in plan.state.hosts.values())
    for h in lost:
        w.revive_host(h)
    healed = w.converge()
    assert sorted(c.id for c in w.live()) == before
    assert healed.state.guard == ""
