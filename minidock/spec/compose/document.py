"""A whole Compose file into the cluster spec's TOML document: the environment and
interpolation, the top-level keys (name, x-minidock, volumes, networks, secrets, configs),
profiles, then each service."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minidock.spec.compose.configs import declared_configs
from minidock.spec.compose.context import ComposeError, Context
from minidock.spec.compose.envfiles import EnvFileProblem, read_env_file
from minidock.spec.compose.interpolate import InterpolationError, Substitution
from minidock.spec.compose.runopts import to_toml
from minidock.spec.compose.service import translate_service
from minidock.spec.compose.service_base import TopLevel
from minidock.spec.compose.values import boolean, mapping, string_list, text
from minidock.spec.compose.yamldoc import Part, YAMLProblem, YDict, YList, parse

__all__ = ["read_document", "translate"]

_TOP_KEYS = ("version", "name", "services", "networks", "volumes", "secrets", "configs")
_TOP_REFUSED = {
    "include": "not supported: put the services in this file",
    "models": "not supported by MiniDock: remove it",
}
_OWN = "x-minidock"
MAX_DEPTH = 32  # as the TOML reader's: MiniDock's keys nest a handful of levels


def read_document(path: Path, display: str) -> Context:
    """The Compose file at `path` parsed and interpolated, in a fresh Context; raises
    ComposeError naming the key and line at fault."""
    raw = _read_text(path, display)
    try:
        source = parse(raw)
    except YAMLProblem as exc:
        line = None if exc.message.startswith("invalid YAML") else exc.line  # said already
        raise ComposeError(display, "", exc.message, line=line) from None
    base = os.path.dirname(os.path.abspath(path))
    lookup = _environment(base, display)
    ctx = Context(display, base, source, lookup)
    substitution = Substitution(lookup)
    ctx.doc = _interpolated(ctx, source, (), substitution)
    for name in dict.fromkeys(substitution.unset):
        ctx.warnings.append(f"{display}: variable {name} is not set: it is taken as empty")
    return ctx


def _read_text(path: Path, display: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ComposeError(display, "", "file not found") from None
    except UnicodeDecodeError as exc:
        raise ComposeError(
            display, "", f"not UTF-8 text (bad byte at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise ComposeError(display, "", f"cannot read file: {exc.strerror or exc}") from None


def _environment(base: str, display: str) -> dict[str, str]:
    """Variables for interpolation: the controller's environment over `.env` beside the file."""
    dotenv = os.path.join(base, ".env")
    found: dict[str, str] = {}
    if os.path.isfile(dotenv):
        try:
            found = read_env_file(dotenv, os.environ)
        except EnvFileProblem as exc:
            raise ComposeError(display, "", f".env: {exc}") from None
    return found | dict(os.environ)


def _interpolated(ctx: Context, node: Any, parts: tuple[Part, ...], sub: Substitution) -> Any:
    """`node` with every string value interpolated (keys are not), lines kept."""
    if len(parts) > MAX_DEPTH:
        raise ctx.fail(parts[:4], f"nested too deeply (at most {MAX_DEPTH} levels)")
    if isinstance(node, YDict):
        out = YDict()
        for key, value in node.items():
            out[key] = _interpolated(ctx, value, (*parts, key), sub)
        out.lines = dict(node.lines)
        return out
    if isinstance(node, YList):
        items = YList()
        items.extend(_interpolated(ctx, v, (*parts, i), sub) for i, v in enumerate(node))
        items.lines = list(node.lines)
        return items
    if isinstance(node, str):
        try:
            return sub(node)
        except InterpolationError as exc:
            raise ctx.fail(parts, str(exc)) from None
    return node


def translate(ctx: Context) -> dict[str, Any]:
    """The cluster spec's TOML document for the (interpolated) Compose file in `ctx`."""
    doc = ctx.doc
    for key in doc:
        if isinstance(key, str) and (key in _TOP_KEYS or key.startswith("x-")):
            continue
        if key in _TOP_REFUSED:
            raise ctx.fail((key,), _TOP_REFUSED[key])
        raise ctx.fail((key,), f"unknown Compose key {key!r} (allowed: {', '.join(_TOP_KEYS)})")
    out: dict[str, Any] = _own_top(ctx, mapping(ctx, doc.get(_OWN), (_OWN,)))
    for section in ("volumes", "networks", "secrets", "configs"):
        _legacy_external(ctx, section)
    top = TopLevel(
        volumes=_volumes(ctx),
        networks=_networks(ctx),
        secrets=_secrets(ctx),
        configs=declared_configs(ctx),
    )
    services = mapping(ctx, doc.get("services"), ("services",))
    top.skipped = _skipped(ctx, services)
    out["services"] = {}
    ctx.came_from(("services",), ("services",))
    for name, body in services.items():
        if name in top.skipped:
            continue
        ctx.came_from(("services", name), ("services", name))
        service = mapping(ctx, body, ("services", name))
        out["services"][name] = translate_service(ctx, name, service, top)
    return out


