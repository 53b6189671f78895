"""The lab tests' zygote (tests/zygote.py) runs `minidock` as a fresh `python -m minidock`
would: the same output, exit status, environment, working directory and signals."""

from __future__ import annotations

import contextlib
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
    _wait_for_children(zygote, 0)  # a command of another test killed: gone
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


def test_a_command_holds_none_of_the_zygotes_sockets(zygote: Zygote, tmp_path: Path) -> None:
    """Two commands under way: the second, forked while the first's connection was open,
    shares no socket with the zygote (its listener, either request's connection) once it
    has taken its request."""
    env = state_dir(tmp_path / "state")
    serving = [
        threading.Thread(target=zygote.run, args=(["serve", "--listen", "127.0.0.1:0"], env, 60))
        for _ in range(2)
    ]
    _wait_for_children(zygote, 0)  # a command of another test killed: gone
    serving[0].start()
    pids = _wait_for_children(zygote, 1)
    serving[1].start()
    (second,) = set(_wait_for_children(zygote, 2)) - set(pids)
    try:
        assert zygote._proc is not None
        assert _sockets(zygote._proc.pid)  # the listener and the two connections
        zygotes = _sockets(zygote._proc.pid)
        deadline = time.monotonic() + 10  # a fork has them all until it takes its request
        while not _sockets(second).isdisjoint(zygotes) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sockets(second).isdisjoint(zygotes)
    finally:
        deadline = time.monotonic() + 30
        while any(t.is_alive() for t in serving) and time.monotonic() < deadline:
            for pid in _children(zygote):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)


def _wait_for_children(zygote: Zygote, n: int) -> list[int]:
    """The zygote's children, once there are `n` (reaped ones gone)."""
    deadline = time.monotonic() + 30
    while len(pids := _children(zygote)) != n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(pids) == n, pids
    return pids


def _sockets(pid: int) -> set[str]:
    """The sockets process `pid` has open (their inodes)."""
    links = (os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir())
    return {link for link in links if link.startswith("socket:")}


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
    """The pids of the commands the zygote runs now: its children that are forks of it
    (not what its imports run as it starts, e.g. asyncssh's `ldconfig`). None before it
    started: a test run alone may look before its first command has started it."""
    if zygote._proc is None:
        return []
    parent = zygote._proc.pid
    pids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(p) for p in pids if _cmdline(int(p)) == _cmdline(parent)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:  # gone meanwhile
        return b""
