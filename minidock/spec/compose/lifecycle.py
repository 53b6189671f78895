"""When a service's tasks start, count as healthy and restart: depends_on, healthcheck,
restart and deploy.restart_policy."""

from __future__ import annotations

from typing import Any

from minidock.spec.compose.context import describe
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import boolean, duration, integer, mapping, string_list, text
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = ["depends_on", "healthcheck", "restart"]

_STARTS = ("service_started", "service_healthy")


def depends_on(s: Service) -> None:
    """`depends_on`, a list or a mapping with conditions: MiniDock starts a service once
    every replica of what it depends on runs and is healthy."""
    if "depends_on" not in s.body:
        return
    at = (*s.at, "depends_on")
    value = s.body["depends_on"]
    names: list[tuple[str, Part]] = []
    if isinstance(value, YList):
        names = [(n, i) for i, n in enumerate(string_list(s.ctx, value, at))]
    else:
        for name, options in mapping(s.ctx, value, at).items():
            if _required(s, name, mapping(s.ctx, options, (*at, name)), (*at, name)):
                names.append((name, name))
    for i, (name, part) in enumerate(names):
        if name in s.top.skipped:
            raise s.ctx.fail(
                (*at, part), f"depends on {name!r}, which its profiles leave out (COMPOSE_PROFILES)"
            )
        s.ctx.came_from(("services", s.name, "depends_on", i), (*at, part))
    s.set("depends_on", [name for name, _ in names], "depends_on")


def _required(s: Service, name: str, options: YDict, where: tuple[Part, ...]) -> bool:
    """Whether the dependency on `name` stays (`required: false` drops a missing one)."""
    s.known_keys(options, where, ("condition", "required", "restart"))
    condition = options.get("condition", "service_started")
    if condition not in _STARTS:
        raise s.ctx.fail(
            (*where, "condition"),
            f"condition {condition!r} is not supported: use service_started or "
            "service_healthy (MiniDock runs services, not one-off jobs)",
        )
    if "restart" in options and boolean(s.ctx, options["restart"], (*where, "restart")):
        raise s.ctx.fail(
            (*where, "restart"),
            "MiniDock does not restart a service when one it depends on is updated: remove it",
        )
    required = boolean(s.ctx, options.get("required", True), (*where, "required"))
    return required or (name in s.ctx.doc.get("services", {}) and name not in s.top.skipped)


def healthcheck(s: Service) -> None:
    """`healthcheck`: test (CMD, CMD-SHELL, a string, NONE), durations, retries."""
    if "healthcheck" not in s.body:
        return
    at = (*s.at, "healthcheck")
    body = s.section("healthcheck")
    s.known_keys(
        body,
        at,
        ("test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"),
    )
    test = body.get("test")
    off = "disable" in body and boolean(s.ctx, body["disable"], (*at, "disable"))
    if off or (isinstance(test, list) and test[:1] == ["NONE"]):
        s.ctx.warn(at, "no health check is set; an image's own HEALTHCHECK, if it has one, runs")
        return
    if test is None:
        raise s.ctx.fail(at, "missing test: give the check command (MiniDock needs one)")
    health: dict[str, Any] = {"cmd": _test(s, test, (*at, "test"))}
    for key in ("interval", "timeout", "start_period"):
        if key in body:
            health[key] = duration(s.ctx, body[key], (*at, key))
    if "retries" in body:
        health["retries"] = integer(s.ctx, body["retries"], (*at, "retries"))
    if "start_interval" in body:
        s.ctx.warn((*at, "start_interval"), "ignored: checks run every interval from the start")
    s.set("health", health, "healthcheck")
    for key in health:
        s.ctx.came_from(("services", s.name, "health", key), (*at, key))


def _test(s: Service, test: Any, where: tuple[Part, ...]) -> list[str]:
    if isinstance(test, str):
        return ["/bin/sh", "-c", test]
    words = string_list(s.ctx, test, where)
    if words[:1] == ["CMD"] and len(words) > 1:
        return words[1:]
    if words[:1] == ["CMD-SHELL"] and len(words) > 1:
        return ["/bin/sh", "-c", " ".join(words[1:])]
    raise s.ctx.fail(where, "start the test with CMD or CMD-SHELL, or write it as one string")


_RESTART = {"no": "none", "always": "any", "unless-stopped": "any", "on-failure": "on-failure"}


def restart(s: Service) -> None:
    """`deploy.restart_policy`, else `restart` (no, always, unless-stopped, on-failure[:N])."""
    policy = s.section("deploy").get("restart_policy")
    if policy is not None:
        if "restart" in s.body:
            s.ctx.warn((*s.at, "restart"), "ignored: deploy.restart_policy is used")
        _restart_policy(s, mapping(s.ctx, policy, (*s.at, "deploy", "restart_policy")))
        return
    if "restart" not in s.body:
        return
    where = (*s.at, "restart")
    value = text(s.ctx, s.body["restart"], where)
    name, _, count = value.partition(":")
    if name not in _RESTART or (count and (name != "on-failure" or not count.isdigit())):
        raise s.ctx.fail(
            where, f"expected no, always, unless-stopped or on-failure[:N], got {value!r}"
        )
    found: dict[str, Any] = {"condition": _RESTART[name]}
    if count:
        found["max_attempts"] = int(count)
    s.set("restart", found, "restart")


def _restart_policy(s: Service, body: YDict) -> None:
    at = (*s.at, "deploy", "restart_policy")
    s.known_keys(body, at, ("condition", "delay", "max_attempts", "window"))
    found: dict[str, Any] = {}
    if "condition" in body:
        condition = body["condition"]
        if condition not in ("none", "on-failure", "any"):
            raise s.ctx.fail(
                (*at, "condition"), f"expected none, on-failure or any, got {describe(condition)}"
            )
        found["condition"] = condition
    for key in ("delay", "window"):
        if key in body:
            found[key] = duration(s.ctx, body[key], (*at, key))
    if "max_attempts" in body:
        found["max_attempts"] = integer(s.ctx, body["max_attempts"], (*at, "max_attempts"))
    s.set("restart", found, "deploy", "restart_policy")
    for key in found:
        s.ctx.came_from(("services", s.name, "restart", key), (*at, key))
