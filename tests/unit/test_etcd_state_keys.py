"""The etcd store keeps the controller state in a key per host, service and slot (schema 4,
issue 47's first step: docs/scale.md, "What etcd carries"): a fleet past what one etcd
request holds commits, a commit rewrites only what changed, a commit in several
transactions is never seen half-done and is put back when cut short, and a read whose
revision etcd compacted away still answers. On real etcd members (tests/etcd.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidock.core import ControllerState
from minidock.core.hosts import HostState, SeenTask
from minidock.core.slots import SlotPhase, SlotState
from minidock.model import Host
from minidock.store import LeaseLost, codec, parse_location, parts
from minidock.store import etcd as etcd_store
from minidock.store.codec import Codec
from minidock.store.etcd import EtcdStore, EtcdWriter, _batches, every_key
from minidock.store.etcd_client import put, rpc
from minidock.store.location import EtcdURL
from minidock.store.sealing import KeyProblem, key_box
from tests.etcd import EtcdCluster
from tests.unit.test_state import _cluster, _event, _state

REQUEST_LIMIT = int(1.5 * 1024 * 1024)  # etcd's --max-request-bytes default (the fixture's)


def _url(text: str) -> EtcdURL:
    url = parse_location(text)
    assert isinstance(url, EtcdURL)
    return url


@pytest.fixture
def holder(etcd_url: str) -> Iterator[EtcdWriter]:
    writer = EtcdWriter(_url(etcd_url))
    writer.acquire()
    yield writer
    writer.release()


def _fleet(hosts: int, generation: int = 1) -> ControllerState:
    """`hosts` hosts of 2 tasks each (the records of docs/scale.md's sizes), on top of the
    rich state of test_state."""
    base = _state(generation)
    records = {}
    slots = {}
    for n in range(hosts):
        name = f"host-{n:06d}"
        host = Host(name=name, address=f"10.1.{n // 250}.{n % 250}", cpus=4.0, memory=8 << 30)
        tasks = tuple(SeenTask("web", 2 * n + i, f"web.{2 * n + i}.3f9a", "9c1e") for i in range(2))
        records[name] = HostState(last_seen=1796490217.5, tasks=tasks, last_known=host)
        for i in range(2):
            slot = SlotState(phase=SlotPhase.RUNNING, task=f"web.{2 * n + i}.3f9a", host=name)
            slots[2 * n + i + 10] = slot
    web = base.services["web"]
    services = {**base.services, "web": replace(web, slots={**web.slots, **slots})}
    return replace(base, hosts={**base.hosts, **records}, services=services)


def _revisions(store: EtcdStore) -> dict[bytes, int]:
    return {bytes(kv.key): int(kv.mod_revision) for kv in every_key(store, store.keys.state, 0)}


def test_a_fleet_past_one_requests_limit_commits_and_reads_back(holder: EtcdWriter) -> None:
    """2,000 hosts of 2 tasks: as one key, about 1.8 MB, past etcd's 1.5 MiB request limit
    (the state was one key up to schema 3: such a commit was refused)."""
    state = _fleet(2000)
    assert len(codec.dumps(state)) > REQUEST_LIMIT
    store = holder.store()
    store.commit(state, [_event(1)], _cluster(1))
    reader = EtcdStore.open(holder.url)
    try:
        assert reader.load() == state
        assert reader.snapshot().state == state
    finally:
        reader.close()
    slots = sum(len(s.slots) for s in state.services.values())
    assert len(_revisions(store)) == 2 + len(state.hosts) + len(state.services) + slots


def test_a_commit_rewrites_only_the_keys_that_changed(holder: EtcdWriter) -> None:
    store = holder.store()
    state = _fleet(300)
    store.commit(state, [_event(1)], _cluster(1))
    before = _revisions(store)
    host = state.hosts["host-000042"]
    changed = replace(state, hosts={**state.hosts, "host-000042": replace(host, failures=1)})
    store.commit(changed, [_event(2)])
    after = _revisions(store)
    assert {k for k in after if after[k] != before.get(k)} == {
        store.keys.state + b"hosts/host-000042"
    }
    gone = {h: r for h, r in changed.hosts.items() if h != "host-000007"}
    store.commit(replace(changed, hosts=gone), [_event(3)])
    assert set(after) - set(_revisions(store)) == {store.keys.state + b"hosts/host-000007"}
    assert store.load() == replace(changed, hosts=gone)


def test_a_commit_cut_short_is_never_read_and_the_next_writer_puts_it_back(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is deposed after its commit's first transactions, before the one that
    writes PREFIX/meta: readers still read the last whole commit, and the next holder puts
    the keys it left back before it reads."""
    url = _url(etcd_url)
    first = EtcdWriter(url)
    first.acquire()
    store = first.store()
    whole = _fleet(400)
    store.commit(whole, [_event(1)], _cluster(1))
    changed = _fleet(400, generation=2)
    changed = replace(changed, hosts={h: replace(r, failures=3) for h, r in changed.hosts.items()})

    def deposed(ops: list[Any], new: object) -> None:
        raise LeaseLost("deposed before its last transaction")

    monkeypatch.setattr(first, "fenced_txn", deposed)
    with pytest.raises(LeaseLost):
        store.commit(changed, [_event(2)])
    newer = [k for k, rev in _revisions(store).items() if rev > first.meta_rev]
    assert len(newer) > 100  # several transactions landed
    reader = EtcdStore.open(url)
    assert reader.load() == whole
    reader.close()
    first.release()

    second = EtcdWriter(url)
    second.acquire()
    try:
        again = second.store()
        now = {bytes(kv.key): bytes(kv.value) for kv in every_key(again, again.keys.state, 0)}
        assert now == again.state_keys(second.meta_rev)
        assert again.load() == whole
        again.commit(changed, [_event(2)])
        assert again.load() == changed
    finally:
        second.release()


def test_a_state_read_at_a_compacted_revision_is_read_at_the_newest(
    holder: EtcdWriter, etcd_cluster: EtcdCluster
) -> None:
    """etcd's auto-compaction may drop PREFIX/meta's revision from the history: the state
    (whole, since no commit was cut short) is then read as it is now."""
    store = holder.store()
    state = _fleet(20)
    store.commit(state, [_event(1)], _cluster(1))
    other = (holder.url.prefix.rstrip("/") + "-elsewhere").encode()
    reply = holder.client.txn(rpc.TxnRequest(success=[put(other, b"x")]))
    holder.client.compact(int(reply.header.revision))
    assert holder.meta_rev < int(reply.header.revision)
    reader = EtcdStore.open(holder.url)
    try:
        assert reader.load() == state
    finally:
        reader.close()
    holder.release()
    after = EtcdWriter(holder.url)
    after.acquire()
    try:
        assert after.store().load() == state
    finally:
        after.release()


def _state_reads(store: EtcdStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The revisions at which `store` ranges over PREFIX/state/ from now on."""
    reads: list[int] = []
    ranged = store.client.range

    def counted(request: Any) -> Any:
        if bytes(request.key).startswith(store.keys.state):
            reads.append(int(request.revision))
        return ranged(request)

    monkeypatch.setattr(store.client, "range", counted)
    return reads


def test_a_revision_read_again_is_the_last_read_and_a_commit_is_read_anew(
    holder: EtcdWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two reads of one revision (by two stores of this process) range over the state
    keys once; after another process's commit the next read does, after this process's
    own it needs not (its keys are the commit's); a read compacted away (read at the
    newest revision) is not kept for its revision."""
    store = holder.store()
    state = _fleet(20)
    store.commit(state, [_event(1)], _cluster(1))
    reader = EtcdStore.open(holder.url)
    other = EtcdStore.open(holder.url)
    try:
        reads = _state_reads(reader, monkeypatch)
        first = holder.meta_rev
        assert reader.load() == state
        assert reads == []  # the keys this process's commit left
        etcd_store._READS.clear()  # as another process
        assert reader.load() == state
        assert other.load() is reader.load()
        assert reads == [first]
        later = replace(state, hosts={h: replace(r, failures=2) for h, r in state.hosts.items()})
        store.commit(later, [_event(2)])
        second = holder.meta_rev
        assert reader.load() == later
        assert reads == [first]
        etcd_store._READS.clear()
        assert reader.load() == later
        assert reads == [first, second]
        elsewhere = (holder.url.prefix.rstrip("/") + "-elsewhere").encode()
        reply = holder.client.txn(rpc.TxnRequest(success=[put(elsewhere, b"x")]))
        holder.client.compact(int(reply.header.revision))
        etcd_store._READS.clear()  # as a process that never read it
        assert reader.load() == later  # compacted away: read at the newest revision (0)
        assert reader.load() == later
        assert reads == [first, second, second, 0, second, 0]
    finally:
        reader.close()
        other.close()


def test_a_read_of_the_revision_this_process_committed_is_a_read_of_its_keys(
    holder: EtcdWriter,
) -> None:
    """After commits that changed records, added and removed them, the state read from
    the commit's own keys is the one a process that never wrote it reads, in its orders."""
    store = holder.store()
    state = _fleet(12)
    store.commit(state, [_event(1)], _cluster(1))
    hosts = dict(state.hosts)
    hosts["host-000002"] = replace(hosts["host-000002"], failures=3, last_seen=2e9)
    del hosts["host-000004"]
    web = state.services["web"]
    slots = {n: s for n, s in web.slots.items() if n != 12} | {99: replace(web.slots[10])}
    later = replace(
        state, hosts=hosts, services={**state.services, "web": replace(web, slots=slots)}
    )
    store.commit(later, [_event(2)])
    reader = EtcdStore.open(holder.url)
    try:
        own = reader.load()
        etcd_store._READS.clear()
        fresh = reader.load()
        assert own == fresh == later
        assert _orders(own) == _orders(fresh)
    finally:
        reader.close()


def test_one_prefix_on_two_etcd_clusters_at_one_revision_reads_each_its_own(
    tmp_path: Path,
) -> None:
    """Two fresh etcd clusters, each given the same prefix and the same history, so that
    their commits land at one revision: what this process read and committed of one is
    never the other's (as `state migrate` reads one and writes the other)."""
    clusters = [EtcdCluster(tmp_path / f"etcd{i}", size=1) for i in range(2)]
    writers: list[EtcdWriter] = []
    try:
        for cluster in clusters:
            cluster.start()
            writers.append(EtcdWriter(_url(cluster.url(prefix="/same"))))
        for writer in writers:
            writer.acquire()
        states = [_fleet(3), replace(_fleet(3), hosts={})]
        for writer, state in zip(writers, states, strict=True):
            writer.store().commit(state, [_event(1)], _cluster(1))
        assert writers[0].meta_rev == writers[1].meta_rev
        for writer, state in zip(writers, states, strict=True):
            reader = EtcdStore.open(writer.url)
            assert reader.load() == state
            reader.close()
    finally:
        for writer in writers:
            writer.release()
        for cluster in clusters:
            cluster.close()


def test_a_revision_read_with_one_key_is_read_afresh_with_another(
    holder: EtcdWriter, tmp_path: Path
) -> None:
    """The last read is kept by the key that opened its secrets: a store of this process
    with another key reads the same revision afresh, and is refused as it always was."""
    store = holder.store()
    base = _fleet(3)
    db = base.services["db"]
    sealed = replace(db, spec=replace(db.spec, secrets=(("PASSWORD", "s3cret"),)))
    state = replace(base, services={**base.services, "db": sealed})
    store.commit(state, [_event(1)], _cluster(1))
    reader = EtcdStore.open(holder.url)
    other = EtcdStore.open(holder.url)
    try:
        assert reader.load() == state
        other._codec = Codec(key_box(tmp_path / "other.key", holds_sealed=lambda: False))
        with pytest.raises(KeyProblem, match="sealed with key"):
            other.load()
        assert reader.load() == state
    finally:
        reader.close()
        other.close()


# -- the pure parts ---------------------------------------------------------------------------
def test_split_then_join_is_the_codecs_own_round_trip() -> None:
    state = _fleet(3)
    data = codec.to_data(state)
    assert codec.from_data(parts.join(parts.split(data)), ControllerState) == state
    assert parts.join({}) is None


def test_a_pass_that_only_saw_its_hosts_again_changes_one_key_not_one_a_host() -> None:
    """Every probe that answers sets its host's last_seen: kept in `seen`, so the host keys
    stay as they were."""
    state = _fleet(50)
    later = replace(state, hosts={h: replace(r, last_seen=2e9) for h, r in state.hosts.items()})
    before, after = parts.split(codec.to_data(state)), parts.split(codec.to_data(later))
    assert {k for k in after if after[k] != before.get(k)} == {parts.SEEN}
    assert codec.from_data(parts.join(after), ControllerState) == later


def _read(records: codec.StateRecords, documents: dict[str, bytes]) -> ControllerState:
    """A read as EtcdStore.state_at makes it: the state without its records, then them."""
    data = parts.join(documents, records=False)
    assert data is not None
    return records.fill(codec.from_data(data, ControllerState), documents)


def _orders(state: ControllerState) -> list[object]:
    return [list(state.hosts), [(n, list(ss.slots)) for n, ss in state.services.items()]]


def test_a_read_with_kept_records_is_the_whole_structure_in_the_same_order() -> None:
    state = _fleet(30)
    documents = parts.split(codec.to_data(state))
    whole = codec.from_data(parts.join(documents), ControllerState)
    records = codec.StateRecords()
    first, again = _read(records, documents), _read(records, documents)
    assert first == again == whole == state
    assert _orders(first) == _orders(again) == _orders(whole)


def test_a_read_structures_again_only_the_records_whose_document_changed() -> None:
    """Between two reads one host's record and one slot changed, and every host was seen
    again: the others are the very objects of the first read, with their new last_seen."""
    state = _fleet(30)
    records = codec.StateRecords()
    first = _read(records, parts.split(codec.to_data(state)))
    web = state.services["web"]
    changed = replace(web.slots[10], phase=SlotPhase.EMPTY, task="")
    hosts = {h: replace(r, last_seen=2e9) for h, r in state.hosts.items()}
    hosts["host-000003"] = replace(hosts["host-000003"], failures=1)
    services = {**state.services, "web": replace(web, slots={**web.slots, 10: changed})}
    later = replace(state, hosts=hosts, services=services)
    second = _read(records, parts.split(codec.to_data(later)))
    assert second == later
    assert _orders(second) == _orders(later)
    rebuilt = [h for h, r in second.hosts.items() if r.tasks is not first.hosts[h].tasks]
    assert rebuilt == ["host-000003"]
    slots_now, slots_then = second.services["web"].slots, first.services["web"].slots
    assert [n for n in slots_now if slots_now[n] is not slots_then[n]] == [10]


def test_two_hosts_of_one_document_and_a_host_never_seen_read_apart() -> None:
    """Identical host documents share one structured record; each host still gets its own
    last_seen, and one never seen keeps None."""
    twin = HostState(tasks=(SeenTask("web", 1, "web.1.aa", "9c1e"),))
    state = replace(
        ControllerState(),
        hosts={"a": replace(twin, last_seen=5.0), "b": replace(twin, last_seen=7.0), "c": twin},
    )
    read = _read(codec.StateRecords(), parts.split(codec.to_data(state)))
    assert read == state
    assert read.hosts["a"].tasks is read.hosts["b"].tasks


def test_documents_are_the_whole_split_and_a_commit_again_encodes_only_what_changed() -> None:
    """A state's documents as the whole encoding gives them; written again after a pass
    that saw every host again, changed one host's record and one slot, dropped a host and
    added one: the unchanged records' documents are the very bytes written before (equal
    copies of records included), the others encoded afresh, each equal to the whole."""
    state = _fleet(30)
    records = codec.StateRecords()
    first = records.documents(Codec(None), state)
    assert first == parts.split(codec.to_data(state))
    web = state.services["web"]
    changed = replace(web.slots[10], phase=SlotPhase.EMPTY, task="")
    hosts = {h: replace(r, last_seen=2e9) for h, r in state.hosts.items()}
    hosts["host-000003"] = replace(hosts["host-000003"], failures=1)
    copied = tuple(replace(t) for t in hosts["host-000004"].tasks)  # equal, not the same
    hosts["host-000004"] = replace(hosts["host-000004"], tasks=copied)
    del hosts["host-000005"]
    hosts["host-000099"] = replace(hosts["host-000006"], last_known=Host("host-000099", "10.9.9.9"))
    slots = {n: replace(slot) for n, slot in web.slots.items()} | {10: changed}
    later = replace(
        state, hosts=hosts, services={**state.services, "web": replace(web, slots=slots)}
    )
    second = records.documents(Codec(None), later)
    assert second == parts.split(codec.to_data(later))
    fresh = {name for name, raw in second.items() if raw is not first.get(name)}
    assert fresh == {
        "hosts/host-000003", "hosts/host-000099", "slots/web/10", parts.SEEN, parts.REST,
        *(name for name in second if name.startswith("services/")),
    }  # fmt: skip


def test_documents_of_a_sealing_codec_read_back_and_hold_no_clear_secret(tmp_path: Path) -> None:
    """The services' secrets are sealed in their documents (each time afresh), the records'
    documents are the codec's own: the whole reads back through a codec with the key."""
    state = _fleet(3)
    db = state.services["db"]
    sealed = replace(db, spec=replace(db.spec, secrets=(("PASSWORD", "s3cret"),)))
    state = replace(state, services={**state.services, "db": sealed})
    box = Codec(key_box(tmp_path / "a.key", holds_sealed=lambda: False))
    records = codec.StateRecords()
    for _ in range(2):
        documents = records.documents(box, state)
        assert not any(b"s3cret" in raw for raw in documents.values())
        assert box.from_data(parts.join(documents), ControllerState) == state
        assert {k: v for k, v in documents.items() if k.startswith(("hosts/", "slots/"))} == {
            k: v for k, v in parts.split(codec.to_data(state)).items()
            if k.startswith(("hosts/", "slots/"))
        }  # fmt: skip


def test_changes_are_the_puts_and_deletes_between_two_key_sets() -> None:
    current = {b"a": b"1", b"b": b"2", b"c": b"3"}
    target = {b"a": b"1", b"b": b"9", b"d": b"4"}
    assert parts.changes(current, target) == ({b"b": b"9", b"d": b"4"}, [b"c"])


@given(
    st.lists(st.integers(min_value=0, max_value=400_000), max_size=400),
    st.lists(st.integers(min_value=0, max_value=250_000), min_size=1, max_size=4),
)
def test_batches_keep_every_op_in_order_within_the_limits_and_the_final_ops_last(
    sizes: list[int], final_sizes: list[int]
) -> None:
    ops = [(("op", i), n) for i, n in enumerate(sizes)]
    final = [(("final", i), n) for i, n in enumerate(final_sizes)]
    batches = _batches(ops, final)
    assert [op for batch in batches for op in batch] == [op for op, _ in ops + final]
    assert batches[-1][-len(final) :] == [op for op, _ in final]
    size = dict(ops + final)
    for batch in batches:
        assert len(batch) <= 100
        assert len(batch) == 1 or sum(size[op] for op in batch) <= 1 << 20
