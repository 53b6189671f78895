"""The etcd v3 backend: the state of one cluster under a key prefix, and the writer lock
as an etcd lease plus a key (etcd's concurrency recipe: client/v3/concurrency).

Keys under PREFIX (docs/ha.md has the layout and the fencing argument):

    PREFIX/meta                    {"schema", "generation", "event", "writer", "commit"}
    PREFIX/state/<part>            the ControllerState, a key per host, service and slot,
                                   the hosts' last_seen in one (minidock.store.parts);
                                   PREFIX/controller before schema 4
    PREFIX/controller-id           this store's controller id (made once, random)
    PREFIX/generations/<20 digits> {"id", "applied_at", "source_path", "cluster"}
    PREFIX/events/<20 digits>      the events of one commit, keyed by the last one's id
    PREFIX/lock/<lease id, hex>    a writer waiting for or holding the lock (lease-owned)

The lock is held by the lock key with the lowest create revision. Every commit is guarded
by the holder's key (`create_revision == the holder's`) and by `PREFIX/meta`'s mod
revision, so a writer whose lease expired commits nothing. A commit writes only the state
keys that changed, in one transaction when they fit (100 operations, 1 MiB) and else in
several, PREFIX/meta last: the state is read at meta's mod revision, so no reader ever
sees a commit's first transactions without its last. A thread
renews the lease every TTL/3 while it is held; `fence()` says when it can no longer be
sure that it holds it, before the lease can have expired on etcd's side.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from minidock.core import ControllerState
from minidock.model import Cluster, Event
from minidock.store import codec, parts
from minidock.store.base import (
    GenerationRecord,
    LeaseLost,
    Snapshot,
    StoreError,
    StoreUnusable,
    WriterBusy,
)
from minidock.store.codec import Codec, StateRecords
from minidock.store.etcd_client import (
    EtcdClient,
    RevisionCompacted,
    compare_create,
    compare_mod,
    delete,
    get,
    put,
    range_end,
    rpc,
)
from minidock.store.location import CLUSTERS, Endpoint, EtcdURL, StateLocation
from minidock.store.sealing import KEY_ENV, SEALED, KeyProblem, key_box

__all__ = [
    "SCHEMA_VERSION",
    "EtcdBackend",
    "EtcdStore",
    "EtcdWriter",
    "Keys",
    "Meta",
    "has_state",
    "seal_at_rest",
]

# 1: secrets in clear (sealed by the first writer); 2: sealed; 3: written by MiniDock 0.5,
# refused by an older one (as minidock.store.sqlite.SCHEMA_VERSION); 4: the controller
# state in a key per host, service and slot (PREFIX/state/). Raised by the first writer.
SCHEMA_VERSION = 4
PARTS_SCHEMA = 4  # the first schema whose controller state is under PREFIX/state/
_ID_DIGITS = 20  # zero-padded ids: the keys' byte order is the ids' order


class Keys:
    """The key layout of one state under its prefix."""

    def __init__(self, prefix: str) -> None:
        base = prefix.rstrip("/")
        self.root = f"{base}/".encode()
        self.meta = f"{base}/meta".encode()
        self.controller = f"{base}/controller".encode()  # the whole state, before schema 4
        self.state = f"{base}/state/".encode()
        self.controller_id = f"{base}/controller-id".encode()
        self.generations = f"{base}/generations/".encode()
        self.events = f"{base}/events/".encode()
        self.lock = f"{base}/lock/".encode()
        self.tenure = f"{base}/tenure".encode()  # rewritten by each holder as it takes the lock
        self.handed = f"{base}/handed".encode()  # a deciding tenure's bound (store.handed)

    def generation(self, gen_id: int) -> bytes:
        return self.generations + f"{gen_id:0{_ID_DIGITS}d}".encode()

    def event_batch(self, last_id: int) -> bytes:
        return self.events + f"{last_id:0{_ID_DIGITS}d}".encode()

    def lock_key(self, lease_id: int) -> bytes:
        return self.lock + f"{lease_id:x}".encode()

    def parts(self, named: dict[str, bytes]) -> dict[bytes, bytes]:
        """`parts.split` output under PREFIX/state/."""
        return {self.state + name.encode(): raw for name, raw in named.items()}


@dataclass(frozen=True)
class Meta:
    """PREFIX/meta: the schema, the last ids given out, and who committed last."""

    schema: int = SCHEMA_VERSION
    generation: int = 0  # the newest generation's id
    event: int = 0  # the newest event's id
    writer: str = ""  # "pid N on HOST" of the last commit
    commit: str = ""  # that commit's token: tells a retried commit that its first try landed

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, raw: bytes) -> Meta:
        data = json.loads(raw)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def holder_text() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


class EtcdStore:
    """The state under one prefix: reads for anyone, commits for the lock's holder."""

    def __init__(self, url: EtcdURL, client: EtcdClient, writer: EtcdWriter | None) -> None:
        self.url = url
        self.keys = Keys(url.prefix)
        self._client: EtcdClient | None = client
        self._writer = writer
        self._codec: Codec | None = None

    @property
    def codec(self) -> Codec:
        """JSON with the secrets sealed by $MINIDOCK_KEY_FILE's key (read on first use;
        made if missing while nothing here is sealed): without it, one line, exit 2."""
        if self._codec is None:
            named = os.environ.get(KEY_ENV)
            if not named:
                raise KeyProblem(
                    f"{self.url}: no key for the state's secrets: set {KEY_ENV} to the key "
                    "file every controller of this state is given (docs/ha.md)"
                )
            self._codec = Codec(key_box(Path(named).expanduser(), holds_sealed=self._sealed))
        return self._codec

    def _sealed(self) -> bool:
        """Whether the controller state or any generation holds a sealed value."""
        marker = SEALED.encode()
        found = self.kvs(self.keys.controller)
        if found and marker in bytes(found[0].value):
            return True
        return any(
            marker in bytes(kv.value)
            for prefix in (self.keys.state, self.keys.generations)
            for kv in every_key(self, prefix, 0)
        )

    @classmethod
    def open(cls, url: EtcdURL) -> EtcdStore:
        """A reader's store (no lock): its commits are refused."""
        client = EtcdClient(url)
        try:
            client.check_quorum()
            store = cls(url, client, None)
            store.meta()  # refuses a newer schema
        except BaseException:
            client.close()
            raise
        return store

    def close(self) -> None:
        if self._client is not None and self._writer is None:
            self._client.close()  # a writer's store shares its lock's client
        self._client = None

    @property
    def client(self) -> EtcdClient:
        if self._client is None:
            raise StoreUnusable(f"store {self.url} is closed")
        return self._client

    # -- reads --------------------------------------------------------------------------------
    def kvs(self, key: bytes, end: bytes = b"", **options: Any) -> list[Any]:
        request = rpc.RangeRequest(key=key, range_end=end, **options)
        return list(self.client.range(request).kvs)

    def meta(self) -> tuple[Meta, int]:
        """PREFIX/meta and its mod revision (0: nothing was ever committed here)."""
        found = self.kvs(self.keys.meta)
        if not found:
            return Meta(), 0
        meta = Meta.loads(found[0].value)
        if meta.schema > SCHEMA_VERSION:
            raise StoreUnusable(
                f"{self.url} has schema version {meta.schema}; this minidock knows up to "
                f"{SCHEMA_VERSION}: upgrade minidock"
            )
        return meta, int(found[0].mod_revision)

    def load(self) -> ControllerState:
        """The state as the last commit left it: read at PREFIX/meta's mod revision."""
        meta, revision = self.meta()
        return self.state_at(meta, revision)

    def state_at(self, meta: Meta, revision: int) -> ControllerState:
        if revision == 0:
            return ControllerState()
        if meta.schema < PARTS_SCHEMA:
            found = self.kvs(self.keys.controller, revision=revision)
            if not found:
                return ControllerState()
            return self.codec.loads(found[0].value.decode(), ControllerState)
        keyed, state = _read_parts(self, revision)
        if self._writer is not None and revision == self._writer.meta_rev:
            self._writer.parts = keyed  # what the next commit writes its changes against
        return state

    def cluster(self) -> str:
        return _cluster_name(self)

    def state_keys(self, revision: int) -> dict[bytes, bytes]:
        """PREFIX/state/ at `revision`; at the newest one when etcd compacted it away
        (then a commit cut short since is read as far as it got: docs/ha.md)."""
        return _state_keys(self, revision)[0]

    def keyed(self, cluster: Cluster) -> Cluster:
        return self.codec.keyed(cluster)

    def latest_generation(self) -> tuple[int, Cluster] | None:
        end = range_end(self.keys.generations)
        found = self.kvs(self.keys.generations, end, limit=1, sort_order=rpc.RangeRequest.DESCEND)
        if not found:
            return None
        doc = json.loads(found[0].value)
        return int(doc["id"]), self.codec.from_data(doc["cluster"], Cluster)

    def generation(self, gen_id: int) -> Cluster | None:
        found = self.kvs(self.keys.generation(gen_id))
        if not found:
            return None
        return self.codec.from_data(json.loads(found[0].value)["cluster"], Cluster)

    def next_generation_id(self) -> int:
        if self._writer is not None:
            return self._writer.meta.generation + 1
        return self.meta()[0].generation + 1

    def events(self, limit: int = 100, since_id: int = 0) -> list[tuple[int, Event]]:
        """As the SQLite store's: batches are keyed by their last id, so the batches from
        key(since_id + 1) on hold every event after since_id, and `limit` batches hold at
        least `limit` events."""
        end = range_end(self.keys.events)
        n = max(limit, 0)
        if since_id > 0:
            kvs = self.kvs(self.keys.event_batch(since_id + 1), end, limit=n)
            found = [(i, e) for kv in kvs for i, e in event_batch(kv.value) if i > since_id]
            return found[:limit] if limit > 0 else found
        kvs = self.kvs(self.keys.events, end, limit=n, sort_order=rpc.RangeRequest.DESCEND)
        found = [(i, e) for kv in reversed(kvs) for i, e in event_batch(kv.value)]
        return found[-limit:] if limit > 0 else found

    # -- the one write ------------------------------------------------------------------------
    def commit(
        self,
        state: ControllerState,
        events: Sequence[Event] = (),
        generation: Cluster | None = None,
        source_path: str = "",
    ) -> int | None:
        """The state keys that changed, then the generation, the events and PREFIX/meta,
        guarded by the writer's lock key and by PREFIX/meta (`write_state`)."""
        writer = self._holder()
        before = writer.meta
        new = replace(before, writer=holder_text(), commit=uuid.uuid4().hex)
        ops: list[tuple[Any, int]] = []  # each with its size, for `_batches`
        gen_id: int | None = None
        if generation is not None:
            gen_id = before.generation + 1
            if state.generation != gen_id:
                raise ValueError(
                    f"state.generation is {state.generation}, "
                    f"but the new generation's id is {gen_id}"
                )
            doc = generation_doc(self.codec, gen_id, time.time(), source_path, generation)
            ops.append((put(self.keys.generation(gen_id), doc), len(doc)))
            new = replace(new, generation=gen_id)
        listed = list(events)
        if listed:
            last = before.event + len(listed)
            batch = batch_doc(range(before.event + 1, last + 1), listed)
            ops.append((put(self.keys.event_batch(last), batch), len(batch)))
            new = replace(new, event=last)
        write_state(self, writer, state, ops, new)
        return gen_id

    def fence(self) -> None:
        if self._writer is not None:
            self._writer.fence()

    @property
    def writer(self) -> EtcdWriter | None:
        """The lock holder's writer (None: a reader's store): its tenure, its guarded puts."""
        return self._writer

    # -- a migration's copy -------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Everything under the prefix, read at one revision."""
        return read_snapshot(self)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything under the prefix with `snapshot` (the holder only)."""
        write_snapshot(self, self._holder(), snapshot)

    def _holder(self) -> EtcdWriter:
        if self._writer is None:
            raise StoreUnusable(f"{self.url}: only the writer lock's holder may commit")
        return self._writer


def generation_doc(
    sealing: Codec, gen_id: int, applied_at: float, source_path: str, cluster: Cluster
) -> bytes:
    doc = {"id": gen_id, "applied_at": applied_at, "source_path": source_path}
    doc["cluster"] = sealing.to_data(cluster)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def batch_doc(ids: Sequence[int], events: Sequence[Event]) -> bytes:
    docs = [{"id": i, **codec.to_data(e)} for i, e in zip(ids, events, strict=True)]
    return json.dumps(docs, sort_keys=True, separators=(",", ":")).encode()


def event_batch(raw: bytes) -> list[tuple[int, Event]]:
    found = []
    for doc in json.loads(raw):
        event_id = int(doc.pop("id"))
        found.append((event_id, codec.from_data(doc, Event)))
    return found


def has_state(url: EtcdURL) -> bool:
    """Whether anything was ever committed under the URL's prefix."""
    store = EtcdStore.open(url)
    try:
        return store.meta()[1] > 0
    finally:
        store.close()