def _own_top(ctx: Context, own: YDict) -> dict[str, Any]:
    """cluster (`cluster_name`) and inventory (x-minidock.inventory; left out, the cluster
    file's rule picks one: spec.cluster.inventory_of) first, then the other top-level
    MiniDock keys of x-minidock (registries, ingress, ...) as they are, each key of theirs
    known by its Compose key for errors."""
    out: dict[str, Any] = {"cluster": cluster_name(ctx, own)}
    if "inventory" in own:
        out["inventory"] = text(ctx, own["inventory"], (_OWN, "inventory"))
        ctx.came_from(("inventory",), (_OWN, "inventory"))
    for key, value in own.items():
        if key in ("cluster", "inventory"):
            continue
        if key == "services":
            raise ctx.fail((_OWN, key), "give a service's MiniDock keys in its own x-minidock")
        out[key] = to_toml(ctx, value, (_OWN, key))
        ctx.came_from((key,), (_OWN, key))
        for sub in value if isinstance(value, YDict) else ():
            ctx.came_from((key, sub), (_OWN, key, sub))  # an error names the key it is about
    return out


def normalize_project_name(name: str) -> str:
    """A name as Compose normalises a project's (compose-go's NormalizeProjectName):
    lowercase, only [a-z0-9_-] kept, no leading '_' or '-'."""
    return "".join(re.findall(r"[a-z0-9_-]", name.lower())).lstrip("_-")


def cluster_name(ctx: Context, own: YDict) -> str:
    """x-minidock.cluster as it is; else `name`, else COMPOSE_PROJECT_NAME (the
    environment or `.env`), else the file's directory's name, as Compose names a project:
    `name` and the directory normalised, the variable taken only when already normal."""
    if "cluster" in own:
        ctx.came_from(("cluster",), (_OWN, "cluster"))
        return text(ctx, own["cluster"], (_OWN, "cluster"))
    if ctx.doc.get("name") not in (None, ""):
        ctx.came_from(("cluster",), ("name",))
        given = text(ctx, ctx.doc["name"], ("name",))
        name = normalize_project_name(given)
        if name != given:
            ctx.warn(("name",), f"taken as {name!r}, normalised as Compose normalises it")
        if name:
            return name
        raise ctx.fail(("name",), f"{given!r} has no letter or digit to name the cluster")
    variable = ctx.lookup.get("COMPOSE_PROJECT_NAME", "")
    if variable:
        if normalize_project_name(variable) != variable:
            raise ctx.fail(
                (),
                f"COMPOSE_PROJECT_NAME {variable!r} is not a project name: lowercase letters, "
                "digits, '_' and '-', starting with a letter or digit",
            )
        return variable
    name = normalize_project_name(os.path.basename(ctx.base))
    if not name:
        raise ctx.fail(
            (),
            f"no name: the directory {os.path.basename(ctx.base)!r} gives no project name; "
            "set name (the cluster)",
        )
    return name


def _legacy_external(ctx: Context, section: str) -> None:
    """`external: {name: X}` (Compose file format 2 and 3) read as compose-go reads it:
    `external: true` and `name: X`, with a warning; beside a different `name`, an error."""
    for name, body in mapping(ctx, ctx.doc.get(section), (section,)).items():
        at: tuple[Part, ...] = (section, name)
        options = mapping(ctx, body, at)
        external = options.get("external")
        if not isinstance(external, YDict):
            continue
        if "name" in external:
            given = text(ctx, external["name"], (*at, "external", "name"))
            if "name" in options and options["name"] != given:
                raise ctx.fail(
                    (*at, "external", "name"), "name and external.name conflict: give only name"
                )
            ctx.warn((*at, "external", "name"), "deprecated: read as name and external: true")
            options["name"] = given
            options.lines.setdefault("name", options.lines["external"])
        options["external"] = True


