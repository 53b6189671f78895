"""What each host's owner saw of it, for the deciding `watch` to borrow (docs/scale.md,
"Observing by share"; the rule is minidock.core.borrowing's). `PREFIX/seen/<cluster>/<host>`
holds `{"writer": <member id>, "owner": <owner key's create revision>, "revision": <the
revision read before the probe>, "observation": ...}` under the writer's member lease,
written in a transaction compared on the owner key (a deposed owner writes nothing) and
only when the observation changed; a failed probe deletes it. The observation carries no
health check output (a check's words may hold anything a container prints: they stay on
the host) and no answer time (it changes every probe). A member's whole round over its
share is the `rounds` of its member key (minidock.store.members).

Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cattrs import BaseValidationError
from cattrs.preconf.json import make_converter

from minidock.core.borrowing import ShardTable, Written
from minidock.model import Container, HostObservation
from minidock.store import parts
from minidock.store.etcd import EtcdStore, Keys, every_key
from minidock.store.etcd_client import (
    EtcdClient,
    compare_create,
    delete,
    put,
    range_end,
    rpc,
)
from minidock.store.location import EtcdURL
from minidock.store.members import members_prefix, owners_prefix
from minidock.store.owners import TAKES_PER_TXN, owner_key

__all__ = ["SeenKeys", "ShardReader", "read_shard_table", "seen_prefix", "wanted_prefix"]

_converter = make_converter()


def seen_prefix(url: EtcdURL, cluster: str) -> bytes:
    return Keys(url.prefix).root + f"seen/{cluster}/".encode()


def wanted_prefix(url: EtcdURL) -> bytes:
    """Where each cluster's decider asks its owners for a round of their whole share
    (`PREFIX/wanted/<cluster>`, rewritten under the decider's lease: its revision is the
    bound, minidock.usecases.borrowing)."""
    return Keys(url.prefix).root + b"wanted/"


def cluster_owners(url: EtcdURL, cluster: str) -> bytes:
    """Where `cluster`'s owner keys are (`<cluster>/<host>`, usecases.shares.owner_name)."""
    return owners_prefix(url) + f"{cluster}/".encode()


def _record(observation: HostObservation) -> HostObservation:
    """What is written of an observation: no health check output, no answer time or
    when it was had (the writer's clock: the reader stamps its own), and its engine as
    remembered (whether this probe read it changes between probes)."""
    return replace(
        observation,
        containers=tuple(_without_log(c) for c in observation.containers),
        others=tuple(_without_log(c) for c in observation.others),
        seconds=None,
        engine_read=False,
        seen_at=None,
    )


def _without_log(container: Container) -> Container:
    return replace(container, health_log="") if container.health_log else container


# what a member last wrote of a host: its owner key's create revision and the observation
# as written (None: the key deleted, a failed probe)
_Mark = tuple[int, HostObservation | None]


class SeenKeys:
    """One member's writes of its share's observations, under its lease; remembers what
    it wrote last so that an unchanged observation is not written again."""

    def __init__(self, url: EtcdURL, client: EtcdClient) -> None:
        self.url, self.client = url, client
        self._written: dict[tuple[str, str], _Mark] = {}

    def owned(self, member: str, cluster: str) -> tuple[int, dict[str, int]]:
        """The revision now and the hosts of `cluster` whose owner key `member` holds
        (host -> the key's create revision), read at that revision."""
        prefix = cluster_owners(self.url, cluster)
        now = self.client.range(
            rpc.RangeRequest(key=prefix, range_end=range_end(prefix), count_only=True)
        )
        revision = int(now.header.revision)
        store = EtcdStore(self.url, self.client, None)  # a view on the client: not closed here
        found = {}
        for kv in every_key(store, prefix, revision):
            key = owner_key(kv)
            if key.controller == member:
                found[bytes(kv.key)[len(prefix) :].decode()] = key.created
        return revision, found

    def write(
        self,
        cluster: str,
        member: str,
        lease: int,
        owned: Mapping[str, int],
        seen: Mapping[str, HostObservation],
        revision: int,
    ) -> bool:
        """Write what changed of `seen` (each of `owned`'s hosts probed after `revision`),
        each under its owner key (`owned`: host -> its create revision); a failed probe's
        key deleted. True when every owned host's key is as seen now (a host that changed
        hands meanwhile is not this member's to write: it counts as done)."""
        prefix = seen_prefix(self.url, cluster)
        changes: list[tuple[str, Any, _Mark]] = []
        whole = True
        for host, created in sorted(owned.items()):
            found = seen.get(host)
            if found is None:
                whole = False  # not probed: the round is not whole
                continue
            mark = (created, _record(found) if found.ok else None)
            last = self._written.get((cluster, host))
            if last is not None and _same(last, mark):
                continue  # compared as records: only a changed one is encoded
            key = prefix + host.encode()
            op = delete(key)
            if mark[1] is not None:
                record = {
                    "writer": member,
                    "owner": created,
                    "revision": revision,
                    "observation": _converter.unstructure(mark[1]),
                }
                op = put(key, parts.document(record), lease)
            changes.append((host, op, mark))
        for i in range(0, len(changes), TAKES_PER_TXN):
            self._write_batch(cluster, owned, changes[i : i + TAKES_PER_TXN])
        return whole

    def _write_batch(
        self, cluster: str, owned: Mapping[str, int], batch: list[tuple[str, Any, _Mark]]
    ) -> None:
        owners = cluster_owners(self.url, cluster)
        request = rpc.TxnRequest(
            compare=[compare_create(owners + h.encode(), owned[h]) for h, _, _ in batch],
            success=[op for _, op, _ in batch],
        )
        if self.client.txn(request).succeeded:
            for host, _, mark in batch:
                self._written[(cluster, host)] = mark
            return
        if len(batch) > 1:  # a host changed hands: write the others one at a time
            for change in batch:
                self._write_batch(cluster, owned, [change])
        else:
            self._written.pop((cluster, batch[0][0]), None)

    def forget(self) -> None:
        """A new lease: the keys written under the last one went with it."""
        self._written.clear()


