"""Rotation (docs/secrets.md#rotation): a changed value from any source rolls the service out
once, and `secrets check FILE` tells which services' running tasks hold an older value
without printing a value or a digest. In-memory engines (tests.fakes) as in test_usecases;
the sources are a stand-in password-manager CLI and a real age file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minidock import usecases
from minidock.cli import app, secrets_lines
from minidock.usecases import ExitCode
from minidock.usecases.secrets import ServiceSecrets, check_secrets
from tests.unit.test_usecases import STACK, Setup, make_setup, run

OLD, NEW = "first-value-1111", "second-value-2222"


def _tasks(setup: Setup, service: str) -> set[str]:
    return {
        d["Id"]
        for d in setup.docker.containers()
        if d["Config"]["Labels"].get("minidock.service") == service
        and d["State"]["Status"] == "running"
    }


@pytest.fixture
def vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    """STACK with db's DB_PASSWORD from a stand-in `op` that prints tmp_path/value, and
    web's API_TOKEN from a plain secret file."""
    setup = make_setup(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    op = bin_dir / "op"
    op.write_text(f'#!/bin/sh\ncat "{tmp_path}/value"\n')
    op.chmod(0o700)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "value").write_text(OLD + "\n")
    token = tmp_path / "token"
    token.write_text("web-token\n")
    token.chmod(0o600)
    setup.file.write_text(
        STACK.replace(
            '[services.db]\nimage = "db:1"\n',
            '[services.db]\nimage = "db:1"\n'
            'secrets = { DB_PASSWORD = { command = ["op", "read", "op://prod/db/password"] } }\n',
        ).replace(
            '[services.web]\nimage = "web:5"\n',
            '[services.web]\nimage = "web:5"\nsecrets = { API_TOKEN = { file = "token" } }\n',
        )
    )
    setup.converged()
    return setup


def _check(setup: Setup) -> usecases.ExitCode:
    return run(check_secrets(setup.file, setup.state, setup.runtime())).exit_code


def test_a_rotated_value_in_the_manager_rolls_the_service_out_once(vault: Setup) -> None:
    db, web = _tasks(vault, "db"), _tasks(vault, "web")
    assert _check(vault) is ExitCode.OK
    (vault.root / "value").write_text(NEW + "\n")  # rotated in the password manager
    found = run(check_secrets(vault.file, vault.state, vault.runtime()))
    assert found.exit_code is ExitCode.FAILED
    assert found.services == (
        ServiceSecrets("db", 1, older=1, changed=("DB_PASSWORD",)),
        ServiceSecrets("web", 2),
    )
    assert _tasks(vault, "db") == db  # the check changed nothing
    assert vault.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    rolled = _tasks(vault, "db")
    assert len(rolled) == 1
    assert not rolled & db
    assert _tasks(vault, "web") == web
    (new_db,) = (d for d in vault.docker.containers() if d["Id"] in rolled)
    assert f"DB_PASSWORD={NEW}" in new_db["Config"]["Env"]
    assert _check(vault) is ExitCode.OK
    assert vault.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK  # once, not again
    assert _tasks(vault, "db") == rolled


def test_a_rotated_age_file_rolls_out_once(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    key = tmp_path / "key.txt"
    subprocess.run(["age-keygen", "-o", str(key)], capture_output=True, check=True, timeout=60)
    key.chmod(0o600)
    public = subprocess.run(
        ["age-keygen", "-y", str(key)], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()

    def encrypt(value: str) -> None:
        subprocess.run(
            ["age", "-e", "-r", public, "-o", str(tmp_path / "prod.age")],
            input=f"DB_PASSWORD={value}\n",
            text=True,
            check=True,
            timeout=60,
        )

    encrypt(OLD)
    setup.file.write_text(
        STACK.replace(
            '[services.db]\nimage = "db:1"\n',
            '[services.db]\nimage = "db:1"\n'
            'secrets = { DB_PASSWORD = { age_file = "prod.age", key = "DB_PASSWORD", '
            'identity = "key.txt" } }\n',
        )
    )
    setup.converged()
    db = _tasks(setup, "db")
    encrypt(OLD)  # the same value encrypted again: another file, the same secret
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    assert _tasks(setup, "db") == db
    encrypt(NEW)
    assert _check(setup) is ExitCode.FAILED
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    assert len(_tasks(setup, "db")) == 1
    assert not _tasks(setup, "db") & db
    assert _check(setup) is ExitCode.OK


def test_secrets_check_prints_names_never_a_value_or_a_digest(
    vault: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    (vault.root / "value").write_text(NEW + "\n")
    found = run(check_secrets(vault.file, vault.state, vault.runtime()))
    lines = secrets_lines(found)
    assert lines == [
        f"db: 1 of 1 running task holds an older DB_PASSWORD: `minidock apply {vault.file}` "
        "rolls them out",
        "web: every running task holds the current values",
    ]
    text = "\n".join(lines)
    with_digests = [d["Config"]["Labels"]["minidock.spec"] for d in vault.docker.containers()]
    assert OLD not in text
    assert NEW not in text
    assert not any(label in text for label in with_digests)


def test_secrets_check_with_a_failing_source_is_one_line_exit_2(tmp_path: Path) -> None:
    """A source that fails is one line, exit 2, before any host or state is touched."""
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "h"\naddress = "127.0.0.1"\n')
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        'cluster = "c"\ninventory = "inventory.toml"\n[services.db]\nimage = "db:1"\n'
        'secrets = { P = { command = ["false"] } }\n'
    )
    done = CliRunner().invoke(app, ["secrets", "check", str(spec), "--state", str(tmp_path / "s")])
    assert done.exit_code == 2
    assert not (tmp_path / "s").exists()
    assert done.output.strip() == (
        f"minidock: {spec}: services.db.secrets.P.command: `false` exited 1: "
        "(nothing on its standard error)"
    )
