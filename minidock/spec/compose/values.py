"""Compose's value forms read as MiniDock's: Go durations, Docker sizes, strings or lists,
lists or mappings, shell-split commands; strings cast to numbers and booleans where
Compose casts them (an interpolated `replicas: ${N}` is a number)."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from minidock import units
from minidock.spec.compose.context import Context, describe
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = [
    "boolean",
    "duration",
    "integer",
    "key_values",
    "mapping",
    "number",
    "seconds",
    "size",
    "split_command",
    "string_list",
    "text",
]

_GO_DURATION = re.compile(r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<unit>ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_DOCKER_SIZE = re.compile(r"(?P<num>[0-9]+(?:\.[0-9]+)?) ?(?P<unit>[kKmMgGtTpP])?[iI]?[bB]?")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_TRUE, _FALSE = ("true", "y", "yes", "on"), ("false", "n", "no", "off")


def text(ctx: Context, value: Any, parts: Sequence[Part]) -> str:
    """A string; a number is written as Compose writes it (`user: 1000` is "1000")."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number_text(value)
    raise ctx.fail(parts, f"expected a string, got {describe(value)}")


def _number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def string_list(
    ctx: Context, value: Any, parts: Sequence[Part], *, split: bool = False
) -> list[str]:
    """A list of strings; one string is a list of one (or of its words, with `split`)."""
    if isinstance(value, str):
        return value.split() if split else [value]
    if not isinstance(value, list):
        raise ctx.fail(parts, f"expected a string or a list of strings, got {describe(value)}")
    return [text(ctx, item, (*parts, i)) for i, item in enumerate(value)]


def split_command(ctx: Context, value: Any, parts: Sequence[Part]) -> list[str]:
    """A command: a list as it is, or a string split into words as a shell would."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ctx.fail(parts, f"cannot split {value!r} into words: {exc}") from None
    return string_list(ctx, value, parts)


def mapping(ctx: Context, value: Any, parts: Sequence[Part]) -> YDict:
    """A mapping (`{}` for a key left empty: `pgdata:`)."""
    if value is None:
        return YDict()
    if not isinstance(value, YDict):
        raise ctx.fail(parts, f"expected a mapping, got {describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ctx.fail(parts, f"keys must be strings, got {describe(key)}")
    return value


def key_values(ctx: Context, value: Any, parts: Sequence[Part]) -> dict[str, tuple[Any, Part]]:
    """A list of `KEY=VALUE` (or `KEY` alone: None) or a mapping, as Compose's list_or_dict:
    each key with its value and the part of `parts` it was written at."""
    found: dict[str, tuple[Any, Part]] = {}
    if isinstance(value, list):
        for i, item in enumerate(value):
            entry = text(ctx, item, (*parts, i))
            key, sep, rest = entry.partition("=")
            found[key] = (rest if sep else None, i)
        return found
    for key, item in mapping(ctx, value, parts).items():
        if isinstance(item, list | dict):
            raise ctx.fail((*parts, key), f"expected a string or a number, got {describe(item)}")
        if isinstance(item, bool):
            item = "true" if item else "false"
        found[key] = (None if item is None else text(ctx, item, (*parts, key)), key)
    return found


def integer(ctx: Context, value: Any, parts: Sequence[Part]) -> int:
    """An integer, or a string of one (cast, as Compose casts interpolated values)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+", value.strip()):
        return int(value)
    raise ctx.fail(parts, f"expected an integer, got {describe(value)}")


def number(ctx: Context, value: Any, parts: Sequence[Part]) -> float | int:
    """A number, or a string of one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise ctx.fail(parts, f"expected a finite number, got {describe(value)}")
        return value
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(parsed):
                return int(parsed) if re.fullmatch(r"[-+]?[0-9]+", value.strip()) else parsed
    raise ctx.fail(parts, f"expected a number, got {describe(value)}")


def boolean(ctx: Context, value: Any, parts: Sequence[Part]) -> bool:
    """A boolean, or a string Compose reads as one ("true", "false"; "yes", "no" warned)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in (*_TRUE, *_FALSE):
        if value.lower() not in ("true", "false"):
            word = "true" if value.lower() in _TRUE else "false"
            ctx.warn(parts, f"{value!r} for a boolean is not YAML 1.2: write {word}")
        return value.lower() in _TRUE
    raise ctx.fail(parts, f"expected a boolean, got {describe(value)}")


def seconds(ctx: Context, value: Any, parts: Sequence[Part]) -> float:
    """A Go duration ("1m30s", "500ms", "1.5h", "2us") in seconds."""
    if isinstance(value, str):
        body = value[1:] if value[:1] == "+" else value
        if body == "0":
            return 0.0
        pieces = list(_GO_DURATION.finditer(body))
        if pieces and "".join(p.group(0) for p in pieces) == body:
            total = sum(Fraction(p["num"]) * _GO_UNITS[p["unit"]] for p in pieces)
            return float(total)
    shown = describe(value)
    raise ctx.fail(
        parts, f"invalid duration ({shown}): use a duration like '10s', '1m30s', '500ms'"
    )


def duration(ctx: Context, value: Any, parts: Sequence[Part]) -> str | float:
    """A Go duration as a TOML spec duration: the same string when MiniDock reads it the
    same, else seconds."""
    secs = seconds(ctx, value, parts)
    try:
        if units.parse_duration(value) == secs:
            return str(value)
    except ValueError:
        pass
    return secs


def size(ctx: Context, value: Any, parts: Sequence[Part]) -> str | int:
    """A Docker size ("512m", "1gb", "1.5G", bytes) as a TOML spec size."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    found = _DOCKER_SIZE.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        shown = describe(value)
        raise ctx.fail(parts, f"invalid size ({shown}): use a size like '512M', '1G' or bytes")
    unit = _SIZE_UNITS[(found["unit"] or "").lower()]
    count = int(Fraction(found["num"]) * unit)
    try:
        if units.parse_size(value) == count:
            return str(value)
    except ValueError:
        pass
    return count


def items(value: Any) -> list[tuple[int, Any]]:
    """The items of a YAML list with their indexes."""
    return list(enumerate(value)) if isinstance(value, YList | list) else []
