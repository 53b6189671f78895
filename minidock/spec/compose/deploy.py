"""`deploy`, as `docker stack deploy` reads it: mode, replicas, placement (constraints on
node.hostname and node.labels, spread preferences), resources, update_config,
rollback_config; and the resource keys outside it (`cpus`, `mem_limit`, `scale`)."""

from __future__ import annotations

import re
from typing import Any

from minidock import units
from minidock.spec.compose.context import describe
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import (
    duration,
    integer,
    items,
    mapping,
    number,
    seconds,
    size,
    string_list,
    text,
)
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = ["deploy", "gpu_count", "resources"]

_DEPLOY_KEYS = (
    "mode", "replicas", "placement", "resources", "restart_policy", "update_config",
    "rollback_config", "labels", "endpoint_mode",
)  # fmt: skip
_UPDATE_KEYS = ("parallelism", "delay", "failure_action", "monitor", "max_failure_ratio", "order")
_CONSTRAINT = re.compile(r"\s*(\S+?)\s*(==|!=)\s*(\S+)\s*")
_NODE_LABELS = "node.labels."
_LABEL_HINT = "give the hosts a label in the inventory and use node.labels.KEY"


def deploy(s: Service) -> None:
    """Everything under `deploy` except restart_policy, labels and resources."""
    at = (*s.at, "deploy")
    body = s.section("deploy")
    s.known_keys(body, at, _DEPLOY_KEYS)
    mode = body.get("mode", "replicated")
    if mode not in ("replicated", "global"):
        raise s.ctx.fail(
            (*at, "mode"), f"mode {mode!r} is not supported: use replicated or global (no jobs)"
        )
    if "mode" in body:
        s.set("mode", mode, "deploy", "mode")
    _replicas(s, body)
    _placement(s, s.section("deploy", "placement"))
    if "update_config" in body:
        update = _update(s, s.section("deploy", "update_config"), (*at, "update_config"))
        s.set("update", update, "deploy", "update_config")
        for key in update:
            s.ctx.came_from(("services", s.name, "update", key), (*at, "update_config", key))
    if "rollback_config" in body:
        _rollback(s, s.section("deploy", "rollback_config"), s.out.get("update", {}))
    if "endpoint_mode" in body:
        s.ctx.warn(
            (*at, "endpoint_mode"),
            "ignored: a service name resolves to its tasks on the same host (as dnsrr)",
        )


def _replicas(s: Service, body: YDict) -> None:
    found: list[tuple[int, tuple[Part, ...]]] = []
    for parts, node in (((*s.at, "deploy", "replicas"), body), ((*s.at, "scale"), s.body)):
        if parts[-1] in node:
            found.append((integer(s.ctx, node[parts[-1]], parts), parts))
    if len(found) == 2 and found[0][0] != found[1][0]:
        raise s.ctx.fail(found[1][1], f"differs from deploy.replicas ({found[0][0]})")
    if found:
        s.set("replicas", found[0][0], *found[0][1][2:])


def _placement(s: Service, body: YDict) -> None:
    at = (*s.at, "deploy", "placement")
    s.known_keys(body, at, ("constraints", "preferences", "max_replicas_per_node"))
    if "max_replicas_per_node" in body:
        raise s.ctx.fail(
            (*at, "max_replicas_per_node"),
            "not supported: MiniDock spreads replicas over hosts first; a host port allows one "
            "task per host",
        )
    constraints = body.get("constraints", [])
    if not isinstance(constraints, list):
        raise s.ctx.fail((*at, "constraints"), f"expected a list, got {describe(constraints)}")
    found = [_constraint(s, c, (*at, "constraints", i)) for i, c in enumerate(constraints)]
    if found:
        s.set("constraints", found, "deploy", "placement", "constraints")
        for i in range(len(found)):
            s.ctx.came_from(("services", s.name, "constraints", i), (*at, "constraints", i))
    preferences = body.get("preferences", [])
    if not isinstance(preferences, list):
        raise s.ctx.fail((*at, "preferences"), f"expected a list, got {describe(preferences)}")
    if len(preferences) > 1:
        raise s.ctx.fail((*at, "preferences", 1), "MiniDock spreads over one label: keep one")
    if preferences:
        where = (*at, "preferences", 0)
        preference = mapping(s.ctx, preferences[0], where)
        s.known_keys(preference, where, ("spread",))
        label = text(s.ctx, preference.get("spread"), (*where, "spread"))
        if not label.startswith(_NODE_LABELS):
            raise s.ctx.fail((*where, "spread"), f"spread over node.labels.KEY: {_LABEL_HINT}")
        s.set("spread", label.removeprefix(_NODE_LABELS), "deploy", "placement", "preferences")


