"""Failover time of the etcd store: how long after a controller dies another one acts.

    .venv/bin/python benchmarks/bench_failover.py            # the lease alone (no lab)
    .venv/bin/minidock lab up --hosts 4 && .venv/bin/python benchmarks/bench_failover.py --lab

Both start their own three-member etcd on free 127.0.0.1 ports (tests/etcd.py).

The lease: a process takes the writer lock and is killed with SIGKILL at a random moment
of its renewal cycle; another polls the lock every 50 ms. The time from the kill to the
other's lock is the failover time of the store: the rest of the dead holder's lease.

The lab (--lab): two controllers run `minidock reconcile` in a loop (as cron would) on one
etcd state, with the default lease (10 s); a host with tasks is stopped, and the
controller in a pass is killed with SIGKILL. Reported: from the kill to the other
controller's first pass that acted (held the lock), and to the fleet converged again.
Prints Markdown tables (docs/benchmarks.md and docs/ha.md keep the latest).
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab_spec import web_spec  # noqa: E402

from minidock.lab import Lab  # noqa: E402
from minidock.store import WriterBusy, parse_location  # noqa: E402
from minidock.store.etcd import EtcdWriter, Keys  # noqa: E402
from tests.etcd import EtcdCluster  # noqa: E402

HOLD = """
import sys, time
from minidock.store import parse_location
from minidock.store.etcd import EtcdWriter
writer = EtcdWriter(parse_location(sys.argv[1]))
writer.acquire()
print("acquired", flush=True)
time.sleep(3600)
"""


def lease_failover(
    cluster: EtcdCluster, ttl: float, rounds: int, rng: random.Random
) -> list[float]:
    took = []
    for _ in range(rounds):
        url = cluster.url(ttl=f"{ttl:g}s")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, url], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "acquired"
        time.sleep(rng.uniform(0, ttl / 3))  # anywhere in its renewal cycle
        holder.kill()
        killed = time.monotonic()
        holder.wait()
        holder.stdout.close()
        writer = EtcdWriter(parse_location(url))
        while True:
            try:
                writer.acquire()
                break
            except WriterBusy:
                time.sleep(0.05)
        took.append(time.monotonic() - killed)
        writer.release()
    return took


LOOP = 'while :; do "$0" -m minidock reconcile; echo "== exit $? at $(date +%s.%N)"; sleep 1; done'


def lab_failover(cluster: EtcdCluster, rounds: int) -> list[tuple[float, float]]:
    lab = Lab(ROOT)
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            lab.reset()
            url = cluster.url()  # the default lease: 10 s
            env = {**os.environ, "MINIDOCK_STATE": url}
            spec = Path(tmp) / "ha.toml"
            spec.write_text(web_spec("bench-ha", lab.inventory_path))
            md = [sys.executable, "-m", "minidock"]
            subprocess.run(
                [*md, "apply", str(spec), "--wait"], env=env, check=True, capture_output=True
            )
            logs = [Path(tmp) / f"{n}.log" for n in ("a", "b")]
            loops = [_loop(env, log) for log in logs]
            try:
                found.append(_kill_leader(cluster, url, lab, loops, logs, env))
            finally:
                for loop in loops:
                    os.killpg(loop.pid, signal.SIGKILL)
                    loop.wait()
    lab.reset()
    return found


def _loop(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["bash", "-c", LOOP, sys.executable], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _kill_leader(
    cluster: EtcdCluster,
    url: str,
    lab: Lab,
    loops: list[subprocess.Popen[bytes]],
    logs: list[Path],
    env: dict[str, str],
) -> tuple[float, float]:
    busiest = max(
        ("host1", "host2", "host3"),
        key=lambda h: len(lab.exec(h, "docker", "ps", "-q").stdout.split()),
    )
    lab.kill(busiest, "stop")
    lock = Keys("/" + url.split("/", 3)[3].split("?")[0]).lock.decode()
    while True:  # the controller in a pass: its reconcile holds the lock
        got = cluster.etcdctl(
            "get", "--prefix", lock, "--sort-by=CREATE", "--limit=1", "-w", "json"
        )
        kvs = json.loads(got.stdout or "{}").get("kvs") or []
        if kvs:
            pid = int(json.loads(base64.b64decode(kvs[0]["value"]))["holder"].split()[1])
            leader = next((i for i, p in enumerate(loops) if _group(pid) == p.pid), None)
            if leader is not None:
                break
        time.sleep(0.05)
    os.killpg(loops[leader].pid, signal.SIGKILL)
    killed, wall = time.monotonic(), time.time()
    other = logs[1 - leader]
    acted = converged = None
    while converged is None:
        ends = [
            (int(p[2]), float(p[4]))
            for line in other.read_text().splitlines()
            if (p := line.split(" ")) and line.startswith("== exit")
        ]
        if acted is None and any(t > wall and code != 75 for code, t in ends):
            acted = time.monotonic() - killed
        if any(t > wall and code == 0 for code, t in ends):
            converged = time.monotonic() - killed
        time.sleep(0.1)
    lab.revive(busiest)
    assert acted is not None
    return acted, converged


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def main() -> None:
    rng = random.Random(10)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = EtcdCluster(Path(tmp) / "etcd", size=3)
        cluster.start()
        try:
            print("| lease ttl | rounds | failover min | median | max |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            for ttl, rounds in ((10.0, 5), (3.0, 5)):
                took = lease_failover(cluster, ttl, rounds, rng)
                print(
                    f"| {ttl:g} s | {rounds} | {min(took):.1f} s | "
                    f"{statistics.median(took):.1f} s | {max(took):.1f} s |",
                    flush=True,
                )
            if "--lab" in sys.argv[1:]:
                found = lab_failover(cluster, 3)
                print()
                print("| lab: kill -9 of the leader mid-pass (ttl 10 s) | median of 3 | max |")
                print("| --- | ---: | ---: |")
                for i, what in enumerate(("the other controller acts", "the fleet converged")):
                    values = [f[i] for f in found]
                    print(f"| {what} | {statistics.median(values):.1f} s | {max(values):.1f} s |")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
