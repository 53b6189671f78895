"""The ingress's pure parts: the route table from observed tasks, the traffic machine's
drain gate, and the Caddy configs with their digests (docs/ingress.md)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.commands.caddy import (
    RouteSpec,
    parse_proxy_probe,
    proxy_config,
    proxy_run_argv,
    proxy_spec,
)
from minidock.commands.proxies import Rendered, configs_for, ingress_loads, render
from minidock.core import ControllerState, Plan, Run, Stop
from minidock.core.routes import (
    RouteEntry,
    ingress_hosts,
    proxy_steps,
    route_changes,
    route_table,
)
from minidock.core.traffic import TABLE, Traffic, TrafficInput, TrafficPhase, gate, step
from minidock.documents.plan import RouteLoad, route_loads
from minidock.model import (
    Cluster,
    Constraint,
    Container,
    HealthCheck,
    Host,
    HostObservation,
    Ingress,
    Inventory,
    Observed,
    ProxyObservation,
    Route,
    Service,
)
from tests.caddyview import front

NOW = 1000.0
WEB = Service(
    "web",
    "web:5",
    replicas=2,
    health=HealthCheck(("wget", "http://127.0.0.1:8080/")),
    ingress=(Route("app.test", "/", 8080),),
    drain_timeout=2.0,
)
HOSTS = (
    Host("host1", "127.0.0.1", private_address="10.0.0.1", labels=(("role", "edge"),)),
    Host("host2", "127.0.0.1", private_address="10.0.0.2"),
)
INVENTORY = Inventory("inventory.toml", HOSTS)
CLUSTER = Cluster("c", "c.toml", "inventory.toml", (WEB,), Ingress(hosts=("host1",)))


def task(n: int, host: str = "host1", health: str = "healthy", port: int = 30000) -> Container:
    return Container(
        id=f"id{n}",
        name=f"web.{n}.t{n}",
        host=host,
        cluster="c",
        service="web",
        slot=n,
        task=f"t{n}",
        spec=WEB.spec_hash(),
        image="web:5",
        state="running",
        health=health,  # type: ignore[arg-type]
        started_at=NOW - 10,
        published=((8080, port),),
    )


def observed(*tasks: Container, loaded: frozenset[str] = frozenset()) -> Observed:
    hosts = {
        h.name: HostObservation(h.name, True, tuple(t for t in tasks if t.host == h.name))
        for h in HOSTS
    }
    return Observed(hosts, {"host1": ProxyObservation("host1", True, True, "s", "d", loaded)})


def test_routes_are_the_tasks_that_take_traffic_at_their_private_addresses() -> None:
    seen = observed(task(1), task(2, "host2", port=30001), task(3, health="starting"))
    (entry,) = route_table(CLUSTER, INVENTORY, seen, ControllerState(), NOW)
    assert entry.upstreams == ("10.0.0.1:30000", "10.0.0.2:30001")
    assert entry.tasks == ("t1", "t2")
    draining = ControllerState(draining={"t1": NOW})
    (entry,) = route_table(CLUSTER, INVENTORY, seen, draining, NOW)
    assert entry.upstreams == ("10.0.0.2:30001",)
    silent = replace(seen, hosts={**seen.hosts, "host2": HostObservation("host2", False)})
    (entry,) = route_table(CLUSTER, INVENTORY, silent, ControllerState(), NOW)
    assert entry.upstreams == ("10.0.0.1:30000",)


def test_without_a_health_check_a_task_takes_traffic_after_monitor() -> None:
    bare = replace(WEB, health=None)
    cluster = replace(CLUSTER, services=(bare,))
    young = replace(task(1, health="none"), started_at=NOW - 1)
    old = replace(task(2, health="none", port=30001), started_at=NOW - 6)
    (entry,) = route_table(cluster, INVENTORY, observed(young, old), ControllerState(), NOW)
    assert entry.tasks == ("t2",)


def test_the_most_specific_route_comes_first() -> None:
    api = replace(WEB, name="api", ingress=(Route("app.test", "/api", 8080), Route("", "/", 8080)))
    cluster = replace(CLUSTER, services=(WEB, api))
    table = route_table(cluster, INVENTORY, observed(), ControllerState(), NOW)
    assert [str(e.route) for e in table] == [
        "app.test/api -> :8080",
        "app.test/ -> :8080",
        "*/ -> :8080",
    ]


def test_routes_are_ordered_as_caddy_orders_its_sites() -> None:
    """Exact hosts before wildcards (`'*' < 'a'` put the wildcard first, and Caddy takes
    the first route that matches), the catch-all last, longer paths first per host."""
    routes = (
        Route("", "/", 8080),
        Route("*.example.com", "/", 8080),
        Route("*.example.com", "/v2", 8080),
        Route("api.example.com", "/", 8080),
        Route("a.example.com", "/", 8080),
        Route("api.example.com", "/admin", 8080),
        Route("", "/static", 8080),
    )
    cluster = replace(CLUSTER, services=(replace(WEB, ingress=routes),))
    table = route_table(cluster, INVENTORY, observed(), ControllerState(), NOW)
    assert [str(e.route) for e in table] == [
        "api.example.com/admin -> :8080",
        "api.example.com/ -> :8080",
        "a.example.com/ -> :8080",
        "*.example.com/v2 -> :8080",
        "*.example.com/ -> :8080",
        "*/static -> :8080",
        "*/ -> :8080",
    ]
    shuffled = replace(cluster, services=(replace(WEB, ingress=routes[::-1]),))
    again = route_table(shuffled, INVENTORY, observed(), ControllerState(), NOW)
    assert again == table


def test_ingress_hosts_by_name_or_constraint() -> None:
    assert ingress_hosts(CLUSTER, INVENTORY) == ("host1",)
    edge = replace(CLUSTER, ingress=Ingress(constraints=(Constraint("role", "!=", "edge"),)))
    assert ingress_hosts(edge, INVENTORY) == ("host2",)
    assert ingress_hosts(replace(CLUSTER, ingress=Ingress()), INVENTORY) == ("host1", "host2")
    assert ingress_hosts(replace(CLUSTER, ingress=None), INVENTORY) == ()


def gated(plan: Plan, cluster: Cluster, seen: Observed, now: float) -> Plan:
    """The traffic gate over `plan`, with what the pass knows of traffic (`Traffic.of`)."""
    return gate(plan, Traffic.of(cluster, INVENTORY, seen, plan.state, now))


def plan_stopping(c: Container, state: ControllerState | None = None) -> Plan:
    return Plan(state or ControllerState(), stop=(Stop(c, "scaled down"),))


def test_a_routed_task_drains_before_it_stops() -> None:
    t = task(1)
    held = gated(plan_stopping(t), CLUSTER, observed(t, loaded=frozenset({"10.0.0.1:30000"})), NOW)
    assert held.stop == ()
    assert held.state.draining == {"t1": NOW}
    assert [e.kind for e in held.events] == ["draining"]
    assert [w.subject for w in held.waiting] == ["web.1"]
    # the next pass: the proxy has loaded the routes without it, but drain_timeout runs
    later = gated(plan_stopping(t, held.state), CLUSTER, observed(t), NOW + 1)
    assert (later.stop, later.state.draining) == ((), {"t1": NOW})
    assert later.events == ()  # one draining event per task
    done = gated(plan_stopping(t, held.state), CLUSTER, observed(t), NOW + 2)
    assert [s.container.task for s in done.stop] == ["t1"]


def test_the_drain_clock_restarts_while_a_proxy_still_routes_to_the_task() -> None:
    t = task(1)
    still = observed(t, loaded=frozenset({"10.0.0.1:30000"}))
    state = ControllerState(draining={"t1": NOW})
    later = gated(plan_stopping(t, state), CLUSTER, still, NOW + 5)
    assert (later.stop, later.state.draining) == ((), {"t1": NOW + 5})


def test_a_task_that_never_took_traffic_stops_at_once() -> None:
    t = task(1, health="unhealthy")
    done = gated(plan_stopping(t), CLUSTER, observed(t), NOW)
    assert [s.container.task for s in done.stop] == ["t1"]
    assert done.state.draining == {}


def test_a_task_a_rollout_drains_leaves_the_routes_and_its_drain_is_recorded() -> None:
    """A rolling update that would replace a task stop-first drains it first (the rollout
    asks `Traffic.holds`): the gate records the drain, and the run comes once drained."""
    t = task(1)
    seen = observed(t, loaded=frozenset({"10.0.0.1:30000"}))
    assert Traffic.of(CLUSTER, INVENTORY, seen, ControllerState(), NOW).holds(t)
    held = gated(Plan(ControllerState(), drains=(t,)), CLUSTER, seen, NOW)
    assert (held.drains, held.state.draining) == ((), {"t1": NOW})
    assert [w.subject for w in held.waiting] == ["web.1"]
    drained = Traffic.of(CLUSTER, INVENTORY, observed(t), held.state, NOW + 2)
    assert not drained.holds(t)  # out of every loaded route for drain_timeout: it may stop
    run = Run(replace(WEB, image="web:6"), 1, "host2", "new1", "update", replaces=t)
    done = gate(Plan(held.state, run=(run,)), drained)
    assert done.run == (run,)


def test_a_stop_no_longer_decided_ends_the_drain() -> None:
    t = task(1)
    kept = gated(Plan(ControllerState(draining={"t1": NOW})), CLUSTER, observed(t), NOW + 1)
    assert kept.state.draining == {}


def test_services_without_routes_are_left_alone() -> None:
    plain = replace(CLUSTER, services=(replace(WEB, ingress=()),), ingress=None)
    plan = plan_stopping(task(1))
    assert gated(plan, plain, observed(task(1)), NOW) is plan


def test_the_traffic_table_is_whole_and_a_routed_task_always_drains() -> None:
    assert set(TABLE) == {(p, i) for p in TrafficPhase for i in TrafficInput}
    for stop in (TrafficInput.STOP_LOADED, TrafficInput.STOP_WAITING, TrafficInput.STOP_DONE):
        assert step(TrafficPhase.ROUTED, stop) is TrafficPhase.DRAINING
    assert step(TrafficPhase.DRAINING, TrafficInput.STOP_DONE) is TrafficPhase.DRAINED
    assert step(TrafficPhase.DRAINING, TrafficInput.READY) is TrafficPhase.DRAINING
    assert step(TrafficPhase.DRAINED, TrafficInput.KEPT) is TrafficPhase.UNROUTED


addresses = st.lists(
    st.tuples(st.integers(1, 254), st.integers(30000, 30999)).map(
        lambda p: f"10.0.0.{p[0]}:{p[1]}"
    ),
    max_size=6,
    unique=True,
)


@settings(deadline=None)  # a loaded machine; the property is about values, not speed
@given(addresses, addresses)
def test_a_config_reads_back_as_its_digest_and_upstreams(
    first: list[str], second: list[str]
) -> None:
    ingress = Ingress()
    routes = [RouteSpec("app.test", "/api", tuple(first)), RouteSpec("", "/", tuple(second))]
    config = proxy_config(routes, ingress)
    seen = parse_proxy_probe("host1", "running abc\n" + config.text)
    assert (seen.running, seen.spec, seen.digest) == (True, "abc", config.digest)
    assert seen.upstreams == frozenset(first) | frozenset(second)
    again = proxy_config(routes, ingress)
    assert again == config  # a pure function of its routes
    moved = proxy_config([RouteSpec("app.test", "/api", ("10.9.9.9:1",)), routes[1]], ingress)
    assert moved.digest != config.digest


def test_the_config_routes_hosts_and_paths_with_retries() -> None:
    config = json.loads(
        proxy_config(
            [RouteSpec("app.test", "/api/", ("10.0.0.1:30000",))], Ingress(http_port=8000)
        ).text
    )
    server = front(config)
    assert config["admin"] == {"listen": "localhost:2019"}
    assert server["listen"] == [":8000"]
    route, fallback = server["routes"]
    assert fallback["handle"][0]["status_code"] == 404
    assert route["match"] == [{"host": ["app.test"], "path": ["/api", "/api/*"]}]
    (handler,) = route["handle"]
    balancing = handler["load_balancing"]
    assert balancing["retries"] == 3  # retries that never wait: a reload cannot end one
    assert "try_duration" not in balancing
    assert "try_interval" not in balancing
    assert handler["health_checks"]["passive"]["max_fails"] == 1
    empty = front(proxy_config([RouteSpec("", "/", ())], Ingress()).text)
    assert empty["routes"][0]["handle"][0]["status_code"] == 503


def test_the_proxy_publishes_its_port_keeps_accept_queues_and_probes_read_what_it_says() -> None:
    argv = proxy_run_argv("prod", Ingress(image="caddy:2.6", http_port=8000))
    assert argv[:5] == ["docker", "run", "-d", "--name", "minidock-ingress-prod"]
    assert "--network" not in argv  # a namespace of its own: docker sets sysctls only there
    assert argv[argv.index("--publish") + 1] == "8000:8000"
    assert argv[argv.index("--sysctl") + 1] == "net.ipv4.tcp_migrate_req=1"
    assert argv[-4:] == ["caddy:2.6", "caddy", "run", "--resume"]
    assert parse_proxy_probe("h", "missing\n") == ProxyObservation("h", True)
    exited = parse_proxy_probe("h", "exited abc\n")
    assert (exited.running, exited.spec, exited.digest) == (False, "abc", "")
    garbled = parse_proxy_probe("h", "running abc\n{not json")
    assert (garbled.running, garbled.digest, garbled.upstreams) == (True, "", frozenset())


def test_a_pruned_services_routed_tasks_drain_too() -> None:
    from minidock.core import ServiceState

    t = task(1)
    state = ControllerState(services={"web": ServiceState(WEB, 1, removed=True)})
    cluster = replace(CLUSTER, services=())
    held = gated(plan_stopping(t, state), cluster, observed(t), NOW)
    assert (held.stop, list(held.state.draining)) == ((), ["t1"])


def test_a_silent_host_keeps_its_loaded_upstreams_until_it_is_down() -> None:
    from minidock.core import HostPhase, HostState

    loaded = ProxyObservation(
        "host1", True, True, "s", "d", frozenset({"10.0.0.2:30001"}),
        routes=(("app.test", "/", ("10.0.0.2:30001",)),),
    )  # fmt: skip
    seen = observed(task(1))
    seen = replace(
        seen,
        hosts={**seen.hosts, "host2": HostObservation("host2", False, error="timed out")},
        proxies={"host1": loaded},
    )
    (entry,) = route_table(CLUSTER, INVENTORY, seen, ControllerState(), NOW)
    assert (entry.upstreams, entry.tasks) == (("10.0.0.1:30000", "10.0.0.2:30001"), ("t1",))
    down = ControllerState(hosts={"host2": HostState(phase=HostPhase.DOWN)})
    (entry,) = route_table(CLUSTER, INVENTORY, seen, down, NOW)
    assert entry.upstreams == ("10.0.0.1:30000",)


def loaded_as(table: tuple[RouteEntry, ...], host: str = "host1") -> ProxyObservation:
    """A proxy that has loaded exactly `table` (its config read back as a probe reads it)."""
    config = configs_for(table, CLUSTER.ingress or Ingress())
    return parse_proxy_probe(
        host, f"running {proxy_spec(CLUSTER.ingress or Ingress())}\n{config.text}"
    )


def test_a_loaded_tls_route_reads_back_once_with_its_upstreams() -> None:
    """The plain server's redirect of a TLS route, the 404 ending each server and an ACME
    challenge's response are not routes: a proxy that has loaded the table shows no
    change against it (it used to list every TLS upstream as joining, and `- */`)."""
    from minidock.commands.caddy import Certificate

    secure = RouteEntry(Route("app.test", "/", 8080), "web", ("10.0.0.1:30000",))
    plain = RouteEntry(Route("plain.test", "/", 8080), "api", ("10.0.0.2:30000",))
    specs = [
        RouteSpec("app.test", "/", secure.upstreams, tls=True),
        RouteSpec("plain.test", "/", plain.upstreams),
    ]
    certificate = [Certificate("CHAIN", "KEY")]
    challenge = {"/.well-known/acme-challenge/t": "t.k"}
    config = proxy_config(specs, Ingress(), certificate, challenge)
    seen = parse_proxy_probe("host1", "running s\n" + config.text)
    assert seen.routes == (
        ("plain.test", "/", ("10.0.0.2:30000",)),
        ("app.test", "/", ("10.0.0.1:30000",)),
    )
    assert route_changes((secure, plain), seen.routes) == ()
    moved = replace(plain, upstreams=("10.0.0.2:30001",))
    assert route_changes((secure, moved), seen.routes) == (
        "~ plain.test/: +10.0.0.2:30001 -10.0.0.2:30000",
    )


def test_plan_says_what_each_proxy_would_load_route_by_route() -> None:
    api = RouteEntry(Route("app.test", "/api", 8080), "api", ("10.0.0.1:30002",))
    web = RouteEntry(Route("", "/", 8080), "web", ("10.0.0.1:30000", "10.0.0.2:30001"))
    loaded = loaded_as((web,))
    moved = replace(web, upstreams=("10.0.0.2:30001", "10.0.0.2:30003"))
    assert route_changes((web,), loaded.routes) == ()
    assert route_changes((api, moved), loaded.routes) == (
        "+ app.test/api -> api (1 upstream)",
        "~ */: +10.0.0.2:30003 -10.0.0.1:30000",
    )
    assert route_changes((), loaded.routes) == ("- */",)
    assert route_changes((replace(api, upstreams=()),), ()) == (
        "+ app.test/api -> api (no task ready)",
    )
    ingress = CLUSTER.ingress or Ingress()
    seen = {
        "host1": loaded,
        "host2": ProxyObservation("host2", ok=False, error="timed out"),
        "host3": ProxyObservation("host3", ok=True),  # no proxy yet
        "host4": loaded_as((moved,), "host4"),
    }
    steps = proxy_steps(ingress, seen)
    config = configs_for((web,), ingress)
    rendered = Rendered(config, ingress_loads(config.digest, steps, seen))
    assert route_loads((web,), rendered, seen) == (
        RouteLoad("host1", "unchanged"),
        RouteLoad("host2", "unreachable"),
        RouteLoad("host3", "start", ("+ */ -> web (2 upstreams)",)),
        RouteLoad("host4", "load", ("~ */: +10.0.0.1:30000 -10.0.0.2:30003",)),
    )


def running_proxy(host: str, spec: str, digest: str = "d") -> ProxyObservation:
    return ProxyObservation(host, True, True, spec, digest)


def test_proxies_of_another_spec_are_replaced_one_host_at_a_time() -> None:
    """An image change replaces one ingress host's proxy per pass, and the next only once
    every other proxy answers with its routes loaded; a missing or stopped proxy (it
    serves nothing) starts at once, and a host that is down is not waited for."""
    old, new = Ingress(image="caddy:2.6"), Ingress(image="caddy:2.7")
    spec = new.proxy_spec()
    before = {h: running_proxy(h, old.proxy_spec()) for h in ("host1", "host2", "host3")}
    first = proxy_steps(new, before)
    assert [(s.host, s.start, s.waits) for s in first] == [
        ("host1", True, ""),
        ("host2", False, "replaced once host1's new proxy serves"),
        ("host3", False, "replaced once host1's new proxy serves"),
    ]
    # the next pass: host1's new proxy runs but its routes did not load: nothing more yet
    fresh = {**before, "host1": running_proxy("host1", spec, digest="")}
    assert [s.host for s in proxy_steps(new, fresh) if s.start] == []
    assert proxy_steps(new, fresh)[1].waits == "replaced once host1 serves"
    served = {**before, "host1": running_proxy("host1", spec)}
    assert [s.host for s in proxy_steps(new, served) if s.start] == ["host2"]
    lost = {**served, "host3": ProxyObservation("host3", ok=False, error="timed out")}
    assert [s.host for s in proxy_steps(new, lost) if s.start] == []  # host3 may be serving
    down = proxy_steps(new, lost, down=frozenset({"host3"}))
    assert [s.host for s in down if s.start] == ["host2"]
    stopped = {**before, "host2": ProxyObservation("host2", True, False, old.proxy_spec())}
    assert [(s.host, s.why) for s in proxy_steps(new, stopped) if s.start] == [
        ("host2", "was not running")  # host1 and host3 wait for it to serve
    ]
    alone = proxy_steps(new, {"host1": before["host1"]})
    assert [(s.host, s.start) for s in alone] == [("host1", True)]  # one host: at once


def test_a_pass_waits_for_the_next_proxy_and_plan_says_so() -> None:
    from minidock.core.decide import decide
    from minidock.core.plan import WaitKind

    ingress = Ingress(hosts=("host1", "host2"), image="caddy:2.7")
    cluster = replace(CLUSTER, ingress=ingress)
    seen = observed(task(1))
    old = Ingress(hosts=("host1", "host2")).proxy_spec()
    proxies = {h: running_proxy(h, old) for h in ("host1", "host2")}
    plan = decide(cluster, INVENTORY, replace(seen, proxies=proxies), ControllerState(), NOW)
    assert [(s.host, s.start) for s in plan.proxies] == [("host1", True), ("host2", False)]
    (wait,) = [w for w in plan.waiting if w.kind is WaitKind.PROXY]
    assert wait == "ingress proxy on host2: replaced once host1's new proxy serves"
    assert not plan.converged  # apply --wait and reconcile's exit 3 go on to host2
    rendered = render(plan, ingress, replace(seen, proxies=proxies))
    loads = route_loads(plan.routes, rendered, proxies)
    assert [(r.host, r.action) for r in loads] == [("host1", "start"), ("host2", "waits")]
    assert loads[1].changes[0] == "replaced once host1's new proxy serves"


def test_a_route_whose_every_upstream_is_marked_falls_back_to_them_without_passive_health() -> None:
    """Caddy answers `503 no upstreams available` (sending the request nowhere) while
    passive health marks every upstream: the route's last resort takes exactly that error
    to the same upstreams, unmarked. tests/unit/test_caddy_local.py runs it in Caddy."""
    up = ("10.0.0.1:30000", "10.0.0.2:30000")
    routes = [
        RouteSpec("app.test", "/down", up, service="down", maintenance="later"),
        RouteSpec("app.test", "/held", up, service="held", hold=5.0),
        RouteSpec("app.test", "/none", (), service="none"),
        RouteSpec("app.test", "/api", up[:1], service="api"),
        RouteSpec("", "/", up, service="web"),
    ]
    none_available = {"vars": {"{http.error.status_code}": ["503"]}}

    def unmarked(handler: dict[str, object]) -> None:
        assert handler["handler"] == "reverse_proxy"
        assert "health_checks" not in handler  # every upstream tried, marked or not
        assert handler["load_balancing"] == {  # type: ignore[comparison-overlap]
            "selection_policy": {"policy": "round_robin"}, "retries": 3
        }  # fmt: skip

    servers = json.loads(proxy_config(routes, Ingress()).text)["apps"]["http"]["servers"]
    web = servers["minidock-route:web:*/"]["routes"][0]["handle"][0]
    assert web["routes"][0]["handle"][0]["health_checks"]["passive"]["max_fails"] == 1
    resort, failed = web["errors"]["routes"]
    assert resort["match"] == [none_available]
    (handler,) = resort["handle"]
    unmarked(handler)
    assert [u["dial"] for u in handler["upstreams"]] == list(up)
    assert failed == {"handle": [{"handler": "static_response"}]}
    for name in ("down", "none"):  # a page or a 503 of its own: nothing to fall back to
        (own,) = [s for n, s in servers.items() if n.startswith(f"minidock-route:{name}:")]
        assert len(own["routes"][0]["handle"][0]["errors"]["routes"]) == 1
    (held,) = [s for n, s in servers.items() if n.startswith("minidock-route:held:")]
    release, _ = held["routes"][0]["handle"][0]["errors"]["routes"]  # its release only
    assert release["match"] == [{"vars": {"minidock_held": ["app.test/held"]}}]
    # the front server's own fallback, for a request a load caught: unmarked too
    hand_off = servers["minidock"]["routes"][3]["handle"][0]  # api's
    unmarked(hand_off["errors"]["routes"][0]["handle"][0])

    direct = proxy_config(routes, Ingress(request_metrics=False)).text
    plain = json.loads(direct)["apps"]["http"]["servers"]["minidock"]
    errors = plain["errors"]["routes"]
    assert errors[0]["match"] == [{"vars": {"minidock_held": ["app.test/held"]}}]
    # then each route that proxies, matched again as the front matches it, in its order
    assert [e["match"] for e in errors[1:]] == [
        [{"host": ["app.test"], "path": ["/api", "/api/*"], **none_available}],
        [none_available],
    ]
    for e, ups in zip(errors[1:], (up[:1], up), strict=True):
        unmarked(e["handle"][0])
        assert [u["dial"] for u in e["handle"][0]["upstreams"]] == list(ups)
    seen = parse_proxy_probe("host1", "running s\n" + direct)
    assert {r[:2]: r[2] for r in seen.routes}[("", "/")] == up  # read back as before
