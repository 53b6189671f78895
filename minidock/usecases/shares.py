"""Each `watch`'s share of the fleet on an etcd state (docs/scale.md, "Status: what runs
today"): after each round it holds the owner keys of the hosts the ring
(minidock.core.ring) gives it over the live members, taken and given up by the handover
(minidock.core.handover). The shares are held, not yet worked by: the writer lock's
holder still observes and acts on every host. A host's owner key is named
`<cluster>/<host>` (`owner_name`); `status` names each host's holder (`host_owners`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.store import StateLocation
from minidock.usecases.access import translated
from minidock.usecases.outcomes import PassDone, PassSkipped

if TYPE_CHECKING:
    from minidock.store.members import Membership

__all__ = ["Hold", "Shares", "fleet_names", "host_owners", "owner_name"]

log = logging.getLogger(__name__)


def fleet_names(steps: Iterable[tuple[str, PassDone | PassSkipped]]) -> frozenset[str] | None:
    """The owner key names of the hosts a round's passes listed, `<cluster>/<host>` for
    each (cluster, step); None when a step could not read its cluster's inventory: a ring
    over part of the fleet would give away the hosts it left out."""
    names: set[str] = set()
    for cluster, step in steps:
        if isinstance(step, PassDone):
            listed: Iterable[str] = step.result.observed.hosts
        elif step.names:
            listed = step.names
        else:
            return None
        names.update(owner_name(cluster, host) for host in listed)
    return frozenset(names)


def owner_name(cluster: str, host: str) -> str:
    """A host's owner key name: `<cluster>/<host>`, so that clusters on one state that
    name a host alike hold it apart."""
    return f"{cluster}/{host}"


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
        self.membership = membership  # its member key, whose lease the owner keys are under
        self._settled: tuple[str, frozenset[str], frozenset[str], Hold] | None = None
        self.kept: frozenset[str] | None = None  # owner names it keeps connections to
        self._kept_for: tuple[str, frozenset[str], frozenset[str]] | None = None

    def kept_hosts(self, cluster: str) -> frozenset[str] | None:
        """The hosts of `cluster` this `watch` keeps a connection to at rest (its share and
        its standby set, core.ring.connections, as of its last hold); none before its
        first hold (a joiner connects to what the ring gives it, not to every host)."""
        if self.kept is None:
            return frozenset()
        return frozenset(h for c, _, h in (n.partition("/") for n in self.kept) if c == cluster)

    def _keep(self, me: str, members: frozenset[str], hosts: frozenset[str]) -> None:
        from minidock.core.ring import connections

        if self._kept_for != (me, members, hosts):  # the ring moved: computed again
            self._kept_for, self.kept = (me, members, hosts), connections(hosts, members, me)

    def hold(self, hosts: frozenset[str]) -> Hold:
        from minidock.core.handover import View, steps
        from minidock.core.ring import assign
        from minidock.store.owners import OwnerKeys, read_members, read_table

        keys = OwnerKeys.of(self.membership)
        me = keys.controller
        if self._settled is not None:
            was, members, fleet, held = self._settled
            if (was, fleet) == (me, hosts) and read_members(keys.url, keys.client) == members:
                return held
        table = read_table(keys.url, keys.client)
        self._keep(me, table.members | {me}, hosts)
        wanted = assign(hosts, table.members | {me})
        todo = steps(View(me, wanted, table.owners))
        owners = dict(table.owners)
        given = keys.acknowledge_all({ack.host: ack.created for ack in todo.acknowledge})
        gave = sum(given.values())
        for host in given:
            owners.pop(host)  # given up, or already gone with an old lease
        for host, taken in keys.take_all(todo.take).items():
            owners[host] = taken.owner
        owned = sum(1 for key in owners.values() if key.controller == me)
        share = sum(1 for m in wanted.values() if m == me)
        held = Hold(share, owned, took=len(todo.take), gave=gave)
        self._settled = (me, table.members, hosts, held) if held.settled else None
        if held.took or held.gave:
            log.info(
                "owner keys: took %d, gave up %d; %d of %d held",
                held.took, held.gave, held.owned, held.wanted,
            )  # fmt: skip
        return held


def host_owners(location: StateLocation) -> dict[str, str]:
    """Owner key name (`owner_name`) -> the controller holding it, as etcd holds them
    now; none for a state directory (one controller at a time works on it)."""
    if isinstance(location, Path):
        return {}
    from minidock.store.etcd_client import EtcdClient  # etcd states only
    from minidock.store.owners import read_owners

    with translated():
        client = EtcdClient(location)
        try:
            return {name: key.controller for name, key in read_owners(location, client).items()}
        finally:
            client.close()
