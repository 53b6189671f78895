"""`minidock state backup FILE` and `minidock state restore FILE` (issue 45): the controller's
own state, written consistently while the writer lock is held elsewhere, its secrets still
sealed and the key file not in it; restored on a new controller (a new state directory,
or etcd) with the old controller id, after which a pass over the same fleet changes
nothing. Bad input is one line with exit 2 and writes nothing."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from minidock import store as stores
from minidock import usecases
from minidock.store import parse_location
from minidock.store.sealing import KEY_ENV, KEY_NAME
from minidock.usecases import ExitCode
from tests.unit.test_cli import invoke, one_line_error, snapshot
from tests.unit.test_migrate import _snapshot
from tests.unit.test_secrets_at_rest import DB_SECRET, Fleet, fleet, leaks
from tests.unit.test_usecases import run

__all__ = ["fleet"]  # the fixture, shared


@pytest.fixture
def applied(fleet: Fleet, tmp_path: Path) -> Path:
    """A state directory that applied a spec with secrets and converged."""
    state = tmp_path / "state"
    fleet.apply(state, 1, DB_SECRET)
    fleet.reconcile(state)
    return state


def test_a_backup_holds_everything_sealed_and_no_key(applied: Path, tmp_path: Path) -> None:
    file = tmp_path / "minidock-state.json"
    lock = stores.writer_lock(applied)
    lock.acquire()  # a pass under way: the backup takes no lock and reads one point in time
    try:
        done = invoke("state", "backup", str(file), "--state", str(applied))
    finally:
        lock.release()
    assert done.exit_code == 0, done.output
    assert "wrote" in done.stdout
    assert "sealed with key" in done.stdout
    assert file.stat().st_mode & 0o777 == 0o600
    blob = file.read_bytes()
    assert leaks(blob) == []
    assert (applied / KEY_NAME).read_bytes().strip() not in blob
    doc = json.loads(blob)
    assert doc["controller"] == (applied / "controller-id").read_text().strip()
    assert [c["name"] for c in doc["clusters"]] == ["rest"]


def test_a_restore_on_a_new_controller_converges_the_same_fleet_with_no_change(
    fleet: Fleet, applied: Path, tmp_path: Path
) -> None:
    file = tmp_path / "backup.json"
    assert invoke("state", "backup", str(file), "--state", str(applied)).exit_code == 0
    fresh = tmp_path / "new-controller"
    key = tmp_path / "kept.key"
    shutil.copy(applied / KEY_NAME, key)
    os.chmod(key, 0o600)
    done = invoke("state", "restore", str(file), "--state", str(fresh), "--key-file", str(key))
    assert done.exit_code == 0, done.output
    assert _snapshot(fresh) == _snapshot(applied)
    assert (fresh / "controller-id").read_text() == (applied / "controller-id").read_text()
    before = {c["Id"] for c in fleet.docker.containers()}
    outcome = run(usecases.reconcile(fresh, fleet.runtime(), usecases.ignore))
    assert outcome.exit_code is ExitCode.OK, outcome
    assert {c["Id"] for c in fleet.docker.containers()} == before  # no task started or stopped
    assert _snapshot(fresh).state.services["db"].spec.secrets == (("DB_PASSWORD", DB_SECRET),)


def test_a_restore_without_the_key_or_with_another_is_refused_before_anything_is_written(
    applied: Path, tmp_path: Path
) -> None:
    file = tmp_path / "backup.json"
    assert invoke("state", "backup", str(file), "--state", str(applied)).exit_code == 0
    fresh = tmp_path / "new"
    line = one_line_error(invoke("state", "restore", str(file), "--state", str(fresh)))
    assert "sealed with key" in line
    assert "secrets.key" in line
    assert snapshot(fresh) == {}
    other = tmp_path / "other"  # a new state directory given another key
    other.mkdir(mode=0o700)
    (other / KEY_NAME).write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    os.chmod(other / KEY_NAME, 0o600)
    line = one_line_error(invoke("state", "restore", str(file), "--state", str(other)))
    assert "the backup's secrets are sealed with key" in line
    assert not stores.has_state(other)


def test_a_store_holding_a_state_is_replaced_only_with_force(applied: Path, tmp_path: Path) -> None:
    file = tmp_path / "backup.json"
    assert invoke("state", "backup", str(file), "--state", str(applied)).exit_code == 0
    before = snapshot(applied)
    line = one_line_error(invoke("state", "restore", str(file), "--state", str(applied)))
    assert line.endswith("already holds a state: add --force to replace it")
    assert snapshot(applied) == before
    forced = invoke("state", "restore", str(file), "--state", str(applied), "--force")
    assert forced.exit_code == 0, forced.output


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        ("not json", "not a state backup"),
        ('{"format": "something-else"}', "format is not minidock-state-backup/1"),
    ],
)
def test_a_bad_backup_file_is_one_line(tmp_path: Path, content: str | None, said: str) -> None:
    file = tmp_path / "backup.json"
    if content is not None:
        file.write_text(content)
    fresh = tmp_path / "state"
    assert said in one_line_error(invoke("state", "restore", str(file), "--state", str(fresh)))
    assert snapshot(fresh) == {}


def test_nothing_to_back_up_is_one_line(tmp_path: Path) -> None:
    state = tmp_path / "empty"
    line = one_line_error(invoke("state", "backup", str(tmp_path / "f"), "--state", str(state)))
    assert line == f"nothing to back up: no state in {state}"
    assert not (tmp_path / "f").exists()


def test_an_etcd_state_backs_up_and_restores_into_a_directory(
    fleet: Fleet, etcd_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "etcd.key"
    monkeypatch.setenv(KEY_ENV, str(key))
    location = parse_location(etcd_url)
    fleet.apply(location, 1, DB_SECRET)
    file = tmp_path / "backup.json"
    done = invoke("state", "backup", str(file), "--state", etcd_url)
    assert done.exit_code == 0, done.output
    assert leaks(file.read_bytes()) == []
    fresh = tmp_path / "dir"
    back = invoke("state", "restore", str(file), "--state", str(fresh), "--key-file", str(key))
    assert back.exit_code == 0, back.output
    assert _snapshot(fresh) == _snapshot(location)
