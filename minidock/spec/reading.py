"""Reading a spec file: TOML parse (with line and column), then the shipped JSON Schema.

Schema errors are mapped to a key path and a message (minidock.spec.messages) and the
first in document order is raised as a SpecError.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import validators  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from minidock import units
from minidock.spec.errors import Part, SpecError
from minidock.spec.messages import key_message, render, show, unknown_key, value_message

# MiniDock's files nest a handful of levels (services.web.ulimits.nofile.soft); anything
# deeper is a mistake, refused before the schema walks it.
MAX_DEPTH = 32
_TOO_DEEP = "arrays or tables nested too deeply"
_TOO_LONG_NUMBER = "a number too long to read (TOML integers are 64-bit)"
_INT64 = range(-(1 << 63), 1 << 63)

_TOML_AT = re.compile(
    r"^(?P<msg>.*) \((?:at line (?P<line>\d+), column (?P<col>\d+)|at end of document)\)$"
)


def read_toml(path: Path, display: str) -> dict[str, Any]:
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
        doc = tomllib.loads(text)
    except RecursionError:
        raise SpecError(display, "", f"invalid TOML: {_TOO_DEEP}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(exc, display) from None
    except ValueError:  # an integer past Python's digit limit for int()
        raise SpecError(display, "", f"invalid TOML: {_TOO_LONG_NUMBER}") from None
    _check_depth(doc, display)
    return doc


def _toml_error(exc: tomllib.TOMLDecodeError, display: str) -> SpecError:
    """The SpecError for a TOML syntax error, with its line and column."""
    found = _TOML_AT.match(str(exc))
    if found is None:
        return SpecError(display, "", f"invalid TOML: {exc}")
    msg = found["msg"][:1].lower() + found["msg"][1:]
    if msg.startswith("cannot overwrite a value"):
        msg += " (is a key set twice?)"
    if found["line"] is None:
        return SpecError(display, "", f"invalid TOML at end of document: {msg}")
    line, col = int(found["line"]), int(found["col"])
    return SpecError(
        display, "", f"invalid TOML at line {line}, column {col}: {msg}", line=line, column=col
    )


def _check_depth(doc: dict[str, Any], display: str) -> None:
    """Refuse values nested deeper than MAX_DEPTH, naming the outermost few keys."""
    stack: list[tuple[tuple[Part, ...], Any]] = [((), doc)]
    while stack:
        parts, node = stack.pop()
        if len(parts) > MAX_DEPTH:
            raise SpecError(display, render(parts[:4]), f"{_TOO_DEEP} (at most {MAX_DEPTH} levels)")
        if isinstance(node, dict):
            stack += [((*parts, k), v) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [((*parts, i), v) for i, v in enumerate(node)]


def resolve(base_dir: str, value: str) -> str:
    """`value` with ~ expanded, made absolute relative to `base_dir`."""
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))


# -- JSON Schema ------------------------------------------------------------------------------
@functools.cache
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a schema pattern with ECMA-262 meaning: `$` is the very end of the string.

    (Python's `$` also matches before a final newline, which would let "web\\n" pass as a
    name.) Schema patterns therefore use `$` only as an anchor.
    """
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _pattern_keyword(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _parse_keyword(
    validator: Any, kind: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """`x-parse`: a duration or size that passes its type, pattern and minimum must also
    parse (so within Docker's limits); the other keywords word the other problems."""
    if validator.is_type(instance, "string"):
        if not compile_pattern(schema.get("pattern", "")).search(instance):
            return
    elif not validator.is_type(instance, "number") or not 0 <= instance < math.inf:
        return  # NaN and infinity are reported whatever their key
    try:
        (units.parse_duration if kind == "duration" else units.parse_size)(instance)
    except ValueError as exc:
        yield ValidationError(str(exc))


_Validator = validators.extend(
    validators.Draft202012Validator, {"pattern": _pattern_keyword, "x-parse": _parse_keyword}
)


@functools.cache
def shipped_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema `kind` ("inventory" or "cluster")."""
    text = (resources.files("minidock") / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator(kind: str) -> Any:
    return _Validator(shipped_schema(kind))


@dataclass(frozen=True, order=True)
class _Issue:
    """One schema problem; issues sort into the order they are reported in."""

    position: tuple[int, ...]
    path: tuple[Part, ...] = field(compare=False)
    message: str = field(compare=False)


# Where object-level problems sort among an object's children: unknown and badly named
# keys first, then missing keys, then the values in file order.
_KEY_ISSUE, _MISSING_ISSUE = -2, -1


def check_schema(kind: str, doc: dict[str, Any], display: str) -> None:
    """Raise the first JSON Schema problem in `doc`, in document order."""
    issues = [i for e in _validator(kind).iter_errors(doc) for i in _issues(e, doc)]
    issues += [
        _Issue(_position(doc, parts), parts, message)
        for parts, value in _walk(doc, ())
        if (message := _unrepresentable(value)) is not None
    ]
    if issues:
        first = min(issues)
        raise SpecError(display, render(first.path), first.message)


def _unrepresentable(value: Any) -> str | None:
    """What makes a value unusable whatever its key: NaN or infinity, an integer beyond
    64 bits (TOML's range), a NUL byte (no path, argument or label can carry one)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {show(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return "must be a 64-bit integer (-9223372036854775808..9223372036854775807)"
    if isinstance(value, str) and "\0" in value:
        return "must not contain a NUL byte"
    return None


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
            _Issue((*here, _KEY_ISSUE, i), parts, unknown_key(key, allowed))
            for i, key in enumerate(value)
            if key not in allowed
        ]
    if keyword == "required" and isinstance(value, dict):
        missing = [k for k in error.validator_value if k not in value]
        return [_Issue((*here, _MISSING_ISSUE), parts, f"missing required key {missing[0]!r}")]
    if "propertyNames" in error.absolute_schema_path:
        parent = _value_at(doc, parts)
        index = list(parent).index(value) if isinstance(parent, dict) and value in parent else 0
        return [_Issue((*here, _KEY_ISSUE, index), parts, key_message(error, parts))]
    return [_Issue(here, parts, value_message(error, parts))]


def _value_at(doc: Any, parts: Iterable[Part]) -> Any:
    node = doc
    for part in parts:
        node = node[part]
    return node