def further_clusters(url: EtcdURL, below: str) -> list[str]:
    """The names NAME of the states at PREFIX/BELOW/NAME that hold a commit (a meta key)."""
    base = f"{url.prefix.rstrip('/')}/{below}/".encode()
    store = EtcdStore.open(url)
    try:
        keys = [bytes(kv.key)[len(base) :] for kv in every_key(store, base, 0, keys_only=True)]
    finally:
        store.close()
    names = {k.removesuffix(b"/meta") for k in keys if k.endswith(b"/meta")}
    return sorted(n.decode() for n in names if b"/" not in n)


def existing_controller_id(url: EtcdURL) -> str | None:
    """The store's controller id when one was made (None: none yet), making none."""
    store = EtcdStore.open(url)
    try:
        found = store.kvs(store.keys.controller_id)
        return bytes(found[0].value).decode() if found else None
    finally:
        store.close()


def controller_id(url: EtcdURL, given: str | None = None) -> str:
    """This store's controller id, labelled on every task it starts: made once (random,
    or `given`) by the first to ask, kept under its own key (docs/state.md)."""
    store = EtcdStore.open(url)
    try:
        key = store.keys.controller_id
        new = (given or os.urandom(6).hex()).encode()
        reply = store.client.txn(
            rpc.TxnRequest(
                compare=[compare_create(key, 0)], success=[put(key, new)], failure=[get(key)]
            )
        )
        if reply.succeeded:
            return new.decode()
        return bytes(reply.responses[0].response_range.kvs[0].value).decode()
    finally:
        store.close()


