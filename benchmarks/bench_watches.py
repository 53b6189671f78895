"""Several `minidock watch` on one etcd state, at rest (issue 47): how many passes each
makes, how many `docker` commands each host runs and how many etcd revisions the state
takes, per minute, with no change and no fault.

    .venv/bin/python benchmarks/scale_fleet.py up --hosts 100
    .venv/bin/python benchmarks/bench_watches.py --hosts 100 --watches 3
    .venv/bin/python benchmarks/bench_watches.py --hosts 100 --watches 3 --code TREE  # before

The fleet is benchmarks/scale_fleet.py's (OpenSSH sshd per host, the docker stand-in,
which counts every command a host runs). An etcd member of its own on free loopback
ports (tests/etcd.py; the state's lease TTL `--ttl`, 10 s by default); one service of a
task on each of the first `--hosts` hosts (bench_watch.py's spec), applied with
`--adopt --wait`; then `--watches` watches with `--interval` (MiniDock from `--code`'s
tree, else this one), and after they settle (`--settle` seconds), `--seconds` of rest,
counted: the passes each watch made that held the lock (its member key's count,
`minidock controllers --json`), the commands per host, etcd's revisions (every
transaction that wrote: the lock's put and delete, each commit, each member key's
beat), and how many hosts the decider's last pass borrowed from their owners'
observations instead of probing them (docs/scale.md, "Observing by share"), and the SSH
connections each watch holds at the end of the rest (its member key's `warm`; by share,
its share and standby set and what ran within core.ring.IDLE: "Connections by share"),
the decider's first; and on a second line the standbys' whole rounds over their shares
and the passes, as sampled every 5 s of the rest (`Rounds`): with `--watches 1` over as
many hosts as a share, a single watch's warm pass, to compare a share's round with
(issue 47, item 5). Then
(`--deaths N`) a task killed on a random host, N times one after another: the median
and the longest seconds from a kill until a watch printed its replacement `started` (a
pass prints at its end, after all its acts) and, in brackets, until the replacement
started on its host (by that host's event log: the repair itself), and
the task verbs the owners carried out of those the decider ordered (docs/scale.md,
"Acting by share"). Then
(`--kill-decider`) the watch making the passes is killed with SIGKILL and a task killed
on a random host at once: the seconds from the kills until another watch prints the
task's replacement `started`, and until it started on its host (issue 47, item 5: within
the lease TTL plus 5 s); with `--failovers N`, N times, each of the watch deciding
then, 30 s apart (the timeline of each on stderr). Prints one Markdown row. With
`--trace DIR`, the watches run through benchmarks/traced.py, their debug lines in
DIR/PID.log, and each death's and failover's lines from every watch (seconds after the
kill) go to stderr: where its time went.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_watch import SPEC, Watch, a_running_task  # noqa: E402
from scale_fleet import ScaleFleet  # noqa: E402

from tests.etcd import EtcdCluster, revision  # noqa: E402


def run(md: list[str], env: dict[str, str], code: Path, *args: str) -> str:
    done = subprocess.run([*md, *args], env=env, cwd=code, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"minidock {args[0]} exited {done.returncode}: {done.stderr[-400:]}")
    return done.stdout


def passes(md: list[str], env: dict[str, str], code: Path) -> dict[int, int]:
    """Each member's passes that held the lock, by its process id."""
    return {pid: m["passes"] for pid, m in members(md, env, code).items()}


def members(md: list[str], env: dict[str, str], code: Path) -> dict[int, dict[str, object]]:
    """Each member's record (`controllers --json`), by its process id."""
    doc = json.loads(run(md, env, code, "controllers", "--json"))
    return {int(m["holder"].split()[1]): m for m in doc["members"]}


def verbs_by_share(found: dict[int, dict[str, object]]) -> str:
    """The task verbs the decider ordered and the owners carried out, over every member
    ("-" for a MiniDock that does not count them: before acting by share)."""
    if not any("ordered" in m for m in found.values()):
        return "-"
    ordered = sum(int(str(m.get("ordered", 0))) for m in found.values())
    carried = sum(int(str(m.get("carried", 0))) for m in found.values())
    return f"{carried} / {ordered}"


