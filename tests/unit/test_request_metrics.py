"""Request metrics per route (docs/observability.md#request-metrics), the pure parts: each
route gets a Caddy server of its own behind the front servers (Caddy 2.6 labels its
request metrics by server and handler only), and what the proxy's /metrics says is read
back per service and route, by status class, with its latency histogram."""

from __future__ import annotations

import json
from pathlib import Path

from minidock.commands.caddy import (
    ROUTE_SERVER,
    RouteSpec,
    parse_proxy_probe,
    parse_request_metrics,
    proxy_config,
    request_metrics_argv,
)
from minidock.model import Ingress

DATA = Path(__file__).parent.parent / "data" / "caddy"


def test_each_route_is_a_server_of_its_own_that_the_front_server_hands_requests_to() -> None:
    routes = [
        RouteSpec("app.test", "/api", ("10.0.0.1:30000",), service="api"),
        RouteSpec("app.test", "/", ("10.0.0.2:30000",), service="web", tls=True),
    ]
    config = proxy_config(routes, Ingress())
    servers = json.loads(config.text)["apps"]["http"]["servers"]
    own = {n: s for n, s in servers.items() if n.startswith(ROUTE_SERVER)}
    assert sorted(own) == ["minidock-route:api:app.test/api", "minidock-route:web:app.test/"]
    for server in own.values():
        assert server["metrics"] == {}  # Caddy 2.6 counts only on servers that ask
        (socket,) = server["listen"]
        assert socket.startswith("unix/@minidock-route-0-")  # the mark a load names
        (whole,) = server["routes"]
        (subroute,) = whole["handle"]
        # one handler per request: its status and whole time counted once, under `name`
        assert subroute["handler"] == "subroute"
        assert subroute["errors"]["routes"][-1] == {"handle": [{"handler": "static_response"}]}
    plain, secure = servers["minidock"], servers["minidock-https"]
    hand_off = plain["routes"][0]["handle"][0]  # api: plain HTTP
    assert hand_off["handler"] == "subroute"
    (to_server,) = hand_off["routes"][0]["handle"]
    assert to_server["upstreams"] == [{"dial": own["minidock-route:api:app.test/api"]["listen"][0]}]
    assert "flush_interval" not in to_server  # -1 would tie requests to the loaded config
    (direct,) = hand_off["errors"]["routes"][0]["handle"]  # a load caught it: served here
    assert [u["dial"] for u in direct["upstreams"]] == ["10.0.0.1:30000"]
    assert plain["routes"][1]["handle"][0]["status_code"] == 308  # web is TLS: redirected
    assert secure["routes"][0]["handle"][0]["handler"] == "subroute"
    proxied = own["minidock-route:web:app.test/"]["routes"][0]["handle"][0]["routes"][0]
    headers = proxied["handle"][0]["headers"]["request"]["set"]
    # the route server's peer is a socket: the client's address is passed on as it came
    assert headers["X-Forwarded-For"] == ["{http.request.header.X-Forwarded-For}"]


def test_each_load_names_its_sockets_and_the_probe_reads_the_routes_through_them() -> None:
    routes = [RouteSpec("app.test", "/", ("10.0.0.2:30000", "10.0.0.3:30000"), service="web")]
    config = proxy_config(routes, Ingress())
    first, second = config.loadable("a1"), config.loadable("b2")
    assert "@minidock-route-0-" not in first
    assert "@minidock-route-a1-" in first
    assert first != second
    assert first.replace("-a1-", "-b2-") == second
    for text in (config.text, first):
        seen = parse_proxy_probe("host1", "running spec\n" + text)
        assert seen.digest == config.digest
        assert seen.routes == (("app.test", "/", ("10.0.0.2:30000", "10.0.0.3:30000")),)
    held = proxy_config([RouteSpec("", "/", ("10.0.0.2:1",), hold=5.0, service="web")], Ingress())
    seen = parse_proxy_probe("host1", "running spec\n" + held.loadable("c3"))
    assert (seen.routes, seen.modes) == ((("", "/", ("10.0.0.2:1",)),), (("", "/", "paused"),))


