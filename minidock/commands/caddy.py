"""The ingress proxy as values: each proxy's whole Caddy JSON config and its digest, the
docker argv that runs, reads and loads the proxy, and the parser of what it reports. Pure,
like `minidock.commands`; `minidock.act.ingress` runs these over SSH.

The proxy is a container of its own on each ingress host (`minidock-ingress-CLUSTER`,
labelled `minidock.ingress=CLUSTER`, never `minidock.cluster`: it is not a task), in a
network namespace of its own with the HTTP port published (as kamal-proxy runs), and its
admin API on the container's loopback only (`localhost:2019`, Caddy's default). A config
is loaded with `caddy reload` inside the container (a `POST /load` to that admin API).
Each load makes Caddy open a new listening socket and close the old one (Caddy 2.6,
SO_REUSEPORT); the kernel then resets every connection still waiting in the old socket's
accept queue unless `net.ipv4.tcp_migrate_req` is 1, which moves them to the new socket.
That sysctl is per network namespace, and docker sets it only on a container with a
namespace of its own: hence no host network. docs/ingress.md, "Reloads".

Caddy saves each config it loads (`/config/caddy/autosave.json`, and `caddy run --resume`
starts from it): reading that file back is how a pass sees what a proxy has loaded. The
config carries its digest as the `@id` of its server. Routes with TLS on are served by a
second server on the HTTPS port (published too), with the certificates loaded as PEM
(`tls.certificates.load_pem`, chosen by SNI), and plain HTTP to them is redirected.

Each route is a server of its own (`minidock-route:SERVICE:HOST/PATH`), listening on an
abstract unix socket in the proxy's namespace: the front servers match the request's Host
and path and hand it to that server, which does what the route does (proxy, maintenance
page, hold) inside one `subroute`. Caddy 2.6 labels its request metrics only by server and
handler, so this is what makes its counts and latencies per route: `request_metrics`
parses them (docs/observability.md#request-metrics). With `[ingress] request_metrics =
false` there are no route servers: the front servers do each route's work themselves.
docs/ingress.md.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from minidock.core.serving import RETRY_AFTER
from minidock.model import PROXY_NETWORK, Ingress, ProxyObservation

__all__ = [
    "ADMIN",
    "AUTOSAVE",
    "LABEL_INGRESS",
    "LABEL_PROXY_SPEC",
    "Certificate",
    "ProxyConfig",
    "ProxyTraffic",
    "RouteSpec",
    "RouteTraffic",
    "load_argv",
    "maintenance_page",
    "parse_proxy_probe",
    "parse_request_metrics",
    "proxy_config",
    "proxy_name",
    "proxy_probe_argv",
    "proxy_run_argv",
    "proxy_spec",
    "proxy_traffic",
    "remove_argv",
    "request_metrics_argv",
    "route_server_name",
    "stop_argv",
]

ADMIN = "localhost:2019"  # Caddy's default admin address: loopback only, on the host network
AUTOSAVE = "/config/caddy/autosave.json"  # XDG_CONFIG_HOME=/config, the official image's
LABEL_INGRESS = "minidock.ingress"
LABEL_PROXY_SPEC = "minidock.ingress.spec"
SERVER = "minidock"
SERVER_TLS = "minidock-https"
# Each route's own server (its name is SERVICE:HOST/PATH after the prefix), on an abstract
# unix socket named by a digest of that name (the proxy's namespace is its own).
ROUTE_SERVER = "minidock-route:"
ROUTE_SOCKET = "unix/@minidock-route-"
UNLOADED = "0"  # the mark in a config's socket names that a load replaces
# The headers a route's server passes on as the front server set them: its peer is a unix
# socket, which Caddy cannot read as an address, so it would drop them.
FORWARDED = ("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host")
ID_PREFIX = "minidock-"
# Retries (FLEET-NOTES): a request whose upstream refuses or does not answer in DIAL_TIMEOUT
# is sent at once to the next upstream, up to RETRIES more times; a failed upstream is
# skipped by the other requests for FAIL_DURATION (passive health). A count, not Caddy's
# `try_duration`: a retry that waits (`try_interval`) is ended, and the request answered
# 502, when a config is loaded meanwhile (Caddy 2.6 selects on the unloaded handler's
# context); one that does not wait never looks at it. docs/ingress.md, "Reloads".
# When passive health has marked every upstream of a route, Caddy answers `503 no
# upstreams available` without sending the request anywhere: the route's LAST_RESORT error
# route sends such a request to the same upstreams with no passive health, so a route is
# never shut out while one of its tasks answers (docs/ingress.md, "Retries").
RETRIES = 3
DIAL_TIMEOUT = "1s"
FAIL_DURATION = "30s"  # outlasts a lost host's detection under watch (docs/ingress.md, "Reloads")
NONE_AVAILABLE = {"vars": {"{http.error.status_code}": ["503"]}}  # nothing was sent
NETWORK = PROXY_NETWORK  # a namespace of its own (docker's default bridge), ports published
MIGRATE_ACCEPT_QUEUE = "net.ipv4.tcp_migrate_req"  # Linux 5.14 and later
STOP_GRACE = 10  # seconds a replaced proxy has to finish its requests under way
NO_ROUTE = {"handler": "static_response", "status_code": 404, "body": "no route\n"}
# Maintenance and pause (docs/ingress.md#maintenance-and-pause): a paused route marks each
# request it holds with this variable (the route's label), for the error route that
# releases it; a held request looks for an upstream again every HOLD_INTERVAL.
HELD = "minidock_held"
HOLD_INTERVAL = "250ms"
PAGE = (
    '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
    "<title>503 Service Unavailable</title></head>\n"
    "<body><h1>Service Unavailable</h1>\n<p>MESSAGE</p></body>\n</html>\n"
)


@dataclass(frozen=True)
class RouteSpec:
    """One route as the proxy sees it: Host (""=any), path prefix, upstream addresses,
    and whether it is served over HTTPS (then plain HTTP to it is redirected). In
    maintenance (`maintenance`, the page's message) it answers 503 with that page; paused
    (`hold` > 0) it holds each request up to `hold` seconds, then sends it upstream.
    With `weights`, each upstream takes that many turns of the round robin (`_turns`)."""

    domain: str
    path: str
    upstreams: tuple[str, ...]
    tls: bool = False
    maintenance: str = ""
    hold: float = 0.0
    weights: tuple[int, ...] = ()  # each upstream's, in order (a canary's share); () even
    service: str = ""  # whose route it is (names its server, so its metrics)

    @property
    def label(self) -> str:
        """The route as one word: Host (`*` for any) and path."""
        return f"{self.domain or '*'}{self.path}"


@dataclass(frozen=True)
class Certificate:
    """A certificate the proxies serve (by SNI): its PEM chain and private key."""

    chain: str
    key: str = field(repr=False)


@dataclass(frozen=True)
class ProxyConfig:
    """A proxy's whole config, as JSON text, and its digest."""

    text: str
    digest: str

    def loadable(self, load: str) -> str:
        """The text to load, its route servers' sockets named for this load (`load`, a
        word no earlier load of the proxy used). A name is never bound twice: Caddy 2.6
        keeps a unix socket it hands from one config to the next open after both are
        gone (it dups the descriptor and never closes the copy), so the next config to
        bind that name fails, and an abstract socket cannot be unlinked to free it."""
        return self.text.replace(f"@minidock-route-{UNLOADED}-", f"@minidock-route-{load}-")


def proxy_name(cluster: str) -> str:
    return f"minidock-ingress-{cluster}"


def proxy_spec(ingress: Ingress) -> str:
    """Hash of what the proxy container runs: a new value means it is replaced."""
    return ingress.proxy_spec()


def _match(route: RouteSpec) -> list[dict[str, Any]]:
    match: dict[str, Any] = {}
    if route.domain:
        match["host"] = [route.domain]
    prefix = route.path.rstrip("/")
    if prefix:
        match["path"] = [prefix, f"{prefix}/*"]
    return [match] if match else []


def _proxy(route: RouteSpec, passive: bool = True) -> dict[str, Any]:
    """The route's requests sent to its upstreams (a 503 while it has none); `passive`
    False: with no passive health (every upstream tried, marked or not)."""
    if not route.upstreams:
        return {"handler": "static_response", "status_code": 503, "body": "no task is ready\n"}
    health = {"passive": {"fail_duration": FAIL_DURATION, "max_fails": 1}}
    return {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": address} for address in _turns(route)],
        "load_balancing": {
            "selection_policy": {"policy": "round_robin"},
            "retries": RETRIES,
        },
        **({"health_checks": health} if passive else {}),
        "transport": {"protocol": "http", "dial_timeout": DIAL_TIMEOUT},
        "headers": {"request": {"set": {h: [f"{{http.request.header.{h}}}"] for h in FORWARDED}}},
    }


def _last_resort(route: RouteSpec) -> list[dict[str, Any]]:
    """The error route of a route that proxies: a request its proxy answered `503 no
    upstreams available` (passive health had marked every upstream, so it was sent
    nowhere: safe to send, whatever its method) goes to the same upstreams with no passive
    health. A lone task that failed one dial answers the next request, not a 503 for
    FAIL_DURATION; a lost host is still skipped while another task is unmarked."""
    if route.maintenance or route.hold > 0 or not route.upstreams:
        return []
    return [{"match": [NONE_AVAILABLE], "handle": [_proxy(route, passive=False)]}]


def _turns(route: RouteSpec) -> list[str]:
    """The round robin's list: each upstream as many times as its weight, interleaved
    (round by round), so a canary's share is spread over each cycle. This is what Caddy
    2.7's `weighted_round_robin` policy (`weights`, one per upstream) does; Debian's Caddy
    2.6 has no such policy, and an address listed twice is one upstream (its passive
    health, its connections) taking two turns. docs/rollouts.md#canary."""
    if not route.weights:
        return list(route.upstreams)
    paired = list(zip(route.upstreams, route.weights, strict=True))
    rounds = max(route.weights)
    return [address for turn in range(rounds) for address, weight in paired if weight > turn]


def _handlers(route: RouteSpec) -> list[dict[str, Any]]:
    """What the route does with a request: sends it upstream; in maintenance, answers the
    page; paused, holds it (`_hold`)."""
    if route.maintenance:
        return [_maintenance(route.maintenance)]
    if route.hold > 0:
        return [{"handler": "vars", HELD: route.label}, _hold(route.hold)]
    return [_proxy(route)]


def _maintenance(message: str) -> dict[str, Any]:
    """503 with the page, `Retry-After`, and nothing cached."""
    return {
        "handler": "static_response",
        "status_code": 503,
        "headers": {
            "Content-Type": ["text/html; charset=utf-8"],
            "Retry-After": [str(RETRY_AFTER)],
            "Cache-Control": ["no-store"],
        },
        "body": maintenance_page(message),
    }


def maintenance_page(message: str) -> str:
    """The maintenance page: the message, HTML-escaped, its braces as entities (Caddy reads
    `{...}` in a response body as a placeholder)."""
    text = html.escape(message).replace("{", "&#123;").replace("}", "&#125;")
    return PAGE.replace("MESSAGE", text)


def _hold(seconds: float) -> dict[str, Any]:
    """Caddy's own wait for an upstream, with none to choose: the request waits, trying
    again every HOLD_INTERVAL, for `seconds` (any method: `retry_match` takes them all).
    It ends when that time is up or when a config is loaded (which cancels the wait):
    either way the handler answers an error, and the route server's error route
    (`_route_server`) sends the request upstream."""
    return {
        "handler": "reverse_proxy",
        "upstreams": [],
        "load_balancing": {
            "try_duration": f"{round(seconds * 1000)}ms",
            "try_interval": HOLD_INTERVAL,
            "retry_match": [{}],
        },
    }


def _redirect(ingress: Ingress) -> dict[str, Any]:
    """Plain HTTP to a TLS route: a permanent redirect to the same URL over HTTPS."""
    port = "" if ingress.https_port == 443 else f":{ingress.https_port}"
    location = f"https://{{http.request.host}}{port}{{http.request.uri}}"
    return {"handler": "static_response", "status_code": 308, "headers": {"Location": [location]}}


def _routes(routes: Sequence[RouteSpec], handlers: Any) -> list[dict[str, Any]]:
    """Caddy routes for `routes`, each handled by `handlers(route)`, then a 404 for a
    request no route takes (Caddy's own answer would be an empty 200)."""
    found = [
        {"match": _match(r), "handle": handlers(r), "terminal": True} if _match(r) else
        {"handle": handlers(r), "terminal": True}
        for r in routes
    ]  # fmt: skip
    return [*found, {"handle": [NO_ROUTE], "terminal": True}]


def route_server_name(service: str, label: str) -> str:
    """The name of a route's own server: what Caddy's metrics label its requests with."""
    return f"{ROUTE_SERVER}{service}:{label}"


def _socket(route: RouteSpec) -> str:
    """The abstract socket of a route's server: named by the route, after a mark that
    each load replaces with a name of its own (`ProxyConfig.loadable`)."""
    name = route_server_name(route.service, route.label)
    return f"{ROUTE_SOCKET}{UNLOADED}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _hand_off(route: RouteSpec) -> list[dict[str, Any]]:
    """The front server's handler of a route: the request handed to the route's own
    server (Caddy's default flushing: a streamed response flushed as it comes; not
    `flush_interval = -1`, which ties the request to the loaded config, so a load would
    cut the requests under way, a paused route's held ones among them). A request the
    front server of a config being replaced took just before the load, whose route
    server has closed by the time it is handed off (the socket refuses), is served here
    instead, by the route's upstreams (or its page; with no passive health, as a last
    resort is): not counted, never failed."""
    hand_off = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": _socket(route)}],
        "transport": {"protocol": "http"},
    }
    direct = _maintenance(route.maintenance) if route.maintenance else _proxy(route, False)
    return [
        {
            "handler": "subroute",
            "routes": [{"handle": [hand_off]}],
            "errors": {"routes": [{"handle": [direct]}]},
        }
    ]


