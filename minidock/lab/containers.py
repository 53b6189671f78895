"""The lab's host containers, through the local Docker engine: their states and ports,
`docker exec` inside them, and the waits that need no SSH (dockerd answering, the host key
made). `minidock.lab.fleet.Lab` builds on this; SSH comes in with `minidock.lab.probe`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from minidock.lab import docker, images, local
from minidock.lab.directory import LabDir
from minidock.lab.engine_api import answers
from minidock.lab.errors import LabError
from minidock.lab.local import parallel

__all__ = ["HOST_KEY", "HostContainers", "answers"]

HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def _completed(
    argv: Sequence[str],
    command: Sequence[str],
    input: bytes | None,
    check: bool,
    timeout: float | None,
) -> subprocess.CompletedProcess[str]:
    """Run `command`, which runs `argv` somewhere, and report it as `argv`'s."""
    proc = local.run(command, input=input, check=check, timeout=timeout)
    return subprocess.CompletedProcess(list(argv), proc.returncode, proc.stdout, proc.stderr)


@dataclass
class HostContainers(LabDir):
    """The host containers `<project>-hostN` of the lab whose files LabDir describes."""

    # the hosts this process paused (Lab.kill) and has not revived: their engine cannot
    # answer, so `docker` goes straight to `docker exec`, which fails at once as before
    paused: set[str] = field(default_factory=set, repr=False, compare=False)

    def container_states(self) -> dict[str, str]:
        """Container state of every lab host by host name ("missing" when absent)."""
        hosts = self.hosts()
        if not hosts:
            return {}
        proc = local.run(docker.container_states_argv([h.container for h in hosts]), check=False)
        found = docker.parse_container_states(proc.stdout)
        return {h.name: found.get(h.container, "missing") for h in hosts}

    def container_state(self, host: str) -> str:
        return self.container_states().get(host, "missing")

    def container_addresses(self) -> dict[str, str]:
        """Each running host container's address on the lab's docker network, by host name:
        the address the other hosts (and their tasks) reach it on."""
        hosts = self.hosts()
        if not hosts:
            return {}
        argv = docker.container_addresses_argv([h.container for h in hosts])
        found = docker.parse_container_addresses(local.run(argv, check=False).stdout)
        return {h.name: found[h.container] for h in hosts if h.container in found}

    def container_port(self, host: str) -> int | None:
        """The loopback port docker publishes the host's sshd on (None when not running)."""
        proc = local.run(docker.port_argv(self.host(host).container), check=False)
        return docker.parse_loopback_port(proc.stdout)

    def exec(
        self,
        host: str,
        *argv: str,
        input: bytes | None = None,
        check: bool = True,
        timeout: float | None = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the host container (docker exec), for setup and assertions
        ("bastion" names the bastion's container)."""
        command = docker.exec_argv(self.container(host), argv, stdin=input is not None)
        return _completed(argv, command, input, check, timeout)

    def docker(
        self,
        host: str,
        *argv: str,
        input: bytes | None = None,
        check: bool = True,
        timeout: float | None = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """`docker ARGV` against the host's engine: through its socket on this machine
        (`engines_dir`) when it answers a ping within 0.5 s, which spares the `docker exec`
        (about 50 ms of CPU a command, most of the lab tests' own polling); else (a host
        this process paused, or a slow answer: it is only cheaper) inside the host, where a
        stopped or paused host, or one whose dockerd is dead, fails as it always did. Only
        for the default kind: the other kinds' engines are answered by their own CLI. What
        depends on the client's own files (`login`, then `push` or a private `pull`; a
        `build` context) goes through `exec`."""
        socket_path = self.engine_socket(host)
        direct = host not in self.paused and self.host(host).kind == images.DEFAULT_KIND
        if not direct or not answers(socket_path):
            return self.exec(host, "docker", *argv, input=input, check=check, timeout=timeout)
        return _completed(argv, docker.engine_argv(socket_path, argv), input, check, timeout)

    def sh(self, host: str, script: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell script inside the host container."""
        return self.exec(host, "sh", "-c", script, check=check)

    def wait_docker(self, hosts: Sequence[str], timeout: float = 60.0) -> None:
        """Wait until `docker info` answers inside each host (via docker exec)."""
        deadline = time.monotonic() + timeout

        def one(host: str) -> None:
            while True:
                proc = self.exec(host, *docker.info_argv(), check=False, timeout=20)
                if proc.returncode == 0:
                    return
                if time.monotonic() > deadline:
                    raise LabError(f"{host}: dockerd not answering: {proc.stderr.strip()}")
                time.sleep(0.2)

        parallel(one, hosts)

    def read_host_key(self, host: str, deadline: float) -> str:
        """The host's ed25519 public key (made by its init at first start), read inside."""
        while True:
            proc = self.exec(host, "cat", HOST_KEY, check=False)
            if proc.returncode == 0 and proc.stdout.startswith("ssh-ed25519 "):
                return proc.stdout.strip()
            if time.monotonic() > deadline:
                raise LabError(f"{host}: no ssh host key: {proc.stderr.strip()}")
            time.sleep(0.1)

    def load_images(self, host: str, wanted: Sequence[str] = images.HOST_IMAGES) -> list[str]:
        """Copy images into a host unless it has the same image id already. Returns the
        images that were loaded."""
        return images.load_images(self.host(host).container, wanted, hint=self.command("up"))
