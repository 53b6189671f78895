"""Reading and writing an etcd state (issue 47): one `EtcdStore.load()` of a fleet's
state, as every `watch` makes a few times a pass, and one `commit` of it, as a deciding
`watch` makes two or three times a pass. Reads: *whole*, each host's and slot's record
structured afresh, what every read did before `codec.StateRecords`; *after another's
pass*, the first read after another process's commit that saw every host again and
changed one host's record and one slot, the last read's records kept (one read); *after
its own*, the same read in the process that made the commit (its keys are the
commit's: no range over them); *again*, a read of the revision already read. Commits,
each of a pass later (every host seen again, one host's record and one slot changed):
*whole*, every record encoded afresh, what every commit did before
`StateRecords.documents`; *after a pass*, the records last written kept.

    .venv/bin/python benchmarks/bench_state_read.py                 # 1,000 and 10,000 hosts
    .venv/bin/python benchmarks/bench_state_read.py --hosts 1000 --runs 15

An etcd member of its own on free loopback ports (tests/etcd.py); a state of one service
with a task on each host (the shape of bench_watches.py's fleet), committed by the lock's
holder. *Whole* and *again* are the median (min-max) of `--runs` reads of the same
revision in this process, the commits of `--runs` commits one after another, the etcd
round trips included; docs/benchmarks.md keeps the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.core import ControllerState  # noqa: E402
from minidock.core.hosts import HostState, SeenTask  # noqa: E402
from minidock.core.slots import SlotPhase, SlotState  # noqa: E402
from minidock.core.state import ServiceState  # noqa: E402
from minidock.model import MAX_REPLICAS, Host, Service  # noqa: E402
from minidock.store import etcd as etcd_store  # noqa: E402
from minidock.store import parse_location, parts  # noqa: E402
from minidock.store.etcd import EtcdStore, EtcdWriter  # noqa: E402
from minidock.store.location import EtcdURL  # noqa: E402
from tests.etcd import EtcdCluster  # noqa: E402


def fleet(hosts: int, seen_at: float) -> ControllerState:
    """`hosts` hosts, each with its task as a pass records it: services of up to
    `MAX_REPLICAS` tasks (`web0`, `web1`, ...), one slot a host."""
    records, services = {}, {}
    for n in range(hosts):
        name = f"s{n:05d}"
        host = Host(name=name, address=f"10.1.{n // 250}.{n % 250}", cpus=4.0, memory=8 << 30)
        service, slot = f"web{n // MAX_REPLICAS}", n % MAX_REPLICAS + 1
        task = f"{service}.{slot}.3f9a{n:06x}"
        seen = (SeenTask(service, slot, task, "9c1e"),)
        records[name] = HostState(last_seen=seen_at, tasks=seen, last_known=host)
        if service not in services:
            count = min(MAX_REPLICAS, hosts - n)
            services[service] = ServiceState(Service(service, "bench/web:1", replicas=count), 1)
        running = SlotState(phase=SlotPhase.RUNNING, task=task, host=name)
        services[service].slots[slot] = running
    return ControllerState(cluster="bench", generation=1, services=services, hosts=records)


def a_pass_later(state: ControllerState, n: int = 1) -> ControllerState:
    """Every host seen again, one host's record and one slot changed (the `n`th pass)."""
    hosts = {h: replace(r, last_seen=(r.last_seen or 0) + 30 * n) for h, r in state.hosts.items()}
    first = next(iter(hosts))
    hosts[first] = replace(hosts[first], failures=n)
    web = state.services["web0"]
    slots = {**web.slots, 1: replace(web.slots[1], phase=SlotPhase.EMPTY, task=f"web0.1.{n}")}
    return replace(
        state, hosts=hosts, services={**state.services, "web0": replace(web, slots=slots)}
    )


def whole(store: EtcdStore) -> ControllerState:
    """A read as before: every record structured from the joined document."""
    _, revision = store.meta()
    named = {k[len(store.keys.state) :].decode(): v for k, v in store.state_keys(revision).items()}
    data = parts.join(named)
    assert data is not None
    return store.codec.from_data(data, ControllerState)


def timed(read: Callable[[], ControllerState], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return times


def commits(store: EtcdStore, state: ControllerState, runs: int, kept: bool) -> list[float]:
    """`runs` commits of a pass later each, the records last written kept or not."""
    times = []
    for n in range(1, runs + 1):
        later = a_pass_later(state, n)
        if not kept:
            etcd_store._READS.clear()  # no record known: each encoded afresh
        start = time.perf_counter()
        store.commit(later, [])
        times.append(time.perf_counter() - start)
    return times


def cell(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f})"


def row(url: EtcdURL, hosts: int, runs: int) -> str:
    writer = EtcdWriter(url)
    writer.acquire()
    try:
        store = writer.store()
        state = fleet(hosts, 1.8e9)
        store.commit(state, [])
        reader = EtcdStore.open(url)
        try:
            assert reader.load() == state  # the records of this read kept
            later = a_pass_later(state)
            store.commit(later, [])
            own = timed(reader.load, 1)  # the commit's keys, its changes structured
            reads = etcd_store._reads(store)
            reads.last = reads.committed = None  # as read by another process
            first = timed(reader.load, 1)  # the keys ranged over, the changes structured
            assert reader.load() == whole(reader) == later
            kept, before = timed(reader.load, runs), timed(lambda: whole(reader), runs)
        finally:
            reader.close()
        encoded = commits(store, later, runs, kept=False)
        written = commits(store, later, runs, kept=True)
        check = EtcdStore.open(url)
        assert check.load() == a_pass_later(later, runs)  # what the last commit wrote
        check.close()
    finally:
        writer.release()
    reads = f"{cell(before)} | {cell(first)} | {cell(own)} | {cell(kept)}"
    return f"| {hosts} | {reads} | {cell(encoded)} | {cell(written)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1000,10000", help="comma-separated fleet sizes")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    print(
        "| hosts | read: whole | after another's pass | after its own | again "
        "| commit: whole | after a pass |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINIDOCK_KEY_FILE"] = str(Path(tmp) / "key")  # made on the first commit
        etcd = EtcdCluster(Path(tmp) / "etcd", size=1)
        etcd.start()
        try:
            for i, hosts in enumerate(int(h) for h in args.hosts.split(",")):
                url = parse_location(etcd.url(prefix=f"/bench{i}"))
                assert isinstance(url, EtcdURL)
                print(row(url, hosts, args.runs), flush=True)
        finally:
            etcd.close()


if __name__ == "__main__":
    main()
