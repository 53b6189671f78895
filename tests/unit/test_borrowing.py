"""Which observations written by the hosts' owners a deciding `watch` borrows instead of
probing (minidock/core/borrowing.py, docs/scale.md "Observing by share"): each rule by
example, then the rule as a stateful property under random interleavings.

The property (`Borrowing`) models etcd's revision, the writer lock's tenures, the owner
keys (hosts changing hands), the owners' rounds (begun at a revision read, each host
probed at some later rule, what changed written compared on its owner key, a failed probe
deleting it, the round published then or at a later beat) and acts on the hosts, made by
the decider's passes (whose end is told, or not, or whose process is killed) and by
another writer it is not told of. A deciding tenure's last commit hands its bound down
(`Handed`, after its acts), unless its process is killed before it; the next decider
process (after a kill, or a handover between passes) goes on from that bound when it is
the tenure before its own. Each observation carries the serial of the last act on its host
when it was probed. At every decider pass's start: no borrowed observation was made before
an act on its host. At `quiet` (a rule): after a pass that did not act and a whole round
of every owner, every host another member owns is borrowed; and after a handover between
passes the new decider borrows at once. Bounds broken on purpose show the checker finds
what it is for.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from minidock.core.borrowing import Handed, ShardTable, Trust, Written, borrowable
from minidock.core.handover import OwnerKey
from minidock.model import Container, HostObservation
from tests.etcd_model import EtcdModel

ME = "d"  # the deciding watch


def seen(host: str, act: int = 0) -> HostObservation:
    """An answered probe of `host`; `act`: the serial of the last act on it then, carried
    as its one container's spec."""
    c = Container(
        id=f"{host}-{act}",
        name="web.1.t",
        host=host,
        cluster="shop",
        service="web",
        slot=1,
        task="t",
        spec=f"act {act}",
        image="web:1",
        state="running",
    )
    return HostObservation(host, ok=True, containers=(c,))


def reflects(observation: HostObservation) -> int:
    """The act an observation was made after (`seen`'s `act`)."""
    return int(observation.containers[0].spec.removeprefix("act "))


def table(
    written: dict[str, tuple[str, int, int]],
    rounds: dict[str, int],
    owners: dict[str, tuple[str, int]] | None = None,
) -> ShardTable:
    """`written`: host -> (writer, owner key's create revision, revision); the owner keys
    are the writers' unless `owners` says otherwise."""
    keys = {h: (w, created) for h, (w, created, _) in written.items()} if owners is None else owners
    return ShardTable(
        owners={h: OwnerKey(c, created) for h, (c, created) in keys.items()},
        rounds=rounds,
        written={h: Written(w, c, r, seen(h)) for h, (w, c, r) in written.items()},
    )


def trusting(since: int) -> Trust:
    """A decider's bound at `since`: its first tenure there."""
    trust = Trust()
    trust.took(since, 0)
    return trust


def lent(
    written: dict[str, tuple[str, int, int]], rounds: dict[str, int], trust: Trust
) -> set[str]:
    return set(borrowable(table(written, rounds), ME, trust))


# -- Trust, by example ------------------------------------------------------------------------


def test_a_first_tenure_borrows_nothing_observed_before_it() -> None:
    trust = Trust()
    trust.took(10, 5)
    assert trust.since == 10
    written = {"h0": ("a", 1, 9), "h1": ("a", 1, 11)}
    assert lent(written, {"a": 9}, trust) == {"h1"}
    fresh = Trust()
    fresh.took(10, 0)  # nobody held the lock before: still nothing known of the past
    assert lent(written, {"a": 9}, fresh) == {"h1"}


def test_a_tenure_following_its_own_ended_one_keeps_the_bound() -> None:
    trust = trusting(10)
    trust.left(acted=False, revision=12)
    trust.took(15, before=10)
    assert trust.since == 10
    assert lent({"h0": ("a", 1, 11)}, {"a": 11}, trust) == {"h0"}


