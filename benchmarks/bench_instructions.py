"""Instructions of one decision at fleet size, counted by callgrind: a figure that the
machine's neighbours do not move (timings here vary by up to 70% from minute to minute).

    .venv/bin/python benchmarks/bench_instructions.py [--size 1000x200x50] [--case lost]
        [--plain] [--repo DIR]

Builds bench_reconcile.py's world for the case, writes the decision's inputs to a
temporary file, then runs a child Python under `valgrind --tool=callgrind` twice: once
making the call once (a warm-up: imports, cached spec hashes), once making it twice. The
difference is one call, as `runner.decision` makes it; `--plain` counts the bare
`reconcile()`, and `--repo DIR` imports the child's `minidock` from another checkout (with
`--plain`, an older commit's core). Needs valgrind (`apt-get install valgrind`); about a
minute per case at 1,000 hosts.
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
from {module} import {call} as call
inputs = pickle.load(open({inputs!r}, "rb"))
for _ in range({calls}):
    call(*inputs)
"""


def instructions(inputs: str, calls: int, *, plain: bool, repo: str) -> int:
    """Instructions callgrind counts for a child process making `calls` decisions with
    the `minidock` of `repo`."""
    module, call = ("minidock.core", "reconcile") if plain else ("minidock.runner", "decision")
    code = CHILD.format(root=repo, module=module, call=call, inputs=inputs, calls=calls)
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
    parser.add_argument("--plain", action="store_true", help="count the bare reconcile()")
    parser.add_argument("--repo", default=str(ROOT), help="the checkout the child imports")
    args = parser.parse_args()
    w = world(args.size, args.case)
    assert w.cluster is not None
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        pickle.dump((w.cluster, w.inventory, w.observe(), w.state, w.now), f)
        f.flush()
        one = instructions(f.name, 1, plain=args.plain, repo=args.repo)
        two = instructions(f.name, 2, plain=args.plain, repo=args.repo)
    print(f"{args.size} {args.case}: {(two - one) / 1e6:,.0f} M instructions")


if __name__ == "__main__":
    main()
