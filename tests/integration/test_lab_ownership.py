"""Two labs in two directories (issue 14): a `lab` command from one lab's root with the
other lab's `--project` is refused (exit 2, one line) and changes nothing in either lab;
each lab's own `down` removes that lab only. Real labs, the real `minidock` command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.lab import Lab, remove_project
from tests.integration.conftest import HOSTNAME_LABEL, PID_LABEL, PROJECT_PREFIX

if TYPE_CHECKING:
    from conftest import Fleet


def lab_command(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`minidock lab ARGS`, run from `root` as an operator in that directory would."""
    return subprocess.run(
        [sys.executable, "-m", "minidock", "lab", *args],
        cwd=root,
        env={**os.environ, "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def files_of(lab: Lab) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(lab.root.rglob("*")) if p.is_file()}


def assert_refused(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_a_lab_command_with_the_other_labs_project_is_refused_and_deletes_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    other = fleet.lab  # lab B: the session's lab, in its own directory
    mine = Lab(
        tmp_path / "a",
        project=f"{PROJECT_PREFIX}{os.getpid()}-a",
        labels={PID_LABEL: str(os.getpid()), HOSTNAME_LABEL: socket.gethostname()},
    )
    try:
        mine.up(1)
        before = files_of(mine)
        assert {mine.inventory_path, mine.known_hosts_path, mine.state_path} <= set(before)

        down = lab_command(mine.root, "--project", other.project, "down")
        # issue 27 item 5: the other lab is named as another checkout's, with no command
        # to operate it; the command given reaches this checkout's own lab
        assert_refused(
            down,
            f"compose project '{other.project}' belongs to another checkout's lab"
            f" (in {other.root})",
            f"this checkout's lab is project '{mine.project}':"
            f" `minidock lab --project {mine.project} down`",
        )
        assert "--root" not in down.stderr
        kill = lab_command(mine.root, "--project", other.project, "kill", "host1")
        assert_refused(kill, f"`minidock lab --project {mine.project} kill host1`")
        assert "--root" not in kill.stderr
        # from lab A's root, the default project is not lab A's: the hint names A's project
        assert_refused(
            lab_command(mine.root, "down"), f"`minidock lab --project {mine.project} down`"
        )

        assert files_of(mine) == before
        assert other.inventory_path.exists()
        assert other.state_path.exists()
        assert other.container_state("host1") == "running"
        for host in fleet.hosts:
            assert fleet.ssh(host, "docker ps").exit_status == 0
        assert all(row.ssh and row.docker for row in mine.status())

        # lab A's own down removes lab A's containers and files, and nothing of lab B
        own = lab_command(mine.root, "--project", mine.project, "down")
        assert own.returncode == 0, own.stderr
        for gone in (mine.inventory_path, mine.known_hosts_path, mine.state_path):
            assert not gone.exists()
        assert mine.key_path.exists()
        assert mine.container_states() == {}
        for host in fleet.hosts:
            assert fleet.ssh(host, "docker ps").exit_status == 0
    finally:
        remove_project(mine.project)


def test_up_takes_over_a_project_another_roots_lab_left_stopped(tmp_path: Path) -> None:
    """A lab whose containers all stopped (a reboot; CI once started its engine on a disk
    that held the demo's project so) is gone: `up` of that project from another root
    removes them, says so in one line, and starts its own; the other root's files stay."""
    project = f"{PROJECT_PREFIX}{os.getpid()}-t"
    labels = {PID_LABEL: str(os.getpid()), HOSTNAME_LABEL: socket.gethostname()}
    gone = Lab(tmp_path / "gone", project=project, labels=labels)
    try:
        gone.up(1, sets=("ingress",))
        left = files_of(gone)
        ids = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert ids
        running = lab_command(tmp_path, "--root", "new", "--project", project, "up")
        assert_refused(running, "belongs to another checkout's lab")  # still runs: refused
        subprocess.run(["docker", "stop", "-t", "1", *ids], check=True, capture_output=True)

        new = tmp_path / "new"
        taken = lab_command(
            tmp_path, "--root", "new", "--project", project, "up", "--hosts", "1",
            "--images", "ingress",
        )  # fmt: skip
        assert taken.returncode == 0, taken.stderr
        assert taken.stderr.splitlines() == [
            f"lab: removed compose project '{project}''s stopped containers, left by the lab"
            f" in {gone.root} (none of them ran)"
        ]
        mine = Lab(new, project=project)
        assert mine.container_state("host1") == "running"
        assert all(row.ssh and row.docker for row in mine.status())
        assert files_of(gone) == left  # the other root's files are its own
    finally:
        remove_project(project)
