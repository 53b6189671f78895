"""Observing by share on real etcd (docs/scale.md, "Observing by share"): the lock's
tenure key, the owners' observation keys (minidock.store.seen) and two `watch` heartbeats
over a fake fleet, one making the passes and borrowing what the other, the owner of part
of the hosts, probed and wrote (minidock.usecases.borrowing; the rule is
minidock.core.borrowing's, its property in tests/unit/test_borrowing.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from minidock import usecases
from minidock.commands.facts import ps_argv
from minidock.model import Container, HostObservation
from minidock.observe import ProbeMemory
from minidock.store import StoreError
from minidock.store.base import Member
from minidock.store.etcd import EtcdStore, EtcdWriter
from minidock.store.etcd_client import EtcdClient, range_end, rpc
from minidock.store.handed import read_handed
from minidock.store.location import EtcdURL
from minidock.store.members import Membership, read_roster
from minidock.store.orders import orders_prefix
from minidock.store.owners import OwnerKeys
from minidock.store.seen import SeenKeys, ShardReader, read_shard_table, wanted_prefix
from minidock.streams import EventStreams
from minidock.usecases import ExitCode, PassDone, PassSkipped, passes
from minidock.usecases.clusters import held
from minidock.usecases.roster import Heartbeat
from tests.fakes import FakeExecutor
from tests.unit.test_ha import EtcdSetup, _url, run

HOSTS = ("host1", "host2", "host3")
PROBE = ps_argv(None)  # a probe's listing (a pass reads port tables with another ps)


def test_each_holder_of_the_lock_knows_whether_the_tenure_before_its_own_was_its_own(
    url: EtcdURL,
) -> None:
    mine, other = EtcdWriter(url), EtcdWriter(url)
    try:
        mine.acquire()
        first, _ = mine.tenure
        mine.release()
        mine = EtcdWriter(url)
        mine.acquire()
        second, before = mine.tenure
        assert before == first < second  # nobody held it between
        mine.release()
        other.acquire()
        theirs, _ = other.tenure
        other.release()
        mine = EtcdWriter(url)
        mine.acquire()
        third, before = mine.tenure
        assert before == theirs != second
        assert third > theirs
    finally:
        mine.release()
        other.release()
    assert mine.tenure == (0, 0)  # none held


def _seen(host: str, *, ok: bool = True, image: str = "web:1") -> HostObservation:
    """An observation with an answer time and a stamp of when it was had (neither is
    written: the reader stamps its own) and a word that tells two apart."""
    error = None if ok else f"{image} unreachable"
    return HostObservation(host, ok, error=error, seconds=0.25, seen_at=1000.0)


def _revision(client: EtcdClient) -> int:
    return int(client.range(rpc.RangeRequest(key=b"\0", count_only=True)).header.revision)


def test_an_owner_writes_only_what_changed_and_only_under_its_own_owner_key(
    url: EtcdURL, client: EtcdClient
) -> None:
    owner, other = Membership(url), Membership(url)
    try:
        owner.beat(rounds={"c": 10})
        other.beat()
        keys = OwnerKeys.of(owner)
        created = {h: keys.take(f"c/{h}").owner.created for h in ("host1", "host2")}
        lease = owner.lease_id
        assert lease is not None
        seen = SeenKeys(url, client)
        probed = {h: _seen(h) for h in created}
        assert seen.write("c", owner.member.id, lease, created, probed, 10)
        table = read_shard_table(url, client, "c")
        assert table.rounds == {owner.member.id: 10}  # the other has no round over "c"
        assert {h: w.observation for h, w in table.written.items()} == {
            h: replace(o, seconds=None, seen_at=None) for h, o in probed.items()
        }
        assert {(w.writer, w.owner, w.revision) for w in table.written.values()} == {
            (owner.member.id, created["host1"], 10),
            (owner.member.id, created["host2"], 10),
        }
        before = _revision(client)
        later = {h: replace(o, seen_at=1030.0) for h, o in probed.items()}
        assert seen.write("c", owner.member.id, lease, created, later, 20)
        assert _revision(client) == before  # nothing changed but the stamp: nothing written
        failed = probed | {"host2": _seen("host2", ok=False)}
        assert seen.write("c", owner.member.id, lease, created, failed, 30)
        assert sorted(read_shard_table(url, client, "c").written) == ["host1"]
        assert seen.write("c", owner.member.id, lease, {"host1": created["host1"]}, {}, 40) is False
        # host1 changes hands: the old owner's write of it is refused
        assert keys.acknowledge("c/host1", created["host1"])
        assert OwnerKeys.of(other).take("c/host1").got
        changed = {"host1": _seen("host1", image="web:2")}
        assert seen.write("c", owner.member.id, lease, {"host1": created["host1"]}, changed, 50)
        table = read_shard_table(url, client, "c")
        assert table.owners["host1"].controller == other.member.id
        assert table.written["host1"].revision == 10  # as it was: not this member's now
    finally:
        owner.leave()
        other.leave()
    assert read_shard_table(url, client, "c").written == {}  # they went with the leases


def test_an_owner_rewrites_a_host_for_its_tasks_not_for_their_health_checks_words(
    url: EtcdURL, client: EtcdClient
) -> None:
    """A task's health check output changes every check and is never written: only a
    change of what is written (here the task's state) writes the host's key again."""
    owner = Membership(url)
    try:
        owner.beat(rounds={"c": 10})
        created = {"host1": OwnerKeys.of(owner).take("c/host1").owner.created}
        lease = owner.lease_id
        assert lease is not None
        task = Container(
            "c1", "web.1.aa", "host1", "c", "web", 1, "aa", "9c1e", "web:1",
            "running", health="healthy", health_log="ok at 10:00:01",
        )  # fmt: skip
        seen = SeenKeys(url, client)
        first = replace(_seen("host1"), containers=(task,))
        assert seen.write("c", owner.member.id, lease, created, {"host1": first}, 10)
        before = _revision(client)
        checked = replace(task, health_log="ok at 10:00:02")
        again = replace(first, containers=(checked,))
        assert seen.write("c", owner.member.id, lease, created, {"host1": again}, 20)
        assert _revision(client) == before
        exited = replace(checked, state="exited", exit_code=137)
        assert seen.write(
            "c",
            owner.member.id,
            lease,
            created,
            {"host1": replace(first, containers=(exited,))},
            30,
        )
        assert _revision(client) == before + 1
        (written,) = read_shard_table(url, client, "c").written.values()
        assert written.observation.containers == (replace(exited, health_log=""),)
    finally:
        owner.leave()


def test_a_deciders_reads_see_each_change_and_each_key_gone_and_read_no_value_at_rest(
    url: EtcdURL, client: EtcdClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ShardReader lists the observation keys each time but reads a value again only
    when its key changed: what it returns is what a whole read returns, every time."""
    owner = Membership(url)
    try:
        owner.beat(rounds={"c": 1})
        keys = OwnerKeys.of(owner)
        created = {h: keys.take(f"c/{h}").owner.created for h in HOSTS}
        lease = owner.lease_id
        assert lease is not None
        seen, reader = SeenKeys(url, client), ShardReader(url, client, "c")
        member = owner.member.id
        assert seen.write("c", member, lease, created, {h: _seen(h) for h in HOSTS}, 5)
        assert reader.read() == read_shard_table(url, client, "c")
        values: list[bytes] = []
        real = EtcdStore.kvs

        def counted(
            store: EtcdStore, key: bytes, end: bytes = b"", **options: object
        ) -> list[object]:
            values.append(key)
            return real(store, key, end, **options)

        monkeypatch.setattr(EtcdStore, "kvs", counted)
        again = reader.read()
        assert values == []  # at rest: no value read
        assert again == read_shard_table(url, client, "c")
        changed = {h: _seen(h) for h in HOSTS} | {"host2": _seen("host2", ok=False)}
        assert seen.write("c", member, lease, created, changed, 7)  # host2's key deleted
        changed["host3"] = replace(_seen("host3"), slow=True)
        changed["host2"] = _seen("host2")
        assert seen.write("c", member, lease, created, changed, 9)  # both rewritten
        values.clear()
        again = reader.read()
        assert sorted(k.rsplit(b"/", 1)[1] for k in values) == [b"host2", b"host3"]
        assert again == read_shard_table(url, client, "c")
        assert again.written["host3"].observation.slow
    finally:
        owner.leave()


@pytest.fixture
def setup(tmp_path: Path, etcd_url: str) -> EtcdSetup:
    setup = EtcdSetup(tmp_path, etcd_url)
    applied = run(
        usecases.apply(
            setup.file, setup.location, setup.runtime(), setup.report, wait=True, timeout=60
        )
    )
    assert applied.exit_code is ExitCode.OK
    return setup


class Watches:
    """Two watches' heartbeats on one state: `decider` makes the passes, `owner` stands by
    for it and probes its share; each with its own executor and probe memory."""

    def __init__(self, setup: EtcdSetup) -> None:
        self.setup = setup
        self.url = _url(str(setup.location))
        self.cluster = held(self.url)[0].name
        self.decider, self.owner = Heartbeat(self.url), Heartbeat(self.url)
        self.executors = {"decider": setup.docker.executor(), "owner": setup.docker.executor()}
        self.memories = {"decider": ProbeMemory(), "owner": ProbeMemory()}
        listed = PassSkipped("joining", names=HOSTS)
        for heartbeat in (self.decider, self.owner, self.decider, self.owner):
            heartbeat.round([(self.cluster, listed)], 0.0)  # the ring's shares, handed over
        if len(self.owned()) < 2:  # the owner's share is the larger (two hosts, tasks on them)
            self.decider, self.owner = self.owner, self.decider
        assert len(self.owned()) == 2
        assert self.tasks(self.owned())

    def tasks(self, hosts: set[str]) -> list[dict[str, Any]]:
        """The running containers on `hosts`."""
        engines = self.setup.docker.engines
        found = [d for h in sorted(hosts) for d in engines[h].values()]
        return [d for d in found if d["State"]["Status"] == "running"]

    def owned(self) -> set[str]:
        owners = read_shard_table(self.url, self.owner_client, self.cluster).owners
        return {h for h, key in owners.items() if key.controller == self.owner.member_id}

    @property
    def owner_client(self) -> EtcdClient:
        return self.owner._shares.membership.client  # type: ignore[union-attr]

    def decide(
        self, *, owner_acts: bool = True, meanwhile: Callable[[], None] | None = None
    ) -> PassDone:
        """A pass of the decider's; its member key rewritten after it. Meanwhile
        (`owner_acts`) the owner, rung by an order for its share as its `watch` is, makes
        a round, which carries it out; or (`meanwhile`) that is called once an order is
        placed."""

        async def both() -> PassDone | PassSkipped:
            decided = asyncio.ensure_future(
                usecases.watch_step(
                    self.url,
                    self.executors["decider"],
                    self.setup.runtime(),
                    memory=self.memories["decider"],
                    shared=self.decider.shared(self.cluster),
                )
            )
            while (owner_acts or meanwhile) and not decided.done():
                await asyncio.sleep(0.02)
                if not self.orders():
                    continue
                if meanwhile is not None:
                    meanwhile()
                    break
                self.owner.round([(self.cluster, await self._stand_by())], time.time())
            return await decided

        step = run(both())
        assert isinstance(step, PassDone)
        self.decider.round([(self.cluster, step)], time.time())
        return step

    def a_task_dies(self) -> tuple[set[str], dict[str, Any]]:
        """A pass and a round, then a task on the owner's share exits and the owner's next
        round sees it: the owner's hosts and the dead task."""
        owned = self.owned()
        self.decide()
        self.stand_by()
        (victim, *_) = self.tasks(owned)
        victim["State"]["Status"] = "exited"
        self.stand_by()
        return owned, victim

    def orders(self) -> list[bytes]:
        """The orders waiting for an owner (their keys)."""
        prefix = orders_prefix(self.url, self.cluster)
        reply = self.owner_client.range(
            rpc.RangeRequest(key=prefix, range_end=range_end(prefix), keys_only=True)
        )
        return [bytes(kv.key) for kv in reply.kvs]

    def stand_by(self) -> PassSkipped:
        """A round of the owner's: deferred to the decider, its share probed and written."""
        step = run(self._stand_by())
        self.owner.round([(self.cluster, step)], time.time())
        return step

    async def _stand_by(self) -> PassSkipped:
        step = await usecases.watch_step(
            self.url,
            self.executors["owner"],
            self.setup.runtime(),
            memory=self.memories["owner"],
            defer_to=self.decider.member_id,
            shared=self.owner.shared(self.cluster),
        )
        assert isinstance(step, PassSkipped)
        return step

    def acted_by(self, who: str, since: int, hosts: set[str]) -> set[str]:
        """The verbs (`run`, `stop`, `rm`, `create`) `who` sent to `hosts` from its `since`th
        call on."""
        executor: FakeExecutor = self.executors[who]
        verbs = {"run", "stop", "rm", "create"}
        return {
            c.argv[1]
            for c in executor.calls[since:]
            if c.host in hosts and len(c.argv) > 1 and c.argv[0] == "docker" and c.argv[1] in verbs
        }

    def probed_by_decider(self, since: int) -> set[str]:
        """The hosts the decider probed, from its `since`th call on."""
        executor: FakeExecutor = self.executors["decider"]
        return {c.host for c in executor.calls[since:] if c.argv == PROBE}

    def borrowed(self) -> int:
        return self.deciders_key().borrowed

    def deciders_key(self) -> Member:
        (member,) = [m for m in read_roster(self.url).members if m.id == self.decider.member_id]
        return member

    def owners_round(self) -> tuple[dict[str, int], dict[str, float]]:
        """The owner's member key: its last whole round's revision and seconds, by cluster."""
        (member,) = [m for m in read_roster(self.url).members if m.id == self.owner.member_id]
        return member.rounds, member.round_seconds

    def leave(self) -> None:
        self.decider.leave()
        self.owner.leave()


@pytest.fixture
def watches(setup: EtcdSetup) -> Iterator[Watches]:
    made = Watches(setup)
    try:
        yield made
    finally:
        made.leave()


def test_the_decider_borrows_the_owners_share_until_another_writer_holds_the_lock(
    watches: Watches,
) -> None:
    """The decider's first tenure follows the operator's apply: it probes every host.
    Once the owner has probed its share after it, the decider's next pass probes only
    the other hosts and borrows the rest; an operator's reconcile in between (another
    tenure of the lock) makes it probe them all again, until the owner's next round."""
    owned = watches.owned()
    assert owned  # a share of its own,
    assert owned < set(HOSTS)  # not the whole fleet
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS)
    assert watches.borrowed() == 0
    assert watches.deciders_key().pass_seconds is not None  # how long it took (a fixed clock)
    assert watches.owners_round() == ({}, {})
    assert watches.stand_by().probed == len(owned)
    rounds, took = watches.owners_round()  # a whole round over its share, timed
    assert set(rounds) == set(took) == {watches.cluster}
    assert 0 < took[watches.cluster] < 60
    calls = len(watches.executors["decider"].calls)
    done = watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned
    assert watches.borrowed() == len(owned)
    assert done.exit_code is ExitCode.OK
    assert all(done.result.observed.hosts[h].ok for h in HOSTS)
    setup = watches.setup
    assert (
        run(usecases.reconcile(setup.location, setup.runtime(), setup.report)).exit_code
        is ExitCode.OK
    )
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS)
    assert watches.borrowed() == 0
    watches.stand_by()
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned


