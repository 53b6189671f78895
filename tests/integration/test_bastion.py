"""SSH as users set it up, on the lab: hosts named only by Host aliases in an SSH config
(HostName, User, IdentityFile, UserKnownHostsFile) and reached only through the lab's
bastion (ProxyJump); the agent in place of the key; both hops' host keys verified
(docs/ssh.md, "SSH config, jump hosts and the agent").

The hosts' HostNames are their container names, which resolve only inside the lab's Docker
network: the first test shows that the controller cannot reach them directly, and the
hosts' sshd logs show every login coming from the bastion's address.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh
import pytest

from minidock.lab import WEB5_IMAGE
from minidock.model import Host
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor, Unreachable, known_hosts_line

if TYPE_CHECKING:
    from conftest import Fleet, Minidock

pytestmark = pytest.mark.integration

WEB = f"""
[services.web]
image = "{WEB5_IMAGE}"
replicas = 4
command = ["httpd", "-f", "-p", "8080"]
health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 3 }}
"""
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def logins(fleet: Fleet, machine: str) -> list[str]:
    """The source addresses of sshd's "Accepted publickey" lines on a host or the bastion."""
    log = fleet.exec(machine, "cat", "/var/log/sshd.log").stdout
    return re.findall(r"Accepted publickey for root from (\S+) ", log)


def fingerprint(fleet: Fleet, machine: str, tmp_path: Path) -> str:
    """A machine's ed25519 host key fingerprint, as `ssh-keygen -l` prints it."""
    public = tmp_path / f"{machine}.pub"
    public.write_text(fleet.exec(machine, "cat", HOST_KEY).stdout)
    out = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(public)], capture_output=True, text=True, check=True
    ).stdout
    return out.split()[1]


def run_on(hosts: list[Host], argv: list[str]) -> tuple[list[object], int]:
    """Run argv on every host at once with one executor: (results or exceptions, how many
    SSH connections it made)."""

    async def go() -> tuple[list[object], int]:
        executor = SSHExecutor()
        try:
            found = await asyncio.gather(
                *(executor.run(h, argv) for h in hosts), return_exceptions=True
            )
            return list(found), executor.connections_opened
        finally:
            await executor.close()

    return asyncio.run(go())


def variant(fleet: Fleet, tmp_path: Path, config: str) -> Path:
    """An inventory like the lab's bastion inventory, reading SSH config text `config`."""
    path = tmp_path / "ssh_config"
    path.write_text(config)
    path.chmod(0o600)
    text = fleet.lab.bastion_inventory_path.read_text()
    target = tmp_path / "inventory.toml"
    target.write_text(text.replace('ssh_config = "../.lab/ssh_config"', f'ssh_config = "{path}"'))
    return target


def lab_config(fleet: Fleet) -> str:
    return fleet.lab.ssh_config_path.read_text()


@pytest.fixture
def through_bastion(md: Minidock) -> Minidock:
    """`md` with the cluster files naming the lab's bastion inventory."""
    md.inventory = md.fleet.lab.bastion_inventory_path
    return md


def test_the_hosts_cannot_be_reached_from_the_controller_directly(fleet: Fleet) -> None:
    hosts = load_inventory(fleet.lab.bastion_inventory_path).hosts
    assert [h.address for h in hosts] == [h.container for h in fleet.lab.hosts()]
    for host in hosts:
        with pytest.raises(socket.gaierror):
            socket.getaddrinfo(host.address, 22)
    direct = [dataclasses.replace(h, proxy_jump=()) for h in hosts]
    found, opened = run_on(direct, ["true"])
    assert opened == 0
    for host, result in zip(hosts, found, strict=True):
        assert isinstance(result, Unreachable)
        assert result.reason.startswith(f"cannot resolve {host.address}: ")
    bastion = hosts[0].proxy_jump[-1]
    assert (bastion.address, bastion.port) == ("127.0.0.1", fleet.lab.bastion().port)


