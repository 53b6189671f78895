"""Acting by share's keys on real etcd (minidock.store.orders; docs/scale.md, "Acting by
share"): an order goes only to the host's owner of the moment from the lock holder of the
moment, is sealed, is claimed at most once and only within the tenure it was placed in;
a report is read only for its own order. The use (a decider's pass, an owner's round) is
tests/unit/test_observing_by_share.py's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from minidock.core import ControllerState, Plan, Run, Stop
from minidock.core.outcomes import StartFailed
from minidock.model import Container, Event, Observed
from minidock.runner import PassResult
from minidock.store.base import LeaseLost
from minidock.store.etcd import EtcdWriter
from minidock.store.etcd_client import EtcdClient, range_end, rpc
from minidock.store.location import EtcdURL
from minidock.store.members import Membership
from minidock.store.orders import Order, OrderBook, Report, orders_prefix, reports_prefix
from minidock.store.owners import OwnerKeys
from minidock.store.sealing import SEALED
from minidock.usecases import passes
from tests.sim import svc

SECRET = "hunter2-is-not-a-password"


@pytest.fixture
def owner(url: EtcdURL) -> Iterator[Membership]:
    member = Membership(url)
    member.beat()
    try:
        yield member
    finally:
        member.leave()


def _book(url: EtcdURL, client: EtcdClient) -> OrderBook:
    return OrderBook(url, client)


def _order(writer: EtcdWriter, owner_key: int) -> Order:
    web = replace(svc("web", "web:5"), env=(("DB_PASSWORD", SECRET),))
    old = Container("c1", "web.1.aaaa", "host1", "c", "web", 1, "aaaa", "x", "web:4", "running")
    return Order(
        "decider",
        writer.tenure[0],
        owner_key,
        1000.0,
        "ctl",
        "docker",
        (("web", "x", 7),),
        (Stop(old, "replaced", failure=True),),
        (Run(web, 1, "host1", "bbbb", "replaces a failed task", after=0.25),),
    )


def _values(client: EtcdClient, prefix: bytes) -> list[bytes]:
    reply = client.range(rpc.RangeRequest(key=prefix, range_end=range_end(prefix)))
    return [bytes(kv.value) for kv in reply.kvs]


def test_an_order_goes_sealed_to_the_owner_of_the_moment_and_is_claimed_once(
    url: EtcdURL, client: EtcdClient, owner: Membership
) -> None:
    taken = OwnerKeys.of(owner).take("c/host1")
    assert taken.got
    book = _book(url, client)
    writer = EtcdWriter(url)
    writer.acquire()
    try:
        order = _order(writer, taken.owner.created)
        assert book.place(writer, "c", "host1", replace(order, owner=1)) == 0  # not its key
        placed = book.place(writer, "c", "host1", order)
        assert placed > 0
        (raw,) = _values(client, orders_prefix(url, "c"))
        assert raw.startswith(SEALED.encode())
        assert b"web:5" not in raw
        assert book.pending("c", {"host2": taken.owner.created}) == []  # not its host
        ((host, revision, read),) = book.pending("c", {"host1": taken.owner.created})
        assert (host, revision) == ("host1", placed)
        assert read == order
        assert read.run[0].service.env == (("DB_PASSWORD", SECRET),)
        assert read.run[0].after == 0.25  # the rest of its backoff, which its owner holds it for
        assert book.claim("c", "host1", revision, read)
        assert not book.claim("c", "host1", revision, read)  # at most once
        assert book.pending("c", {"host1": taken.owner.created}) == []
    finally:
        writer.release()
    with pytest.raises(LeaseLost):  # a writer that does not hold the lock orders nothing
        book.place(writer, "c", "host1", order)


def test_an_order_of_an_ended_tenure_is_never_claimed_and_goes_with_its_lease(
    url: EtcdURL, client: EtcdClient, owner: Membership
) -> None:
    taken = OwnerKeys.of(owner).take("c/host1")
    book = _book(url, client)
    first = EtcdWriter(url)
    first.acquire()
    order = _order(first, taken.owner.created)
    revision = book.place(first, "c", "host1", order)
    try:
        # the tenure key rewritten by another holder: the order's tenure has ended
        client.txn(rpc.TxnRequest(success=[rpc.RequestOp(request_put=rpc.PutRequest(
            key=first.keys.tenure, value=b"someone else"))]))  # fmt: skip
        assert not book.claim("c", "host1", revision, order)
    finally:
        first.release()
    assert _values(client, orders_prefix(url, "c")) == []  # revoked with the lock's lease
    second_tenure = EtcdWriter(url)
    second_tenure.acquire()
    try:
        again = replace(order, tenure=second_tenure.tenure[0])
        placed = book.place(second_tenure, "c", "host1", again)
        assert book.withdraw("c", "host1", placed)  # unclaimed: withdrawn
        assert not book.claim("c", "host1", placed, again)
        assert not book.withdraw("c", "host1", placed)
    finally:
        second_tenure.release()


def test_a_report_is_sealed_read_only_for_its_own_order_and_cleared(
    url: EtcdURL, client: EtcdClient, owner: Membership
) -> None:
    taken = OwnerKeys.of(owner).take("c/host1")
    book = _book(url, client)
    lease = owner.lease_id
    assert lease is not None
    event = Event(1000.0, "stop", f"stopped web.1.aaaa on host1: log: {SECRET}", "web", 1, "host1")
    report = Report(41, (event,), (StartFailed("web", 1, "bbbb", "no image"),))
    assert not book.report("c", "host1", lease, taken.owner.created + 1, report)  # not its key
    assert book.report("c", "host1", lease, taken.owner.created, report)
    (raw,) = _values(client, reports_prefix(url, "c"))
    assert raw.startswith(SEALED.encode())
    assert SECRET.encode() not in raw
    assert book.reports("c", {"host1": 40}) == {}  # another order's
    assert book.reports("c", {"host1": 41}) == {"host1": report}
    book.clear("c", ["host1"])
    assert _values(client, reports_prefix(url, "c")) == []


def test_the_hosts_a_pass_acted_on_include_a_replaced_tasks_host_or_are_none_when_unnamed() -> None:
    """usecases.passes.acted_on: each host whose bound on borrowed observations moves.
    A stop-first replacement whose old task is on another host acts on both; a pass that
    cannot name its hosts (an act of no one host, a volume move's step) says None: every
    host's bound moves."""
    web = svc("web", "web:5")
    old = Container("c1", "web.1.aaaa", "host1", "c", "web", 1, "aaaa", "x", "web:4", "running")
    plan = Plan(ControllerState(), run=(Run(web, 1, "host2", "bbbb", "update", replaces=old),))
    result = PassResult(plan, Observed({}), touched=frozenset({"host2"}))
    assert passes.acted_on(result) == {"host1", "host2"}
    assert passes.acted_on(replace(result, touched=frozenset({""}))) is None  # of no one host
    assert passes.acted_on(PassResult(Plan(ControllerState()), Observed({}))) == frozenset()


def test_an_owners_acts_are_fenced_on_its_member_lease(url: EtcdURL) -> None:
    """Membership.fence, which every command of an owner's acts passes first: LeaseLost
    before its lease is granted and once it is lost; nothing while it lives."""
    member = Membership(url)
    try:
        with pytest.raises(LeaseLost):
            member.fence()
        member.beat()
        member.fence()
        member._keeper.lost = "it was not renewed in time"  # type: ignore[union-attr]
        with pytest.raises(LeaseLost, match="not renewed in time"):
            member.fence()
    finally:
        member.leave()