def test_a_watch_taking_over_between_passes_goes_on_from_the_bound_handed_down(
    watches: Watches,
) -> None:
    """Each of the decider's passes hands its bound down with its last commit
    (PREFIX/handed, of its tenure). A `watch` that decides next with none of its own (the
    decider's process gone between passes, another in its place: here its bound
    forgotten) goes on from it and borrows at once what the owner wrote. After a tenure
    that handed nothing down (a decider killed mid-pass, here a bare holder of the lock),
    it probes every host, as after an operator's."""
    owned = watches.owned()
    borrowing = watches.decider._borrowing
    assert borrowing is not None
    watches.decide()
    watches.stand_by()
    watches.decide()
    assert watches.borrowed() == len(owned)
    store = EtcdStore.open(watches.url)
    try:
        handed, revision = read_handed(store)
        tenure = int(store.kvs(store.keys.tenure)[0].mod_revision)
    finally:
        store.close()
    assert handed is not None
    assert (handed.tenure, handed.acted) == (tenure, False)
    assert revision > tenure  # with its last commit
    borrowing._trusts.clear()  # a new process
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.borrowed() == len(owned)
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned
    cut = EtcdWriter(watches.url)  # a tenure cut off before its last commit
    cut.acquire()
    cut.release()
    borrowing._trusts.clear()
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.borrowed() == 0
    assert watches.probed_by_decider(calls) == set(HOSTS)