def _volumes(ctx: Context) -> dict[str, YDict]:
    """The declared named volumes: MiniDock's own, one per slot, on the local driver."""
    declared: dict[str, YDict] = {}
    for name, body in mapping(ctx, ctx.doc.get("volumes"), ("volumes",)).items():
        at: tuple[Part, ...] = ("volumes", name)
        options = mapping(ctx, body, at)
        for key, value in options.items():
            where = (*at, key)
            if key == "labels":
                ctx.warn(where, "ignored: MiniDock labels its volumes itself")
            elif str(key).startswith("x-") or (key == "driver" and value == "local"):
                continue
            elif key != "external" or boolean(ctx, value, where):
                raise ctx.fail(where, _VOLUME_REFUSALS.get(key, "not supported: remove it"))
        declared[name] = options
    return declared


_VOLUME_REFUSALS = {
    "external": "an existing volume cannot be used: MiniDock makes a volume per slot on its "
    "host (CLUSTER_SERVICE.SLOT_NAME); remove external",
    "name": "MiniDock names volumes per slot (CLUSTER_SERVICE.SLOT_NAME): remove name",
    "driver": "only the local driver is supported: remove driver",
    "driver_opts": "volume driver options are not supported: remove them",
}


def _networks(ctx: Context) -> dict[str, str]:
    """Each declared network: the name joined for an external one, else "" (the cluster's
    own network, which MiniDock creates; it does not create Compose's networks)."""
    declared: dict[str, str] = {}
    for name, body in mapping(ctx, ctx.doc.get("networks"), ("networks",)).items():
        at: tuple[Part, ...] = ("networks", name)
        options = mapping(ctx, body, at)
        if "external" in options and boolean(ctx, options["external"], (*at, "external")):
            declared[name] = text(ctx, options.get("name", name), (*at, "name"))
            continue
        if "internal" in options and boolean(ctx, options["internal"], (*at, "internal")):
            raise ctx.fail(
                (*at, "internal"),
                "internal networks are not supported: tasks are on the cluster's network, "
                "which reaches outside",
            )
        declared[name] = ""
        if name == "default" and any(not str(key).startswith("x-") for key in options):
            ctx.warn(
                at,
                "options ignored: the default network is the cluster's network "
                "(minidock-CLUSTER), which MiniDock creates itself; use external: true to join "
                "a network that exists on the hosts",
            )
        elif name != "default":
            ctx.warn(
                at,
                "not created: its services are on the cluster's network (minidock-CLUSTER), "
                "shared with every service of the cluster on a host; use external: true to "
                "join a network that exists on the hosts",
            )
    return declared


def _secrets(ctx: Context) -> dict[str, dict[str, str]]:
    """Each declared secret as a TOML secret source: {file = ...} or {env = ...}."""
    declared: dict[str, dict[str, str]] = {}
    for name, body in mapping(ctx, ctx.doc.get("secrets"), ("secrets",)).items():
        at: tuple[Part, ...] = ("secrets", name)
        options = mapping(ctx, body, at)
        if "name" in options:
            ctx.warn((*at, "name"), "ignored: MiniDock has no secret store to name it in")
        for key in options:
            if key not in ("file", "environment", "name") and not str(key).startswith("x-"):
                raise ctx.fail(
                    (*at, key),
                    "MiniDock has no secret store: give the secret's file or environment",
                )
        if "file" in options:
            declared[name] = {"file": text(ctx, options["file"], (*at, "file"))}
        elif "environment" in options:
            declared[name] = {"env": text(ctx, options["environment"], (*at, "environment"))}
        else:
            raise ctx.fail(at, "give the secret's file or environment")
    return declared


def _skipped(ctx: Context, services: Mapping[str, Any]) -> set[str]:
    """Services whose profiles are all inactive (COMPOSE_PROFILES), as Compose leaves them."""
    active = {p.strip() for p in ctx.lookup.get("COMPOSE_PROFILES", "").split(",") if p.strip()}
    skipped: set[str] = set()
    for name, body in services.items():
        if isinstance(body, YDict) and "profiles" in body:
            profiles = string_list(ctx, body["profiles"], ("services", name, "profiles"))
            if "*" not in active and not active.intersection(profiles):
                skipped.add(name)
    return skipped
