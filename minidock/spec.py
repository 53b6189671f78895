"""Reading the inventory and cluster files into the model, or one clear error.

Each file goes through three stages, and the first problem found stops it:
TOML parse (with line and column), the JSON Schema shipped in `minidock/schemas/`
(errors mapped to a key path and a human message, in document order), then semantic
checks the schema cannot express (duplicate hosts, unknown or cyclic dependencies,
port ranges, backoff bounds). Every problem is a `SpecError` whose `str()` is one line:
`FILE: KEY.PATH: message`. This module is the file adapter: it reads files, nothing else.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import ipaddress
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time
from graphlib import CycleError, TopologicalSorter
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from jsonschema import validators  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from minidock import sshconfig, units
from minidock.model import (
    Cluster,
    Constraint,
    HealthCheck,
    Host,
    Inventory,
    LogConfig,
    PortMapping,
    RegistryAuth,
    RestartPolicy,
    Service,
    Ulimit,
    UpdatePolicy,
    Volume,
    cluster_network,
    image_registry,
)

__all__ = ["SpecError", "load", "load_cluster", "load_inventory", "topo_order"]

Part = str | int
StrPath = str | os.PathLike[str]
_Fail = Callable[[Sequence[Part], str], "SpecError"]


class SpecError(Exception):
    """A problem in an inventory or cluster file, located by file and dotted key path.

    `path` is like `services.web.update.parallelism` or `hosts[1].name` ("" for the whole
    file); `line` and `column` are set for malformed TOML. `str()` is one line.
    """

    def __init__(
        self,
        file: str,
        path: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(file, path, message)
        self.file = file
        self.path = path
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        return " ".join(f"{where}: {self.message}".splitlines())


# -- public entry points ----------------------------------------------------------------------
def load_inventory(path: StrPath) -> Inventory:
    """Read, validate and convert an inventory file; host paths resolve beside it."""
    return _load_inventory(Path(path), os.fspath(path))


def load_cluster(path: StrPath) -> Cluster:
    """Read, validate and convert a cluster file; the inventory it names is not read."""
    return _load_cluster(Path(path), os.fspath(path))[0]


def load(path: StrPath) -> tuple[Cluster, Inventory]:
    """Load a cluster file and the inventory it names; errors name the file at fault."""
    display = os.fspath(path)
    cluster, inventory_display = _load_cluster(Path(path), display)
    target = Path(cluster.inventory_path)
    if not target.exists():
        raise SpecError(display, "inventory", f"inventory file not found: {inventory_display}")
    if not target.is_file():
        raise SpecError(display, "inventory", f"inventory is not a file: {inventory_display}")
    return cluster, _load_inventory(target, inventory_display)


def topo_order(services: Sequence[Service]) -> list[str]:
    """Service names with every dependency before its dependents, else in the given order.

    Names in `depends_on` that are not among `services` are ignored; a cycle raises
    graphlib.CycleError (load_cluster never returns one).
    """
    index = {s.name: i for i, s in enumerate(services)}
    sorter = TopologicalSorter({s.name: [d for d in s.depends_on if d in index] for s in services})
    sorter.prepare()
    ready = [(index[n], n) for n in sorter.get_ready()]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        sorter.done(name)
        for n in sorter.get_ready():
            heapq.heappush(ready, (index[n], n))
    return order


# -- reading ----------------------------------------------------------------------------------
_TOML_AT = re.compile(
    r"^(?P<msg>.*) \((?:at line (?P<line>\d+), column (?P<col>\d+)|at end of document)\)$"
)


def _read_toml(path: Path, display: str) -> dict[str, Any]:
    """The file parsed as TOML, or a SpecError naming the file (and line, column)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(display, "", "file not found") from None
    except OSError as exc:
        raise SpecError(display, "", f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(display, "", f"not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_AT.match(str(exc))
        if found is None:
            raise SpecError(display, "", f"invalid TOML: {exc}") from None
        msg = found["msg"][:1].lower() + found["msg"][1:]
        if msg.startswith("cannot overwrite a value"):
            msg += " (is a key set twice?)"
        if found["line"] is None:
            raise SpecError(display, "", f"invalid TOML at end of document: {msg}") from None
        line, col = int(found["line"]), int(found["col"])
        raise SpecError(
            display,
            "",
            f"invalid TOML at line {line}, column {col}: {msg}",
            line=line,
            column=col,
        ) from None


def _resolve(base_dir: str, value: str) -> str:
    """`value` with ~ expanded, made absolute relative to `base_dir`."""
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))


