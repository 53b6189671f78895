"""The etcd store's own behaviour, on real etcd members (tests/etcd.py): the URL and its
options, the lease lock (free within the TTL after its holder dies, fenced after its
holder is paused), quorum lost and kept, TLS with client certificates and password auth,
and the SQLite path never loading the etcd client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from minidock import store as stores
from minidock.core import ControllerState
from minidock.store import (
    LeaseLost,
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    WriterBusy,
    parse_location,
)
from minidock.store.etcd import EtcdWriter, Keys, LeaseKeeper, Meta
from minidock.store.location import EtcdURL, parse_etcd_url
from tests.conftest import SECURE_PASSWORD, SECURE_USER
from tests.etcd import EtcdCluster
from tests.unit.test_state import _cluster, _event, _state

TTL = 2.0  # the etcd_url fixture's lease TTL


def _url(text: str) -> EtcdURL:
    location = parse_location(text)
    assert isinstance(location, EtcdURL)
    return location


def _holding(url: EtcdURL) -> EtcdWriter:
    writer = EtcdWriter(url)
    writer.acquire()
    return writer


def _acquire_within(url: EtcdURL, seconds: float) -> tuple[EtcdWriter, float]:
    """Try the lock every 0.1s until it is ours; (writer, seconds it took)."""
    start = time.monotonic()
    writer = EtcdWriter(url)
    while True:
        try:
            writer.acquire()
            return writer, time.monotonic() - start
        except WriterBusy:
            if time.monotonic() - start > seconds:
                writer.release()
                raise
            time.sleep(0.1)


# -- the URL ----------------------------------------------------------------------------------
def test_an_etcd_url_names_endpoints_and_a_prefix() -> None:
    url = parse_etcd_url("etcd://10.0.0.1:2379,etcd-b,[::1]:32379/minidock/prod/", environ={})
    assert [str(e) for e in url.endpoints] == ["10.0.0.1:2379", "etcd-b:2379", "[::1]:32379"]
    assert url.prefix == "/minidock/prod"
    assert (url.tls, url.ttl, url.timeout, url.user) == (False, 10.0, 5.0, None)
    assert str(url) == "etcd://10.0.0.1:2379,etcd-b:2379,[::1]:32379/minidock/prod"
    assert parse_etcd_url("etcds://h/p", environ={}).tls


def test_options_come_from_the_query_then_minidock_then_etcdctl_variables() -> None:
    env = {
        "ETCDCTL_CACERT": "/etc/ca.pem",
        "ETCDCTL_USER": "ops:from-etcdctl",
        "MINIDOCK_ETCD_TTL": "15s",
        "MINIDOCK_ETCD_CERT": "/etc/c.pem",
        "MINIDOCK_ETCD_KEY": "/etc/c.key",
    }
    url = parse_etcd_url("etcd://h:2379/p?ttl=4&timeout=800ms", environ=env)
    assert (url.ttl, url.timeout) == (4.0, 0.8)
    assert (url.cacert, url.cert, url.key) == (
        Path("/etc/ca.pem"),
        Path("/etc/c.pem"),
        Path("/etc/c.key"),
    )
    assert url.tls
    assert (url.user, url.password) == ("ops", "from-etcdctl")
    assert str(url) == "etcds://ops@h:2379/p"
    assert "from-etcdctl" not in repr(url)
    with_env_password = parse_etcd_url(
        "etcd://h/p?user=ci", environ={"MINIDOCK_ETCD_PASSWORD": "s3cret"}
    )
    assert (with_env_password.user, with_env_password.password) == ("ci", "s3cret")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("etcd://h:2379", "name a key prefix"),
        ("etcd://h:2379/", "name a key prefix"),
        ("etcd:///p", "no etcd endpoint"),
        ("etcd://h:99999/p", "bad port"),
        ("etcd://h:x/p", "bad endpoint"),
        ("etcd://h/p?ttl=1s", "too short"),
        ("etcd://h/p?ttl=ten", "ttl"),
        ("etcd://h/p?colour=red", "unknown option 'colour'"),
        ("etcd://h/p?cert=/c.pem", "needs both cert and key"),
        ("etcd://h/p?password=x", "no password in the URL"),
        ("etcd://ops@h/p", "needs MINIDOCK_ETCD_PASSWORD"),
    ],
)
def test_a_bad_etcd_url_is_refused_naming_what_to_fix(text: str, says: str) -> None:
    with pytest.raises(StoreUnusable, match=says):
        parse_etcd_url(text, environ={})


def test_a_password_in_the_url_never_reaches_a_message() -> None:
    with pytest.raises(StoreUnusable) as info:
        parse_etcd_url("etcd://ops:hunter2@h:1/p?colour=red", environ={})
    assert "hunter2" not in str(info.value)
    assert "ops:***@h:1" in str(info.value)
    assert "hunter2" not in str(parse_etcd_url("etcd://ops:hunter2@h/p", environ={}))


def test_the_state_location_rule_reads_an_etcd_url_from_flag_or_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MINIDOCK_STATE", "etcd://e1:2379/from-env")
    assert stores.state_location(None) == parse_etcd_url("etcd://e1:2379/from-env")
    assert stores.state_location(str(tmp_path)) == tmp_path
    monkeypatch.delenv("MINIDOCK_STATE")
    monkeypatch.chdir(tmp_path)
    assert stores.state_location(None) == tmp_path / ".minidock"


def test_an_etcd_store_makes_its_controller_id_once_and_keeps_it(
    etcd_url: str, etcd_cluster: EtcdCluster
) -> None:
    url = parse_etcd_url(etcd_url)
    made = stores.controller_id(url)
    assert re.fullmatch(r"[0-9a-f]{12}", made)
    assert stores.controller_id(url) == made  # read back, not made again
    assert stores.controller_id(parse_etcd_url(etcd_cluster.url(ttl="2s"))) != made


# -- the lease lock -------------------------------------------------------------------------
_HOLDER = """
import sys, time
from minidock.store import LeaseLost, parse_location
from minidock.store.etcd import EtcdWriter
from tests.unit.test_state import _event, _state
url, local_fence = parse_location(sys.argv[1]), sys.argv[2] == "fence"
writer = EtcdWriter(url)
writer.acquire()
store = writer.store()
if not local_fence:
    writer.fence = lambda: None  # only etcd's own check (the fenced transaction) is left
