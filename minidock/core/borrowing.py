"""Which observations written by the hosts' owners a deciding `watch` may use instead of
probing those hosts itself (docs/scale.md, "Observing by share").

Each `watch` that stands by probes its share of the hosts each round and writes what it
saw of each, under its owner key; the decider borrows those observations. It must never
borrow one made before an act on the host's containers: it would see a task missing that
it had just started, and start another. Every act is made under the writer lock, so an
observation stands only when its owner read etcd's revision, before it began to probe,
later than the end of every lock tenure that may have acted since (`Trust`):

- the decider's own tenures it knows: one that acted moves the bound of each host it
  acted on to a revision read after its last act (every host's, when the pass cannot
  say which hosts its acts touched); one that did nothing leaves it;
- another writer's tenure (an operator's command, cron's reconcile, a killed decider
  before this one) is seen from the lock's tenure key (store.etcd.EtcdWriter.tenure): when
  the tenure before the decider's is not its own last, anything may have been done, so
  the bound moves to the decider's own tenure, and its first pass probes every host;
- unless that tenure was a decider's that handed its bound down (`Handed`): each deciding
  tenure's last commit, made after its last act, carries the bound it ended with, so a
  `watch` taking over from one killed between passes, or after one that stopped, goes on
  from that bound (`Trust.inherit`) and borrows at once what the owners wrote since. One
  killed mid-pass wrote none for its tenure: the heir's bound is its own tenure.

A written observation also stands only for the owner it was written by, under the owner
key that owner holds now (a host that changed hands is the new owner's to write), and
when the owner has probed its whole share since (its member key's round revision, or the
observation's own when newer): a probe that failed deletes the observation, so a host
whose last probe failed is always probed by the decider itself. And only while that
owner's rounds advance (`advancing`): an owner alive but stuck (its lease kept, its
probes hung) is passed over after three of its resyncs and a margin, as a stalled
decider is (core.deciding), and its hosts are probed by the decider again.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from minidock.core.deciding import STALL_MARGIN
from minidock.core.handover import OwnerKey
from minidock.model import HostObservation

__all__ = [
    "Handed",
    "RoundSeen",
    "ShardTable",
    "Trust",
    "Written",
    "advancing",
    "borrowable",
    "orderable",
    "patience",
]


@dataclass(frozen=True)
class Written:
    """A host's observation as an owner wrote it: by which member, under which owner key
    (its create revision), and the revision its owner read before the probe began."""

    writer: str
    owner: int
    revision: int
    observation: HostObservation


@dataclass(frozen=True)
class ShardTable:
    """What the owners wrote of one cluster's hosts, read at one etcd revision: the owner
    keys, each live member's last whole round over its share (the revision it read before
    the round's probes began), and the written observations."""

    owners: Mapping[str, OwnerKey]
    rounds: Mapping[str, int]
    written: Mapping[str, Written]
    intervals: Mapping[str, float] = field(default_factory=dict)  # each member's resync


@dataclass(frozen=True)
class Handed:
    """The bound a deciding tenure hands down with its last commit (store.handed): the
    tenure, its bound as that tenure began (`Trust.took`'s), and what its pass acted on
    (`hosts` None: any host). The commit's own revision, read after the tenure's last act,
    is the bound of what it acted on."""

    tenure: int
    since: int
    acted_on: Mapping[str, int]
    acted: bool
    hosts: frozenset[str] | None