def test_the_decider_follows_the_event_streams_of_its_own_share_only(watches: Watches) -> None:
    """From its first pass, the deciding watch opens event streams to the hosts of its own
    share only: every other host's owner follows that host's (a host between two owners
    is probed until its new owner writes), so a new decider opens none to another's
    share, which would ring its next pass as each came up."""
    mine = set(HOSTS) - watches.owned()

    async def followed() -> set[str]:
        events = EventStreams(watches.executors["decider"], lambda host: None)
        try:
            step = await usecases.watch_step(
                watches.url,
                watches.executors["decider"],
                watches.setup.runtime(),
                memory=watches.memories["decider"],
                streams=events,
                shared=watches.decider.shared(watches.cluster),
            )
            assert isinstance(step, PassDone)
            return {h for h in HOSTS if events.stream(watches.cluster, h) is not None}
        finally:
            await events.close()

    assert mine
    assert run(followed()) == mine


def test_a_task_death_the_owner_saw_is_borrowed_and_replaced_by_the_owner_on_the_deciders_order(
    watches: Watches,
) -> None:
    """A task dies on a host of the owner's share: the owner's round writes it, the
    decider borrows that and decides; the verbs on that host (the dead container removed,
    its replacement started) are carried out by the owner on the decider's order, not by
    the decider (acting by share); the decider's next pass, before the owner has probed
    again, borrows nothing of the hosts acted on from before those acts, and still
    borrows the owner's other hosts. Rounds of both bring the task back."""
    owned, _ = watches.a_task_dies()
    calls = {who: len(e.calls) for who, e in watches.executors.items()}
    dealt = watches.decide()
    assert watches.probed_by_decider(calls["decider"]) == set(HOSTS) - owned  # borrowed
    assert passes.acted(dealt.result)
    assert dealt.result.done, dealt.result  # the owner's report, folded in
    assert not dealt.result.failures, dealt.result.failures
    assert watches.acted_by("owner", calls["owner"], owned)
    assert not watches.acted_by("decider", calls["decider"], owned)
    assert watches.orders() == []  # claimed
    touched = passes.acted_on(dealt.result)
    assert touched is not None
    assert touched & owned  # the victim's host at least
    calls = {who: len(e.calls) for who, e in watches.executors.items()}
    watches.decide(owner_acts=False)
    # the hosts acted on are probed: the owner's acts are after what it saw of them; the
    # owner's other hosts are still borrowed (each host's bound moves with its own acts)
    assert watches.borrowed() == len(owned - touched)
    assert watches.probed_by_decider(calls["decider"]) == (set(HOSTS) - owned) | touched
    for _ in range(5):
        run(watches.setup.clock.sleep(60))  # past any restart delay
        watches.stand_by()
        if watches.decide().exit_code is ExitCode.OK:
            break
    assert len(watches.tasks(set(HOSTS))) == 3
    members = {m.id: m for m in read_roster(watches.url).members}
    assert members[watches.owner.member_id].carried >= 1
    assert members[watches.decider.member_id].ordered >= 1


