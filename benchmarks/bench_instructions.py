"""Instructions of one decision at fleet size, counted by callgrind: a figure that the
machine's neighbours do not move (timings here vary by up to 70% from minute to minute).

    .venv/bin/python benchmarks/bench_instructions.py [--size 1000x200x50] [--case lost]

Builds bench_reconcile.py's world for the case, writes the decision's inputs to a
temporary file, then runs a child Python under `valgrind --tool=callgrind` twice: once
making the call once (a warm-up: imports, cached spec hashes), once making it twice. The
difference is one call, as `runner.decision` makes it. Needs valgrind (`apt-get install
valgrind`); about a minute per case at 1,000 hosts.
"""

from __future__ import annotations

import argparse
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_reconcile import CASES, world  # noqa: E402

CHILD = """
import pickle, sys
sys.path.insert(0, {root!r})
from minidock.runner import decision
inputs = pickle.load(open({inputs!r}, "rb"))
for _ in range({calls}):
    decision(*inputs)
"""


def instructions(inputs: str, calls: int) -> int:
    """Instructions callgrind counts for a child process making `calls` decisions."""
    code = CHILD.format(root=str(ROOT), inputs=inputs, calls=calls)
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    out = subprocess.run([*argv, sys.executable, "-c", code], capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"valgrind failed: {out.stderr.strip()[-500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1000x200x50")
    parser.add_argument("--case", default="lost", choices=CASES)
    args = parser.parse_args()
    w = world(args.size, args.case)
    assert w.cluster is not None
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        pickle.dump((w.cluster, w.inventory, w.observe(), w.state, w.now), f)
        f.flush()
        one = instructions(f.name, 1)
        two = instructions(f.name, 2)
    print(f"{args.size} {args.case}: {(two - one) / 1e6:,.0f} M instructions")


if __name__ == "__main__":
    main()
