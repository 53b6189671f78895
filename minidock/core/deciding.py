"""Which `watch` makes a cluster's passes when several run on one etcd state (docs/ha.md,
"One watch decides"): the most senior live member that covers the cluster, its seniority
its member key's create revision, as etcd's election recipe ranks candidates. The others
stand by (warm connections, no pass), unless the decider's passes stop advancing for
longer than it would ever go without one (`stalled_after`): then each tries the lock
again as before, so a decider that is alive but cannot pass never leaves a cluster
unworked. Every controller computes this alike from the member keys it reads; the lock
still guards every pass, so two that disagree for a round only take turns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Peer",
    "Progress",
    "decider",
    "deferring_to",
    "in_line",
    "progressed",
    "stalled_after",
]

STALL_MARGIN = 5.0  # seconds past three resyncs before a silent decider counts as stalled


@dataclass(frozen=True)
class Peer:
    """A live member as its key says: its seniority (the key's create revision), the
    cluster its passes cover ("" for every cluster), its resync and its passes so far."""

    id: str
    created: int
    cluster: str = ""
    interval: float = 0.0
    passes: int = 0

    def covers(self, cluster: str) -> bool:
        return self.cluster in ("", cluster)


@dataclass(frozen=True)
class Progress:
    """A peer's passes as this controller last saw them change, and when (its own
    monotonic clock: no two machines' clocks are compared); and how many peers were
    more senior than it then."""

    passes: int
    since: float
    seniors: int = 0


def stalled_after(peer: Peer) -> float:
    """Seconds without a new pass after which `peer` no longer counts as deciding: a
    resync makes a pass at least every `interval` (three of them, and a margin)."""
    return 3 * peer.interval + STALL_MARGIN


def progressed(
    seen: Mapping[str, Progress], peers: Iterable[Peer], now: float
) -> dict[str, Progress]:
    """`seen` after a read of the members at `now`: a peer whose passes changed (or that
    is new) is seen progressing from now, and so is one that moved up in seniority (a
    more senior peer left): a standby that becomes a decider has made no pass as one
    yet, and is given its whole stall time from the moment it may be the decider, not
    judged by the passes it did not make while it stood by. Peers that are gone are
    forgotten."""
    after: dict[str, Progress] = {}
    for rank, peer in enumerate(sorted(peers, key=lambda p: (p.created, p.id))):
        was = seen.get(peer.id)
        if was and was.passes == peer.passes and was.seniors <= rank:
            after[peer.id] = Progress(was.passes, was.since, rank)
        else:
            after[peer.id] = Progress(peer.passes, now, rank)
    return after


def decider(peers: Iterable[Peer], cluster: str) -> Peer | None:
    """The most senior peer covering `cluster` (None: no peer covers it)."""
    covering = [p for p in peers if p.covers(cluster)]
    return min(covering, key=lambda p: (p.created, p.id), default=None)


def in_line(me: str, peers: Iterable[Peer], cluster: str) -> bool:
    """Whether `me` makes `cluster`'s passes or would next (its heir: the decider of the
    peers without the decider): the watches whose pass after another writer's tenure
    probes every host, so they keep a connection to every host (docs/scale.md,
    "Connections by share")."""
    live = list(peers)
    first = decider(live, cluster)
    if first is None:
        return False
    second = decider([p for p in live if p.id != first.id], cluster)
    return me in (first.id, second.id if second is not None else first.id)


def deferring_to(
    me: str,
    peers: Iterable[Peer],
    cluster: str,
    seen: Mapping[str, Progress],
    now: float,
) -> Peer | None:
    """The peer this controller (`me`) leaves `cluster`'s passes to, or None: it passes
    itself (it is the decider, or nobody is, or the decider stalled). A controller not
    yet among the peers (before its first beat) is junior to every one of them."""
    chosen = decider(peers, cluster)
    if chosen is None or chosen.id == me:
        return None
    progress = seen.get(chosen.id)
    if progress is not None and now - progress.since > stalled_after(chosen):
        return None
    return chosen
