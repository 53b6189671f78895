"""Secrets (issue 9): env values given without writing them in the spec, read on the
controller at apply, sent only on `docker run`'s stdin, and masked whatever their length."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minidock.commands.docker import run_argv
from minidock.core import Waiting
from minidock.core.plan import WaitKind
from minidock.masking import Masker, kept_masker
from minidock.model import secret_values
from minidock.spec import SpecError, load
from minidock.spec.messages import ONE_SOURCE
from tests.sim import World, host, svc

CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n[services.db]\nimage = "db:1"\n'
HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'


def spec(tmp_path: Path, body: str) -> Path:
    (tmp_path / "inventory.toml").write_text(HOST)
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER + body)
    return path


def secret_file(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_a_secret_from_a_file_beside_the_spec(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    secret_file(tmp_path / "secrets", "db", "abc\n")
    cluster, _ = load(spec(tmp_path, 'secrets = { DB_PASSWORD = { file = "secrets/db" } }\n'))
    (db,) = cluster.services
    assert db.secrets == (("DB_PASSWORD", "abc"),)  # one trailing newline dropped
    assert "abc" not in repr(db)  # never in a repr, a log line or a test failure


def test_a_secret_from_the_controllers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROD_DB_PASSWORD", "xy")
    cluster, _ = load(spec(tmp_path, 'secrets = { DB_PASSWORD = { env = "PROD_DB_PASSWORD" } }\n'))
    assert cluster.services[0].secrets == (("DB_PASSWORD", "xy"),)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'secrets = { P = { env = "NOT_SET_ANYWHERE_42" } }\n',
            "services.db.secrets.P.env: NOT_SET_ANYWHERE_42 is not set in the controller's "
            "environment",
        ),
        (
            'secrets = { P = { file = "nope" } }\n',
            "services.db.secrets.P.file: secret file not found: {tmp}/nope",
        ),
        (
            'secrets = { P = { file = "s", env = "X" } }\n',
            f"services.db.secrets.P: {ONE_SOURCE}",
        ),
        (
            "secrets = { P = {} }\n",
            f"services.db.secrets.P: {ONE_SOURCE}",
        ),
        (
            'secrets = { P = "abc" }\n',
            f"services.db.secrets.P: {ONE_SOURCE}",
        ),
        (
            'env = { P = "x" }\nsecrets = { P = { file = "s" } }\n',
            "services.db.secrets.P: P is also set in env: give it in one of env or secrets",
        ),
        (
            "env = { P = 12345 }\n",
            "services.db.env.P: expected a string, got an integer (write it in quotes)",
        ),
        (
            "env = { P = [1, 2] }\n",
            "services.db.env.P: expected a string, got an array (write it in quotes)",
        ),
    ],
)
def test_bad_secrets_are_one_line_naming_the_field_never_the_value(
    tmp_path: Path, body: str, expected: str
) -> None:
    secret_file(tmp_path, "s", "abc")
    with pytest.raises(SpecError) as err:
        load(spec(tmp_path, body))
    assert str(err.value) == "{}: {}".format(
        tmp_path / "cluster.toml", expected.format(tmp=tmp_path)
    )
    assert "12345" not in str(err.value)
    assert "abc" not in str(err.value)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o664])
def test_a_secret_file_others_may_read_is_a_warning(
    tmp_path: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    path = secret_file(tmp_path, "s", "abc", mode)
    with caplog.at_level("WARNING", logger="minidock.spec"):
        load(spec(tmp_path, 'secrets = { P = { file = "s" } }\n'))
    assert [r.getMessage().split(": ", 2)[2] for r in caplog.records] == [
        f"{path} is open to the group or others (mode {mode:04o}): chmod 600 {path}"
    ]


@pytest.mark.parametrize("mode", [0o602, 0o666])
def test_a_secret_file_every_user_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path, "s", "abc", mode)
    with pytest.raises(SpecError) as err:
        load(spec(tmp_path, 'secrets = { P = { file = "s" } }\n'))
    assert f"{path} is writable by every user: chmod 600 {path}" in str(err.value)


def test_a_secret_travels_on_stdin_and_rolls_out_when_it_changes() -> None:
    a = svc("db", env=(("ROLE", "db"),), secrets=(("DB_PASSWORD", "abc"),))
    argv, stdin = run_argv(a, "prod", 1, "t1", a.spec_hash())
    assert not any("abc" in arg for arg in argv)
    assert "DB_PASSWORD=abc\n" in stdin
    b = svc("db", env=(("ROLE", "db"),), secrets=(("DB_PASSWORD", "abd"),))
    assert a.spec_hash() != b.spec_hash()
    assert "abc" not in a.spec_hash()


def test_every_secret_is_masked_whatever_its_length_short_env_values_stay_readable() -> None:
    s = svc("db", env=(("ROLE", "db"),), secrets=(("K", "abc"), ("Q", "z")))
    assert set(secret_values(s)) == {"abc", "z"}
    assert Masker(secret_values(s))("role db, key abc, q z") == "role db, key ***, q ***"


def test_a_plan_carries_no_secret_in_any_line() -> None:
    """Stops, pending reasons, waits, events, slot lines: all masked by `Masker.plan`."""
    w = World([host("h1", cpus=1)])
    db = svc("db", image="crash:1", cpus=2.0, secrets=(("K", "abc"),))
    w.apply(db)
    plan = w.plan()
    (pending,) = plan.pending
    leaky = type(plan)(
        plan.state,
        stop=(),
        pending=(type(pending)("db", 1, pending.reason + " abc"),),
        waiting=(Waiting("db.1", "abc", WaitKind.STARTING, "db"),),
    )
    masked = kept_masker(plan.state).plan(leaky)
    assert "abc" not in repr(masked.pending) + repr(masked.waiting)
    assert masked.waiting[0] == "db.1: ***"


def test_validate_and_apply_warn_once_per_secret_looking_env_key(tmp_path: Path) -> None:
    """27.7: an env key that looks secret stays masked (and sealed), and `validate` and
    `apply` say once to move it to `secrets`; plain env keys draw no warning."""
    from typer.testing import CliRunner

    from minidock.cli import app

    path = spec(tmp_path, 'env = { DB_PASSWORD = "pw-7", UPSTREAM = "http://web:8080/" }\n')
    # apply's pass goes to loopback only: a port nothing listens on refuses at once
    (tmp_path / "inventory.toml").write_text(
        '[[hosts]]\nname = "host1"\naddress = "127.0.0.1"\nport = 1\n'
    )
    warning = (
        f"minidock: warning: {path}: services.db.env.DB_PASSWORD: looks like a secret; it is "
        "masked and sealed as one, but move it to secrets = { DB_PASSWORD = { file = "
        '"PATH" } } so the cluster file holds no secret'
    )
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0, checked.output
    assert checked.stderr.splitlines() == [warning]
    assert "pw-7" not in checked.output
    state = tmp_path / "state"
    applied = CliRunner().invoke(app, ["apply", str(path), "--state", str(state)])
    assert applied.stderr.splitlines()[0] == warning
    assert applied.stderr.count("looks like a secret") == 1
    plain = spec(tmp_path, 'env = { UPSTREAM = "http://web:8080/" }\n')
    assert CliRunner().invoke(app, ["validate", str(plain)]).stderr == ""
