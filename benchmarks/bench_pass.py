"""How long observing the real lab fleet takes: one probe of every host over SSH.

    .venv/bin/minidock lab up --hosts 4 && .venv/bin/python benchmarks/bench_pass.py

Measures, against inventory/lab.toml: a cold pass (new SSH connections, as each cron
`minidock reconcile` makes), a warm pass (pooled connections, as `minidock watch` reuses),
and a cold pass with one host paused (the connect timeout bounds it). Median of 7 runs.
Prints a Markdown table (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidock.lab import Lab
from minidock.observe import observe
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor

RUNS = 7


async def cold(inventory_path: Path) -> float:
    inv = load_inventory(inventory_path)
    executor = SSHExecutor()
    start = time.perf_counter()
    observed = await observe(executor, inv.hosts, "bench")
    took = time.perf_counter() - start
    await executor.close()
    assert sum(o.ok for o in observed.hosts.values()) >= len(inv.hosts) - 1
    return took


async def warm(inventory_path: Path) -> list[float]:
    inv = load_inventory(inventory_path)
    executor = SSHExecutor()
    await observe(executor, inv.hosts, "bench")
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        await observe(executor, inv.hosts, "bench")
        times.append(time.perf_counter() - start)
    await executor.close()
    return times


def main() -> None:
    inventory_path = Path("inventory/lab.toml")
    hosts = len(load_inventory(inventory_path).hosts)
    cold_times = [asyncio.run(cold(inventory_path)) for _ in range(RUNS)]
    warm_times = asyncio.run(warm(inventory_path))
    container = Lab().host("host1").container  # this lab's host1, not another lab's
    subprocess.run(["docker", "pause", container], check=True)
    try:
        paused = [asyncio.run(cold(inventory_path)) for _ in range(3)]
    finally:
        subprocess.run(["docker", "unpause", container], check=True)
    print("| hosts | cold pass (new connections) | warm pass (pooled) | cold, one host paused |")
    print("| ---: | ---: | ---: | ---: |")
    print(
        f"| {hosts} | {statistics.median(cold_times) * 1000:.0f} ms "
        f"| {statistics.median(warm_times) * 1000:.0f} ms "
        f"| {statistics.median(paused) * 1000:.0f} ms |"
    )


if __name__ == "__main__":
    main()
