"""The host ports a routed task publishes (core/task_ports.py): the lowest of the ingress's
task range that nothing on the host holds, one per routed container port, never twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from minidock.core.task_ports import TaskPorts, choose
from minidock.model import Ingress, Route, Service

INGRESS = Ingress(task_ports=(30000, 30003))
WEB = Service(name="web", image="web:5", ingress=(Route("app.test", "/", 8080),))
TWO = Service(
    name="api",
    image="api:1",
    ingress=(Route("app.test", "/api", 9090), Route("", "/", 8080), Route("x.test", "/", 8080)),
)


def test_the_lowest_port_nothing_holds_bound_to_the_hosts_private_address() -> None:
    assert choose(INGRESS, WEB, {30000, 30002}, "10.0.0.5") == TaskPorts(
        ((("10.0.0.5", 30001, 8080)),)
    )
    # each routed container port once, in order, each its own host port
    assert choose(INGRESS, TWO, {30001}, "h").bound == (("h", 30000, 8080), ("h", 30002, 9090))


def test_no_ingress_or_no_routes_publish_nothing() -> None:
    assert choose(None, WEB, set(), "h") == TaskPorts()
    assert choose(INGRESS, Service(name="db", image="db:1"), set(), "h") == TaskPorts()


def test_a_range_run_out_says_so_and_keeps_the_ports_given_before() -> None:
    ports = choose(INGRESS, TWO, {30000, 30001, 30002}, "h")
    assert ports.refused == "no free host port left in task_ports 30000-30003"
    assert ports.taken == (30003,)  # the host's count keeps it, as before the choice was pure


@given(st.sets(st.integers(29990, 30010)))
def test_never_a_held_port_nor_one_outside_the_range(held: set[int]) -> None:
    ports = choose(INGRESS, TWO, held, "h")
    assert not set(ports.taken) & held
    assert all(30000 <= p <= 30003 for p in ports.taken)
    assert len(set(ports.taken)) == len(ports.taken)
    free = len(set(range(30000, 30004)) - held)
    assert bool(ports.refused) == (free < 2)
