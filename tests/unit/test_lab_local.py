"""Local commands for the lab (minidock.lab.local): a pipe whose consumer starts only once
something is ready, and waiting for a Docker engine that is still being installed (a build
started by scripts/setup.sh --demo before the engine). The engine is a fake; the pipe runs
real processes (printf, cat, sleep)."""

from __future__ import annotations

import time

import pytest

from minidock.lab import local
from minidock.lab.errors import LabError


@pytest.fixture(autouse=True)
def no_engine_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_engine_seen", False)


def test_the_consumer_starts_after_before_consumer_and_reads_everything() -> None:
    order: list[str] = []
    first, second = local.pipe(
        ["printf", "a tarball"], ["cat"], before_consumer=lambda: order.append("ready")
    )
    assert order == ["ready"]
    assert (first.returncode, second.returncode, second.stdout) == (0, 0, "a tarball")


def test_a_failing_before_consumer_kills_the_producer_and_is_raised() -> None:
    def refuse() -> None:
        raise LabError("no engine")

    started = time.monotonic()
    with pytest.raises(LabError, match="no engine"):
        local.pipe(["sleep", "30"], ["cat"], before_consumer=refuse)
    assert time.monotonic() - started < 20  # killed, not waited for


def test_wait_for_engine_returns_once_one_answers_and_never_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([False, False, True])
    asked: list[bool] = []

    def available() -> bool:
        asked.append(True)
        return next(answers)

    monkeypatch.setattr(local, "engine_available", available)
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    local.wait_for_engine(60)
    local.wait_for_engine(60)
    assert len(asked) == 3


def test_wait_for_engine_gives_up_after_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "engine_available", lambda: False)
    with pytest.raises(LabError, match="no Docker engine answered within 0s"):
        local.wait_for_engine(0)
