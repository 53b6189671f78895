"""EtcdClient.watch (minidock/store/etcd_client.py): the changes to the keys under a prefix,
delivered in order from a thread of the watch's own until close(). On real etcd members
(tests/etcd.py), each test under a prefix of its own."""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import Any

import pytest

from minidock.store.etcd_client import EtcdClient, delete, put, rpc
from minidock.store.location import EtcdURL
from tests.etcd import EtcdCluster

WAIT = 5.0  # seconds a test waits for a delivery


class Deliveries:
    """What on_events was called with, in order (None: events may have been lost)."""

    def __init__(self) -> None:
        self.calls: queue.Queue[list[Any] | None] = queue.Queue()

    def __call__(self, events: Sequence[Any] | None) -> None:
        self.calls.put(None if events is None else list(events))

    def events(self, n: int) -> list[Any]:
        """The next `n` events (failing if a None or nothing comes within WAIT)."""
        found: list[Any] = []
        deadline = time.monotonic() + WAIT
        while len(found) < n:
            call = self.calls.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert call is not None, "the watch said events were lost"
            found.extend(call)
        return found

    def until_none(self) -> list[Any]:
        """The events delivered before the next None (failing if no None comes)."""
        seen: list[Any] = []
        deadline = time.monotonic() + WAIT
        while (call := self.calls.get(timeout=max(deadline - time.monotonic(), 0.01))) is not None:
            seen.extend(call)
        return seen


def _put(client: EtcdClient, key: bytes, value: bytes = b"v") -> int:
    """Write one key; the revision it was written at."""
    reply = client.txn(rpc.TxnRequest(success=[put(key, value)]))
    return int(reply.header.revision)


def _delete(client: EtcdClient, key: bytes) -> int:
    reply = client.txn(rpc.TxnRequest(success=[delete(key)]))
    return int(reply.header.revision)


def _until_open(client: EtcdClient, got: Deliveries, prefix: bytes) -> None:
    """Write PREFIX/probe until the watch delivers it: a watch from now is open."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        _put(client, prefix + b"probe")
        try:
            call = got.calls.get(timeout=0.2)
        except queue.Empty:
            continue
        assert call is not None
        assert [bytes(e.kv.key) for e in call] == [prefix + b"probe"]
        while not got.calls.empty():  # later probes, come while this one was awaited
            late = got.calls.get_nowait()
            assert late is not None
            assert [bytes(e.kv.key) for e in late] == [prefix + b"probe"]
        return
    pytest.fail("the watch delivered nothing")


def _seen(events: list[Any]) -> list[tuple[int, bytes, int]]:
    return [(int(e.type), bytes(e.kv.key), int(e.kv.version)) for e in events]


def _prefix(url: EtcdURL) -> bytes:
    return f"{url.prefix}/w/".encode()


def test_puts_and_deletes_under_the_prefix_are_delivered_in_order_and_no_others(
    url: EtcdURL, client: EtcdClient
) -> None:
    prefix = _prefix(url)
    _put(client, prefix + b"before")  # a watch from now does not see it
    got = Deliveries()
    watching = client.watch(prefix, got)
    try:
        _until_open(client, got, prefix)
        _put(client, f"{url.prefix}/elsewhere".encode())
        _put(client, f"{url.prefix}/w".encode())  # the prefix without its last byte: outside
        first = _put(client, prefix + b"a", b"1")
        _put(client, prefix + b"a", b"2")
        _delete(client, prefix + b"a")
        _put(client, f"{url.prefix}/x/".encode())  # just past the range's end
        _put(client, prefix + b"z")
        events = got.events(4)
    finally:
        watching.close()
    put_, deleted = rpc.Event.PUT, rpc.Event.DELETE
    assert _seen(events) == [
        (put_, prefix + b"a", 1),
        (put_, prefix + b"a", 2),
        (deleted, prefix + b"a", 0),
        (put_, prefix + b"z", 1),
    ]
    assert int(events[0].kv.create_revision) == first
    assert [int(e.kv.mod_revision) for e in events[:3]] == [first, first + 1, first + 2]
    assert got.calls.empty()


def test_a_watch_from_an_older_revision_delivers_the_history_since_then(
    url: EtcdURL, client: EtcdClient
) -> None:
    prefix = _prefix(url)
    _put(client, prefix + b"before")
    since = _put(client, prefix + b"a", b"1")
    _put(client, prefix + b"b", b"1")
    _delete(client, prefix + b"a")
    got = Deliveries()
    watching = client.watch(prefix, got, start_revision=since)
    try:
        history = got.events(3)
        _put(client, prefix + b"after")
        later = got.events(1)
    finally:
        watching.close()
    put_, deleted = rpc.Event.PUT, rpc.Event.DELETE
    assert _seen(history) == [
        (put_, prefix + b"a", 1),
        (put_, prefix + b"b", 1),
        (deleted, prefix + b"a", 0),
    ]
    assert _seen(later) == [(put_, prefix + b"after", 1)]


def test_close_ends_the_thread_at_once_and_nothing_is_delivered_after_it(
    url: EtcdURL, client: EtcdClient
) -> None:
    prefix = _prefix(url)
    got = Deliveries()
    watching = client.watch(prefix, got)
    _until_open(client, got, prefix)
    began = time.monotonic()
    watching.close()
    took = time.monotonic() - began
    assert took < 1.0
    assert not watching.thread.is_alive()
    watching.close()  # again: nothing happens
    for i in range(5):
        _put(client, prefix + f"after-{i}".encode())
    with pytest.raises(queue.Empty):
        got.calls.get(timeout=1.0)


def test_a_watch_from_a_compacted_revision_says_so_then_delivers_from_now(
    url: EtcdURL, client: EtcdClient
) -> None:
    """Compacting the shared etcd to its newest revision, as
    test_etcd_state_keys.py's compaction test does (no test reads older revisions)."""
    prefix = _prefix(url)
    old = _put(client, prefix + b"a")
    now = _put(client, f"{url.prefix}/elsewhere".encode())
    client.compact(now)
    got = Deliveries()
    watching = client.watch(prefix, got, start_revision=old)
    try:
        assert got.until_none() == [], "history older than the compaction is not sent"
        _put(client, prefix + b"b")
        events = got.events(1)
    finally:
        watching.close()
    assert _seen(events) == [(rpc.Event.PUT, prefix + b"b", 1)]


