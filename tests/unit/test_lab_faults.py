"""`lab kill --mode pause` (minidock.lab.faults.pause) against a stand-in `docker` on PATH:
runc's "unable to freeze" (its cgroup v1 freezer gave up on a cgroup whose processes kept
appearing, and thawed it) is tried again, a bounded number of times; any other failure is
raised at once, naming the command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minidock.lab import faults
from minidock.lab.errors import LabError

FREEZE_FAILED = (
    "Error response from daemon: Cannot pause container c4ce: OCI runtime pause failed:"
    " unable to freeze: unknown"
)


def stand_in_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: list[str]) -> Path:
    """A `docker` that fails with each of `failures` in turn, then succeeds; it appends
    its arguments to the returned file on every call."""
    calls = tmp_path / "calls"
    for i, message in enumerate(failures):
        (tmp_path / f"fail{i}").write_text(message)
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f"n=$(wc -l < {calls}); f={tmp_path}/fail$((n - 1))\n"
        'if [ -e "$f" ]; then cat "$f" >&2; exit 1; fi\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(faults.time, "sleep", lambda seconds: None)
    return calls


def test_a_pause_runc_could_not_freeze_is_asked_again_until_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_docker(tmp_path, monkeypatch, [FREEZE_FAILED, FREEZE_FAILED])
    faults.pause("lab-host4")
    assert calls.read_text().splitlines() == ["pause lab-host4"] * 3


def test_a_freeze_that_never_holds_fails_after_the_bounded_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_docker(tmp_path, monkeypatch, [FREEZE_FAILED] * 10)
    with pytest.raises(LabError, match=r"`docker pause lab-host4` exited 1: .*unable to freeze"):
        faults.pause("lab-host4")
    assert len(calls.read_text().splitlines()) == faults.PAUSE_TRIES


def test_any_other_pause_failure_is_raised_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_docker(tmp_path, monkeypatch, ["Error: No such container: lab-host4"])
    with pytest.raises(LabError, match="No such container"):
        faults.pause("lab-host4")
    assert len(calls.read_text().splitlines()) == 1