class EtcdWriter:
    """The writer lock: a lease kept alive by a thread, and a key under PREFIX/lock/ owned
    by it; the holder is the key with the lowest create revision (etcd's Mutex.TryLock)."""

    def __init__(self, url: EtcdURL) -> None:
        self.url = url
        self.keys = Keys(url.prefix)
        self.client = EtcdClient(url)
        self.meta, self.meta_rev = Meta(), 0
        # PREFIX/state/ as the last commit left it, when known (None: read it at the next
        # commit): a commit writes only the keys that differ from it
        self.parts: dict[bytes, bytes] | None = None
        self._keeper: LeaseKeeper | None = None
        self._key: bytes | None = None
        self._rev = 0  # the create revision of our key while we hold the lock
        # (this tenure's revision, the one before it): `tenure`
        self._tenure: tuple[int, int] = (0, 0)
        self.riders: list[tuple[Any, int]] = []  # puts for the next commit's last txn: `ride`

    @property
    def held(self) -> bool:
        return self._key is not None

    def acquire(self) -> None:
        """Take the lock now or raise `WriterBusy` naming the holder; never waits."""
        if self.held:
            raise RuntimeError(f"the writer lock on {self.url} is already held by this writer")
        self.client.check_quorum()
        keeper = self._lease()
        key = self.keys.lock_key(keeper.lease_id)
        holder = json.dumps({"holder": holder_text(), "since": time.time()}).encode()
        owner = lock_holder(self.keys)
        reply = self.client.txn(
            rpc.TxnRequest(
                compare=[compare_create(key, 0)],
                success=[put(key, holder, keeper.lease_id), owner],
                failure=[get(key), owner],
            )
        )
        mine = (
            int(reply.header.revision)
            if reply.succeeded
            else int(reply.responses[0].response_range.kvs[0].create_revision)
        )
        first = list(reply.responses[1].response_range.kvs)
        if first and int(first[0].create_revision) != mine:
            self.client.txn(
                rpc.TxnRequest(compare=[compare_create(key, mine)], success=[delete(key)])
            )
            raise WriterBusy(
                f"{self.url} is locked by another minidock process ({holder_of(first[0])})"
            )
        self._key, self._rev = key, mine
        self._tenure = self._mark_tenure(key, mine, holder)
        self.reload()

    def _mark_tenure(self, key: bytes, mine: int, holder: bytes) -> tuple[int, int]:
        """Rewrite PREFIX/tenure while our lock key stands: (the revision of that write,
        the revision of the write before it: the tenure before this one)."""
        mark = rpc.RequestOp(
            request_put=rpc.PutRequest(key=self.keys.tenure, value=holder, prev_kv=True)
        )
        reply = self.client.txn(rpc.TxnRequest(compare=[compare_create(key, mine)], success=[mark]))
        if not reply.succeeded:
            raise LeaseLost(_lost(self.url, "its lock key went as it was taken"))
        before = reply.responses[0].response_put.prev_kv
        return int(reply.header.revision), int(before.mod_revision)

    @property
    def tenure(self) -> tuple[int, int]:
        """This tenure of the lock (the revision at which PREFIX/tenure was rewritten as it
        began) and the tenure before it, whoever held it (0: none); (0, 0) when not held.
        A holder whose tenure before is its own last knows nobody held the lock between
        (minidock.core.borrowing.Trust)."""
        return self._tenure if self.held else (0, 0)

    def store(self) -> EtcdStore:
        """The holder's store, an older state's clear secrets sealed first."""
        if not self.held:
            raise RuntimeError(f"the writer lock on {self.url} is not held")
        store = EtcdStore(self.url, self.client, self)
        if self.meta_rev == 0:
            return store
        if self.meta.schema == 1:
            seal_at_rest(store, self)
        elif self.meta.schema < PARTS_SCHEMA:
            into_parts(store, self)
        else:
            repair_cut_commit(store, self)
        return store

    def ride(self, key: bytes, value: bytes) -> None:
        """Put `key` with the next commit's PREFIX/meta: in its transaction, if it lands."""
        self.riders.append((put(key, value), len(key) + len(value)))

    def fence(self) -> None:
        if self._key is None:
            raise LeaseLost(f"{self.url}: this writer does not hold the lock")
        if self._keeper is not None:
            self._keeper.check()

    def guarded_put(self, key: bytes, value: bytes, compares: Sequence[Any]) -> int:
        """Put `key` under the lock's lease while we hold the lock and `compares` hold:
        the revision written (0: only `compares` failed); `LeaseLost` when the lock is
        gone. A key so put goes with this tenure's lease (minidock.store.orders)."""
        self.fence()
        assert self._keeper is not None
        reply = self._guarded([put(key, value, self._keeper.lease_id)], compares)
        return 0 if reply is None else int(reply.header.revision)

    def fenced_txn(self, ops: list[Any], new: Meta) -> None:
        """Commit `ops` only while our lock key is the one we created and PREFIX/meta is
        as we last saw it; a lost lease is `LeaseLost` and nothing is written."""
        if self.guarded_txn(ops, [compare_mod(self.keys.meta, self.meta_rev)], new):
            return
        seen, rev = EtcdStore(self.url, self.client, None).meta()
        if seen.commit == new.commit:  # an earlier try of this very request landed
            self.meta, self.meta_rev = new, rev
            return
        raise self.changed_behind(seen)

    def meta_guarded_txn(self, ops: list[Any]) -> None:
        """`ops` only while we hold the lock and PREFIX/meta is as we last saw it: a
        commit's transactions before its last (which `fenced_txn` runs)."""
        if not self.guarded_txn(ops, [compare_mod(self.keys.meta, self.meta_rev)]):
            raise self.changed_behind(EtcdStore(self.url, self.client, None).meta()[0])

    def changed_behind(self, seen: Meta) -> StoreError:
        return StoreError(
            f"{self.url}: the state was changed by {seen.writer or 'another writer'} while "
            "this writer held the lock; nothing was committed"
        )

    def guarded_txn(
        self, ops: list[Any], compares: Sequence[Any] = (), new: Meta | None = None
    ) -> bool:
        """Run `ops` if we still hold the lock (and `compares` hold): False when only
        `compares` failed; `LeaseLost` when our lock key is gone."""
        reply = self._guarded(ops, compares)
        if reply is None:
            return False
        if new is not None:
            self.meta, self.meta_rev = new, int(reply.header.revision)
        return True

    def _guarded(self, ops: list[Any], compares: Sequence[Any]) -> Any:
        """The reply of `ops` run while our lock key stands and `compares` hold; None
        when only `compares` failed; `LeaseLost` when our lock key is gone."""
        self.fence()
        assert self._key is not None
        reply = self.client.txn(
            rpc.TxnRequest(
                compare=[compare_create(self._key, self._rev), *compares],
                success=ops,
                failure=[get(self._key)],
            )
        )
        if reply.succeeded:
            return reply
        ours = list(reply.responses[0].response_range.kvs)
        if not ours or int(ours[0].create_revision) != self._rev:
            raise LeaseLost(_lost(self.url, "its lock key is gone: the lease expired"))
        return None

    def reload(self) -> None:
        """Read PREFIX/meta afresh (after a restore wrote it)."""
        self.meta, self.meta_rev = EtcdStore(self.url, self.client, self).meta()
        self.parts = None

    def release(self) -> None:
        """Delete our key and revoke the lease (idempotent; etcd down: it expires)."""
        key, self._key = self._key, None
        keeper, self._keeper = self._keeper, None
        try:
            if key is not None:
                self.client.txn(
                    rpc.TxnRequest(compare=[compare_create(key, self._rev)], success=[delete(key)])
                )
            if keeper is not None:
                keeper.stop()
                self.client.revoke(keeper.lease_id)
        except StoreError:
            pass  # unreachable or no quorum: the lease expires by itself within its TTL
        finally:
            if keeper is not None:
                keeper.stop()
            self.client.close()

    def _delete(self, key: bytes, revision: int) -> None:
        """Delete our lock key, if it is still the one created at `revision`."""
        request = rpc.TxnRequest(compare=[compare_create(key, revision)], success=[delete(key)])
        self.client.txn(request)

    def _lease(self) -> LeaseKeeper:
        if self._keeper is None:
            sent = time.monotonic()
            granted = self.client.grant(max(1, round(self.url.ttl)))
            self._keeper = LeaseKeeper(self, int(granted.ID), float(granted.TTL), sent)
            self._keeper.start()
        return self._keeper


