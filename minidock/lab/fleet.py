"""The lab fleet: `Lab` brings a compose project of SSH + Docker host containers up and
down, provisions them, reports on them and makes their faults.

`Lab(root, project)` owns three things: the lab directory `root/.lab/`, the inventory
`root/inventory/lab.toml` (both `minidock.lab.directory`) and the compose project of host
containers `<project>-host1`.. (`minidock.lab.compose`, `minidock.lab.containers`). Each
host runs sshd and its own dockerd (Docker-in-Docker); PID 1 is a small shell, so either
daemon can be killed while the host stays up. Every command first checks that this lab
owns the compose project and the files (`minidock.lab.ownership`). The CLI
(`minidock.lab.cli`) and the integration tests use this class. See docs/lab.md.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from minidock.lab import docker, faults, images, local, probe
from minidock.lab.acme import ACME, LabAcme, pebble_installed, prepare_acme, provision_acme
from minidock.lab.bastion import (
    BASTION,
    INSTALL_KEY,
    INSTALL_KEYS,
    provision_bastion,
    wait_through_bastion,
)
from minidock.lab.builds import HOST, Builds, build_order
from minidock.lab.compose import compose_document, compose_text, detect_dind_mode
from minidock.lab.containers import HostContainers
from minidock.lab.directory import LabBastion, LabDir, LabHost, zone_for
from minidock.lab.errors import LabError, NotOwnedError
from minidock.lab.faults import KillMode
from minidock.lab.local import parallel, run_coro, write_atomic
from minidock.lab.ownership import Claim, Verb, refusal, takeover
from minidock.lab.ports import choosing_ports, keep_or_pick, pick_port
from minidock.lab.probe import HostStatus
from minidock.model import Host

__all__ = ["Lab", "project_dirs", "remove_project"]


def remove_project(project: str) -> None:
    """Remove a compose project's containers, volumes and networks without its compose file
    (found by compose's own labels)."""
    ids = docker.parse_words(local.run(docker.project_containers_argv(project)).stdout)
    if ids:
        local.run(docker.remove_containers_argv(ids))
    for kind in ("volume", "network"):
        names = docker.parse_words(local.run(docker.resources_argv(kind, project)).stdout)
        if names:
            local.run(docker.remove_resources_argv(kind, names), check=False)


LIVE_STATES = frozenset({"running", "paused", "restarting"})


def project_dirs(project: str) -> dict[str, bool]:
    """The compose working directories the project's containers were created from, each
    with whether a container of it still runs (paused counts: a fault, not an end)."""
    dirs: dict[str, bool] = {}
    for line in docker.parse_lines(local.run(docker.project_dirs_argv(project)).stdout):
        state, _, directory = line.partition(" ")
        dirs[directory] = dirs.get(directory, False) or state in LIVE_STATES
    return dirs


def _hosts_with_ports(
    n: int,
    project: str,
    existing: Sequence[LabHost],
    states: dict[str, str],
    taken: set[int],
    kinds: Sequence[str] = (),
) -> list[LabHost]:
    """host1..hostN with their loopback ports (SSH, HTTP, HTTPS): a host whose container
    still exists keeps its ports, the others get free ones; every port joins `taken`.
    `kinds`: each host's kind, in order (default: bookworm)."""
    previous = {h.name: h for h in existing}
    hosts: list[LabHost] = []
    for i in range(1, n + 1):
        name = f"host{i}"
        old = previous.get(name)
        kept = old is not None and states.get(name, "missing") != "missing"
        olds = (old.port, old.http_port, old.https_port) if old else (0, 0, 0)
        ssh, http, https = (keep_or_pick(p, kept, taken) for p in olds)
        kind = kinds[i - 1] if i <= len(kinds) else images.DEFAULT_KIND
        hosts.append(LabHost(name, ssh, zone_for(i), f"{project}-{name}", http, https, kind=kind))
    return hosts


def _lab_acme(folder: Path, container: str, taken: set[int]) -> LabAcme | None:
    """The lab's ACME server's files and ports: kept while its container exists, else
    made anew on free ports (which join `taken`); None where Debian's pebble is not
    installed (scripts/engine.sh installs it)."""
    if not pebble_installed():
        return None
    old = LabAcme.read(folder)
    proc = local.run(docker.container_states_argv([container]), check=False)
    if old is not None and docker.parse_container_states(proc.stdout):
        taken.update((old.directory_port, old.management_port, old.dns_port))
        return old
    return prepare_acme(folder, (pick_port(taken), pick_port(taken), pick_port(taken)))


class LabSessions(HostContainers):
    """The lab's hosts reached as the controller reaches them: over SSH with the lab's
    key and pinned host keys."""

    def ssh_host(self, host: str) -> Host:
        """A lab host as the controller sees it (for SSHExecutor)."""
        return probe.ssh_host(self.host(host), self.key_path, self.known_hosts_path)

    def wait_ready(self, hosts: Sequence[str] | None = None, timeout: float = 60.0) -> None:
        """Wait until each host takes an SSH session with the lab's key and pinned host
        key, and `docker ps` succeeds in it."""
        names = list(hosts) if hosts is not None else [h.name for h in self.hosts()]
        run_coro(probe.wait_until_ready([self.ssh_host(n) for n in names], timeout))

    # -- SSH for tests and scripts
    @contextlib.asynccontextmanager
    async def connect(
        self, host: str, **overrides: Any
    ) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """`async with lab.connect("host1") as conn:` an SSH session to a lab host, with the
        executor's options (keyword arguments override asyncssh.connect options)."""
        async with probe.connect(self.ssh_host(host), **overrides) as conn:
            yield conn

    def run_ssh(self, host: str, command: str, **overrides: Any) -> asyncssh.SSHCompletedProcess:
        """Run a shell command on a lab host over SSH (sync helper for tests and scripts)."""

        async def go() -> asyncssh.SSHCompletedProcess:
            async with self.connect(host, **overrides) as conn:
                return await conn.run(command, check=False)

        return run_coro(go())


def _claim(lab: LabDir, verb: Verb) -> Claim:
    """The facts ownership decides on: the project's containers by lab directory (and
    which still run), and the project the root's files were written for."""
    recorded = lab.recorded_project()
    runs = False
    if verb == "up" and recorded not in (None, lab.project):
        runs = str(lab.lab_dir) in project_dirs(str(recorded))
    dirs = project_dirs(lab.project)
    live = [d for d, running in dirs.items() if running]
    return Claim(lab.root, lab.project, list(dirs), recorded, runs, live)


@dataclass
class Lab(LabSessions):
    """A lab fleet rooted at `root` (default: the working directory), compose project
    `project`; `labels` go on every host container, `timings` collects seconds per step,
    `notes` what `up` did beyond starting hosts."""

    labels: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    # -- ownership
    def check_owner(self, verb: Verb, args: str = "") -> Claim:
        """What this machine says about the project and the files; NotOwnedError (one
        line naming the command that does reach that lab) when `verb` must not act."""
        claim = _claim(self, verb)
        problem = refusal(claim, verb, args)
        if problem is not None:
            raise NotOwnedError(problem)
        return claim

    # -- lifecycle
    def prepare(
        self,
        n: int = 3,
        bastion: bool = False,
        sets: Sequence[str] = images.SET_NAMES,
        kinds: Sequence[str] = (),
    ) -> Path:
        """Everything before the containers start: the host image and the image sets `sets`
        built (side by side), key, DinD mode, ports, the compose file (with `bastion`, a
        bastion too), and the containers created, not started (`up -d` on the file starts
        them). Returns the compose file's path. Keeps the ports of hosts whose containers
        still exist, so re-running `up` leaves a running lab alone.

        The containers are created before the port lock is let go: a lab choosing next
        sees their ports as taken. Released before they existed, another lab could pick
        one of them and start first, and this lab's host then never starts ("port is
        already allocated": a test worker's lab lost every test that way, at a 2% chance
        a run)."""
        self._may_start(n)
        with images.start_builds(sets) as builds:
            dind = self._host_images(builds, kinds)
            with choosing_ports(self.project) as busy:
                path = self._write_compose(n, bastion, dind, kinds, busy)
                local.run(docker.compose_create_argv(path, self.project), timeout=300)
            self._built(builds.wait_all())
        return path

    def _may_start(self, n: int) -> None:
        """What is checked before anything is built: a lab of n hosts, an engine, and
        this lab's own compose project."""
        if n < 1:
            raise LabError("a lab needs at least one host")
        if not local.engine_available():
            raise LabError("no Docker engine answers `docker info` (run scripts/engine.sh)")
        note = takeover(self.check_owner("up"))
        if note is not None:
            remove_project(self.project)
            self.notes.append(note)

    def _host_images(self, builds: Builds, kinds: Sequence[str] = ()) -> str:
        """Wait for the host image only (the other builds in `builds` go on while the
        containers start), build the other kinds' host images `kinds` name, one after the
        other, and make the key. Returns the DinD mode."""
        step = time.monotonic()
        self._built(builds.wait(HOST))
        self.timings["host image"] = time.monotonic() - step
        for kind in dict.fromkeys(images.HOST_KINDS[k].image_kind for k in kinds):
            if kind != images.DEFAULT_KIND:
                step = time.monotonic()
                if images.build_kind_image(kind):
                    self.timings[f"build {images.kind_image_tag(kind)}"] = time.monotonic() - step
        self.ensure_key()
        return self.dind_mode() or detect_dind_mode(images.host_image_tag())

    def _write_compose(
        self, n: int, bastion: bool, dind: str, kinds: Sequence[str], busy: set[int]
    ) -> Path:
        """Ports (none of `busy`, the ports other containers publish) and the compose file
        and lab state that name them."""
        taken = set(busy)
        states = self.container_states()
        hosts = _hosts_with_ports(n, self.project, self.hosts(), states, taken, kinds)
        jump = _prepare_bastion(self, taken) if bastion else None
        acme = _lab_acme(self.lab_dir / ACME, f"{self.project}-{ACME}", taken)
        image = images.host_image_tag()
        for host in hosts:
            (self.engines_dir / host.name).mkdir(parents=True, exist_ok=True)
        document = compose_document(
            self.project, hosts, image, dind, self.labels, jump, acme, self.engines_dir
        )
        write_atomic(self.compose_path, compose_text(document).encode())
        self.write_state(hosts, dind, image, jump)
        return self.compose_path

    def _built(self, timings: dict[str, float]) -> None:
        """Record the seconds each image took to build (`timings`, "build TAG")."""
        self.timings.update({f"build {tag}": s for tag, s in timings.items()})

    def acme(self) -> LabAcme | None:
        """The lab's ACME server, as `lab up` made it (None before)."""
        return LabAcme.read(self.lab_dir / ACME)

    def provision(
        self,
        timeout: float = 90.0,
        sets: Sequence[str] = images.SET_NAMES,
        builds: Builds | None = None,
    ) -> None:
        """Everything after the containers start (`provision_lab`)."""
        provision_lab(self, timeout, sets, builds)

    def up(
        self,
        n: int = 3,
        timeout: float = 120.0,
        bastion: bool = False,
        sets: Sequence[str] = images.SET_NAMES,
        kinds: Sequence[str] = (),
    ) -> list[LabHost]:
        """Start (or complete) a lab of n hosts (and, with `bastion`, a bastion), holding
        the image sets `sets`, and write its inventories. Idempotent. The images build side
        by side, and the containers start as soon as the host image is there. `kinds`:
        each host's kind in order (images.HOST_KINDS; the rest are bookworm)."""
        started = time.monotonic()
        order = build_order(sets, images.BUILD_COST)
        self._may_start(n)
        with images.start_builds(order) as builds:
            dind = self._host_images(builds, kinds)
            with choosing_ports(self.project) as busy:
                self._write_compose(n, bastion, dind, kinds, busy)
                step = time.monotonic()
                local.run(docker.compose_up_argv(self.compose_path, self.project), timeout=300)
                self.timings["compose up"] = time.monotonic() - step
            self.provision(timeout=timeout, sets=order, builds=builds)
        self.timings["up"] = time.monotonic() - started
        return self.hosts()

    def load(self, sets: Sequence[str], hosts: Sequence[str] | None = None) -> list[str]:
        """Build the image sets `sets` where missing (side by side) and load them into the
        running hosts `hosts` (default: every host). Returns the images loaded anywhere."""
        self.check_owner("load")
        names = [self.host(h).name for h in hosts] if hosts else [h.name for h in self.hosts()]
        if not names:
            raise LabError(f"no lab: run `{self.command('up')}`")
        wanted = images.set_images(sets)
        self._built(images.build_images(sets, host=False))
        loaded: set[str] = set()
        parallel(lambda host: loaded.update(self.load_images(host, wanted)), names)
        return [image for image in wanted if image in loaded]

    def down(self) -> None:
        """Remove the host containers and their volumes; then, when the files are this
        lab's, the inventory, known_hosts and lab.json. Refuses another lab's project."""
        claim = self.check_owner("down")
        owns_files = claim.owns_files()
        if owns_files and self.compose_path.exists():
            local.run(docker.compose_down_argv(self.compose_path, self.project), timeout=300)
        # and whatever the file no longer names (a smaller re-`up`, or the lab dir is gone),
        # found by compose's project label
        remove_project(self.project)
        if owns_files:
            self.remove_files()

    # -- faults
    def kill(self, host: str, mode: KillMode = "stop") -> None:
        """Make the fault `mode` on `host` (minidock.lab.faults). Idempotent."""
        self.check_owner("kill", host if mode == "stop" else f"{host} --mode {mode}")
        faults.kill(self, host, mode)
        if mode == "pause":
            self.paused.add(host)

    def revive(self, host: str, timeout: float = 60.0) -> None:
        """End whatever fault `host` has (any mix of them), then wait until it answers SSH
        and docker again."""
        self.check_owner("revive", host)
        faults.heal(self, self.host(host), self.container_state(host))
        self.paused.discard(host)
        self.wait_ready([host], timeout=timeout)
        readdress(self, timeout)

    def reset(self, timeout: float = 60.0) -> None:
        """Revive every host and remove every container MiniDock made on it: the state
        between two tests (`reset_hosts`)."""
        self.check_owner("revive", "HOST")
        reset_hosts(self, timeout)

    # -- status
    def status(self) -> list[HostStatus]:
        """Every host: its container state and what a real SSH session finds."""
        self.check_owner("status")
        hosts = self.hosts()
        states = self.container_states()
        found = run_coro(probe.probe_hosts([self.ssh_host(h.name) for h in hosts]))
        return [_status(h, states[h.name], p) for h, p in zip(hosts, found, strict=True)]


def provision_lab(
    lab: Lab,
    timeout: float = 90.0,
    sets: Sequence[str] = images.SET_NAMES,
    builds: Builds | None = None,
) -> None:
    """Everything after the containers start: authorized key, pinned known_hosts, the
    inventory, the image sets `sets` loaded into each host (each once `builds`, when
    given, has built it); then wait until every host answers SSH and docker."""
    hosts = lab.hosts()
    if not hosts:
        raise LabError(f"no lab: run `{lab.command('up')}`")
    started = time.monotonic()
    public = lab.key_path.with_suffix(".pub").read_bytes()
    host_keys: dict[str, str] = {}

    def setup(host: LabHost) -> None:
        install = INSTALL_KEY if host.kind == images.DEFAULT_KIND else INSTALL_KEYS
        lab.exec(host.name, "sh", "-c", install, input=public)
        host_keys[host.name] = lab.read_host_key(host.name, deadline=started + timeout)

    parallel(setup, hosts)
    hosts = lab.record_addresses(lab.container_addresses())
    acme = lab.acme()
    if acme is not None and hosts[0].private_address:
        provision_acme(acme, hosts[0].private_address, time.monotonic() + timeout)
    bastion, routes = lab.bastion(), ""
    if bastion is not None:
        routes = provision_bastion(lab, bastion, public, hosts, host_keys, started + timeout)
    lab.write_known_hosts(hosts, host_keys, routes)
    lab.write_inventory(hosts)
    lab.timings["keys"] = time.monotonic() - started
    names = [h.name for h in hosts]
    step = time.monotonic()
    lab.wait_docker(names, timeout=max(1.0, started + timeout - step))
    lab.timings["docker ready"] = time.monotonic() - step
    step = time.monotonic()
    for kind in sets:  # in the order built (the quick workloads first)
        if builds is not None:
            lab._built(builds.wait(kind))
        parallel(functools.partial(lab.load_images, wanted=images.IMAGE_SETS[kind]), names)
    lab.timings["load images"] = time.monotonic() - step
    step = time.monotonic()
    lab.wait_ready(names, timeout=max(1.0, started + timeout - step))
    lab.timings["ssh ready"] = time.monotonic() - step
    if bastion is not None:
        step = time.monotonic()
        wait_through_bastion(lab, timeout=max(1.0, started + timeout - step))
        lab.timings["bastion ready"] = time.monotonic() - step
    lab.timings["provision"] = time.monotonic() - started


def _status(h: LabHost, state: str, p: probe.Probe) -> HostStatus:
    """One host's status line: its container and what the SSH probe found."""
    return HostStatus(
        h.name,
        h.container,
        state,
        h.port,
        p.ssh,
        p.docker,
        p.running,
        p.error,
        http_port=h.http_port,
        https_port=h.https_port,
        private_address=h.private_address,
    )


def reset_hosts(lab: Lab, timeout: float = 60.0) -> None:
    """`faults.clean` every host at once; then wait over SSH for those the clean says may
    not answer as they did, and record new addresses."""
    states = lab.container_states()
    unsure: list[str] = []

    def one(host: LabHost) -> None:
        if faults.clean(lab, host, states[host.name]):
            unsure.append(host.name)

    parallel(one, lab.hosts())
    lab.paused.clear()
    if unsure:
        lab.wait_ready(sorted(unsure), timeout=timeout)
    readdress(lab, timeout)


def readdress(lab: Lab, timeout: float = 60.0) -> None:
    """A host container started again may have another address on the lab network
    (docker hands addresses out in turn, not back): record the new ones in lab.json
    and the inventory's `private_address`, and point the ACME server's DNS at host1's,
    as an operator would after a server's address changed."""
    before = {h.name: h.private_address for h in lab.hosts()}
    now = lab.container_addresses()
    if all(now.get(name, was) == was for name, was in before.items()):
        return
    hosts = lab.record_addresses(now)
    lab.write_inventory(hosts)
    acme = lab.acme()
    if acme is not None and hosts[0].private_address != before[hosts[0].name]:
        provision_acme(acme, hosts[0].private_address, time.monotonic() + timeout)


def _prepare_bastion(lab: Lab, taken: set[int]) -> LabBastion:
    """The bastion's port: kept while its container exists, else a free one."""
    old = lab.bastion()
    proc = local.run(docker.container_states_argv([f"{lab.project}-{BASTION}"]), check=False)
    exists = bool(docker.parse_container_states(proc.stdout))
    port = keep_or_pick(old.port if old else 0, exists, taken)
    return LabBastion(port, f"{lab.project}-{BASTION}")