def _route_server(route: RouteSpec) -> dict[str, Any]:
    """A route's own server: one `subroute` does what the route does, and its error routes
    answer what failed (a paused route's held request released to the upstreams; a request
    no unmarked upstream was left for sent to them all, `_last_resort`; else the error's
    status, as Caddy answers one). So each request is counted once, with the status the
    client got and its whole time, under this server's name (Caddy 2.6's `metrics` label
    requests by server and handler only)."""
    held = route.hold > 0 and not route.maintenance
    release = [{"match": [{"vars": {HELD: [route.label]}}], "handle": [_proxy(route)]}]
    failed = {"handle": [{"handler": "static_response"}]}  # the error's status, no body
    subroute = {
        "handler": "subroute",
        "routes": [{"handle": _handlers(route)}],
        "errors": {"routes": [*(release if held else []), *_last_resort(route), failed]},
    }
    return {
        "listen": [_socket(route)],
        "automatic_https": {"disable": True},
        "protocols": ["h1"],
        "metrics": {},
        "routes": [{"handle": [subroute]}],
    }


def _releases(routes: Sequence[RouteSpec]) -> dict[str, Any]:
    """A front server's error routes when routes are served directly (no route servers,
    `[ingress] request_metrics = false`): a request a paused route held (its `HELD`
    variable names the route) goes to that route's upstreams once its hold ends; a request
    a route's proxy found no unmarked upstream for goes to its `_last_resort`, the route
    matched again as the front matched it (the same order)."""
    held = [
        {"match": [{"vars": {HELD: [r.label]}}], "handle": [_proxy(r)], "terminal": True}
        for r in routes
        if r.hold > 0 and not r.maintenance
    ]
    last = [
        {
            "match": [{**m, **NONE_AVAILABLE} for m in _match(r) or [{}]],
            "handle": resort["handle"],
            "terminal": True,
        }
        for r in routes
        for resort in _last_resort(r)
    ]
    return {"errors": {"routes": [*held, *last]}} if held or last else {}


