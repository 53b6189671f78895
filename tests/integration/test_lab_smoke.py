"""The lab fleet as the controller sees it: SSH with only the generated inventory, docker on
every host, the workload images, and each `lab kill` mode's fault (docs/lab.md)."""

from __future__ import annotations

import asyncio
import datetime
import socket
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
import pytest
from typer.testing import CliRunner

from minidock.lab import (
    CRASH_IMAGE,
    WEB5_IMAGE,
    WEB6_IMAGE,
    WEB_BROKEN_IMAGE,
    WORKLOAD_IMAGES,
    docker,
    lab_app,
    local,
)
from minidock.lab.containers import answers
from minidock.lab.faults import CLEAN_LABELS, heal

if TYPE_CHECKING:
    from conftest import Fleet

pytestmark = pytest.mark.integration

SMOKE = "minidock.cluster=smoke"  # the fleet fixture removes containers with this label key


def inventory_targets(path: Path) -> dict[str, dict[str, Any]]:
    """asyncssh.connect arguments per host, from the inventory file alone."""
    doc = tomllib.loads(path.read_text())
    defaults, base = doc["defaults"], path.parent
    return {
        h["name"]: {
            "host": h["address"],
            "port": h.get("port", defaults.get("port", 22)),
            "username": h.get("user", defaults["user"]),
            "client_keys": [str(base / defaults["identity_file"])],
            "known_hosts": str(base / defaults["known_hosts"]),
            "connect_timeout": defaults["connect_timeout"],
            "config": [],  # nothing from ~/.ssh/config
            "agent_path": None,  # no keys from an agent
        }
        for h in doc["hosts"]
    }


async def ssh_run(target: dict[str, Any], command: str) -> asyncssh.SSHCompletedProcess:
    async with asyncssh.connect(**target) as conn:
        return await conn.run(command, check=False)


def attempt(fleet: Fleet, host: str, **overrides: Any) -> tuple[BaseException | None, float]:
    """Try an SSH session + `docker ps`; return (exception or None, seconds taken)."""
    started = time.monotonic()
    try:
        result = fleet.ssh(host, "docker ps", **overrides)
    except (OSError, asyncssh.Error) as exc:
        return exc, time.monotonic() - started
    assert result.exit_status == 0, result.stderr
    return None, time.monotonic() - started


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def serves(fleet: Fleet, host: str, container: str) -> str:
    proc = fleet.docker(host, "exec", container, "wget", "-qO-", "http://127.0.0.1:8080/")
    return proc.stdout if proc.returncode == 0 else ""


def container_state(fleet: Fleet, host: str, container: str) -> str:
    proc = fleet.docker(host, "inspect", "-f", "{{.State.Status}}", container)
    return proc.stdout.strip()


def ran_for(fleet: Fleet, host: str, container: str) -> float:
    """Seconds from a finished container's start to its exit, by the engine's clock."""
    got = fleet.docker(
        host, "inspect", "-f", "{{.State.StartedAt}} {{.State.FinishedAt}}", container, check=True
    )

    def moment(stamp: str) -> datetime.datetime:  # RFC 3339 with nanoseconds
        whole, _, fraction = stamp.rstrip("Z").partition(".")
        return datetime.datetime.fromisoformat(f"{whole}.{fraction[:6]:0<6}+00:00")

    started, finished = (moment(s) for s in got.stdout.split())
    return (finished - started).total_seconds()


def assert_revived(fleet: Fleet, host: str) -> None:
    fleet.revive(host)
    exc, _ = attempt(fleet, host)
    assert exc is None, exc


# -- the inventory and SSH ---------------------------------------------------------------------
def test_inventory_describes_the_fleet(fleet: Fleet) -> None:
    doc = tomllib.loads(fleet.inventory.read_text())
    assert doc["defaults"]["user"] == "root"
    assert doc["defaults"]["connect_timeout"] == "2s"
    assert doc["defaults"]["down_after"] == 2
    names = [h["name"] for h in doc["hosts"]]
    assert names == fleet.hosts == [f"host{i}" for i in range(1, len(names) + 1)]
    zones = [h["labels"]["zone"] for h in doc["hosts"]]
    assert zones == ["a", "a", "b", "c", "a", "b", "c"][: len(names)]
    assert doc["hosts"][0]["port"] == fleet.services.port_for("host1", 22)  # pytest-docker's view
    for h in doc["hosts"]:
        assert h["address"] == "127.0.0.1"
        published = fleet.lab.container_port(h["name"])
        assert h["port"] == published  # what docker published
        assert h["cpus"] == 2
        assert h["memory"] == "2GiB"


