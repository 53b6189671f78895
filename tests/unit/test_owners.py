"""The owner keys (minidock/store/owners.py, docs/scale.md "A host changes hands"): a host's
key is created only where absent, under its owner's lease; it goes by its owner's
acknowledgement, compared on its create revision, or with the lease. On real etcd members
(tests/etcd.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from minidock.core.handover import OwnerKey
from minidock.store import LeaseLost
from minidock.store.etcd_client import EtcdClient
from minidock.store.location import EtcdURL
from minidock.store.members import Membership
from minidock.store.owners import OwnerKeys, read_owners
from tests.unit.test_ha import TTL

HOSTS = [f"web-{i}" for i in range(8)]


@pytest.fixture
def two(url: EtcdURL) -> Iterator[tuple[OwnerKeys, OwnerKeys]]:
    """Two controllers at work, each with its member key and lease."""
    first, second = Membership(url), Membership(url)
    first.beat()
    second.beat()
    try:
        yield OwnerKeys.of(first), OwnerKeys.of(second)
    finally:
        first.leave()
        second.leave()


def _owners(url: EtcdURL) -> dict[str, OwnerKey]:
    client = EtcdClient(url)
    try:
        return read_owners(url, client)
    finally:
        client.close()


def test_of_two_controllers_taking_one_host_at_once_exactly_one_gets_it(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    a, b = two
    with ThreadPoolExecutor(max_workers=2) as pool:
        races = [(pool.submit(a.take, h), pool.submit(b.take, h)) for h in HOSTS]
        takes = [(x.result(), y.result()) for x, y in races]
    owners = _owners(url)
    assert sorted(owners) == sorted(HOSTS)
    for host, (x, y) in zip(HOSTS, takes, strict=True):
        assert [x.got, y.got].count(True) == 1, host
        assert x.owner == y.owner == owners[host]  # the loser is told who won, and when
        winner = a if x.got else b
        assert owners[host].controller == winner.controller


def test_a_take_tried_again_under_the_same_lease_finds_the_key_its_own(
    two: tuple[OwnerKeys, OwnerKeys],
) -> None:
    """An answer lost on the way back: the retry is told the key is ours, same revision."""
    a, _ = two
    first = a.take("web-1")
    assert first.got
    assert a.take("web-1") == first


def test_a_lost_lease_drops_its_owner_keys_and_takes_no_more(url: EtcdURL) -> None:
    """A controller killed or cut off: its lease is not renewed and expires; etcd deletes
    every owner key of it at once. A take under the gone lease is refused."""
    client = EtcdClient(url)
    try:
        lease = int(client.grant(round(TTL)).ID)  # never renewed
        dead = OwnerKeys(url, client, "ctl-dead", lease)
        assert all(dead.take(h).got for h in HOSTS[:3])
        assert sorted(read_owners(url, client)) == HOSTS[:3]
        deadline = time.monotonic() + TTL + 5  # the rest of its lease and etcd's next check
        while read_owners(url, client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert read_owners(url, client) == {}
        with pytest.raises(LeaseLost, match="ctl-dead"):
            dead.take(HOSTS[0])
    finally:
        client.close()


def test_a_controller_that_leaves_drops_its_owner_keys_at_once(url: EtcdURL) -> None:
    member = Membership(url)
    member.beat()
    keys = OwnerKeys.of(member)
    assert keys.take("web-1").got
    member.leave()  # revokes the lease
    assert _owners(url) == {}


def test_an_acknowledgement_with_a_stale_create_revision_deletes_nothing(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    """A gave web-1 up and B took it; A, deposed, acknowledges again with its old
    revision: B's key stays. So does it against any revision but the key's own."""
    a, b = two
    old = a.take("web-1").owner
    assert a.acknowledge("web-1", old.created)
    new = b.take("web-1")
    assert new.got
    assert not a.acknowledge("web-1", old.created)
    assert not a.acknowledge("web-1", 0)
    assert not a.acknowledge("web-1", new.owner.created + 1)
    assert _owners(url) == {"web-1": new.owner}


def test_a_host_acknowledged_is_taken_again_with_a_new_revision(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    a, b = two
    held = a.take("web-1").owner
    assert not b.take("web-1").got
    assert a.acknowledge("web-1", held.created)
    assert _owners(url) == {}
    again = b.take("web-1")
    assert again.got
    assert again.owner == OwnerKey(b.controller, again.owner.created)
    assert again.owner.created > held.created
    assert _owners(url) == {"web-1": again.owner}
    assert not a.acknowledge("web-1", held.created)  # nothing of A's is left to give up


def test_a_membership_without_a_lease_takes_nothing(url: EtcdURL) -> None:
    member = Membership(url)  # no beat yet: no lease
    try:
        with pytest.raises(LeaseLost, match="no member lease"):
            OwnerKeys.of(member)
    finally:
        member.leave()


def test_taking_many_hosts_takes_each_batch_in_one_transaction(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    """A first hold's takes: 250 absent keys in three transactions (100 a batch), each
    batch's keys created at one revision."""
    a, _ = two
    hosts = [f"h{i:03d}" for i in range(250)]
    taken = a.take_all(hosts)
    assert sorted(taken) == hosts
    assert all(t.got for t in taken.values())
    assert len({t.owner.created for t in taken.values()}) == 3
    assert _owners(url) == {h: t.owner for h, t in taken.items()}


def test_a_batch_with_a_held_key_takes_the_others_and_names_the_holder(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    a, b = two
    held = b.take("web-3").owner
    taken = a.take_all(HOSTS)
    assert not taken["web-3"].got
    assert taken["web-3"].owner == held
    assert all(taken[h].got for h in HOSTS if h != "web-3")
    owners = _owners(url)
    assert owners == {h: taken[h].owner for h in HOSTS}
    assert owners["web-3"].controller == b.controller


def test_two_controllers_taking_the_same_hosts_in_batches_get_one_owner_each(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    a, b = two
    hosts = [f"h{i:03d}" for i in range(300)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        mine, theirs = pool.submit(a.take_all, hosts), pool.submit(b.take_all, hosts[::-1])
        x, y = mine.result(), theirs.result()
    owners = _owners(url)
    assert sorted(owners) == hosts
    for h in hosts:
        assert [x[h].got, y[h].got].count(True) == 1, h
        assert x[h].owner == y[h].owner == owners[h]


def test_many_takes_under_a_gone_lease_are_refused(url: EtcdURL) -> None:
    client = EtcdClient(url)
    try:
        lease = int(client.grant(round(TTL)).ID)
        client.revoke(lease)
        with pytest.raises(LeaseLost, match="web-0 and 7 more"):
            OwnerKeys(url, client, "ctl-gone", lease).take_all(HOSTS)
        assert read_owners(url, client) == {}
    finally:
        client.close()


def test_giving_many_hosts_up_deletes_ours_and_never_anothers(
    url: EtcdURL, two: tuple[OwnerKeys, OwnerKeys]
) -> None:
    """150 keys given up in batches; one of them, meanwhile given up and taken by B, is
    compared on our old revision and stays B's; the rest go."""
    a, b = two
    hosts = [f"h{i:03d}" for i in range(150)]
    ours = {h: t.owner.created for h, t in a.take_all(hosts).items()}
    assert a.acknowledge("h007", ours["h007"])
    theirs = b.take("h007").owner
    given = a.acknowledge_all(ours)
    assert given == {h: h != "h007" for h in hosts}
    assert _owners(url) == {"h007": theirs}