def _challenges(responses: Mapping[str, str]) -> list[dict[str, Any]]:
    """ACME HTTP-01 responses, each at its path on any host (before every route)."""
    return [
        {
            "match": [{"path": [path]}],
            "handle": [{"handler": "static_response", "status_code": 200, "body": body}],
            "terminal": True,
        }
        for path, body in sorted(responses.items())
    ]


def _body(
    routes: Sequence[RouteSpec],
    ingress: Ingress,
    certificates: Sequence[Certificate],
    challenges: Mapping[str, str],
) -> dict[str, Any]:
    redirect = _redirect(ingress)
    counted = ingress.request_metrics
    serve = _hand_off if counted else _handlers
    plain = {
        "listen": [f":{ingress.http_port}"],
        "automatic_https": {"disable": True},
        "protocols": ["h1"],
        "routes": [
            *_challenges(challenges),
            *_routes(routes, lambda r: [redirect] if r.tls else serve(r)),
        ],
        **({} if counted else _releases([r for r in routes if not r.tls])),
    }
    servers: dict[str, Any] = {SERVER: plain}
    apps: dict[str, Any] = {"http": {"servers": servers}}
    secure = [r for r in routes if r.tls]
    if secure:
        servers[SERVER_TLS] = {
            "listen": [f":{ingress.https_port}"],
            "automatic_https": {"disable": True},
            "tls_connection_policies": [{}],  # TLS on; certificates chosen by SNI
            "protocols": ["h1", "h2"] if ingress.http2 else ["h1"],
            "routes": _routes(secure, serve),
            **({} if counted else _releases(secure)),
        }
        pems = sorted({(c.chain, c.key) for c in certificates})
        load = [{"certificate": chain, "key": key} for chain, key in pems]
        apps["tls"] = {"certificates": {"load_pem": load}}
    for r in routes if counted else ():
        servers[route_server_name(r.service, r.label)] = _route_server(r)
    return {"admin": {"listen": ADMIN}, "apps": apps}


