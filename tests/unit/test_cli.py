"""The command line, in process, with no Docker engine and no SSH.

Bad input: exit 2, one line on stderr naming the file and the key path, no traceback, no
SSH connection, no state created or changed. Operator words on unknown hosts and services,
commands before any apply, a second writer (75), bad durations, every --help. Then one
end-to-end run against `tests.fakes.FakeDocker` (in-memory engines behind the executor
seam): apply, status --json, a quiet reconcile, drain, activate, update, rollback, events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import io
import json
import os
import re
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner, Result

import minidock.cli
import minidock.store.codec
import minidock.usecases.access
from minidock.cli import app, field_change, service_row
from minidock.commands.facts import version_argv
from minidock.core import admit
from minidock.documents.status import RolloutSummary, ServiceSummary
from minidock.model import Event, Host
from minidock.spec import load
from minidock.ssh import Result as SSHResult
from minidock.ssh import SSHExecutor
from minidock.store.directory import ENV_STATE, StateLock
from minidock.store.sqlite import SQLiteStore
from tests.fakes import FakeDocker, FakeExecutor

CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n'
WEB = CLUSTER + '[services.web]\nimage = "web:5"\n'
HOST = '[[hosts]]\nname = "host1"\naddress = "127.0.0.1"\nport = 1\n'
HOSTS = HOST + '[[hosts]]\nname = "host2"\naddress = "127.0.0.1"\nport = 1\n'
NAME_HINT = "use lowercase letters, digits, '_', '.' and '-', starting with a letter or digit"
DURATION_HINT = "use a number of seconds or a string like '500ms', '2s', '1m30s', '1h'"


# -- helpers ----------------------------------------------------------------------------------
def invoke(*args: str) -> Result:
    """Run `minidock ARGS` in process; never a traceback, whatever the exit code."""
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"minidock {' '.join(args)} raised {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output
    return result


def one_line_error(result: Result, code: int = 2) -> str:
    """The single `minidock: ...` line on stderr of a command that exited `code`, no stdout."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stderr.endswith("\n")
    assert lines[0].startswith("minidock: ")
    return lines[0].removeprefix("minidock: ")


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Every file in a directory with its mode and bytes; {} when it does not exist."""
    if not directory.exists():
        return {}
    return {p.name: (p.stat().st_mode, p.read_bytes()) for p in sorted(directory.iterdir())}


def applied(directory: Path, cluster_file: Path) -> None:
    """Store `cluster_file` as the first generation in `directory`, as `apply` would."""
    cluster, _ = load(cluster_file)
    with SQLiteStore.open(directory) as store:
        gen = store.next_generation_id()
        event = Event(time.time(), "apply", f"applied {cluster_file} as generation {gen}")
        store.commit(
            admit(store.load(), cluster, gen),
            [event],
            generation=cluster,
            source_path=str(cluster_file),
        )


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path with no $MINIDOCK_STATE, so default state dirs land in tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STATE, raising=False)
    return tmp_path


@pytest.fixture
def ssh_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record (and refuse) any SSH attempt: the executor's run and asyncssh.connect."""
    calls: list[str] = []

    async def run(
        self: SSHExecutor,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> SSHResult:
        calls.append(f"SSHExecutor.run {host.name}: {list(argv)}")
        raise AssertionError("no SSH expected")

    async def connect(*args: object, **kwargs: object) -> None:
        calls.append(f"asyncssh.connect {args} {kwargs}")
        raise AssertionError("no SSH expected")

    monkeypatch.setattr(SSHExecutor, "run", run)
    monkeypatch.setattr(asyncssh, "connect", connect)
    yield calls
    assert calls == [], "SSH was attempted"


@pytest.fixture
def state(in_tmp: Path) -> Path:
    """A state directory holding generation 1 of WEB on host1, host2 (files in in_tmp)."""
    (in_tmp / "inventory.toml").write_text(HOSTS)
    (in_tmp / "cluster.toml").write_text(WEB)
    directory = in_tmp / "state"
    applied(directory, in_tmp / "cluster.toml")
    return directory


# -- bad input --------------------------------------------------------------------------------
def c(text: str, expected: str, id: str) -> Any:
    """A bad cluster file beside a good inventory."""
    return pytest.param({"cluster.toml": text, "inventory.toml": HOST}, expected, id=id)


def i(text: str, expected: str, id: str) -> Any:
    """A good cluster file naming a bad inventory."""
    return pytest.param({"cluster.toml": WEB, "inventory.toml": text}, expected, id=id)


BAD = [
    c(
        'cluster = "prod"\ninventory = \n',
        "cluster.toml: invalid TOML at line 2, column 13: invalid value",
        "toml-missing-value",
    ),
    c(
        WEB + "replicaz = 3\n",
        "cluster.toml: services.web: unknown key 'replicaz' (did you mean 'replicas'?)",
        "unknown-key",
    ),
    c(
        CLUSTER + "[services.web]\nreplicas = 2\n",
        "cluster.toml: services.web: missing required key 'image'",
        "missing-image",
    ),
    c(
        WEB + 'replicas = "3"\n',
        "cluster.toml: services.web.replicas: expected an integer, got string '3'",
        "wrong-type",
    ),
    c(
        WEB + "replicas = -1\n",
        "cluster.toml: services.web.replicas: must be at least 0, got -1",
        "negative-replicas",
    ),
    c(
        CLUSTER + '[services.Web]\nimage = "web:5"\n',
        f"cluster.toml: services: invalid service name 'Web': {NAME_HINT}",
        "service-name",
    ),
    c(
        CLUSTER + '[services.web]\nimage = "Web:5"\n',
        "cluster.toml: services.web.image: invalid image reference 'Web:5': "
        "use [registry[:port]/]name[:tag][@digest] with a lowercase name",
        "image-uppercase",
    ),
    c(
        WEB + 'depends_on = ["dbb"]\n[services.db]\nimage = "db:1"\n',
        "cluster.toml: services.web.depends_on[0]: unknown service 'dbb' (did you mean 'db'?)",
        "unknown-dependency",
    ),
    c(
        CLUSTER + '[services.a]\nimage = "a"\ndepends_on = ["b"]\n'
        '[services.b]\nimage = "b"\ndepends_on = ["a"]\n',
        "cluster.toml: services.a.depends_on: dependency cycle: a -> b -> a",
        "cycle",
    ),
    c(
        WEB + 'update = { delay = "5x" }\n',
        f"cluster.toml: services.web.update.delay: invalid duration '5x': {DURATION_HINT}",
        "bad-duration",
    ),
    c(
        WEB + 'memory = "256MB"\n',
        "cluster.toml: services.web.memory: invalid size '256MB': "
        "use a number of bytes or a string like '512KiB', '256MiB', '8GiB', '100M'",
        "bad-size",
    ),
    c(
        WEB + 'ports = ["8080:80", "9090:90", "8080:81"]\n',
        "cluster.toml: services.web.ports[2]: host port 8080/tcp is already published by ports[0]",
        "duplicate-host-port",
    ),
    c(
        WEB + 'constraints = ["zone = a"]\n',
        "cluster.toml: services.web.constraints[0]: invalid constraint 'zone = a': "
        "use 'key == value' or 'key != value'",
        "constraint",
    ),
    c(
        WEB + 'env = { A = "x\\ny" }\n',
        "cluster.toml: services.web.env.A: must not contain a newline, carriage return or NUL "
        "(environment values are passed in an env-file)",
        "env-newline",
    ),
    c(
        WEB + 'desired = "paused"\n',
        "cluster.toml: services.web.desired: expected one of 'running', 'stopped', got 'paused'",
        "desired",
    ),
    c(
        WEB + 'command = ["./report"]\nschedule = "0 0 31 2 *"\n',
        "cluster.toml: services.web.schedule: '0 0 31 2 *' never fires: no date matches it (a "
        "day its months do not have, like 31 February); give days every month named has, "
        "e.g. '0 3 28 2 *'",
        "job-never-fires",
    ),
    c(
        WEB + 'ports = ["80:8080"]\n[services.app]\nimage = "app:1"\nports = ["8080:8080"]\n'
        'ingress = { host = "app.test", port = 8080 }\n',
        "cluster.toml: services.web.ports[0]: host port 80 is the ingress's http_port, which "
        "its proxy holds on host1, where web may run: publish another host port (or route it "
        "through the ingress), or give the ingress its hosts ([ingress] hosts or constraints; "
        "by default every host runs its proxy) and keep web off them",
        "host-port-of-the-ingress",
    ),
    c(
        'cluster = "prod"\ninventory = "missing.toml"\n',
        "cluster.toml: inventory: inventory file not found: missing.toml",
        "inventory-not-found",
    ),
    c("", "cluster.toml: missing required key 'cluster'", "empty-file"),
    c(
        CLUSTER + '[services.a]\nimage = "a"\nreplicas = -1\n[services.b]\nimagee = "b"\n',
        "cluster.toml: services.a.replicas: must be at least 0, got -1",
        "first-error-wins",
    ),
    i(
        "[[hosts]\n",
        "inventory.toml: invalid TOML at line 1, column 8: "
        "expected ']]' at the end of an array declaration",
        "inventory-toml",
    ),
    i(
        '[[hosts]]\nname = "host1"\nadress = "10.0.0.11"\n',
        "inventory.toml: hosts[0]: unknown key 'adress' (did you mean 'address'?)",
        "host-unknown-key",
    ),
    i(
        '[defaults]\nuser = "deploy"\n',
        "inventory.toml: missing required key 'hosts'",
        "missing-hosts",
    ),
    i(
        HOST + HOST,
        "inventory.toml: hosts[1].name: duplicate host name 'host1' (also hosts[0])",
        "duplicate-host",
    ),
    i(
        '[[hosts]]\nname = "host1"\naddress = "-oProxyCommand=touch /tmp/x"\n',
        "inventory.toml: hosts[0].address: invalid address '-oProxyCommand=touch /tmp/x': "
        "must not start with '-'",
        "address-dash",
    ),
    i(
        '[defaults]\nconnect_timeout = "0ms"\n' + HOST,
        "inventory.toml: defaults.connect_timeout: must be greater than 0, got '0ms'",
        "zero-connect-timeout",
    ),
    i(
        HOST + 'host_key_policy = "yes"\n',
        "inventory.toml: hosts[0].host_key_policy: expected one of 'strict', 'accept-new', "
        "got 'yes'",
        "host-key-policy",
    ),
]

# (argv before FILE, argv after FILE, how the state directory is chosen)
COMMANDS = [
    pytest.param(["validate"], [], None, id="validate"),
    pytest.param(["plan"], ["--state", "state"], "state", id="plan"),
    pytest.param(["plan"], [], ".minidock", id="plan-default-state"),
    pytest.param(["apply"], ["--state", "state"], "state", id="apply"),
    pytest.param(["apply", "--wait", "--timeout", "1s"], [], ".minidock", id="apply-default"),
    pytest.param(["apply", "--dry-run"], ["--state", "state"], "state", id="apply-dry-run"),
]


def test_the_bad_input_table_is_big_enough() -> None:
    assert len(BAD) >= 15


@pytest.mark.parametrize(("before", "after", "state_name"), COMMANDS)
@pytest.mark.parametrize(("files", "expected"), BAD)
def test_bad_input_is_one_line_exit_2_no_ssh_no_state(
    in_tmp: Path,
    ssh_calls: list[str],
    files: dict[str, str],
    expected: str,
    before: list[str],
    after: list[str],
    state_name: str | None,
) -> None:
    for name, text in files.items():
        (in_tmp / name).write_text(text)
    result = invoke(*before, "cluster.toml", *after)
    assert one_line_error(result) == expected
    if state_name is not None:
        assert not (in_tmp / state_name).exists()
    assert ssh_calls == []


@pytest.mark.parametrize(("files", "expected"), BAD)
def test_bad_apply_leaves_existing_state_as_it_was(
    in_tmp: Path, ssh_calls: list[str], files: dict[str, str], expected: str
) -> None:
    (in_tmp / "good.toml").write_text(WEB)
    (in_tmp / "inventory.toml").write_text(HOST)
    applied(in_tmp / "state", in_tmp / "good.toml")
    before = snapshot(in_tmp / "state")
    for name, text in files.items():
        (in_tmp / name).write_text(text)
    assert one_line_error(invoke("apply", "cluster.toml", "--state", "state")) == expected
    assert snapshot(in_tmp / "state") == before
    assert ssh_calls == []


@pytest.mark.parametrize("command", ["validate", "apply", "plan"])
@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param(None, "nope.toml: file not found", id="missing"),
        pytest.param("dir", "nope.toml: cannot read file: Is a directory", id="directory"),
        pytest.param(b"\xff\xfe\x00", "nope.toml: not UTF-8 text (bad byte at offset 0)", id="bin"),
    ],
)
def test_unreadable_file_is_one_line(
    in_tmp: Path, ssh_calls: list[str], command: str, setup: str | bytes | None, expected: str
) -> None:
    if setup == "dir":
        (in_tmp / "nope.toml").mkdir()
    elif isinstance(setup, bytes):
        (in_tmp / "nope.toml").write_bytes(setup)
    assert one_line_error(invoke(command, "nope.toml")) == expected
    assert not (in_tmp / ".minidock").exists()


