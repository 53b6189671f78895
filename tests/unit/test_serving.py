"""Maintenance and pause at the core and config level: the mode is the service's desired
state (kept across applies and the store), the route table carries it, and each proxy's
config renders it (a 503 page with `Retry-After`; a hold whose end sends the request
upstream) and reads it back (docs/ingress.md#maintenance-and-pause)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from minidock.commands.caddy import (
    HELD,
    RouteSpec,
    maintenance_page,
    parse_proxy_probe,
    proxy_config,
)
from minidock.commands.proxies import configs_for
from minidock.core import ControllerState, admit, set_serving
from minidock.core.decide import decide
from minidock.core.routes import RouteEntry, route_changes, route_table
from minidock.core.serving import (
    DEFAULT_MESSAGE,
    RETRY_AFTER,
    SERVING,
    Serving,
    ended,
    in_maintenance,
    paused,
)
from minidock.model import Cluster, Ingress, Route, Service
from minidock.store.codec import from_data, to_data
from tests.caddyview import front
from tests.unit.test_ingress_core import CLUSTER, INVENTORY, NOW, WEB, observed, task

API = Service("api", "api:1", ingress=(Route("app.test", "/api", 9000),))
WORKER = Service("worker", "worker:1")
BOTH = replace(CLUSTER, services=(WEB, API, WORKER))


def applied(cluster: Cluster = BOTH) -> ControllerState:
    return admit(ControllerState(), cluster, 1)


def server(config_text: str, name: str = "minidock") -> dict[str, Any]:
    return front(config_text, name)


def test_the_mode_is_the_services_desired_state_kept_across_applies_and_the_store() -> None:
    state = set_serving(applied(), "web", in_maintenance("", NOW))
    mode = state.services["web"].serving
    assert (mode.serving, mode.message, mode.since) == (Serving.MAINTENANCE, DEFAULT_MESSAGE, NOW)
    assert state.services["api"].serving == SERVING
    changed = replace(WEB, image="web:6")  # a new spec: a rollout begins, the mode stays
    again = admit(state, replace(BOTH, services=(changed, API, WORKER)), 2)
    assert again.services["web"].spec.image == "web:6"
    assert again.services["web"].serving == mode
    assert from_data(to_data(again), ControllerState).services["web"].serving == mode
    with pytest.raises(ValueError, match="worker has no ingress route"):
        set_serving(state, "worker", paused(30.0, NOW))


def test_each_command_ends_only_its_own_mode() -> None:
    held, down = paused(5.0, NOW), in_maintenance("back at 3", NOW)
    assert ended(held, Serving.PAUSED) == SERVING
    assert ended(held, Serving.MAINTENANCE) is None  # `maintenance off` of a paused service
    assert ended(down, Serving.MAINTENANCE) == SERVING
    assert ended(down, Serving.PAUSED) is None
    assert ended(SERVING, Serving.PAUSED) is None


def test_the_route_table_and_the_whole_decision_carry_each_services_mode() -> None:
    state = set_serving(applied(), "api", paused(5.0, NOW))
    seen = observed(task(1))
    table = route_table(BOTH, INVENTORY, seen, state, NOW)
    by_service = {e.service: e for e in table}
    assert by_service["api"].mode == paused(5.0, NOW)
    assert by_service["web"].mode == SERVING
    assert by_service["web"].upstreams == ("10.0.0.1:30000",)  # a mode takes no task out
    plan = decide(BOTH, INVENTORY, seen, state, NOW)
    assert {e.service: e.mode for e in plan.routes} == {"api": paused(5.0, NOW), "web": SERVING}


def test_maintenance_answers_503_with_the_page_and_retry_after() -> None:
    routes = [RouteSpec("app.test", "/", ("10.0.0.1:30000",), maintenance="Back at {5} <b>")]
    (route, _) = server(proxy_config(routes, Ingress()).text)["routes"]
    (handler,) = route["handle"]
    assert (handler["handler"], handler["status_code"]) == ("static_response", 503)
    assert handler["headers"]["Retry-After"] == [str(RETRY_AFTER)]
    assert handler["headers"]["Content-Type"] == ["text/html; charset=utf-8"]
    # escaped for HTML, and no brace left for Caddy to read as a placeholder
    assert "<p>Back at &#123;5&#125; &lt;b&gt;</p>" in handler["body"]
    assert handler["body"] == maintenance_page("Back at {5} <b>")


def test_a_paused_route_holds_each_request_and_its_error_route_sends_it_upstream() -> None:
    up = ("10.0.0.1:30000", "10.0.0.2:30001")
    routes = [RouteSpec("app.test", "/api", up, hold=5.0), RouteSpec("", "/", ("10.0.0.3:1",))]
    plain = server(proxy_config(routes, Ingress()).text)
    held, other, _ = plain["routes"]
    mark, hold = held["handle"]
    assert mark == {"handler": "vars", HELD: "app.test/api"}
    assert hold["upstreams"] == []  # nothing to choose: Caddy waits for an upstream
    assert hold["load_balancing"]["try_duration"] == "5000ms"
    assert hold["load_balancing"]["retry_match"] == [{}]  # every method held, not only GET
    assert other["handle"][0]["handler"] == "reverse_proxy"
    (release,) = plain["errors"]["routes"]
    assert release["match"] == [{"vars": {HELD: ["app.test/api"]}}]
    assert [u["dial"] for u in release["handle"][0]["upstreams"]] == list(up)
    assert "errors" not in server(proxy_config(routes[1:], Ingress()).text)


def test_a_paused_tls_route_holds_on_the_https_server() -> None:
    routes = [RouteSpec("app.test", "/", ("10.0.0.1:30000",), tls=True, hold=3.0)]
    text = proxy_config(routes, Ingress()).text
    assert "errors" not in server(text)  # plain HTTP is redirected, never held
    secure = server(text, "minidock-https")
    assert secure["routes"][0]["handle"][0][HELD] == "app.test/"
    assert secure["errors"]["routes"][0]["match"] == [{"vars": {HELD: ["app.test/"]}}]


def loaded(table: tuple[RouteEntry, ...]) -> Any:
    config = configs_for(table, Ingress())
    return parse_proxy_probe("host1", "running s\n" + config.text)


def test_a_loaded_mode_reads_back_and_plan_says_each_change_of_mode() -> None:
    web = RouteEntry(Route("", "/", 8080), "web", ("10.0.0.1:30000",))
    api = RouteEntry(Route("app.test", "/api", 9000), "api", ("10.0.0.2:30001",))
    down = replace(web, mode=in_maintenance("later", NOW))
    held = replace(api, mode=paused(5.0, NOW))
    seen = loaded((held, down))
    # a held request goes to the paused route's upstreams: they count as loaded (a task
    # there drains before it stops); a maintenance page sends nowhere
    assert seen.routes == (("app.test", "/api", ("10.0.0.2:30001",)), ("", "/", ()))
    assert seen.upstreams == frozenset({"10.0.0.2:30001"})
    assert seen.modes == (("app.test", "/api", "paused"), ("", "/", "maintenance"))
    assert route_changes((held, down), seen.routes, seen.modes) == ()
    assert route_changes((api, web), seen.routes, seen.modes) == (
        "~ app.test/api: serving again",
        "~ */: serving again",
        "~ */: +10.0.0.1:30000",
    )
    serving = loaded((api, web))
    assert route_changes((held, down), serving.routes, serving.modes) == (
        "~ app.test/api: paused (requests held up to 5s)",
        "~ */: maintenance (503 with its page)",
        "~ */: -10.0.0.1:30000",
    )
    assert route_changes((held,), (), ()) == ("+ app.test/api -> api (1 upstream, paused)",)
    digests = {configs_for(t, Ingress()).digest for t in [(api,), (held,), (down,), (web,)]}
    assert len(digests) == 4  # each mode is its own config: a pass loads it