def test_another_writers_tenure_between_moves_the_bound_to_the_new_tenure() -> None:
    trust = trusting(10)
    trust.left(acted=False, revision=12)
    trust.took(20, before=15)  # an operator's command held the lock at 15
    assert trust.since == 20
    assert lent({"h0": ("a", 1, 18), "h1": ("a", 1, 21)}, {"a": 18}, trust) == {"h1"}


def test_a_pass_that_acted_moves_the_bound_to_its_end() -> None:
    trust = trusting(10)
    trust.left(acted=True, revision=14)
    assert trust.since == 14
    trust.took(16, before=10)
    assert trust.since == 14
    assert lent({"h0": ("a", 1, 13), "h1": ("a", 1, 15)}, {"a": 13}, trust) == {"h1"}


def test_a_pass_that_acted_on_named_hosts_moves_only_their_bound() -> None:
    trust = trusting(10)
    trust.left(acted=True, revision=14, hosts={"h0"})
    assert trust.since == 10
    trust.took(16, before=10)
    written = {"h0": ("a", 1, 13), "h1": ("a", 1, 13)}
    assert lent(written, {"a": 13}, trust) == {"h1"}  # h0's act came after its probe
    assert lent({"h0": ("a", 1, 15)}, {"a": 15}, trust) == {"h0"}
    trust.left(acted=True, revision=20)  # a pass that cannot name its hosts: all of them
    assert trust.since == 20
    assert trust.acted_on == {}


def test_a_pass_that_did_not_act_leaves_the_bound() -> None:
    trust = trusting(10)
    trust.left(acted=False, revision=14)
    assert trust.since == 10


def test_a_tenure_whose_end_was_never_told_counts_as_another_writers() -> None:
    """The pass may have acted (its end's revision was not read): the next tenure, though
    it follows the decider's own, starts the bound afresh."""
    trust = trusting(10)
    trust.took(16, before=10)
    assert trust.since == 16
    assert lent({"h0": ("a", 1, 15)}, {"a": 15}, trust) == set()


def test_a_handed_down_bound_of_the_tenure_before_is_taken_over() -> None:
    """Another `watch` ended its tenure at 20 having acted on h0, and handed its bound
    down at 25: the next decider goes on from it, as if it had made that tenure itself."""
    trust = Trust()
    trust.inherit(Handed(20, 12, {}, True, frozenset({"h0"})), 25, before=20)
    trust.took(30, 20)
    assert (trust.since, trust.acted_on) == (12, {"h0": 25})
    written = {"h0": ("a", 1, 24), "h1": ("a", 1, 13), "h2": ("a", 1, 11)}
    assert lent(written, {"a": 0}, trust) == {"h1"}


def test_a_bound_handed_down_by_another_tenure_is_not_taken() -> None:
    """The record is of tenure 20, but the tenure before is 22 (a decider killed mid-pass
    before its last commit, or an operator's command): the new tenure is the bound."""
    trust = Trust()
    trust.inherit(Handed(20, 12, {}, False, frozenset()), 21, before=22)
    trust.took(30, 22)
    assert trust.since == 30


def test_a_handed_down_pass_that_acted_anywhere_moves_the_whole_bound() -> None:
    trust = Trust()
    trust.inherit(Handed(20, 12, {"h1": 15}, True, None), 25, before=20)
    trust.took(30, 20)
    assert (trust.since, trust.acted_on) == (25, {})


def test_what_a_tenure_hands_down_is_its_bound_and_its_acts() -> None:
    trust = trusting(10)
    trust.left(True, 14, {"h0"})
    trust.took(16, 10)
    assert trust.handing(True, {"h1"}) == Handed(16, 10, {"h0": 14}, True, frozenset({"h1"}))


def test_no_tenure_borrows_nothing() -> None:
    """Tenure 0: a store that is not the lock holder's on etcd."""
    written = {"h0": ("a", 1, 50)}
    trust = Trust()
    assert lent(written, {"a": 50}, trust) == set()
    trust.took(0, 0)
    assert lent(written, {"a": 50}, trust) == set()
    trust = trusting(10)
    assert lent(written, {"a": 50}, trust) == {"h0"}
    trust.took(0, 0)  # the lock no longer held
    assert lent(written, {"a": 50}, trust) == set()