print("acquired", flush=True)
sys.stdin.readline()
try:
    store.fence()
    store.commit(_state(9), [_event(9)])
except LeaseLost as exc:
    print(exc, flush=True)
    sys.exit(75)
print("committed", flush=True)
"""


def _holder(url: str, mode: str = "fence") -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "acquired"
    return child


def _end(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            stream.close()


def test_a_killed_holders_lock_is_free_within_the_ttl(etcd_url: str) -> None:
    url = _url(etcd_url)
    child = _holder(etcd_url)
    try:
        with pytest.raises(WriterBusy, match=f"pid {child.pid} on "):
            _holding(url)
        child.kill()  # kill -9: no release, no revoke; only the lease's TTL frees the lock
        child.wait(timeout=10)
        writer, took = _acquire_within(url, TTL + 3)
        writer.release()
    finally:
        _end(child)
    assert took <= TTL + 1.5, f"the lock took {took:.1f}s to come free (ttl {TTL}s)"


@pytest.mark.parametrize("check", ["fence", "etcd-only"])
def test_a_holder_paused_past_its_ttl_commits_nothing_when_it_resumes(
    etcd_url: str, check: str
) -> None:
    """SIGSTOP the holder, let another writer take the lock and commit, SIGCONT: the old
    holder's commit is refused, by its own fence or (with that disabled) by etcd."""
    url = _url(etcd_url)
    child = _holder(etcd_url, check)
    try:
        os.kill(child.pid, signal.SIGSTOP)
        successor, took = _acquire_within(url, TTL + 3)
        assert took >= TTL / 2, "the lock came free while its holder's lease was fresh"
        after = successor.store()
        after.commit(_state(1), [_event(1)], _cluster(1))
        os.kill(child.pid, signal.SIGCONT)
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write("commit\n")
        child.stdin.flush()
        line = child.stdout.readline().strip()
        assert child.wait(timeout=20) == 75, line
        assert line.startswith(f"lost the writer lease on {url}")
        assert "commits nothing more" in line
        assert after.load() == _state(1)
        assert [e.message for _, e in after.events(limit=0)] == ["commit 1"]
        successor.release()
    finally:
        _end(child)


