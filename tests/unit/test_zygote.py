"""The lab tests' zygote (tests/zygote.py) runs `minidock` as a fresh `python -m minidock`
would: the same output, exit status, environment, working directory and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.zygote import Zygote


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def fresh(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minidock", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def state_dir(path: Path) -> dict[str, str]:
    path.mkdir(mode=0o700)
    return {**os.environ, "MINIDOCK_STATE": str(path)}


@pytest.mark.parametrize(
    "args",
    [["--version"], ["validate", "nowhere.toml"], ["events"], ["bogus-command"], ["--help"]],
)
def test_a_command_through_the_zygote_is_what_a_fresh_interpreter_prints_and_exits(
    zygote: Zygote, tmp_path: Path, args: list[str]
) -> None:
    env = state_dir(tmp_path / "state")
    ours, theirs = zygote.run(args, env, 60), fresh(args, env)
    assert (ours.returncode, ours.stdout, ours.stderr) == (
        theirs.returncode,
        theirs.stdout,
        theirs.stderr,
    )
    assert ours.args == [sys.executable, "-m", "minidock", *args]


def test_each_command_has_its_own_environment_and_working_directory(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "work" / "here.toml"
    spec.parent.mkdir()
    spec.write_text('cluster = "x"\ninventory = "missing.toml"\n')
    monkeypatch.chdir(spec.parent)
    there = zygote.run(["validate", "here.toml"], state_dir(tmp_path / "a"), 60)
    assert "missing.toml" in there.stderr  # the relative path read from the cwd
    monkeypatch.chdir(tmp_path)
    elsewhere = zygote.run(["validate", "here.toml"], state_dir(tmp_path / "b"), 60)
    assert "here.toml: file not found" in elsewhere.stderr
    bad = {**os.environ, "MINIDOCK_STATE": str(tmp_path / "nope")}
    assert (
        zygote.run(["events"], bad, 60).stderr
        != zygote.run(["events"], state_dir(tmp_path / "c"), 60).stderr
    )


def test_a_command_past_its_timeout_is_killed_and_the_timeout_raised(
    zygote: Zygote, tmp_path: Path
) -> None:
    env = state_dir(tmp_path / "state")
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        zygote.run(["serve", "--listen", "127.0.0.1:0"], env, 3)
    assert "serving http://127.0.0.1:" in str(raised.value.output)
    assert zygote.run(["--version"], env, 60).returncode == 0  # the zygote goes on


def test_a_command_killed_by_a_signal_has_the_signal_as_its_status(
    zygote: Zygote, tmp_path: Path
) -> None:
    env = state_dir(tmp_path / "state")
    found: list[subprocess.CompletedProcess[str]] = []
    serving = threading.Thread(
        target=lambda: found.append(zygote.run(["serve", "--listen", "127.0.0.1:0"], env, 60))
    )
    serving.start()
    deadline = time.monotonic() + 30
    pids: list[int] = []
    while not pids and time.monotonic() < deadline:
        pids = _children(zygote)  # the serve only: this module's other commands have ended
        time.sleep(0.1)
    assert pids, "serve did not start"
    os.kill(pids[0], signal.SIGKILL)
    serving.join(30)
    assert [r.returncode for r in found] == [-signal.SIGKILL]


def test_commands_run_side_by_side(zygote: Zygote, tmp_path: Path) -> None:
    env = state_dir(tmp_path / "state")
    results: list[subprocess.CompletedProcess[str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(zygote.run(["--version"], env, 60)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8
    assert {(r.returncode, r.stdout) for r in results} == {(0, results[0].stdout)}


def _children(zygote: Zygote) -> list[int]:
    """The pids of the zygote's children now."""
    assert zygote._proc is not None
    children = Path(f"/proc/{zygote._proc.pid}/task/{zygote._proc.pid}/children")
    return [int(p) for p in children.read_text().split()]
