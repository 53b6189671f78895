"""The ingress in the cluster file into the model: `[ingress]` and each service's routes.

Checks the schema cannot express: a route to a port the service does not say it listens
on, two services claiming one host and path, `ports` in the range MiniDock publishes
routed tasks on, an ingress that matches no host of the inventory, `ports` that take
the proxy's HTTP or HTTPS port on a host the service may run on; a route's certificate
files and `[ingress] acme` (minidock.spec.certs). docs/ingress.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from minidock import units
from minidock.model import Cluster, Constraint, Ingress, Inventory, PortMapping, Route, RouteTls
from minidock.spec.certs import acme_settings, route_tls
from minidock.spec.errors import Fail, Part, SpecError
from minidock.spec.messages import render, show

__all__ = [
    "check_ingress_hosts",
    "check_ingress_ports",
    "check_routes",
    "ingress_of",
    "routes_of",
    "service_ingress",
]

_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_./-]*)\s*(==|!=)\s*([^\s=!]\S*)\s*$")


def ingress_of(doc: dict[str, Any], display: str, base: str) -> Ingress | None:
    """`[ingress]`, or its defaults when a service has routes and the table is absent
    (files relative to `base`)."""

    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, render(parts), message)

    body: dict[str, Any] | None = doc.get("ingress")
    if body is None:
        routed = any("ingress" in s for s in doc.get("services", {}).values())
        if not routed:
            return None
        return Ingress(acme=acme_settings({}, fail, base)) if _asks_acme(doc) else Ingress()
    if "hosts" in body and "constraints" in body:
        raise fail(("ingress", "constraints"), "give hosts or constraints, not both")
    options: dict[str, Any] = {
        k: body[k]
        for k in ("http_port", "https_port", "image", "request_metrics", "http2")
        if k in body
    }
    if options.get("https_port", 443) == options.get("http_port", 80):
        raise fail(("ingress", "https_port"), "must differ from http_port")
    if "hosts" in body:
        options["hosts"] = tuple(body["hosts"])
    if "constraints" in body:
        options["constraints"] = tuple(_constraint(text) for text in body["constraints"])
    if "task_ports" in body:
        options["task_ports"] = _task_ports(body["task_ports"], fail)
    if "acme" in body or _asks_acme(doc):
        options["acme"] = acme_settings(body.get("acme", {}), fail, base)
    return Ingress(**options)


def _asks_acme(doc: dict[str, Any]) -> bool:
    """Whether a route of the cluster file has tls = "acme"."""
    for service in doc.get("services", {}).values():
        given = service.get("ingress", [])
        for route in given if isinstance(given, list) else [given]:
            if route.get("tls") == "acme":
                return True
    return False


def _constraint(text: str) -> Constraint:
    found = _CONSTRAINT.match(text)
    assert found is not None  # the schema checked the pattern
    return Constraint(key=found[1], op="==" if found[2] == "==" else "!=", value=found[3])


def _task_ports(text: str, fail: Fail) -> tuple[int, int]:
    first, last = (int(part) for part in text.split("-"))
    if not 1024 <= first <= last <= 65535:
        raise fail(
            ("ingress", "task_ports"),
            f"must be FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, got {show(text)}",
        )
    return first, last


def routes_of(
    body: dict[str, Any],
    at: tuple[Part, ...],
    fail: Fail,
    ports: Sequence[PortMapping],
    base: str,
) -> tuple[Route, ...]:
    """A service's `ingress`: one route table or a list of them, each to a port the
    service says it listens on (a container port of `ports`, or one its health check
    names as `:PORT`), with its TLS (certificate files relative to `base`)."""
    given = body.get("ingress")
    if given is None:
        return ()
    items: list[dict[str, Any]] = given if isinstance(given, list) else [given]
    words = " ".join(body["health"]["cmd"]) if "health" in body else ""
    routes: list[Route] = []
    for i, item in enumerate(items):
        where = (*at, "ingress", *([i] if isinstance(given, list) else []))
        port: int = item["port"]
        declared = any(p.container_port == port for p in ports)
        if not declared and not re.search(rf":{port}(?![0-9])", words):
            raise fail(
                (*where, "port"),
                f"the service does not say it listens on {port}: route to a container port "
                f"of its ports, or give it a health check on that port "
                f"(e.g. wget -qO- http://127.0.0.1:{port}/)",
            )
        domain = item.get("host", "").lower()  # a DNS name: the proxy matches it ignoring case
        tls = route_tls(item.get("tls", "off"), domain, (*where, "tls"), fail, base)
        route = Route(domain, item.get("path", "/"), port, tls)
        if any(_claim(r) == _claim(route) and r.port == port for r in routes):
            raise fail(where, f"route {route} is given twice")
        routes.append(route)
    return tuple(routes)


def service_ingress(body: dict[str, Any], routes: tuple[Route, ...]) -> dict[str, Any]:
    """Service keyword arguments for its routes and drain_timeout."""
    options: dict[str, Any] = {"ingress": routes}
    if "drain_timeout" in body:
        options["drain_timeout"] = units.parse_duration(body["drain_timeout"])
    return options


def check_routes(cluster: Cluster, display: str) -> None:
    """Two services may not claim one host and path; no service's TCP `ports` may take a
    port of the ingress's task range, on any host: a routed task may run on every host
    its service's constraints allow, and takes the lowest free port of the range just
    before its `docker run` (UDP never clashes with it)."""
    ingress = cluster.ingress
    if ingress is None:
        return
    claimed: dict[tuple[str, str], tuple[str, Route]] = {}
    _one_tls_per_host(cluster, display)
    for service in cluster.services:
        for route in service.ingress:
            other, claimant = claimed.setdefault(_claim(route), (service.name, route))
            if other != service.name:
                raise SpecError(
                    display,
                    f"services.{service.name}.ingress",
                    f"host {route.domain or '*'} path {route.path} is claimed by both "
                    f"services {other}{_as_written(claimant, route)} and {service.name}: "
                    "give one another host or path",
                )
        for i, port in enumerate(service.ports):
            if port.protocol == "tcp" and ingress.owns_port(port.host_port):
                first, last = ingress.task_ports
                raise SpecError(
                    display,
                    f"services.{service.name}.ports[{i}]",
                    f"host port {port.host_port} is in the ingress's task_ports "
                    f"({first}-{last}), where MiniDock publishes routed tasks: publish "
                    "another port, or move task_ports",
                )


def _claim(route: Route) -> tuple[str, str]:
    """What a route takes as the proxy matches it: its host and path prefix, both ignoring
    case (Caddy's host and path matchers do), a trailing slash ignored."""
    return route.domain.lower(), route.path.rstrip("/").lower() or "/"


def _as_written(first: Route, route: Route) -> str:
    """How the first claimant wrote the claim, when it differs from `route` in case only."""
    if (first.domain, first.path.rstrip("/")) == (route.domain, route.path.rstrip("/")):
        return ""
    return f" (as {first.domain or '*'}{first.path}: the proxy matches paths ignoring case)"


def _one_tls_per_host(cluster: Cluster, display: str) -> None:
    """Every route of one host name has the same TLS (one certificate per name)."""
    tls_of: dict[str, tuple[str, RouteTls]] = {}
    for service in cluster.services:
        for route in service.ingress:
            owner, tls = tls_of.setdefault(route.domain, (service.name, route.tls))
            if tls != route.tls:
                raise SpecError(
                    display,
                    f"services.{service.name}.ingress",
                    f"host {route.domain or '*'} has routes with different tls (services "
                    f"{owner} and {service.name}): give every route of a host the same tls",
                )


def check_ingress_hosts(cluster: Cluster, inventory: Inventory, display: str) -> None:
    """The ingress names only inventory hosts and matches at least one."""
    ingress = cluster.ingress
    if ingress is None:
        return
    names = [h.name for h in inventory.hosts]
    for i, name in enumerate(ingress.hosts):
        if name not in names:
            raise SpecError(
                display, f"ingress.hosts[{i}]", f"unknown host {name!r} (inventory: {names})"
            )
    if not any(ingress.serves(h) for h in inventory.hosts):
        raise SpecError(
            display,
            "ingress.constraints",
            "matches no host of the inventory: no proxy would take traffic",
        )


def check_ingress_ports(cluster: Cluster, inventory: Inventory, display: str) -> None:
    """No service publishes the ingress's `http_port` or `https_port` (TCP) while its
    constraints let it on an ingress host: the proxy holds both there, so such a task
    could never be placed on that host, or, holding the port first, would keep the proxy
    from starting. A service whose constraints keep it off every ingress host may."""
    ingress = cluster.ingress
    if ingress is None:
        return
    edge = [h for h in inventory.hosts if ingress.serves(h)]
    keys = {ingress.http_port: "http_port", ingress.https_port: "https_port"}
    for service in cluster.services:
        on = [h.name for h in edge if all(c.allows(h) for c in service.constraints)]
        for i, port in enumerate(service.ports):
            key = keys.get(port.host_port)
            if key is None or port.protocol != "tcp" or not on:
                continue
            hosts = _and(on)
            raise SpecError(
                display,
                f"services.{service.name}.ports[{i}]",
                f"host port {port.host_port} is the ingress's {key}, which its proxy holds "
                f"on {hosts}, where {service.name} may run: publish another host port "
                f"(or route it through the ingress), or {_keep_off(ingress, service.name)}",
            )


def _and(names: Sequence[str], most: int = 3) -> str:
    shown = [*names[:most], f"{len(names) - most} more"] if len(names) > most else list(names)
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _keep_off(ingress: Ingress, name: str) -> str:
    """How to keep a service off every ingress host, as exactly as the ingress allows."""
    if ingress.hosts:
        wanted = ", ".join(f'"host != {h}"' for h in ingress.hosts[:3])
        more = ", ..." if len(ingress.hosts) > 3 else ""
        return f"keep {name} off the ingress hosts: constraints = [{wanted}{more}]"
    if len(ingress.constraints) == 1 and ingress.constraints[0].op == "==":
        c = ingress.constraints[0]
        return f'keep {name} off the ingress hosts: constraints = ["{c.key} != {c.value}"]'
    if ingress.constraints:
        return f"give {name} constraints that keep it off every ingress host"
    return (
        "give the ingress its hosts ([ingress] hosts or constraints; by default every host "
        f"runs its proxy) and keep {name} off them"
    )