def test_validate_says_ok(in_tmp: Path, ssh_calls: list[str]) -> None:
    (in_tmp / "cluster.toml").write_text(WEB)
    (in_tmp / "inventory.toml").write_text(HOSTS)
    result = invoke("validate", "cluster.toml")
    assert result.exit_code == 0
    assert result.stdout == "OK: cluster.toml: cluster prod, 1 services, 2 hosts\n"
    result = invoke("validate", "inventory.toml")
    assert result.exit_code == 0
    assert result.stdout == "OK: inventory.toml: inventory with 2 hosts\n"
    assert not (in_tmp / ".minidock").exists()


def test_validate_an_inventory_names_the_inventory_key(in_tmp: Path, ssh_calls: list[str]) -> None:
    (in_tmp / "inventory.toml").write_text(HOST + "cpus = 0\n")
    assert one_line_error(invoke("validate", "inventory.toml")) == (
        "inventory.toml: hosts[0].cpus: must be greater than 0, got 0"
    )


def test_a_cluster_in_a_subdirectory_names_both_files_by_their_path(
    in_tmp: Path, ssh_calls: list[str]
) -> None:
    (in_tmp / "playbooks").mkdir()
    (in_tmp / "inventory").mkdir()
    (in_tmp / "playbooks" / "prod.toml").write_text(
        'cluster = "prod"\ninventory = "../inventory/prod.toml"\n[services.web]\nimage = "web:5"\n'
    )
    (in_tmp / "inventory" / "prod.toml").write_text(HOST.replace("port = 1", "port = 70000"))
    error = one_line_error(invoke("apply", "playbooks/prod.toml"))
    assert error == "inventory/prod.toml: hosts[0].port: must be at most 65535, got 70000"
    assert not (in_tmp / "playbooks" / ".minidock").exists()