# -- JSON Schema ------------------------------------------------------------------------------
@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    """Compile a schema pattern with ECMA-262 meaning: `$` is the very end of the string.

    (Python's `$` also matches before a final newline, which would let "web\\n" pass as a
    name.) Schema patterns therefore use `$` only as an anchor.
    """
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _pattern_keyword(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _compile(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(validators.Draft202012Validator, {"pattern": _pattern_keyword})


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema `kind` ("inventory" or "cluster")."""
    text = (resources.files("minidock") / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator(kind: str) -> Any:
    return _Validator(_schema(kind))


@dataclass(frozen=True, order=True)
class _Issue:
    """One schema problem; issues sort into the order they are reported in."""

    position: tuple[int, ...]
    path: tuple[Part, ...] = field(compare=False)
    message: str = field(compare=False)


# Where object-level problems sort among an object's children: unknown and badly named
# keys first, then missing keys, then the values in file order.
_KEY_ISSUE, _MISSING_ISSUE = -2, -1


def _check_schema(kind: str, doc: dict[str, Any], display: str) -> None:
    """Raise the first JSON Schema problem in `doc`, in document order."""
    issues = [i for e in _validator(kind).iter_errors(doc) for i in _issues(e, doc)]
    issues += [
        _Issue(_position(doc, parts), parts, f"must be a finite number, got {_show(value)}")
        for parts, value in _walk(doc, ())
        if isinstance(value, float) and not math.isfinite(value)
    ]
    if issues:
        first = min(issues)
        raise SpecError(display, _render(first.path), first.message)


def _walk(node: Any, parts: tuple[Part, ...]) -> Iterator[tuple[tuple[Part, ...], Any]]:
    """Every value in a parsed document with its key path."""
    yield parts, node
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _walk(child, (*parts, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _walk(child, (*parts, index))


def _position(doc: Any, parts: Iterable[Part]) -> tuple[int, ...]:
    """The file-order coordinates of the value at `parts` (TOML tables keep their order)."""
    pos: list[int] = []
    node = doc
    for part in parts:
        if isinstance(node, dict) and part in node:
            pos.append(list(node).index(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            pos.append(part)
            node = node[part]
        else:
            break
    return tuple(pos)


def _issues(error: ValidationError, doc: dict[str, Any]) -> list[_Issue]:
    parts: tuple[Part, ...] = tuple(error.absolute_path)
    here = _position(doc, parts)
    keyword: str = error.validator
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    value: Any = error.instance
    if keyword == "additionalProperties" and isinstance(value, dict):
        allowed = list(schema.get("properties", {}))
        return [
            _Issue((*here, _KEY_ISSUE, i), parts, _unknown_key(key, allowed))
            for i, key in enumerate(value)
            if key not in allowed
        ]
    if keyword == "required" and isinstance(value, dict):
        missing = [k for k in error.validator_value if k not in value]
        return [_Issue((*here, _MISSING_ISSUE), parts, f"missing required key {missing[0]!r}")]
    if "propertyNames" in error.absolute_schema_path:
        parent = _value_at(doc, parts)
        index = list(parent).index(value) if isinstance(parent, dict) and value in parent else 0
        return [_Issue((*here, _KEY_ISSUE, index), parts, _key_message(error, parts))]
    return [_Issue(here, parts, _value_message(error, parts))]


def _value_at(doc: Any, parts: Iterable[Part]) -> Any:
    node = doc
    for part in parts:
        node = node[part]
    return node


def _unknown_key(key: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r} (allowed: {', '.join(allowed)})"


def _key_message(error: ValidationError, parts: tuple[Part, ...]) -> str:
    """Message for a table key that fails its `propertyNames` schema."""
    key: str = error.instance
    kind = error.schema.get("title") if isinstance(error.schema, Mapping) else None
    if kind == "name":
        noun = "service name" if parts == ("services",) else "name"
        return _name_message(error, noun)
    if kind == "env name":
        return f"invalid environment variable name {_show(key)}: {_ENV_NAME_HINT}"
    if kind == "label key":
        return f"invalid label key {_show(key)}: {_LABEL_KEY_HINT}"
    if kind == "ulimit name":
        return _unknown_key(key, error.schema["enum"]).replace("key", "ulimit", 1)
    if kind in ("hostname", "registry"):
        return _pattern_message(kind, key, "")
    return f"invalid key {_show(key)}"


_ENV_NAME_HINT = "use letters, digits and '_', not starting with a digit"
_NAME_HINT = "use lowercase letters, digits, '_', '.' and '-', starting with a letter or digit"
_LABEL_KEY_HINT = "use letters, digits, '_', '.', '/' and '-', starting with a letter or digit"
_IMAGE_HINT = "use [registry[:port]/]name[:tag][@digest] with a lowercase name"
_KIND_WORDS = {
    "duration": "a duration like '2s' or a number of seconds",
    "size": "a size like '256MiB' or a number of bytes",
    "port mapping": "a string like '8080:80' or '53:53/udp'",
    "volume": "a string like 'pgdata:/var/lib/postgresql/data' or '/srv/conf:/etc/app:ro'",
    "constraint": "a string like 'zone == a'",
    "image": "an image reference string like 'web:5'",
}
_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "a table",
}


def _name_noun(parts: tuple[Part, ...]) -> str:
    if parts == ("cluster",):
        return "cluster name"
    if parts[:1] == ("hosts",):
        return "host name"
    if "depends_on" in parts:
        return "service name"
    return "name"


def _name_message(error: ValidationError, noun: str) -> str:
    value = error.instance
    if error.validator == "maxLength":
        return f"invalid {noun} {_show(value)}: at most {error.validator_value} characters"
    return f"invalid {noun} {_show(value)}: {_NAME_HINT}"


def _value_message(error: ValidationError, parts: tuple[Part, ...]) -> str:
    """Message for a value that fails a schema keyword."""
    keyword: str = error.validator
    limit: Any = error.validator_value
    value: Any = error.instance
    kind = error.schema.get("title") if isinstance(error.schema, Mapping) else None
    if _secret_bearing(parts):
        return _secret_message(kind, keyword, limit, value)
    if keyword == "type":
        message = _type_message(kind, limit, value)
        if parts == ("hosts",) and isinstance(value, dict):
            message += " (write one [[hosts]] table per host)"
        return message
    if kind in ("duration", "size") and keyword in ("pattern", "minimum"):
        try:
            (units.parse_duration if kind == "duration" else units.parse_size)(value)
        except ValueError as exc:
            return str(exc)
    if kind == "name" and keyword in ("pattern", "maxLength"):
        return _name_message(error, _name_noun(parts))
    if keyword == "pattern":
        return _pattern_message(kind, value, limit)
    if keyword == "enum":
        options = ", ".join(_show(o) for o in limit)
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(value, [str(o) for o in limit], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"expected one of {options}, got {_show(value)}{hint}"
    if keyword == "minimum":
        return f"must be at least {_show(limit)}, got {_show(value)}"
    if keyword == "maximum":
        return f"must be at most {_show(limit)}, got {_show(value)}"
    if keyword == "exclusiveMinimum":
        return f"must be greater than {_show(limit)}, got {_show(value)}"
    if keyword in ("minItems", "minLength") and limit == 1:
        return "must not be empty"
    if keyword == "minItems":
        return f"must have at least {limit} items"
    if keyword == "maxLength":
        return f"too long: at most {limit} characters"
    if keyword == "uniqueItems" and isinstance(value, list):
        dup = next((v for i, v in enumerate(value) if v in value[:i]), None)
        return f"{_show(dup)} is listed twice"
    return str(error.message)


def _secret_bearing(parts: tuple[Part, ...]) -> bool:
    """Under services.NAME.env or .secrets, or a registry's password: a value there may be
    a secret, never echoed."""
    if len(parts) >= 3 and parts[0] == "registries" and parts[2] == "password":
        return True
    return len(parts) >= 4 and parts[0] == "services" and parts[2] in ("env", "secrets")


def _secret_message(kind: str | None, keyword: str, limit: Any, value: Any) -> str:
    """A message about an env or secret value that names its type, never the value."""
    if kind == "secret source" and keyword in ("minProperties", "maxProperties", "type"):
        return 'expected a table with one of file = "path" or env = "NAME"'
    if keyword == "type":
        types = [limit] if isinstance(limit, str) else list(limit)
        want = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        if isinstance(value, list | dict):
            got = _show(value)  # "an array", "a table": no value shown
        else:
            kind_of = _describe(value).split()[0]
            got = f"{'an' if kind_of[0] in 'aeiou' else 'a'} {kind_of}"
        quote = " (write it in quotes)" if types == ["string"] else ""
        return f"expected {want}, got {got}{quote}"
    if kind == "env value" and keyword == "pattern":
        return _pattern_message(kind, "", "")
    if kind == "env name":
        return f"invalid environment variable name: {_ENV_NAME_HINT}"
    return f"invalid value ({keyword})"


def _type_message(kind: str | None, expected: str | list[str], value: Any) -> str:
    types = [expected] if isinstance(expected, str) else list(expected)
    want = _KIND_WORDS.get(kind or "") or " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    message = f"expected {want}, got {_describe(value)}"
    if kind not in _KIND_WORDS and types == ["string"] and isinstance(value, int | float):
        message += f' (write it in quotes: "{_show(value)}")'
    return message


def _pattern_message(kind: str | None, value: str, pattern: str) -> str:
    shown = _show(value)
    if kind == "image":
        return f"invalid image reference {shown}: {_IMAGE_HINT}"
    if kind == "volume":
        return (
            f"invalid volume {shown}: use 'NAME:/container/path' or "
            "'/host/path:/container/path', optionally ':ro'"
        )
    if kind == "port mapping":
        return f"invalid port mapping {shown}: use 'HOST:CONTAINER' or 'HOST:CONTAINER/udp'"
    if kind == "constraint":
        return f"invalid constraint {shown}: use 'key == value' or 'key != value'"
    if kind == "env value":
        return (
            "must not contain a newline, carriage return or NUL "
            "(environment values are passed in an env-file)"
        )
    if kind in ("address", "user"):
        if value.startswith("-"):
            return f"invalid {kind} {shown}: must not start with '-'"
        if kind == "address":
            return f"invalid address {shown}: must be non-empty, without whitespace"
        return f"invalid user {shown}: use letters, digits, '_', '.' and '-'"
    if kind == "label key":
        return f"invalid label key {shown}: {_LABEL_KEY_HINT}"
    if kind == "label value":
        return f"invalid label value {shown}: must be non-empty, without whitespace"
    if kind == "absolute path":
        return f"must be an absolute path in the container, starting with '/', got {shown}"
    hint = _RUN_HINTS.get(kind or "")
    if hint is not None:
        return f"invalid {kind} {shown}: {hint}"
    if kind == "text":
        return "must not contain a newline, carriage return or NUL"
    return f"{shown} does not match {pattern}"


_RUN_HINTS = {
    "run user": "use NAME, UID, NAME:GROUP or UID:GID",
    "signal": "use a signal name like 'SIGTERM', 'SIGQUIT' or 'SIGRTMIN+3', or a number",
    "capability": "use a capability name in capitals like 'NET_ADMIN', or 'ALL'",
    "log driver": "use a driver name like 'json-file', 'local', 'journald' or 'syslog'",
    "network name": "use letters, digits, '_', '.' and '-', starting with a letter or digit",
    "hostname": "use letters, digits and '-', in parts separated by '.'",
    "registry": "use HOST or HOST:PORT, e.g. 'registry.example:5000', or 'docker.io'",
    "registry user": "must be non-empty, without whitespace or ':', not starting with '-'",
    "proxy_jump": "use [user@]host[:port], comma-separated, or 'none'",
}


def _show(value: Any) -> str:
    """A value as it would read in TOML, short enough for a one-line message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return repr(value)


def _describe(value: Any) -> str:
    """A value with its TOML type: "string 'x'", "integer 3", "a table"."""
    if isinstance(value, list | dict):
        return _show(value)
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "boolean"),
        (int, "integer"),
        (float, "float"),
        (str, "string"),
        (datetime, "datetime"),
        (date, "date"),
        (time, "time"),
    ]
    name = next((n for t, n in kinds if isinstance(value, t)), type(value).__name__)
    return f"{name} {_show(value)}"