def test_an_exception_in_on_events_does_not_stop_later_deliveries(
    url: EtcdURL, client: EtcdClient, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = _prefix(url)
    got = Deliveries()
    failed: list[bytes] = []

    def failing_once(events: Sequence[Any] | None) -> None:
        if not failed and events and bytes(events[0].kv.key).endswith(b"/a"):
            failed.append(bytes(events[0].kv.key))
            raise RuntimeError("the caller's own bug")
        got(events)

    watching = client.watch(prefix, failing_once)
    try:
        _until_open(client, got, prefix)
        _put(client, prefix + b"a")
        _put(client, prefix + b"b")
        _put(client, prefix + b"c")
        events = got.events(2)
        assert watching.thread.is_alive()
    finally:
        watching.close()
    assert failed == [prefix + b"a"]
    assert [bytes(e.kv.key) for e in events] == [prefix + b"b", prefix + b"c"]
    assert "on_events failed" in caplog.text
    assert "the caller's own bug" in caplog.text


def test_when_its_member_stops_the_watch_says_so_and_goes_on_from_the_next_one(
    url: EtcdURL, client: EtcdClient, etcd_cluster: EtcdCluster
) -> None:
    """The changes made while the watch is away (here, as it says so) come once it is back,
    none twice."""
    prefix = _prefix(url)
    got = Deliveries()

    def writing_when_lost(events: Sequence[Any] | None) -> None:
        if events is None:
            _put(client, prefix + b"b")
            _put(client, prefix + b"a")
        got(events)

    watching = client.watch(prefix, writing_when_lost)
    stopped = client._current  # the member the stream is on (the URL lists them in order)
    try:
        _until_open(client, got, prefix)
        _put(client, prefix + b"a")
        assert _seen(got.events(1)) == [(rpc.Event.PUT, prefix + b"a", 1)]
        etcd_cluster.stop_member(stopped)
        assert got.until_none() == []
        events = got.events(2)
        assert watching.thread.is_alive()
    finally:
        watching.close()
        etcd_cluster.start_member(stopped)
    assert _seen(events) == [(rpc.Event.PUT, prefix + b"b", 1), (rpc.Event.PUT, prefix + b"a", 2)]
    assert got.calls.empty()
