"""Two controllers of different versions on one state (issue 45): a state written by
MiniDock 0.4 (schema 2) is read as it is by 0.5's readers and raised to schema 3 by 0.5's
first writer; from then on a controller that knows only schema 2 (0.4) refuses it with one
line (it would drop what 0.5 records), and its readers alike. Both stores. The etcd
store's schema 4 (the state in a key per host, service and slot) is raised alike."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from minidock import store as stores
from minidock.store import etcd as etcd_store
from minidock.store import sqlite as sqlite_store
from minidock.store.directory import DB_NAME
from minidock.store.etcd_client import delete, put
from minidock.store.location import EtcdURL
from tests.unit.test_state import _event, _state


def _commit(location: stores.StateLocation) -> None:
    stores.prepare(location)
    lock = stores.writer_lock(location)
    lock.acquire()
    store = lock.store()
    try:
        store.commit(_state(1), [_event(1)])
    finally:
        store.close()
        lock.release()


def _version(directory: Path) -> int:
    db = sqlite3.connect(directory / DB_NAME)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_schema_2_directory_is_raised_by_the_first_writer_then_refused_by_an_older_minidock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    with monkeypatch.context() as older:  # MiniDock 0.4 writes it
        older.setattr(sqlite_store, "SCHEMA_VERSION", 2)
        _commit(state)
    assert _version(state) == 2
    reader = stores.open_reader(state)  # 0.5 reads it, as it is
    assert reader.load() == _state(1)
    reader.close()
    assert _version(state) == 2
    _commit(state)  # 0.5's first writer raises it
    assert _version(state) == sqlite_store.SCHEMA_VERSION == 3
    monkeypatch.setattr(sqlite_store, "SCHEMA_VERSION", 2)  # 0.4 again
    with pytest.raises(stores.StoreUnusable, match=r"has schema version 3; .* upgrade minidock"):
        stores.open_reader(state)


def _as_written_before_schema_4(url: EtcdURL, schema: int) -> None:
    """The state as MiniDock 0.4 (schema 2) or 0.5 (3) left it: one PREFIX/controller key."""
    writer = etcd_store.EtcdWriter(url)
    writer.acquire()
    try:
        store = writer.store()
        keys, state = store.keys, store.load()
        old = replace(writer.meta, schema=schema)
        ops = [
            delete(keys.state, etcd_store.range_end(keys.state)),
            put(keys.controller, store.codec.dumps(state).encode()),
            put(keys.meta, old.dumps().encode()),
        ]
        writer.fenced_txn(ops, old)
    finally:
        writer.release()


@pytest.mark.parametrize("schema", [2, 3])
def test_an_etcd_state_is_raised_alike_and_moved_into_a_key_per_part(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch, schema: int
) -> None:
    """0.4's and 0.5's one key is read as it is by this MiniDock's readers; its first
    writer moves it into PREFIX/state/ keys (schema 4) and deletes the old key; then an
    older MiniDock refuses it with one line."""
    url = stores.parse_location(etcd_url)
    assert isinstance(url, EtcdURL)
    _commit(url)
    _as_written_before_schema_4(url, schema)
    store = etcd_store.EtcdStore.open(url)
    assert store.meta()[0].schema == schema
    assert store.load() == _state(1)
    assert store.kvs(store.keys.state, etcd_store.range_end(store.keys.state)) == []
    store.close()
    _commit(url)  # this MiniDock's first writer raises it
    store = etcd_store.EtcdStore.open(url)
    assert store.meta()[0].schema == etcd_store.SCHEMA_VERSION == 4
    assert store.load() == _state(1)
    assert store.kvs(store.keys.controller) == []
    assert len(store.kvs(store.keys.state, etcd_store.range_end(store.keys.state))) > 3
    store.close()
    monkeypatch.setattr(etcd_store, "SCHEMA_VERSION", 3)  # 0.5 again
    with pytest.raises(stores.StoreUnusable, match=r"schema version 4; .* upgrade minidock"):
        stores.open_reader(url)