def _render(parts: Iterable[Part]) -> str:
    """A key path as written in TOML: services.web.ports[1], labels."rack.row"."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{key}" if out else key
    return out


# -- inventory --------------------------------------------------------------------------------
_PATH_KEYS = ("identity_file", "known_hosts")
_DURATION_KEYS = ("connect_timeout", "command_timeout", "probe_timeout")


def _load_inventory(path: Path, display: str) -> Inventory:
    doc = _read_toml(path, display)
    _check_schema("inventory", doc, display)
    return _build_inventory(doc, os.path.abspath(path), display)


def _build_inventory(doc: dict[str, Any], abs_path: str, display: str) -> Inventory:
    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, _render(parts), message)

    base = os.path.dirname(abs_path)
    defaults: dict[str, Any] = doc.get("defaults", {})
    sections: list[tuple[tuple[Part, ...], dict[str, Any]]] = [(("defaults",), defaults)]
    sections += [(("hosts", i), h) for i, h in enumerate(doc["hosts"])]
    for where, section in sections:
        for key in _DURATION_KEYS:
            if key in section and units.parse_duration(section[key]) <= 0:
                raise fail((*where, key), f"must be greater than 0, got {_show(section[key])}")
        if "proxy_jump" in section:
            try:
                sshconfig.check_proxy_jump(section["proxy_jump"])
            except sshconfig.SSHConfigError as exc:
                raise fail((*where, "proxy_jump"), str(exc)) from None

    _check_identity_files(sections, base, fail)
    configs = _SSHConfigs(base, defaults, fail)
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(doc["hosts"]):
        name: str = entry["name"]
        if name in seen:
            raise fail(
                ("hosts", i, "name"), f"duplicate host name {name!r} (also hosts[{seen[name]}])"
            )
        seen[name] = i
        try:
            hosts.append(_build_host(entry, {**defaults, **entry}, base, configs.files(i, entry)))
        except sshconfig.SSHConfigError as exc:
            raise fail(("hosts", i), str(exc)) from None
    fraction = float(defaults.get("max_down_fraction", Inventory.max_down_fraction))
    return Inventory(path=abs_path, hosts=tuple(hosts), max_down_fraction=fraction)


def _build_host(
    entry: dict[str, Any], merged: dict[str, Any], base: str, config_files: tuple[str, ...]
) -> Host:
    """One host: its own keys over [defaults], then the SSH config for what neither gives
    (minidock.sshconfig: the inventory is to the config what ssh's command line is)."""
    paths = {k: _resolve(base, merged[k]) for k in _PATH_KEYS if k in merged}
    durations = {k: units.parse_duration(merged[k]) for k in _DURATION_KEYS if k in merged}
    given = sshconfig.Given(
        alias=entry.get("address", entry["name"]),
        user=merged.get("user"),
        port=merged.get("port"),
        identity_file=paths.get("identity_file"),
        known_hosts=paths.get("known_hosts"),
        host_key_policy=merged.get("host_key_policy"),
        connect_timeout=durations.get("connect_timeout"),
        proxy_jump=merged.get("proxy_jump"),
    )
    kwargs: dict[str, Any] = {k: merged[k] for k in ("down_after",) if k in merged}
    kwargs |= durations | sshconfig.resolve(given, config_files)
    if "cpus" in entry:
        kwargs["cpus"] = float(entry["cpus"])
    if "memory" in entry:
        kwargs["memory"] = units.parse_size(entry["memory"])
    labels: dict[str, str] = entry.get("labels", {})
    return Host(name=entry["name"], labels=tuple(sorted(labels.items())), **kwargs)


class _SSHConfigs:
    """The SSH config files each host reads (`ssh_config`, own or [defaults], else
    $MINIDOCK_SSH_CONFIG, else OpenSSH's), checked once per distinct setting; a problem is
    the error of the key that named the file."""

    def __init__(self, base: str, defaults: dict[str, Any], fail: _Fail) -> None:
        self._base = base
        self._defaults = defaults
        self._fail = fail
        self._found: dict[str | None, tuple[str, ...]] = {}

    def files(self, index: int, entry: dict[str, Any]) -> tuple[str, ...]:
        where: tuple[Part, ...] = ("hosts", index, "ssh_config")
        setting = entry.get("ssh_config")
        if setting is None:
            where, setting = ("defaults", "ssh_config"), self._defaults.get("ssh_config")
        if setting is not None and setting.lower() != "none":
            setting = _resolve(self._base, setting)
        if setting not in self._found:
            try:
                self._found[setting] = sshconfig.config_files(setting)
            except sshconfig.SSHConfigError as exc:
                if setting is None:
                    where, exc = (), sshconfig.SSHConfigError(f"${sshconfig.CONFIG_ENV}: {exc}")
                raise self._fail(where, str(exc)) from None
        return self._found[setting]


def _check_identity_files(
    sections: Sequence[tuple[tuple[Part, ...], dict[str, Any]]], base: str, fail: _Fail
) -> None:
    """Refuse a private key that group or others may read or write, as OpenSSH does
    ("UNPROTECTED PRIVATE KEY FILE"): checked here, before any connection. A key that does
    not exist is left to the executor, which reports it for the hosts that use it."""
    for where, section in sections:
        if "identity_file" not in section:
            continue
        problem = sshconfig.key_problem(_resolve(base, section["identity_file"]))
        if problem is not None:
            raise fail((*where, "identity_file"), problem)


# -- cluster ----------------------------------------------------------------------------------
def _load_cluster(path: Path, display: str) -> tuple[Cluster, str]:
    """The cluster, and how to name its inventory file in messages."""
    doc = _read_toml(path, display)
    _check_schema("cluster", doc, display)
    abs_path = os.path.abspath(path)
    inventory: str = doc["inventory"]
    base = os.path.dirname(abs_path)
    registries = _registries(doc.get("registries", {}), display, base)
    services = _build_services(doc.get("services", {}), display, base, doc["cluster"])
    cluster = Cluster(
        name=doc["cluster"],
        path=abs_path,
        inventory_path=_resolve(base, inventory),
        services=tuple(_with_registry_auth(s, registries) for s in services),
    )
    inventory_display = os.path.normpath(
        os.path.join(os.path.dirname(display), os.path.expanduser(inventory))
    )
    return cluster, inventory_display


def _service_pattern(*keys: str) -> re.Pattern[str]:
    node: Any = _schema("cluster")["$defs"]["service"]["properties"]
    for key in keys:
        node = node[key]
    return _compile(node["pattern"])


def _build_services(
    table: dict[str, Any], display: str, base: str, cluster: str
) -> tuple[Service, ...]:
    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, _render(parts), message)

    services = tuple(
        _build_service(name, body, fail, base, cluster) for name, body in table.items()
    )
    names = list(table)
    for s in services:
        for i, dep in enumerate(s.depends_on):
            where = ("services", s.name, "depends_on", i)
            if dep == s.name:
                raise fail(where, f"service {dep!r} depends on itself")
            if dep not in table:
                close = difflib.get_close_matches(dep, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise fail(where, f"unknown service {dep!r}{hint}")
    try:
        TopologicalSorter({s.name: s.depends_on for s in services}).prepare()
    except CycleError as exc:
        # graphlib walks from a service to its dependents; reverse to read "depends on".
        ring: list[str] = list(reversed(exc.args[1]))[:-1]
        start = min(range(len(ring)), key=lambda k: names.index(ring[k]))
        ring = ring[start:] + ring[:start]
        raise fail(
            ("services", ring[0], "depends_on"),
            f"dependency cycle: {' -> '.join([*ring, ring[0]])}",
        ) from None
    return services


def _build_service(
    name: str, body: dict[str, Any], fail: _Fail, base: str, cluster: str
) -> Service:
    at: tuple[Part, ...] = ("services", name)
    ports = _ports(body.get("ports", []), at, fail)
    constraint_re = _service_pattern("constraints", "items")
    constraints = []
    for text in body.get("constraints", []):
        found = constraint_re.match(text)
        assert found is not None  # the schema checked the pattern
        op: Literal["==", "!="] = "==" if found[2] == "==" else "!="
        constraints.append(Constraint(key=found[1], op=op, value=found[3]))
    command = body.get("command")
    env: dict[str, str] = body.get("env", {})
    return Service(
        name=name,
        image=body["image"],
        replicas=body.get("replicas", 1),
        command=tuple(command) if command is not None else None,
        env=tuple(sorted(env.items())),
        ports=ports,
        cpus=float(body.get("cpus", 0.0)),
        memory=units.parse_size(body.get("memory", 0)),
        constraints=tuple(constraints),
        spread=body.get("spread"),
        depends_on=tuple(body.get("depends_on", ())),
        desired=body.get("desired", "running"),
        on_host_loss=body.get("on_host_loss", "replace"),
        health=_health(body["health"], (*at, "health"), fail) if "health" in body else None,
        update=_update(body.get("update", {})),
        restart=_restart(body.get("restart", {}), (*at, "restart"), fail),
        secrets=_secrets(body.get("secrets", {}), env, (*at, "secrets"), fail, base),
        volumes=_volumes(body.get("volumes", []), (*at, "volumes"), fail),
        mode=_mode(body, at, fail),
        image_source=body.get("image_source", "registry"),
        **_run_options(body, at, fail, cluster),
    )


def _mode(
    body: dict[str, Any], at: tuple[Part, ...], fail: _Fail
) -> Literal["replicated", "global"]:
    mode: Literal["replicated", "global"] = body.get("mode", "replicated")
    if mode == "global" and "replicas" in body:
        raise fail((*at, "replicas"), "a global service runs one task per host: remove replicas")
    return mode


_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _volumes(items: list[str], at: tuple[Part, ...], fail: _Fail) -> tuple[Volume, ...]:
    """Named volumes and bind mounts: absolute paths without '..', one mount per target."""
    volumes: list[Volume] = []
    targets: dict[str, int] = {}
    for i, text in enumerate(items):
        source, target, *mode = text.split(":")
        where = (*at, i)
        if not source.startswith("/") and not _VOLUME_NAME.fullmatch(source):
            raise fail(
                where,
                f"invalid volume {text!r}: a host path must be absolute "
                f"(/srv/...), a volume name must match {_VOLUME_NAME.pattern}",
            )
        for path in [target, *([source] if source.startswith("/") else [])]:
            if not path.startswith("/") or ".." in path.split("/"):
                raise fail(
                    where,
                    f"invalid volume {text!r}: {path!r} must be an absolute path without '..'",
                )
        if target in targets:
            raise fail(where, f"{target} is already mounted by volumes[{targets[target]}]")
        targets[target] = i
        volumes.append(Volume(source, target, read_only=mode == ["ro"]))
    return tuple(volumes)


def _secrets(
    table: dict[str, dict[str, str]],
    env: dict[str, str],
    at: tuple[Part, ...],
    fail: _Fail,
    base: str,
) -> tuple[tuple[str, str], ...]:
    """Read every secret on the controller now (apply time); errors never show a value."""
    values: list[tuple[str, str]] = []
    for key, source in table.items():
        where = (*at, key)
        if key in env:
            raise fail(where, f"{key} is also set in env: give it in one of env or secrets")
        values.append((key, _secret_value(source, where, fail, base)))
    return tuple(sorted(values))


def _secret_value(source: dict[str, str], where: tuple[Part, ...], fail: _Fail, base: str) -> str:
    """The value of one secret source, `{ file = "path" }` or `{ env = "NAME" }`, read now."""
    if "file" in source:
        value = _secret_file(_resolve(base, source["file"]), (*where, "file"), fail)
    else:
        name = source["env"]
        if name not in os.environ:
            raise fail((*where, "env"), f"{name} is not set in the controller's environment")
        value = os.environ[name]
    if any(c in value for c in "\n\r\0"):
        raise fail(where, "the secret's value must not contain a line break or NUL")
    return value


def _registries(table: dict[str, Any], display: str, base: str) -> dict[str, RegistryAuth]:
    """Credentials per registry, each password read now from its file or environment."""

    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, _render(parts), message)

    found: dict[str, RegistryAuth] = {}
    for registry, body in table.items():
        where = ("registries", registry, "password")
        password = _secret_value(body["password"], where, fail, base)
        if not password:
            raise fail(where, "the password is empty")
        found[registry] = RegistryAuth(registry, body["username"], password)
    return found


