"""Faults on the real lab fleet that the fault matrix (docs/reliability.md) holds MiniDock to:
a partition under `minidock watch` (pooled connections), sshd dead while the host's tasks
run on, a changed host key, and the probe's own view of a cut-off host and of the host
ports held outside the cluster. Assertions read the hosts themselves (docker exec)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
import tomllib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import asyncssh
import tomli_w

from minidock.model import HostObservation, Inventory
from minidock.observe import observe_host
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor, known_hosts_line
from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_converge import (
    live_by_host,
    reconcile_until_converged,
    slots_of,
    up,
)

ELIGIBLE = ["host1", "host2", "host3"]  # host4 is zone c, which WORKERS excludes
ONE_PER_SLOT = Counter({1: 1, 2: 1, 3: 1, 4: 1})


def wait_for(what: str, check: object, timeout: float) -> float:
    """Poll `check()` until it is true; the seconds it took. Fails after `timeout`."""
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.25)
    return time.monotonic() - start


class Lines:
    """A subprocess's stdout lines, read in a thread as they come, each with its time."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        self._thread = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._thread.start()

    def _read(self, stdout: object) -> None:
        for line in stdout:  # type: ignore[attr-defined]
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def text(self) -> list[str]:
        return [line for _, line in self.lines]


# -- item 8: host loss under `minidock watch` ---------------------------------------------------
def test_watch_converges_through_a_partition_of_the_host_with_two_tasks(
    md: Minidock, fleet: Fleet
) -> None:
    up(md)
    lost = next(h for h, names in live_by_host(md, fleet, ELIGIBLE).items() if len(names) == 2)
    survivors = [h for h in ELIGIBLE if h != lost]
    watcher = md.popen("watch", "--interval", "2s")
    out = Lines(watcher)
    try:
        time.sleep(5)  # a few passes: every host's connection is pooled now
        assert watcher.poll() is None, watcher.stderr.read() if watcher.stderr else ""
        fleet.kill(lost, "partition")  # the host and its two tasks run on, unreachable
        took = wait_for(
            "4 tasks, one per slot, on the survivors",
            lambda: (
                slots_of([n for v in live_by_host(md, fleet, survivors).values() for n in v])
                == ONE_PER_SLOT
            ),
            timeout=90,
        )
        print(f"partition under watch: converged on the survivors after {took:.1f}s")
        fleet.revive(lost)
        wait_for("the returning host's stale tasks removed", lambda: not md.containers(lost), 60)
    finally:
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
    printed = out.text()
    assert len([line for line in printed if line.startswith("started ")]) == 2, printed
    assert any(line.startswith(f"host-down: {lost} down after 2 failed probes") for line in printed)
    everywhere = live_by_host(md, fleet, ELIGIBLE)
    assert slots_of([n for v in everywhere.values() for n in v]) == ONE_PER_SLOT
    assert "Traceback" not in err


# -- the fault matrix: sshd dead while the host's tasks run on -----------------------------------
def test_sshd_dead_replaces_only_its_task_and_the_survivor_is_removed_when_it_returns(
    md: Minidock, fleet: Fleet
) -> None:
    up(md)
    before = live_by_host(md, fleet, ELIGIBLE)
    lost = next(h for h, names in before.items() if len(names) == 1)
    fleet.kill(lost, "sshd")
    first = md("reconcile")
    assert first.returncode == 3  # one failed probe: not down yet, nothing replaced
    assert "started" not in first.stdout
    printed = reconcile_until_converged(md)
    assert len([line for line in printed if line.startswith("started ")]) == 1, printed
    assert live_by_host(md, fleet, [lost])[lost] == before[lost]  # still runs
    fleet.revive(lost)
    reconcile_until_converged(md)
    assert md.containers(lost) == []
    everywhere = live_by_host(md, fleet, ELIGIBLE)
    assert slots_of([n for v in everywhere.values() for n in v]) == ONE_PER_SLOT


# -- the fault matrix: a changed host key -----------------------------------------------------
def inventory_with_known_hosts(fleet: Fleet, directory: Path, known_hosts: Path) -> Path:
    """A copy of the lab inventory (absolute paths) that verifies against `known_hosts`."""
    doc = tomllib.loads(fleet.inventory.read_text())
    base = fleet.inventory.parent
    doc["defaults"]["identity_file"] = str((base / doc["defaults"]["identity_file"]).resolve())
    doc["defaults"]["known_hosts"] = str(known_hosts)
    path = directory / "inventory.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def accepted_logins(fleet: Fleet, host: str) -> int:
    log = fleet.exec(host, "cat", "/var/log/sshd.log", check=True).stdout
    return log.count("Accepted publickey")