# -- borrowable, by example -------------------------------------------------------------------


def test_an_observation_stands_only_for_the_member_holding_its_owner_key_now() -> None:
    written = {"h0": ("a", 5, 20), "h1": ("a", 6, 20), "h2": ("a", 7, 20)}
    owners = {"h0": ("a", 5), "h1": ("b", 9), "h2": ("a", 8)}  # h1 to b; h2 taken afresh
    found = borrowable(table(written, {"a": 20, "b": 20}, owners), ME, trusting(10))
    assert set(found) == {"h0"}


def test_a_host_without_an_owner_key_is_not_borrowed() -> None:
    shard = table({"h0": ("a", 5, 20)}, {"a": 20}, owners={})
    assert borrowable(shard, ME, trusting(10)) == {}


def test_what_the_decider_wrote_itself_is_not_borrowed() -> None:
    written = {"h0": (ME, 5, 20), "h1": ("a", 5, 20)}
    assert lent(written, {ME: 20, "a": 20}, trusting(10)) == {"h1"}


def test_a_host_to_probe_anyway_is_not_borrowed() -> None:
    shard = table({"h0": ("a", 5, 20), "h1": ("a", 5, 20)}, {"a": 20})
    assert set(borrowable(shard, ME, trusting(10), probe_anyway={"h0"})) == {"h1"}


def test_a_member_with_no_whole_round_lends_nothing() -> None:
    written = {"h0": ("a", 5, 20), "h1": ("b", 5, 20)}
    assert lent(written, {"b": 20}, trusting(10)) == {"h1"}


def test_a_failed_probe_is_not_borrowed() -> None:
    down = HostObservation("h0", ok=False, error="no route to host")
    shard = ShardTable(
        owners={"h0": OwnerKey("a", 5)},
        rounds={"a": 20},
        written={"h0": Written("a", 5, 20, down)},
    )
    assert borrowable(shard, ME, trusting(10)) == {}


def test_the_later_of_the_observation_and_its_owners_round_is_compared() -> None:
    """An observation unchanged since it was written stands for the owner's later rounds,
    which found it the same; a round older than the observation confirms it no less."""
    trust = trusting(10)
    assert lent({"h0": ("a", 5, 5)}, {"a": 12}, trust) == {"h0"}  # the round's
    assert lent({"h0": ("a", 5, 12)}, {"a": 5}, trust) == {"h0"}  # its own
    assert lent({"h0": ("a", 5, 5)}, {"a": 9}, trust) == set()  # both older
    assert lent({"h0": ("a", 5, 10)}, {"a": 10}, trust) == set()  # read at the bound itself


# -- the model: etcd's revision, the lock, the owners, the acts --------------------------------

HOSTS = ("h0", "h1")
MEMBERS = ("a", "b", ME)  # the decider owns a share too: it probes that itself


@dataclass
class Round:
    """An owner's round under way: the revision read as it began, the hosts it owned then
    (host -> its owner key's create revision), what each probe found (None: failed)."""

    revision: int
    owned: dict[str, int]
    probed: dict[str, HostObservation | None] = field(default_factory=dict)

    def next(self) -> str | None:
        return next((h for h in sorted(self.owned) if h not in self.probed), None)


@dataclass
class Owner:
    """One member as an owner: its last whole round (published at its next beat), what it
    last wrote of each host ((owner key, act), None: deleted), its round under way."""

    whole: int | None = None
    wrote: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    round: Round | None = None