class Rounds:
    """What the watches' rounds and passes took during the rest, sampled every few
    seconds: each standby's whole rounds over its share (its member key's
    `round_seconds`, a new value each round), and the decider's passes (its key's
    `pass_seconds`): issue 47 item 5's "each shard's warm pass", to compare with a single
    watch's warm pass over as many hosts as a share (`--watches 1`). Read from the member
    keys only: nothing of it probes a host."""

    def __init__(self) -> None:
        self.rounds: dict[tuple[int, float], int] = {}  # (pid, seconds) -> its share
        self.passes: set[float] = set()

    def sample(self, found: dict[int, dict[str, object]]) -> None:
        for pid, m in found.items():
            took = m.get("round_seconds") or {}
            assert isinstance(took, dict)
            for seconds in took.values():
                self.rounds[(pid, float(seconds))] = int(str(m.get("owned", 0)))
            if m.get("decides") and m.get("pass_seconds") is not None:
                self.passes.add(float(str(m["pass_seconds"])))

    def line(self) -> str:
        def spread(values: list[float]) -> str:
            if not values:
                return "none"
            low, high = min(values), max(values)
            return f"{statistics.median(values):.2f} s ({low:.2f}-{high:.2f}, {len(values)})"

        shares = sorted(set(self.rounds.values()))
        took = [seconds for _, seconds in self.rounds]
        return (
            f"rounds over a share of {' / '.join(map(str, shares)) or '-'} hosts: "
            f"{spread(took)}; passes: {spread(sorted(self.passes))}"
        )


