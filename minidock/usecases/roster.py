"""`minidock controllers`: which controllers are at work on a state, read without the
lock (docs/ha.md, "Which controllers are at work"). An etcd state lists the member key
each running `minidock watch` keeps (minidock.store.members); cron's `minidock reconcile`
keeps none (it lives for one pass) and shows as the lock's holder while its pass runs and
as the last commit's writer after. A state directory has one controller at a time, on
its own machine: the lock's holder, when a pass is under way.

On an etcd state each `watch` also holds its share of the hosts' owner keys (`Shares`):
the hosts the ring (minidock.core.ring) gives it over the live members, taken and given
up by the handover (minidock.core.handover). Observing and acting by share is not built
yet: the writer lock's holder still does both for the whole fleet (docs/scale.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.store import Roster, StateLocation, StoreError
from minidock.usecases.access import require_applied, translated
from minidock.usecases.fleetview import lock_state
from minidock.usecases.outcomes import PassDone, PassSkipped

if TYPE_CHECKING:
    from minidock.store.members import Membership

__all__ = ["Heartbeat", "Hold", "Shares", "controllers", "fleet_names"]

log = logging.getLogger(__name__)


def controllers(location: StateLocation) -> Roster:
    """The state's controllers as read now (etcd: its member keys, each with its lease's
    time left; a directory: none, and whether a pass holds the lock)."""
    require_applied(location)
    if isinstance(location, Path):
        held = lock_state(location).held
        return Roster((), "a pass is under way on this machine" if held else "")
    from minidock.store.members import read_roster  # loads the etcd client: etcd states only

    with translated():
        return read_roster(location)


class Heartbeat:
    """A `watch`'s member key on an etcd state (none for a state directory), rewritten
    after each round with what the round did, and its share of the owner keys held
    (`Shares`); etcd not answering is logged and the next round tries again (the work
    never waits for it)."""

    def __init__(self, location: StateLocation) -> None:
        self._member: Membership | None = None
        self._shares: Shares | None = None
        if not isinstance(location, Path):
            from minidock.store.members import Membership

            self._member = Membership(location)
            self._shares = Shares(self._member)
        self._passes = 0
        self._last: float | None = None
        self.last_hold: Hold | None = None  # the last round's hold of the owner keys

    def round(self, steps: Sequence[PassDone | PassSkipped], now: float) -> None:
        done = [s for s in steps if isinstance(s, PassDone)]
        self._passes += len(done)
        self._last = now if done else self._last
        warm = hosts = 0
        for step in steps:
            if isinstance(step, PassDone):
                seen = step.result.observed.hosts
                warm, hosts = warm + sum(1 for o in seen.values() if o.ok), hosts + len(seen)
            else:
                warm, hosts = warm + step.standby, hosts + step.hosts
        if self._member is None or self._shares is None:
            return
        try:
            self._member.beat(last_pass=self._last, passes=self._passes, warm=warm, hosts=hosts)
        except StoreError as exc:
            log.info("member key not written: %s", exc)
            return
        fleet = fleet_names(steps)
        if fleet is None:  # a cluster's hosts unknown this round: hold what is held
            return
        try:
            self.last_hold = self._shares.hold(fleet)
        except StoreError as exc:
            log.info("owner keys not held: %s", exc)

    def leave(self) -> None:
        if self._member is not None:
            self._member.leave()


def fleet_names(steps: Sequence[PassDone | PassSkipped]) -> frozenset[str] | None:
    """The hosts a round's clusters list, each named as its owner key is (`cluster/host`
    when the pass names its cluster); None when a step could not read its cluster's
    inventory: a ring over part of the fleet would give away the hosts it left out."""
    names: set[str] = set()
    for step in steps:
        if isinstance(step, PassDone):
            listed: Iterable[str] = step.result.observed.hosts
        elif step.names:
            listed = step.names
        else:
            return None
        names.update(f"{step.cluster}/{h}" if step.cluster else h for h in listed)
    return frozenset(names)


@dataclass(frozen=True)
class Hold:
    """One hold of a controller's share: the hosts the ring gives it, the owner keys it
    holds after the hold, and what the hold took and gave up (acknowledged)."""

    wanted: int
    owned: int
    took: int = 0
    gave: int = 0

    @property
    def settled(self) -> bool:
        """Its keys are exactly its share (nothing left to take or give up)."""
        return self.owned == self.wanted and not (self.took or self.gave)


class Shares:
    """A `watch`'s share of the owner keys (docs/scale.md, "A host changes hands"): each
    hold reads the members and the owner keys at one revision, computes the ring over the
    members, and carries out the handover's steps on its side: gives up (acknowledges) the
    keys the ring no longer gives it, takes those it gives it that nobody holds. A host
    another member holds is taken once that member gives it up or its lease goes. No
    command is in flight between rounds, so a host to give up is given up at once.

    A settled share (its keys exactly its share, nothing taken or given up last time) is
    held again without reading the owner keys while the members and the hosts stay the
    same: at rest a hold is one read of the member ids."""

    def __init__(self, membership: Membership) -> None:
        self._membership = membership
        self._settled: tuple[str, frozenset[str], frozenset[str], Hold] | None = None

    def hold(self, hosts: frozenset[str]) -> Hold:
        from minidock.core.handover import View, steps
        from minidock.core.ring import assign
        from minidock.store.owners import OwnerKeys, read_members, read_table

        keys = OwnerKeys.of(self._membership)
        me = keys.controller
        if self._settled is not None:
            was, members, fleet, held = self._settled
            if (was, fleet) == (me, hosts) and read_members(keys.url, keys.client) == members:
                return held
        table = read_table(keys.url, keys.client)
        wanted = assign(hosts, table.members | {me})
        todo = steps(View(me, wanted, table.owners))
        owners = dict(table.owners)
        gave = 0
        for ack in todo.acknowledge:
            if keys.acknowledge(ack.host, ack.created):
                gave += 1
            owners.pop(ack.host)  # given up, or already gone with an old lease
        for host in sorted(todo.take):
            owners[host] = keys.take(host).owner
        owned = sum(1 for key in owners.values() if key.controller == me)
        share = sum(1 for m in wanted.values() if m == me)
        held = Hold(share, owned, took=len(todo.take), gave=gave)
        self._settled = (me, table.members, hosts, held) if held.settled else None
        if held.took or held.gave:
            took = held.took
            log.info("owner keys: took %d, gave up %d; %d of %d held", took, gave, owned, share)
        return held