def _with_registry_auth(service: Service, registries: Mapping[str, RegistryAuth]) -> Service:
    """The service with the credentials of the registry its image is pulled from, if any."""
    auth = registries.get(image_registry(service.image))
    if auth is None or service.image_source != "registry":
        return service
    return replace(service, registry_auth=auth)


# Networks a task cannot join beside its cluster's user-defined bridge network.
_UNJOINABLE_NETWORKS = ("host", "none")


def _run_options(
    body: dict[str, Any], at: tuple[Part, ...], fail: _Fail, cluster: str
) -> dict[str, Any]:
    """The keyword arguments of Service for the docker run surface (labels ... networks)."""
    labels: dict[str, str] = body.get("labels", {})
    for key in labels:
        if key.startswith("minidock."):
            raise fail(
                (*at, "labels", key),
                "the 'minidock.' label prefix is MiniDock's own: use another prefix, e.g. 'app.'",
            )
    options: dict[str, Any] = {"labels": tuple(sorted(labels.items()))}
    options |= {
        k: body[k] for k in ("user", "workdir", "stop_signal", "init", "read_only") if k in body
    }
    options |= {k: tuple(body[k]) for k in ("entrypoint", "cap_add", "cap_drop") if k in body}
    if "stop_grace_period" in body:
        options["stop_grace_period"] = float(
            math.ceil(units.parse_duration(body["stop_grace_period"]))
        )
    options["ulimits"] = _ulimits(body.get("ulimits", {}), (*at, "ulimits"), fail)
    if "log" in body:
        log_options: dict[str, str] = body["log"].get("options", {})
        options["log"] = LogConfig(body["log"]["driver"], tuple(sorted(log_options.items())))
    hosts: dict[str, str] = body.get("extra_hosts", {})
    for name, address in hosts.items():
        if address != "host-gateway":
            _ip((*at, "extra_hosts", name), address, fail, ", or 'host-gateway'")
    options["extra_hosts"] = tuple(sorted(hosts.items()))
    for i, address in enumerate(body.get("dns", [])):
        _ip((*at, "dns", i), address, fail, "")
    options["dns"] = tuple(body.get("dns", ()))
    options["networks"] = _networks(body.get("networks", []), (*at, "networks"), fail, cluster)
    return options