@dataclass
class Trust:
    """A decider's bound on borrowed observations for one cluster: `since` is the etcd
    revision after which an observation reflects every act any lock tenure made (0: no
    tenure known yet, nothing is borrowed), and `acted_on` each host's own, later bound:
    the revision after the decider's last pass that acted on that host."""

    since: int = 0
    tenure: int = 0  # the decider's last tenure of the lock
    ended: bool = False  # that tenure's acts are within the bounds
    acted_on: dict[str, int] = field(default_factory=dict)  # host -> its bound, past `since`

    def took(self, tenure: int, before: int) -> None:
        """The decider holds the lock from revision `tenure`; `before` is the tenure
        before it. Unless that was the decider's own, ended as `left` said, another writer
        may have acted anywhere: nothing observed before now is borrowed."""
        if not self.continues(before):
            self.since = max(self.since, tenure)
            self.acted_on = {h: r for h, r in self.acted_on.items() if r > self.since}
        self.tenure, self.ended = tenure, False

    def continues(self, before: int) -> bool:
        """Whether the tenure before the next is this decider's own, ended as told: then
        nobody held the lock between, and the bound stands."""
        return self.ended and self.tenure != 0 and before == self.tenure

    def handing(self, acted: bool, hosts: Set[str] | None) -> Handed:
        """What this tenure hands down as it ends, having `acted` (on `hosts`)."""
        kept = None if hosts is None else frozenset(hosts)
        return Handed(self.tenure, self.since, dict(self.acted_on), acted, kept)

    def inherit(self, handed: Handed | None, revision: int, before: int) -> None:
        """Take over the bound `handed` down at `revision` by the tenure `before` the next
        (another `watch`'s, ended between passes): as if this decider had made that tenure
        itself. A record of any other tenure (one cut off before its last commit, an
        operator's in between) is not this bound: `took` then moves it to the new tenure."""
        if handed is None or handed.tenure != before or before == 0 or handed.since == 0:
            return
        self.since, self.acted_on = handed.since, dict(handed.acted_on)
        self.tenure, self.ended = handed.tenure, False
        self.left(handed.acted, revision, handed.hosts)

    def left(self, acted: bool, revision: int, hosts: Set[str] | None = None) -> None:
        """The decider's tenure ended; `acted`: its pass did something (then `revision`
        was read after its last act), to `hosts` only (None: to any host)."""
        if acted and hosts is None:
            self.since = max(self.since, revision)
            self.acted_on = {h: r for h, r in self.acted_on.items() if r > self.since}
        elif acted:
            for host in hosts or ():
                self.acted_on[host] = max(self.acted_on.get(host, 0), revision)
        self.ended = True

    def stands(self, written: Written, round_revision: int, host: str = "") -> bool:
        """Whether an observation of `host`, confirmed by its owner's round read at
        `round_revision`, was made after every act this bound knows of."""
        if self.since == 0 or self.tenure == 0:  # no tenure known, or none held now
            return False
        bound = max(self.since, self.acted_on.get(host, 0))
        return max(written.revision, round_revision) > bound


def borrowable(
    table: ShardTable, me: str, trust: Trust, probe_anyway: Set[str] = frozenset()
) -> dict[str, HostObservation]:
    """The hosts whose written observation the decider `me` uses instead of a probe: each
    written by the member holding its owner key now (not `me`), under that key, that
    member's round or the observation itself later than `trust`'s bound, and the host
    not in `probe_anyway` (its event stream rang: a change the owner may not have seen)."""
    found: dict[str, HostObservation] = {}
    for host, written in table.written.items():
        owner = table.owners.get(host)
        if owner is None or owner.controller == me or host in probe_anyway:
            continue
        if (written.writer, written.owner) != (owner.controller, owner.created):
            continue
        confirmed = table.rounds.get(written.writer)
        if confirmed is None or not written.observation.ok:
            continue
        if trust.stands(written, confirmed, host):
            found[host] = written.observation
    return found


@dataclass(frozen=True)
class RoundSeen:
    """A member's round revision as the decider last saw it change, and when (the
    decider's own monotonic clock: no two machines' clocks are compared)."""

    revision: int
    since: float


def advancing(
    seen: Mapping[str, RoundSeen], table: ShardTable, now: float
) -> tuple[dict[str, RoundSeen], dict[str, int]]:
    """`seen` after reading `table` at `now` (a member whose round changed, or that is new,
    is seen advancing from now; members gone are forgotten), and the rounds of the
    members whose rounds advanced within three of their resyncs and a margin: the only
    ones borrowed from."""
    after: dict[str, RoundSeen] = {}
    fresh: dict[str, int] = {}
    for member, revision in table.rounds.items():
        was = seen.get(member)
        after[member] = was if was and was.revision == revision else RoundSeen(revision, now)
        if now - after[member].since <= patience(table.intervals.get(member, 0.0)):
            fresh[member] = revision
    return after, fresh


def patience(interval: float) -> float:
    """How long an owner whose resync is `interval` may go without a round (or without
    reporting the acts it was ordered) before it counts as stuck: three of its resyncs
    and a margin, as a stalled decider is judged (core.deciding)."""
    return 3 * interval + STALL_MARGIN


def orderable(
    owners: Mapping[str, OwnerKey], me: str, fresh: Mapping[str, int]
) -> dict[str, OwnerKey]:
    """The hosts whose task verbs the decider `me` hands to their owners (acting by
    share): those owned by another member whose rounds advance (`fresh`, `advancing`'s):
    the owners it borrows from."""
    return {h: k for h, k in owners.items() if k.controller != me and k.controller in fresh}
