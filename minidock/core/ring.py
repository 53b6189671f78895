"""Which controller observes and acts on which host: consistent hashing with bounded loads
(docs/scale.md, "Who observes and acts on which host: the ring").

Each member has `VNODES` points on a ring of 2**64 positions; hosts are taken in the order
of their own position, and each goes to the first point clockwise whose member holds fewer
than ceil(c * N / C) hosts (Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with
Bounded Loads", SODA 2018). Positions are blake2b hashes of `member/<id>/<i>` and
`host/<name>`, so the map is a function of the host set and the member set alone: every
controller that read the members at one etcd revision computes the same map, in any
order. benchmarks/scale_model.py measures it (the load, the hosts a join or a leave
moves, the standby set) and docs/scale.md has its tables.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "CAPACITY",
    "IDLE",
    "VNODES",
    "Fleet",
    "Ring",
    "assign",
    "capacity",
    "connections",
    "idle",
    "point",
    "shares",
    "standby",
    "standbys",
]

VNODES = 100  # points per member, as timebertt/kubernetes-controller-sharding's ring
CAPACITY = 1.25  # c: no member holds more than ceil(c * N / C) hosts
IDLE = 30.0  # seconds: a connection outside `connections` that ran nothing this long closes


def point(text: str) -> int:
    """A 64-bit position on the ring (blake2b: stable across processes and machines)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Fleet:
    """The hosts in the order every controller assigns them: by their ring position (a
    fleet given to `assign` many times is hashed once). Iterates over the names."""

    order: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> Fleet:
        if isinstance(names, Fleet):
            return names
        return cls(tuple(sorted((point(f"host/{n}"), n) for n in set(names))))

    def __iter__(self) -> Iterator[str]:
        return (name for _, name in self.order)

    def __len__(self) -> int:
        return len(self.order)


@dataclass(frozen=True)
class Ring:
    """The members' points, sorted, each with its member: a function of the member set."""

    points: tuple[int, ...]
    owners: tuple[str, ...]

    @classmethod
    def of(cls, members: Iterable[str], vnodes: int = VNODES) -> Ring:
        if vnodes < 1:
            raise ValueError(f"a member needs at least one point on the ring, not {vnodes}")
        found = sorted((point(f"member/{m}/{i}"), m) for m in set(members) for i in range(vnodes))
        return cls(tuple(p for p, _ in found), tuple(m for _, m in found))


def capacity(hosts: int, members: int, c: float = CAPACITY) -> int:
    """The bound on one member's share: ceil(c * N / C) (c = inf: no bound). c below 1
    would leave hosts no member may take."""
    if c < 1:
        raise ValueError(f"the bound c must be at least 1, not {c:g}")
    if math.isinf(c):
        return hosts
    return math.ceil(c * hosts / members)


def assign(
    hosts: Iterable[str], members: Iterable[str], *, c: float = CAPACITY, vnodes: int = VNODES
) -> dict[str, str]:
    """Host -> member by consistent hashing with bounded loads: every host gets exactly one
    member, none holds more than `capacity`. No members: no owners."""
    fleet, ring = Fleet.of(hosts), Ring.of(members, vnodes)
    count = len(set(ring.owners))
    if count == 0:
        return {}
    cap = capacity(len(fleet), count, c)
    load = dict.fromkeys(ring.owners, 0)
    points, owners, size = ring.points, ring.owners, len(ring.points)
    owner: dict[str, str] = {}
    for at, host in fleet.order:
        i = bisect.bisect_left(points, at)
        while load[owners[i % size]] >= cap:
            i += 1
        chosen = owners[i % size]
        load[chosen] += 1
        owner[host] = chosen
    return owner


def shares(
    hosts: Iterable[str], members: Iterable[str], *, c: float = CAPACITY, vnodes: int = VNODES
) -> dict[str, frozenset[str]]:
    """Member -> the hosts it holds, every member listed (an empty share too)."""
    found: dict[str, set[str]] = {m: set() for m in members}
    for host, m in assign(hosts, found, c=c, vnodes=vnodes).items():
        found[m].add(host)
    return {m: frozenset(held) for m, held in found.items()}


def standbys(
    hosts: Iterable[str], members: Iterable[str], *, c: float = CAPACITY, vnodes: int = VNODES
) -> dict[str, frozenset[str]]:
    """Member -> the hosts it would take if any one other member died: the connections it
    keeps warm (docs/scale.md, "Warm takeover"). Never a host of its own share."""
    fleet, live = Fleet.of(hosts), set(members)
    now = assign(fleet, live, c=c, vnodes=vnodes)
    extra: dict[str, set[str]] = {m: set() for m in live}
    for gone in live:
        after = assign(fleet, live - {gone}, c=c, vnodes=vnodes)
        for host, m in after.items():
            if now[host] != m:
                extra[m].add(host)
    return {m: frozenset(taken) for m, taken in extra.items()}


def standby(
    hosts: Iterable[str],
    members: Iterable[str],
    me: str,
    *,
    c: float = CAPACITY,
    vnodes: int = VNODES,
) -> frozenset[str]:
    """The hosts `me` would take if any one other member died (none when `me` is not a
    member: it is on no ring)."""
    return standbys(hosts, members, c=c, vnodes=vnodes).get(me, frozenset())


def connections(
    hosts: Iterable[str],
    members: Iterable[str],
    me: str,
    *,
    c: float = CAPACITY,
    vnodes: int = VNODES,
) -> frozenset[str]:
    """The hosts `me` keeps a connection to at rest (docs/scale.md, "Connections by
    share"): its own share, which it observes and acts on, and its standby set, so that
    taking over from any one other member needs no SSH handshake. Every host when it is
    the only member; none when it is not a member."""
    fleet, live = Fleet.of(hosts), set(members)
    mine = shares(fleet, live, c=c, vnodes=vnodes).get(me, frozenset())
    return mine | standby(fleet, live, me, c=c, vnodes=vnodes)


def idle(interval: float) -> float:
    """How long a connection outside a controller's `connections` may run nothing before
    it is closed: `IDLE`, or one resync `interval` if longer (a host a pass touches each
    resync keeps its connection)."""
    return max(IDLE, interval)