def lock_holder(keys: Keys) -> Any:
    """The request for the lock key with the lowest create revision: the holder's."""
    return get(
        keys.lock,
        range_end(keys.lock),
        limit=1,
        sort_order=rpc.RangeRequest.ASCEND,
        sort_target=rpc.RangeRequest.CREATE,
    )


def holder_of(kv: Any) -> str:
    """`pid N on HOST` of a lock key's value."""
    try:
        return str(json.loads(kv.value)["holder"])
    except (ValueError, KeyError, TypeError):
        return "holder unknown"


def _lost(url: EtcdURL, why: str) -> str:
    return (
        f"lost the writer lease on {url} ({why}): another controller may be acting now; "
        "this one stops and commits nothing more"
    )


class LeaseHolder(Protocol):
    """What owns a lease its keeper renews: the writer lock, or a controller's member key
    (minidock.store.members)."""

    url: EtcdURL
    client: EtcdClient


class LeaseKeeper(threading.Thread):
    """Renews the writer's lease every TTL/3 (etcd's Session). Its deadline is when the
    lease may expire at the latest as this process can know: the send time of the last
    renewal that etcd answered, plus the TTL it granted; `check` fails a margin before."""

    def __init__(self, writer: LeaseHolder, lease_id: int, ttl: float, sent: float) -> None:
        super().__init__(name=f"minidock-lease-{lease_id:x}", daemon=True)
        self.writer = writer
        self.lease_id = lease_id
        self.ttl = ttl
        self.deadline = sent + ttl
        self.lost: str | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        interval = self.ttl / 3
        while not self._stopped.wait(interval) and self.lost is None:
            sent = time.monotonic()
            try:
                granted = self.writer.client.keep_alive(
                    self.lease_id,
                    budget=max(min(self.writer.url.timeout, self.deadline - sent), 0.2),
                )
            except StoreError as exc:
                if time.monotonic() >= self.deadline:
                    self.lost = f"it could not be renewed in time: {exc}"
                interval = min(0.5, self.ttl / 3)
                continue
            except ValueError:  # grpc: the channel was closed under the renewal
                if not self._stopped.is_set():  # released (stop, then close): not lost
                    self.lost = "its connection to etcd was closed"
                return
            if granted <= 0:
                self.lost = "it expired before it was renewed"
                return
            self.deadline, interval = sent + granted, self.ttl / 3

    def stop(self) -> None:
        self._stopped.set()

    def check(self) -> None:
        margin = min(1.0, self.ttl / 10)
        if self.lost is None and time.monotonic() >= self.deadline - margin:
            self.lost = "it was not renewed in time"
        if self.lost is not None:
            raise LeaseLost(_lost(self.writer.url, self.lost))