class Fleet(EtcdModel):
    """etcd's revision (every write moves it; an act may write nothing), the lock's last
    tenure, the owner keys, the written observations and the published rounds; each host's
    last act (a serial of all acts, in the order made)."""

    def __init__(self) -> None:
        super().__init__()
        self.acts = 0
        self.last_act = dict.fromkeys(HOSTS, 0)
        self.members = {m: Owner() for m in MEMBERS}

    def release(self) -> None:
        """The lock key deleted (or gone with a killed holder's lease)."""
        self.write()

    def act(self, host: str, writes: bool) -> None:
        self.acts += 1
        self.last_act[host] = self.acts
        if writes:
            self.write()

    def begin(self, member: str) -> None:
        owned = {h: k.created for h, k in self.owners.items() if k.controller == member}
        self.members[member].round = Round(self.revision, owned)

    def probe(self, member: str, fails: bool) -> None:
        r = self.members[member].round
        assert r is not None
        host = r.next()
        assert host is not None
        r.probed[host] = None if fails else seen(host, self.last_act[host])

    def probe_rest(self, member: str) -> None:
        """Every host of the member's round not probed yet, each answered."""
        r = self.members[member].round
        while r is not None and r.next() is not None:
            self.probe(member, fails=False)

    def finish(self, member: str) -> None:
        """What changed is written, each compared on its owner key (a host that changed
        hands meanwhile is not written, and forgotten); the round is whole."""
        owner = self.members[member]
        r = owner.round
        assert r is not None
        assert r.next() is None
        for host, created in sorted(r.owned.items()):
            found = r.probed[host]
            value = None if found is None else (created, reflects(found))
            if host in owner.wrote and owner.wrote[host] == value:
                continue
            if self.owners.get(host) != OwnerKey(member, created):
                owner.wrote.pop(host, None)
                continue
            if found is None:
                self.written.pop(host, None)
            else:
                self.written[host] = Written(member, created, r.revision, found)
            owner.wrote[host] = value
            self.write()
        owner.whole, owner.round = r.revision, None

    def beat(self, member: str) -> None:
        whole = self.members[member].whole
        if whole is not None:
            self.rounds[member] = whole
            self.write()

    def table(self) -> ShardTable:
        return ShardTable(dict(self.owners), dict(self.rounds), dict(self.written))


# a tenure's end: its last commit made (handing its bound down) and told; made but the
# revision after it not read; not made (etcd away) and not told; its process killed before
# it; made, then the process gone (killed between passes, or stopped: another decides next)
ENDS = st.sampled_from(("left", "left", "untold", "unwritten", "killed", "handed"))


