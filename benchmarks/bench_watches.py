"""Several `minidock watch` on one etcd state, at rest (issue 47): how many passes each
makes, how many `docker` commands each host runs and how many etcd revisions the state
takes, per minute, with no change and no fault.

    .venv/bin/python benchmarks/scale_fleet.py up --hosts 100
    .venv/bin/python benchmarks/bench_watches.py --hosts 100 --watches 3
    .venv/bin/python benchmarks/bench_watches.py --hosts 100 --watches 3 --code TREE  # before

The fleet is benchmarks/scale_fleet.py's (OpenSSH sshd per host, the docker stand-in,
which counts every command a host runs). An etcd member of its own on free loopback ports
(tests/etcd.py); one service of a task on each of the first `--hosts` hosts, applied with
`--adopt --wait`; then `--watches` watches with `--interval` (MiniDock from `--code`'s tree,
else this one), and after they settle (`--settle` seconds), `--seconds` of rest, counted:
the passes each watch made that held the lock (its member key's count, `minidock
controllers --json`), the commands per host, etcd's revisions (every transaction that
wrote: the lock's put and delete, each commit, each member key's beat). Prints one
Markdown row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_watch import Watch  # noqa: E402
from scale_fleet import ScaleFleet  # noqa: E402

from tests.etcd import EtcdCluster, revision  # noqa: E402

SPEC = """cluster = "rest"
inventory = "{inventory}"

[services.one]
image = "bench/web:1"
replicas = {n}
spread = "zone"
command = ["sleep", "1d"]
"""


def run(md: list[str], env: dict[str, str], code: Path, *args: str) -> str:
    done = subprocess.run([*md, *args], env=env, cwd=code, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"minidock {args[0]} exited {done.returncode}: {done.stderr[-400:]}")
    return done.stdout


def passes(md: list[str], env: dict[str, str], code: Path) -> dict[str, int]:
    """Each member's passes that held the lock, by member id."""
    doc = json.loads(run(md, env, code, "controllers", "--json"))
    return {m["id"]: m["passes"] for m in doc["members"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--watches", type=int, default=3)
    parser.add_argument("--interval", default="2s")
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--code", type=Path, default=None, help="run MiniDock from this tree")
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    args = parser.parse_args()
    fleet = ScaleFleet(args.root)
    fleet.create(max(args.hosts, len(fleet.hosts)))
    fleet.start()
    fleet.clear()
    names = list(fleet.hosts)[: args.hosts]
    code = (args.code or ROOT).resolve()
    watches: list[Watch] = []
    try:
        with tempfile.TemporaryDirectory(dir=fleet.root) as tmp:
            work = Path(tmp)
            etcd = EtcdCluster(work / "etcd", size=1)
            etcd.start()
            try:
                inventory = work / "inventory.toml"
                inventory.write_text(fleet.inventory.read_text())
                spec = work / "rest.toml"
                spec.write_text(SPEC.format(inventory=inventory, n=args.hosts))
                env = dict(os.environ) | {
                    "PYTHONPATH": str(code),
                    "MINIDOCK_STATE": etcd.url(ttl="10s"),
                    "MINIDOCK_KEY_FILE": str(work / "key"),
                }
                md = [sys.executable, "-m", "minidock"]
                run(md, env, code, "apply", str(spec), "--adopt", "--wait", "--timeout", "10m")
                argv = [*md, "watch", "--interval", args.interval]
                watches = [Watch(argv, env, code) for _ in range(args.watches)]
                time.sleep(args.settle)
                for name in names:
                    (fleet.host_dir(name) / "calls").write_text("")
                    (fleet.host_dir(name) / "count").write_text("")
                before, rev = passes(md, env, code), revision(etcd.endpoints[0])
                time.sleep(args.seconds)
                after, revs = passes(md, env, code), revision(etcd.endpoints[0]) - rev
                verbs = [(fleet.host_dir(n) / "calls").read_text().split() for n in names]
                for name in names:
                    (fleet.host_dir(name) / "count").unlink()
            finally:
                for watch in watches:
                    watch.stop()
                etcd.close()
    finally:
        fleet.stop()
    minute = 60.0 / args.seconds
    made = sorted(((after[m] - before.get(m, 0)) * minute for m in after), reverse=True)
    per_host = statistics.mean(len(v) for v in verbs) * minute
    counted = Counter(verb for v in verbs for verb in v)
    each = ", ".join(f"{verb} {n * minute / len(names):.1f}" for verb, n in counted.most_common())
    print(
        f"| {args.hosts} | {args.watches} | {args.interval} | "
        f"{' / '.join(f'{m:.0f}' for m in made)} | {per_host:.1f} ({each}) | "
        f"{revs * minute:.0f} |"
    )


if __name__ == "__main__":
    main()
