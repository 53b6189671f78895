"""scripts/engine.sh starts an engine past a pid file left by one that is gone.

CI's stop 52 failed here: its machine came from an image taken while dockerd ran, so
/var/run/docker.pid named a pid that a live process had by then, and dockerd refused to
start ("pid file found"). The script runs with stand-ins on PATH for the engine's parts
(`docker`, `dockerd`, `pgrep`, `dpkg-query`), because the real engine of this machine must
stay up; the `dockerd` stand-in refuses exactly as dockerd does when the pid in its pid file
is alive.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "engine.sh"

STANDINS = {
    # `docker info` answers once the stand-in daemon has started.
    "docker": '[ -e "$STATE/started" ]',
    # As dockerd: a pid file whose pid is alive stops the start.
    "dockerd": (
        'if [ -e "$DOCKERD_PID" ] && kill -0 "$(cat "$DOCKERD_PID")" 2>/dev/null; then\n'
        '  echo "failed to start daemon: pid file found" >&2; exit 1\n'
        "fi\n"
        'touch "$STATE/started"'
    ),
    # Whether a daemon runs is what the test says.
    "pgrep": 'case " $* " in *" $RUNNING "*) exit 0 ;; *) exit 1 ;; esac',
    "dpkg-query": "echo 'install ok installed'",
}


def run_script(tmp_path: Path, running: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """engine.sh with a stale-looking pid file naming this (live) test process."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in STANDINS.items():
        standin = bin_dir / name
        standin.write_text(f"#!/bin/sh\n{body}\n")
        standin.chmod(0o755)
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STATE": str(state),
        "RUNNING": running,
        "DOCKERD_PID": str(pidfile),
        "MINIDOCK_DOCKERD_PIDFILE": str(pidfile),
        "MINIDOCK_CONTAINERD_PIDFILE": str(tmp_path / "containerd.pid"),
        "MINIDOCK_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
        "MINIDOCK_ENGINE_TIMEOUT": "3",
    }
    result = subprocess.run(
        ["bash", str(SCRIPT), "--demo"], env=env, capture_output=True, text=True, timeout=30
    )
    return result, pidfile


@pytest.mark.skipif(os.geteuid() != 0, reason="engine.sh runs apt and dockerd as root")
def test_a_pid_file_left_by_a_gone_engine_is_removed_and_the_engine_starts(
    tmp_path: Path,
) -> None:
    result, pidfile = run_script(tmp_path, running="nothing")
    assert result.returncode == 0, result.stderr
    assert "removing the stale" in result.stderr
    assert not pidfile.exists()
    assert "engine up" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="engine.sh runs apt and dockerd as root")
def test_the_pid_file_of_a_running_dockerd_is_left_alone(tmp_path: Path) -> None:
    result, pidfile = run_script(tmp_path, running="dockerd")
    assert result.returncode == 1
    assert "dockerd is running but not answering yet" in result.stderr
    assert pidfile.exists()