def proxy_config(
    routes: Sequence[RouteSpec],
    ingress: Ingress,
    certificates: Sequence[Certificate] = (),
    challenges: Mapping[str, str] = MappingProxyType({}),
) -> ProxyConfig:
    """The whole config of a proxy serving `routes` (most specific first) with these
    certificates (and ACME HTTP-01 `challenges`, path -> response, while an order is
    validated), and its digest (of the config without it); the digest is the plain
    server's `@id`."""
    body = _body(routes, ingress, certificates, challenges)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    body["apps"]["http"]["servers"][SERVER]["@id"] = ID_PREFIX + digest
    return ProxyConfig(json.dumps(body, sort_keys=True, separators=(",", ":")), digest)


def proxy_run_argv(cluster: str, ingress: Ingress) -> list[str]:
    """Start the proxy: its HTTP and HTTPS ports published, accept queues kept across
    reloads, restarted by docker if it dies between passes, resuming from the config it
    last loaded."""
    port, secure = ingress.http_port, ingress.https_port
    return [
        "docker", "run", "-d",
        "--name", proxy_name(cluster),
        "--label", f"{LABEL_INGRESS}={cluster}",
        "--label", f"{LABEL_PROXY_SPEC}={proxy_spec(ingress)}",
        "--publish", f"{port}:{port}",
        "--publish", f"{secure}:{secure}",
        "--sysctl", f"{MIGRATE_ACCEPT_QUEUE}=1",
        "--restart", "unless-stopped",
        "--env", "XDG_CONFIG_HOME=/config",
        "--env", "XDG_DATA_HOME=/data",
        ingress.image,
        "caddy", "run", "--resume",
    ]  # fmt: skip