# -- operator words on things that do not exist -----------------------------------------------
@pytest.mark.parametrize("command", ["drain", "activate"])
def test_unknown_host_lists_the_known_ones(state: Path, ssh_calls: list[str], command: str) -> None:
    db = (state / "state.db").read_bytes()
    error = one_line_error(invoke(command, "host9", "--state", str(state)))
    assert (
        error
        == f"{state.parent / 'inventory.toml'}: unknown host 'host9'; known hosts: host1, host2"
    )
    assert (state / "state.db").read_bytes() == db


@pytest.mark.parametrize("command", ["rollback", "reset"])
def test_unknown_service_lists_the_known_ones(
    state: Path, ssh_calls: list[str], command: str
) -> None:
    db = (state / "state.db").read_bytes()
    error = one_line_error(invoke(command, "wbe", "--state", str(state)))
    assert error == "unknown service 'wbe' (did you mean 'web'?); known services: web"
    assert (state / "state.db").read_bytes() == db


def test_rollback_without_a_previous_spec_is_exit_2(state: Path, ssh_calls: list[str]) -> None:
    error = one_line_error(invoke("rollback", "web", "--state", str(state)))
    assert error == "service web has no previous spec to roll back to"


# -- nothing applied yet ----------------------------------------------------------------------
NOTHING_APPLIED = [
    ["status"],
    ["status", "--json"],
    ["events"],
    ["reconcile"],
    ["watch", "--interval", "1s"],
    ["drain", "host1"],
    ["activate", "host1"],
    ["rollback", "web"],
    ["reset", "web"],
]


@pytest.mark.parametrize("args", NOTHING_APPLIED, ids=" ".join)
@pytest.mark.parametrize("how", ["--state", "env", "cwd"])
def test_nothing_applied_is_exit_2_with_a_clear_message(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str], args: list[str], how: str
) -> None:
    directory = in_tmp / "st" if how != "cwd" else in_tmp / ".minidock"
    if how == "--state":
        args = [*args, "--state", "st"]
    elif how == "env":
        monkeypatch.setenv(ENV_STATE, "st")
    error = one_line_error(invoke(*args))
    assert error == f"nothing applied yet in {directory}: run `minidock apply FILE` first"
    assert not directory.exists()


# -- one writer -------------------------------------------------------------------------------
LOCKED = "state directory {} is locked by another minidock process (pid {})"


