"""A loaded Caddy config read as a front server that does each route's work itself: every
hand-off to a route server (minidock.commands.caddy: one server per route, for its metrics)
replaced by what that server does, and its held-request releases gathered as the front
server's error routes (its last resort, `minidock.commands.caddy._last_resort`, is left out). Tests
of what a route does read it through this view; the tests of the route servers themselves,
and of the last resort, read the config as it is."""

from __future__ import annotations

import copy
import json
from typing import Any

from minidock.commands.caddy import HELD, ROUTE_SERVER

__all__ = ["front"]


def front(config: str | dict[str, Any], name: str = "minidock") -> dict[str, Any]:
    """Server `name` of the config (JSON text or parsed), each hand-off resolved."""
    body = json.loads(config) if isinstance(config, str) else config
    servers: dict[str, Any] = body["apps"]["http"]["servers"]
    by_socket = {s["listen"][0]: s for n, s in servers.items() if n.startswith(ROUTE_SERVER)}
    server: dict[str, Any] = copy.deepcopy(servers[name])
    releases: list[dict[str, Any]] = []
    for route in server["routes"]:
        first = route["handle"][0]
        if first.get("handler") != "subroute":
            continue
        dial = first["routes"][0]["handle"][0]["upstreams"][0]["dial"]
        inner = by_socket[dial]["routes"][0]["handle"][0]
        route["handle"] = inner["routes"][0]["handle"]
        releases += [r for r in inner["errors"]["routes"] if HELD in str(r.get("match"))]
    if releases:
        server["errors"] = {"routes": releases}
    return server
