"""Observing by share on an etcd state (docs/scale.md, "Observing by share"): each `watch`
that stands by for a cluster probes the hosts of it whose owner keys it holds, each round,
and writes what it saw (minidock.store.seen); the `watch` that makes the cluster's passes
borrows those observations instead of probing those hosts itself, under
minidock.core.borrowing's rule. etcd not answering is logged: the decider then probes
every host, as it did before any of this, and an owner writes at its next round.

Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any

from minidock.core.borrowing import (
    Handed,
    RoundSeen,
    Trust,
    advancing,
    borrowable,
    orderable,
    patience,
)
from minidock.core.handover import OwnerKey
from minidock.core.watching import probe_scope
from minidock.model import Host, HostObservation, Inventory
from minidock.observe import ProbeMemory, observe
from minidock.ssh import Executor
from minidock.store import Store, StoreError
from minidock.store.etcd import EtcdStore, Keys
from minidock.store.etcd_client import put, rpc
from minidock.store.handed import hand_down, read_handed
from minidock.store.members import Membership
from minidock.store.orders import OrderBook
from minidock.store.seen import SeenKeys, ShardReader, wanted_prefix
from minidock.streams import EventStreams
from minidock.usecases.delegating import Delegation, carry_orders
from minidock.usecases.passes import streams_saw

__all__ = ["Borrowing", "Shared"]

log = logging.getLogger(__name__)


class Borrowing:
    """One `watch`'s part in observing and acting by share, on its membership's lease: as
    an owner, its rounds over its share (`probe_share`), whose revisions its member key
    carries (`rounds`), each carrying out the decider's orders first; as a decider, the
    observations it borrows for a pass (`lend`), the task verbs it hands to the owners
    (`delegation`) and the end of that pass's tenure (`ended`), per cluster."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.rounds: dict[str, int] = {}  # cluster -> its last whole round's revision
        self.round_seconds: dict[str, float] = {}  # cluster -> how long that round took
        self.borrowed = 0  # hosts the last pass borrowed
        self.deciding: frozenset[str] = frozenset()  # the clusters its last round passed
        self._seen = SeenKeys(membership.url, membership.client)
        self._trusts: dict[str, Trust] = {}
        self._lease: int | None = None
        self._rounds: dict[str, RoundSeen] = {}  # each owner's rounds, as seen advancing
        self._mine: dict[str, frozenset[str]] = {}  # cluster -> the hosts it holds
        self._owns: dict[str, frozenset[str]] = {}  # cluster -> those its last round owned
        self._wanted: dict[str, int] = {}  # cluster -> when its decider last wanted a round
        self._readers: dict[str, ShardReader] = {}  # cluster -> its shard table's reads
        self._orderable: dict[str, dict[str, OwnerKey]] = {}  # cluster -> hosts to order
        self._patience: dict[str, float] = {}  # member -> seconds its report may take
        self._delegations: dict[str, Delegation] = {}  # cluster -> its pass's, under way
        self.book = OrderBook(membership.url, membership.client)  # the orders and reports
        self.ordered = 0  # task verbs this member's passes handed over, since it started
        self.carried = 0  # task verbs it carried out for a decider, since it started

    def follow(self, news: Callable[[], None], order: Callable[[], None] | None = None) -> None:
        """Call `news` (from a thread of etcd's watch) when an owner writes or deletes an
        observation of a cluster whose passes this `watch` makes (`deciding`), to borrow it
        at once; when the decider of a cluster it stands by for wants whole rounds; and
        `order` (else `news`) when an order is put for a host it owns (`_ordered`). A
        watch broken (news may be lost) rings too."""
        root = Keys(self.membership.url.prefix).root
        seen_root = root + b"seen/"

        def seen(events: Sequence[Any] | None) -> None:
            named = (bytes(e.kv.key)[len(seen_root) :].split(b"/")[0] for e in events or ())
            if events is None or any(c.decode() in self.deciding for c in named):
                news()

        def wanted(events: Sequence[Any] | None) -> None:
            ring = events is None
            for event in events or ():
                cluster = bytes(event.kv.key)[len(root + b"wanted/") :].decode()
                if event.type == rpc.Event.PUT:
                    self._wanted[cluster] = int(event.kv.mod_revision)
                ring |= cluster not in self.deciding
            if ring:
                news()

        def orders(events: Sequence[Any] | None) -> None:
            if events is None:
                news()
            elif _ordered(events, root + b"orders/", self.deciding, self._owns):
                (order or news)()

        # all closed with the membership's client
        self.membership.client.watch_from_now(
            [(seen_root, seen), (root + b"wanted/", wanted), (root + b"orders/", orders)]
        )

    async def probe_share(
        self,
        executor: Executor,
        cluster: str,
        inventory: Inventory,
        memory: ProbeMemory,
        streams: EventStreams | None = None,
        full: bool = True,
    ) -> int:
        """Probe the hosts of `cluster` whose owner keys this member holds, and write what
        changed; how many were probed. The decider's orders for them are carried out first
        (usecases.delegating), those acted on probed afresh. With `streams` it follows their
        events, and a round not `full` probes only those whose stream rang or is not up
        (probe_scope), unless the decider wanted a round since the last whole one. A round
        that probed them all has its revision in `rounds`, its seconds in `round_seconds`."""
        member, lease = self.membership.member.id, self.membership.lease_id
        if lease is None:
            return 0
        if lease != self._lease:  # a new lease: what was written under the last went
            self._seen.forget()
            self.rounds.clear()
            self._lease = lease
        listed = {h.name: h for h in inventory.hosts}
        try:
            revision, owned = _owned(self._seen, member, cluster, listed)
            self._owns[cluster] = frozenset(owned)
            acted, verbs = await carry_orders(
                self.book, self.membership, executor, inventory, cluster, owned
            )
            if acted:
                self.carried += verbs
                memory.forget(acted)  # probed afresh now
                revision, owned = _owned(self._seen, member, cluster, listed)
            mine = [listed[h] for h in sorted(owned)]
            whole = full or self._wanted.get(cluster, 0) > self.rounds.get(cluster, 0)
            scope = _share_scope(streams, cluster, mine, memory, whole)
            began = time.monotonic()
            seen = await observe(executor, mine, cluster, ports=False, memory=memory, scope=scope)
            observed = time.monotonic()
            if streams is not None:
                streams_saw(streams, cluster, seen)
            written = self._seen.write(cluster, member, lease, owned, seen.hosts, revision)
            probed = len(mine) if scope is None else len(scope & set(owned))
            _said_round(cluster, probed, written, began, observed)
            if written and (scope is None or scope >= set(owned)):
                self.rounds[cluster] = revision
                self.round_seconds[cluster] = time.monotonic() - began
        except StoreError as exc:
            log.info("%s: observations of the share not written: %s", cluster, exc)
            return 0
        return probed

    def mine(self, cluster: str) -> frozenset[str]:
        """The hosts of `cluster` whose owner key this member holds, at the last `lend`
        (before the first, read now): the decider follows their event streams only (a
        host between two owners is probed by it until its new owner has written)."""
        if cluster not in self._mine:
            self._mine[cluster] = _held(self._seen, self.membership.member.id, cluster)
        return self._mine[cluster]

    def lend(
        self, store: Store, cluster: str, probe_anyway: Set[str], now: float
    ) -> dict[str, HostObservation]:
        """At a pass's start, under the lock (`now`: the monotonic clock): the
        observations its hosts' owners wrote that stand for probes, from owners whose
        rounds advance (core.borrowing: `advancing`, `borrowable`); none on a store that
        is not the lock holder's on etcd, or while etcd does not answer."""
        trust = self._trusts.setdefault(cluster, Trust())
        writer = store.writer if isinstance(store, EtcdStore) else None
        tenure = writer.tenure if writer is not None else (0, 0)
        if isinstance(store, EtcdStore) and tenure[1] and not trust.continues(tenure[1]):
            trust.inherit(*_handed(store), before=tenure[1])
        bound = trust.since
        trust.took(*tenure)
        if trust.since != bound:  # another writer's tenure, or the first: a round wanted
            log.debug("%s: a tenure not handed down: whole rounds wanted", cluster)
            want_whole_rounds(self.membership, cluster)
        self.borrowed = 0
        self._orderable.pop(cluster, None)
        if tenure[0] == 0:
            return {}
        member = self.membership
        try:
            reader = self._readers.get(cluster)
            if reader is None:
                reader = self._readers[cluster] = ShardReader(member.url, member.client, cluster)
            table = reader.read()
            log.debug("%s: the owners' observations read: %d", cluster, len(table.written))
        except StoreError as exc:
            log.info("%s: the owners' observations not read: %s", cluster, exc)
            return {}
        me = member.member.id
        self._mine[cluster] = frozenset(h for h, k in table.owners.items() if k.controller == me)
        self._rounds, fresh = advancing(self._rounds, table, now)
        self._orderable[cluster] = orderable(table.owners, me, fresh)
        self._patience = {m: patience(t) for m, t in table.intervals.items()}
        table = replace(table, rounds=fresh)
        found = borrowable(table, me, trust, probe_anyway)
        self.borrowed = len(found)
        return found

    def delegation(self, store: Store, cluster: str) -> Delegation | None:
        """The task verbs of the pass `lend` began, handed to the owners of the hosts it
        borrowed from (None: nothing to hand over, or not the lock holder's etcd store)."""
        owners = self._orderable.get(cluster, {})
        writer = store.writer if isinstance(store, EtcdStore) else None
        if not owners or writer is None or writer.tenure[0] == 0:
            return None
        member = self.membership.member.id
        made = Delegation(self.book, writer, cluster, member, owners, self._patience)
        self._delegations[cluster] = made
        return made

    def hand_down(self, store: Store, cluster: str, acted: bool, hosts: Set[str] | None) -> None:
        """Before the last commit of the pass `lend` began, after its last act: the bound
        it ends with goes in that commit (store.handed), for the next `watch` to decide."""
        trust = self._trusts.get(cluster)
        if isinstance(store, EtcdStore) and trust is not None and trust.tenure:
            hand_down(store, trust.handing(acted, hosts))

    def ended(self, cluster: str, acted: bool, hosts: Set[str] | None = None) -> None:
        """The pass `lend` began is over; `acted`: it did something, to `hosts` (None: any).
        What is borrowed of those hosts next must be observed after now: a revision read
        now is their bound. For every host, the owners are asked for whole rounds
        (`want_whole_rounds`, whose write is the bound); for a few, nothing is asked: the
        acts' events ring their owners, whose probes after now are borrowed, and until then
        the decider probes them. etcd away: no bound, the next pass probes every host."""
        trust = self._trusts.setdefault(cluster, Trust())
        handed = self._delegations.pop(cluster, None)
        self.ordered += handed.ordered if handed is not None else 0
        if not acted:
            trust.left(False, 0)
            return
        member = self.membership
        revision = want_whole_rounds(member, cluster) if hosts is None else revision_now(member)
        if revision:
            trust.left(True, revision, hosts)