class Borrowing(RuleBasedStateMachine):
    """The rule under random interleavings. `TRUST` is broken on purpose by the tests
    below: the checker must then find a borrowed observation made before an act. A tenure
    of the lock is one rule (`whole_pass`) or several (taken, each act, released), the
    owners' rounds running between them."""

    TRUST: type[Trust] = Trust

    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet()
        self.trust = self.TRUST()
        self.holder: str | None = None  # "decider", "other": the lock's holder now
        self.acted = False  # the decider's pass did something to a host
        self.acted_on: set[str] = set()  # the hosts it did something to
        self.says_hosts = True  # its end names those hosts (or, drawn, says "any host")
        self.handed: tuple[Handed, int] | None = None  # PREFIX/handed and its revision

    @initialize(owners=st.lists(st.sampled_from(MEMBERS), min_size=2, max_size=2))
    def start(self, owners: list[str]) -> None:
        for host, member in zip(HOSTS, owners, strict=True):
            self.fleet.hand(host, member)

    def lend(self, probe_anyway: frozenset[str] = frozenset()) -> dict[str, HostObservation]:
        """A pass's start: the lock taken, what it borrows, each made after the last act."""
        tenure, before = self.fleet.lock()
        if not self.trust.continues(before):
            self.trust.inherit(*(self.handed or (None, 0)), before=before)
        self.trust.took(tenure, before)
        self.holder, self.acted = "decider", False
        self.acted_on = set()
        found = borrowable(self.fleet.table(), ME, self.trust, probe_anyway)
        for host, observation in found.items():
            last = self.fleet.last_act[host]
            assert reflects(observation) == last, f"{host}: borrowed before act {last}"
        return found

    def end(self, how: str = "left") -> None:
        """The tenure ends: a pass's end told (the revision read after its last act), or
        not (etcd did not answer), or its process killed (the next pass is a new one's);
        then the lock key goes."""
        if self.holder == "decider":
            hosts = frozenset(self.acted_on) if self.says_hosts else None
            if how not in ("killed", "unwritten"):  # its last commit, after its acts
                self.handed = (self.trust.handing(self.acted, hosts), self.fleet.write())
            if how == "left":
                self.trust.left(self.acted, self.fleet.revision, hosts)
            elif how in ("killed", "handed"):
                self.trust = self.TRUST()
        self.fleet.release()
        self.holder = None

    @precondition(lambda self: self.holder is None)
    @rule(probe_anyway=st.frozensets(st.sampled_from(HOSTS), max_size=1))
    def decide(self, probe_anyway: frozenset[str]) -> None:
        """The decider takes the lock for a pass and borrows."""
        self.lend(probe_anyway)

    @precondition(lambda self: self.holder is None)
    @rule(
        acts=st.lists(st.tuples(st.sampled_from(HOSTS), st.booleans()), max_size=2),
        how=ENDS,
    )
    def whole_pass(self, acts: list[tuple[str, bool]], how: str) -> None:
        """A pass from its start to its end, between two rules of the owners."""
        self.lend()
        for host, writes in acts:
            self.act(host, writes)
        self.end(how)

    @precondition(lambda self: self.holder is None)
    @rule()
    def another_writer(self) -> None:
        """An operator's command takes the lock: the decider is not told."""
        self.fleet.lock()
        self.holder = "other"

    @precondition(lambda self: self.holder is not None)
    @rule(host=st.sampled_from(HOSTS), writes=st.booleans())
    def act(self, host: str, writes: bool) -> None:
        """The holder acts on a host (writing to etcd as it does, or not: a bound read
        after it may be the very revision an owner read before its probe)."""
        self.fleet.act(host, writes)
        self.acted = True
        self.acted_on.add(host)

    @rule(says=st.booleans())
    def hosts_said(self, says: bool) -> None:
        """Whether the decider's passes name the hosts they acted on (usecases.passes
        `acted_on`) or cannot (a volume move's step: every host's bound moves)."""
        self.says_hosts = says

    @precondition(lambda self: self.holder is not None)
    @rule(how=ENDS)
    def release(self, how: str) -> None:
        self.end(how)

    @precondition(lambda self: any(o.round is None for o in self.fleet.members.values()))
    @rule(i=st.integers(0, 2), probes=st.booleans())
    def begin_round(self, i: int, probes: bool) -> None:
        """An owner reads the revision and its share; its probes follow, one a rule, or
        (`probes`) every one at once, each answered."""
        idle = [m for m, o in self.fleet.members.items() if o.round is None]
        member = idle[i % len(idle)]
        self.fleet.begin(member)
        if probes:
            self.fleet.probe_rest(member)

    def probing(self) -> list[str]:
        return [m for m, o in self.fleet.members.items() if o.round is not None and o.round.next()]

    @precondition(lambda self: bool(self.probing()))
    @rule(i=st.integers(0, 2), fails=st.booleans())
    def probe(self, i: int, fails: bool) -> None:
        found = self.probing()
        self.fleet.probe(found[i % len(found)], fails)

    def probed(self) -> list[str]:
        return [
            m
            for m, o in self.fleet.members.items()
            if o.round is not None and o.round.next() is None
        ]

    @precondition(lambda self: bool(self.probed()))
    @rule(i=st.integers(0, 2), beat=st.booleans())
    def finish_round(self, i: int, beat: bool) -> None:
        """An owner's round written; its member key rewritten with it now, or later."""
        found = self.probed()
        self.fleet.finish(found[i % len(found)])
        if beat:
            self.fleet.beat(found[i % len(found)])

    @rule(member=st.sampled_from(MEMBERS))
    def beat(self, member: str) -> None:
        """The member key rewritten with its last whole round."""
        self.fleet.beat(member)

    @rule(host=st.sampled_from(HOSTS), to=st.sampled_from((*MEMBERS, None)))
    def hand(self, host: str, to: str | None) -> None:
        """A host changes hands (or is left with no owner for a while)."""
        self.fleet.hand(host, to)

    @rule()
    def quiet(self) -> None:
        """The tenure and the rounds under way end, a pass does nothing, every owner
        probes its whole share and beats: the next pass borrows every host another member
        holds."""
        f = self.fleet
        if self.holder is not None:
            self.end()
        for member, owner in f.members.items():
            if owner.round is not None:
                f.probe_rest(member)
                f.finish(member)
                f.beat(member)
        self.lend()
        self.end()
        for member in MEMBERS:
            f.begin(member)
            f.probe_rest(member)
            f.finish(member)
            f.beat(member)
        found = self.lend()
        self.end()
        others = {h for h, k in f.owners.items() if k.controller != ME}
        assert set(found) == others, f"at rest, {sorted(others - set(found))} not borrowed"
        self.trust = self.TRUST()  # another watch decides next: it goes on from the bound
        found = self.lend()
        self.end()
        assert set(found) == others, f"after a handover, {sorted(others - set(found))} not"