def test_reconcile_exits_75_at_once_when_another_writer_holds_the_lock(
    state: Path, ssh_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # reconcile never waits
    monkeypatch.setattr(minidock.usecases.access, "OPERATOR_PATIENCE", 3600.0)
    db = (state / "state.db").read_bytes()
    with StateLock(state):
        error = one_line_error(invoke("reconcile", "--state", str(state)), 75)
    assert error == LOCKED.format(state, os.getpid())
    assert (state / "state.db").read_bytes() == db


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["apply", "cluster.toml"], id="apply"),
        pytest.param(["drain", "host1"], id="drain"),
        pytest.param(["activate", "host1"], id="activate"),
        pytest.param(["rollback", "web"], id="rollback"),
        pytest.param(["reset", "web"], id="reset"),
    ],
)
def test_operator_commands_exit_75_when_the_lock_stays_taken(
    state: Path, ssh_calls: list[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """One line says it waits (and for what) before the wait, one line why it gave up."""
    monkeypatch.setattr(minidock.usecases.access, "OPERATOR_PATIENCE", 0.2)
    db = (state / "state.db").read_bytes()
    with StateLock(state):
        result = invoke(*args, "--state", str(state))
    locked = LOCKED.format(state, os.getpid())
    assert (result.exit_code, result.stdout) == (75, "")
    assert result.stderr.splitlines() == [
        f"minidock: waiting up to 200ms for the lock: {locked}",
        f"minidock: {locked}",
    ]
    assert (state / "state.db").read_bytes() == db


def test_readers_do_not_wait_for_the_lock(state: Path, ssh_calls: list[str]) -> None:
    with StateLock(state):
        result = invoke("events", "--state", str(state))
    assert result.exit_code == 0
    assert "apply: applied" in result.stdout


# -- bad option values ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["apply", "cluster.toml", "--timeout", "5x"], "--timeout", "5x"),
        (["apply", "cluster.toml", "--wait", "--timeout", "10"], "--timeout", "10"),
        (["apply", "cluster.toml", "--dry-run", "--timeout", "-1s"], "--timeout", "-1s"),
        (["drain", "host1", "--timeout", "soon"], "--timeout", "soon"),
        (["rollback", "web", "--wait", "--timeout", ""], "--timeout", ""),
        (["reset", "web", "--timeout", "1d"], "--timeout", "1d"),
        (["watch", "--interval", "fast"], "--interval", "fast"),
        (["watch", "--interval", "2"], "--interval", "2"),
    ],
)
def test_bad_duration_option_is_exit_2(
    state: Path, ssh_calls: list[str], args: list[str], option: str, value: str
) -> None:
    db = (state / "state.db").read_bytes()
    error = one_line_error(invoke(*args, "--state", str(state)))
    assert error.startswith(f"{option}: invalid duration {value!r}: ")
    assert (state / "state.db").read_bytes() == db


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["apply"], id="missing-argument"),
        pytest.param(["frobnicate"], id="unknown-command"),
        pytest.param(["status", "--jsno"], id="unknown-option"),
        pytest.param(["events", "-n", "many"], id="not-an-integer"),
        pytest.param(["lab", "up", "--hosts", "0"], id="lab-hosts-range"),
    ],
)
def test_usage_errors_are_exit_2(in_tmp: Path, ssh_calls: list[str], args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Usage: minidock" in result.stderr
    assert not (in_tmp / ".minidock").exists()


# -- help -------------------------------------------------------------------------------------
def command_paths() -> list[list[str]]:
    """Every command and subcommand of the app, as argv prefixes (as the help lists them:
    lazily loaded sub-apps such as `lab` included)."""
    root = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(group: Any, prefix: list[str]) -> None:
        ctx = typer.Context(group)
        for name in sorted(group.list_commands(ctx)):
            command = group.get_command(ctx, name)
            paths.append([*prefix, name])
            if hasattr(command, "commands"):
                walk(command, [*prefix, name])

    walk(root, [])
    return paths


def test_every_product_command_is_there() -> None:
    names = {" ".join(p) for p in command_paths()}
    assert {
        "apply",
        "plan",
        "reconcile",
        "watch",
        "status",
        "drain",
        "activate",
        "rollback",
        "reset",
        "events",
        "validate",
        "lab",
        "lab up",
        "lab down",
        "lab kill",
        "lab revive",
    } <= names


@pytest.mark.parametrize("path", [[], *command_paths()], ids=lambda p: " ".join(p) or "minidock")
def test_help_works(in_tmp: Path, ssh_calls: list[str], path: list[str]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert f"Usage: minidock {' '.join(path)}".rstrip() in " ".join(result.stdout.split())
    assert not (in_tmp / ".minidock").exists()


# -- end to end, against in-memory Docker engines ---------------------------------------------
FLEET = '[defaults]\nuser = "deploy"\n' + "".join(
    f'[[hosts]]\nname = "host{n}"\naddress = "127.0.0.1"\nport = 1\n'
    f'labels = {{ zone = "{zone}" }}\ncpus = 4\nmemory = "8GiB"\n'
    for n, zone in ((1, "a"), (2, "b"), (3, "c"))
)
STACK = """\
cluster = "e2e"
inventory = "inventory.toml"

[services.db]
image = "db:1"

[services.web]
image = "web:5"
replicas = 2
ports = ["8080:8080"]
secrets = { TOKEN = { env = "E2E_TOKEN" } }
cpus = 0.5
memory = "256MiB"
spread = "zone"
depends_on = ["db"]
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }
update = { monitor = "0s" }
"""


class QuickAsyncio:
    """minidock.cli's view of asyncio: the pause between passes (--wait, watch) is cut to a
    yield that moves the engines' clock on by the pause instead, and after
    `interrupt_after` pauses it raises KeyboardInterrupt, as Ctrl-C would."""

    def __init__(self, docker: FakeDocker) -> None:
        self.docker = docker
        self.interrupt_after: int | None = None
        self.pauses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.pauses += 1
        if self.interrupt_after is not None and self.pauses >= self.interrupt_after:
            raise KeyboardInterrupt
        self.docker.advance(delay)
        await asyncio.sleep(0)


class Fleet:
    """A cluster file, an inventory, a state directory and the FakeDocker behind them.

    The engines' images behave by tests/behaviour.py's table on FakeDocker's own clock,
    which moves one tick on with every command (each connects anew) and by the pause
    between the passes of one command: a task started by one command is healthy for the
    next.
    """

    def __init__(
        self, root: Path, docker: FakeDocker, executors: list[FakeExecutor], quick: QuickAsyncio
    ) -> None:
        self.root = root
        self.docker = docker
        self.executors = executors
        self.quick = quick
        self.state = root / "state"
        self.cluster = root / "cluster.toml"

    def run(self, *args: str) -> Result:
        return invoke(*args, "--state", str(self.state))

    def settle(self, passes: int = 10, settled: int = 0) -> list[Result]:
        """Reconcile until a pass exits `settled` (0; 4 where a host is down, degraded);
        every pass's result."""
        results = []
        for _ in range(passes):
            results.append(self.run("reconcile"))
            if results[-1].exit_code != 3:
                break
        assert results[-1].exit_code == settled, [r.output for r in results]
        return results

    def status(self) -> dict[str, Any]:
        result = self.run("status", "--json")
        assert result.exit_code == 0, result.output
        doc: dict[str, Any] = json.loads(result.stdout)
        return doc

    def tasks(self, host: str | None = None) -> list[str]:
        """Running task containers (this cluster's), by name."""
        return [n for n in self.docker.names(host, "running") if not n.startswith("foreign")]


@pytest.fixture
def fleet(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str]) -> Fleet:
    (in_tmp / "inventory.toml").write_text(FLEET)
    (in_tmp / "cluster.toml").write_text(STACK)
    monkeypatch.setenv("E2E_TOKEN", "s3cret-value")  # a secret, read at apply
    docker = FakeDocker()
    executors: list[FakeExecutor] = []

    def make() -> FakeExecutor:
        docker.advance()  # a command later
        executors.append(docker.executor())
        return executors[-1]

    monkeypatch.setattr(minidock.cli, "SSHExecutor", make)
    quick = QuickAsyncio(docker)
    monkeypatch.setattr(minidock.cli, "asyncio", quick)
    docker.add("host1", "foreign-app", {"minidock.cluster": "other", "minidock.service": "web"})
    docker.add("host2", "foreign-plain")
    return Fleet(in_tmp, docker, executors, quick)


STATUS_KEYS = {
    "services": {"name": str, "desired": str, "replicas": int, "running": int, "healthy": int,
                 "state": str},
    "tasks": {"id": str, "service": str, "slot": int, "host": str, "image": str, "state": str,
              "health": str},
    "hosts": {"name": str, "state": str, "drained": bool},
}  # fmt: skip


def test_end_to_end_with_fake_docker(fleet: Fleet) -> None:
    # apply: prints the generation and the acts, exits 0 or 3 (db first, then web)
    result = fleet.run("apply", str(fleet.cluster))
    assert result.exit_code in (0, 3), result.output
    assert result.stdout.startswith("generation 1: e2e (2 services)\n")
    assert "started db.1." in result.stdout
    assert all(not line.startswith("started web.") for line in result.stdout.splitlines())
    fleet.settle()
    assert fleet.executors
    assert all(e.closed for e in fleet.executors)
    assert [n.split(".")[0] for n in fleet.tasks()] == ["db", "web", "web"]
    web_hosts = {h for h in ("host1", "host2", "host3") for n in fleet.tasks(h) if "web" in n}
    assert len(web_hosts) == 2  # one host port 8080 per host, spread over zones
    assert fleet.docker.names(status="running").count("foreign-app") == 1
    assert "foreign-plain" in fleet.docker.names("host2")

    # reconcile when nothing changes: quiet, exit 0, no act on any host
    calls = sum(len(e.calls) for e in fleet.executors)
    quiet = fleet.run("reconcile")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    new = [c.argv[:2] for e in fleet.executors for c in e.calls][calls:]
    # the probe: ps + inspect, and (issue 9) the host's socket tables for ports held outside
    reads = {("docker", "ps"), ("docker", "inspect"), ("cat", "/proc/net/tcp")}
    assert {tuple(a) for a in new} <= reads | {("cat", "/proc/net/udp")}

    # plan after convergence: nothing to do, nothing written
    before = (fleet.state / "state.db").read_bytes()
    planned = fleet.run("plan", str(fleet.cluster))
    assert (planned.exit_code, planned.stdout) == (0, "nothing to do: converged\n")
    assert (fleet.state / "state.db").read_bytes() == before

    # status --json: one document with the contract keys and types
    doc = fleet.status()
    for section, keys in STATUS_KEYS.items():
        assert doc[section], section
        for entry in doc[section]:
            for key, kind in keys.items():
                assert isinstance(entry[key], kind), (section, key, entry)
    services = {s["name"]: s for s in doc["services"]}
    assert {k: services["web"][k] for k in STATUS_KEYS["services"]} == {
        "name": "web",
        "desired": "running",
        "replicas": 2,
        "running": 2,
        "healthy": 2,
        "state": "converged",
    }
    assert services["db"]["state"] == "converged"
    assert sorted((t["service"], t["slot"]) for t in doc["tasks"]) == [
        ("db", 1),
        ("web", 1),
        ("web", 2),
    ]
    assert {t["health"] for t in doc["tasks"] if t["service"] == "web"} == {"healthy"}
    assert {t["image"] for t in doc["tasks"]} == {"db:1", "web:5"}
    assert [(h["name"], h["state"], h["drained"]) for h in doc["hosts"]] == [
        ("host1", "ready", False),
        ("host2", "ready", False),
        ("host3", "ready", False),
    ]
    assert doc["converged"] is True
    assert doc["cluster"] == "e2e"
    assert doc["generation"] == 1
    text = fleet.run("status")
    assert text.exit_code == 0
    assert "converged" in text.stdout

    # drain: replacements first, then the host is empty and stays drained
    busy = next(h for h in ("host1", "host2", "host3") if fleet.tasks(h))
    drained = fleet.run("drain", busy, "--no-wait")
    assert drained.exit_code in (0, 3), drained.output
    assert drained.stdout.startswith(f"draining {busy}\n")
    fleet.settle()
    assert fleet.tasks(busy) == []
    assert len(fleet.tasks()) == 3
    hosts = {h["name"]: h for h in fleet.status()["hosts"]}
    assert hosts[busy]["drained"] is True
    activated = fleet.run("activate", busy)
    assert activated.exit_code == 0, activated.output
    assert {h["name"]: h for h in fleet.status()["hosts"]}[busy]["drained"] is False

    # a new generation rolls web to web:6; rollback returns it to web:5
    (fleet.root / "cluster.toml").write_text(STACK.replace("web:5", "web:6"))
    updated = fleet.run("apply", str(fleet.cluster))
    assert updated.exit_code in (0, 3), updated.output
    assert updated.stdout.startswith("generation 2: e2e (2 services)\n")
    fleet.settle()
    images = {t["image"] for t in fleet.status()["tasks"] if t["service"] == "web"}
    assert images == {"web:6"}
    rolled = fleet.run("rollback", "web")
    assert rolled.exit_code in (0, 3), rolled.output
    fleet.settle()
    images = {t["image"] for t in fleet.status()["tasks"] if t["service"] == "web"}
    assert images == {"web:5"}

    # the event log: applies, operator words and acts; never the env secret
    events = fleet.run("events", "-n", "0")
    assert events.exit_code == 0
    kinds = [line.split()[2].rstrip(":") for line in events.stdout.splitlines()]
    assert kinds.count("apply") == 2
    assert {"apply", "intent", "run", "stop"} <= set(kinds)
    assert "s3cret-value" not in events.stdout
    assert "applied" in events.stdout
    assert f"draining {busy}" in events.stdout

    # the state directory is private
    assert stat.S_IMODE(fleet.state.stat().st_mode) == 0o700
    assert stat.S_IMODE((fleet.state / "state.db").stat().st_mode) == 0o600
    for side in fleet.state.iterdir():
        assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side


def test_apply_wait_converges_and_says_so(fleet: Fleet) -> None:
    result = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("converged\n")
    assert len(fleet.tasks()) == 3


def test_apply_wait_on_a_pipe_prints_each_line_once_and_no_escapes(fleet: Fleet) -> None:
    """Live progress is for terminals: on a pipe (cron's mail), one plain line per event,
    a pending slot's reason once however many passes see it, and the one why-line."""
    fleet.cluster.write_text(STACK.replace("replicas = 2", "replicas = 4"))  # 3 hosts, 1 port
    result = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s")
    assert result.exit_code == 4, result.output  # degraded: web.4 fits nowhere
    assert "\x1b" not in result.output
    lines = result.stdout.splitlines()
    assert len(lines) == len(set(lines)), lines
    no_port = [line for line in lines if line.startswith("pending web.4: host1: host port")]
    assert len(no_port) == 1, lines  # seen by the last two passes, printed once
    assert sum(line.startswith("started ") for line in lines) == 4  # db.1, web.1-3
    assert result.stderr == "minidock: degraded: web.4 pending\n"


def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """minidock.cli's stdout and stderr consoles on one terminal (what it got, as text)."""
    screen = io.StringIO()
    for name in ("out", "err"):
        tty = Console(file=screen, force_terminal=True, width=100, highlight=False, soft_wrap=True)
        monkeypatch.setattr(minidock.cli, name, tty)
    return screen


def test_apply_wait_on_a_terminal_shows_the_live_view_and_q_prints_plain_lines(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = on_a_terminal(monkeypatch)
    result = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s")
    assert result.exit_code == 0, result.output
    drawn = screen.getvalue()
    assert "\x1b[?25l" in drawn  # a live region hides the cursor ...
    assert drawn.count("\x1b[?25h") == 1  # ... and shows it again once, when it ends
    redrawn = re.sub(r"\x1b\[[0-9]*[AK]|\r", "\n", drawn)  # each redraw: a line break
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", redrawn)
    assert re.search(r"^web +2 +2 +2 +converged", text, re.M), text
    assert re.search(r"^pass 2, ", text, re.M), text
    assert "started db.1." in text
    assert re.search(r"\nconverged: 2 services, 3 tasks healthy in [0-9hms.]+\n$", text), text

    screen.seek(0)
    screen.truncate()
    fleet.cluster.write_text(STACK.replace("web:5", "web:6"))
    quiet = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s", "-q")
    assert quiet.exit_code == 0, quiet.output
    plain = screen.getvalue()
    assert "\x1b" not in plain
    assert plain.startswith("generation 2: e2e (2 services)\n")
    assert plain.endswith("\nconverged\n")


def test_drain_and_rebalance_on_a_terminal(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    assert fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s").exit_code == 0
    busy = next(h for h in ("host1", "host2", "host3") if fleet.tasks(h))
    screen = on_a_terminal(monkeypatch)
    drained = fleet.run("drain", busy, "--timeout", "30s")
    assert drained.exit_code == 0, drained.output
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "\n", screen.getvalue())
    assert text.startswith(f"draining {busy}\n")
    assert re.search(rf"^{busy}: drained, [0-9] tasks? left$", text, re.M), text
    assert re.search(r"\nconverged: 2 services, 3 tasks healthy in [0-9hms.]+\n$", text), text
    screen.seek(0)
    screen.truncate()
    moved = fleet.run("rebalance", "-q")  # plain lines, though on a terminal
    assert moved.exit_code == 0, moved.output
    assert screen.getvalue() == (
        "nothing to move: spread and packing are as the scheduler would choose\n"
    )


def test_apply_dry_run_and_plan_change_nothing(fleet: Fleet) -> None:
    for args in (["apply", str(fleet.cluster), "--dry-run"], ["plan", str(fleet.cluster)]):
        result = fleet.run(*args)
        assert result.exit_code == 0, result.output
        assert "run db.1." in result.stdout
        assert not fleet.state.exists()
        assert fleet.tasks() == []


def test_unreachable_hosts_do_not_fail_the_pass(fleet: Fleet) -> None:
    fleet.docker.down.add("host1")
    result = fleet.run("apply", str(fleet.cluster))
    assert result.exit_code in (0, 3), result.output
    last = fleet.settle(settled=4)[-1]  # issue 14: a host down is degraded, every pass
    assert "degraded: host1 down" in last.output
    assert fleet.tasks("host1") == []
    hosts = {h["name"]: h for h in fleet.status()["hosts"]}
    assert hosts["host1"]["state"] == "down"
    assert "connection refused" in hosts["host1"]["error"]


def test_drain_waits_until_the_host_is_empty(fleet: Fleet) -> None:
    assert fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s").exit_code == 0
    busy = next(h for h in ("host1", "host2", "host3") if fleet.tasks(h))
    result = fleet.run("drain", busy, "--timeout", "30s")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"draining {busy}\n")
    assert result.stdout.endswith("converged\n")
    assert fleet.tasks(busy) == []
    assert len(fleet.tasks()) == 3


def test_apply_wait_times_out_with_exit_3(fleet: Fleet) -> None:
    fleet.cluster.write_text(STACK.replace("web:5", "web:slow"))  # web never turns healthy
    assert fleet.run("apply", str(fleet.cluster)).exit_code == 3  # starts db
    assert fleet.run("reconcile").exit_code == 3  # starts web, which stays "starting"
    result = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "0s")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("not converged after 0s:\n")