def _said_round(cluster: str, probed: int, written: bool, began: float, observed: float) -> None:
    """An owner's round, in the debug log: its probes' seconds (from `began` to
    `observed`, monotonic) and its write's (to now)."""
    took, wrote = observed - began, time.monotonic() - observed
    said = "%s: round over its share: %d probed in %.2f s, written: %s in %.2f s"
    log.debug(said, cluster, probed, took, written, wrote)


def _ordered(
    events: Sequence[Any], prefix: bytes, deciding: Set[str], owns: Mapping[str, Set[str]]
) -> bool:
    """Whether `events` (under `prefix`, PREFIX/orders/) put an order for a host `owns`
    has (the hosts of each cluster its last round owned; a host taken since rings its
    round by the take) in a cluster it stands by for (not `deciding`): its round
    carries it now. Not another owner's order, nor an order's claim (a delete)."""
    for event in events:
        cluster, _, host = bytes(event.kv.key)[len(prefix) :].decode().partition("/")
        if (
            event.type == rpc.Event.PUT
            and cluster not in deciding
            and host in owns.get(cluster, ())
        ):
            return True
    return False


def _owned(
    seen: SeenKeys, member: str, cluster: str, listed: Mapping[str, Host]
) -> tuple[int, dict[str, int]]:
    """The revision read, and the hosts of `cluster` that `listed` names whose owner key
    `member` holds (host -> the key's create revision)."""
    revision, owned = seen.owned(member, cluster)
    return revision, {h: created for h, created in owned.items() if h in listed}


