"""The fold's early answer for converged slots (`reconcile._steady`) changes no decision.

`_decide_slot` says "nothing to do" sooner for a slot whose one ready task is the one its
record names, runs its target spec on a host that keeps it, outside any rollout or
rebalance. Here every pass of random worlds (health checks that pass, fail or never
settle, crashing and late-exiting images, host ports, constraints, a healthy task turning
unhealthy, a host lost and back, a drain, a rebalance, a rollout with a scale change) is
decided twice, with and without that early answer, and the two plans must be equal.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from unittest.mock import patch

from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.core import rebalance
from minidock.core.intents import set_drained
from minidock.model import Constraint, HealthCheck, Host, PortMapping, Service, UpdatePolicy
from tests.sim import World, host, svc

# the module (`minidock.core.reconcile` the attribute is the function of that name)
reconcile_module = importlib.import_module("minidock.core.reconcile")
IMAGES = ["web:5", "web:5", "web:broken", "web:slow", "crash:1", "web:late"]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Host], list[Service]]:
    n = draw(st.integers(2, 5))
    hosts = [
        host(f"h{i}", cpus=draw(st.sampled_from([None, 1.0, 2.0])), zone="abc"[i % 3])
        for i in range(n)
    ]
    specs = [
        svc(
            f"s{i}",
            image=draw(st.sampled_from(IMAGES)),
            replicas=draw(st.integers(1, 5)),
            cpus=draw(st.sampled_from([0.0, 0.5])),
            ports=draw(st.sampled_from([(), (PortMapping(8080, 80),)])),
            constraints=draw(st.sampled_from([(), (Constraint("zone", "!=", "c"),)])),
            spread=draw(st.sampled_from([None, "zone"])),
            health=draw(st.sampled_from([None, HealthCheck(("true",), interval=1.0)])),
            update=UpdatePolicy(order=draw(st.sampled_from(["stop-first", "start-first"]))),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return hosts, specs


def same_either_way(w: World) -> None:
    """Decide this pass with and without the early answer; act on it."""
    plan = w.plan()
    with patch.object(reconcile_module, "_steady", lambda *args: False):
        assert w.plan() == plan
    w.act(plan)
    w.record(plan)
    w.tick()


@settings(max_examples=60, deadline=None, suppress_health_check=[HypothesisHealth.too_slow])
@given(worlds(), st.data())
def test_converged_slots_answered_early_decide_the_same(
    fleet: tuple[list[Host], list[Service]], data: st.DataObject
) -> None:
    hosts, specs = fleet
    w = World(hosts)
    w.apply(*specs)
    for _ in range(4):
        same_either_way(w)
    sick = data.draw(st.sampled_from(hosts)).name  # a healthy task turns unhealthy
    w.containers[sick] = [replace(c, health="unhealthy") for c in w.containers[sick][:1]] + (
        w.containers[sick][1:]
    )
    for _ in range(2):
        same_either_way(w)
    lost = data.draw(st.sampled_from(hosts)).name
    w.kill_host(lost)
    for _ in range(3):
        same_either_way(w)
    w.revive_host(lost)
    for _ in range(2):
        same_either_way(w)
    w.state = set_drained(w.state, data.draw(st.sampled_from(hosts)).name, True)
    for _ in range(3):
        same_either_way(w)
    w.state, _ = rebalance.record(
        w.state, rebalance.moves(w.state, w.inventory, w.observe()), w.now
    )
    for _ in range(3):
        same_either_way(w)
    w.apply(
        *(
            svc(
                s.name,
                image="web:6",
                replicas=s.replicas + 1,
                cpus=s.cpus,
                ports=s.ports,
                constraints=s.constraints,
                spread=s.spread,
                health=s.health,
                update=s.update,
            )
            for s in specs
        )
    )
    for _ in range(4):
        same_either_way(w)
