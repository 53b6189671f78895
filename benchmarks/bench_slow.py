"""Slow is not down (issue 26): on the scale fleet, a share of the hosts answer `docker ps`
late, and cron's `minidock reconcile` runs a few passes over a service of a task per host.

    .venv/bin/python benchmarks/bench_slow.py --hosts 100 --share 0.1 --late 5
    .venv/bin/python benchmarks/bench_slow.py --hosts 100 --code /work/main  # before

Counts the `host-down` events and the tasks started after the first apply (replacements):
both should be 0. The inventory keeps the default probe_timeout (3s) and down_after (2).
Prints one Markdown table row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_watch import applied
from scale_fleet import ScaleFleet


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--late", type=float, default=5.0)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--code", type=Path, default=None, help="run MiniDock from this tree")
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    args = parser.parse_args()
    fleet = ScaleFleet(args.root)
    names = fleet.ready(args.hosts)
    slow = names[:: max(1, round(1 / args.share))] if args.share else []
    code = (args.code or Path(__file__).resolve().parent.parent).resolve()
    try:
        with tempfile.TemporaryDirectory(dir=fleet.root) as tmp:
            doc = fleet.inventory.read_text()  # the default probe_timeout, not the fleet's
            doc = doc.replace('probe_timeout = "30s"', 'probe_timeout = "3s"')
            md, env = applied(Path(tmp), args.hosts, code, doc)
            for name in slow:
                (fleet.host_dir(name) / "slow").write_text(f"{args.late:g}\n")
            walls = []
            for _ in range(args.passes):
                start = time.monotonic()
                subprocess.run([*md, "reconcile"], env=env, cwd=code, capture_output=True)
                walls.append(time.monotonic() - start)
            found = subprocess.run(
                [*md, "events", "--json", "--limit", "100000"],
                env=env,
                cwd=code,
                capture_output=True,
                text=True,
            )
            events = json.loads(found.stdout)
            for name in slow:
                (fleet.host_dir(name) / "slow").unlink()
    finally:
        fleet.stop()
    downs = sum(1 for e in events if e["kind"] == "host-down")
    started = sum(1 for e in events if e["kind"] == "run") - args.hosts
    shown = ", ".join(f"{w:.1f}" for w in walls)
    print(
        f"| {args.hosts} | {len(slow)} answer {args.late:g} s late | {downs} | {started} "
        f"| {shown} s |"
    )


if __name__ == "__main__":
    main()