def test_an_order_rings_its_hosts_owner_at_once_and_neither_another_watch_nor_its_claim(
    watches: Watches,
) -> None:
    """Borrowing.follow on real etcd: the decider's order for a host of the owner's share
    rings the owner's `order` (its round carries it at once), once: the order's claim
    (its deletion) rings nothing; a watch standing by that owns none of the order's hosts
    (a member of its own, which has made no round) is told nothing of it."""
    from minidock.store.members import Membership as Member
    from minidock.usecases.borrowing import Borrowing
    from tests.unit.test_shares import News

    owner_news, owner_orders, other_news, other_orders = News(), News(), News(), News()
    borrowing = watches.owner._borrowing
    assert borrowing is not None
    other = Borrowing(Member(watches.url))
    try:
        watches.a_task_dies()
        borrowing.follow(owner_news, owner_orders)
        other.follow(other_news, other_orders)
        dealt = watches.decide()
        assert dealt.result.done, dealt.result  # the owner carried the order out
        assert watches.orders() == []  # and claimed it
        assert owner_orders.reach(1) == 1
        watches.stand_by()  # a later round: its write and any late event have come
        time.sleep(0.3)
        assert owner_orders.count == 1  # the claim rang nothing
        assert other_orders.count == 0
    finally:
        other.membership.leave()


