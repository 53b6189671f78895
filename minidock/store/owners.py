"""The owner keys: which controller observes and acts on which host, as etcd holds it
(docs/scale.md, "A host changes hands"). `PREFIX/owners/<host>` holds
`{"controller": <member id>, "since": <unix time>}` under its owner's lease. It is created
only where absent (a take); it goes by its owner's acknowledgement, a delete compared on
the key's create revision (so a deposed owner, whose key went and was taken again, deletes
nothing), or with the owner's lease. The key's create revision is what the owner's acts
and its writes about the host are fenced by.

Who should hold each host is minidock.core.ring's to say; these keys are who does. Each
`watch` holds its share of them (minidock.usecases.roster.Shares); observing and acting by
share is not built yet. Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from minidock.core.handover import OwnerKey
from minidock.store.base import LeaseLost, StoreError
from minidock.store.etcd import EtcdStore, every_key
from minidock.store.etcd_client import (
    EtcdClient,
    compare_create,
    delete,
    get,
    put,
    range_end,
    rpc,
)
from minidock.store.location import EtcdURL
from minidock.store.members import Membership, controller_of, members_prefix, owners_prefix

# Keys a take transaction creates: its compares, puts and gets are each within etcd's
# default of 128 operations (it counts the largest of the three)
TAKES_PER_TXN = 100

__all__ = [
    "TAKES_PER_TXN",
    "OwnerKeys",
    "Table",
    "Take",
    "owner_key",
    "owners_prefix",
    "read_members",
    "read_owners",
    "read_table",
]


@dataclass(frozen=True)
class Take:
    """What a take found: `got` when the key is this controller's now (created by this
    take, or by an earlier try of it under the same lease); `owner` is the key's holder."""

    got: bool
    owner: OwnerKey