def test_every_host_answers_ssh_and_docker_from_the_inventory(fleet: Fleet) -> None:
    targets = inventory_targets(fleet.inventory)

    async def main() -> list[asyncssh.SSHCompletedProcess]:
        return await asyncio.gather(
            *(ssh_run(t, "docker ps && docker image ls") for t in targets.values())
        )

    for name, result in zip(targets, asyncio.run(main()), strict=True):
        assert result.exit_status == 0, (name, result.stderr)
        listing = str(result.stdout)
        for image in WORKLOAD_IMAGES:
            repo, tag = image.split(":")
            assert any(line.split()[:2] == [repo, tag] for line in listing.splitlines()), (
                name,
                image,
            )


def test_web5_runs_and_serves_on_every_host(fleet: Fleet) -> None:
    targets = inventory_targets(fleet.inventory)
    run = (
        f"docker run -d --name smoke-web --label {SMOKE} -p 8080:8080 --cpus 0.5"
        f" --memory 256m {WEB5_IMAGE}"
    )
    fetch = "docker exec smoke-web wget -qO- http://127.0.0.1:8080/"

    async def one(target: dict[str, Any]) -> str:
        async with asyncssh.connect(**target) as conn:
            await conn.run(run, check=True)
            page = ""
            for _ in range(50):
                result = await conn.run(fetch, check=False)
                if result.exit_status == 0:
                    page = str(result.stdout)
                    break
                await asyncio.sleep(0.1)
            await conn.run("docker rm -f smoke-web", check=True)
            left = await conn.run("docker ps -aq --filter name=smoke-web", check=True)
            assert str(left.stdout).strip() == ""
            return page

    async def main() -> list[str]:
        return await asyncio.gather(*(one(t) for t in targets.values()))

    assert asyncio.run(main()) == ["web 5\n"] * len(targets)