# -- writing the state in keys ----------------------------------------------------------------
_PAGE = 500  # keys per range request while reading a whole store
_OPS_PER_TXN = 100  # etcd refuses a transaction of more than 128 operations by default
_TXN_BYTES = 1 << 20  # and a request of more than 1.5 MiB: room left for the keys and framing
_EVENTS_PER_BATCH = 200


def _cluster_name(store: EtcdStore) -> str:
    """The state's cluster from the newest `rest` document alone, not the whole state
    read at PREFIX/meta's revision (at 1,000 hosts some 2,000 keys, and a `watch` asks
    this every step: usecases.clusters): a commit cut short may have written a newer
    one, of the same cluster (a state's name is set by its first commit, which writes
    PREFIX/meta)."""
    meta, revision = store.meta()
    if revision == 0 or meta.schema < PARTS_SCHEMA:
        return store.state_at(meta, revision).cluster
    found = store.kvs(store.keys.state + parts.REST.encode())
    return str(json.loads(found[0].value).get("cluster", "")) if found else ""


def write_state(
    store: EtcdStore,
    writer: EtcdWriter,
    state: ControllerState,
    final: Sequence[tuple[Any, int]],
    new: Meta,
) -> None:
    """Commit `state`: the state keys that differ from the last commit's, in transactions
    of at most _OPS_PER_TXN operations and _TXN_BYTES, each guarded by the lock and by
    PREFIX/meta; `final` (generation, events; each with its size) and PREFIX/meta in the
    last. Until that one lands, readers (who read the state at meta's mod revision) see
    the state before; a writer cut off between them leaves keys that `repair_cut_commit`
    puts back."""
    target = store.keys.parts(_reads(store).records.documents(store.codec, state))
    current = writer.parts if writer.parts is not None else store.state_keys(0)
    puts, deletes = parts.changes(current, target)
    ops = [(put(k, v), len(k) + len(v)) for k, v in puts.items()]
    ops += [(delete(k), len(k)) for k in deletes]
    meta = new.dumps().encode()
    riders, writer.riders = writer.riders, []
    *early, last = _batches(ops, [*final, *riders, (put(store.keys.meta, meta), len(meta))])
    writer.parts = None  # unknown until the last transaction lands
    for chunk in early:
        writer.meta_guarded_txn(chunk)
    writer.fenced_txn(last, new)
    writer.parts = target
    # the keys at its revision, in etcd's order (a read's records are in key order)
    _reads(store).committed = (writer.meta_rev, dict(sorted(target.items())))