def _constraint(s: Service, value: Any, where: tuple[Part, ...]) -> str:
    """A Swarm constraint as a MiniDock one: node.labels.KEY becomes KEY."""
    found = _CONSTRAINT.fullmatch(text(s.ctx, value, where))
    if found is None:
        raise s.ctx.fail(where, "invalid constraint: use 'node.labels.KEY == value' or '!='")
    key, op, wanted = found.groups()
    if key.startswith(_NODE_LABELS):
        key = key.removeprefix(_NODE_LABELS)
    elif key != "node.hostname":
        raise s.ctx.fail(where, f"{key} is not known to MiniDock: {_LABEL_HINT}, or node.hostname")
    return f"{key} {op} {wanted}"


def _update(s: Service, body: YDict, at: tuple[Part, ...]) -> dict[str, Any]:
    s.known_keys(body, at, _UPDATE_KEYS)
    found: dict[str, Any] = {}
    if "parallelism" in body:
        found["parallelism"] = integer(s.ctx, body["parallelism"], (*at, "parallelism"))
        if found["parallelism"] == 0:
            raise s.ctx.fail(
                (*at, "parallelism"),
                "0 (all at once) is not supported: give the number of tasks to replace at a time",
            )
    for key in ("delay", "monitor"):
        if key in body:
            found[key] = duration(s.ctx, body[key], (*at, key))
    for key in ("failure_action", "order"):
        if key in body:
            found[key] = text(s.ctx, body[key], (*at, key))
    if "max_failure_ratio" in body:
        ratio = number(s.ctx, body["max_failure_ratio"], (*at, "max_failure_ratio"))
        found["max_failure_ratio"] = ratio
    return found


def _rollback(s: Service, body: YDict, update: dict[str, Any]) -> None:
    """rollback_config: MiniDock rolls back with update_config's settings (and pauses when
    a rollback fails), so it is accepted only where it says the same."""
    at = (*s.at, "deploy", "rollback_config")
    s.known_keys(body, at, _UPDATE_KEYS)
    defaults: dict[str, Any] = {"parallelism": 1, "delay": 0.0, "monitor": 5.0}
    defaults |= {"order": "stop-first", "max_failure_ratio": 0}
    for key, value in body.items():
        if key.startswith("x-"):
            continue
        if key == "failure_action":
            if value != "pause":
                raise s.ctx.fail(
                    (*at, key), "a rollback that fails pauses in MiniDock: use pause or remove it"
                )
            continue
        given = _rollback_value(s, key, value, (*at, key))
        wanted = update.get(key, defaults[key])
        if isinstance(wanted, str) and key in ("delay", "monitor"):
            wanted = seconds(s.ctx, wanted, (*at, key))
        if given != wanted:
            raise s.ctx.fail(
                (*at, key),
                "MiniDock rolls back with update_config's settings: make it equal to "
                f"update_config.{key} or remove it",
            )


def _rollback_value(s: Service, key: str, value: Any, where: tuple[Part, ...]) -> Any:
    if key in ("delay", "monitor"):
        return seconds(s.ctx, value, where)
    if key == "parallelism":
        return integer(s.ctx, value, where)
    if key == "max_failure_ratio":
        return number(s.ctx, value, where)
    return text(s.ctx, value, where)


