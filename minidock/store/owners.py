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
from dataclasses import dataclass
from typing import Any

from minidock.core.handover import OwnerKey
from minidock.store.base import LeaseLost, StoreError
from minidock.store.etcd import EtcdStore, every_key, range_end
from minidock.store.etcd_client import EtcdClient, compare_create, delete, get, put, rpc
from minidock.store.location import EtcdURL
from minidock.store.members import Membership, controller_of, members_prefix, owners_prefix

__all__ = [
    "OwnerKeys",
    "Table",
    "Take",
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
        key = self.key(host)
        value = json.dumps({"controller": self.controller, "since": time.time()}).encode()
        request = rpc.TxnRequest(
            compare=[compare_create(key, 0)],
            success=[put(key, value, self.lease)],
            failure=[get(key)],
        )
        try:
            reply = self.client.txn(request)
        except StoreError as exc:
            if "lease not found" in str(exc):
                raise LeaseLost(
                    f"{self.url}: lease {self.lease:x} of controller {self.controller} is "
                    f"gone: it owns no host now and takes none ({host})"
                ) from None
            raise
        if reply.succeeded:
            return Take(True, OwnerKey(self.controller, int(reply.header.revision)))
        held = reply.responses[0].response_range.kvs[0]
        return Take(int(held.lease) == self.lease, _owner(held))

    def acknowledge(self, host: str, created: int) -> bool:
        """Give `host` up: delete its owner key if it is still the one created at revision
        `created` (ours). False when it is not: it went with our lease, or is another's."""
        key = self.key(host)
        request = rpc.TxnRequest(compare=[compare_create(key, created)], success=[delete(key)])
        reply = self.client.txn(request)
        return bool(reply.succeeded) and int(reply.responses[0].response_delete_range.deleted) > 0

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
            bytes(kv.key)[len(prefix) :].decode(): _owner(kv)
            for kv in every_key(store, prefix, revision)
        },
        revision=revision,
    )


def _owner(kv: Any) -> OwnerKey:
    return OwnerKey(controller_of(kv), int(kv.create_revision))