def _same(last: _Mark, now: _Mark) -> bool:
    """Whether two writes say the same (the revision each was written at aside): both
    deletes, or the same observation under the same owner key. Equal records encode to
    equal documents (up to a number as an int or a float, which reads back equal)."""
    if last[1] is None or now[1] is None:
        return last[1] is now[1]
    return last == now


def read_shard_table(url: EtcdURL, client: EtcdClient, cluster: str) -> ShardTable:
    """`cluster`'s owner keys, the live members' rounds over it and the observations
    written of its hosts, read at one revision."""
    return ShardReader(url, client, cluster).read()


class ShardReader:
    """A decider's reads of one cluster's shard table (`read_shard_table`), each at one
    revision: the observation keys are listed whole each time (their names and mod
    revisions), but a value is read and parsed again only when its key changed since
    the last read. At rest a read is a few hundred bytes of listing, not every host's
    observation."""

    def __init__(self, url: EtcdURL, client: EtcdClient, cluster: str) -> None:
        self.url, self.client, self.cluster = url, client, cluster
        self._cache: dict[str, tuple[int, Written | None]] = {}  # host -> (mod revision, it)

    def read(self) -> ShardTable:
        url, cluster, client = self.url, self.cluster, self.client
        owners, seen = cluster_owners(url, cluster), seen_prefix(url, cluster)
        now = client.range(rpc.RangeRequest(key=seen, range_end=range_end(seen), count_only=True))
        revision = int(now.header.revision)
        store = EtcdStore(url, client, None)  # a view on the client: not closed here
        rounds, intervals = _rounds(store, members_prefix(url), cluster, revision)
        listed = {
            bytes(kv.key)[len(seen) :].decode(): int(kv.mod_revision)
            for kv in every_key(store, seen, revision, keys_only=True)
        }
        stale = [h for h, mod in listed.items() if self._cache.get(h, (0, None))[0] != mod]
        if len(stale) > max(8, len(listed) // 4):  # many changed: one read of them all
            kvs = list(every_key(store, seen, revision))
        else:
            kvs = [kv for h in stale for kv in store.kvs(seen + h.encode(), revision=revision)]
        fresh = {
            bytes(kv.key)[len(seen) :].decode(): (int(kv.mod_revision), _parsed(kv)) for kv in kvs
        }
        unchanged = {h: was for h, was in self._cache.items() if was[0] == listed.get(h)}
        self._cache = unchanged | fresh
        written = {h: w for h, (_, w) in self._cache.items() if w is not None}
        found = every_key(store, owners, revision)
        return ShardTable(
            owners={bytes(kv.key)[len(owners) :].decode(): owner_key(kv) for kv in found},
            rounds=rounds,
            written=written,
            intervals=intervals,
        )


def _rounds(
    store: EtcdStore, members: bytes, cluster: str, revision: int
) -> tuple[dict[str, int], dict[str, float]]:
    """Each live member's last whole round over `cluster`, and its resync."""
    rounds: dict[str, int] = {}
    intervals: dict[str, float] = {}
    for kv in every_key(store, members, revision):
        member = bytes(kv.key)[len(members) :].decode()
        try:
            record = json.loads(kv.value)
            rounds[member] = int(record.get("rounds", {})[cluster])
            intervals[member] = float(record.get("interval", 0.0))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # no whole round over this cluster
    return rounds, intervals


def _parsed(kv: Any) -> Written | None:
    """An observation key's record (None: not one this MiniDock reads; its host is
    probed instead)."""
    try:
        return _written(json.loads(kv.value))
    except (ValueError, TypeError, KeyError, BaseValidationError):
        return None


def _written(record: dict[str, Any]) -> Written:
    observation = _converter.structure(record["observation"], HostObservation)
    return Written(
        str(record["writer"]), int(record["owner"]), int(record["revision"]), observation
    )
