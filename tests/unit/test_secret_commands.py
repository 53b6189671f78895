"""Secrets from a password manager's command (docs/secrets.md#from-a-password-manager-command):
stand-in CLIs (shell scripts that print, fail, hang) run on the controller at apply.

The values reach the tasks through the env-file on stdin (the in-memory engines of
tests.fakes record it), and appear in no argv, label, report or state file.
"""

from __future__ import annotations

import os
import select
from pathlib import Path

import pytest

from minidock.model import LABEL_SPEC
from minidock.spec import SpecError, load
from minidock.usecases import BadInput, ExitCode
from tests.unit.test_cli import invoke, one_line_error
from tests.unit.test_usecases import STACK, Setup, make_setup

HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'
VALUE = "hunter2-from-the-vault"


def script(root: Path, name: str, body: str) -> Path:
    """An executable stand-in CLI in `root/bin`, which counts its runs in `root/NAME.runs`."""
    path = root / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'#!/bin/sh\necho run >> "{root}/{name}.runs"\n{body}\n')
    path.chmod(0o700)
    return path


def runs(root: Path, name: str) -> int:
    counted = root / f"{name}.runs"
    return len(counted.read_text().splitlines()) if counted.exists() else 0


def cluster(root: Path, services: str) -> Path:
    (root / "inventory.toml").write_text(HOST)
    path = root / "cluster.toml"
    path.write_text(f'cluster = "prod"\ninventory = "inventory.toml"\n\n{services}')
    return path


@pytest.fixture
def path_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path/bin first on PATH, as a password manager's CLI is installed."""
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_a_commands_output_is_the_value_one_trailing_newline_dropped(path_bin: Path) -> None:
    script(path_bin, "op", f'[ "$1 $2" = "read op://prod/db/password" ] && printf "{VALUE}\\n\\n"')
    spec = cluster(
        path_bin,
        '[services.db]\nimage = "postgres:16"\n'
        'secrets = { DB_PASSWORD = { command = ["op", "read", "op://prod/db/password"] } }\n',
    )
    with pytest.raises(SpecError) as caught:  # two newlines: the second is in the value
        load(spec)
    assert "line break" in str(caught.value)
    script(path_bin, "op", f'printf "{VALUE}\\n"')
    db = load(spec)[0].services[0]
    assert db.secrets == (("DB_PASSWORD", VALUE),)


def test_each_command_runs_once_per_load_however_many_keys_name_it(path_bin: Path) -> None:
    script(path_bin, "vault-cli", f'echo "{VALUE}"')
    script(path_bin, "other-cli", 'echo "another"')
    same = '{ command = ["vault-cli", "get", "db"] }'
    spec = cluster(
        path_bin,
        f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {same}, B = {same} }}\n'
        f'[services.db.secret_files]\n"/run/secrets/db" = {same}\n'
        f'[services.api]\nimage = "api:1"\n'
        f'secrets = {{ C = {same}, D = {{ command = ["other-cli"] }} }}\n',
    )
    found, _ = load(spec)
    db, api = found.service("db"), found.service("api")
    assert db is not None
    assert api is not None
    assert dict(db.secrets) == {"A": VALUE, "B": VALUE}
    assert db.secret_files[0].value == VALUE + "\n"  # a secret file keeps every byte
    assert dict(api.secrets) == {"C": VALUE, "D": "another"}
    assert (runs(path_bin, "vault-cli"), runs(path_bin, "other-cli")) == (1, 1)
    load(spec)  # another run (another apply) asks again: a rotated value is seen
    assert runs(path_bin, "vault-cli") == 2


def test_a_failing_command_is_one_line_naming_it_its_stderr_masked(path_bin: Path) -> None:
    script(path_bin, "good", f'echo "{VALUE}"')
    script(
        path_bin,
        "bw",
        f'echo "partial-{VALUE}-x"\n'
        f'echo "Vault is locked; last value was {VALUE}" >&2\n'
        'echo "run bw unlock" >&2\nexit 3',
    )
    spec = cluster(
        path_bin,
        '[services.db]\nimage = "postgres:16"\n'
        '[services.db.secrets]\nA = { command = ["good"] }\n'
        'B = { command = ["bw", "get", "password", "db"] }\n',
    )
    with pytest.raises(SpecError) as caught:
        load(spec)
    line = str(caught.value)
    assert line == (
        f"{spec}: services.db.secrets.B.command: `bw` exited 3: "
        "Vault is locked; last value was *** run bw unlock"
    )
    assert "\n" not in line
    assert VALUE not in line


