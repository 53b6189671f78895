"""Each `watch` holds its share of the owner keys (minidock.usecases.shares.Shares, issue 47):
the ring's map over the live members, reached by the handover's steps alone, each
controller acting on its own view, on real etcd members (tests/etcd.py). A join rebalances
with drains and takes, a leave or a death has the leaver's hosts taken by the others, and
at no read does a host have an owner that is not a live member."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from minidock.core.ring import IDLE, assign, connections
from minidock.ssh import Result
from minidock.store.etcd_client import EtcdClient, rpc
from minidock.store.location import EtcdURL
from minidock.store.members import Membership, handover_news, read_roster
from minidock.store.owners import OwnerKeys, read_members, read_owners
from minidock.usecases import PassSkipped
from minidock.usecases.roster import Heartbeat
from minidock.usecases.shares import Shares, fleet_names
from tests.fakes import FakeExecutor
from tests.unit.test_ha import TTL

ROOT = Path(__file__).parents[2]
HOSTS = frozenset(f"web-{i}" for i in range(40))

# A controller in a process of its own that holds its share of HOSTS, then sleeps: killed
# with -9, its lease is not renewed and its keys go with it.
_HOLDER = """
import sys, time
from minidock.store import parse_location
from minidock.store.members import Membership
from minidock.usecases.shares import Shares
member = Membership(parse_location(sys.argv[1]))
member.beat()
hosts = frozenset(f"web-{i}" for i in range(40))
held = Shares(member).hold(hosts)
print(member.member.id, held.owned, flush=True)
time.sleep(3600)
"""


class Controller:
    """A member and its shares, held as a `watch` holds them after each round."""

    def __init__(self, url: EtcdURL) -> None:
        self.member = Membership(url)
        self.member.beat()
        self.shares = Shares(self.member)

    @property
    def id(self) -> str:
        return self.member.member.id

    def hold(self, hosts: frozenset[str] = HOSTS) -> None:
        self.member.beat()
        self.shares.hold(hosts)


def owners_now(url: EtcdURL, client: EtcdClient) -> dict[str, str]:
    """Host -> owner, checked: every owner is a live member."""
    owners = {h: key.controller for h, key in read_owners(url, client).items()}
    live = read_members(url, client)
    assert set(owners.values()) <= live, "a host is owned by a controller that is gone"
    return owners


def settle(url: EtcdURL, client: EtcdClient, controllers: list[Controller]) -> int:
    """Every controller holds in turn until a whole turn changes no key; the turns taken.
    At every read in between, no owner is a dead member."""
    before: dict[str, str] | None = None
    for turn in range(1, 6):
        for c in controllers:
            c.hold()
            owners_now(url, client)
        after = owners_now(url, client)
        if after == before:
            return turn
        before = after
    raise AssertionError(f"the shares did not settle in 5 turns: {before}")


def test_three_controllers_hold_exactly_the_rings_shares_and_a_fourth_joining_rebalances(
    url: EtcdURL, client: EtcdClient
) -> None:
    three = [Controller(url) for _ in range(3)]
    everyone = list(three)
    try:
        settle(url, client, three)
        ring = assign(HOSTS, [c.id for c in three])
        assert owners_now(url, client) == ring  # all 40 hosts, each where the ring puts it
        owned = {m.id: m.owned for m in read_roster(url).members}
        assert owned == {c.id: sum(1 for m in ring.values() if m == c.id) for c in three}

        fourth = Controller(url)
        everyone.append(fourth)
        fourth.hold()  # what the ring gives it is held by others: it takes none yet
        assert fourth.id not in owners_now(url, client).values()
        turns = settle(url, client, everyone)
        joined = assign(HOSTS, [c.id for c in everyone])
        assert owners_now(url, client) == joined
        assert turns <= 3  # the others give up, the newcomer takes, a turn that changes none
        # Every host the newcomer holds came from another, through a drain and a take;
        # with 40 hosts the bound (17 a member for three, 13 for four) may move a few
        # more between the others, each by the same steps.
        gained = {h for h in HOSTS if joined[h] == fourth.id}
        assert gained
        assert gained <= {h for h in HOSTS if ring[h] != joined[h]}
    finally:
        for c in everyone:
            c.member.leave()
    assert owners_now(url, client) == {}


def test_a_controller_that_leaves_has_only_its_hosts_taken_by_the_others(
    url: EtcdURL, client: EtcdClient
) -> None:
    controllers = [Controller(url) for _ in range(3)]
    try:
        settle(url, client, controllers)
        before = owners_now(url, client)
        leaver = controllers.pop()
        leaver.member.leave()  # its lease revoked: its keys go at once
        assert leaver.id not in owners_now(url, client).values()
        settle(url, client, controllers)
        after = owners_now(url, client)
        assert after == assign(HOSTS, [c.id for c in controllers])
        # The leaver's hosts all changed hands (the ring alone would move no other; with
        # 40 hosts the bound may move one or two more between the others, by the steps).
        assert {h for h in HOSTS if before[h] == leaver.id} <= {
            h for h in HOSTS if before[h] != after[h]
        }
    finally:
        for c in controllers:
            c.member.leave()


def test_a_killed_controllers_share_is_taken_once_its_lease_is_gone(
    etcd_url: str, url: EtcdURL, client: EtcdClient
) -> None:
    survivor = Controller(url)
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, etcd_url], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert child.stdout is not None
        dead_id, held = child.stdout.readline().split()
        survivor.hold()  # the child's share is its own: the survivor takes only the rest
        owners = owners_now(url, client)
        assert sum(1 for m in owners.values() if m == dead_id) == int(held) > 0
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + TTL + 5  # the rest of its lease and etcd's next check
        while dead_id in read_members(url, client) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivor.hold()
        assert owners_now(url, client) == dict.fromkeys(HOSTS, survivor.id)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        survivor.member.leave()


def test_a_watch_round_holds_the_share_of_the_hosts_its_passes_listed(
    url: EtcdURL, client: EtcdClient
) -> None:
    """A round's steps name the fleet (a standby's from the inventory it read); a round
    in which a cluster's inventory could not be read holds nothing new and gives nothing
    up: a ring over part of the fleet would give the rest away."""
    listed = PassSkipped("busy", standby=40, hosts=40, names=tuple(sorted(HOSTS)))
    heartbeat = Heartbeat(url)
    try:
        heartbeat.round([("c", listed)], 1.0)
        assert heartbeat.last_hold is not None
        assert heartbeat.last_hold.owned == 40
        assert set(owners_now(url, client)) == {f"c/{h}" for h in HOSTS}
        unread = PassSkipped("busy", hosts=0)  # the inventory could not be read
        heartbeat.round([("c", unread)], 2.0)
        assert set(owners_now(url, client)) == {f"c/{h}" for h in HOSTS}
    finally:
        heartbeat.leave()
    assert owners_now(url, client) == {}


def test_each_watch_keeps_connections_to_its_share_and_standby_set_and_a_death_finds_them_warm(
    url: EtcdURL, client: EtcdClient
) -> None:
    """Connections by share: a `watch` standing by warms only the hosts of its share and
    of its standby set (none before its first hold: a joiner opens no connection the
    ring does not give it), and releases the rest once idle; when one of three leaves,
    every host a survivor then holds is one it kept connected."""
    names = tuple(sorted(HOSTS))
    listed = PassSkipped("busy", hosts=40, names=names)
    heartbeats = [Heartbeat(url, interval=2.0) for _ in range(3)]
    executors = [FakeExecutor(lambda h, argv, i: Result(0, "", "")) for _ in heartbeats]
    try:
        assert heartbeats[0].kept("c") == frozenset()  # no hold yet: nothing warmed
        for _ in range(3):
            for h in heartbeats:
                h.round([("c", listed)], 1.0)
        ids = [h.member_id or "" for h in heartbeats]
        kept_of: dict[str | None, frozenset[str] | None] = {}
        ring = assign({f"c/{n}" for n in HOSTS}, ids)
        for h, ex in zip(heartbeats, executors, strict=True):
            kept = h.kept("c")
            assert kept == {n.partition("/")[2] for n in connections(ring, ids, h.member_id or "")}
            assert {n for n in HOSTS if ring[f"c/{n}"] == h.member_id} < kept < HOSTS
            assert h.kept("other") == frozenset()
            ex.connected = set(HOSTS)  # a pass had reached every host
            assert h.release(ex) == len(kept)
            assert ex.released == [(kept, IDLE)]
            kept_of[h.member_id] = kept
        for h in heartbeats:
            h.look(2.0)
        lined = [h for h in heartbeats if h.kept("c") is None]  # the decider and its heir
        assert lined == heartbeats[:2]  # the two oldest member keys
        (third,) = [h for h in heartbeats if h not in lined]
        assert third.kept("c") == kept_of[third.member_id]
        for h, ex in zip(heartbeats, executors, strict=True):
            ex.connected = set(HOSTS)
            held = h.release(ex)
            assert held == (40 if h in lined else len(kept_of[h.member_id])), h.member_id
        leaver = heartbeats.pop()
        leaver.leave()
        before = {h.member_id: kept_of[h.member_id] or frozenset() for h in heartbeats}
        for _ in range(3):
            for h in heartbeats:
                h.round([("c", listed)], 2.0)
        owners = owners_now(url, client)
        for h in heartbeats:
            assert {n.partition("/")[2] for n, m in owners.items() if m == h.member_id} <= before[
                h.member_id
            ]
            assert h._shares is not None  # two left: each would take all of the other's
            assert h._shares.kept_hosts("c") == HOSTS
    finally:
        for h in heartbeats:
            h.leave()


def test_a_state_directory_keeps_every_host_connected(tmp_path: Path) -> None:
    heartbeat = Heartbeat(tmp_path)
    assert heartbeat.kept("c") is None
    assert heartbeat.release(FakeExecutor(lambda h, argv, i: Result(0, "", ""))) is None


def test_fleet_names_name_each_clusters_hosts_apart() -> None:
    one = PassSkipped("busy", names=("h1", "h2"))
    two = PassSkipped("busy", names=("h1",))
    assert fleet_names([("a", one), ("b", two)]) == {"a/h1", "a/h2", "b/h1"}
    assert fleet_names([]) == frozenset()
    assert fleet_names([("a", one), ("b", PassSkipped("busy"))]) is None


def _event(key: bytes, kind: int, version: int = 1) -> SimpleNamespace:
    return SimpleNamespace(type=kind, kv=SimpleNamespace(key=key, version=version))


def test_news_of_a_handover_is_a_join_a_leave_or_an_owner_key_gone_never_a_beat() -> None:
    put, gone = rpc.Event.PUT, rpc.Event.DELETE
    members, owners = b"p/members/", b"p/owners/"
    assert handover_news(members, owners, [_event(b"p/members/a", put, version=1)])  # a join
    assert handover_news(members, owners, [_event(b"p/members/a", gone, version=0)])  # left
    assert handover_news(members, owners, [_event(b"p/owners/c/h1", gone, version=0)])
    assert not handover_news(members, owners, [_event(b"p/members/a", put, version=7)])  # beat
    assert not handover_news(members, owners, [_event(b"p/owners/c/h1", put, version=1)])  # take
    assert not handover_news(members, owners, [_event(b"p/meta", put, version=1)])
    assert not handover_news(members, owners, [])
    beats = [_event(b"p/members/a", put, version=v) for v in (2, 3)]
    assert handover_news(members, owners, [*beats, _event(b"p/owners/c/h", gone, 0)])


class News:
    """What a following member was told, counted, with a wait for the next."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def reach(self, count: int) -> int:
        """Wait (up to 10 s, a loaded machine's margin) until `count` news came; the count."""
        with self._changed:
            self._changed.wait_for(lambda: self.count >= count, timeout=10)
            return self.count