def test_the_holders_own_fence_fails_before_anyone_else_can_take_the_lock(
    etcd_url: str,
) -> None:
    """The fencing argument: renewals stop (a pause, a partition); this process's
    deadline passes before etcd expires the lease, so it stops acting first."""
    url = _url(etcd_url)
    holder = _holding(url)
    assert holder._keeper is not None
    holder._keeper.stop()  # no more renewals, as if cut off from etcd
    contender = EtcdWriter(url)
    fenced_at = taken_at = None
    start = time.monotonic()
    while taken_at is None and time.monotonic() - start < TTL + 5:
        if fenced_at is None:
            try:
                holder.fence()
            except LeaseLost:
                fenced_at = time.monotonic() - start
        try:
            contender.acquire()
            taken_at = time.monotonic() - start
        except WriterBusy:
            time.sleep(0.05)
    assert fenced_at is not None
    assert taken_at is not None
    assert fenced_at < taken_at
    with pytest.raises(LeaseLost):
        holder.store().commit(ControllerState())
    holder.release()
    contender.release()


def test_a_lease_is_kept_alive_through_a_pass_longer_than_its_ttl(etcd_url: str) -> None:
    url = _url(etcd_url)
    holder = _holding(url)
    store = holder.store()
    until = time.monotonic() + 3 * TTL
    commits = 0
    while time.monotonic() < until:
        store.fence()
        store.commit(_state(1), [_event(commits)])
        commits += 1
        with pytest.raises(WriterBusy):
            _holding(url)
        time.sleep(0.3)
    assert commits >= 10
    holder.release()
    _holding(url).release()  # released at once, not after the TTL


def _keeper_whose_renewal(stops_first: bool) -> LeaseKeeper:
    """A keeper whose one renewal meets a closed grpc channel (ValueError), as when the
    writer's client is closed while the renewal is under way (`stops_first`: released)."""
    keeper: LeaseKeeper

    def keep_alive(lease_id: int, budget: float) -> int:
        if stops_first:
            keeper.stop()
        raise ValueError("Cannot invoke RPC: Channel closed!")

    writer: Any = SimpleNamespace(
        client=SimpleNamespace(keep_alive=keep_alive), url=SimpleNamespace(timeout=1.0)
    )
    keeper = LeaseKeeper(writer, 7, 0.15, time.monotonic())
    return keeper


@pytest.mark.parametrize("released", [True, False], ids=["released", "closed-under-it"])
def test_a_renewal_on_a_closed_channel_ends_the_keeper_and_only_a_release_is_not_a_loss(
    released: bool,
) -> None:
    """A release closes the client right after stopping the keeper; a renewal already under
    way then meets a closed channel: that ends the keeper quietly (it used to raise in its
    thread). A channel closed with no release is a lost lease."""
    keeper = _keeper_whose_renewal(stops_first=released)
    keeper.start()
    keeper.join(timeout=5)
    assert not keeper.is_alive()
    if released:
        assert keeper.lost is None
    else:
        with pytest.raises(LeaseLost, match="its connection to etcd was closed"):
            keeper.check()


def test_a_reader_cannot_commit(etcd_url: str) -> None:
    reader = stores.open_reader(_url(etcd_url))
    with pytest.raises(StoreUnusable, match="only the writer lock's holder may commit"):
        reader.commit(ControllerState())
    reader.close()


# -- transactions that meet a surprise ------------------------------------------------------
def test_a_commit_whose_first_try_landed_is_not_taken_for_a_conflict(etcd_url: str) -> None:
    """A retried commit (the first reply was lost, another endpoint got the retry) finds
    PREFIX/meta changed by itself: its token says so, and it is a success."""
    holder = _holding(_url(etcd_url))
    store = holder.store()
    store.commit(_state(1), [_event(1)], _cluster(1))
    before_rev, landed = holder.meta_rev, holder.meta
    store.commit(_state(1), [_event(2)])
    repeat = holder.meta
    holder.meta, holder.meta_rev = landed, before_rev  # as if the reply had been lost
    holder.fenced_txn([], repeat)
    assert holder.meta == repeat
    store.commit(_state(1), [_event(3)])
    assert [e.message for _, e in store.events(limit=0)] == ["commit 1", "commit 2", "commit 3"]
    holder.release()