def test_a_failed_act_is_exit_1(fleet: Fleet) -> None:
    fleet.docker.images = {"db:1"}  # web:5 is nowhere and cannot be pulled
    assert fleet.run("apply", str(fleet.cluster)).exit_code == 3
    result = fleet.run("reconcile")
    assert result.exit_code == 1, result.output
    assert "failed: run web.1." in result.stderr
    assert "cannot be pulled" in result.stderr


def test_an_operator_command_waits_for_a_running_pass(fleet: Fleet) -> None:
    assert fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "30s").exit_code == 0
    lock = StateLock(fleet.state)
    lock.acquire()
    releaser = threading.Timer(0.3, lock.release)  # a pass of another process ends
    releaser.start()
    try:
        result = fleet.run("drain", "host1", "--no-wait")
    finally:
        releaser.join()
        lock.release()
    assert result.exit_code in (0, 3), result.output
    assert result.stdout.startswith("draining host1\n")


def test_watch_passes_until_interrupted(fleet: Fleet) -> None:
    assert fleet.run("apply", str(fleet.cluster)).exit_code == 3  # db started, web pending
    fleet.quick.interrupt_after = 5
    result = fleet.run("watch", "--interval", "1s")
    assert result.exit_code == 0, result.output
    assert "started web.1." in result.stdout
    assert "started web.2." in result.stdout
    assert result.stdout.endswith("stopped\n")
    assert len(fleet.tasks()) == 3


