"""Acting by share on an etcd state (docs/scale.md, "Acting by share"): the deciding
`watch` hands each task verb on a host another `watch` owns to that owner, and the owner
carries it out on its own connection and reports what happened.

- `PREFIX/orders/<cluster>/<host>`: one pass's stops and starts on the host, written by
  the decider under its lock (a transaction compared on its lock key and on the host's
  owner key: an order goes only to the owner of the moment, from the lock holder of the
  moment), under the lock's lease (a decider's orders go with its tenure).
- The owner claims an order by deleting it, in a transaction compared on the order's
  revision, on its own owner key and on `PREFIX/tenure` being the order's tenure: an
  order placed in a tenure that has ended (another pass, another writer) is never
  carried out; an order is carried out at most once.
- `PREFIX/reports/<cluster>/<host>`: what the owner's acts did (their events and
  outcomes), under the owner's member lease, compared on its owner key; the decider
  reads it, folds it into its pass as its own acts, and deletes it.

Both are sealed whole with the state's key (minidock.store.sealing): an order holds its
services' secrets, and a report the log tails of the tasks it stopped.
Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from minidock.core import ExitNoted, Run, StartFailed, Stop
from minidock.model import EngineKind, Event
from minidock.store.codec import Codec
from minidock.store.etcd import EtcdStore, EtcdWriter, Keys, every_key
from minidock.store.etcd_client import (
    EtcdClient,
    compare_create,
    compare_mod,
    delete,
    put,
    range_end,
    rpc,
)
from minidock.store.location import EtcdURL
from minidock.store.seen import cluster_owners

__all__ = ["Order", "OrderBook", "Report", "orders_prefix", "reports_prefix"]

T = TypeVar("T")


@dataclass(frozen=True)
class Order:
    """One pass's task verbs on one host, for its owner: `tenure` (the decider's tenure of
    the lock) and `owner` (the owner key's create revision) fence it; `now`, `controller`,
    `graces` and `engine` are what the decider's own acts would have used."""

    decider: str
    tenure: int
    owner: int
    now: float
    controller: str
    engine: EngineKind = "docker"  # the host's engine kind, as the decider's observation read it
    graces: tuple[tuple[str, str, int], ...] = ()  # (service, spec, seconds): stop graces
    stop: tuple[Stop, ...] = ()
    run: tuple[Run, ...] = ()


@dataclass(frozen=True)
class Report:
    """What an owner's acts on an order did (`order`: the order's revision): each act's
    event (its line among the pass's acts or failures) and the outcomes for the core."""

    order: int
    events: tuple[Event, ...] = ()
    start_failed: tuple[StartFailed, ...] = ()
    exits: tuple[ExitNoted, ...] = ()


def orders_prefix(url: EtcdURL, cluster: str) -> bytes:
    return Keys(url.prefix).root + f"orders/{cluster}/".encode()


def reports_prefix(url: EtcdURL, cluster: str) -> bytes:
    return Keys(url.prefix).root + f"reports/{cluster}/".encode()


class OrderBook:
    """The orders and reports of one state, for either side: the decider (`place`,
    `reports`, `withdraw`) and the owners (`pending`, `claim`, `report`). Values are
    coded with the state's codec and sealed whole with its key."""

    def __init__(self, url: EtcdURL, client: EtcdClient) -> None:
        self.url, self.client = url, client
        self.keys = Keys(url.prefix)
        self._view = EtcdStore(url, client, None)  # a view on the client: not closed here

    @property
    def codec(self) -> Codec:
        """The state's codec, its key read on first use."""
        return self._view.codec

    # -- the decider ----------------------------------------------------------------------
    def place(self, writer: EtcdWriter, cluster: str, host: str, order: Order) -> int:
        """Write `order` for `host` under the lock `writer` holds, only while `host`'s
        owner key is the one the order names; its revision (0: the host changed hands, the
        decider acts itself). A lock not held, or lost, raises LeaseLost."""
        key = orders_prefix(self.url, cluster) + host.encode()
        owner = cluster_owners(self.url, cluster) + host.encode()
        return writer.guarded_put(key, self._value(order), [compare_create(owner, order.owner)])

    def reports(self, cluster: str, placed: Mapping[str, int]) -> dict[str, Report]:
        """The reports in for the orders `placed` (host -> order revision); others (a
        stale report of an earlier order) are left alone."""
        prefix = reports_prefix(self.url, cluster)
        found: dict[str, Report] = {}
        reply = self.client.range(rpc.RangeRequest(key=prefix, range_end=range_end(prefix)))
        for kv in reply.kvs:
            host = bytes(kv.key)[len(prefix) :].decode()
            if host not in placed:
                continue
            report = self._read(kv.value, Report)
            if report.order == placed[host]:
                found[host] = report
        return found

    def withdraw(self, cluster: str, host: str, revision: int) -> bool:
        """Delete an order never claimed (compared on its revision): whether it was (one
        claimed meanwhile is its owner's to carry out)."""
        key = orders_prefix(self.url, cluster) + host.encode()
        request = rpc.TxnRequest(compare=[compare_mod(key, revision)], success=[delete(key)])
        return bool(self.client.txn(request).succeeded)

    def clear(self, cluster: str, hosts: Iterable[str]) -> None:
        """The reports of `hosts`, read, deleted."""
        prefix = reports_prefix(self.url, cluster)
        ops = [delete(prefix + h.encode()) for h in hosts]
        if ops:
            self.client.txn(rpc.TxnRequest(success=ops))

    def holders(self, cluster: str, hosts: Iterable[str]) -> dict[str, int]:
        """Each host's owner key's create revision now (0: nobody holds it)."""
        prefix = cluster_owners(self.url, cluster)
        found = {}
        for host in hosts:
            kvs = self.client.range(rpc.RangeRequest(key=prefix + host.encode())).kvs
            found[host] = int(kvs[0].create_revision) if kvs else 0
        return found

    # -- an owner ------------------------------------------------------------------------
    def pending(self, cluster: str, owned: Mapping[str, int]) -> list[tuple[str, int, Order]]:
        """The orders for hosts whose owner key this member holds (`owned`: host -> its
        create revision) and that name that key: (host, revision, order)."""
        prefix = orders_prefix(self.url, cluster)
        found = []
        for kv in every_key(self._view, prefix, 0):
            host = bytes(kv.key)[len(prefix) :].decode()
            order = self._read(kv.value, Order)
            if owned.get(host) == order.owner:
                found.append((host, int(kv.mod_revision), order))
        return found

    def claim(self, cluster: str, host: str, revision: int, order: Order) -> bool:
        """Take the order (delete it) while it is as read, this member holds the owner key
        it names, and the lock's tenure is still the one it was placed in."""
        key = orders_prefix(self.url, cluster) + host.encode()
        owner = cluster_owners(self.url, cluster) + host.encode()
        request = rpc.TxnRequest(
            compare=[
                compare_mod(key, revision),
                compare_create(owner, order.owner),
                compare_mod(self.keys.tenure, order.tenure),
            ],
            success=[delete(key)],
        )
        return bool(self.client.txn(request).succeeded)

    def report(self, cluster: str, host: str, lease: int, owner: int, report: Report) -> bool:
        """Write `report` under this member's lease while it holds the owner key."""
        key = reports_prefix(self.url, cluster) + host.encode()
        request = rpc.TxnRequest(
            compare=[compare_create(cluster_owners(self.url, cluster) + host.encode(), owner)],
            success=[put(key, self._value(report), lease)],
        )
        return bool(self.client.txn(request).succeeded)

    def _value(self, value: object) -> bytes:
        text = json.dumps(self.codec.to_data(value), separators=(",", ":"))
        box = self.codec.box
        return (text if box is None else box.seal(text)).encode()

    def _read(self, value: bytes, kind: type[T]) -> T:
        box, text = self.codec.box, value.decode()
        return self.codec.from_data(json.loads(text if box is None else box.open(text)), kind)