def _held(seen: SeenKeys, member: str, cluster: str) -> frozenset[str]:
    """The hosts of `cluster` whose owner key `member` holds now (none: etcd away)."""
    try:
        return frozenset(seen.owned(member, cluster)[1])
    except StoreError as exc:
        log.info("%s: the owner keys not read: %s", cluster, exc)
        return frozenset()


def _handed(store: EtcdStore) -> tuple[Handed | None, int]:
    """The bound the last deciding tenure handed down (None: none, or etcd away)."""
    try:
        return read_handed(store)
    except StoreError as exc:
        log.info("the bound handed down not read: %s", exc)
        return None, 0


def revision_now(membership: Membership) -> int:
    """etcd's revision now (0: etcd not answering)."""
    try:
        return membership.client.revision()
    except StoreError as exc:
        log.info("the revision not read: %s", exc)
        return 0


def want_whole_rounds(membership: Membership, cluster: str) -> int:
    """Ask the owners of `cluster` for a round of their whole share now: rewrite
    PREFIX/wanted/<cluster> (under this member's lease), which their watch follows. The
    revision of that write (0: not written)."""
    lease = membership.lease_id
    if lease is None:
        return 0
    key = wanted_prefix(membership.url) + cluster.encode()
    try:
        reply = membership.client.txn(rpc.TxnRequest(success=[put(key, b"", lease)]))
    except StoreError as exc:
        log.info("%s: no new round asked of the owners: %s", cluster, exc)
        return 0
    return int(reply.header.revision)


def _share_scope(
    streams: EventStreams | None,
    cluster: str,
    mine: Sequence[Host],
    memory: ProbeMemory,
    full: bool,
) -> frozenset[str] | None:
    """The hosts of its share an owner's round probes (None: all of them); `streams`
    follow exactly those hosts."""
    if streams is None:
        return None
    streams.follow(cluster, mine)
    rung, up = streams.take(cluster)
    if full:
        return None
    names = [h.name for h in mine]
    return probe_scope(names, rung=rung, up=up, remembered=memory.remembered())


@dataclass(frozen=True)
class Shared:
    """A `watch`'s observing by share for one cluster: the cluster's name (as its owner
    keys name it) and the watch's `Borrowing`."""

    cluster: str
    borrowing: Borrowing

    def lend(
        self, store: Store, rung: Set[str], now: float
    ) -> tuple[dict[str, HostObservation], Delegation | None]:
        """A pass's borrowed observations and its task verbs' handing over (Borrowing's
        `lend` and `delegation`)."""
        found = self.borrowing.lend(store, self.cluster, rung, now)
        return found, self.borrowing.delegation(store, self.cluster)