def test_a_state_changed_behind_the_holders_back_is_refused(
    etcd_url: str, etcd_cluster: EtcdCluster
) -> None:
    url = _url(etcd_url)
    holder = _holding(url)
    store = holder.store()
    store.commit(_state(1), [_event(1)], _cluster(1))
    meta = Meta(generation=1, event=1, writer="an operator with etcdctl", commit="x")
    done = etcd_cluster.etcdctl("put", Keys(url.prefix).meta.decode(), meta.dumps())
    assert done.returncode == 0, done.stderr
    with pytest.raises(StoreError, match="changed by an operator with etcdctl"):
        store.commit(_state(2), [_event(2)])
    assert store.load() == _state(1)
    holder.release()


def test_a_state_of_a_newer_schema_is_refused(etcd_url: str, etcd_cluster: EtcdCluster) -> None:
    url = _url(etcd_url)
    done = etcd_cluster.etcdctl("put", Keys(url.prefix).meta.decode(), json.dumps({"schema": 99}))
    assert done.returncode == 0, done.stderr
    with pytest.raises(StoreUnusable, match="schema version 99"):
        stores.open_reader(url)
    writer = EtcdWriter(url)
    with pytest.raises(StoreUnusable, match="upgrade minidock"):
        writer.acquire()
    writer.release()


def test_a_commit_past_the_members_request_limit_names_the_limit_and_the_fix(
    etcd_url: str,
) -> None:
    """etcd refuses a request over --max-request-bytes (1.5 MiB by default): a commit's
    state keys are spread over transactions within it, but one value past it (here a
    commit's events) is refused in one line naming the member's limit and what to raise;
    nothing is written."""
    holder = _holding(_url(etcd_url))
    store = holder.store()
    store.commit(_state(1), [_event(1)], _cluster(1))
    for size in (1.7, 2.5):  # MiB: etcd's refusal, then its gRPC server's (past 2 MiB)
        huge = replace(_event(2), message="x" * int(size * 1024 * 1024))
        with pytest.raises(StoreError) as refused:
            store.commit(_state(1), [huge])
        line = str(refused.value)
        assert "\n" not in line
        assert "--max-request-bytes" in line
        assert "raise it on every member" in line
    assert [e.message for _, e in store.events(limit=0)] == ["commit 1"]
    holder.release()


# -- quorum -----------------------------------------------------------------------------------
def test_one_member_of_three_down_changes_nothing(etcd_url: str, etcd_cluster: EtcdCluster) -> None:
    url = _url(etcd_url)
    etcd_cluster.stop_member(0)  # the first endpoint of the URL
    holder = _holding(url)
    store = holder.store()
    store.commit(_state(1), [_event(1)], _cluster(1))
    assert stores.open_reader(url).load() == _state(1)
    holder.release()


def test_two_members_of_three_down_is_no_quorum_said_at_once(
    etcd_url: str, etcd_cluster: EtcdCluster
) -> None:
    url = _url(etcd_url)
    holder = _holding(url)
    store = holder.store()
    store.commit(_state(1), [_event(1)], _cluster(1))
    etcd_cluster.stop_member(1)
    etcd_cluster.stop_member(2)
    start = time.monotonic()
    with pytest.raises(StoreUnavailable, match="no quorum") as info:
        store.commit(_state(2), [_event(2)], _cluster(2))
    assert time.monotonic() - start < url.timeout + 4
    assert "1 of 3 endpoints answer and none has a leader" in str(info.value)
    time.sleep(1.5)  # the lone member has noticed: a new writer is refused without waiting
    start = time.monotonic()
    with pytest.raises(StoreUnavailable, match="no quorum"):
        EtcdWriter(url).acquire()
    assert time.monotonic() - start < url.timeout  # refused before its timeout could pass
    holder.release()  # its lease expires by itself
    etcd_cluster.ensure_all()
    reader = stores.open_reader(url)
    # The unanswered commit may have been proposed before quorum went, and land now: its
    # outcome was unknown, never torn (docs/ha.md: like a crash after a commit).
    landed = reader.load().generation
    assert reader.load() == _state(landed)
    assert [e.message for _, e in reader.events(limit=0)] == [
        f"commit {i}" for i in range(1, landed + 1)
    ]
    reader.close()


