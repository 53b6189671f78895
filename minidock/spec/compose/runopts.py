"""What a service runs: image, command, environment, labels and the docker run options;
and `x-minidock`, MiniDock's own keys, merged over what the Compose keys gave."""

from __future__ import annotations

import os
import re
from typing import Any

from minidock.spec.compose.build import translate_build
from minidock.spec.compose.context import describe
from minidock.spec.compose.deploy import gpu_count
from minidock.spec.compose.envfiles import EnvFileProblem, read_env_file
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import (
    boolean,
    duration,
    integer,
    items,
    key_values,
    mapping,
    size,
    split_command,
    string_list,
    text,
)
from minidock.spec.compose.yamldoc import Part, YDict, YList
from minidock.spec.reading import compile_pattern, shipped_schema

__all__ = ["commands", "environment", "expose", "extension", "image", "labels", "links"]


def image(s: Service) -> None:
    """`image` (required unless `build` is given: minidock.spec.compose.build); `pull_policy`."""
    if "build" in s.body:
        translate_build(s)
        return
    if "image" not in s.body:
        raise s.ctx.fail(s.at, "missing image: set the image its tasks run, or build")
    s.set("image", text(s.ctx, s.body["image"], (*s.at, "image")), "image")
    policy = s.body.get("pull_policy")
    where = (*s.at, "pull_policy")
    if policy == "build":
        raise s.ctx.fail(where, "pull_policy: build needs a build section: add build, or remove it")
    if policy not in (None, "missing", "if_not_present"):
        s.ctx.warn(
            where, "ignored: a host pulls an image only when it lacks it; give each build a new tag"
        )


def commands(s: Service) -> None:
    """`command` and `entrypoint`: lists, or strings split into words as a shell would."""
    for key in ("command", "entrypoint"):
        if s.body.get(key) is not None:
            s.set(key, split_command(s.ctx, s.body[key], (*s.at, key)), key)


def environment(s: Service) -> None:
    """`env_file` (in order, later files winning), then `environment` over them; a
    variable given without a value takes the controller's (dropped when it has none)."""
    env: dict[str, str] = {}
    origin: dict[str, tuple[Part, ...]] = {}
    if "env_file" in s.body:
        for where, path in _env_files(s):
            try:
                values = read_env_file(path, s.ctx.lookup, _env_names())
            except EnvFileProblem as exc:
                raise s.ctx.fail(where, str(exc)) from None
            env |= values
            origin |= dict.fromkeys(values, where)
    if "environment" in s.body:
        at = (*s.at, "environment")
        for key, (value, part) in key_values(s.ctx, s.body["environment"], at).items():
            if value is None:
                if key not in s.ctx.lookup:
                    env.pop(key, None)
                    continue
                value = s.ctx.lookup[key]
            env[key] = value
            origin[key] = (*at, part)
    if env:
        s.set("env", env, *origin[next(iter(env))][2:])
        for key, where in origin.items():
            s.ctx.came_from(("services", s.name, "env", key), where)


def _env_names() -> re.Pattern[str]:
    """What the cluster schema takes as an environment variable's name."""
    env = shipped_schema("cluster")["$defs"]["service"]["properties"]["env"]
    return compile_pattern(env["propertyNames"]["pattern"])


def _env_files(s: Service) -> list[tuple[tuple[Part, ...], str]]:
    """(where, absolute path) of each env_file that is there or required."""
    at = (*s.at, "env_file")
    value = s.body["env_file"]
    if not isinstance(value, str | YList):
        raise s.ctx.fail(at, f"expected a path or a list, got {describe(value)}")
    entries = [(at, value)] if isinstance(value, str) else [((*at, i), v) for i, v in items(value)]
    found: list[tuple[tuple[Part, ...], str]] = []
    for where, entry in entries:
        required = True
        if isinstance(entry, YDict):
            s.known_keys(entry, where, ("path", "required", "format"))
            if "format" in entry:
                raise s.ctx.fail((*where, "format"), "only the default dotenv format is read")
            required = boolean(s.ctx, entry.get("required", True), (*where, "required"))
            entry = entry.get("path")
        path = s.ctx.path(text(s.ctx, entry, where))
        if required or os.path.exists(path):
            found.append((where, path))
    return found


def expose(s: Service) -> None:
    """`expose`: nothing to do on one host (tasks reach each other on any port); across
    hosts, MiniDock's own `x-minidock: {expose: [PORT]}` (docs/discovery.md)."""
    if "expose" in s.body:
        s.ctx.warn(
            (*s.at, "expose"),
            "ignored: tasks on one host reach each other by service name on any port; "
            "to reach it by name from every host, give x-minidock: {expose: [PORT, ...]}",
        )


