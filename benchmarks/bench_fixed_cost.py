"""The fixed cost of a cron pass (issue 47, item 6): a whole `minidock reconcile` process
over a fleet whose cluster is empty, against the floor, a whole process that only opens a
connection to every host and runs the probe's `docker ps` there (benchmarks/fanout.py).

    .venv/bin/python benchmarks/scale_fleet.py up --hosts 100      # .scale/ in the cwd
    .venv/bin/python benchmarks/bench_fixed_cost.py --inventory .scale/inventory.toml [--runs 11]

Both are timed from outside, start to exit, interpreter start-up and imports included, in
turn (MiniDock, floor, MiniDock, ...) so both see the same machine; the ratio is the median
of the pairs' ratios. The state is an empty cluster applied once over the inventory
(`minidock apply`), in a temporary directory. Prints one Markdown row for
docs/benchmarks.md. What the difference is made of: `python -X importtime` (bench_startup).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the child) of one run that must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{argv[1:3]} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    inventory = args.inventory.resolve()
    hosts = inventory.read_text().count("name =")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "empty.toml"
        spec.write_text(f'cluster = "empty"\ninventory = "{inventory}"\n')
        state = str(Path(tmp) / "state")
        minidock = [sys.executable, "-m", "minidock"]
        timed([*minidock, "apply", str(spec), "--state", state])
        reconcile = [*minidock, "reconcile", "--state", state]
        floor = [sys.executable, str(ROOT / "benchmarks" / "fanout.py"), str(inventory)]
        timed(reconcile)  # a warm-up of each: the page cache, not a measurement
        timed(floor)
        ours: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        for _ in range(args.runs):
            ours.append(timed(reconcile))
            theirs.append(timed(floor))
    ratio = statistics.median(a[0] / b[0] for a, b in zip(ours, theirs, strict=True))
    cpus = [statistics.median(c for _, c in runs) for runs in (ours, theirs)]
    cpu = f"{cpus[0]:.2f} / {cpus[1]:.2f}"
    print("| hosts | `minidock reconcile` | floor (fan-out of `docker ps`) | ratio | CPU s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {hosts} | {cell([w for w, _ in ours])} | {cell([w for w, _ in theirs])} "
        f"| {ratio:.2f}x | {cpu} |"
    )


if __name__ == "__main__":
    main()
