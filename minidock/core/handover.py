"""A host changes hands: drain, acknowledge, take (docs/scale.md, "A host changes hands").
Pure: one controller's next steps from its own view of etcd.

Each host has an owner key, `PREFIX/owners/<host>`, created if absent under its owner's
lease; a controller observes and acts only on hosts whose key it created. The ring says
which member *should* own each host (`wanted`, computed from the member set read at one
revision); the keys say which one *does*. A controller closes the gap on its side only:

- **drain**: a host whose key is mine but the ring no longer gives me: start nothing
  more on it, let the command in flight end;
- **acknowledge**: a drained host with nothing in flight: delete my key, compared on its
  create revision (so a key that is no longer the one I created is never deleted);
- **take**: a host the ring gives me that has no key: create it, if absent, under my
  lease. From etcd's answer on it is mine.

What keeps two controllers off one host is etcd, not the views: a key is created only
when absent, and goes only by its owner's acknowledgement (after its drain) or with its
owner's lease (after its fence failed). So views may be stale, and differ: a stale view
delays a handover, never doubles one. The caller fences each act and write by its lease
(minidock/store/etcd.py, `LeaseKeeper.check`) and updates its view of the keys with etcd's
answers to its own takes and acknowledgements.

`me` names one lease: a controller that loses its lease and takes a new one is a new
member, so the keys of its old lease (which etcd deletes at their expiry) are never read
as its own. Proved under random interleavings by tests/unit/test_handover.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Acknowledge", "OwnerKey", "Steps", "View", "steps"]


@dataclass(frozen=True)
class OwnerKey:
    """`PREFIX/owners/<host>` as last read: the member that created it and etcd's create
    revision of the key (the revision an acknowledgement compares on)."""

    controller: str
    created: int


@dataclass(frozen=True)
class View:
    """One controller's view: its id (one lease's), the ring's map at the membership it
    last read (host -> member; a host missing from it is wanted by nobody), the owner keys
    as it last read them (with its own takes and acknowledgements applied), and the hosts
    it has a command in flight on."""

    me: str
    wanted: Mapping[str, str]
    owners: Mapping[str, OwnerKey]
    inflight: frozenset[str] = frozenset()

    def mine(self) -> frozenset[str]:
        """Hosts whose owner key this controller created."""
        return frozenset(h for h, key in self.owners.items() if key.controller == self.me)

    def wants(self, host: str) -> bool:
        return self.wanted.get(host) == self.me


@dataclass(frozen=True)
class Acknowledge:
    """Delete `owners/<host>` if its create revision is still `created` (one transaction)."""

    host: str
    created: int


@dataclass(frozen=True)
class Steps:
    """What one controller does now.

    `act`: the hosts it may start commands on (observe, run, stop): its key and the ring's
    choice. `drain`: its key, not the ring's choice: it starts nothing on them, and a
    command in flight runs to its end (the key, still held, keeps every other controller
    off the host meanwhile). `acknowledge`: the drained hosts with nothing in flight, to
    delete. `take`: the hosts the ring gives it that have no key, to create. The sets are
    disjoint but for `acknowledge`, a part of `drain`."""

    act: frozenset[str]
    drain: frozenset[str]
    acknowledge: tuple[Acknowledge, ...]
    take: frozenset[str]

    @property
    def writes(self) -> bool:
        """Whether a step asks etcd for anything."""
        return bool(self.acknowledge or self.take)


def draining(view: View) -> frozenset[str]:
    """Hosts whose key is mine that the ring no longer gives me (or that left the fleet)."""
    return frozenset(h for h in view.mine() if not view.wants(h))


def acknowledgements(view: View) -> tuple[Acknowledge, ...]:
    """The draining hosts with no command in flight, each compared on my key's revision."""
    return tuple(
        Acknowledge(h, view.owners[h].created)
        for h in sorted(draining(view))
        if h not in view.inflight
    )


def takes(view: View) -> frozenset[str]:
    """Hosts the ring gives me that have no owner key as I read them. One another member
    holds stays its until that member acknowledges (it drains first) or its lease goes."""
    return frozenset(h for h, m in view.wanted.items() if m == view.me and h not in view.owners)


def steps(view: View) -> Steps:
    """One controller's steps now, from its view alone (every controller calls this with
    its own view; etcd's create-if-absent and compared delete keep them apart)."""
    mine = view.mine()
    return Steps(
        act=frozenset(h for h in mine if view.wants(h)),
        drain=draining(view),
        acknowledge=acknowledgements(view),
        take=takes(view),
    )
