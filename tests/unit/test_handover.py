"""A host changes hands (minidock/core/handover.py, docs/scale.md "A host changes hands"):
each rule by example, then the protocol as a stateful property under random interleavings.

The property (`Handover`) models etcd (`Etcd`: leases, member keys, owner keys with their
create revisions; create-if-absent under a live lease, delete compared on the create
revision, a lease's keys gone with it at one revision) and 2 to 5 controllers at first, each
deciding by `steps` from its own view, stale until a rule refreshes it. Its rules: joins,
graceful leaves, deaths (SIGKILL: the lease expires at some later rule), pauses (the lease
may expire meanwhile), a view's members or owner keys read, one etcd step or a whole round,
commands started and ended. After every rule: no two controllers act on one host, and every
owner key names a controller whose lease is live. At `settle` (a rule, and the end of every
run): once every command ended, every dead lease expired and every live controller refreshed
and stepped until etcd stops changing, each host has one owner key, the ring's member's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from minidock.core.handover import Acknowledge, OwnerKey, Steps, View, steps
from minidock.core.ring import assign

HOSTS = tuple(f"h{i}" for i in range(4))


def view(
    me: str,
    wanted: dict[str, str],
    owners: dict[str, tuple[str, int]],
    inflight: Iterable[str] = (),
) -> View:
    keys = {h: OwnerKey(c, rev) for h, (c, rev) in owners.items()}
    return View(me, wanted, keys, frozenset(inflight))


# -- each rule, by example ----------------------------------------------------------------------


def test_a_host_the_ring_gives_me_with_my_key_is_acted_on() -> None:
    s = steps(view("a", {"h0": "a", "h1": "b"}, {"h0": ("a", 7), "h1": ("b", 8)}))
    assert s == Steps(act=frozenset({"h0"}), drain=frozenset(), acknowledge=(), take=frozenset())
    assert not s.writes


def test_a_host_the_ring_moved_away_is_drained_and_its_command_runs_on() -> None:
    s = steps(view("a", {"h0": "b"}, {"h0": ("a", 7)}, inflight={"h0"}))
    assert s.drain == {"h0"}
    assert s.act == frozenset()  # nothing new is started on it
    assert s.acknowledge == ()  # the key stays while the command is in flight


def test_a_drained_host_with_nothing_in_flight_is_acknowledged_on_my_revision() -> None:
    s = steps(view("a", {"h0": "b", "h1": "b"}, {"h0": ("a", 7), "h1": ("a", 9)}, {"h1"}))
    assert s.acknowledge == (Acknowledge("h0", 7),)
    assert s.drain == {"h0", "h1"}


def test_a_host_that_left_the_fleet_is_drained_and_acknowledged() -> None:
    s = steps(view("a", {}, {"h0": ("a", 7)}))
    assert s.acknowledge == (Acknowledge("h0", 7),)


def test_a_host_the_ring_gives_me_with_no_key_is_taken() -> None:
    s = steps(view("b", {"h0": "b", "h1": "b"}, {"h1": ("b", 3)}))
    assert s.take == {"h0"}
    assert s.act == {"h1"}  # not h0: only etcd's answer to the take makes it mine


def test_a_host_another_still_holds_is_waited_for() -> None:
    """The ring gives h0 to b, but a's key is there: b neither takes nor acts until a
    acknowledges (or a's lease goes with its keys)."""
    s = steps(view("b", {"h0": "b"}, {"h0": ("a", 7)}))
    assert s == Steps(frozenset(), frozenset(), (), frozenset())


def test_another_members_key_is_never_acknowledged() -> None:
    s = steps(view("b", {"h0": "c"}, {"h0": ("a", 7)}))
    assert s.acknowledge == ()
    assert s.drain == frozenset()


# -- the model: etcd and the controllers ---------------------------------------------------------


@functools.cache
def ring(members: frozenset[str]) -> dict[str, str]:
    """The ring over HOSTS (minidock.core.ring, what a controller computes from the member
    set it read); cached per member set, as the model asks it often."""
    return assign(HOSTS, members)


@dataclass(frozen=True)
class Key:
    controller: str
    created: int
    lease: int


@dataclass
class Etcd:
    """The keys the protocol uses, with etcd's semantics for them; every write a revision."""

    revision: int = 0
    leases: set[int] = field(default_factory=set)
    members: dict[str, int] = field(default_factory=dict)  # member key -> its lease
    owners: dict[str, Key] = field(default_factory=dict)
    granted: int = 0

    def grant(self, member: str) -> int:
        """A new lease, and the member key under it."""
        self.granted += 1
        self.revision += 1
        self.leases.add(self.granted)
        self.members[member] = self.granted
        return self.granted

    def leave(self, member: str) -> None:
        self.revision += 1
        del self.members[member]

    def revoke(self, lease: int) -> None:
        """The lease expires or is revoked: its member key and owner keys, at one revision."""
        self.revision += 1
        self.leases.discard(lease)
        self.members = {m: lz for m, lz in self.members.items() if lz != lease}
        self.owners = {h: k for h, k in self.owners.items() if k.lease != lease}

    def create(self, host: str, member: str, lease: int) -> OwnerKey | None:
        """Create-if-absent under a live lease; the key as it stands after (None: absent)."""
        if host not in self.owners and lease in self.leases:
            self.revision += 1
            self.owners[host] = Key(member, self.revision, lease)
        return self.read_owners().get(host)

    def delete(self, ack: Acknowledge) -> bool:
        """Delete compared on the create revision: a key created since is never deleted."""
        key = self.owners.get(ack.host)
        if key is None or key.created != ack.created:
            return False
        self.revision += 1
        del self.owners[ack.host]
        return True

    def read_members(self) -> frozenset[str]:
        return frozenset(self.members)

    def read_owners(self) -> dict[str, OwnerKey]:
        return {h: OwnerKey(k.controller, k.created) for h, k in self.owners.items()}


@dataclass
class Controller:
    """One controller's process and its view: the members and the owner keys as it last
    read them (its own writes' answers applied), the hosts its commands are running on."""

    name: str
    lease: int
    members: frozenset[str]
    owners: dict[str, OwnerKey]
    inflight: set[str] = field(default_factory=set)
    process: str = "running"  # running, paused, killed, gone (left: lease revoked)
    leaving: bool = False

    def view(self, drain: bool) -> View:
        """What it decides on; without `drain`, broken on purpose: it acknowledges as if
        nothing were in flight."""
        inflight = frozenset(self.inflight) if drain else frozenset()
        return View(self.name, ring(self.members), self.owners, inflight)


def sent(s: Steps) -> list[Acknowledge | str]:
    """What the steps ask etcd: the acknowledgements, then the takes (a host each)."""
    return [*s.acknowledge, *sorted(s.take)]


class Fleet:
    """etcd and the controllers on it: what each does, and what counts as acting. A
    controller acts on a host when it may start a command there (running, its view gives
    it `act`, its fence passes: the model's fence is "its lease is live") or has one in
    flight there while its lease is live. A command of a controller whose lease is gone
    may still be running (docs/scale.md's window of the deposed owner's last command):
    the model counts it no more, as the design does not."""

    def __init__(self, drain: bool = True, fence: bool = True) -> None:
        self.drain, self.fence = drain, fence
        self.etcd = Etcd()
        self.controllers: dict[str, Controller] = {}

    def spawn(self) -> None:
        """A controller starts: its lease and member key, then its first reads."""
        name = f"c{len(self.controllers)}"
        lease = self.etcd.grant(name)
        self.controllers[name] = Controller(
            name, lease, self.etcd.read_members(), self.etcd.read_owners()
        )

    def live(self, c: Controller) -> bool:
        return c.lease in self.etcd.leases

    def decide(self, c: Controller) -> Steps:
        return steps(c.view(self.drain))

    def starts(self, c: Controller) -> frozenset[str]:
        """The hosts it may start a command on now."""
        if c.process != "running" or not (self.live(c) or not self.fence):
            return frozenset()
        return self.decide(c).act

    def acting(self, c: Controller) -> frozenset[str]:
        return self.starts(c) | (frozenset(c.inflight) if self.live(c) else frozenset())

    def catch_up(self, c: Controller) -> None:
        """It reads the members and the owner keys, then sends every step it finds."""
        c.members = self.etcd.read_members()
        c.owners = self.etcd.read_owners()
        for step in sent(self.decide(c)):
            self.apply(c, step)

    def apply(self, c: Controller, step: Acknowledge | str) -> None:
        """One step sent to etcd (unfenced: etcd's own semantics must refuse a deposed
        controller's writes), and etcd's answer in the controller's view."""
        if isinstance(step, Acknowledge):
            if self.etcd.delete(step):
                del c.owners[step.host]
                return
            host = step.host
        else:
            host = step
            self.etcd.create(host, c.name, c.lease)
        found = self.etcd.read_owners().get(host)
        if found is None:
            c.owners.pop(host, None)
        else:
            c.owners[host] = found

    def settle(self) -> None:
        """Every command ends, the paused resume, the dead's leases expire; then every live
        controller reads and takes all its steps, round after round, until etcd stops
        changing."""
        for c in self.controllers.values():
            c.inflight.clear()
            if c.process == "paused":
                c.process = "running"
            if c.process == "killed" and self.live(c):
                self.etcd.revoke(c.lease)
        for _ in range(len(HOSTS) + 3):
            before = self.etcd.revision
            for c in self.working():
                self.catch_up(c)
            if self.etcd.revision == before:
                break
        else:
            raise AssertionError(f"etcd still changing: {self.etcd.owners}")

    def converged(self) -> None:
        """Each host has one owner key, its ring member's, and that member alone may act."""
        wanted = ring(self.etcd.read_members())
        assert {h: k.controller for h, k in self.etcd.owners.items()} == wanted
        for h in HOSTS:
            who = [c.name for c in self.controllers.values() if h in self.starts(c)]
            assert who == ([wanted[h]] if wanted else []), (h, who)

    def working(self) -> list[Controller]:
        """Running controllers whose lease is live."""
        return [c for c in self.controllers.values() if c.process == "running" and self.live(c)]

    def pick(self, i: int, ok: Callable[[Controller], bool]) -> Controller | None:
        found = [c for c in self.controllers.values() if ok(c)]
        return found[i % len(found)] if found else None


picks = st.integers(min_value=0, max_value=7)


def running(c: Controller) -> bool:
    return c.process == "running"


def alive(c: Controller) -> bool:
    """Its process runs, or is paused."""
    return c.process in ("running", "paused")


def stopped(c: Controller) -> bool:
    """Paused or killed: its lease is renewed no more."""
    return c.process in ("paused", "killed")


class Handover(RuleBasedStateMachine):
    """The protocol under random interleavings. `DRAIN` and `FENCE` break it on purpose
    (tests below): the checker must then find two controllers acting on one host. A rule
    runs only when some controller can take it; `i` picks one of those."""

    DRAIN = True
    FENCE = True

    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet(self.DRAIN, self.FENCE)

    def some(self, ok: Callable[[Controller], bool]) -> bool:
        return any(ok(c) for c in self.fleet.controllers.values())

    def one(self, i: int, ok: Callable[[Controller], bool]) -> Controller:
        c = self.fleet.pick(i, ok)
        assert c is not None
        return c

    def sends(self, c: Controller) -> bool:
        return running(c) and self.fleet.decide(c).writes

    def leaves(self, c: Controller) -> bool:
        return running(c) and not c.leaving and self.fleet.live(c)

    def revokes(self, c: Controller) -> bool:
        return running(c) and c.leaving and not c.inflight and self.fleet.live(c)

    def expires(self, c: Controller) -> bool:
        return stopped(c) and self.fleet.live(c)

    @initialize(n=st.integers(min_value=2, max_value=5))
    def start(self, n: int) -> None:
        """`n` controllers, settled: each host owned by its ring member."""
        for _ in range(n):
            self.fleet.spawn()
        self.fleet.settle()

    @precondition(lambda self: len(self.fleet.etcd.members) < 5 and len(self.fleet.controllers) < 9)
    @rule()
    def join(self) -> None:
        self.fleet.spawn()

    @precondition(lambda self: self.some(running))
    @rule(i=picks, owners=st.booleans())
    def read(self, i: int, owners: bool) -> None:
        """A running controller reads the members (its ring), or the owner keys."""
        c, etcd = self.one(i, running), self.fleet.etcd
        if owners:
            c.owners = etcd.read_owners()
        else:
            c.members = etcd.read_members()

    @precondition(lambda self: self.some(self.sends))
    @rule(i=picks, j=picks)
    def step(self, i: int, j: int) -> None:
        """One of a running controller's acknowledgements or takes, sent to etcd."""
        c = self.one(i, self.sends)
        found = sent(self.fleet.decide(c))
        self.fleet.apply(c, found[j % len(found)])

    @precondition(lambda self: self.some(running))
    @rule(i=picks)
    def catch_up(self, i: int) -> None:
        """A running controller's whole round: it reads both, then sends every step."""
        self.fleet.catch_up(self.one(i, running))

    @precondition(lambda self: self.some(self.fleet.starts))
    @rule(i=picks, j=picks)
    def start_command(self, i: int, j: int) -> None:
        """A command started on one host it may act on, or (j = 0) on each of them."""
        c = self.one(i, lambda c: bool(self.fleet.starts(c)))
        hosts = sorted(self.fleet.starts(c))
        c.inflight |= set(hosts) if j == 0 else {hosts[j % len(hosts)]}

    @precondition(lambda self: self.some(lambda c: bool(c.inflight)))
    @rule(i=picks, j=picks)
    def end_command(self, i: int, j: int) -> None:
        c = self.one(i, lambda c: bool(c.inflight))
        c.inflight.discard(sorted(c.inflight)[j % len(c.inflight)])

    @precondition(lambda self: self.some(alive))
    @rule(i=picks, kill=st.booleans())
    def stop(self, i: int, kill: bool) -> None:
        """SIGKILL: it never acts again, its lease (and keys) live on until `expire`. Or
        SIGSTOP: it starts and sends nothing, its commands run on. Either way it renews
        its lease no more."""
        c = self.one(i, alive)
        c.process = "killed" if kill or c.process == "paused" else "paused"

    @precondition(lambda self: self.some(lambda c: c.process == "paused"))
    @rule(i=picks)
    def resume(self, i: int) -> None:
        """It goes on from its view as it was: the fence alone stops it if its lease went."""
        self.one(i, lambda c: c.process == "paused").process = "running"

    @precondition(lambda self: self.some(self.expires))
    @rule(i=picks)
    def expire(self, i: int) -> None:
        """etcd expires the lease of a controller that stopped renewing it."""
        self.fleet.etcd.revoke(self.one(i, self.expires).lease)

    @precondition(lambda self: self.some(self.leaves))
    @rule(i=picks)
    def leave(self, i: int) -> None:
        """A graceful stop begins: its member key goes; it drains and acknowledges."""
        c = self.one(i, self.leaves)
        self.fleet.etcd.leave(c.name)
        c.leaving = True
        c.members = c.members - {c.name}

    @precondition(lambda self: self.some(self.revokes))
    @rule(i=picks)
    def revoke(self, i: int) -> None:
        """A graceful stop ends once its commands did: it revokes its lease (the keys it
        did not acknowledge yet go with it)."""
        c = self.one(i, self.revokes)
        self.fleet.etcd.revoke(c.lease)
        c.process = "gone"

    @rule()
    def settle(self) -> None:
        self.fleet.settle()
        if self.DRAIN and self.FENCE:  # broken on purpose, it need not converge
            self.fleet.converged()

    @invariant()
    def one_controller_acts_on_a_host(self) -> None:
        acting = {c.name: self.fleet.acting(c) for c in self.fleet.controllers.values()}
        for h in HOSTS:
            who = [name for name, hosts in acting.items() if h in hosts]
            assert len(who) <= 1, f"{h}: {who} act at once"

    @invariant()
    def owner_keys_are_live_controllers(self) -> None:
        f = self.fleet
        for h, key in f.etcd.owners.items():
            assert key.lease in f.etcd.leases, (h, key)
            assert f.controllers[key.controller].lease == key.lease, (h, key)

    def teardown(self) -> None:
        self.settle()


SETTINGS = settings(
    max_examples=1000,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HypothesisHealth.too_slow],
)
Handover.TestCase.settings = SETTINGS
test_handover = Handover.TestCase