def stop_argv(cluster: str) -> list[str]:
    """Stop the proxy gracefully before it is replaced: Caddy closes its listeners on
    SIGTERM and finishes the requests under way (docker kills it after STOP_GRACE)."""
    return ["docker", "stop", "--time", str(STOP_GRACE), proxy_name(cluster)]


def remove_argv(cluster: str) -> list[str]:
    return ["docker", "rm", "-f", proxy_name(cluster)]


def load_argv(cluster: str) -> list[str]:
    """Load the config given on stdin into the running proxy (its admin API's /load)."""
    return [
        "docker",
        "exec",
        "-i",
        proxy_name(cluster),
        "caddy",
        "reload",
        "--config",
        "/dev/stdin",
    ]


_PROBE = (
    (
        "set -u\n"
        "state=$(docker inspect -f '{{.State.Status}} {{index .Config.Labels \"SPEC\"}}'"
        ' "$1" 2>&1) || { case "$state" in *"No such"*|*"no such"*) echo missing; exit 0 ;; esac;'
        ' echo "$state" >&2; exit 1; }\n'
        'echo "$state"\n'
        'case "$state" in running*) docker exec "$1" cat AUTOSAVE 2>/dev/null || true ;; esac\n'
    )
    .replace("SPEC", LABEL_PROXY_SPEC)
    .replace("AUTOSAVE", AUTOSAVE)
)


