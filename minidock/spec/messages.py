"""The wording of schema problems: one line per problem, never a secret's value.

A JSON Schema error becomes a message naming what was expected and what was found, with a
hint for the fix; `render` writes a key path as TOML does, `show` a value short and safe.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time
from typing import Any

from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from minidock import units
from minidock.spec.errors import Part

# what a secret source must be (the schema's message and the loader's alike)
ONE_SOURCE = (
    'expected a table with one of file = "path", env = "NAME", command = [...] or age_file = "path"'
)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'web'?)` for the closest of `known` to a mistyped `name`, else ""
    (none close, or two as close): the one suggestion rule of the file loader and of the
    commands' operands."""
    options = sorted({str(k) for k in known})
    close = difflib.get_close_matches(name, options, n=2)
    if not close:
        return ""
    scores = [difflib.SequenceMatcher(None, name, c).ratio() for c in close]
    if len(close) > 1 and scores[0] == scores[1]:
        return ""  # host9 is as close to host1 as to host2: a guess would mislead
    return f" (did you mean {close[0]!r}?)"


def unknown_key(key: str, allowed: Sequence[str]) -> str:
    hint = did_you_mean(key, allowed)
    if hint:
        return f"unknown key {key!r}{hint}"
    return f"unknown key {key!r} (allowed: {', '.join(allowed)})"


def key_message(error: ValidationError, parts: tuple[Part, ...]) -> str:
    """Message for a table key that fails its `propertyNames` schema."""
    key: str = error.instance
    kind = error.schema.get("title") if isinstance(error.schema, Mapping) else None
    if kind == "name":
        noun = "service name" if parts == ("services",) else "name"
        return _name_message(error, noun)
    if kind == "env name":
        name = key.split("=", 1)[0] + "=..." if "=" in key else key  # no value after '='
        return f"invalid environment variable name {show(name)}: {_ENV_NAME_HINT}"
    if kind == "label key":
        return f"invalid label key {show(key)}: {_LABEL_KEY_HINT}"
    if kind == "ulimit name":
        return unknown_key(key, error.schema["enum"]).replace("key", "ulimit", 1)
    if kind in ("hostname", "registry"):
        return _pattern_message(kind, key, "")
    return f"invalid key {show(key)}"


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
    "http2": "true (the HTTPS server speaks HTTP/2 and HTTP/1.1) or false (HTTP/1.1 only)",
    "request metrics": "true (each route counted by a server of its own) or false (the "
    "proxy sends directly, nothing counted per route)",
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
        return f"invalid {noun} {show(value)}: at most {error.validator_value} characters"
    return f"invalid {noun} {show(value)}: {_NAME_HINT}"


def value_message(error: ValidationError, parts: tuple[Part, ...]) -> str:
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
    if kind in ("duration", "size") and keyword in ("pattern", "minimum", "x-parse"):
        try:
            (units.parse_duration if kind == "duration" else units.parse_size)(value)
        except ValueError as exc:
            return str(exc)
    if kind == "name" and keyword in ("pattern", "maxLength"):
        return _name_message(error, _name_noun(parts))
    if keyword == "pattern":
        return _pattern_message(kind, value, limit)
    if keyword == "enum":
        options = ", ".join(show(o) for o in limit)
        hint = did_you_mean(value, limit) if isinstance(value, str) else ""
        return f"expected one of {options}, got {show(value)}{hint}"
    if keyword == "minimum":
        return f"must be at least {show(limit)}, got {show(value)}"
    if keyword == "maximum":
        return f"must be at most {show(limit)}, got {show(value)}"
    if keyword == "exclusiveMinimum":
        return f"must be greater than {show(limit)}, got {show(value)}"
    if keyword in ("minItems", "minLength") and limit == 1:
        return "must not be empty"
    if keyword == "minItems":
        return f"must have at least {limit} items"
    if keyword == "maxLength":
        return f"too long: at most {limit} characters"
    if keyword == "uniqueItems" and isinstance(value, list):
        dup = next((v for i, v in enumerate(value) if v in value[:i]), None)
        return f"{show(dup)} is listed twice"
    return str(error.message)


def _secret_bearing(parts: tuple[Part, ...]) -> bool:
    """Services.NAME.env or .secrets (or under them), a secret file's source, a registry's
    table or its password: a value there may be a secret (`env = "DB_PASSWORD=..."` too),
    never echoed."""
    if parts[:1] == ("registries",) and (len(parts) <= 2 or parts[2] == "password"):
        return True
    if len(parts) < 3 or parts[0] != "services":
        return False
    if parts[2] == "secret_files":  # a value given in place of a source; not uid, gid, mode
        return len(parts) <= 4
    return parts[2] in ("env", "secrets")


def _secret_message(kind: str | None, keyword: str, limit: Any, value: Any) -> str:
    """A message about an env or secret value that names its type, never the value."""
    if kind == "secret source" and keyword in ("minProperties", "maxProperties", "type"):
        return ONE_SOURCE
    if keyword == "type":
        types = [limit] if isinstance(limit, str) else list(limit)
        want = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        if isinstance(value, list | dict):
            got = show(value)  # "an array", "a table": no value shown
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
    if types == ["object"] and isinstance(value, str):
        # A string where a table belongs may be a setting written inline ("KEY=secret").
        return f"expected {want}, got a string"
    message = f"expected {want}, got {_describe(value)}"
    if kind not in _KIND_WORDS and types == ["string"] and isinstance(value, int | float):
        message += f' (write it in quotes: "{show(value)}")'
    return message


def _pattern_message(kind: str | None, value: str, pattern: str) -> str:
    shown = show(value)
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
    "device": "use '/HOST/PATH', '/HOST/PATH:/CONTAINER/PATH' or with permissions ':rwm'",
    "tmpfs mount": "use '/PATH' or '/PATH:OPTIONS', e.g. '/run:size=64m'",
    "GPU device id": "use an index like '0' or an id like 'GPU-8f1c...', as nvidia-smi -L shows",
    "file mode": 'use octal digits in quotes, like "0440"',
    "signal": "use a signal name like 'SIGTERM', 'SIGQUIT' or 'SIGRTMIN+3', or a number",
    "capability": "use a capability name in capitals like 'NET_ADMIN', or 'ALL'",
    "log driver": "use a driver name like 'json-file', 'local', 'journald' or 'syslog'",
    "network name": "use letters, digits, '_', '.' and '-', starting with a letter or digit",
    "hostname": "use letters, digits and '-', in parts separated by '.'",
    "registry": "use HOST or HOST:PORT, e.g. 'registry.example:5000', or 'docker.io'",
    "registry user": "must be non-empty, without whitespace or ':', not starting with '-'",
    "proxy_jump": "use [user@]host[:port], comma-separated, or 'none'",
}


def show(value: Any) -> str:
    """A value as it would read in TOML, short enough for a one-line message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, int) and value.bit_length() > 63:
        return "an integer beyond 64 bits"
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
    if isinstance(value, list | dict) or (isinstance(value, int) and value.bit_length() > 63):
        return show(value)
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
    return f"{name} {show(value)}"


def render(parts: Iterable[Part]) -> str:
    """A key path as written in TOML: services.web.ports[1], labels."rack.row"."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{key}" if out else key
    return out