def labels(s: Service) -> None:
    """`labels` and `deploy.labels`, both as container labels."""
    found: dict[str, str] = {}
    for parts in ((*s.at, "labels"), (*s.at, "deploy", "labels")):
        node = s.body if len(parts) == 3 else s.section("deploy")
        if parts[-1] not in node:
            continue
        for key, (value, part) in key_values(s.ctx, node[parts[-1]], parts).items():
            value = "" if value is None else value
            if found.get(key, value) != value:
                raise s.ctx.fail((*parts, part), f"label {key!r} is also set to another value")
            found[key] = value
            s.ctx.came_from(("services", s.name, "labels", key), (*parts, part))
    if found:
        s.out["labels"] = found


def run_options(s: Service) -> None:
    """The docker run options with a TOML key of the same meaning."""
    at, body = s.at, s.body
    for key, toml in (("user", "user"), ("working_dir", "workdir"), ("stop_signal", "stop_signal")):
        if key in body:
            s.set(toml, text(s.ctx, body[key], (*at, key)), key)
    for key in ("cap_add", "cap_drop"):
        if key in body:
            s.set(key, string_list(s.ctx, body[key], (*at, key)), key)
    for key in ("init", "read_only"):
        if key in body:
            s.set(key, boolean(s.ctx, body[key], (*at, key)), key)
    if "stop_grace_period" in body:
        grace = duration(s.ctx, body["stop_grace_period"], (*at, "stop_grace_period"))
        s.set("stop_grace_period", grace, "stop_grace_period")
    # an empty server (`dns: ${UNSET}`) is left out, as compose-go omits it: no dns
    if "dns" in body and (
        servers := [d for d in string_list(s.ctx, body["dns"], (*at, "dns")) if d]
    ):
        s.set("dns", servers, "dns")
    if "sysctls" in body:
        s.set("sysctls", _sysctls(s), "sysctls")
    if "ulimits" in body:
        s.set("ulimits", _ulimits(s), "ulimits")
    if "logging" in body and (log := _logging(s)):
        s.set("log", log, "logging")
    if "extra_hosts" in body:
        s.set("extra_hosts", _extra_hosts(s), "extra_hosts")
    _devices_and_limits(s)


def _devices_and_limits(s: Service) -> None:
    """privileged, devices, gpus, tmpfs, shm_size and pids_limit: docker run's own."""
    at, body = s.at, s.body
    if "privileged" in body:
        s.set("privileged", boolean(s.ctx, body["privileged"], (*at, "privileged")), "privileged")
    if "devices" in body:
        s.set("devices", [_device(s, i, d) for i, d in items(body["devices"])], "devices")
    if "gpus" in body:
        s.set("gpus", gpu_count(s, body["gpus"], (*at, "gpus"), False), "gpus")
    if "tmpfs" in body:
        given = body["tmpfs"]
        mounts = [given] if isinstance(given, str) else given
        s.set("tmpfs", string_list(s.ctx, mounts, (*at, "tmpfs")), "tmpfs")
    if "shm_size" in body:
        s.set("shm_size", size(s.ctx, body["shm_size"], (*at, "shm_size")), "shm_size")
    if "pids_limit" in body:
        limit = integer(s.ctx, body["pids_limit"], (*at, "pids_limit"))
        if limit > 0:  # -1 or 0: no limit, as Docker reads it
            s.set("pids_limit", limit, "pids_limit")


def _device(s: Service, i: int, value: Any) -> str:
    """One `devices` entry: HOST[:CONTAINER[:PERMISSIONS]], or the long form's
    source/target/permissions."""
    where = (*s.at, "devices", i)
    if isinstance(value, YDict):
        s.known_keys(value, where, ("source", "target", "permissions"))
        parts = [text(s.ctx, value.get(k), (*where, k)) for k in ("source", "target") if k in value]
        if "permissions" in value:
            parts.append(text(s.ctx, value["permissions"], (*where, "permissions")))
        return ":".join(parts)
    return text(s.ctx, value, where)


def _ulimits(s: Service) -> dict[str, Any]:
    at = (*s.at, "ulimits")
    found: dict[str, Any] = {}
    for name, value in mapping(s.ctx, s.body["ulimits"], at).items():
        if isinstance(value, YDict):
            s.known_keys(value, (*at, name), ("soft", "hard"))
            found[name] = {
                k: integer(s.ctx, value.get(k), (*at, name, k)) for k in ("soft", "hard")
            }
        else:
            found[name] = integer(s.ctx, value, (*at, name))
    return found