LATER = "s3cret-read-later"  # a value of a source after the failing one in the file


@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
def test_a_failing_commands_trace_masks_every_value_of_the_file_read_after_it(
    path_bin: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """A `set -x` trace shows what the script expanded: an `{ env }` value, another
    command's output, a secret file's text, each given by a source after the failing one."""
    monkeypatch.setenv("LATER_PW", LATER)
    script(path_bin, "vault-cli", f'echo "{LATER}-by-command"')
    (path_bin / "tls.key").write_text(f"{LATER}-from-a-file\n")
    (path_bin / "tls.key").chmod(0o600)
    trace = 'set -x; v=$(vault-cli); k=$(cat tls.key); echo "$LATER_PW $v $k"; exit 1'
    spec = cluster(
        path_bin,
        '[services.db]\nimage = "postgres:16"\n'
        f"secrets = {{ A = {{ command = ['sh', '-c', '{trace}'] }} }}\n"
        '[services.api]\nimage = "api:1"\n'
        'secrets = { B = { env = "LATER_PW" }, C = { command = ["vault-cli"] } }\n'
        '[services.api.secret_files]\n"/run/secrets/tls.key" = { file = "tls.key" }\n',
    )
    state = [] if command == "validate" else ["--state", str(path_bin / "state")]
    line = one_line_error(invoke(command, str(spec), *state))
    assert line.startswith(f"{spec}: services.db.secrets.A.command: `sh` exited 1: + ")
    assert "***" in line
    assert LATER not in line
    assert runs(path_bin, "vault-cli") == 2  # once in the trace, once as C: read to mask


def test_a_failing_commands_output_and_a_value_before_it_stay_masked(path_bin: Path) -> None:
    """What a failing command printed on its output is never shown, and masks its error;
    a value read before it (another command's) is masked too; it runs once."""
    script(path_bin, "good", f'echo "{VALUE}"')
    script(
        path_bin,
        "bad",
        f'echo "{LATER}"; echo "{VALUE} / {LATER}" >&2; exit 4',
    )
    spec = cluster(
        path_bin,
        '[services.db]\nimage = "postgres:16"\n'
        'secrets = { A = { command = ["good"] }, B = { command = ["bad"] } }\n'
        '[services.api]\nimage = "api:1"\nsecrets = { C = { command = ["bad"] } }\n',
    )
    with pytest.raises(SpecError) as caught:
        load(spec)
    assert str(caught.value) == f"{spec}: services.db.secrets.B.command: `bad` exited 4: *** / ***"
    assert runs(path_bin, "bad") == 1


def test_a_command_that_hangs_is_stopped_at_its_timeout_with_what_it_started(
    path_bin: Path,
) -> None:
    """The stand-in starts a child of its own (off the pipes, so only a kill of the whole
    process group stops it): it goes with the command, and the load answers with one line
    naming the command and the timeout."""
    script(path_bin, "aws", f'sleep 300 >/dev/null 2>&1 &\necho $! > "{path_bin}/child"\nwait')
    spec = cluster(
        path_bin,
        '[services.db]\nimage = "postgres:16"\n'
        'secrets = { A = { command = ["aws", "secretsmanager"], timeout = "300ms" } }\n',
    )
    with pytest.raises(SpecError) as caught:
        load(spec)
    assert str(caught.value) == (
        f"{spec}: services.db.secrets.A.command: `aws` gave no answer in 300ms and was "
        'stopped: give it longer with timeout = "2m" beside the command'
    )
    child = int((path_bin / "child").read_text())
    assert not _running(child)  # killed with its group, not left behind


def _running(pid: int) -> bool:
    """Whether `pid` is still alive: its pidfd is readable once it has exited (a killed
    process may still be closing down when the load returns; a minute at most is waited
    for its end, which a SIGKILL makes prompt)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        readable, _, _ = select.select([fd], [], [], 60)
    finally:
        os.close(fd)
    return not readable


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{ command = ["no-such-cli-here"] }', "`no-such-cli-here` is not found on the controller"),
        ('{ command = ["printf", ""] }', "`printf` printed nothing on its output"),
        ('{ command = [""] }', "secrets.A.command[0]: the program's name is empty"),
        ('{ command = ["true"], timeout = "0s" }', "A.timeout: must be more than 0s"),
        ('{ command = ["printf", "\\\\377"] }', "`printf` printed something that is not UTF-8"),
        ('{ command = ["true"], file = "x" }', 'with one of file = "path", env = "NAME", command'),
        ('{ env = "HOME", timeout = "1s" }', "services.db.secrets.A.timeout: timeout does not go"),
    ],
)
def test_bad_command_sources_are_one_line(path_bin: Path, body: str, expected: str) -> None:
    spec = cluster(path_bin, f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {body} }}\n')
    with pytest.raises(SpecError) as caught:
        load(spec)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_registry_password_and_a_compose_x_minidock_secret_from_commands(
    path_bin: Path,
) -> None:
    script(path_bin, "doppler", f'echo "{VALUE}"')
    (path_bin / "inventory.toml").write_text(HOST)
    compose = path_bin / "compose.yaml"
    compose.write_text(
        "name: prod\nx-minidock:\n  inventory: inventory.toml\n"
        "services:\n  db:\n    image: postgres:16\n    x-minidock:\n      secrets:\n"
        "        DB_PASSWORD:\n          command: [doppler, secrets, get, DB_PASSWORD, --plain]\n"
    )
    db = load(compose)[0].services[0]
    assert db.secrets == (("DB_PASSWORD", VALUE),)
    spec = cluster(
        path_bin,
        '[registries."registry.example.com"]\nusername = "ci"\n'
        'password = { command = ["doppler", "secrets", "get", "REGISTRY", "--plain"] }\n'
        '[services.db]\nimage = "registry.example.com/db:1"\n',
    )
    auth = load(spec)[0].services[0].registry_auth
    assert auth is not None
    assert auth.password == VALUE


def _db_bytes(state: Path) -> bytes:
    return b"".join(p.read_bytes() for p in state.iterdir() if p.name.startswith("state.db"))


def test_a_commands_value_reaches_the_task_and_nothing_else(path_bin: Path) -> None:
    """Applied with the in-memory engines: the value is in the task's env-file (sent on
    stdin), never in an argv, a label, a report or the state's files."""
    setup: Setup = make_setup(path_bin)
    script(path_bin, "pass", f'[ "$1" = "show" ] && echo "{VALUE}"')
    setup.file.write_text(
        STACK.replace(
            '[services.db]\nimage = "db:1"\n',
            '[services.db]\nimage = "db:1"\n'
            'secrets = { DB_PASSWORD = { command = ["pass", "show", "prod/db"] } }\n',
        )
    )
    outcome = setup.apply(wait=True, timeout=60.0)
    assert outcome.exit_code is ExitCode.OK
    (db,) = (
        d for d in setup.docker.containers() if d["Config"]["Labels"]["minidock.service"] == "db"
    )
    assert f"DB_PASSWORD={VALUE}" in db["Config"]["Env"]
    assert all(
        VALUE not in v for d in setup.docker.containers() for v in d["Config"]["Labels"].values()
    )
    assert db["Config"]["Labels"][LABEL_SPEC]
    calls = [call for e in setup.executors for call in e.calls]
    assert any(VALUE in (call.input or "") for call in calls)  # the env-file, on stdin
    assert not any(VALUE in arg for call in calls for arg in call.argv)
    assert VALUE not in repr(setup.reports)
    assert VALUE.encode() not in _db_bytes(setup.state)
    assert runs(path_bin, "pass") == 1


def test_a_failing_command_at_apply_is_bad_input_before_any_host_is_reached(
    path_bin: Path,
) -> None:
    setup: Setup = make_setup(path_bin)
    script(path_bin, "op", 'echo "[ERROR] not signed in" >&2; exit 1')
    setup.file.write_text(
        STACK.replace(
            '[services.db]\nimage = "db:1"\n',
            '[services.db]\nimage = "db:1"\n'
            'secrets = { P = { command = ["op", "read", "op://x"] } }\n',
        )
    )
    with pytest.raises(BadInput) as caught:
        setup.apply()
    assert str(caught.value).endswith(
        "services.db.secrets.P.command: `op` exited 1: [ERROR] not signed in"
    )
    assert setup.executors == []  # no SSH: refused before any connection
    assert not setup.state.exists()
