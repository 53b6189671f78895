"""Local commands for the lab (minidock.lab.local): a pipe whose consumer starts only once
something is ready, and waiting for a Docker engine that is still being installed (a build
started by scripts/setup.sh --demo before the engine). The engine is a fake; the pipe runs
real processes (printf, cat, sleep). And `python3 -m minidock.lab.prebuild`, which setup.sh
runs before MiniDock's dependencies are installed, on the standard library alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[2]


def prebuild(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -S -m minidock.lab.prebuild ARGS` from the source tree: -S keeps every
    installed package (MiniDock's dependencies among them) off the path."""
    return subprocess.run(
        [sys.executable, "-S", "-m", "minidock.lab.prebuild", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )


def test_prebuild_runs_on_the_standard_library_alone() -> None:
    done = prebuild("nonesuch")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "lab: IMAGE_SETS: unknown image set 'nonesuch': use all, or some of "
        "workloads, ingress, names"
    ]