def proxy_probe_argv(cluster: str) -> list[str]:
    """One command: the proxy container's state and spec label, then (when it runs) the
    config it has saved as loaded."""
    return ["sh", "-c", _PROBE, "sh", proxy_name(cluster)]


def parse_proxy_probe(host: str, stdout: str) -> ProxyObservation:
    """What `proxy_probe_argv` printed, as the proxy's observation."""
    first, _, rest = stdout.partition("\n")
    words = first.split()
    if not words or words[0] == "missing":
        return ProxyObservation(host, ok=True)
    running = words[0] == "running"
    spec = words[1] if len(words) > 1 else ""
    if not running:
        return ProxyObservation(host, True, running, spec)
    digest, routes, modes = _loaded(rest)
    upstreams = frozenset(u for _, _, ups in routes for u in ups)
    return ProxyObservation(
        host, True, running, spec, digest, upstreams, routes=routes, modes=modes
    )


Loaded = tuple[tuple[str, str, tuple[str, ...]], ...]
Modes = tuple[tuple[str, str, str], ...]


def _loaded(text: str) -> tuple[str, Loaded, Modes]:
    """The digest, the routes (Host, path, upstreams) and the modes of the routes not
    serving (Host, path, "maintenance" or "paused") of a saved config ("" and none when
    there is none). A paused route's upstreams are its error route's, where the requests
    it holds go."""
    try:
        config = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return "", (), ()
    servers = _get(config, "apps", "http", "servers")
    server = servers.get(SERVER, {}) if isinstance(servers, dict) else {}
    if not isinstance(server, dict):
        return "", (), ()
    tag = server.get("@id", "")
    digest = tag[len(ID_PREFIX) :] if isinstance(tag, str) and tag.startswith(ID_PREFIX) else ""
    secure = servers.get(SERVER_TLS, {})
    own = _route_servers(servers)
    routes: list[tuple[str, str, tuple[str, ...]]] = []
    modes: list[tuple[str, str, str]] = []
    for each in (server, secure if isinstance(secure, dict) else {}):
        released = _released(each)  # a config from before routes had servers of their own
        for r in each.get("routes", []):
            if not isinstance(r, dict):
                continue
            inner, releases = own.get(_handed_to(r), (r, released))
            mode = _mode(inner)
            if not mode:
                continue
            domain, path = _where(r)
            held = _held_label(inner)
            ups = releases.get(held, ()) if held else tuple(_dials([inner]))
            routes.append((domain, path, ups))
            if mode != "serving":
                modes.append((domain, path, mode))
    return digest, tuple(routes), tuple(modes)


def _handed_to(route: dict[str, Any]) -> str:
    """The socket of the route server a front route hands its requests to ("" if none)."""
    handlers = route.get("handle")
    first = handlers[0] if isinstance(handlers, list) and handlers else {}
    dials = list(_dials(_get(first, "routes") or [])) if isinstance(first, dict) else []
    return dials[0] if len(dials) == 1 and dials[0].startswith(ROUTE_SOCKET) else ""


def _route_servers(servers: Any) -> dict[str, tuple[dict[str, Any], dict[str, tuple[str, ...]]]]:
    """Each route server by its socket: what its subroute does with a request (a route's
    `handle`), and the upstreams its error routes release held requests to."""
    found: dict[str, tuple[dict[str, Any], dict[str, tuple[str, ...]]]] = {}
    for name, server in servers.items() if isinstance(servers, dict) else ():
        if not (isinstance(name, str) and name.startswith(ROUTE_SERVER)):
            continue
        listen, routes = _get(server, "listen"), _get(server, "routes")
        first = routes[0] if isinstance(routes, list) and routes else {}
        handlers = _get(first, "handle")
        subroute = handlers[0] if isinstance(handlers, list) and handlers else {}
        inner = _get(subroute, "routes")
        whole = isinstance(listen, list) and listen and isinstance(inner, list) and inner
        if whole and isinstance(inner[0], dict) and isinstance(subroute, dict):
            found[str(listen[0])] = (inner[0], _released(subroute))
    return found