# -- the checker is not vacuous -----------------------------------------------------------------


class WithoutDrain(Handover):
    """Broken on purpose: a host is acknowledged with its command still in flight."""

    DRAIN = False


class WithoutFence(Handover):
    """Broken on purpose: a controller that resumes after its lease expired acts on its
    stale view (no `store.fence()`)."""

    FENCE = False


@pytest.mark.parametrize("broken", [WithoutDrain, WithoutFence])
def test_the_property_finds_a_broken_protocol(broken: type[Handover]) -> None:
    """The same search as `test_handover` finds two controllers acting on one host. No
    example database (a failure is found afresh, not replayed) and no shrinking (the test
    wants a finding, not the smallest one: shrinking takes minutes)."""
    search = settings(
        SETTINGS,
        max_examples=1000,
        database=None,
        phases=[Phase.generate],
        print_blob=False,
        report_multiple_bugs=False,
    )
    with pytest.raises(AssertionError, match="act at once"):
        run_state_machine_as_test(broken, settings=search)


def test_an_id_kept_across_leases_would_act_beside_the_new_owner() -> None:
    """Why `me` names one lease (docs/scale.md): a controller cut off from etcd past its
    TTL loses its lease, its member key and its owner keys; another takes its hosts. Were
    it to take a new lease under its old id (as Membership.beat does today), its view
    would still read the old keys as its own and its fence would pass: two would act."""
    f = Fleet()
    f.spawn()
    f.spawn()
    f.settle()
    c0, c1 = f.controllers["c0"], f.controllers["c1"]
    held = f.starts(c0)
    assert held
    f.etcd.revoke(c0.lease)  # expired at etcd: its member key and owner keys go with it
    f.catch_up(c1)  # the ring is c1 alone now: it takes them
    assert held <= f.starts(c1)
    assert f.starts(c0) == frozenset()  # fenced: no live lease
    c0.lease = f.etcd.grant("c0")  # a new lease, the same id
    assert held <= f.starts(c0)  # the old keys read as its own, and the fence passes
    fresh = View("c0-2", ring(c0.members), c0.owners)  # an id of the new lease's own
    assert steps(fresh).act == frozenset()
