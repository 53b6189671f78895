"""Files that must be private: the state directory and the inventory's private key.

A state directory open to group or others, or owned by another user, and an identity file
open to group or others are refused before any SSH connection: one line naming the path
and the fix, exit 2, never a traceback (OpenSSH's "UNPROTECTED PRIVATE KEY FILE").
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
from typer.testing import CliRunner, Result

from minidock.cli import app
from minidock.core import admit
from minidock.model import Event
from minidock.spec import load
from minidock.store.directory import (
    DB_NAME,
    ENV_STATE,
    LOCK_NAME,
    StateError,
    StateLock,
    check_state_dir,
    ensure_state_dir,
    state_dir,
)
from minidock.store.sqlite import SQLiteStore

CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n[services.web]\nimage = "web:5"\n'
HOST = '[[hosts]]\nname = "host1"\naddress = "127.0.0.1"\nport = 1\n'
LOOSE_MODES = [0o750, 0o705, 0o770, 0o707, 0o777, 0o710, 0o701]


@pytest.fixture
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record (and refuse) any SSH connection attempt."""
    calls: list[str] = []

    async def connect(*args: object, **kwargs: object) -> None:
        calls.append(f"asyncssh.connect {args}")
        raise AssertionError("no SSH expected")

    monkeypatch.setattr(asyncssh, "connect", connect)
    yield calls
    assert calls == [], "SSH was attempted"


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cluster.toml and inventory.toml in tmp_path (the working directory), no $MINIDOCK_STATE."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STATE, raising=False)
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    (tmp_path / "inventory.toml").write_text(HOST)
    return tmp_path


def applied(directory: Path, cluster_file: Path) -> None:
    cluster, _ = load(cluster_file)
    with SQLiteStore.open(directory) as store:
        event = Event(time.time(), "apply", "applied as generation 1")
        store.commit(admit(store.load(), cluster, 1), [event], cluster, str(cluster_file))


def one_line_exit_2(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("minidock: ")
    return line.removeprefix("minidock: ")


# -- the state directory, in the store ------------------------------------------------------
@pytest.mark.parametrize("mode", LOOSE_MODES)
def test_a_state_directory_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    d = tmp_path / "state"
    SQLiteStore.open(d).close()
    d.chmod(mode)
    expected = (
        f"state directory {d} is accessible by group or others (mode {mode:04o}): run chmod 700 {d}"
    )
    for use in (
        check_state_dir,
        ensure_state_dir,
        SQLiteStore.open,
        lambda p: StateLock(p).acquire(),
    ):
        with pytest.raises(StateError) as err:
            use(d)
        assert str(err.value) == expected
    with pytest.raises(StateError, match="accessible by group or others"):
        state_dir(str(d))
    d.chmod(0o700)
    SQLiteStore.open(d).close()  # fixed: usable again, nothing was changed by the refusals


def test_a_new_state_directory_is_made_private_and_a_missing_one_is_fine(tmp_path: Path) -> None:
    d = tmp_path / "new" / "state"
    check_state_dir(d)  # nothing there yet: nothing to refuse
    assert state_dir(str(d)) == d
    ensure_state_dir(d)
    assert d.stat().st_mode & 0o777 == 0o700


def test_a_state_directory_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "state"
    SQLiteStore.open(d).close()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(StateError) as err:
        SQLiteStore.open(d)
    owner, other = pwd.getpwuid(me).pw_name, pwd.getpwuid(me + 1).pw_name
    assert str(err.value) == (
        f"state directory {d} is owned by {owner} (uid {me}), not by this user "
        f"({other} (uid {me + 1})): run MiniDock as its owner, `sudo -u {owner} minidock ...`"
    )


def test_the_owner_without_a_passwd_entry_is_named_by_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "state"
    SQLiteStore.open(d).close()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    with pytest.raises(StateError, match=rf"owned by uid {me}, .* `sudo -u #{me} minidock"):
        SQLiteStore.open(d)


@pytest.mark.parametrize("name", [DB_NAME, LOCK_NAME])
def test_a_file_this_user_may_not_open_is_a_state_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # another user's state.db or lock inside a private directory (root bypasses the mode
    # bits, so the open is made to fail here)
    real_open = os.open

    def refusing_open(path: str | Path, flags: int, mode: int = 0o777) -> int:
        if Path(path).name == name:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(StateError) as err:
        SQLiteStore.open(tmp_path) if name == DB_NAME else StateLock(tmp_path).acquire()
    assert str(err.value) == f"cannot use {tmp_path / name}: permission denied"


# -- the CLI: one line, exit 2, before any connection -----------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["apply", "cluster.toml"],
        ["plan", "cluster.toml"],
        ["reconcile"],
        ["status"],
        ["events"],
        ["drain", "host1"],
        ["watch"],
    ],
    ids=lambda a: a[0],
)
def test_cli_refuses_a_loose_state_directory(
    files: Path, no_ssh: list[str], args: list[str]
) -> None:
    d = files / "state"
    applied(d, files / "cluster.toml")
    d.chmod(0o755)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in d.iterdir())
    result = CliRunner().invoke(app, [*args, "--state", str(d)])
    assert one_line_exit_2(result) == (
        f"state directory {d} is accessible by group or others (mode 0755): run chmod 700 {d}"
    )
    assert sorted((p.name, p.stat().st_mtime_ns) for p in d.iterdir()) == before