def test_watch_skips_a_pass_while_another_writer_holds_the_lock(fleet: Fleet) -> None:
    assert fleet.run("apply", str(fleet.cluster)).exit_code == 3  # db started, web pending
    fleet.quick.interrupt_after = 3
    with StateLock(fleet.state):
        result = fleet.run("watch", "--interval", "1s")
    assert (result.exit_code, result.stdout) == (0, "stopped\n")
    # said once, not at each skipped round: it holds a connection to each host meanwhile
    assert result.stderr == "minidock: standing by, 3 of 3 hosts connected\n"
    assert [n.split(".")[0] for n in fleet.tasks()] == ["db"]


def test_a_standby_sharing_the_fleet_says_how_many_of_the_hosts_it_keeps_are_connected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = minidock.cli.printer(summaries=True)
    report(minidock.usecases.PassSkipped("deferred", standby=30, hosts=100, keeps=45))
    report(minidock.usecases.PassSkipped("deferred", standby=30, hosts=100, keeps=45))  # said once
    report(minidock.usecases.PassSkipped("deferred", standby=3, hosts=3, keeps=3))  # keeps all
    assert capsys.readouterr().err == (
        "minidock: standing by, 30 of 45 hosts connected (its share and standby set, of 100)\n"
        "minidock: standing by, 3 of 3 hosts connected\n"
    )


