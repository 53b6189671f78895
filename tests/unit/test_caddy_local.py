"""MiniDock's proxy configs in a real Caddy (Debian's 2.6, the lab proxy's own package, run
locally by tests/localcaddy.py): what the configs make Caddy do, where reading the JSON
cannot tell. Route servers renamed on every load hold no descriptor or socket across
loads; a route whose every upstream failed a dial (passive health marks each for
FAIL_DURATION) still sends the next request to its tasks (docs/ingress.md, "Retries")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from minidock.commands.caddy import RouteSpec, proxy_config
from minidock.model import Ingress
from tests.etcd import free_ports
from tests.localcaddy import LocalCaddy, Upstream, get, local_caddy, refused

LOADS = 50


@pytest.fixture
def caddy(tmp_path: Path) -> Iterator[LocalCaddy]:
    with local_caddy(tmp_path / "caddy") as running:
        yield running


@pytest.fixture
def ingress() -> Ingress:
    http, https = free_ports(2)
    return Ingress(http_port=http, https_port=https)


@pytest.fixture
def tasks() -> Iterator[list[Upstream]]:
    started = [Upstream(f"task {i}\n") for i in range(3)]
    for u in started:
        u.open()
    yield started
    for u in started:
        u.close()


def _routes(n: int, tasks: list[Upstream]) -> list[RouteSpec]:
    """The n-th load's routes: web's upstreams 1 to 3 tasks, an api route every other load,
    a catch-all every fifth (in maintenance every tenth): each load another config."""
    found = [RouteSpec("app.test", "/", tuple(u.dial for u in tasks[: 1 + n % 3]), service="web")]
    if n % 2:
        found.insert(0, RouteSpec("app.test", "/api", (tasks[n % 3].dial,), service="api"))
    if n % 5 == 0:
        found.append(RouteSpec("", "/", (tasks[0].dial,), maintenance="x" * (n % 10 == 0)))
    return found


def _route_sockets(caddy: LocalCaddy) -> list[str]:
    """The abstract unix sockets this test's Caddy listens on for route servers (named
    with the words LocalCaddy gives each load, `t{pid}x{load}`)."""
    mine = f"@minidock-route-t{os.getpid()}x"
    rows = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    # Num RefCount Protocol Flags Type St Inode Path: a listener's Flags are __SO_ACCEPTCON
    # (its accepted connections carry its path too)
    return [r[-1] for r in rows if r[-1].startswith(mine) and r[3] == "00010000"]


@pytest.mark.parametrize("request_metrics", [True, False], ids=["route-servers", "direct"])
def test_fifty_loads_of_changing_routes_leave_no_descriptor_or_socket_behind(
    caddy: LocalCaddy, ingress: Ingress, tasks: list[Upstream], request_metrics: bool
) -> None:
    """Open descriptors after 10 loads and after 50 more (each load with requests through
    every route, so hand-off and upstream connections are made): a descriptor kept per
    load would add 50. Idle keep-alive connections make the count vary by a few between
    loads, so the highest of 10 loads is compared. Measured: 11 to 16 with route servers,
    8 to 10 direct, from the first loads to the last."""
    ingress = Ingress(http_port=ingress.http_port, https_port=ingress.https_port,
                      request_metrics=request_metrics)  # fmt: skip

    def load(n: int) -> int:
        routes = _routes(n, tasks)
        caddy.load(proxy_config(routes, ingress))
        for r in routes:
            status, _ = get(ingress.http_port, "app.test", r.path if r.domain else "/other")
            assert status in (200, 503), (n, r, status)  # 503: the maintenance page
        return caddy.fds()

    before = max(load(n) for n in range(10))
    after = max(load(n) for n in range(10, 10 + LOADS))
    assert after <= before + 5, (before, after)
    sockets = _route_sockets(caddy)
    routes = _routes(10 + LOADS - 1, tasks)
    # one listening socket per route of the last load, none of the 59 loads before it
    assert len(sockets) == (len(routes) if request_metrics else 0), sockets
    assert all(f"x{caddy.loads}-" in name for name in sockets)


def test_a_lone_task_that_failed_a_dial_answers_the_next_request(
    caddy: LocalCaddy, ingress: Ingress
) -> None:
    """Its port closed, one request fails (502: the dial refused, retried, nothing else to
    try) and passive health marks the task for FAIL_DURATION; the port open again, the
    very next request is answered by it, not `503 no upstreams available` for 30 s."""
    task = Upstream("task 1\n")
    assert refused(task.port)
    caddy.load(proxy_config([RouteSpec("app.test", "/", (task.dial,), service="web")], ingress))
    assert get(ingress.http_port, "app.test")[0] == 502
    task.open()
    try:
        assert get(ingress.http_port, "app.test") == (200, "task 1\n")
    finally:
        task.close()


@pytest.mark.parametrize("request_metrics", [True, False], ids=["route-servers", "direct"])
def test_a_route_whose_every_task_failed_a_dial_is_not_shut_out(
    caddy: LocalCaddy, ingress: Ingress, request_metrics: bool
) -> None:
    """Two tasks, both refusing at first (each request fails over to the other, so one
    marks both); both open again: the next requests are answered, by both in turn, and
    by web's own tasks (api's route, matched first, has a task of its own)."""
    ingress = Ingress(http_port=ingress.http_port, https_port=ingress.https_port,
                      request_metrics=request_metrics)  # fmt: skip
    tasks = [Upstream("task 1\n"), Upstream("task 2\n")]
    api = Upstream("api\n")
    routes = [
        RouteSpec("app.test", "/api", (api.dial,), service="api"),
        RouteSpec("app.test", "/", tuple(t.dial for t in tasks), service="web"),
    ]
    caddy.load(proxy_config(routes, ingress))
    assert get(ingress.http_port, "app.test")[0] == 502
    for t in (*tasks, api):
        t.open()
    try:
        answers = {get(ingress.http_port, "app.test") for _ in range(4)}
        assert answers == {(200, "task 1\n"), (200, "task 2\n")}
        assert get(ingress.http_port, "app.test", "/api/x") == (200, "api\n")
    finally:
        for t in (*tasks, api):
            t.close()


def test_a_lost_task_is_skipped_and_no_request_fails(
    caddy: LocalCaddy, ingress: Ingress, tasks: list[Upstream]
) -> None:
    """One of three tasks refuses: every request is answered by the other two (the
    refused dial retried at once, then the task skipped by passive health)."""
    route = RouteSpec("app.test", "/", tuple(t.dial for t in tasks), service="web")
    caddy.load(proxy_config([route], ingress))
    tasks[1].close()
    answers = [get(ingress.http_port, "app.test") for _ in range(12)]
    assert set(answers) == {(200, "task 0\n"), (200, "task 2\n")}
