"""`minidock controllers`: which controllers are at work on a state, read without the
lock (docs/ha.md, "Which controllers are at work"). An etcd state lists the member key
each running `minidock watch` keeps (minidock.store.members); cron's `minidock reconcile`
keeps none (it lives for one pass) and shows as the lock's holder while its pass runs and
as the last commit's writer after. A state directory has one controller at a time, on
its own machine: the lock's holder, when a pass is under way.

On an etcd state each `watch` also holds its share of the hosts' owner keys after each
round (minidock.usecases.shares)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.core.deciding import Peer, Progress, decider, deferring_to, in_line, progressed
from minidock.store import Member, Roster, StateLocation, StoreError
from minidock.usecases.access import require_applied, translated
from minidock.usecases.clusters import held
from minidock.usecases.fleetview import lock_state
from minidock.usecases.outcomes import PassDone, PassSkipped
from minidock.usecases.shares import Hold, Shares, fleet_names

if TYPE_CHECKING:
    from minidock.ssh import Executor
    from minidock.usecases.borrowing import Borrowing, Shared

__all__ = ["Heartbeat", "controllers"]

log = logging.getLogger(__name__)


def controllers(location: StateLocation) -> Roster:
    """The state's controllers as read now (etcd: its member keys, each with its lease's
    time left; a directory: none, and whether a pass holds the lock)."""
    require_applied(location)
    if isinstance(location, Path):
        locked = lock_state(location).held
        return Roster((), "a pass is under way on this machine" if locked else "")
    from minidock.store.members import read_roster  # loads the etcd client: etcd states only

    with translated():
        roster = read_roster(location)
    return replace(roster, members=deciders(roster.members, [h.name for h in held(location)]))


def deciders(members: Sequence[Member], clusters: Sequence[str]) -> tuple[Member, ...]:
    """`members`, each with the clusters whose passes it makes by core.deciding's rule
    (the most senior covering each; a stalled one is passed over by the others)."""
    peers = [Peer(m.id, m.created, m.cluster, m.interval, m.passes) for m in members]
    chosen = {c: d.id for c in clusters if (d := decider(peers, c)) is not None}
    return tuple(
        replace(m, decides=tuple(c for c in clusters if chosen.get(c) == m.id)) for m in members
    )


class Heartbeat:
    """A `watch`'s member key on an etcd state (none for a state directory), rewritten
    after each round with what the round did, and its share of the owner keys held
    (`Shares`); etcd not answering is logged and the next round tries again (the work
    never waits for it). `news` is called, from another thread, when etcd says a share
    may have to change hands (Membership.follow): a round then holds it at once; and,
    while this `watch` makes passes, when an owner wrote what it saw (Borrowing.follow);
    `order` (else `news`) when an order came for a host it owns.
    Its key says which cluster it covers ("" for all) and its resync, so that the
    watches on a state agree which one makes each cluster's passes (`defers`,
    core.deciding); its observing by share is `shared`."""

    def __init__(
        self,
        location: StateLocation,
        news: Callable[[], None] | None = None,
        order: Callable[[], None] | None = None,
        *,
        cluster: str = "",
        interval: float = 0.0,
    ) -> None:
        self._shares: Shares | None = None
        self._borrowing: Borrowing | None = None
        self._news = news
        if not isinstance(location, Path):
            from minidock.store.members import Membership
            from minidock.usecases.borrowing import Borrowing

            membership = Membership(location)
            if news is not None:
                membership.follow(news)
            self._shares = Shares(membership)
            self._borrowing = Borrowing(membership)
            if news is not None:
                self._borrowing.follow(news, order)
        self._covers = {"cluster": cluster, "interval": interval}
        self._interval = interval
        self._passes = 0
        self._last: float | None = None
        self._took: float | None = None  # how long its last pass took (its slowest cluster's)
        self.last_hold: Hold | None = None  # the last round's hold of the owner keys
        self._peers: list[Peer] = []  # the live members at the round's start (`look`)
        self._fleet: frozenset[str] = frozenset()  # the last round's hosts' owner key names
        self._seen: dict[str, Progress] = {}
        self._now = 0.0

    @property
    def member_id(self) -> str | None:
        """Its member key's id (None for a state directory)."""
        return None if self._shares is None else self._shares.membership.member.id

    def look(self, now: float) -> None:
        """At a round's start (`now`: the monotonic clock): read the live members, for
        `defers`. etcd not answering: this round defers to nobody (the lock still
        guards each pass)."""
        if self._shares is None:
            return
        from minidock.store.members import read_peers

        member = self._shares.membership
        try:
            peers = read_peers(member.url, member.client)
        except StoreError as exc:
            log.info("members not read: %s", exc)
            peers = []
        self._peers, self._seen, self._now = peers, progressed(self._seen, peers, now), now

    def shared(self, cluster: str) -> Shared | None:
        """`cluster`'s observing by share (None for a state directory)."""
        if self._borrowing is None:
            return None
        from minidock.usecases.borrowing import Shared  # etcd states only

        return Shared(cluster, self._borrowing)

    def defers(self, cluster: str) -> str | None:
        """The member id of the `watch` this one leaves `cluster`'s passes to this round
        (the most senior that covers it, while its passes advance), or None: pass."""
        me = self.member_id
        if me is None:
            return None
        chosen = deferring_to(me, self._peers, cluster, self._seen, self._now)
        return None if chosen is None else chosen.id

    def kept(self, cluster: str) -> frozenset[str] | None:
        """The hosts of `cluster` this `watch` keeps connections to while it stands by:
        its share and standby set (Shares.kept_hosts); None (every host) on a state
        directory, where any standby may be the next to work on all of them, and for a
        cluster whose passes it makes or would make next (core.deciding.in_line: such a
        pass after another writer's tenure probes every host, warm)."""
        if self._shares is None or self._in_line(cluster):
            return None
        return self._shares.kept_hosts(cluster)

    def _in_line(self, cluster: str) -> bool:
        me = self.member_id
        return me is not None and in_line(me, self._peers, cluster)

    def release(self, executor: Executor) -> int | None:
        """Close the connections outside those this `watch` keeps (`kept`, each cluster's
        of the last round) that ran nothing for a while (core.ring.idle: fleet-wide acts,
        a host's orphaned order); how many stay open. None where it keeps every host's (a
        state directory, or no hold yet)."""
        if self._shares is None or self._shares.kept is None:
            return None
        from minidock.core.ring import idle

        clusters = {n.partition("/")[0] for n in self._fleet}
        in_line = {c for c in clusters if self._in_line(c)}  # asked once a cluster
        names = self._shares.kept | {n for n in self._fleet if n.partition("/")[0] in in_line}
        hosts = {n.partition("/")[2] for n in names}
        return executor.release(hosts, idle(self._interval))

    def round(
        self,
        steps: Sequence[tuple[str, PassDone | PassSkipped]],
        now: float,
        connected: int | None = None,
    ) -> None:
        """Rewrite the member key with what the round's steps (each with its cluster's
        name) did, and `connected` (the connections this watch holds; else as its steps
        say), then hold the share of the hosts they listed (`fleet_names`; when a
        cluster's hosts are unknown this round, what is held stays held)."""
        done = [s for _, s in steps if isinstance(s, PassDone)]
        if self._borrowing is not None:
            self._borrowing.deciding = frozenset(c for c, s in steps if isinstance(s, PassDone))
        self._passes += len(done)
        self._last = now if done else self._last
        self._took = max(s.seconds for s in done) if done else self._took
        warm = hosts = 0
        for _, step in steps:
            if isinstance(step, PassDone):
                seen = step.result.observed.hosts
                warm, hosts = warm + sum(1 for o in seen.values() if o.ok), hosts + len(seen)
            else:
                warm, hosts = warm + step.standby, hosts + step.hosts
        warm = warm if connected is None else connected
        if self._shares is None:
            return
        member = self._shares.membership
        shared = self._borrowing
        rounds, borrowed = (dict(shared.rounds), shared.borrowed) if shared else ({}, 0)
        took = dict(shared.round_seconds) if shared else {}
        ordered, carried = (shared.ordered, shared.carried) if shared else (0, 0)
        try:
            member.beat(
                last_pass=self._last,
                pass_seconds=self._took,
                passes=self._passes,
                warm=warm,
                hosts=hosts,
                rounds=rounds,
                round_seconds=took,
                borrowed=borrowed,
                ordered=ordered,
                carried=carried,
                **self._covers,
            )
        except StoreError as exc:
            log.info("member key not written: %s", exc)
            return
        fleet = fleet_names(steps)
        if fleet is None:
            return
        self._fleet = fleet
        try:
            self.last_hold = self._shares.hold(fleet)
        except StoreError as exc:
            log.info("owner keys not held: %s", exc)
            return
        if self.last_hold.took and self._news is not None:
            self._news()  # hosts taken: the next round probes them and writes, at once

    def leave(self) -> None:
        if self._shares is not None:
            self._shares.membership.leave()
