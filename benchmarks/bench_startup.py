"""Start-up of a cron `minidock reconcile`: Python's imports, before and after a change.

    git worktree add /tmp/before COMMIT
    .venv/bin/python benchmarks/bench_startup.py --before /tmp/before [--runs 41]

Runs `python -X importtime` of the CLI on `minidock reconcile --state /nonexistent/x`
(the cron command, stopped at its first step: every import of the command, no pass) in
each tree, interleaved so both see the same machine, with the output on a pipe as cron
has it. Reports the median and min of the sum of the `self` column (every module's own
import time), the number of modules, and which of the heavy optional packages (rich,
jsonschema, the lab, the etcd client) were imported. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys
sys.argv = ["minidock", "reconcile", "--state", "/nonexistent/x"]
from minidock.cli import main
try:
    main()
except SystemExit:
    pass
"""
WATCHED = ("rich", "jsonschema", "minidock.lab", "aetcd", "grpc")


def one_run(tree: Path) -> tuple[float, int, set[str]]:
    """Seconds of import self time, modules imported, the watched packages among them."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    total, modules, seen = 0, 0, set()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        total += int(own)
        modules += 1
        name = name.strip()
        seen |= {w for w in WATCHED if name == w or name.startswith(w + ".")}
    return total / 1e6, modules, seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="a checkout to compare")
    parser.add_argument("--runs", type=int, default=41)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    times: dict[str, list[float]] = {k: [] for k in trees}
    found: dict[str, tuple[int, set[str]]] = {}
    for _ in range(args.runs):
        for label, tree in trees.items():
            seconds, modules, seen = one_run(tree)
            times[label].append(seconds)
            found[label] = (modules, seen)
    print("| `minidock reconcile` on a pipe | modules | import time, median | min | loaded |")
    print("| --- | ---: | ---: | ---: | --- |")
    for label in trees:
        modules, seen = found[label]
        med, low = statistics.median(times[label]) * 1e3, min(times[label]) * 1e3
        print(
            f"| {label} | {modules} | {med:.1f} ms | {low:.1f} ms "
            f"| {', '.join(sorted(seen)) or 'none'} |"
        )


if __name__ == "__main__":
    main()