def test_no_endpoint_answering_says_so(etcd_cluster: EtcdCluster) -> None:
    from tests.etcd import free_ports

    port = free_ports(1)[0]
    url = _url(f"etcd://127.0.0.1:{port}/nobody?timeout=1s")
    start = time.monotonic()
    with pytest.raises(StoreUnavailable, match=f"no etcd endpoint answers \\(127.0.0.1:{port}"):
        stores.open_reader(url)
    assert time.monotonic() - start < 5


# -- TLS and auth -----------------------------------------------------------------------------
def _secure_url(cluster: EtcdCluster, **query: str) -> str:
    assert cluster.tls is not None
    files = {
        "cacert": str(cluster.tls.ca),
        "cert": str(cluster.tls.client_cert),
        "key": str(cluster.tls.client_key),
    }
    return cluster.url("/secure/t", **{**files, **query})


def test_tls_with_client_certificates_and_a_password(
    etcd_secure: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIDOCK_ETCD_PASSWORD", SECURE_PASSWORD)
    url = _url(_secure_url(etcd_secure, user=SECURE_USER))
    assert url.tls
    holder = _holding(url)
    holder.store().commit(_state(1), [_event(1)], _cluster(1))
    holder.release()
    reader = stores.open_reader(url)
    assert reader.latest_generation() == (1, _cluster(1))
    reader.close()


def test_a_wrong_password_is_one_line_without_the_password(
    etcd_secure: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIDOCK_ETCD_PASSWORD", "not-the-password")
    url = _url(_secure_url(etcd_secure, user=SECURE_USER))
    with pytest.raises(StoreUnusable, match="authentication failed") as info:
        stores.open_reader(url).load()
    assert "not-the-password" not in str(info.value)
    assert "\n" not in str(info.value)


def test_a_prefix_the_user_may_not_write_is_refused(
    etcd_secure: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIDOCK_ETCD_PASSWORD", SECURE_PASSWORD)
    assert etcd_secure.tls is not None
    url = _url(_secure_url(etcd_secure, user=SECURE_USER).replace("/secure/t", "/elsewhere"))
    with pytest.raises(StoreUnusable, match="permission denied"):
        EtcdWriter(url).acquire()


def test_tls_without_the_servers_ca_is_refused(etcd_secure: EtcdCluster) -> None:
    url = _url(etcd_secure.url("/secure/t", timeout="1s").replace("etcd://", "etcds://"))
    with pytest.raises(StoreUnavailable, match="no etcd endpoint answers"):
        stores.open_reader(url)


# -- the SQLite path never loads the etcd client --------------------------------------------------
_PROBE = """
import sys
from minidock.cli import main
sys.argv = ["minidock", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    print("EXIT:", exc.code)
etcd = sorted(m for m in sys.modules if m.split(".")[0] in ("grpc", "aetcd")
              or m.startswith("minidock.store.etcd"))
print("ETCD-MODULES:" + " ".join(etcd))
"""


def _etcd_modules_after(*args: str) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    marker = [line for line in lines if line.startswith("ETCD-MODULES:")]
    exit_line = [line for line in lines if line.startswith("EXIT:")]
    assert len(marker) == 1, done.stdout + done.stderr
    return (exit_line[0] if exit_line else ""), marker[0].removeprefix("ETCD-MODULES:").split()


def test_the_sqlite_path_never_imports_the_etcd_client(tmp_path: Path) -> None:
    state = tmp_path / "state"
    writer = stores.writer_lock(state)
    stores.prepare(state)
    writer.acquire()
    writer.store().commit(_state(1), [_event(1)], _cluster(1))
    writer.release()
    for args in (["events", "--state", str(state)], ["reconcile", "--state", str(tmp_path / "no")]):
        code, loaded = _etcd_modules_after(*args)
        assert loaded == [], (args, code)
    assert _etcd_modules_after("events", "--state", str(state))[0] == "EXIT: 0"


def test_the_etcd_path_does_import_it(etcd_url: str) -> None:
    """The check above can fail: an etcd state loads the client."""
    code, loaded = _etcd_modules_after("events", "--state", etcd_url)
    assert code == "EXIT: 2"  # nothing applied there yet
    assert {"aetcd", "grpc", "minidock.store.etcd", "minidock.store.etcd_client"} <= set(loaded)