def test_the_metrics_of_each_route_server_are_read_per_route_by_status_class() -> None:
    text = (DATA / "metrics-2.6.2.txt").read_text()
    found = {(t.service, t.route): t for t in parse_request_metrics(text) or ()}
    assert sorted(found) == [("api", "app.test/api"), ("web", "*/")]
    web = found[("web", "*/")]
    assert dict(web.classes) == {"2xx": 7.0, "5xx": 2.0}
    assert web.count == 9.0
    assert web.buckets[0] == (0.005, 8.0)  # summed over codes and methods, cumulative
    assert web.buckets[-2:] == ((5.0, 9.0), (10.0, 9.0))  # the slow one: 0.5 s
    assert abs(web.seconds - (0.508853842 + 0.000320837 + 0.000310113)) < 1e-9
    api = found[("api", "app.test/api")]
    assert (dict(api.classes), api.count) == ({"4xx": 1.0}, 1.0)


def test_a_proxy_that_served_nothing_is_zero_routes_and_garbage_is_no_reading() -> None:
    assert parse_request_metrics("process_start_time_seconds 1.7e+09\n") == ()
    assert parse_request_metrics("") is None  # not Caddy's metrics: never read as zero
    assert parse_request_metrics("<html>502 Bad Gateway</html>\n") is None


def test_the_read_is_one_docker_exec_with_the_images_own_http_client() -> None:
    argv = request_metrics_argv("prod")
    assert argv[:5] == ["docker", "exec", "minidock-ingress-prod", "sh", "-c"]
    script = argv[5]
    for client in ("wget -qO-", "curl -fsS", "/dev/tcp/127.0.0.1/2019"):
        assert client in script
    assert "caddy_http_request_duration_seconds|process_start_time_seconds" in script


def test_with_request_metrics_off_the_front_servers_proxy_directly_and_read_back_alike() -> None:
    """`[ingress] request_metrics = false`: no route server, no socket, nothing counted;
    the front servers do each route's work themselves, and a probe reads the same routes
    and modes back as from the config with route servers (the drain gate's input)."""
    routes = [
        RouteSpec("app.test", "/api", ("10.0.0.1:30000",), service="api", hold=5.0),
        RouteSpec("app.test", "/", ("10.0.0.2:30000", "10.0.0.3:30000"), service="web", tls=True),
        RouteSpec("", "/", ("10.0.0.4:30000",), service="any"),
    ]
    on, off = proxy_config(routes, Ingress()), proxy_config(routes, Ingress(request_metrics=False))
    assert on.digest != off.digest  # a change of the key reloads the proxies
    assert off.loadable("a1") == off.text  # no socket to name
    servers = json.loads(off.text)["apps"]["http"]["servers"]
    assert sorted(servers) == ["minidock", "minidock-https"]
    assert "metrics" not in json.dumps(servers)
    plain, secure = servers["minidock"], servers["minidock-https"]
    assert [h["handler"] for h in plain["routes"][0]["handle"]] == ["vars", "reverse_proxy"]
    assert plain["routes"][1]["handle"][0]["status_code"] == 308  # web is TLS: redirected
    assert secure["routes"][0]["handle"][0]["handler"] == "reverse_proxy"
    release = plain["errors"]["routes"][0]  # api's held requests, once the hold ends
    assert [u["dial"] for u in release["handle"][0]["upstreams"]] == ["10.0.0.1:30000"]
    seen_on = parse_proxy_probe("host1", "running s\n" + on.loadable("b2"))
    seen_off = parse_proxy_probe("host1", "running s\n" + off.text)
    assert (seen_off.routes, seen_off.modes) == (seen_on.routes, seen_on.modes)
    assert seen_off.upstreams == frozenset(u for r in routes for u in r.upstreams)
