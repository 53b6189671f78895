"""Durations and sizes as written in MiniDock files, and back.

Durations are float seconds: a bare number, or a string of unit parts in decreasing order,
each at most once: `1h`, `1m30s`, `2.5s`, `500ms`. Sizes are int bytes: a bare integer, or
a string with a binary unit: `512KiB`, `256MiB`, `8GiB`; `K`, `M`, `G`, `T` (either case)
mean the same binary units, as in Docker's `--memory 512m`; `B` or no unit means bytes.
The parsers and formatters are exact inverses for whole milliseconds and all byte counts.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "DURATION_PATTERN",
    "MAX_DURATION",
    "MAX_SIZE",
    "SIZE_PATTERN",
    "approx_size",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
]

_NUM = r"[0-9]+(?:\.[0-9]+)?"
# Kept equal to the "duration" and "size" patterns in the JSON Schemas (a test checks it).
DURATION_PATTERN = rf"^(?=[0-9])(?:({_NUM})h)?(?:({_NUM})m(?!s))?(?:({_NUM})s)?(?:({_NUM})ms)?$"
SIZE_PATTERN = r"^([0-9]+)(B|[KMGTkmgt]|[KMGT]iB)?$"

_DURATION_RE = re.compile(DURATION_PATTERN.removesuffix("$") + r"\Z")
_SIZE_RE = re.compile(SIZE_PATTERN.removesuffix("$") + r"\Z")
_DURATION_UNITS = (Fraction(3600), Fraction(60), Fraction(1), Fraction(1, 1000))
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DURATION_HINT = "use a number of seconds or a string like '500ms', '2s', '1m30s', '1h'"
_SIZE_HINT = "use a number of bytes or a string like '512KiB', '256MiB', '8GiB', '100M'"
# Docker's limits (Go's time.Duration and int64 byte counts), to the millisecond for
# durations, so that every value read here can be handed to Docker as it was written.
MAX_DURATION = Fraction(9_223_372_036_854, 1000)
MAX_SIZE = (1 << 63) - 1
_TOO_LONG = "too long: at most 2562047h47m16.854s (about 292 years, Docker's limit)"
_TOO_LARGE = "too large: at most 9223372036854775807 bytes (8EiB, Docker's limit)"


def parse_duration(value: str | int | float) -> float:
    """Seconds in `value`: a number of seconds, or a string such as '1m30s' or '500ms'."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}: {_DURATION_HINT}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"invalid duration {value!r}: must be a finite number")
        if value < 0:
            raise ValueError(f"invalid duration {value!r}: must not be negative")
        if value > MAX_DURATION:
            raise ValueError(f"invalid duration: {_TOO_LONG}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}: {_DURATION_HINT}")
    match = _DURATION_RE.match(value)
    if match is None:
        if re.fullmatch(_NUM, value):
            raise ValueError(f"invalid duration {value!r}: missing unit (ms, s, m or h)")
        raise ValueError(f"invalid duration {value!r}: {_DURATION_HINT}")
    total = sum(
        (
            Fraction(part) * unit
            for part, unit in zip(match.groups(), _DURATION_UNITS, strict=True)
            if part
        ),
        Fraction(0),
    )
    if total > MAX_DURATION:
        raise ValueError(f"invalid duration: {_TOO_LONG}")
    return float(total)


def parse_size(value: str | int) -> int:
    """Bytes in `value`: a number of bytes, or a string such as '256MiB', '8GiB' or '100M'."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}: {_SIZE_HINT}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid size {value!r}: must not be negative")
        if value > MAX_SIZE:
            raise ValueError(f"invalid size: {_TOO_LARGE}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid size {value!r}: {_SIZE_HINT}")
    match = _SIZE_RE.match(value)
    if match is None:
        raise ValueError(f"invalid size {value!r}: {_SIZE_HINT}")
    number, unit = match.group(1), match.group(2) or ""
    size = int(number) * _SIZE_UNITS[unit[:1].upper()]
    if size > MAX_SIZE:
        raise ValueError(f"invalid size: {_TOO_LARGE}")
    return size


def format_duration(seconds: float) -> str:
    """Short display form, rounded to the millisecond: '0s', '500ms', '2s', '1m30.5s', '1h5s'."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"cannot format duration {seconds!r}: must be a finite number >= 0")
    millis = round(Fraction(seconds) * 1000)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    if secs or millis:
        frac = f".{millis:03d}".rstrip("0") if millis else ""
        parts.append(f"{secs}{frac}s")
    return "".join(parts)


def format_size(size: int) -> str:
    """Largest binary unit that holds `size` exactly: '8GiB', '256MiB', '1536KiB', '100B'."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"cannot format size {size!r}: must be an integer >= 0")
    for suffix, unit in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return f"{size}B"


def approx_size(size: int) -> str:
    """A size to read at a glance, with one decimal in the largest unit it reaches: '2.0MiB',
    '512B' (for transfer figures; `format_size` is exact, for values in files)."""
    if size < 1024:
        return f"{size}B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}TiB"