class OwnerKeys:
    """One controller's takes and acknowledgements, under one lease (its member key's: a
    new lease is a new OwnerKeys, and the keys of the old one went with it)."""

    def __init__(self, url: EtcdURL, client: EtcdClient, controller: str, lease: int) -> None:
        self.url, self.client = url, client
        self.controller, self.lease = controller, lease

    @classmethod
    def of(cls, membership: Membership) -> OwnerKeys:
        """The owner keys of a controller's membership, under its member key's lease."""
        lease = membership.lease_id
        if lease is None:
            raise LeaseLost(f"{membership.url}: this controller holds no member lease")
        return cls(membership.url, membership.client, membership.member.id, lease)

    def key(self, host: str) -> bytes:
        return owners_prefix(self.url) + host.encode()

    def take(self, host: str) -> Take:
        """Create `host`'s owner key under our lease if it is absent. `LeaseLost` when the
        lease is gone (etcd refuses a key under it): this controller may take nothing."""
        return self.take_all([host])[host]

    def take_all(self, hosts: Iterable[str]) -> dict[str, Take]:
        """`take` of each host, in transactions of up to TAKES_PER_TXN keys: one creates
        them all (at one revision) when all are absent (the common case: a first hold, a
        dead controller's hosts); when one is not, each key of that batch is taken alone."""
        wanted = sorted(set(hosts))
        found: dict[str, Take] = {}
        for i in range(0, len(wanted), TAKES_PER_TXN):
            batch = wanted[i : i + TAKES_PER_TXN]
            found |= self._take_batch(batch)
        return found

    def _take_batch(self, hosts: list[str]) -> dict[str, Take]:
        keys = [self.key(h) for h in hosts]
        value = json.dumps({"controller": self.controller, "since": time.time()}).encode()
        request = rpc.TxnRequest(
            compare=[compare_create(key, 0) for key in keys],
            success=[put(key, value, self.lease) for key in keys],
            failure=[get(key) for key in keys],
        )
        reply = self._txn(request, hosts)
        if reply.succeeded:
            mine = OwnerKey(self.controller, int(reply.header.revision))
            return {h: Take(True, mine) for h in hosts}
        if len(hosts) > 1:  # some key is held: take the others one at a time
            return {h: take for h in hosts for take in self._take_batch([h]).values()}
        held = reply.responses[0].response_range.kvs[0]
        return {hosts[0]: Take(int(held.lease) == self.lease, owner_key(held))}

    def _txn(self, request: Any, hosts: list[str]) -> Any:
        try:
            return self.client.txn(request)
        except StoreError as exc:
            if "lease not found" in str(exc):
                named = hosts[0] if len(hosts) == 1 else f"{hosts[0]} and {len(hosts) - 1} more"
                raise LeaseLost(
                    f"{self.url}: lease {self.lease:x} of controller {self.controller} is "
                    f"gone: it owns no host now and takes none ({named})"
                ) from None
            raise

    def acknowledge(self, host: str, created: int) -> bool:
        """Give `host` up: delete its owner key if it is still the one created at revision
        `created` (ours). False when it is not: it went with our lease, or is another's."""
        return self.acknowledge_all({host: created})[host]

    def acknowledge_all(self, keys: Mapping[str, int]) -> dict[str, bool]:
        """`acknowledge` of each host (host -> the create revision of our key), in
        transactions of up to TAKES_PER_TXN keys; when one key of a batch is no longer
        ours, each of that batch is given up alone."""
        hosts = sorted(keys)
        found: dict[str, bool] = {}
        for i in range(0, len(hosts), TAKES_PER_TXN):
            found |= self._acknowledge_batch({h: keys[h] for h in hosts[i : i + TAKES_PER_TXN]})
        return found

    def _acknowledge_batch(self, keys: dict[str, int]) -> dict[str, bool]:
        request = rpc.TxnRequest(
            compare=[compare_create(self.key(h), created) for h, created in keys.items()],
            success=[delete(self.key(h)) for h in keys],
        )
        reply = self.client.txn(request)
        if reply.succeeded:
            return {
                h: int(r.response_delete_range.deleted) > 0
                for h, r in zip(keys, reply.responses, strict=True)
            }
        if len(keys) == 1:
            return dict.fromkeys(keys, False)
        return {
            h: gone for h, c in keys.items() for gone in self._acknowledge_batch({h: c}).values()
        }

    def read(self) -> dict[str, OwnerKey]:
        return read_owners(self.url, self.client)


def read_owners(url: EtcdURL, client: EtcdClient) -> dict[str, OwnerKey]:
    """Host -> its owner, every owner key read at one revision."""
    return read_table(url, client).owners


@dataclass(frozen=True)
class Table:
    """The member keys' ids and the owner keys, read at one etcd revision: what the ring
    (from `members`) and the handover (from `owners`) of every controller start from."""

    members: frozenset[str]
    owners: dict[str, OwnerKey]
    revision: int


def read_members(url: EtcdURL, client: EtcdClient) -> frozenset[str]:
    """The ids of the member keys now (the live controllers)."""
    prefix = members_prefix(url)
    store = EtcdStore(url, client, None)  # a view on the client: not closed here
    return frozenset(
        bytes(kv.key)[len(prefix) :].decode() for kv in every_key(store, prefix, 0, keys_only=True)
    )


def read_table(url: EtcdURL, client: EtcdClient) -> Table:
    prefix, members = owners_prefix(url), members_prefix(url)
    now = client.range(rpc.RangeRequest(key=prefix, range_end=range_end(prefix), count_only=True))
    revision = int(now.header.revision)
    store = EtcdStore(url, client, None)  # a view on the client: not closed here
    return Table(
        members=frozenset(
            bytes(kv.key)[len(members) :].decode()
            for kv in every_key(store, members, revision, keys_only=True)
        ),
        owners={
            bytes(kv.key)[len(prefix) :].decode(): owner_key(kv)
            for kv in every_key(store, prefix, revision)
        },
        revision=revision,
    )


def owner_key(kv: Any) -> OwnerKey:
    """An owner key as read: its member and its create revision."""
    return OwnerKey(controller_of(kv), int(kv.create_revision))