def _logging(s: Service) -> dict[str, Any]:
    at = (*s.at, "logging")
    body = mapping(s.ctx, s.body["logging"], at)
    s.known_keys(body, at, ("driver", "options"))
    log: dict[str, Any] = {}
    if "driver" in body:  # left out: the engine's default driver, as Compose leaves it
        log["driver"] = text(s.ctx, body["driver"], (*at, "driver"))
    options = mapping(s.ctx, body.get("options"), (*at, "options"))
    if options:
        log["options"] = {k: text(s.ctx, v, (*at, "options", k)) for k, v in options.items()}
    return log


def _extra_hosts(s: Service) -> dict[str, str | list[str]]:
    """NAME: ADDRESS lines for /etc/hosts, as compose-go reads them: a list of `name=ip` or
    `name:ip` (`=` tried first; `ip1,ip2` is two addresses; a name given twice keeps both
    addresses, in order), or a map of a name to an address or a list of them."""
    at = (*s.at, "extra_hosts")
    value = s.body["extra_hosts"]
    pairs: list[tuple[str, Any, tuple[Part, ...]]] = []
    if isinstance(value, YList):
        for i, item in items(value):
            entry = text(s.ctx, item, (*at, i))
            sep = "=" if "=" in entry else ":"
            name, found_sep, address = entry.partition(sep)
            if not found_sep:
                raise s.ctx.fail((*at, i), f"{entry!r} has no address: write NAME=ADDRESS")
            pairs.append((name, address.split(","), (*at, i)))
    else:
        pairs = [(k, v, (*at, k)) for k, v in mapping(s.ctx, value, at).items()]
    found: dict[str, list[str]] = {}
    for name, address, where in pairs:
        given = address if isinstance(address, list) else [address]
        for one in given:
            plain = text(s.ctx, one, where).removeprefix("[").removesuffix("]")
            found.setdefault(name, []).append(plain)
        s.ctx.came_from(("services", s.name, "extra_hosts", name), where)
    return {name: ips[0] if len(ips) == 1 else ips for name, ips in found.items()}


def _sysctls(s: Service) -> dict[str, str]:
    """`sysctls`: a map or a `KEY=VALUE` list, values as strings (`--sysctl KEY=VALUE`)."""
    at = (*s.at, "sysctls")
    found: dict[str, str] = {}
    for key, (value, part) in key_values(s.ctx, s.body["sysctls"], at).items():
        if value is None:
            raise s.ctx.fail((*at, part), f"sysctl {key} has no value: write {key}=VALUE")
        found[key] = value
    return found


def links(s: Service) -> None:
    """`links`: service names resolve anyway (on one host); an alias cannot be given."""
    if "links" not in s.body:
        return
    at = (*s.at, "links")
    for i, link in enumerate(string_list(s.ctx, s.body["links"], at)):
        target, _, alias = link.partition(":")
        if alias and alias != target:
            raise s.ctx.fail(
                (*at, i), f"link aliases are not supported: reach {target!r} by its own name"
            )
    s.ctx.warn(at, "ignored: tasks on one host reach each other by service name")


def extension(s: Service) -> None:
    """`x-minidock`: MiniDock's own keys, merged over the table (mappings key by key);
    a string under `secrets` names a secret of the top-level secrets."""
    at = (*s.at, "x-minidock")
    own = mapping(s.ctx, s.body.get("x-minidock"), at)
    for key, value in own.items():
        plain = to_toml(s.ctx, value, (*at, key))
        if key == "secrets" and isinstance(plain, dict):
            plain = {k: _secret_source(s, v, (*at, key, k)) for k, v in plain.items()}
        old = s.out.get(key)
        s.out[key] = (
            {**old, **plain} if isinstance(old, dict) and isinstance(plain, dict) else plain
        )
        s.ctx.origins[("services", s.name, key)] = (*at, key)
        if isinstance(plain, dict):
            for sub in plain:
                s.ctx.origins[("services", s.name, key, sub)] = (*at, key, sub)


def _secret_source(s: Service, value: Any, where: tuple[Part, ...]) -> Any:
    if not isinstance(value, str):
        return value
    if value not in s.top.secrets:
        raise s.ctx.fail(where, f"secret {value!r} is not declared under the top-level secrets")
    return dict(s.top.secrets[value])


def to_toml(ctx: Any, value: Any, where: tuple[Part, ...]) -> Any:
    """A YAML value as plain TOML data; null has no TOML spelling."""
    if value is None:
        raise ctx.fail(where, "null has no meaning here: give a value or remove the key")
    if isinstance(value, dict):
        return {k: to_toml(ctx, v, (*where, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [to_toml(ctx, v, (*where, i)) for i, v in enumerate(value)]
    return value