def _ip(where: tuple[Part, ...], address: str, fail: _Fail, alternative: str) -> None:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise fail(
            where, f"invalid IP address {_show(address)}: use an IPv4 or IPv6 address{alternative}"
        ) from None


def _ulimits(table: dict[str, Any], at: tuple[Part, ...], fail: _Fail) -> tuple[Ulimit, ...]:
    limits: list[Ulimit] = []
    for name, value in table.items():
        soft, hard = (value, value) if isinstance(value, int) else (value["soft"], value["hard"])
        if hard != -1 and (soft == -1 or soft > hard):
            shown = "unlimited" if soft == -1 else str(soft)
            raise fail((*at, name), f"soft limit {shown} is above the hard limit {hard}")
        limits.append(Ulimit(name, soft, hard))
    return tuple(sorted(limits, key=lambda u: u.name))


def _networks(names: list[str], at: tuple[Part, ...], fail: _Fail, cluster: str) -> tuple[str, ...]:
    own = cluster_network(cluster)
    for i, name in enumerate(names):
        if name in _UNJOINABLE_NETWORKS:
            raise fail(
                (*at, i),
                f"network {name!r} cannot be joined beside the cluster's network {own}: "
                "list user-defined or bridge networks",
            )
        if name == own:
            raise fail((*at, i), f"every task is on its cluster's network {own} already: remove it")
    return tuple(names)