def test_a_followers_news_is_each_join_leave_and_key_given_up_in_order_and_no_beat(
    url: EtcdURL,
) -> None:
    """Membership.follow on real etcd: every other member's join and leave and every owner
    key given up is news; a beat (a rewrite of a member key) and a take are not. Each
    count is checked once a later piece of news arrived: etcd delivers in revision order,
    so by then the earlier events (the beats, the take) were seen and told nothing."""
    follower, news = Membership(url), News()
    follower.follow(news)
    other = Membership(url)
    try:
        other.beat()  # a join
        assert news.reach(1) == 1
        other.beat(passes=1)
        other.beat(passes=2)  # beats: no news
        keys = OwnerKeys.of(other)
        taken = keys.take("c/h1")  # a take: no news
        assert keys.acknowledge("c/h1", taken.owner.created)  # given up: news
        assert news.reach(2) == 2
        other.leave()  # its key goes: news
        assert news.reach(3) == 3
    finally:
        other.leave()
        follower.leave()
    time.sleep(0.2)
    assert news.count == 3  # none after leave: the watches were closed first


def test_of_two_watches_the_junior_defers_to_the_senior_while_it_passes_and_lives(
    url: EtcdURL,
) -> None:
    """Heartbeat.look and defers on real etcd: the member whose key is older makes the
    cluster's passes, the other stands by; a senior covering another cluster only is not
    deferred to for this one; a senior whose passes stop advancing past three resyncs
    and a margin is passed over; one that leaves is no longer deferred to."""
    listed = PassSkipped("busy", standby=40, hosts=40, names=tuple(sorted(HOSTS)))
    senior, junior = Heartbeat(url, interval=2.0), Heartbeat(url, interval=2.0)
    other = Heartbeat(url, cluster="blog", interval=2.0)
    late = Heartbeat(Path("unused"))  # replaced below; a directory's heartbeat holds nothing
    try:
        other.round([("blog", listed)], 0.0)  # the oldest key, covering blog alone
        senior.round([("c", listed)], 0.0)
        junior.round([("c", listed)], 0.0)
        for each in (senior, junior, other):
            each.look(100.0)
        assert senior.defers("c") is None
        assert junior.defers("c") == senior.member_id
        assert junior.defers("blog") == other.member_id
        junior.look(100.0 + 3 * 2.0 + 5.0 + 0.1)  # the senior's passes have not advanced
        assert junior.defers("c") is None
        senior.round([("c", listed)], 1.0)  # still no pass: stalled, as far as junior knows
        junior.look(120.0)
        assert junior.defers("c") is None
        senior.leave()
        late = Heartbeat(url, interval=2.0)  # a newcomer: it has seen nobody stall
        late.look(0.0)
        assert late.defers("c") == junior.member_id  # the senior is gone: junior decides
        assert late.defers("blog") == other.member_id
    finally:
        for each in (senior, junior, other, late):
            each.leave()
