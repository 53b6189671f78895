"""`sudo = true`: every docker command a host's user runs goes through `sudo -n`, made in
the one place an argv becomes a command line (minidock.ssh), and run here by the local sh
with a `sudo` and a `docker` on PATH that say how they were called."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from minidock.commands.caddy import proxy_probe_argv
from minidock.commands.facts import events_argv, ps_argv, version_argv
from minidock.observe import probe_steps
from minidock.spec import SpecError, load_inventory
from minidock.ssh import Step, as_user, batch_script, parse_batch, quoted

HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'


def test_a_docker_argv_runs_through_sudo_without_a_password_prompt() -> None:
    assert as_user(ps_argv("c"), sudo=True) == ["sudo", "-n", *ps_argv("c")]
    assert as_user(ps_argv("c"), sudo=False) == ps_argv("c")
    assert as_user(["cat", "/proc/net/tcp"], sudo=True) == ["cat", "/proc/net/tcp"]
    assert (
        quoted(as_user(["docker", "logs", "it's"], sudo=True)) == "sudo -n docker logs 'it'\"'\"'s'"
    )


@pytest.fixture
def fake_bin(tmp_path: Path) -> dict[str, str]:
    """A PATH whose `sudo` prints `sudo ARGS` then runs them, and whose `docker` prints
    `docker ARGS`: what ran, and through what, on stdout."""
    for name, body in (
        ("sudo", 'echo "sudo $*"\n[ "$1" = -n ] && shift\nexec "$@"\n'),
        ("docker", 'echo "docker $*"\n'),
    ):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def run_sh(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return done.stdout


def test_a_scripts_docker_and_an_exec_of_a_docker_argv_run_through_sudo(
    fake_bin: dict[str, str],
) -> None:
    sudo, docker = run_sh(as_user(events_argv("c"), sudo=True), fake_bin).splitlines()
    assert sudo.startswith("sudo -n docker events --filter type=container")
    assert docker.startswith("docker events --filter type=container")
    assert " --since " in docker  # the wrapper's own words reach docker
    proxy = run_sh(as_user(proxy_probe_argv("c"), sudo=True), fake_bin)
    assert proxy.startswith("sudo -n docker inspect -f")


def test_a_batch_on_a_sudo_host_runs_each_docker_step_through_sudo(
    fake_bin: dict[str, str],
) -> None:
    steps = [*probe_steps("c", ports=False), Step(("cat", "/dev/null"))]
    marker = "@@m-1"
    script = batch_script(steps, marker, sudo=True)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=fake_bin)
    found = parse_batch(done.stdout, done.stderr, marker, len(steps))
    assert found is not None
    ps, version, inspect, cat = found
    assert ps is not None
    assert ps.stdout.splitlines()[0] == "sudo -n " + " ".join(ps_argv(None))
    assert version is not None
    assert version.stdout.startswith("sudo -n " + " ".join(version_argv()[:3]))
    assert inspect is None  # ps listed no id
    assert cat is not None
    assert cat.stdout == ""


def test_sudo_is_set_in_defaults_or_per_host(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(
        "[defaults]\nsudo = true\n" + HOST + "sudo = false\n"
        '[[hosts]]\nname = "host2"\naddress = "10.0.0.12"\n'
    )
    one, two = load_inventory(tmp_path / "inventory.toml").hosts
    assert (one.sudo, two.sudo) == (False, True)
    (tmp_path / "inventory.toml").write_text(HOST)
    assert not load_inventory(tmp_path / "inventory.toml").hosts[0].sudo


def test_a_sudo_that_is_not_a_boolean_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(HOST + 'sudo = "yes"\n')
    with pytest.raises(SpecError) as failed:
        load_inventory(tmp_path / "inventory.toml")
    assert "\n" not in str(failed.value)
    assert "hosts[0].sudo" in str(failed.value)
    assert "a boolean" in str(failed.value)