def gpu_count(s: Service, value: Any, at: tuple[Part, ...], reservation: bool) -> int:
    """GPUs each task is given, from Compose's device requests (`gpus`, or
    `deploy.resources.reservations.devices` with capabilities [gpu]): the sum of their
    `count`s, or of their `device_ids` (MiniDock gives each task ids of its host's own
    choosing, never shared: named ids are read as their number, with a warning)."""
    if not reservation and value == "all":
        raise s.ctx.fail(at, "'all' GPUs cannot be scheduled: give gpus: [{count: N}]")
    total = 0
    for i, item in items(list_of(s, value, at)):
        request = mapping(s.ctx, item, (*at, i))
        keys = ("capabilities", "count", "device_ids", "driver", "options")
        s.known_keys(request, (*at, i), keys)
        caps = string_list(s.ctx, request.get("capabilities", ["gpu"]), (*at, i, "capabilities"))
        if reservation and "gpu" not in caps:
            raise s.ctx.fail(
                (*at, i, "capabilities"),
                "only GPU devices can be reserved (capabilities: [gpu]); give other devices "
                "with devices",
            )
        if "device_ids" in request:
            ids = string_list(s.ctx, request["device_ids"], (*at, i, "device_ids"))
            s.ctx.warn(
                (*at, i, "device_ids"),
                f"each task is given {len(ids)} GPUs of its host's inventory gpus, "
                "chosen by MiniDock and never shared, not these ids",
            )
            total += len(ids)
        elif request.get("count") == "all":
            raise s.ctx.fail((*at, i, "count"), "'all' GPUs cannot be scheduled: give a count")
        else:
            total += integer(s.ctx, request.get("count", 1), (*at, i, "count"))
    return total


def list_of(s: Service, value: Any, at: tuple[Part, ...]) -> YList:
    if not isinstance(value, YList):
        raise s.ctx.fail(at, f"expected a list, got {describe(value)}")
    return value


def resources(s: Service) -> None:
    """cpus and memory: MiniDock reserves what a task may use, so one value is both the
    limit and the reservation; given both, the limit is used."""
    at = (*s.at, "deploy", "resources")
    s.known_keys(s.section("deploy", "resources"), at, ("limits", "reservations"))
    limits = s.section("deploy", "resources", "limits")
    reservations = s.section("deploy", "resources", "reservations")
    s.known_keys(limits, (*at, "limits"), ("cpus", "memory", "pids"))
    s.known_keys(reservations, (*at, "reservations"), ("cpus", "memory", "devices"))
    if "pids" in limits:
        pids = integer(s.ctx, limits["pids"], (*at, "limits", "pids"))
        if s.body.get("pids_limit") not in (None, pids):
            raise s.ctx.fail((*s.at, "pids_limit"), "differs from deploy.resources.limits.pids")
        s.set("pids_limit", pids, "deploy", "resources", "limits", "pids")
    if "devices" in reservations:
        where = (*at, "reservations", "devices")
        s.set("gpus", gpu_count(s, reservations["devices"], where, True), *where[2:])
    for toml, own_limit, own_reserve in _OWN_KEYS:
        limit = _amount(s, toml, limits, (*at, "limits"), own_limit)
        reserve = _amount(s, toml, reservations, (*at, "reservations"), own_reserve)
        _resource(s, toml, limit, reserve)


_OWN_KEYS = (("cpus", "cpus", None), ("memory", "mem_limit", "mem_reservation"))


def _amount(
    s: Service, toml: str, section: Any, at: tuple[Part, ...], legacy: str | None
) -> tuple[Any, float, tuple[Part, ...]] | None:
    """(TOML value, its amount, where) of one resource, from deploy.resources or the
    service's own key (`cpus`, `mem_limit`, `mem_reservation`); the two must agree."""
    found: list[tuple[Any, float, tuple[Part, ...]]] = []
    for node, where in ((section, (*at, toml)), (s.body, (*s.at, legacy or ""))):
        if legacy is None and node is s.body:
            continue
        if where[-1] in node:
            if toml == "cpus":
                value: Any = number(s.ctx, node[where[-1]], where)
                found.append((value, float(value), where))
            else:
                value = size(s.ctx, node[where[-1]], where)
                found.append((value, float(units.parse_size(value)), where))
    if len(found) == 2 and found[0][1] != found[1][1]:
        raise s.ctx.fail(found[1][2], f"differs from {'.'.join(map(str, found[0][2][2:]))}")
    return found[0] if found else None


def _resource(s: Service, toml: str, limit: Any, reserve: Any) -> None:
    if limit is None and reserve is None:
        return
    chosen = limit if limit is not None else reserve
    value, amount, where = chosen
    if limit is None:
        s.ctx.warn(where, "MiniDock also limits a task to what it reserves")
    elif reserve is not None and reserve[1] != amount:
        s.ctx.warn(
            reserve[2], f"MiniDock reserves what a task may use: the limit ({value}) is reserved"
        )
    s.set(toml, value, *where[2:])
