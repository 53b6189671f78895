"""A cold observe pass against a floor that runs only `docker ps` (issue 26).

    .venv/bin/python benchmarks/bench_cold.py                  # N = 100, 500, 1000
    .venv/bin/python benchmarks/bench_cold.py --sizes 10 --runs 1   # a quick look

On the scale fleet (benchmarks/scale_fleet.py, as bench_scale.py sets it up: OpenSSH sshd
per host on loopback, docker stand-ins, two running MiniDock tasks and one unmanaged
container per host), for each fleet size N:

- *MiniDock cold*: what a cron `minidock reconcile` pays to see the fleet: the pass's
  probe as `runner.decide` makes it (`observe.observe(..., ports=False)`: ps, then inspect
  of what ps listed, in one round trip per host) with a fresh `SSHExecutor` and no probe
  memory;
- *floor*: the minimal asyncssh fan-out (bench_scale.Floor: connect, run, gather; the same
  keys, host-key checks and connection bound) running only the probe's `docker ps`.

The two are interleaved, `--runs` of each; median (min-max) of the wall time, and the
controller's CPU seconds. Prints a Markdown table (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import CLUSTER, PROBE, Floor, Sample, _check, timed
from scale_fleet import ScaleFleet

from minidock.model import Host
from minidock.observe import observe
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor


async def minidock_cold(hosts: Sequence[Host]) -> tuple[float, float]:
    """One cold observe pass, as cron's reconcile makes it (no port tables, no memory)."""
    executor = SSHExecutor()
    wall, cpu, seen = await timed(observe(executor, hosts, CLUSTER, ports=False))
    await executor.close()
    _check(seen.hosts.values(), len(hosts))
    return wall, cpu


async def floor_cold(hosts: Sequence[Host]) -> tuple[float, float]:
    """One cold fan-out of `docker ps` alone."""
    floor = Floor(hosts)
    wall, cpu, _ = await timed(floor.run({h.name: [(PROBE, None)] for h in hosts}))
    await floor.close()
    return wall, cpu


async def row(hosts: Sequence[Host], runs: int) -> str:
    mini, floor = Sample(), Sample()
    for _ in range(runs):
        mini.add(*await minidock_cold(hosts))
        floor.add(*await floor_cold(hosts))
    ratio = statistics.median(mini.wall) / statistics.median(floor.wall)
    cpu = f"{statistics.median(mini.cpu):.2f} / {statistics.median(floor.cpu):.2f}"
    return f"| {len(hosts)} | {mini.cell()} | {floor.cell()} | {ratio:.2f}x | {cpu} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    fleet = ScaleFleet(args.root)
    fleet.create(max(max(sizes), len(fleet.hosts)))
    fleet.start()
    fleet.clear()
    fleet.seed(2)
    hosts = list(load_inventory(fleet.inventory).hosts)
    lines = [
        "| N | MiniDock cold (ps + inspect) | floor (`docker ps` only) | ratio "
        "| CPU (MiniDock / floor) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    try:
        for n in sizes:
            lines.append(asyncio.run(row(hosts[:n], args.runs)))
            print(lines[-1], file=sys.stderr, flush=True)
    finally:
        fleet.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