def test_the_inventory_names_only_aliases_and_the_config_says_the_rest(fleet: Fleet) -> None:
    doc = tomllib.loads(fleet.lab.bastion_inventory_path.read_text())
    assert doc["defaults"] == {
        "ssh_config": "../.lab/ssh_config",
        "connect_timeout": "2s",
        "down_after": 2,
    }
    assert all(set(h) == {"name", "labels", "cpus", "memory"} for h in doc["hosts"])
    config = lab_config(fleet)
    for line in ("Host host1", "ProxyJump bastion", "User root", "IdentityFile "):
        assert f"\n{line}" in config or f"\n    {line}" in config


def test_apply_wait_status_and_ps_go_through_the_bastion(through_bastion: Minidock) -> None:
    md, fleet = through_bastion, through_bastion.fleet
    before = {name: len(logins(fleet, name)) for name in ["bastion", *fleet.hosts]}
    res = md("apply", str(md.spec(WEB)), "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "converged" in res.stdout
    tasks = md.tasks("web")
    assert sorted(t["host"] for t in tasks) == sorted(fleet.hosts)
    assert {t["health"] for t in tasks} == {"healthy"}
    addresses = {h["name"]: h["address"] for h in md.status()["hosts"]}
    assert addresses == {h.name: h.container for h in fleet.lab.hosts()}
    ps = md("ps")
    assert ps.returncode == 0, ps.stderr
    assert sorted(line.split()[1] for line in ps.stdout.splitlines()[1:]) == sorted(fleet.hosts)
    for host in fleet.hosts:
        assert [c.split()[1] for c in md.containers(host)] == ["running"]
    bastion_ips = set(fleet.exec("bastion", "hostname", "-I").stdout.split())
    for host in fleet.hosts:
        new = logins(fleet, host)[before[host] :]
        assert new, f"no login on {host}"
        assert set(new) <= bastion_ips  # every login to the host came from the bastion
    assert len(logins(fleet, "bastion")) > before["bastion"]


def test_one_bastion_login_carries_every_host(fleet: Fleet) -> None:
    hosts = load_inventory(fleet.lab.bastion_inventory_path).hosts
    before = len(logins(fleet, "bastion"))
    found, opened = run_on(list(hosts), ["hostname"])
    assert [getattr(r, "stdout", r) for r in found] == [f"{h.name}\n" for h in hosts]
    assert opened == len(hosts) + 1  # the hosts' connections and one to the bastion
    assert len(logins(fleet, "bastion")) == before + 1


def impostor_known_hosts(fleet: Fleet, tmp_path: Path, pattern: str) -> Path:
    """The lab's known_hosts with the line for `pattern` replaced by another key's."""
    impostor = asyncssh.generate_private_key("ssh-ed25519")
    lines = fleet.lab.known_hosts_path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.split()[0] != pattern]
    assert len(kept) == len(lines) - 1
    host, _, port = pattern.removeprefix("[").partition("]:")
    path = tmp_path / "known_hosts"
    path.write_text("".join(kept) + known_hosts_line(host, int(port or 22), impostor))
    return path


def with_known_hosts(fleet: Fleet, known_hosts: Path) -> str:
    config = lab_config(fleet)
    old = f'UserKnownHostsFile "{fleet.lab.known_hosts_path}"'
    assert old in config
    return config.replace(old, f'UserKnownHostsFile "{known_hosts}"')


def test_a_wrong_bastion_host_key_is_refused_before_any_login(
    through_bastion: Minidock, tmp_path: Path
) -> None:
    md, fleet = through_bastion, through_bastion.fleet
    port = fleet.lab.bastion().port
    known_hosts = impostor_known_hosts(fleet, tmp_path, f"[127.0.0.1]:{port}")
    md.inventory = variant(fleet, tmp_path, with_known_hosts(fleet, known_hosts))
    before = len(logins(fleet, "bastion"))
    expected = (
        f"host key of jump host 127.0.0.1:{port} not verifiable (changed): presented "
        f"ssh-ed25519 key {fingerprint(fleet, 'bastion', tmp_path)} does not match {known_hosts}"
    )
    found, opened = run_on(list(load_inventory(md.inventory).hosts), ["true"])
    assert opened == 0
    assert [getattr(r, "reason", r) for r in found] == [expected] * len(found)
    md("apply", str(md.spec(WEB)))
    ps = md("ps")
    for host in fleet.hosts:
        assert f"minidock: {host} not observed: {expected}" in ps.stderr.splitlines()
    assert len(logins(fleet, "bastion")) == before
    assert all(md.containers(host) == [] for host in fleet.hosts)


