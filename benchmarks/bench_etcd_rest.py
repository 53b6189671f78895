"""What a pass writes to etcd at rest (issue 47, item 5: "etcd's write rate at rest, aim at
most one write per host per minute"): `minidock reconcile` passes over a scale fleet
whose tasks all run, on a one-member etcd, counting what each pass wrote.

    .venv/bin/python benchmarks/scale_fleet.py up --hosts 1000     # .scale/ in the cwd
    .venv/bin/python benchmarks/bench_etcd_rest.py --inventory .scale/inventory.toml \\
        --hosts 100 1000 [--passes 5]

For each fleet size N (the inventory's first N hosts, one task on each): an etcd member
of its own on free loopback ports (tests/etcd.py), `minidock apply --adopt --wait` (the
fleet may hold an earlier run's tasks), one pass to
settle, then `--passes` passes, each measured by etcd itself: its revisions (one per
transaction that wrote, the writer lock's put and delete included), the keys whose mod
revision moved, and their bytes (key and value). Beside them, what the state before
schema 4 wrote in the same passes: the whole controller state, one key, at each commit
(`codec.dumps` of the state the pass left, times the commits). Prints one Markdown row
per N for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.store import codec, parse_location  # noqa: E402
from minidock.store.etcd import EtcdStore  # noqa: E402
from minidock.store.etcd_client import range_end, rpc  # noqa: E402
from tests.etcd import EtcdCluster  # noqa: E402

SPEC = """\
cluster = "rest"
inventory = "{inventory}"

[services.one]
image = "bench/web:1"
replicas = {n}
command = ["sleep", "1d"]
cpus = 0.1
memory = "64MiB"
"""


def minidock(env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "minidock", *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"minidock {args[0]} exited {done.returncode}: {done.stderr.strip()[-400:]}")


def written(store: EtcdStore, since: int) -> tuple[int, int, int]:
    """etcd's revision now, and the keys under the prefix (and their bytes) changed after
    revision `since`."""
    reply = store.client.range(
        rpc.RangeRequest(
            key=store.keys.root, range_end=range_end(store.keys.root), min_mod_revision=since + 1
        )
    )
    size = sum(len(kv.key) + len(kv.value) for kv in reply.kvs)
    return int(reply.header.revision), len(reply.kvs), size


def row(n: int, inventory: Path, passes: int, work: Path) -> str:
    doc = tomllib.loads(inventory.read_text())
    doc["hosts"] = doc["hosts"][:n]
    cut = work / f"inventory-{n}.toml"
    cut.write_text(tomli_w.dumps(doc))
    spec = work / f"rest-{n}.toml"
    spec.write_text(SPEC.format(inventory=cut, n=n))
    cluster = EtcdCluster(work / f"etcd-{n}", size=1)
    cluster.start()
    try:
        url = cluster.url()
        os.environ["MINIDOCK_KEY_FILE"] = str(work / "key")  # this process reads the state too
        env = {**os.environ, "MINIDOCK_STATE": url}
        minidock(env, "apply", str(spec), "--adopt", "--wait", "--timeout", "900s")
        minidock(env, "reconcile")
        location = parse_location(url)
        assert not isinstance(location, Path)
        store = EtcdStore.open(location)
        revisions, keys, sizes, whole = [], [], [], []
        try:
            for _ in range(passes):
                before, _, _ = written(store, 1 << 62)
                minidock(env, "reconcile")
                after, changed, size = written(store, before)
                commits = after - before - 2  # the lock's put and delete are not commits
                revisions.append(after - before)
                keys.append(changed)
                sizes.append(size)
                whole.append(commits * len(codec.dumps(store.load())))
        finally:
            store.close()
    finally:
        cluster.close()
    med = statistics.median
    per_host_minute = med(keys) / n  # at one pass a minute (cron)
    return (
        f"| {n:,} | {med(revisions):.0f} | {med(keys):.0f} | {med(sizes) / 1000:.1f} kB "
        f"| {med(whole) / 1000:.1f} kB | {per_host_minute:.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--hosts", type=int, nargs="+", default=[100])
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    print(
        "| hosts | etcd revisions a pass | keys written a pass | bytes a pass "
        "| before schema 4: bytes a pass | writes per host per minute (a pass a minute) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.hosts:
            print(row(n, args.inventory.resolve(), args.passes, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