def test_cli_refuses_the_default_state_directory_of_another_user(
    files: Path, no_ssh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    applied(files / ".minidock", files / "cluster.toml")
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    line = one_line_exit_2(CliRunner().invoke(app, ["apply", "cluster.toml"]))
    owner = pwd.getpwuid(me).pw_name
    assert line.startswith(f"state directory {files / '.minidock'} is owned by {owner} (uid {me})")
    assert line.endswith(f"`sudo -u {owner} minidock ...`")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_cli_refuses_a_private_key_open_to_others(
    files: Path, no_ssh: list[str], mode: int
) -> None:
    key = files / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(mode)
    (files / "inventory.toml").write_text('[defaults]\nidentity_file = "id_ed25519"\n' + HOST)
    for args in (["apply", "cluster.toml"], ["plan", "cluster.toml"], ["validate", "cluster.toml"]):
        line = one_line_exit_2(CliRunner().invoke(app, args))
        assert line == (
            f"inventory.toml: defaults.identity_file: private key {key} is accessible by "
            f"group or others (mode {mode:04o}): run chmod 600 {key}"
        )
    assert not (files / ".minidock").exists()  # refused before any state was made


def test_cli_refuses_a_loose_key_at_reconcile_too(files: Path, no_ssh: list[str]) -> None:
    key = files / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    (files / "inventory.toml").write_text('[defaults]\nidentity_file = "id_ed25519"\n' + HOST)
    applied(files / "state", files / "cluster.toml")
    key.chmod(0o664)  # loosened after the apply: the inventory is read afresh every pass
    line = one_line_exit_2(CliRunner().invoke(app, ["reconcile", "--state", str(files / "state")]))
    assert f"private key {key} is accessible by group or others (mode 0664)" in line


# -- a state directory this user cannot even look into ------------------------------------------
def test_cli_one_line_for_a_state_directory_it_cannot_look_into(
    files: Path, no_ssh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a non-root user meets with another user's 0700 directory on the path (root
    # never does: it bypasses the mode bits, so the stat is made to fail here).
    d = files / "locked" / "state"
    applied(d, files / "cluster.toml")
    real_stat = Path.stat

    def stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        if self == d:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "stat", stat)
    for args in (["status"], ["reconcile"], ["events"], ["apply", "cluster.toml"]):
        line = one_line_exit_2(CliRunner().invoke(app, [*args, "--state", str(d)]))
        assert line == f"state directory {d}: Permission denied"