def _batches(ops: Sequence[tuple[Any, int]], final: Sequence[tuple[Any, int]]) -> list[list[Any]]:
    """`ops` then `final` in transactions within the limits, `final` whole in the last."""
    batches: list[list[Any]] = []
    chunk: list[Any] = []
    size = 0
    for op, n in ops:
        if chunk and (len(chunk) >= _OPS_PER_TXN or size + n > _TXN_BYTES):
            batches.append(chunk)
            chunk, size = [], 0
        chunk.append(op)
        size += n
    tail = sum(n for _, n in final)
    if chunk and (len(chunk) + len(final) > _OPS_PER_TXN or size + tail > _TXN_BYTES):
        batches.append(chunk)
        chunk = []
    batches.append(chunk + [op for op, _ in final])
    return batches


def repair_cut_commit(store: EtcdStore, writer: EtcdWriter) -> None:
    """Put back the state keys a commit cut short left behind (its writer killed or
    deposed between its transactions): every key changed after PREFIX/meta's revision
    gets its value at that revision again. When etcd compacted that revision away the
    keys stay as they are (docs/ha.md, "A commit in several transactions")."""
    keys, revision = store.keys, writer.meta_rev
    newest = {
        bytes(kv.key): int(kv.mod_revision)
        for kv in every_key(store, keys.state, 0, keys_only=True)
    }
    try:
        then = store.client.range(
            rpc.RangeRequest(
                key=keys.state, range_end=range_end(keys.state), revision=revision, count_only=True
            )
        )
    except RevisionCompacted:
        return
    kept = sum(1 for rev in newest.values() if rev <= revision)
    if kept == len(newest) and int(then.count) == kept:
        return
    committed = store.state_keys(revision)
    puts, deletes = parts.changes(dict.fromkeys(newest, b""), committed)
    ops = [(put(k, v), len(k) + len(v)) for k, v in puts.items()]
    ops += [(delete(k), len(k)) for k in deletes]
    for chunk in _batches(ops, []):
        if chunk:
            writer.meta_guarded_txn(chunk)
    writer.parts = committed