def test_a_pass_that_acted_on_a_few_hosts_asks_no_owner_for_a_whole_round(
    watches: Watches,
) -> None:
    """Each host's bound moves with its own acts: a pass that can name the hosts it acted
    on asks nothing of the owners (their probes of those hosts after it, rung by the
    acts' events, are borrowed; the decider probes them meanwhile), so a death on one
    host does not have the whole fleet probed again. One that cannot name them (a volume
    move's, a backup's) asks every owner for a round of its whole share."""
    borrowing = watches.decider._borrowing
    assert borrowing is not None
    key = wanted_prefix(watches.url) + watches.cluster.encode()

    def asked() -> int:
        reply = watches.owner_client.range(rpc.RangeRequest(key=key))
        return int(reply.kvs[0].mod_revision) if reply.kvs else 0

    was = asked()
    borrowing.ended(watches.cluster, True, {"host1"})
    assert asked() == was
    borrowing.ended(watches.cluster, True, None)
    assert asked() > was


def test_an_order_its_owner_never_claims_fails_the_pass_and_goes_with_the_deciders_tenure(
    watches: Watches,
) -> None:
    """The owner makes no round while the decider waits: after the owner's patience
    (three of its resyncs and a margin: 5 s at no interval) the pass ends with a failure
    that names the host; the order goes with the tenure's lease, so the owner's next
    round carries out nothing; the decider's next pass decides again and, served by the
    owner, converges."""
    owned, victim = watches.a_task_dies()
    engines = watches.setup.docker.engines
    (host,) = [h for h in HOSTS if any(d is victim for d in engines[h].values())]
    late = watches.decide(owner_acts=False)
    (failure,) = late.result.failures
    assert failure.startswith(f"{host}: its owner {watches.owner.member_id} did not report")
    assert watches.orders() == []  # gone with the tenure's lease
    calls = len(watches.executors["owner"].calls)
    watches.stand_by()
    assert not watches.acted_by("owner", calls, owned)
    for _ in range(5):
        run(watches.setup.clock.sleep(60))
        watches.stand_by()
        if watches.decide().exit_code is ExitCode.OK:
            break
    assert len(watches.tasks(set(HOSTS))) == 3


