"""Compose `configs`: the top-level declarations (`file`, `content`, `environment`) as the
cluster spec's config sources, and a service's `configs` (short and long syntax) as its
`configs` table, keyed by the path in the task (docs/configs.md)."""

from __future__ import annotations

from typing import Any

from minidock.spec.compose.context import Context, describe
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import boolean, mapping, text
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = ["declared_configs", "service_configs"]

_SOURCES = ("file", "content", "environment")
# every config is a read-only file, readable by every user: 0444, read as octal or not
_HONOURED_MODES = (0o444, 444)


def declared_configs(ctx: Context) -> dict[str, dict[str, str]]:
    """Each top-level config as a TOML config source: {file = ...} or {content = ...}
    (`environment`: the variable's value, read now from the controller's environment and
    `.env`, as Compose reads it)."""
    declared: dict[str, dict[str, str]] = {}
    for name, body in mapping(ctx, ctx.doc.get("configs"), ("configs",)).items():
        at: tuple[Part, ...] = ("configs", name)
        options = mapping(ctx, body, at)
        for key in options:
            if key == "name":
                ctx.warn((*at, key), "ignored: MiniDock has no config store to name it in")
            elif key == "external" and not boolean(ctx, options[key], (*at, key)):
                continue
            elif key not in _SOURCES and not str(key).startswith("x-"):
                raise ctx.fail(
                    (*at, key),
                    "MiniDock has no config store: give the config's file, content or environment",
                )
        given = [key for key in _SOURCES if key in options]
        if len(given) != 1:
            raise ctx.fail(at, "give exactly one of the config's file, content or environment")
        value = text(ctx, options[given[0]], (*at, given[0]))
        if given[0] == "environment":
            if value not in ctx.lookup:
                raise ctx.fail((*at, "environment"), f"{value} is not set in the environment")
            declared[name] = {"content": ctx.lookup[value]}
        else:
            declared[name] = {given[0]: value}
    return declared


def service_configs(s: Service) -> None:
    """A service's `configs` (`- NAME`, or `- {source, target, uid, gid, mode}`): each
    top-level config it names at its target (`/NAME` by default, as Docker mounts it)."""
    if "configs" not in s.body:
        return
    at = (*s.at, "configs")
    value = s.body["configs"]
    if not isinstance(value, YList):
        raise s.ctx.fail(at, f"expected a list, got {describe(value)}")
    table: dict[str, dict[str, str]] = s.out.get("configs", {})  # read-only bind mounts
    for i, item in enumerate(value):
        source, target = _one(s, item, (*at, i))
        if target in table:
            raise s.ctx.fail((*at, i), f"{target} is given twice: one config or mount per path")
        table[target] = s.top.configs[source]
        s.ctx.came_from(("services", s.name, "configs", target), (*at, i))
    s.set("configs", table, "configs")


def _one(s: Service, item: Any, where: tuple[Part, ...]) -> tuple[str, str]:
    """(source, target) of one entry; uid, gid and a mode other than 0444 are warned of."""
    if isinstance(item, YDict):
        s.known_keys(item, where, ("source", "target", "uid", "gid", "mode"))
        if "source" not in item:
            raise s.ctx.fail(where, "missing source: name a top-level config")
        source = text(s.ctx, item["source"], (*where, "source"))
        target = text(s.ctx, item.get("target", f"/{source}"), (*where, "target"))
        for key in ("uid", "gid"):
            if key in item:
                s.ctx.warn((*where, key), "ignored: a config belongs to the hosts' SSH user")
        if "mode" in item and item["mode"] not in _HONOURED_MODES:
            s.ctx.warn(
                (*where, "mode"), "ignored: a config is read-only, mode 0444 (readable by all)"
            )
    else:
        source = text(s.ctx, item, where)
        target = f"/{source}"
    if source not in s.top.configs:
        known = ", ".join(sorted(s.top.configs)) or "none"
        raise s.ctx.fail(where, f"unknown config {source!r} (declared at the top: {known})")
    return source, target