def test_a_wrong_host_key_behind_the_bastion_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    host1 = fleet.lab.host("host1")
    known_hosts = impostor_known_hosts(fleet, tmp_path, host1.container)
    inventory = variant(fleet, tmp_path, with_known_hosts(fleet, known_hosts))
    found, _ = run_on(list(load_inventory(inventory).hosts), ["hostname"])
    port = fleet.lab.bastion().port
    assert getattr(found[0], "reason", found[0]) == (
        f"host key of {host1.container}:22 via jump host 127.0.0.1:{port} not verifiable "
        f"(changed): presented ssh-ed25519 key {fingerprint(fleet, 'host1', tmp_path)} "
        f"does not match {known_hosts}"
    )
    assert [getattr(r, "stdout", r) for r in found[1:]] == [f"{h}\n" for h in fleet.hosts[1:]]


@pytest.fixture
def agent(fleet: Fleet, tmp_path: Path) -> Iterator[str]:
    """A real ssh-agent holding the lab's key; yields its socket."""
    socket_path = str(tmp_path / "agent.sock")
    argv = ["ssh-agent", "-D", "-a", socket_path]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        try:
            while not os.path.exists(socket_path):  # ssh-agent -D makes it, then serves
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.01)
            env = {**os.environ, "SSH_AUTH_SOCK": socket_path}
            added = subprocess.run(
                ["ssh-add", str(fleet.lab.key_path)], env=env, capture_output=True, text=True
            )
            assert added.returncode == 0, added.stderr
            yield socket_path
        finally:
            proc.kill()


def test_the_agent_logs_in_to_both_hops(
    through_bastion: Minidock, agent: str, tmp_path: Path
) -> None:
    md, fleet = through_bastion, through_bastion.fleet
    config = "".join(
        line for line in lab_config(fleet).splitlines(keepends=True) if "IdentityFile" not in line
    )
    md.inventory = variant(fleet, tmp_path, config)
    assert all(h.identity_files == () for h in load_inventory(md.inventory).hosts)
    home = tmp_path / "home"  # no default keys (~/.ssh/id_*): only the agent holds one
    home.mkdir()
    md.extra_env = {"HOME": str(home), "SSH_AUTH_SOCK": agent}
    res = md("apply", str(md.spec(WEB)), "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(md.tasks("web")) == 4
    md.extra_env["SSH_AUTH_SOCK"] = ""
    ps = md("ps")
    port = fleet.lab.bastion().port
    for host in fleet.hosts:
        assert (
            f"minidock: {host} not observed: authentication failed for user root at jump host "
            f"127.0.0.1:{port}"
        ) in ps.stderr.splitlines()


def test_a_host_off_behind_the_bastion_fails_alone(fleet: Fleet) -> None:
    hosts = load_inventory(fleet.lab.bastion_inventory_path).hosts
    off = hosts[-1]
    fleet.kill(off.name, "stop")
    found, opened = run_on(list(hosts), ["hostname"])
    assert [getattr(r, "stdout", None) for r in found[:-1]] == [f"{h.name}\n" for h in hosts[:-1]]
    assert isinstance(found[-1], Unreachable)
    port = fleet.lab.bastion().port
    assert found[-1].reason.startswith(f"{off.address}:22 via jump host 127.0.0.1:{port}: ")
    assert opened == len(hosts)  # the others' connections and the bastion's, still shared