class Trace:
    """The watches' debug lines (benchmarks/traced.py), by process id, read back for a
    window of time: each line is `MONOTONIC LOGGER MESSAGE`."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def show(self, since: float, until: float, what: str) -> None:
        if self.root is None:
            return
        print(f"  trace of {what}:", file=sys.stderr)
        lines: list[tuple[float, str, str]] = []
        for log in sorted(self.root.glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                stamp, _, rest = line.partition(" ")
                try:
                    at = float(stamp)
                except ValueError:
                    continue
                if since <= at <= until:
                    lines.append((at, log.stem, rest))
        for at, pid, rest in sorted(lines):
            print(f"    {at - since:6.3f} {pid} {rest}", file=sys.stderr)


def started_by_any(
    watches: list[Watch], since: float, but: Watch | None = None
) -> tuple[float, str]:
    """Seconds from `since` until a watch (but `but`) printed a `started` line, and the
    line. A pass prints its lines at its end, after every act (an owner's report of a
    stop it was ordered included): `engine_start` has when the task itself started."""
    end = since + 120
    while time.monotonic() < end:
        for watch in watches:
            if watch is but:
                continue
            for when, line in list(watch.lines):
                if when >= since and line.startswith("started "):
                    return when - since, line
        time.sleep(0.01)
    accounts = "\n".join(w.account() for w in watches)
    raise SystemExit(f"no watch replaced the task within 120 s:\n{accounts}")


def engine_start(fleet: ScaleFleet, line: str, since: float) -> float:
    """Seconds from `since` (the wall clock, `time.time()`) until the first container
    start after it on the host a `started ... on HOST` line names, by that host's event
    log (the stand-in engine's own clock): when the replacement itself started."""
    host = line.split(" on ", 1)[1].split()[0]
    events = (fleet.host_dir(host) / "events").read_text().splitlines()
    starts = [int(e.split()[2]) / 1e9 for e in events if e.startswith("start ")]
    return min(t for t in starts if t >= since) - since


Asker = Callable[[], dict[int, dict[str, object]]]  # each member's record, by process id
Took = tuple[float, float]  # seconds to a watch's `started` line, and to the start itself


def failover(
    fleet: ScaleFleet, names: list[str], watches: list[Watch], decider: int, trace: Trace
) -> Took:
    """SIGKILL the watch `decider` and a task at once; seconds until another watch
    printed its replacement started, and until it started on its host. What each
    surviving watch did meanwhile goes to stderr: the ends of its passes and of its
    rounds standing by (seconds after the kills)."""
    (dead,) = [w for w in watches if w.proc.pid == decider]
    victim, task = a_running_task(fleet, names)
    at, wall = time.monotonic(), time.time()
    dead.proc.kill()
    fleet.docker(victim, "kill", task)
    took, line = started_by_any(watches, at, but=dead)
    started = engine_start(fleet, line, wall)
    print(
        f"failover at {at:.3f}: task on {victim} replaced after {took:.2f} s "
        f"(started on its host after {started:.2f} s)",
        file=sys.stderr,
    )
    trace.show(at, at + took + 0.2, f"the failover at {at:.3f}")
    for watch in watches:
        if watch is not dead and watch.proc.poll() is None:
            ends = [f"{t - at:.1f}" for t in watch.passes if at <= t <= at + took + 1]
            print(f"  watch {watch.proc.pid}: rounds ended at {', '.join(ends)}", file=sys.stderr)
            for t, said in list(watch.lines):
                if at <= t <= at + took + 1:
                    print(f"    {t - at:.1f} {said}", file=sys.stderr)
    return took, started


def failovers(
    fleet: ScaleFleet,
    names: list[str],
    watches: list[Watch],
    decider: int,
    n: int,
    ask: Asker,
    trace: Trace,
) -> list[Took]:
    """`n` failovers one after another (`failover`), each of the watch deciding then,
    a resync's rest (30 s) between them."""
    took = [failover(fleet, names, watches, decider, trace)]
    for _ in range(n - 1):
        time.sleep(30)
        found = ask()
        (decider,) = [pid for pid, m in found.items() if m.get("decides")]
        took.append(failover(fleet, names, watches, decider, trace))
    return took


def deaths(
    fleet: ScaleFleet, names: list[str], watches: list[Watch], n: int, trace: Trace
) -> list[float]:
    """Kill a task on a random host, `n` times one after another: the seconds from each
    kill until a watch printed its replacement started (whichever host's owner saw it),
    and until it started on its host."""
    took: list[Took] = []
    for _ in range(n):
        victim, task = a_running_task(fleet, names)
        at, wall = time.monotonic(), time.time()
        fleet.docker(victim, "kill", task)
        printed, line = started_by_any(watches, at)
        took.append((printed, engine_start(fleet, line, wall)))
        print(
            f"death at {at:.3f}: task on {victim} replaced after {printed:.2f} s "
            f"(started on its host after {took[-1][1]:.2f} s)",
            file=sys.stderr,
        )
        trace.show(at, at + printed + 0.2, f"the death at {at:.3f}")
        time.sleep(3)  # the pass after the start (its health, its owner's round) settles
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--watches", type=int, default=3)
    parser.add_argument("--interval", default="2s")
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--deaths", type=int, default=0, help="then time this many task deaths")
    parser.add_argument("--kill-decider", action="store_true", help="then time a failover")
    parser.add_argument("--failovers", type=int, default=1, help="how many, one after another")
    parser.add_argument("--ttl", default="10s", help="the state's lease TTL")
    parser.add_argument("--code", type=Path, default=None, help="run MiniDock from this tree")
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    parser.add_argument("--restart-delay", default="100ms", help="the service's restart delay")
    parser.add_argument("--trace", type=Path, default=None, help="the watches' debug lines here")
    args = parser.parse_args()
    fleet = ScaleFleet(args.root)
    names = fleet.ready(args.hosts)
    code = (args.code or ROOT).resolve()
    watches: list[Watch] = []
    try:
        with tempfile.TemporaryDirectory(dir=fleet.root) as tmp:
            work = Path(tmp)
            etcd = EtcdCluster(work / "etcd", size=1)
            etcd.start()
            try:
                inventory = work / "inventory.toml"
                inventory.write_text(fleet.inventory_text(args.hosts))
                spec = work / "bench.toml"
                spec.write_text(
                    SPEC.format(inventory=inventory, n=args.hosts, delay=args.restart_delay)
                )
                env = dict(os.environ) | {
                    "PYTHONPATH": str(code),
                    "MINIDOCK_STATE": etcd.url(ttl=args.ttl),
                    "MINIDOCK_KEY_FILE": str(work / "key"),
                }
                md = [sys.executable, "-m", "minidock"]
                run(md, env, code, "apply", str(spec), "--adopt", "--wait", "--timeout", "10m")
                argv = [*md, "watch", "--interval", args.interval]
                trace = Trace(args.trace)
                if args.trace is not None:
                    args.trace.mkdir(parents=True, exist_ok=True)
                    traced = [sys.executable, str(ROOT / "benchmarks" / "traced.py")]
                    argv = [*traced, str(args.trace.resolve()), *argv[len(md) :]]
                watches = [Watch(argv, env, code) for _ in range(args.watches)]
                time.sleep(args.settle)
                for name in names:
                    (fleet.host_dir(name) / "calls").write_text("")
                    (fleet.host_dir(name) / "count").write_text("")
                before, rev = passes(md, env, code), revision(etcd.endpoints[0])
                rounds, end = Rounds(), time.monotonic() + args.seconds
                while time.monotonic() < end:
                    time.sleep(min(5.0, max(0.0, end - time.monotonic())))
                    rounds.sample(members(md, env, code))
                after, revs = passes(md, env, code), revision(etcd.endpoints[0]) - rev
                verbs = [(fleet.host_dir(n) / "calls").read_text().split() for n in names]
                for name in names:
                    (fleet.host_dir(name) / "count").unlink()
                decider = max(after, key=lambda pid: after[pid] - before.get(pid, 0))
                rested = members(md, env, code)
                borrowed = rested[decider].get("borrowed", "-")
                by_passes = sorted(after, key=lambda pid: after[pid] - before.get(pid, 0))
                held = " / ".join(str(rested[pid].get("warm", "-")) for pid in by_passes[::-1])
                died = deaths(fleet, names, watches, args.deaths, trace)
                carried = verbs_by_share(members(md, env, code)) if died else "-"
                took: list[Took] = []
                if args.kill_decider:
                    ask = functools.partial(members, md, env, code)
                    took = failovers(fleet, names, watches, decider, args.failovers, ask, trace)
            finally:
                for watch in watches:
                    if watch.proc.poll() is None:
                        watch.stop()
                    elif watch.proc.returncode != -signal.SIGKILL:  # not the bench's kill
                        print(watch.account(), file=sys.stderr)
                etcd.close()
    finally:
        fleet.stop()
    minute = 60.0 / args.seconds
    made = sorted(((after[m] - before.get(m, 0)) * minute for m in after), reverse=True)
    per_host = statistics.mean(len(v) for v in verbs) * minute
    counted = Counter(verb for v in verbs for verb in v)
    each = ", ".join(f"{verb} {n * minute / len(names):.1f}" for verb, n in counted.most_common())
    failed_over = "-"
    if took:
        failed_over = " / ".join(f"{t:.2f}" for t, _ in took) + " s (started: "
        failed_over += " / ".join(f"{t:.2f}" for _, t in took) + " s)"
    replaced = "-"
    if died:
        printed, started = [t for t, _ in died], [t for _, t in died]
        replaced = f"{statistics.median(printed):.2f} / {max(printed):.2f} s (started: "
        replaced += f"{statistics.median(started):.2f} / {max(started):.2f} s)"
    print(
        f"| {args.hosts} | {args.watches} | {args.interval} | "
        f"{' / '.join(f'{m:.0f}' for m in made)} | {per_host:.1f} ({each}) | "
        f"{revs * minute:.0f} | {borrowed} | {held} | {replaced} | {carried} | {failed_over} |"
    )
    print(rounds.line())


if __name__ == "__main__":
    main()
