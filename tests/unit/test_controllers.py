"""`minidock controllers` and the member keys behind it (issue 47, item 4, in today's
one-writer shape): each running `watch` keeps `PREFIX/members/<id>` under a lease of its
own and rewrites it after each round; a stopped one's key goes at once, a killed one's
with its lease; the command lists them with the lock's holder and the last commit's
writer. On real etcd members (tests/etcd.py)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from minidock import usecases
from minidock.store import Roster
from minidock.store.members import Membership, read_roster
from minidock.store.owners import OwnerKeys
from minidock.usecases import PassDone, PassSkipped
from minidock.usecases.clusters import Held, held
from minidock.usecases.passes import _Left
from minidock.usecases.roster import Heartbeat
from minidock.usecases.shares import host_owners, owner_name
from tests.etcd import EtcdCluster
from tests.unit.test_ha import TTL, EtcdSetup, _take, _url, run

ROOT = Path(__file__).parents[2]
_MEMBER = """
import sys, time
from minidock.store import parse_location
from minidock.store.members import Membership
member = Membership(parse_location(sys.argv[1]))
member.beat(passes=1)
print(member.member.id, flush=True)
time.sleep(3600)
"""


@pytest.fixture
def ha(tmp_path: Path, etcd_url: str) -> EtcdSetup:
    setup = EtcdSetup(tmp_path, etcd_url)
    run(usecases.apply(setup.file, setup.location, setup.runtime(), setup.report))
    return setup


def _ids(roster: Roster) -> list[str]:
    return [m.id for m in roster.members]


def test_each_member_is_listed_with_its_lease_and_a_stopped_one_goes_at_once(
    ha: EtcdSetup,
) -> None:
    url = _url(str(ha.location))
    first, second = Membership(url), Membership(url)
    first.beat(passes=3, last_pass=time.time(), warm=3, hosts=3)
    second.beat(warm=2, hosts=3)
    try:
        roster = read_roster(url)
        assert _ids(roster) == [first.member.id, second.member.id]  # oldest first
        one = roster.members[0]
        assert (one.passes, one.warm, one.hosts, one.holder) == (3, 3, 3, first.member.holder)
        assert one.lease_left is not None
        assert 0 < one.lease_left <= url.ttl
        assert roster.writer == ""  # no pass under way
        assert roster.last_commit.startswith("pid ")  # the apply's
        holder = _take(url)
        try:
            assert read_roster(url).writer == first.member.holder  # same process here
        finally:
            holder.release()
        first.leave()
        assert _ids(read_roster(url)) == [second.member.id]
    finally:
        second.leave()
    assert _ids(read_roster(url)) == []


def test_a_killed_controllers_member_goes_with_its_lease(etcd_cluster: EtcdCluster) -> None:
    url = etcd_cluster.url(ttl=f"{TTL:g}s")
    child = subprocess.Popen(
        [sys.executable, "-c", _MEMBER, url], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert child.stdout is not None
        member_id = child.stdout.readline().strip()
        assert _ids(read_roster(_url(url))) == [member_id]
        child.kill()  # SIGKILL: nothing revoked
        deadline = time.monotonic() + TTL + 5  # the rest of its lease and etcd's next check
        while _ids(read_roster(_url(url))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ids(read_roster(_url(url))) == []
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


def test_a_member_whose_lease_was_lost_comes_back_as_a_new_member(
    etcd_cluster: EtcdCluster,
) -> None:
    """etcd away past the TTL (here: the lease revoked under it): the next beat takes a new
    lease and a new id, and the old id is listed no more."""
    url = _url(etcd_cluster.url(ttl=f"{TTL:g}s"))
    member = Membership(url)
    member.beat(passes=1)
    try:
        old, lease = member.member.id, member.lease_id
        assert lease is not None
        member.client.revoke(lease)
        deadline = time.monotonic() + TTL + 5  # the keeper's next renewal finds it gone
        while member.lease_id is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert member.lease_id is None
        member.beat(passes=2)
        assert member.member.id != old
        assert member.lease_id not in (None, lease)
        assert _ids(read_roster(url)) == [member.member.id]
        assert read_roster(url).members[0].passes == 2
    finally:
        member.leave()


def test_a_watch_round_writes_what_it_did_into_its_member_key(ha: EtcdSetup) -> None:
    """A round that passed (the hosts it observed) and one that stood by (its warm
    connections) each rewrite the key; the passes and the last pass (when, how long it
    took: each reading of the pass's monotonic clock a quarter of a second on) add up."""
    url = _url(str(ha.location))
    heartbeat = Heartbeat(url)
    runtime = ha.runtime()
    ticks = itertools.count(0.0, 0.25)
    runtime = replace(runtime, clock=replace(runtime.clock, monotonic=lambda: next(ticks)))
    try:
        assert read_roster(url).members == ()
        done = run(usecases.watch_step(url, ha.docker.executor(), runtime))
        assert isinstance(done, PassDone)
        assert done.seconds > 0
        heartbeat.round([("c", done)], 1000.0)
        (member,) = read_roster(url).members
        assert (member.passes, member.last_pass, member.warm, member.hosts) == (1, 1000.0, 3, 3)
        assert member.pass_seconds == done.seconds
        heartbeat.round([("c", PassSkipped("busy", standby=2, hosts=3))], 1010.0)
        (member,) = read_roster(url).members
        assert (member.passes, member.last_pass, member.warm, member.hosts) == (1, 1000.0, 2, 3)
        assert member.pass_seconds == done.seconds  # a round that stood by: still the last
    finally:
        heartbeat.leave()
    assert read_roster(url).members == ()


def test_the_command_lists_them_as_a_table_and_as_json(ha: EtcdSetup) -> None:
    url = _url(str(ha.location))
    member = Membership(url)
    member.beat(passes=2, warm=3, hosts=3, last_pass=time.time())
    keys = OwnerKeys.of(member)
    assert keys.take("host1").got  # its share: two hosts
    assert keys.take("host2").got
    try:
        shown = _minidock("controllers", "--state", str(ha.location))
        assert member.member.id in shown
        assert "3/3 connected" in shown
        assert "2 hosts" in shown  # the "owns" column
        assert "writer now: none (no pass under way)" in shown
        doc = json.loads(_minidock("controllers", "--json", "--state", str(ha.location)))
        assert [m["id"] for m in doc["members"]] == [member.member.id]
        assert (doc["members"][0]["passes"], doc["members"][0]["owned"]) == (2, 2)
        assert "owned" not in json.loads(member.member.value())  # read, never written
    finally:
        member.leave()


def test_a_deferred_pass_stands_by_without_the_lock_and_a_busy_one_is_tried_again_soon(
    ha: EtcdSetup,
) -> None:
    """watch_step left to another watch (`defer_to`) takes no lock and makes no pass: it
    keeps its hosts warm and says whose passes they are. A round that found the lock
    taken is work under way (its next round a second later); one that deferred is not."""
    url = _url(str(ha.location))
    before = read_roster(url).writer
    step = run(usecases.watch_step(url, ha.docker.executor(), ha.runtime(), defer_to="abc"))
    assert isinstance(step, PassSkipped)
    assert step.deferred
    assert "controller abc" in step.reason
    assert (step.standby, step.hosts) == (3, 3)
    assert (before, read_roster(url).writer) == ("", "")
    deferred, busy = _Left(), _Left()
    deferred.took("c", step, 0.0)
    busy.took("c", PassSkipped("locked by another minidock process"), 0.0)
    assert not deferred.under_way
    assert busy.under_way


def test_the_command_names_the_watch_that_makes_each_clusters_passes(ha: EtcdSetup) -> None:
    """`decides`: the most senior member covering the cluster (core.deciding), in the
    table and the JSON; a member covering another cluster only decides none of these;
    the seniority and the decision are read, never written into the member key."""
    url = _url(str(ha.location))
    (cluster,) = [h.name for h in usecases_held(ha)]
    elsewhere, senior, junior = Membership(url), Membership(url), Membership(url)
    elsewhere.beat(cluster="another", interval=2.0)
    senior.beat(interval=2.0)
    junior.beat(interval=2.0)
    try:
        doc = json.loads(_minidock("controllers", "--json", "--state", str(ha.location)))
        decides = {m["id"]: m["decides"] for m in doc["members"]}
        assert decides == {
            elsewhere.member.id: [],
            senior.member.id: [cluster],
            junior.member.id: [],
        }
        assert [m["cluster"] for m in doc["members"]] == ["another", "", ""]
        shown = _minidock("controllers", "--state", str(ha.location)).splitlines()
        cells = {  # each member's row, its cells: the last is `decides`
            member_id: [c.strip() for c in line.split("│") if c.strip()]
            for line in shown
            for member_id in decides
            if member_id in line
        }
        assert cells[senior.member.id][-1] == cluster, shown
        assert cells[junior.member.id][-1] == "-", shown
        written = json.loads(senior.member.value())
        assert "decides" not in written
        assert "created" not in written
    finally:
        for member in (elsewhere, senior, junior):
            member.leave()


def usecases_held(setup: EtcdSetup) -> list[Held]:
    return held(_url(str(setup.location)))


def test_a_state_directory_has_no_member_keys_only_its_lock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    setup = EtcdSetup(tmp_path, str(state))  # its files, runtime and fakes, on a directory
    run(usecases.apply(setup.file, state, setup.runtime(), setup.report))
    assert usecases.controllers(state) == Roster((), "", "")
    shown = _minidock("controllers", "--state", str(state))
    assert "writer now: none (no pass under way)" in shown


def _minidock(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "minidock", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_metrics_give_a_series_per_controller(ha: EtcdSetup) -> None:
    from minidock.metrics import metrics_text

    url = _url(str(ha.location))
    member = Membership(url)
    member.beat(
        passes=4, warm=3, hosts=3, last_pass=1234.5, round_seconds={"web": 2.5}, pass_seconds=0.75
    )
    assert OwnerKeys.of(member).take("host1").got
    try:
        reading = run(usecases.read_fleet(url, ha.runtime()))
        assert [m.id for m in reading.controllers] == [member.member.id]
        text = metrics_text(reading).decode()
    finally:
        member.leave()
    mid = member.member.id
    assert (
        f'minidock_controller_up{{controller="{mid}",holder="{member.member.holder}"}} 1.0' in text
    )
    assert f'minidock_controller_passes{{controller="{mid}"}} 4.0' in text
    assert f'minidock_controller_hosts_connected{{controller="{mid}"}} 3.0' in text
    assert f'minidock_controller_hosts_owned{{controller="{mid}"}} 1.0' in text
    assert f'minidock_controller_last_pass_timestamp_seconds{{controller="{mid}"}} 1234.5' in text
    assert f'minidock_controller_lease_seconds_left{{controller="{mid}"}}' in text
    assert f'minidock_controller_last_pass_duration_seconds{{controller="{mid}"}} 0.75' in text
    assert f'minidock_controller_round_seconds{{cluster="web",controller="{mid}"}} 2.5' in text
    after = metrics_text(run(usecases.read_fleet(url, ha.runtime()))).decode()
    assert "minidock_controller_up" not in after  # it stopped: its series are gone


def test_status_names_each_hosts_controller_from_its_owner_key(ha: EtcdSetup) -> None:
    """A host whose owner key a watch holds shows that watch's id; one held by none, "".
    The document stays valid against the status schema."""
    from jsonschema import Draft202012Validator

    from minidock.documents.status import status_schema

    url = _url(str(ha.location))
    member = Membership(url)
    member.beat()
    doc = run(usecases.status(ha.location, ha.runtime())).document
    assert {h.controller for h in doc.hosts} == {""}  # no owner key yet
    first = doc.hosts[0].name
    assert OwnerKeys.of(member).take(owner_name(doc.cluster, first)).got
    try:
        doc = run(usecases.status(ha.location, ha.runtime())).document
        named = {h.name: h.controller for h in doc.hosts}
        assert named == {h.name: member.member.id if h.name == first else "" for h in doc.hosts}
        Draft202012Validator(status_schema()).validate(doc.to_json())
    finally:
        member.leave()


def test_a_state_directory_names_no_controller(tmp_path: Path) -> None:
    state = tmp_path / "state"
    setup = EtcdSetup(tmp_path, str(state))
    run(usecases.apply(setup.file, state, setup.runtime(), setup.report))
    assert host_owners(state) == {}
    doc = run(usecases.status(state, setup.runtime())).document
    assert {h.controller for h in doc.hosts} == {""}