def test_a_changed_host_key_is_named_with_its_fingerprint_and_no_command_reaches_the_host(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    changed = "host1"
    real_key = fleet.exec(changed, "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=True).stdout
    (tmp_path / "real.pub").write_text(real_key)
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "real.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    lab_known = (fleet.lab.known_hosts_path).read_text().splitlines(keepends=True)
    port = fleet.port(changed)
    impostor = asyncssh.generate_private_key("ssh-ed25519")
    known = tmp_path / "known_hosts"
    known.write_text(
        "".join(
            known_hosts_line("127.0.0.1", port, impostor)
            if line.startswith(f"[127.0.0.1]:{port} ")
            else line
            for line in lab_known
        )
    )
    inventory = inventory_with_known_hosts(fleet, tmp_path, known)
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f'cluster = "{md.cluster}"\ninventory = "{inventory}"\n\n'
        '[services.route]\nimage = "minidock-lab/web:5"\nreplicas = 4\n'
    )
    logins = accepted_logins(fleet, changed)

    applied = md("apply", str(spec))
    assert applied.returncode in (3, 4), applied.stdout + applied.stderr
    res = md("reconcile")  # the second failed probe: down, and the event says why
    expected = (
        f"host-down: {changed} down after 2 failed probes: host key of 127.0.0.1:{port} "
        f"not verifiable (changed): presented ssh-ed25519 key {fingerprint} does not match "
        f"{known}"
    )
    assert expected in res.stdout.splitlines(), res.stdout + res.stderr
    hosts = {h["name"]: h for h in md.status()["hosts"]}
    assert fingerprint in hosts[changed]["error"]
    assert str(known) in hosts[changed]["error"]

    assert md.containers(changed) == []  # nothing was started there
    assert accepted_logins(fleet, changed) == logins  # no session was ever opened
    assert sum(len(v) for v in live_by_host(md, fleet, ["host2", "host3", "host4"]).values()) == 4


def test_the_lab_key_is_private_so_its_inventory_loads(fleet: Fleet) -> None:
    assert fleet.lab.key_path.stat().st_mode & 0o777 == 0o600
    assert len(load_inventory(fleet.inventory).hosts) == len(fleet.hosts)


# -- the probe itself: a cut-off host, and the ports held outside the cluster --------------------
def test_a_probe_of_a_partitioned_host_fails_within_its_probe_timeout_and_heals_at_once(
    fleet: Fleet, lab_inventory: Inventory
) -> None:
    host = replace(lab_inventory.hosts[0], probe_timeout=1.0)

    async def main() -> None:
        executor = SSHExecutor()
        try:
            assert (await observe_host(executor, host, "itest")).ok  # pooled from here
            fleet.kill(host.name, "partition")
            start = time.monotonic()
            cut = await observe_host(executor, host, "itest")
            took = time.monotonic() - start
            assert (cut.ok, cut.error) == (False, "docker ps timed out after 1s")
            assert took < 6, took  # the probe bound, not the 60 s command timeout
            fleet.revive(host.name)
            assert (await observe_host(executor, host, "itest")).ok  # at once: a new connection
            assert executor.connections_opened == 2
        finally:
            await executor.close()

    try:
        asyncio.run(main())
    finally:
        fleet.revive(host.name)


UDP_LISTENER = (
    "setsid perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalPort => 15454,"
    " Proto => q(udp)) or die $!; sleep 120' </dev/null >/dev/null 2>&1 & echo $!"
)

# Waits (up to 20 s) until 15454/udp (hex 3C5E) is bound on the host.
UDP_BOUND = (
    "for i in $(seq 200); do grep -qi ':3C5E ' /proc/net/udp /proc/net/udp6 && exit 0;"
    " sleep 0.1; done; exit 1"
)


def test_the_probe_sees_ports_held_outside_the_cluster(
    fleet: Fleet, lab_inventory: Inventory
) -> None:
    host = lab_inventory.hosts[0]
    labels = [
        f"minidock.{k}={v}"
        for k, v in (("cluster", "itest"), ("service", "web"), ("slot", 1), ("task", "t1"))
    ]
    mine = ["--name", "web.1.t1", *(a for label in labels for a in ("--label", label))]
    mine += ["--label", "minidock.spec=x", "-p", "18080:8080", "minidock-lab/web:5"]
    fleet.docker(host.name, "run", "-d", *mine, check=True)
    fleet.docker(
        host.name,
        "run",
        "-d",
        "--name",
        "bystander-ports",
        "-p",
        "18081:8080",
        "-p",
        "15353:5353/udp",
        "minidock-lab/web:5",
        check=True,
    )
    pid = fleet.exec(host.name, "sh", "-c", UDP_LISTENER, check=True).stdout.strip()
    fleet.exec(host.name, "sh", "-c", UDP_BOUND, check=True)  # perl may not have bound it yet
    try:

        async def main() -> HostObservation:
            executor = SSHExecutor()
            try:
                return await observe_host(executor, host, "itest", ports=True)
            finally:
                await executor.close()

        seen = asyncio.run(main())
    finally:
        fleet.docker(host.name, "rm", "-f", "bystander-ports")
        fleet.exec(host.name, "kill", pid)
    assert seen.ok
    held = seen.ports_in_use
    assert {"22/tcp", "18081/tcp", "15353/udp", "15454/udp"} <= held, sorted(held)
    assert "18080/tcp" not in held  # the cluster's own task: counted through its Container
    (task,) = seen.containers
    assert task.host_ports == ("18080/tcp",)
    print(json.dumps(sorted(held)))
