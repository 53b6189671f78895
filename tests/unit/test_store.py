"""The store's semantics, the same on both backends: the embedded SQLite store and the etcd
store (on the session's real three-member etcd, tests/etcd.py). Generations, controller
state, events (ids only grow, paging by id), all-or-nothing commits, one writer, and the
whole-store copy a migration makes."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from minidock import store as stores
from minidock.core import Availability, ControllerState, HostState
from minidock.model import Event
from minidock.store import (
    GenerationRecord,
    PortableStore,
    Snapshot,
    StateLocation,
    StoreUnusable,
    WriterBusy,
    WriterLock,
)
from tests.unit.test_state import _cluster, _event, _Exploding, _state


@dataclass
class Backend:
    """One backend's location, with writers and readers opened the way the use cases do."""

    name: str
    location: StateLocation
    opened: list[Callable[[], None]]

    def writer(self) -> tuple[WriterLock, PortableStore]:
        stores.prepare(self.location)
        lock = stores.writer_lock(self.location)
        lock.acquire()
        store = lock.store()
        self.opened.append(lambda: (store.close(), lock.release()))
        return lock, store

    def reader(self) -> PortableStore:
        store = stores.open_reader(self.location)
        self.opened.append(store.close)
        return store


@pytest.fixture(params=["sqlite", "etcd"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        location: StateLocation = tmp_path / "state"
    else:
        location = stores.parse_location(request.getfixturevalue("etcd_url"))
    made = Backend(request.param, location, [])
    yield made
    for close in reversed(made.opened):
        close()


@pytest.fixture
def store(backend: Backend) -> PortableStore:
    """A writer's store: the lock is held until the test ends."""
    return backend.writer()[1]


# -- round-trips ------------------------------------------------------------------------------
def test_empty_store_loads_empty_state(store: PortableStore) -> None:
    assert store.load() == ControllerState()
    assert store.latest_generation() is None
    assert store.generation(1) is None
    assert store.events() == []
    assert store.next_generation_id() == 1
    assert store.snapshot().empty


def test_round_trip_state_generation_events(backend: Backend, store: PortableStore) -> None:
    gen = store.commit(_state(1), [_event(1), _event(1, "task.started")], _cluster(1), "a.toml")
    assert gen == 1
    reader = backend.reader()  # a fresh connection sees it all
    loaded = reader.load()
    assert loaded == _state(1)
    assert loaded.services["web"].slots[3].last_exit.startswith("1:")  # int keys survive
    assert reader.latest_generation() == (1, _cluster(1))
    assert reader.generation(1) == _cluster(1)
    assert [e for _, e in reader.events()] == [_event(1), _event(1, "task.started")]
    assert stores.has_state(backend.location)


def test_the_cluster_is_the_loaded_states_cluster_before_and_after_commits(
    backend: Backend, store: PortableStore
) -> None:
    reader = backend.reader()
    assert store.cluster() == reader.cluster() == ""
    store.commit(replace(_state(1), cluster="shop"), generation=_cluster(1))
    assert reader.load().cluster == reader.cluster() == "shop"
    store.commit(replace(_state(1), cluster="shop", guard="held"))
    assert store.cluster() == backend.reader().cluster() == "shop"


def test_commit_without_generation_replaces_state_only(store: PortableStore) -> None:
    store.commit(_state(1), generation=_cluster(1))
    drained = ControllerState(
        generation=1, hosts={"host1": HostState(availability=Availability.DRAINED)}
    )
    assert store.commit(drained, [_event(2, "host.drained")]) is None
    assert store.load() == drained
    assert store.latest_generation() == (1, _cluster(1))


def test_generation_ids_increase(backend: Backend, store: PortableStore) -> None:
    ids = []
    for i in range(1, 6):
        assert store.next_generation_id() == i
        ids.append(store.commit(_state(i), generation=_cluster(i), source_path=f"{i}.toml"))
    assert ids == [1, 2, 3, 4, 5]
    assert store.latest_generation() == (5, _cluster(5))
    assert store.generation(2) == _cluster(2)
    assert backend.reader().next_generation_id() == 6


def test_generation_must_match_state(store: PortableStore) -> None:
    with pytest.raises(ValueError, match="generation"):
        store.commit(_state(7), [_event(7)], generation=_cluster(7))
    assert store.load() == ControllerState()
    assert store.events() == []


def test_commit_is_all_or_nothing_on_python_error(backend: Backend, store: PortableStore) -> None:
    store.commit(_state(1), [_event(1)], _cluster(1))
    with pytest.raises(RuntimeError, match="boom"):
        store.commit(_state(2), _Exploding(), _cluster(2))
    for seen in (store, backend.reader()):
        assert seen.load() == _state(1)
        assert seen.latest_generation() == (1, _cluster(1))
        assert seen.generation(2) is None
        assert [e.message for _, e in seen.events()] == ["commit 1"]
    assert store.commit(_state(2), [_event(2)], _cluster(2)) == 2  # still usable


# -- events: ids only grow, and paging by id never skips one ------------------------------
def test_events_paging(store: PortableStore) -> None:
    for i in range(1, 11):
        store.commit(ControllerState(), [_event(i)])
    newest = store.events(limit=3)
    assert [e.message for _, e in newest] == ["commit 8", "commit 9", "commit 10"]
    ids = [i for i, _ in store.events(limit=0)]
    assert ids == sorted(ids)
    assert len(ids) == 10
    page = store.events(limit=4, since_id=ids[2])
    assert [i for i, _ in page] == ids[3:7]
    assert store.events(since_id=ids[-1]) == []


def test_events_of_many_commits_page_alike_at_every_window(store: PortableStore) -> None:
    """Commits of 1 to 4 events each (the etcd store keeps one key per commit): every
    limit and every since_id gives the same window as the flat list does."""
    sizes = [1, 3, 2, 4, 1, 1, 2]
    counter = itertools.count(1)
    for size in sizes:
        store.commit(ControllerState(), [_event(next(counter)) for _ in range(size)])
    flat = store.events(limit=0)
    assert [e.message for _, e in flat] == [f"commit {k}" for k in range(1, sum(sizes) + 1)]
    ids = [i for i, _ in flat]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for limit in (1, 2, 3, 5, 100):
        assert store.events(limit=limit) == flat[-limit:]
        for since in [ids[0] - 1 if ids[0] > 1 else 0, *ids]:
            if since == 0:
                continue
            after = [(i, e) for i, e in flat if i > since]
            assert store.events(limit=limit, since_id=since) == after[:limit], (limit, since)
            assert store.events(limit=0, since_id=since) == after


def test_event_ids_keep_growing_across_writers(backend: Backend) -> None:
    lock, first = backend.writer()
    first.commit(ControllerState(), [_event(1), _event(2)])
    first.close()
    lock.release()
    _, second = backend.writer()
    second.commit(ControllerState(), [_event(3)])
    ids = [i for i, _ in second.events(limit=0)]
    assert len(ids) == 3
    assert ids == sorted(ids)
    assert len(set(ids)) == 3


# -- one writer -----------------------------------------------------------------------------
def test_a_second_writer_is_refused_at_once_and_told_who_holds_the_lock(
    backend: Backend,
) -> None:
    held, _ = backend.writer()
    other = stores.writer_lock(backend.location)
    try:
        with pytest.raises(WriterBusy, match="is locked by another minidock process") as info:
            other.acquire()
        assert f"pid {os.getpid()}" in str(info.value)
        assert str(backend.location) in str(info.value)
    finally:
        other.release()
    held.release()
    again = stores.writer_lock(backend.location)
    again.acquire()  # released: free again
    again.release()


def test_a_closed_store_refuses(backend: Backend) -> None:
    reader = backend.reader()
    reader.close()
    reader.close()
    with pytest.raises(StoreUnusable, match="closed"):
        reader.load()


# -- the copy a migration makes ---------------------------------------------------------------
def _history(store: PortableStore) -> None:
    for i in range(1, 4):
        store.commit(_state(i), [_event(i), _event(i, "run")], _cluster(i), f"/srv/c{i}.toml")


def test_snapshot_holds_everything_with_its_ids(store: PortableStore) -> None:
    _history(store)
    snap = store.snapshot()
    assert snap.state == _state(3)
    assert [(g.id, g.source_path, g.cluster) for g in snap.generations] == [
        (i, f"/srv/c{i}.toml", _cluster(i)) for i in (1, 2, 3)
    ]
    assert all(g.applied_at > 0 for g in snap.generations)
    assert list(snap.events) == store.events(limit=0)
    assert not snap.empty


def test_restore_replaces_everything_and_ids_go_on_growing(backend: Backend) -> None:
    _, store = backend.writer()
    store.commit(_state(1), [_event(1)], _cluster(1))
    snap = Snapshot(
        state=_state(2),
        generations=(
            GenerationRecord(1, 10.0, "a.toml", _cluster(1)),
            GenerationRecord(2, 20.0, "b.toml", _cluster(2)),
        ),
        events=tuple((i, _event(i)) for i in (5, 6, 9)),  # ids kept, gaps and all
    )
    store.restore(snap)
    assert store.snapshot() == snap
    reader = backend.reader()
    assert reader.snapshot() == snap
    assert reader.next_generation_id() == 3
    store.commit(_state(3), [Event(1.0, "apply", "after")], _cluster(3))
    assert [i for i, _ in store.events(limit=0)][-1] > 9