SETTINGS = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HypothesisHealth.too_slow],
)
Borrowing.TestCase.settings = SETTINGS
test_borrowing = Borrowing.TestCase


# -- the checker is not vacuous -----------------------------------------------------------------


class Unaware(Trust):
    """Broken on purpose: another writer's tenure between two of the decider's goes
    unseen (`before` ignored)."""

    def took(self, tenure: int, before: int) -> None:
        super().took(tenure, self.tenure)


class Forgetful(Trust):
    """Broken on purpose: a pass that acted leaves the bound where it was."""

    def left(self, acted: bool, revision: int, hosts: Set[str] | None = None) -> None:
        super().left(False, revision, hosts)


class Blind(Trust):
    """Broken on purpose: each host's own bound (its acts) is not looked at."""

    def stands(self, written: Written, round_revision: int, host: str = "") -> bool:
        return super().stands(written, round_revision)


class Sweeping(Trust):
    """Broken on purpose: a pass's end moves only the first host's bound it names."""

    def left(self, acted: bool, revision: int, hosts: Set[str] | None = None) -> None:
        super().left(acted, revision, None if hosts is None else frozenset(sorted(hosts)[:1]))


class Credulous(Trust):
    """Broken on purpose: a pass whose end was never told counts as ended."""

    def took(self, tenure: int, before: int) -> None:
        self.ended = True
        super().took(tenure, before)


class Gullible(Trust):
    """Broken on purpose: a bound handed down by any tenure is taken over, not only by the
    tenure just before (a decider killed mid-pass left the one before its own)."""

    def inherit(self, handed: Handed | None, revision: int, before: int) -> None:
        if handed is not None:
            handed = replace(handed, tenure=before)
        super().inherit(handed, revision, before)


class Heedless(Trust):
    """Broken on purpose: a handed-down bound is taken without what its pass acted on."""

    def inherit(self, handed: Handed | None, revision: int, before: int) -> None:
        if handed is not None:
            handed = Handed(handed.tenure, handed.since, handed.acted_on, False, frozenset())
        super().inherit(handed, revision, before)


@pytest.mark.parametrize(
    "broken", [Unaware, Forgetful, Credulous, Blind, Sweeping, Gullible, Heedless]
)
def test_the_property_finds_a_broken_bound(broken: type[Trust]) -> None:
    """The same search as `test_borrowing` finds an observation borrowed before an act.
    No example database (found afresh, not replayed) and no shrinking."""
    machine = type(f"With{broken.__name__}", (Borrowing,), {"TRUST": broken})
    search = settings(
        SETTINGS,
        max_examples=1000,
        database=None,
        phases=[Phase.generate],
        print_blob=False,
        report_multiple_bugs=False,
    )
    with pytest.raises(AssertionError, match="borrowed before act"):
        run_state_machine_as_test(machine, settings=search)