def test_workload_images_do_what_their_names_say(fleet: Fleet) -> None:
    host = "host1"
    health = [
        "--health-cmd", "wget -qO- http://127.0.0.1:8080/",
        "--health-interval", "1s", "--health-timeout", "1s", "--health-retries", "1",
    ]  # fmt: skip
    fleet.docker(host, "run", "-d", "--name", "w6", "--label", SMOKE, WEB6_IMAGE, check=True)
    fleet.docker(host, "run", "-d", "--name", "w5h", "--label", SMOKE, *health, WEB5_IMAGE)
    fleet.docker(host, "run", "-d", "--name", "wb", "--label", SMOKE, *health, WEB_BROKEN_IMAGE)
    fleet.docker(host, "run", "-d", "--name", "crash", "--label", SMOKE, CRASH_IMAGE, check=True)

    assert eventually(lambda: serves(fleet, host, "w6") == "web 6\n")
    # crash:1 exits 1 after about a second
    code = fleet.docker(host, "wait", "crash", check=True).stdout.strip()
    assert code == "1"
    assert 0.8 < ran_for(fleet, host, "crash") < 10  # by the engine's own clock

    def health_of(name: str) -> str:
        return fleet.docker(host, "inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip()

    assert eventually(lambda: health_of("w5h") == "healthy", timeout=15)
    assert eventually(lambda: health_of("wb") == "unhealthy", timeout=15)
    # web:broken keeps running and never serves
    assert container_state(fleet, host, "wb") == "running"
    assert serves(fleet, host, "wb") == ""
    # the images' init passes SIGTERM on: `docker stop` does not wait out its timeout and
    # SIGKILL the task (exit 137); the server ends on the signal it was sent (143)
    fleet.docker(host, "stop", "-t", "30", "w6", check=True)
    exited = fleet.docker(host, "inspect", "-f", "{{.State.ExitCode}}", "w6", check=True)
    assert exited.stdout.strip() != "137"


def test_unknown_or_changed_host_key_is_rejected(fleet: Fleet, tmp_path: Path) -> None:
    host1, host2 = fleet.lab.host("host1"), fleet.lab.host("host2")
    stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    host2_key = fleet.exec("host2", "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=True).stdout
    cases = {
        "wrong key": f"[127.0.0.1]:{host1.port} {stranger}",
        "another host's key": f"[127.0.0.1]:{host1.port} {host2_key}",
        "no entry": f"[127.0.0.1]:{host2.port} {host2_key}",
    }
    for case, line in cases.items():
        known_hosts = tmp_path / case.replace(" ", "-")
        known_hosts.write_text(line.strip() + "\n")
        exc, _ = attempt(fleet, "host1", known_hosts=str(known_hosts))
        assert isinstance(exc, asyncssh.HostKeyNotVerifiable), (case, exc)
    # and the pinned file is accepted
    exc, _ = attempt(fleet, "host1")
    assert exc is None


# -- faults ------------------------------------------------------------------------------------
def test_kill_pause_hangs_ssh_after_tcp_connects(fleet: Fleet) -> None:
    host = "host2"
    fleet.kill(host, "pause")
    assert fleet.lab.container_state(host) == "paused"
    with socket.create_connection(("127.0.0.1", fleet.port(host)), timeout=1):
        pass  # TCP is accepted (by docker's port proxy)
    exc, took = attempt(fleet, host)
    assert isinstance(exc, TimeoutError), exc
    assert 1.5 < took < 5
    # its engine's socket on this machine connects but never answers; fleet.docker goes
    # through docker exec, which says why at once
    assert not answers(fleet.lab.engine_socket(host))
    assert host in fleet.lab.paused
    paused = fleet.docker(host, "ps")
    assert paused.returncode != 0
    assert "is paused" in paused.stderr
    assert_revived(fleet, host)
    assert host not in fleet.lab.paused
    assert answers(fleet.lab.engine_socket(host))


def test_each_hosts_engine_answers_on_its_socket_on_this_machine(fleet: Fleet) -> None:
    """`docker -H unix://.lab/engines/HOST/docker.sock` is the host's own engine: it sees
    what `docker exec HOST docker` sees, and is there again after dockerd is killed and
    revived (the revived dockerd listens on it too)."""
    host = "host1"
    fleet.docker(host, "run", "-d", "--name", "task", "--label", SMOKE, WEB5_IMAGE, check=True)
    engine = fleet.lab.engine_socket(host)
    direct = local.run(docker.engine_argv(engine, ["ps", "-q", "--no-trunc"])).stdout
    inside = fleet.exec(host, "docker", "ps", "-q", "--no-trunc", check=True).stdout
    assert direct.split()  # the task
    assert direct.split() == inside.split()
    fleet.kill(host, "dockerd")
    assert not answers(engine)
    assert_revived(fleet, host)
    assert answers(engine)
    assert local.run(docker.engine_argv(engine, ["ps", "-q", "--no-trunc"])).stdout == direct


def test_kill_stop_refuses_then_boots_with_its_state(fleet: Fleet) -> None:
    host = "host3"
    port = fleet.port(host)
    fleet.docker(host, "run", "-d", "--name", "always", "--restart", "always",
                 "--label", SMOKE, WEB5_IMAGE, check=True)  # fmt: skip
    fleet.docker(host, "run", "-d", "--name", "plain", "--label", SMOKE, WEB5_IMAGE, check=True)
    fleet.kill(host, "stop")
    assert fleet.lab.container_state(host) == "exited"
    exc, took = attempt(fleet, host)
    assert isinstance(exc, ConnectionRefusedError), exc
    assert took < 1
    assert_revived(fleet, host)
    # a stopped-then-started host is a rebooted server: same port and host key, its images
    # and containers kept; restart-policy containers run again, others stay exited
    assert fleet.port(host) == port
    assert fleet.lab.container_port(host) == port
    assert eventually(lambda: container_state(fleet, host, "always") == "running")
    assert container_state(fleet, host, "plain") == "exited"
    assert eventually(lambda: serves(fleet, host, "always") == "web 5\n")


def test_kill_sshd_resets_at_once_while_docker_lives(fleet: Fleet) -> None:
    host = "host2"
    fleet.kill(host, "sshd")
    assert fleet.lab.container_state(host) == "running"
    exc, took = attempt(fleet, host)
    assert isinstance(exc, ConnectionResetError | ConnectionRefusedError | asyncssh.ConnectionLost)
    assert took < 1
    assert fleet.docker(host, "info").returncode == 0
    assert_revived(fleet, host)


def test_kill_dockerd_keeps_ssh_and_fails_docker(fleet: Fleet) -> None:
    host = "host1"
    fleet.docker(host, "run", "-d", "--name", "task", "--label", SMOKE, WEB5_IMAGE, check=True)
    fleet.kill(host, "dockerd")
    result = fleet.ssh(host, "docker ps")
    assert result.exit_status != 0
    assert "Cannot connect to the Docker daemon" in str(result.stderr)
    assert_revived(fleet, host)
    # live-restore: the task ran on through the daemon's death
    assert container_state(fleet, host, "task") == "running"
    assert serves(fleet, host, "task") == "web 5\n"


def test_kill_partition_times_out_while_host_and_tasks_run(fleet: Fleet) -> None:
    host = "host3"
    fleet.docker(host, "run", "-d", "--name", "task", "--label", SMOKE, WEB5_IMAGE, check=True)
    fleet.kill(host, "partition")
    exc, took = attempt(fleet, host)
    assert isinstance(exc, TimeoutError), exc
    assert 1.5 < took < 5
    assert fleet.lab.container_state(host) == "running"
    assert eventually(lambda: serves(fleet, host, "task") == "web 5\n")
    assert_revived(fleet, host)


def test_revive_heals_several_faults_at_once(fleet: Fleet) -> None:
    host = fleet.hosts[-1]
    for mode in ("partition", "dockerd", "sshd", "pause"):
        fleet.kill(host, mode)  # type: ignore[arg-type]
    assert_revived(fleet, host)
    rules = fleet.exec(host, "iptables", "-S", "INPUT", check=True).stdout
    assert "--dport 22" not in rules


def test_a_reset_removes_what_minidock_made_and_ends_every_fault(fleet: Fleet) -> None:
    """The reset between two tests: every container carrying one of MiniDock's labels is
    removed (through the engine's socket), others stay; every fault is ended and reported
    by the heal (a host without one is not waited for), and every host answers SSH and a
    new container can be created on it."""
    first, second, third, fourth = fleet.hosts[:4]
    for label in CLEAN_LABELS:
        fleet.docker(first, "create", "--label", f"{label}=x", WEB5_IMAGE, check=True)
    kept = fleet.docker(first, "create", "--label", "other=x", WEB5_IMAGE, check=True)
    assert not heal(fleet.lab, fleet.lab.host(first), "running")  # nothing to end
    for mode in ("partition", "dockerd", "sshd", "pause"):
        fleet.kill(second, mode)  # type: ignore[arg-type]
    fleet.kill(third, "disk")
    fleet.kill(fourth, "slow")
    assert heal(fleet.lab, fleet.lab.host(fourth), "running")  # the slow link ended
    fleet.kill(fourth, "slow")
    fleet.reset()
    left = fleet.docker(first, "ps", "-aq", "--no-trunc", check=True).stdout.split()
    assert left == [kept.stdout.strip()]
    fleet.docker(first, "rm", kept.stdout.strip(), check=True)
    assert all(status.ssh and status.docker for status in fleet.lab.status())
    for host in (second, third, fourth):
        fleet.docker(host, "create", "--label", SMOKE, WEB5_IMAGE, check=True)
    assert (
        fleet.exec(fourth, "tc", "qdisc", "show", "dev", "eth0", check=True).stdout.split()[1]
        != "tbf"
    )


def test_cli_status_kill_revive(fleet: Fleet) -> None:
    runner = CliRunner()
    base = ["--root", str(fleet.lab.root), "--project", fleet.lab.project]
    invoke = runner.invoke

    status = invoke(lab_app, [*base, "status"])
    assert status.exit_code == 0, status.output
    for name in fleet.hosts:
        assert name in status.output
    killed = invoke(lab_app, [*base, "kill", "host2", "--mode", "sshd"])
    assert killed.exit_code == 0, killed.output
    down = invoke(lab_app, [*base, "status"])
    assert down.exit_code == 0
    row = next(line for line in down.output.splitlines() if "host2" in line)
    assert " no " in row
    revived = invoke(lab_app, [*base, "revive", "host2"])
    assert revived.exit_code == 0, revived.output
    unknown = invoke(lab_app, [*base, "kill", "nosuchhost"])
    assert unknown.exit_code == 2
    assert "nosuchhost" in unknown.output