def _mode(route: dict[str, Any]) -> str:
    """A loaded route's mode if it is a service's route: "serving" (it proxies, or answers
    503 while no task is ready), "maintenance" (its page), "paused" (it holds); "" for the
    404 that ends each server, an ACME challenge's response and the plain server's
    redirect of a TLS route (the TLS server has that route)."""
    handlers = route.get("handle")
    first = handlers[0] if isinstance(handlers, list) and handlers else {}
    if not isinstance(first, dict):
        return ""
    if first.get("handler") == "reverse_proxy":
        return "serving"
    if first.get("handler") == "vars" and HELD in first:
        return "paused"
    if first.get("handler") == "static_response" and first.get("status_code") == 503:
        return "maintenance" if "Retry-After" in _get(first, "headers") else "serving"
    return ""


def _held_label(route: dict[str, Any]) -> str:
    handlers = route.get("handle")
    first = handlers[0] if isinstance(handlers, list) and handlers else {}
    label = first.get(HELD, "") if isinstance(first, dict) else ""
    return label if isinstance(label, str) else ""


def _released(server: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The upstreams of each error route that releases held requests, by route label."""
    found: dict[str, tuple[str, ...]] = {}
    routes = _get(server, "errors", "routes")
    for r in routes if isinstance(routes, list) else []:
        matches = r.get("match") if isinstance(r, dict) else None
        match = matches[0] if isinstance(matches, list) and matches else {}
        labels = _get(match, "vars").get(HELD) if isinstance(_get(match, "vars"), dict) else None
        if isinstance(labels, list) and labels and isinstance(labels[0], str):
            found[labels[0]] = tuple(_dials([r]))
    return found


def _where(route: dict[str, Any]) -> tuple[str, str]:
    """One loaded route's Host and path prefix: the reverse of `_match`."""
    matches = route.get("match")
    match = matches[0] if isinstance(matches, list) and matches else {}
    hosts, paths = _get(match, "host"), _get(match, "path")
    domain = hosts[0] if isinstance(hosts, list) and hosts else ""
    path = paths[0] if isinstance(paths, list) and paths else "/"
    return str(domain), str(path)


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key, {}) if isinstance(value, dict) else {}
    return value


def _dials(routes: Iterable[Any]) -> Iterable[str]:
    for route in routes:
        for handler in route.get("handle", []) if isinstance(route, dict) else []:
            for up in handler.get("upstreams", []) if isinstance(handler, dict) else []:
                if isinstance(up, dict) and isinstance(up.get("dial"), str):
                    yield up["dial"]


# -- request metrics (docs/observability.md#request-metrics) --------------------------------

METRICS_URL = "http://localhost:2019/metrics"  # the admin API's, on the proxy's loopback
DURATION = "caddy_http_request_duration_seconds"
STARTED = "process_start_time_seconds"  # always there: tells a read from no requests yet
_METRICS = (
    (
        "set -u\n"
        "got=$(if command -v wget >/dev/null 2>&1; then wget -qO- URL;"
        " elif command -v curl >/dev/null 2>&1; then curl -fsS URL;"
        " else bash -c 'exec 3<>/dev/tcp/127.0.0.1/2019 &&"
        ' printf "GET /metrics HTTP/1.0\\r\\nHost: localhost:2019\\r\\n\\r\\n" >&3 && cat <&3\';'
        " fi) || { echo 'the admin API did not answer' >&2; exit 1; }\n"
        "printf '%s\\n' \"$got\" | grep -E '^(DURATION|STARTED)' || true\n"
    )
    .replace("URL", METRICS_URL)
    .replace("DURATION", DURATION)
    .replace("STARTED", STARTED)
)