def into_parts(store: EtcdStore, writer: EtcdWriter) -> None:
    """A schema-2 or 3 state (one PREFIX/controller key) moved into PREFIX/state/ keys,
    the old key deleted with PREFIX/meta's raise to schema 4 in the last transaction."""
    state = store.state_at(writer.meta, writer.meta_rev)
    new = replace(writer.meta, schema=SCHEMA_VERSION, commit=uuid.uuid4().hex)
    legacy = store.keys.controller
    write_state(store, writer, state, [(delete(legacy), len(legacy))], new)


# -- a migration's copy -----------------------------------------------------------------------
def read_snapshot(store: EtcdStore) -> Snapshot:
    """Generations, controller state and events, all as of the last commit."""
    revision = int(store.client.range(rpc.RangeRequest(key=store.keys.meta)).header.revision)
    generations = []
    for kv in every_key(store, store.keys.generations, revision):
        doc = json.loads(kv.value)
        cluster = store.codec.from_data(doc["cluster"], Cluster)
        generations.append(
            GenerationRecord(int(doc["id"]), float(doc["applied_at"]), doc["source_path"], cluster)
        )
    found = store.kvs(store.keys.meta, revision=revision)
    meta = Meta.loads(found[0].value) if found else Meta()
    state = store.state_at(meta, int(found[0].mod_revision) if found else 0)
    events = [
        pair
        for kv in every_key(store, store.keys.events, revision)
        for pair in event_batch(kv.value)
    ]
    return Snapshot(state, tuple(generations), tuple(events))


class _StateReads:
    """What this process last read of one state (its PREFIX/state/), whichever EtcdStore
    read it: the host and slot records by their documents (codec.StateRecords: a read
    structures only those that changed, a commit encodes only those), and the last read
    whole with its revision and the key that opened its secrets (a read of the same
    revision with the same key is that one: a revision's keys never change; another key
    reads it afresh, and is refused as it always was). And the keys its last commit left,
    with that commit's revision: a read of that revision (a deciding `watch` reads the
    state it has just committed at its next step) needs no range over them."""

    def __init__(self) -> None:
        self.records = StateRecords()
        self.last: tuple[int, str, dict[bytes, bytes], ControllerState] | None = None
        self.committed: tuple[int, dict[bytes, bytes]] | None = None


_READS: dict[tuple[tuple[Endpoint, ...], bytes], _StateReads] = {}


def _reads(store: EtcdStore) -> _StateReads:
    """Those of `store`'s state: its prefix on its etcd (two etcd clusters may both hold a
    state under one prefix, as `state migrate` between them reads one and writes the
    other, and their revisions count apart)."""
    return _READS.setdefault((store.url.endpoints, store.keys.state), _StateReads())


def _read_parts(store: EtcdStore, revision: int) -> tuple[dict[bytes, bytes], ControllerState]:
    """The state keys at `revision` (schema 4 and on) and the state they hold."""
    reads = _reads(store)
    box = store.codec.box
    key = box.key_id if box is not None else ""
    if reads.last is not None and reads.last[:2] == (revision, key):
        return reads.last[2], reads.last[3]
    if reads.committed is not None and reads.committed[0] == revision:
        keyed, exact = reads.committed[1], True
    else:
        keyed, exact = _state_keys(store, revision)
    named = {k[len(store.keys.state) :].decode(): v for k, v in keyed.items()}
    data = parts.join(named, records=False)
    state = ControllerState()
    if data is not None:
        state = reads.records.fill(store.codec.from_data(data, ControllerState), named)
    if exact:  # a read compacted away is of the newest revision, not of `revision`
        reads.last = (revision, key, keyed, state)
    return keyed, state


