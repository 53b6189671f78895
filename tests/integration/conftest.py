"""The lab fleet for integration tests: one per session, clean between tests.

pytest-docker brings the host containers up and down (`docker_services`, on the compose
file the lab generates); minidock.lab does the rest (images, key, known_hosts, inventory,
images inside the hosts, faults). Fixtures:

- `lab`: the session's `Lab` (images built, compose file written; containers not yet up),
  with a bastion (`Lab.prepare(bastion=True)`: one sshd-only container more, and
  `inventory/lab-bastion.toml` reaching the hosts only through it; tests/integration/
  test_bastion.py).
- `lab_fleet`: session scope, a `Fleet` whose hosts answer SSH and docker.
- `fleet`: function scope, the same `Fleet` after a reset: every host revived and every
  container labelled `minidock.cluster` removed from every host.
- `inventory`: the path of the session's generated inventory (`<root>/inventory/lab.toml`).
- `lab_inventory`: function scope, that inventory loaded by minidock.spec (after the reset
  `fleet` does).

Without a Docker engine these fixtures fail (never skip): run scripts/engine.sh.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import json
import os
import pty
import select
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import tomli_w
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from pytest_docker.plugin import Services

from minidock.documents.status import status_schema
from minidock.lab import KillMode, Lab, engine_available, remove_project
from minidock.model import Inventory
from minidock.spec import load_inventory
from tests.zygote import Zygote

INTEGRATION_DIR = Path(__file__).parent
STATUS_SCHEMA = Draft202012Validator(status_schema())
PROJECT_PREFIX = "minidock-labtest-"
# The commands `Minidock` runs to their end are forks of one process that has imported
# MiniDock (tests/zygote.py); MINIDOCK_TEST_FRESH=1 runs each as a fresh interpreter.
ZYGOTE = None if os.environ.get("MINIDOCK_TEST_FRESH") == "1" else Zygote()
if ZYGOTE is not None:
    atexit.register(ZYGOTE.close)
PID_LABEL = "minidock.lab.test-pid"
HOSTNAME_LABEL = "minidock.lab.test-hostname"


@dataclass
class Fleet:
    """The running lab, as tests see it."""

    lab: Lab
    services: Services

    @property
    def inventory(self) -> Path:
        return self.lab.inventory_path

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.lab.hosts()]

    def port(self, host: str) -> int:
        return self.lab.host(host).port

    def connect(
        self, host: str, **overrides: Any
    ) -> contextlib.AbstractAsyncContextManager[asyncssh.SSHClientConnection]:
        """`async with fleet.connect("host1") as conn:` (key and pinned known_hosts from the
        lab; keyword arguments override asyncssh.connect options)."""
        return self.lab.connect(host, **overrides)

    def ssh(self, host: str, command: str, **overrides: Any) -> asyncssh.SSHCompletedProcess:
        """Run a shell command on a host over SSH, from sync test code."""
        return self.lab.run_ssh(host, command, **overrides)

    def exec(self, host: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run argv inside the host container with docker exec (for assertions: works
        whatever fault SSH has, except stop and pause)."""
        return self.lab.exec(host, *argv, check=check)

    def docker(
        self, host: str, *argv: str, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """`docker ARGV` against the host's engine, e.g. fleet.docker("host1", "ps") (through
        its socket on this machine, else docker exec: Lab.docker)."""
        return self.lab.docker(host, *argv, check=check)

    def kill(self, host: str, mode: KillMode) -> None:
        self.lab.kill(host, mode)

    def revive(self, host: str) -> None:
        self.lab.revive(host)

    def reset(self) -> None:
        self.lab.reset()


def _reap_stale_test_labs() -> None:
    """Remove test fleets left by sessions on this machine that no longer run (a crash, or
    --keep-lab): they hold memory and docker networks."""
    fmt = (
        '{{.Label "com.docker.compose.project"}} '
        f'{{{{.Label "{PID_LABEL}"}}}} {{{{.Label "{HOSTNAME_LABEL}"}}}}'
    )
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={PID_LABEL}", "--format", fmt],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    stale: set[str] = set()
    for line in out.splitlines():
        project, pid, hostname = [*line.split(), "", "", ""][:3]
        if not project.startswith(PROJECT_PREFIX) or hostname != socket.gethostname():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.add(project)
        except (ValueError, PermissionError):
            continue
    for project in stale:
        remove_project(project)


def ours() -> dict[str, str]:
    """The labels of a lab this test process owns (a stale one's are reaped by the next)."""
    return {PID_LABEL: str(os.getpid()), HOSTNAME_LABEL: socket.gethostname()}


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Lab:
    if not engine_available():
        pytest.fail(
            "no Docker engine answers `docker info`: run scripts/engine.sh "
            "(integration tests need the lab fleet and do not skip)",
            pytrace=False,
        )
    the_lab = Lab(
        tmp_path_factory.mktemp("lab"), project=f"{PROJECT_PREFIX}{os.getpid()}", labels=ours()
    )
    # pytest-xdist's workers (scripts/test.sh runs two) each have a lab of their own: one
    # at a time reaps stale labs and builds the images they share (cached by tag)
    with _one_worker_at_a_time(tmp_path_factory, "lab-images"):
        _reap_stale_test_labs()
        the_lab.prepare(int(pytestconfig.getoption("--lab-hosts")), bastion=True)
    return the_lab


@contextlib.contextmanager
def _one_worker_at_a_time(factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """An exclusive lock shared by the xdist workers of this run (their base temporary
    directories have one parent), held for the block."""
    path = factory.getbasetemp().parent / f"{name}.lock"
    with path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


# -- pytest-docker: it runs `docker-compose up` / `down` on the lab's generated file ----------
@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return "docker-compose"  # Debian's Compose v1 (FLEET-NOTES); no `docker compose` here


@pytest.fixture(scope="session")
def docker_compose_file(lab: Lab) -> str:
    return str(lab.compose_path)


@pytest.fixture(scope="session")
def docker_compose_project_name(lab: Lab) -> str:
    return lab.project


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return ["up -d"]  # Lab.prepare created the containers, under the machine's port lock


@pytest.fixture(scope="session")
def docker_cleanup(pytestconfig: pytest.Config) -> list[str]:
    if pytestconfig.getoption("--keep-lab"):
        return []
    return ["down -v --remove-orphans -t 1"]


# -- the fleet --------------------------------------------------------------------------------
LAB_FLEET = pytest.StashKey["Fleet"]()


@pytest.fixture(scope="session")
def lab_fleet(lab: Lab, docker_services: Services, pytestconfig: pytest.Config) -> Fleet:
    lab.provision()
    pytestconfig.stash[LAB_FLEET] = Fleet(lab, docker_services)
    return pytestconfig.stash[LAB_FLEET]


@pytest.fixture(autouse=True)
def _leaks_named() -> Iterator[None]:
    """After each lab test, a full garbage collection: a socket or transport the test left
    open is reported (an unclosed-resource warning, an error here) against the test that
    left it, not against whichever later test the collector happened to run in."""
    yield
    gc.collect()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last lab test before a unit test, the lab's tasks are removed: their
    health checks (about 50 ms of CPU each, most tests check every second) would otherwise
    run on beside tests that do not use the lab, until the session's end takes the lab
    down. Lab tests run first (tests/conftest.py), so this is once a worker."""
    fleet = item.config.stash.get(LAB_FLEET, None)
    if fleet is not None and nextitem is not None and INTEGRATION_DIR not in nextitem.path.parents:
        fleet.reset()


@pytest.fixture
def fleet(lab_fleet: Fleet) -> Fleet:
    lab_fleet.reset()
    return lab_fleet


@pytest.fixture(scope="session")
def inventory(lab_fleet: Fleet) -> Path:
    return lab_fleet.inventory


@pytest.fixture
def lab_inventory(fleet: Fleet) -> Inventory:
    return load_inventory(fleet.inventory)


# -- driving the real command line ------------------------------------------------------------
@dataclass
class Minidock:
    """Runs the real `minidock` command (a subprocess) against the lab fleet, with its own
    state directory, and writes cluster specs that point at the lab inventory."""

    fleet: Fleet
    workdir: Path
    cluster: str = "itest"
    inventory: Path | None = None  # the cluster files' inventory (default: the lab's)
    extra_env: dict[str, str] = field(default_factory=dict)  # over os.environ

    @property
    def state(self) -> Path:
        return self.workdir / "state"

    def env(self) -> dict[str, str]:
        env = {**os.environ, "MINIDOCK_STATE": str(self.state), "COLUMNS": "200"}
        return env | self.extra_env

    def spec(self, body: str, name: str = "cluster.toml") -> Path:
        """A cluster file: `cluster` and `inventory` lines, then `body` (services TOML)."""
        path = self.workdir / name
        inventory = self.inventory or self.fleet.inventory
        head = f'cluster = "{self.cluster}"\ninventory = "{inventory}"\n\n'
        path.write_text(head + body)
        return path

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "minidock", *args],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """`minidock ARGS` to its end, forked from the worker's zygote (tests/zygote.py):
        a process of its own, as `python -m minidock` is, without its imports'."""
        if ZYGOTE is not None:
            return ZYGOTE.run(list(args), self.env(), timeout)
        return subprocess.run(
            [sys.executable, "-m", "minidock", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def status(self) -> dict[str, Any]:
        """`status --json`, checked against the schema shipped in the package."""
        res = self("status", "--json")
        assert res.returncode == 0, res.stderr
        doc: dict[str, Any] = json.loads(res.stdout)
        STATUS_SCHEMA.validate(doc)
        return doc

    def tasks(self, service: str | None = None) -> list[dict[str, Any]]:
        """Live tasks of this cluster as status reports them."""
        return [
            t
            for t in self.status()["tasks"]
            if (service is None or t["service"] == service)
            and t["state"] in ("running", "created", "restarting", "paused")
        ]

    def containers(self, host: str) -> list[str]:
        """Names of every container of this cluster on a host, read with docker exec."""
        res = self.fleet.docker(
            host,
            "ps",
            "-a",
            "--filter",
            f"label=minidock.cluster={self.cluster}",
            "--format",
            "{{.Names}} {{.State}}",
        )
        return [line for line in res.stdout.splitlines() if line.strip()]


@pytest.fixture
def md(fleet: Fleet, tmp_path: Path) -> Minidock:
    return Minidock(fleet, tmp_path)


# Probes for tests whose subject is not host loss. On two cores running two labs (and the
# demo's), `docker ps` on a lab host can take more than the lab's 3 s `probe_timeout`;
# two such probes mark the host down and its tasks are replaced while they run, which
# says nothing about a rollout or the ingress. A stopped host still refuses at once.
PATIENT_PROBES = {"connect_timeout": "5s", "probe_timeout": "15s", "command_timeout": "120s"}


def patient_inventory(fleet: Fleet, path: Path) -> Path:
    """The lab's inventory with patient probes, written to `path` (paths made absolute)."""
    lab = tomllib.loads(fleet.inventory.read_text())
    base = fleet.inventory.parent
    files = {
        k: str((base / lab["defaults"][k]).resolve()) for k in ("identity_file", "known_hosts")
    }
    lab["defaults"] |= PATIENT_PROBES | files
    path.write_text(tomli_w.dumps(lab))
    return path


@pytest.fixture
def patient_md(fleet: Fleet, tmp_path: Path) -> Minidock:
    """`md` through an inventory with patient probes (PATIENT_PROBES)."""
    return Minidock(fleet, tmp_path, inventory=patient_inventory(fleet, tmp_path / "lab.toml"))


def on_terminal(
    args: list[str], env: dict[str, str], keys: bytes, timeout: float
) -> tuple[subprocess.Popen[bytes], bytes]:
    """`minidock ARGS` on a pseudo-terminal that is sent `keys`: the process, and what it
    wrote until the session ended (or `timeout` passed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidock", *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    os.write(master, keys)
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other side closed: the session ended
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc, output