# -- the operator's commands of issue 15: ps, logs, exec, scale, push --------------------------
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["scale", "web"], "scale: use SERVICE=N with N a number of replicas, e.g. web=3"),
        (["scale", "web=many"], "scale: use SERVICE=N with N a number of replicas, e.g. web=3"),
        (["scale", "wbe=2"], "unknown service 'wbe' (did you mean 'web'?); known services: web"),
        (["scale", "web=\u00b2"], "scale: use SERVICE=N with N a number of replicas, e.g. web=3"),
        (
            ["scale", "web=99999999999"],
            "scale web=99999999999: replicas must be at most 1000 "
            "(docs/formats.md#at-most-1000-replicas): give web=1000 or fewer",
        ),
        (["scale", "web=1001"], "scale web=1001: replicas must be at most 1000 "),
        (["scale", "web=" + "9" * 5000], "scale web=N: replicas must be at most 1000 "),
        (["logs", "web", "--since", "5"], "--since: invalid duration '5': "),
        (["logs", "wbe"], "unknown service 'wbe'"),
        (["exec", "-t", "web", "--", "sh"], "exec -t: stdin is not a terminal"),
    ],
)
def test_operator_commands_refuse_bad_input(
    state: Path, ssh_calls: list[str], args: list[str], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(minidock.cli, "SSHExecutor", lambda: FakeDocker().executor())
    db = (state / "state.db").read_bytes()
    assert one_line_error(invoke(args[0], "--state", str(state), *args[1:])).startswith(error)
    assert (state / "state.db").read_bytes() == db


def test_a_count_past_the_maximum_an_older_minidock_stored_is_read_as_the_maximum(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scale web=99999999999` stored its count before there was a maximum; every later pass
    and `status` then ran out of memory building the slot range. Read as 1000, said once."""
    monkeypatch.setattr(minidock.store.codec, "_TOLD", set())
    assert fleet.run("apply", str(fleet.cluster), "--wait").exit_code == 0
    with SQLiteStore.open(fleet.state) as store:
        latest = store.latest_generation()
        assert latest is not None
        huge = dataclasses.replace(
            latest[1],
            services=tuple(
                dataclasses.replace(s, replicas=99_999_999_999) if s.name == "web" else s
                for s in latest[1].services
            ),
        )
        store.commit(admit(store.load(), huge, store.next_generation_id()), generation=huge)
    told = (
        "minidock: warning: state: services.web.replicas is 99999999999, over the maximum of "
        "1000 (stored by an older MiniDock): read as 1000; set the count with minidock scale "
        "web=N\n"
    )
    status = fleet.run("status", "--json")
    assert status.exit_code == 0
    assert status.stderr == told
    web = next(s for s in json.loads(status.stdout)["services"] if s["name"] == "web")
    assert web["replicas"] == 1000
    assert fleet.run("reconcile").exit_code == 3  # 1000 slots: the ports hold 3 of them
    assert fleet.run("status").exit_code == 0
    scaled = fleet.run("scale", "web=2", "--wait")
    assert scaled.exit_code == 0
    assert "scaled web from 1000 to 2\n" in scaled.stdout


def test_ps_logs_exec_and_scale_end_to_end(fleet: Fleet) -> None:
    assert fleet.run("apply", str(fleet.cluster), "--wait").exit_code == 0
    listed = fleet.run("ps")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["TASK", "HOST", "STATE", "HEALTH", "PORTS", "IMAGE"]
    assert [row.split()[0].split(".")[0] for row in rows] == ["db", "web", "web"]
    assert [row.split()[2] for row in rows] == ["running"] * 3
    doc = json.loads(fleet.run("ps", "web", "--json").stdout)
    assert sorted(t["slot"] for t in doc["tasks"]) == [1, 2]
    assert all(t["ports"] == ["8080/tcp"] for t in doc["tasks"])
    assert doc["unreachable"] == []

    fleet.docker.logs = {"web": "GET / 200\ntoken s3cret-value\n"}
    logs = fleet.run("logs", "web", "--slot", "1", "--tail", "5")
    assert logs.exit_code == 0, logs.output
    (task,) = {line.split(" | ")[0] for line in logs.stdout.splitlines()}
    assert task.startswith("web.1.")
    assert logs.stdout == f"{task} | GET / 200\n{task} | token ***\n"

    # everything after -- is the command: options go before it
    shown = invoke("exec", "--state", str(fleet.state), "web", "--", "env")
    assert (shown.exit_code, shown.stdout) == (0, "TOKEN=***\n")
    dashed = invoke("exec", "--state", str(fleet.state), "web", "--", "echo", "-n", "--x")
    assert (dashed.exit_code, dashed.stdout) == (0, "-n --x\n")  # after --, the command's
    failed = invoke("exec", "--state", str(fleet.state), "web.2", "--", "nope")
    assert failed.exit_code == 126
    assert "executable file not found" in failed.stderr

    scaled = fleet.run("scale", "web=1", "--wait")
    assert scaled.exit_code == 0, scaled.output
    assert scaled.stdout.startswith("generation 2: e2e (2 services)\n")
    assert "scaled web from 2 to 1\n" in scaled.stdout
    assert [n.split(".")[0] for n in fleet.tasks()] == ["db", "web"]
    assert " scale: scaled web from 2 to 1 as generation 2" in fleet.run("events").stdout


def test_push_progress_bars_draw_on_a_terminal_and_stay_silent_elsewhere() -> None:
    import io

    from rich.console import Console

    from minidock.cli import PushProgressBars
    from minidock.usecases import PushProgress

    screen = io.StringIO()
    with PushProgressBars(Console(file=screen, force_terminal=True, width=100)) as bars:
        bars.update(PushProgress("host1", "web:5", 1 << 20, 4 << 20))
        bars.update(PushProgress("host1", "web:5", 4 << 20, 4 << 20))
        assert bars.bars is not None
        (task,) = bars.bars.tasks
        assert (task.description, task.completed, task.total) == ("host1", 4 << 20, 4 << 20)
    assert "host1" in screen.getvalue()
    piped = io.StringIO()
    with PushProgressBars(Console(file=piped, force_terminal=False)) as quiet:
        quiet.update(PushProgress("host1", "web:5", 1, 2))
    assert piped.getvalue() == ""


# == the operator's words (issue 27, items 6 and 8) ============================================
# `--version`, global options before the command, help without `<bool>`, usage errors that
# are exit 2 (`drain --json` without `--plan`, `events --service nosuch`, `logs --slot 9`),
# did-you-mean for operands, `rollback -q`, task ids in `ps --json`, `activate` of a host
# that was never drained, plan lines that read plainly, a rolled-back `apply --wait` that
# does not say `converged`, pruned and stale tasks' removals said as such.
# -- the top level ----------------------------------------------------------------------------
def test_version_prints_the_package_version(in_tmp: Path, ssh_calls: list[str]) -> None:
    result = invoke("--version")
    assert (result.exit_code, result.stdout) == (
        0,
        f"minidock {importlib.metadata.version('minidock')}\n",
    )
    assert not (in_tmp / ".minidock").exists()


def test_state_given_before_the_command_counts_as_after_it(
    state: Path, ssh_calls: list[str]
) -> None:
    before = invoke("--state", str(state), "events")
    after = invoke("events", "--state", str(state))
    assert before.exit_code == after.exit_code == 0, before.output
    assert "apply: applied" in before.stdout
    assert before.stdout == after.stdout
    both = invoke("--state", str(state), "events", "--state", str(state))
    assert both.exit_code == 0
    assert not (state.parent / ".minidock").exists()


def test_two_different_states_are_a_usage_error(state: Path, ssh_calls: list[str]) -> None:
    error = one_line_error(invoke("--state", str(state), "status", "--state", "elsewhere"))
    assert error == (
        f"--state given twice, {state} before the command and elsewhere after it: give one"
    )
    assert not Path("elsewhere").exists()


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "top")
def test_help_shows_no_type_beside_a_flag(in_tmp: Path, path: list[str]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    assert re.search(r"--help\s+Show this message and exit", result.stdout)


# -- usage errors: exit 2, one line, nothing changed ------------------------------------------
def test_drain_json_without_plan_is_a_usage_error_and_drains_nothing(
    state: Path, ssh_calls: list[str]
) -> None:
    before = snapshot(state)
    error = one_line_error(invoke("drain", "host1", "--json", "--state", str(state)))
    assert error == "drain --json: only with --plan (a drain prints its acts as lines)"
    assert snapshot(state) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--service", "nosuch"], "unknown service 'nosuch'; known services: web"),
        (["--service", "wbe"], "unknown service 'wbe' (did you mean 'web'?); known services: web"),
        (["--host", "nosuch"], "unknown host 'nosuch'; known hosts: none"),
    ],
)
def test_events_of_an_unknown_service_or_host_is_exit_2(
    state: Path, ssh_calls: list[str], args: list[str], expected: str
) -> None:
    assert one_line_error(invoke("events", *args, "--state", str(state))) == expected


def test_did_you_mean_for_hosts_in_commands(state: Path, ssh_calls: list[str]) -> None:
    error = one_line_error(invoke("drain", "hots1", "--state", str(state)))
    assert error.endswith("unknown host 'hots1' (did you mean 'host1'?); known hosts: host1, host2")
    # as close to host1 as to host2: no guess
    error = one_line_error(invoke("activate", "host9", "--state", str(state)))
    assert error.endswith("unknown host 'host9'; known hosts: host1, host2")


def test_rollback_takes_q(state: Path, ssh_calls: list[str]) -> None:
    error = one_line_error(invoke("rollback", "web", "-q", "--state", str(state)))
    assert "no previous spec" in error  # the use case's refusal, not the parser's


# -- over the fake fleet ------------------------------------------------------------------------
def test_ps_json_gives_the_task_id_as_status_json_does(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    ps = json.loads(fleet.run("ps", "--json").stdout)["tasks"]
    status = fleet.status()["tasks"]
    assert sorted(t["id"] for t in ps) == sorted(t["id"] for t in status)
    assert all(len(t["id"]) == 10 and t["name"].endswith("." + t["id"]) for t in ps)
    assert all(len(t["container"]) == 64 for t in ps)  # Docker's id, under its own name


def test_status_shows_each_hosts_engine_and_a_refused_one_takes_no_task(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = Path(__file__).parent.parent / "data" / "docker" / "version"
    fleet.docker.versions["host2"] = (versions / "podman-5.4.2.json").read_text()
    old = json.loads((versions / "docker-20.10.24.json").read_text())
    old["Server"]["Version"] = "19.03.15"
    fleet.docker.versions["host3"] = json.dumps(old)
    fleet.run("apply", str(fleet.cluster))
    fleet.settle(settled=3)  # not converged: host3 waits, its line the waiting one
    hosts = {h["name"]: h for h in fleet.status()["hosts"]}
    assert hosts["host1"]["engine"] == {
        "kind": "docker",
        "version": "20.10.24+dfsg1",
        "rootless": False,
    }
    assert hosts["host2"]["engine"] == {"kind": "podman", "version": "5.4.2", "rootless": False}
    assert (hosts["host3"]["state"], hosts["host3"]["refused"]) == ("unreachable", True)
    assert hosts["host3"]["error"] == (
        "Docker 19.03.15 refused: MiniDock needs Docker 20.10 or newer "
        "for `docker run --pull never`"
    )
    assert fleet.docker.names("host3") == []  # never given a task
    monkeypatch.setenv("COLUMNS", "200")  # a host's row on one line
    # and for a console made earlier in this process (another test's table fixed its width)
    monkeypatch.setattr(minidock.cli.out.console, "_width", 200)
    shown = fleet.run("status").stdout.splitlines()
    rows = {line.split()[1]: line for line in shown if "host" in line}
    header = next(line for line in shown if "engine" in line and "drained" in line)
    assert "controller" not in header  # a state directory: no watch holds a host's key
    assert "Docker 20.10.24+dfsg1" in rows["host1"]
    assert "Podman 5.4.2" in rows["host2"]
    assert "unreachable: Docker 19.03.15 refused: MiniDock needs Docker 20.10" in rows["host3"]


def test_commands_after_a_pass_take_the_engines_it_recorded_a_failed_probe_reads_anew(
    fleet: Fleet,
) -> None:
    """Each command is a new process: the engines the last pass recorded (less than
    core.hosts.ENGINE_AGE ago) stand for their reads; a host whose probe failed is read."""
    versions = Path(__file__).parent.parent / "data" / "docker" / "version"
    fleet.docker.versions["host2"] = (versions / "podman-5.4.2.json").read_text()
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()

    def engines_read(verb: str, *args: str) -> list[str]:
        result = invoke(verb, "--state", str(fleet.state), *args)
        assert result.exit_code in (0, 3), result.output
        return sorted({c.host for c in fleet.executors[-1].calls if c.argv == version_argv()})

    assert engines_read("reconcile") == []
    assert engines_read("status", "--json") == []
    assert engines_read("ps") == []
    assert engines_read("exec", "web", "--", "echo", "hi") == []
    hosts = {h["name"]: h for h in fleet.status()["hosts"]}
    assert hosts["host2"]["engine"] == {"kind": "podman", "version": "5.4.2", "rootless": False}
    fleet.docker.down.add("host1")
    assert engines_read("reconcile") == []  # host1's probe failed: its record is forgotten
    fleet.docker.down.discard("host1")
    assert engines_read("reconcile") == ["host1"]
    assert engines_read("reconcile") == []


def test_logs_of_a_slot_the_service_does_not_have_is_exit_2(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    assert one_line_error(fleet.run("logs", "web", "--slot", "9")) == (
        "web has no slot 9; its slots: 1, 2"
    )


def test_activate_says_when_the_host_was_never_drained(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    never = fleet.run("activate", "host3")
    assert never.exit_code == 0, never.output
    assert never.stdout.splitlines()[0] == "host3 was not drained: nothing to activate"
    assert fleet.run("drain", "host3", "--no-wait").exit_code in (0, 3)
    again = fleet.run("activate", "host3")
    assert again.stdout.splitlines()[0] == "activated host3"


def test_plan_lines_read_plainly(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    changed = fleet.cluster.read_text().replace(
        'secrets = { TOKEN = { env = "E2E_TOKEN" } }',
        'secrets = { TOKEN = { env = "E2E_TOKEN" } }\nenv = { MODE = "b" }',
    )
    monkeypatch.setenv("E2E_TOKEN", "other-value")
    fleet.cluster.write_text(changed.replace("web:5", "web:6"))
    planned = fleet.run("plan", str(fleet.cluster))
    lines = planned.stdout.splitlines()
    assert "  env: MODE added" in lines
    assert "  secrets: TOKEN changed" in lines
    assert "other-value" not in planned.output
    assert "  image: web:5 -> web:6" in lines
    assert lines[-1].startswith("converges, assuming every new task becomes healthy")
    assert not re.search(r"\([^)]*\(", lines[-1])  # no parenthesis inside another


def test_a_rolled_back_apply_wait_says_so_and_not_converged(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    broken = fleet.cluster.read_text().replace("web:5", "web:broken")
    fleet.cluster.write_text(
        broken.replace('update = { monitor = "0s" }', 'update = { failure_action = "rollback" }')
    )
    applied = fleet.run("apply", str(fleet.cluster), "--wait", "--timeout", "2m")
    assert applied.exit_code == 1, applied.output
    assert "converged" not in applied.stdout.splitlines()
    last = applied.stderr.splitlines()[-1]
    assert last.startswith("minidock: web: rolled back: "), applied.stderr
    # the rolled-back spec is what runs: a drain's plan shows no spec change against it
    planned = fleet.run("drain", "host1", "--plan")
    assert planned.exit_code == 0, planned.output
    assert "service web" not in planned.stdout
    assert "image:" not in planned.stdout


# -- printing, pure -------------------------------------------------------------------------------
def test_env_and_secrets_changes_name_each_key_and_what_happened_to_it() -> None:
    assert field_change("env", "A, B", "~A") == "A changed"
    assert field_change("secrets", "K", "+L -K") == "L added, K removed"
    assert field_change("image", "web:5", "web:6") == "web:5 -> web:6"


def test_the_service_table_says_failed_as_the_docs_do() -> None:
    rollout = RolloutSummary("none", 0, 0, 0, "", active=False)
    summary = ServiceSummary(
        "web", "running", 2, 1, 1, "failed", 0, "web:5", 1, rollout, (), (), ""
    )
    assert service_row(summary)[4] == "failed"


def test_a_pruned_services_tasks_are_removed_as_pruned(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    only_db = fleet.root / "db-only.toml"
    only_db.write_text(fleet.cluster.read_text().split("[services.web]")[0])
    pruned = fleet.run("apply", str(only_db), "--prune", "--wait", "--timeout", "1m")
    assert pruned.exit_code == 0, pruned.output
    stops = [line for line in pruned.stdout.splitlines() if line.startswith("stopped web.")]
    assert len(stops) == 2
    assert all(line.endswith(": service web was pruned") for line in stops), stops


def test_removing_stale_tasks_is_not_called_starting(fleet: Fleet) -> None:
    fleet.run("apply", str(fleet.cluster))
    fleet.settle()
    fleet.docker.down.add("host1")
    fleet.settle(settled=4)  # host1 down, its tasks replaced where they fit
    fleet.docker.down.discard("host1")
    back = fleet.run("reconcile")
    assert back.exit_code == 3, back.output
    assert "stopped " in back.stdout
    assert back.stderr.splitlines()[-1].startswith("minidock: not converged: ")
    assert "tasks are starting" not in back.stderr, back.stderr


def test_lab_kill_help_names_every_fault_mode(in_tmp: Path) -> None:
    result = invoke("lab", "kill", "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for mode in ("stop", "pause", "sshd", "dockerd", "partition", "disk", "slow"):
        assert re.search(rf"\b{mode}\b", text), mode
    assert "disk (full: no new container can be created)" in text
    assert "slow (sends at 16 Mbit/s)" in text
