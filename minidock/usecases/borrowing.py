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
from collections.abc import Sequence, Set
from dataclasses import dataclass, replace

from minidock.core.borrowing import RoundSeen, Trust, advancing, borrowable
from minidock.model import Host, HostObservation
from minidock.observe import ProbeMemory, observe
from minidock.ssh import Executor
from minidock.store import Store, StoreError
from minidock.store.etcd import EtcdStore
from minidock.store.etcd_client import range_end, rpc
from minidock.store.members import Membership
from minidock.store.seen import SeenKeys, read_shard_table, seen_prefix

__all__ = ["Borrowing", "Shared"]

log = logging.getLogger(__name__)


class Borrowing:
    """One `watch`'s part in observing by share, on its membership's lease: as an owner,
    its rounds over its share (`probe_share`), whose revisions its member key carries
    (`rounds`); as a decider, the observations it borrows for a pass (`lend`) and the end
    of that pass's tenure (`ended`), per cluster."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.rounds: dict[str, int] = {}  # cluster -> its last whole round's revision
        self.borrowed = 0  # hosts the last pass borrowed
        self._seen = SeenKeys(membership.url, membership.client)
        self._trusts: dict[str, Trust] = {}
        self._lease: int | None = None
        self._rounds: dict[str, RoundSeen] = {}  # each owner's rounds, as seen advancing

    def of(self, cluster: str) -> Shared:
        return Shared(cluster, self)

    async def probe_share(
        self, executor: Executor, cluster: str, hosts: Sequence[Host], memory: ProbeMemory
    ) -> int:
        """Probe the hosts of `cluster` (of `hosts`, its inventory's) whose owner keys this
        member holds, and write what changed; how many were probed. The round's revision
        joins `rounds` when every one of them was written."""
        member, lease = self.membership.member.id, self.membership.lease_id
        if lease is None:
            return 0
        if lease != self._lease:  # a new lease: what was written under the last went
            self._seen.forget()
            self._lease = lease
        listed = {h.name: h for h in hosts}
        try:
            revision, owned = self._seen.owned(member, cluster)
            owned = {h: created for h, created in owned.items() if h in listed}
            mine = [listed[h] for h in sorted(owned)]
            seen = await observe(executor, mine, cluster, ports=False, memory=memory)
            if self._seen.write(cluster, member, lease, owned, seen.hosts, revision):
                self.rounds[cluster] = revision
        except StoreError as exc:
            log.info("%s: observations of the share not written: %s", cluster, exc)
            return 0
        return len(mine)

    def lend(
        self, store: Store, cluster: str, probe_anyway: Set[str], now: float
    ) -> dict[str, HostObservation]:
        """At a pass's start, under the lock (`now`: the monotonic clock): the
        observations its hosts' owners wrote that stand for probes, from owners whose
        rounds advance (core.borrowing: `advancing`, `borrowable`); none on a store that
        is not the lock holder's on etcd, or while etcd does not answer."""
        trust = self._trusts.setdefault(cluster, Trust())
        tenure = store.tenure if isinstance(store, EtcdStore) else (0, 0)
        trust.took(*tenure)
        self.borrowed = 0
        if tenure[0] == 0:
            return {}
        member = self.membership
        try:
            table = read_shard_table(member.url, member.client, cluster)
        except StoreError as exc:
            log.info("%s: the owners' observations not read: %s", cluster, exc)
            return {}
        self._rounds, fresh = advancing(self._rounds, table, now)
        table = replace(table, rounds=fresh)
        found = borrowable(table, member.member.id, trust, probe_anyway)
        self.borrowed = len(found)
        return found

    def ended(self, cluster: str, acted: bool) -> None:
        """The pass `lend` began is over; `acted`: it did something to a host. The
        revision read now bounds what is borrowed next (etcd away: the next pass probes
        every host, as after another writer's)."""
        prefix = seen_prefix(self.membership.url, cluster)
        request = rpc.RangeRequest(key=prefix, range_end=range_end(prefix), count_only=True)
        try:
            revision = int(self.membership.client.range(request).header.revision)
        except StoreError as exc:
            log.info("%s: the end of the pass not read: %s", cluster, exc)
            return
        self._trusts.setdefault(cluster, Trust()).left(acted, revision)


@dataclass(frozen=True)
class Shared:
    """A `watch`'s observing by share for one cluster: the cluster's name (as its owner
    keys name it) and the watch's `Borrowing`."""

    cluster: str
    borrowing: Borrowing