def test_an_order_whose_owner_goes_before_claiming_it_is_withdrawn_and_done_by_the_decider(
    watches: Watches,
) -> None:
    """The owner leaves (its lease revoked: its owner keys go) while the decider waits on
    its order: within a second the decider sees the owner key gone, withdraws the order
    and carries it out itself; the pass fails nothing."""
    owned, _ = watches.a_task_dies()
    calls = {who: len(e.calls) for who, e in watches.executors.items()}
    dealt = watches.decide(meanwhile=watches.owner.leave)
    assert dealt.result.done, dealt.result
    assert not dealt.result.failures, dealt.result.failures
    assert watches.acted_by("decider", calls["decider"], owned)
    assert not watches.acted_by("owner", calls["owner"], owned)
    prefix = orders_prefix(watches.url, watches.cluster)
    left = EtcdClient(watches.url)
    try:
        reply = left.range(rpc.RangeRequest(key=prefix, range_end=range_end(prefix)))
        assert list(reply.kvs) == []  # withdrawn
    finally:
        left.close()


def test_an_order_etcd_does_not_take_is_carried_out_by_the_decider_itself(
    watches: Watches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd not answering as the decider places an order (the write refused): the pass
    acts on that host itself, at once, rather than waiting on an owner that was never
    told, and fails nothing; no order is left behind."""
    owned, _ = watches.a_task_dies()
    book = watches.decider._borrowing.book  # type: ignore[union-attr]

    def away(*_: object, **__: object) -> int:
        raise StoreError("etcd: no member answered")

    monkeypatch.setattr(book, "place", away)
    calls = {who: len(e.calls) for who, e in watches.executors.items()}
    dealt = watches.decide(owner_acts=False)
    assert dealt.result.done, dealt.result
    assert not dealt.result.failures, dealt.result.failures
    assert watches.acted_by("decider", calls["decider"], owned)
    assert not watches.acted_by("owner", calls["owner"], owned)
    assert watches.orders() == []


def test_an_owner_whose_rounds_stop_is_passed_over_and_its_hosts_probed_again(
    watches: Watches,
) -> None:
    """An owner alive but stuck (its lease kept, no round since) is borrowed from for
    three of its resyncs and a margin (5 s at no interval) after the decider saw its round
    last change, then no more: its hosts are probed by the decider again."""
    owned = watches.owned()
    watches.decide()
    watches.stand_by()
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned
    run(watches.setup.clock.sleep(4))  # within the margin: still borrowed
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned
    run(watches.setup.clock.sleep(2))  # past it
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.borrowed() == 0
    assert watches.probed_by_decider(calls) == set(HOSTS)
    watches.stand_by()  # its round advances again
    calls = len(watches.executors["decider"].calls)
    watches.decide()
    assert watches.probed_by_decider(calls) == set(HOSTS) - owned