@dataclass(frozen=True)
class RouteTraffic:
    """What one proxy counted for one route since it started, from Caddy's own metrics:
    requests by status class ("2xx", ...), and their durations as a histogram (each
    bucket's upper bound and the cumulative count under it, +Inf being `count`)."""

    service: str
    route: str  # its label: Host (`*` for any) and path
    classes: tuple[tuple[str, float], ...]
    buckets: tuple[tuple[float, float], ...]
    count: float
    seconds: float


@dataclass(frozen=True)
class ProxyTraffic:
    """One ingress proxy's request metrics as read now: each route's traffic since the
    proxy started (`started`, epoch seconds: its counters begin at 0 then), or why they
    could not be read (`error`; then nothing is known, never zero). `counted` False: the
    ingress counts nothing per route (`[ingress] request_metrics = false`), so only
    whether the proxy answered is known."""

    host: str
    routes: tuple[RouteTraffic, ...] = ()
    started: float = 0.0
    error: str = ""
    counted: bool = True


def request_metrics_argv(cluster: str) -> list[str]:
    """Read the proxy's request metrics (its admin API's /metrics, with whatever HTTP
    client the image has: the official image's wget, else curl, else bash), keeping the
    request durations and the process's start time (so a read of a proxy that has served
    nothing yet is told from one that failed)."""
    return ["docker", "exec", proxy_name(cluster), "sh", "-c", _METRICS]


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """One line of Prometheus' text format: name, labels, value (None: not a sample)."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    name, brace, rest = line.partition("{")
    if brace:
        inside, _, value = rest.rpartition("}")
        labels = {
            k: re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], v)
            for k, v in _LABEL.findall(inside)
        }
    else:
        name, _, value = line.partition(" ")
        labels = {}
    try:
        return name.strip(), labels, float(value.split()[0])
    except (ValueError, IndexError):
        return None


def proxy_traffic(host: str, text: str, counted: bool = True) -> ProxyTraffic:
    """What `request_metrics_argv` printed on `host`, as its proxy's traffic (with
    `counted` False, only whether it answered)."""
    routes = parse_request_metrics(text)
    if routes is None:
        return ProxyTraffic(host, error="the proxy's /metrics has no Caddy metrics")
    if not counted:
        return ProxyTraffic(host, counted=False)
    starts = [s[2] for s in map(_sample, text.splitlines()) if s is not None and s[0] == STARTED]
    return ProxyTraffic(host, routes, starts[0] if starts else 0.0)


def parse_request_metrics(text: str) -> tuple[RouteTraffic, ...] | None:
    """What `request_metrics_argv` printed, as each route's traffic (None when it is not
    Caddy's metrics: the process's start time is missing). Only the route servers'
    outer handler (`subroute`) is read: each request is counted there once."""
    classes: dict[tuple[str, str], dict[str, float]] = {}
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    sums: dict[tuple[str, str], float] = {}
    started = False
    for line in text.splitlines():
        sample = _sample(line)
        if sample is None:
            continue
        name, labels, value = sample
        started = started or name == STARTED
        server = labels.get("server", "")
        if not name.startswith(DURATION) or labels.get("handler") != "subroute":
            continue
        if not server.startswith(ROUTE_SERVER):
            continue
        service, _, route = server[len(ROUTE_SERVER) :].partition(":")
        key = (service, route)
        if name == DURATION + "_count":
            code = labels.get("code", "")
            word = f"{code[:1]}xx" if len(code) == 3 and code.isdigit() else "other"
            counted = classes.setdefault(key, {})
            counted[word] = counted.get(word, 0.0) + value
        elif name == DURATION + "_sum":
            sums[key] = sums.get(key, 0.0) + value
        elif name == DURATION + "_bucket" and labels.get("le", "") not in ("", "+Inf"):
            bound = float(labels["le"])
            per = buckets.setdefault(key, {})
            per[bound] = per.get(bound, 0.0) + value
    if not started:
        return None
    return tuple(
        RouteTraffic(
            service,
            route,
            tuple(sorted(counted.items())),
            tuple(sorted(buckets.get((service, route), {}).items())),
            sum(counted.values()),
            sums.get((service, route), 0.0),
        )
        for (service, route), counted in sorted(classes.items())
    )
