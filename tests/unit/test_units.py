"""Durations and sizes: the grammar, the errors, and exact round-trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidock.units import (
    MAX_DURATION,
    MAX_SIZE,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("1h2m3s4ms", 3723.004),
        ("1.5h", 5400.0),
        ("0.25s", 0.25),
        ("0s", 0.0),
        ("1h30s", 3630.0),
        (3, 3.0),
        (2.5, 2.5),
        (0, 0.0),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10", "invalid duration '10': missing unit (ms, s, m or h)"),
        (
            "5x",
            "invalid duration '5x': use a number of seconds or a string like '500ms', "
            "'2s', '1m30s', '1h'",
        ),
        (
            "",
            "invalid duration '': use a number of seconds or a string like '500ms', "
            "'2s', '1m30s', '1h'",
        ),
        ("1s1m", None),  # units out of order
        ("1s1s", None),  # a unit twice
        ("1 s", None),
        ("-1s", None),
        ("1s\n", None),
        (".5s", None),
        (-1, "invalid duration -1: must not be negative"),
        (float("nan"), "invalid duration nan: must be a finite number"),
        (True, None),
    ],
)
def test_parse_duration_rejects(text: str | float, message: str | None) -> None:
    with pytest.raises(ValueError, match=r"^invalid duration") as err:
        parse_duration(text)
    if message is not None:
        assert str(err.value) == message


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("256MiB", 256 << 20),
        ("8GiB", 8 << 30),
        ("512KiB", 512 << 10),
        ("1TiB", 1 << 40),
        ("1G", 1 << 30),
        ("100M", 100 << 20),
        ("64K", 64 << 10),
        ("512m", 512 << 20),
        ("1000B", 1000),
        ("1000", 1000),
        (4096, 4096),
        (0, 0),
    ],
)
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["256MB", "1.5G", "1 G", "-1", "G", "", "1g\n", "1kib"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid size") as err:
        parse_size(text)
    assert str(err.value) == (
        f"invalid size {text!r}: use a number of bytes or a string like "
        "'512KiB', '256MiB', '8GiB', '100M'"
    )


def test_parse_size_rejects_negative_and_bool() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        parse_size(-1)
    with pytest.raises(ValueError, match="invalid size True"):
        parse_size(True)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (2, "2s"),
        (90, "1m30s"),
        (90.5, "1m30.5s"),
        (3605, "1h5s"),
        (3600, "1h"),
        (0.0004, "0s"),
        (1.25, "1.25s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0B"),
        (1000, "1000B"),
        (1536, "1536B"),
        (8 << 30, "8GiB"),
        (256 << 20, "256MiB"),
        (1536 << 10, "1536KiB"),
        (1 << 40, "1TiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_format_rejects_negative() -> None:
    with pytest.raises(ValueError, match="cannot format duration"):
        format_duration(-1)
    with pytest.raises(ValueError, match="cannot format size"):
        format_size(-1)


@given(st.integers(min_value=0, max_value=10**12))
def test_duration_round_trip_whole_milliseconds(millis: int) -> None:
    seconds = millis / 1000
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_duration_format_parses_back_within_a_millisecond(seconds: float) -> None:
    assert abs(parse_duration(format_duration(seconds)) - seconds) <= 0.0005 + seconds * 1e-15


@given(st.integers(min_value=0, max_value=1 << 60))
def test_size_round_trip(size: int) -> None:
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize(
    "value", ["9" * 400 + "h", 10**400, 1e300, "2562047h47m16.855s", 9_223_372_037]
)
def test_a_duration_past_dockers_limit_is_refused_not_overflowed(value: str | float) -> None:
    with pytest.raises(ValueError, match=r"too long: at most 2562047h47m16\.854s"):
        parse_duration(value)


def test_the_longest_duration_is_docker_s_and_reads_back() -> None:
    longest = parse_duration("2562047h47m16.854s")
    assert longest == float(MAX_DURATION)
    assert parse_duration(format_duration(longest)) == longest


@pytest.mark.parametrize("value", ["9" * 400 + "GiB", "8388608TiB", 1 << 63, 10**400])
def test_a_size_past_int64_is_refused(value: str | int) -> None:
    with pytest.raises(ValueError, match="too large: at most 9223372036854775807 bytes"):
        parse_size(value)
    assert parse_size(MAX_SIZE) == MAX_SIZE