def _state_keys(store: EtcdStore, revision: int) -> tuple[dict[bytes, bytes], bool]:
    """`EtcdStore.state_keys`, and whether they are those of `revision` (not compacted)."""
    try:
        found = every_key(store, store.keys.state, revision)
        return {bytes(kv.key): bytes(kv.value) for kv in found}, True
    except RevisionCompacted:
        found = every_key(store, store.keys.state, 0)
        return {bytes(kv.key): bytes(kv.value) for kv in found}, False


def every_key(
    store: EtcdStore, prefix: bytes, revision: int, *, keys_only: bool = False
) -> Iterator[Any]:
    start, end = prefix, range_end(prefix)
    while True:
        request = rpc.RangeRequest(
            key=start, range_end=end, limit=_PAGE, revision=revision, keys_only=keys_only
        )
        reply = store.client.range(request)
        yield from reply.kvs
        if not reply.more or not reply.kvs:
            return
        start = bytes(reply.kvs[-1].key) + b"\0"


def write_snapshot(store: EtcdStore, writer: EtcdWriter, snapshot: Snapshot) -> None:
    """Clear the prefix (but the lock), then write the generations, events and state keys
    in transactions within the limits, and PREFIX/meta last: until then the prefix holds
    no state (`has_state` is false). Every step is guarded by the lock."""
    keys = store.keys
    clear = [
        delete(keys.meta),
        delete(keys.controller),
        delete(keys.state, range_end(keys.state)),
        delete(keys.generations, range_end(keys.generations)),
        delete(keys.events, range_end(keys.events)),
    ]
    writes = []
    for g in snapshot.generations:
        doc = generation_doc(store.codec, g.id, g.applied_at, g.source_path, g.cluster)
        writes.append((put(keys.generation(g.id), doc), len(doc)))
    events = list(snapshot.events)
    for at in range(0, len(events), _EVENTS_PER_BATCH):
        chunk = events[at : at + _EVENTS_PER_BATCH]
        ids, listed = [i for i, _ in chunk], [e for _, e in chunk]
        batch = batch_doc(ids, listed)
        writes.append((put(keys.event_batch(ids[-1]), batch), len(batch)))
    target = keys.parts(parts.split(store.codec.to_data(snapshot.state)))
    writes += [(put(k, v), len(k) + len(v)) for k, v in sorted(target.items())]
    meta = Meta(
        generation=max((g.id for g in snapshot.generations), default=0),
        event=max((i for i, _ in events), default=0),
        writer=holder_text(),
        commit=uuid.uuid4().hex,
    )
    writer.guarded_txn(clear)
    for chunk in _batches(writes, [(put(keys.meta, meta.dumps().encode()), 0)]):
        writer.guarded_txn(chunk)
    writer.reload()
    writer.parts = target


def seal_at_rest(store: EtcdStore, writer: EtcdWriter) -> None:
    """A schema-1 state (secrets in clear): every generation rewritten sealed and the
    controller state written sealed into PREFIX/state/ keys, the clear PREFIX/controller
    deleted with PREFIX/meta's raise in the last transaction, each step guarded by the
    lock; then the history before it compacted, so no earlier revision still holds a clear
    value."""
    snapshot = read_snapshot(store)
    keys = store.keys
    writes = [
        put(
            keys.generation(g.id),
            generation_doc(store.codec, g.id, g.applied_at, g.source_path, g.cluster),
        )
        for g in snapshot.generations
    ]
    for at in range(0, len(writes), _OPS_PER_TXN):
        writer.guarded_txn(writes[at : at + _OPS_PER_TXN])
    new = replace(writer.meta, schema=SCHEMA_VERSION, writer=holder_text(), commit=uuid.uuid4().hex)
    legacy = keys.controller
    write_state(store, writer, snapshot.state, [(delete(legacy), len(legacy))], new)
    store.client.compact(writer.meta_rev)


class EtcdBackend:
    """An etcd prefix as minidock.store's `Backend`."""

    def __init__(self, url: EtcdURL) -> None:
        self.location = url

    def open_reader(self) -> EtcdStore:
        return EtcdStore.open(self.location)

    def writer_lock(self) -> EtcdWriter:
        return EtcdWriter(self.location)

    def has_state(self) -> bool:
        return has_state(self.location)

    def controller_id(self, given: str | None = None) -> str:
        return controller_id(self.location, given)

    def existing_controller_id(self) -> str | None:
        return existing_controller_id(self.location)

    def prepare(self) -> None:
        """Nothing to make: a prefix exists once something is written under it."""

    def cluster_location(self, name: str) -> StateLocation:
        return replace(
            self.location, prefix=f"{self.location.prefix.rstrip('/')}/{CLUSTERS}/{name}"
        )

    def further_clusters(self) -> list[str]:
        return further_clusters(self.location, CLUSTERS)
