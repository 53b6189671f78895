"""`minidock state migrate`: a SQLite state into etcd and back, whole (generations with
their times and source paths, the controller state, events with their ids), a non-empty
target refused unless --force, and bad input as one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock import store as stores
from minidock.store import StateLocation
from tests.unit.test_cli import HOSTS, WEB, applied, invoke, one_line_error
from tests.unit.test_state import _event, _state


def _snapshot(location: StateLocation) -> stores.Snapshot:
    store = stores.open_reader(location)
    try:
        return store.snapshot()
    finally:
        store.close()


@pytest.fixture
def embedded(tmp_path: Path) -> Path:
    """A SQLite state with one applied generation and a few more commits."""
    (tmp_path / "inventory.toml").write_text(HOSTS)
    (tmp_path / "web.toml").write_text(WEB)
    state = tmp_path / "state"
    applied(state, tmp_path / "web.toml")
    lock = stores.writer_lock(state)
    lock.acquire()
    lock.store().commit(_state(1), [_event(2), _event(3, "run")])
    lock.release()
    return state


def test_a_sqlite_state_moves_into_etcd_and_back_unchanged(
    embedded: Path, etcd_url: str, tmp_path: Path
) -> None:
    before = _snapshot(embedded)
    up = invoke("state", "migrate", "--from", str(embedded), "--to", etcd_url)
    assert up.exit_code == 0, up.output
    assert "copied 1 generations, the controller state and 3 events" in up.stdout
    assert "an empty store" in up.stdout
    in_etcd = _snapshot(stores.parse_location(etcd_url))
    assert in_etcd == before
    # the etcd state serves every reader as the SQLite one did
    listed = invoke("events", "--state", etcd_url, "-n", "5")
    assert listed.exit_code == 0, listed.output
    assert [line.split(" ", 2)[2] for line in listed.stdout.splitlines()] == [
        f"apply: applied {tmp_path / 'web.toml'} as generation 1",
        "apply: commit 2",
        "run: commit 3",
    ]
    back = tmp_path / "back"
    down = invoke("state", "migrate", "--state", etcd_url, "--to", str(back))
    assert down.exit_code == 0, down.output
    assert _snapshot(back) == before
    assert _snapshot(embedded) == before  # the source is left as it was


def test_a_target_holding_a_state_is_refused_unless_forced(embedded: Path, etcd_url: str) -> None:
    assert invoke("state", "migrate", "--from", str(embedded), "--to", etcd_url).exit_code == 0
    lock = stores.writer_lock(embedded)
    lock.acquire()
    lock.store().commit(_state(1), [_event(4)])
    lock.release()
    refused = invoke("state", "migrate", "--from", str(embedded), "--to", etcd_url)
    line = one_line_error(refused)
    assert line.endswith(
        "already holds a state (1 generations, 3 events): add --force to replace it"
    )
    forced = invoke("state", "migrate", "--from", str(embedded), "--to", etcd_url, "--force")
    assert forced.exit_code == 0, forced.output
    assert "replacing the state there" in forced.stdout
    assert _snapshot(stores.parse_location(etcd_url)) == _snapshot(embedded)


def test_nothing_to_migrate_and_the_same_store_twice_are_refused(
    tmp_path: Path, embedded: Path
) -> None:
    empty = one_line_error(
        invoke("state", "migrate", "--from", str(tmp_path / "none"), "--to", str(tmp_path / "x"))
    )
    assert empty == f"nothing to migrate: no state in {tmp_path / 'none'}"
    assert not (tmp_path / "x").exists()
    same = one_line_error(
        invoke("state", "migrate", "--from", str(embedded), "--to", str(embedded))
    )
    assert "nothing to migrate" in same
    bad = one_line_error(invoke("state", "migrate", "--from", str(embedded), "--to", "etcd://h:1"))
    assert "name a key prefix" in bad
