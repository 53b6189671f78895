"""The controllers at work on one etcd state: each long-running controller (`minidock
watch`) keeps a member key, `PREFIX/members/<id>`, owned by a lease of its own, and
rewrites it after each round (its heartbeat: the last pass, how many, how many hosts it
holds connections to). A controller that dies goes from the list with its lease; one
that stops revokes it. What `minidock controllers` lists (docs/ha.md, "Which controllers
are at work"), and the membership the sharded design of docs/scale.md builds on.

Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from minidock.core.deciding import Peer
from minidock.store.base import LeaseLost, Member, Roster, StoreError
from minidock.store.etcd import (
    EtcdStore,
    Keys,
    LeaseKeeper,
    Meta,
    every_key,
    holder_of,
    holder_text,
    lock_holder,
)
from minidock.store.etcd_client import EtcdClient, Watching, get, put, rpc
from minidock.store.location import EtcdURL

__all__ = [
    "Membership",
    "controller_of",
    "handover_news",
    "members_prefix",
    "owners_prefix",
    "read_peers",
    "read_roster",
]


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


def members_prefix(url: EtcdURL) -> bytes:
    return Keys(url.prefix).root + b"members/"


def owners_prefix(url: EtcdURL) -> bytes:
    """Where the owner keys are (minidock.store.owners): a member's share is counted here."""
    return Keys(url.prefix).root + b"owners/"


class Membership:
    """This controller's member key and the lease that owns it. Never in the way of the
    work: etcd not answering is logged by the caller and tried again at the next beat."""

    def __init__(self, url: EtcdURL) -> None:
        self.url = url
        self.client = EtcdClient(url)
        self.member = Member(_new_id(), holder_text(), time.time())
        self._keeper: LeaseKeeper | None = None
        self._watching: list[Watching] = []

    @property
    def key(self) -> bytes:
        return members_prefix(self.url) + self.member.id.encode()

    @property
    def lease_id(self) -> int | None:
        """The lease of the member key (and of this controller's owner keys): None before
        the first beat, or once it is lost until the next beat grants another."""
        keeper = self._keeper
        return keeper.lease_id if keeper is not None and keeper.lost is None else None

    def fence(self) -> None:
        """Raise LeaseLost unless this member's lease is alive as far as this process can
        know (LeaseKeeper.check): an owner's acts stop the moment its owner keys may be
        gone (minidock.usecases.delegating)."""
        keeper = self._keeper
        if keeper is None:
            raise LeaseLost(f"{self.url}: this controller holds no member lease")
        keeper.check()

    def beat(self, **changes: Any) -> None:
        """Write the member key with `changes` (last_pass, passes, warm, hosts), under a
        live lease (a new one when the last was lost: etcd was away longer than its TTL).
        A new lease is a new member, with an id of its own: keys of the lost lease are
        gone, and a view read before the loss must not take them for this member's
        (tests/unit/test_handover.py, an id kept across leases)."""
        self.member = Member(**{**asdict(self.member), **changes})
        keeper = self._keeper
        if keeper is None or keeper.lost is not None:
            if keeper is not None:
                keeper.stop()
                self.member = replace(self.member, id=_new_id(), since=time.time())
            sent = time.monotonic()
            granted = self.client.grant(max(1, round(self.url.ttl)))
            keeper = self._keeper = LeaseKeeper(self, int(granted.ID), float(granted.TTL), sent)
            keeper.start()
        self.client.txn(
            rpc.TxnRequest(success=[put(self.key, self.member.value(), keeper.lease_id)])
        )

    def follow(self, news: Callable[[], None]) -> None:
        """Call `news` (from a thread of etcd's watch) whenever a share may have to change
        hands (`handover_news`), or the watch broke and news may have been lost: so a
        `watch` holds its share at once, not at its next resync."""
        members, owners = members_prefix(self.url), owners_prefix(self.url)

        def seen(events: Sequence[Any] | None) -> None:
            if events is None or handover_news(members, owners, events):
                news()

        self._watching = self.client.watch_from_now([(members, seen), (owners, seen)])

    def leave(self) -> None:
        """Revoke the lease (its key goes with it) and close; etcd away: it expires."""
        keeper, self._keeper = self._keeper, None
        watching, self._watching = self._watching, []
        for each in watching:
            each.close()
        try:
            if keeper is not None:
                keeper.stop()
                self.client.revoke(keeper.lease_id)
        except StoreError:
            pass
        finally:
            self.client.close()


def read_peers(url: EtcdURL, client: EtcdClient) -> list[Peer]:
    """The live members as core.deciding ranks them: each with its key's create revision
    (its seniority), the cluster it covers, its resync and its passes."""
    prefix = members_prefix(url)
    store = EtcdStore(url, client, None)  # a view on the client: not closed here
    peers = []
    for kv in every_key(store, prefix, 0):
        try:
            record = json.loads(kv.value)
            peer = Peer(
                bytes(kv.key)[len(prefix) :].decode(),
                int(kv.create_revision),
                cluster=str(record.get("cluster", "")),
                interval=float(record.get("interval", 0.0)),
                passes=int(record.get("passes", 0)),
            )
        except (ValueError, TypeError, AttributeError):
            continue  # not a member record: ranks nobody
        peers.append(peer)
    return peers


def handover_news(members: bytes, owners: bytes, events: Sequence[Any]) -> bool:
    """Whether etcd events may change who should or may hold a host: a member key created
    (a join) or gone (a leave, a death), an owner key gone (given up, or with its owner's
    lease: free to take). Not a member's beat (every `watch` rewrites its key each round:
    news of it would keep them all busy ringing each other) nor a take."""
    for event in events:
        key = bytes(event.kv.key)
        gone = event.type == rpc.Event.DELETE
        if key.startswith(owners) and gone:
            return True
        if key.startswith(members) and (gone or int(event.kv.version) == 1):
            return True
    return False


def read_roster(url: EtcdURL) -> Roster:
    """The member keys (each with its lease's time left), the lock's holder and the last
    commit's writer, as etcd holds them now."""
    store = EtcdStore.open(url)
    try:
        prefix = members_prefix(url)
        owned = Counter(controller_of(kv) for kv in every_key(store, owners_prefix(url), 0))
        members = [
            _member(store.client, member_id, kv, owned[member_id])
            for kv in every_key(store, prefix, 0)
            for member_id in [bytes(kv.key)[len(prefix) :].decode()]
        ]
        requests = [lock_holder(store.keys), get(store.keys.meta)]
        reply = store.client.txn(rpc.TxnRequest(success=requests))
        holders = list(reply.responses[0].response_range.kvs)
        metas = list(reply.responses[1].response_range.kvs)
    finally:
        store.close()
    writer = holder_of(holders[0]) if holders else ""
    last = Meta.loads(metas[0].value).writer if metas else ""
    return Roster(tuple(sorted(members, key=lambda m: m.since)), writer, last)


def _member(client: EtcdClient, member_id: str, kv: Any, owned: int) -> Member:
    record = json.loads(kv.value)
    left = client.time_to_live(int(kv.lease)) if int(kv.lease) else None
    fields = {k: record[k] for k in Member.__dataclass_fields__ if k in record}
    read = {"id": member_id, "lease_left": left, "owned": owned}
    return Member(**{**fields, **read, "created": int(kv.create_revision)})


def controller_of(kv: Any) -> str:
    """The member id an owner key names ("" when its value is not an owner record)."""
    try:
        return str(json.loads(kv.value)["controller"])
    except (ValueError, KeyError, TypeError):
        return ""