def _secret_file(path: str, where: tuple[Part, ...], fail: _Fail) -> str:
    """A secret file's value (one trailing newline dropped); refused when others may read it."""
    try:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise fail(where, f"{path} is readable or writable by others: chmod 600 {path}")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise fail(where, f"secret file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(where, f"cannot read secret file {path}: {type(exc).__name__}") from None
    return text[:-1] if text.endswith("\n") else text


def _ports(items: list[str], at: tuple[Part, ...], fail: _Fail) -> tuple[PortMapping, ...]:
    port_re = _service_pattern("ports", "items")
    ports: list[PortMapping] = []
    taken: dict[tuple[int, str], int] = {}
    for i, text in enumerate(items):
        found = port_re.match(text)
        assert found is not None  # the schema checked the pattern
        host_port, container_port = int(found[1]), int(found[2])
        for port in (host_port, container_port):
            if not 1 <= port <= 65535:
                raise fail((*at, "ports", i), f"port {port} out of range 1..65535 in {text!r}")
        protocol: Literal["tcp", "udp"] = "udp" if found[3] == "udp" else "tcp"
        if (host_port, protocol) in taken:
            first = taken[(host_port, protocol)]
            raise fail(
                (*at, "ports", i),
                f"host port {host_port}/{protocol} is already published by ports[{first}]",
            )
        taken[(host_port, protocol)] = i
        ports.append(PortMapping(host_port, container_port, protocol))
    return tuple(ports)


def _durations(body: dict[str, Any], keys: Iterable[str]) -> dict[str, float]:
    return {k: units.parse_duration(body[k]) for k in keys if k in body}


def _health(body: dict[str, Any], at: tuple[Part, ...], fail: _Fail) -> HealthCheck:
    times: dict[str, Any] = _durations(body, ("interval", "timeout", "start_period"))
    for key in ("interval", "timeout"):
        if key in times and times[key] <= 0:
            raise fail((*at, key), f"must be greater than 0, got {_show(body[key])}")
    extra = {"retries": body["retries"]} if "retries" in body else {}
    return HealthCheck(cmd=tuple(body["cmd"]), **times, **extra)


def _update(body: dict[str, Any]) -> UpdatePolicy:
    kwargs: dict[str, Any] = _durations(body, ("delay", "monitor"))
    kwargs |= {k: body[k] for k in ("parallelism", "order", "failure_action") if k in body}
    if "max_failure_ratio" in body:
        kwargs["max_failure_ratio"] = float(body["max_failure_ratio"])
    return UpdatePolicy(**kwargs)


def _restart(body: dict[str, Any], at: tuple[Part, ...], fail: _Fail) -> RestartPolicy:
    kwargs: dict[str, Any] = _durations(body, ("delay", "max_delay", "window"))
    kwargs |= {k: body[k] for k in ("condition", "max_attempts") if k in body}
    policy = RestartPolicy(**kwargs)
    if policy.max_delay < policy.delay:
        delay, max_delay = (units.format_duration(t) for t in (policy.delay, policy.max_delay))
        if "max_delay" in body:
            raise fail((*at, "max_delay"), f"must be at least delay ({delay}), got {max_delay}")
        raise fail(
            (*at, "delay"), f"must be at most max_delay ({max_delay}, the default), got {delay}"
        )
    return policy
