"""`minidock watch` on the scale fleet (issue 26): a killed task -> its replacement started,
under `watch --interval 30s`, and the commands each host runs per minute at steady state.

    .venv/bin/python benchmarks/bench_watch.py --hosts 100            # this tree's MiniDock
    .venv/bin/python benchmarks/bench_watch.py --hosts 100 --code /work/main  # another tree's

The fleet is benchmarks/scale_fleet.py's (OpenSSH sshd per host, the docker stand-in, which
keeps an event log that `docker events` follows and `docker kill` writes). One service of a
task per host is applied; then `minidock watch --interval 30s` runs (from `--code`'s tree,
else this one), and the stand-in counts every command each host runs for `--steady`
seconds. Then one task is killed (`docker kill` on its host, exit 137) `--kills` times, each
timed from the kill to the watch printing its replacement's `started` line (the stand-in
starts a container at once). Prints one Markdown table row.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_fleet import ScaleFleet

SPEC = """cluster = "bench"
inventory = "{inventory}"

[services.one]
image = "bench/web:1"
replicas = {n}
spread = "zone"
command = ["sleep", "1d"]
restart = {{ delay = "{delay}" }}
"""


def applied(
    work: Path, hosts: int, code: Path, inventory_text: str, delay: str = "100ms"
) -> tuple[list[str], dict[str, str]]:
    """SPEC over the first `hosts` hosts, applied (`--wait`) with MiniDock from `code` and a
    state in `work`, through `inventory_text`: the `minidock` argv and environment that
    ran it, for the benchmark's next commands."""
    inventory = work / "inventory.toml"
    inventory.write_text(inventory_text)
    spec = work / "bench.toml"
    spec.write_text(SPEC.format(inventory=inventory, n=hosts, delay=delay))
    env = dict(os.environ) | {"PYTHONPATH": str(code), "MINIDOCK_STATE": str(work / "state")}
    md = [sys.executable, "-m", "minidock"]  # `python -m` from `code` (its cwd)
    done = subprocess.run(
        [*md, "apply", str(spec), "--wait", "--timeout", "10m"],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"apply failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return md, env


class Watch:
    """`minidock watch` as a subprocess, its stdout lines kept with the time each came, and
    the times its passes ended (each pass's `minidock: ...` line on stderr)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[tuple[float, str]] = []
        self.passes: list[float] = []
        self.said: deque[str] = deque(maxlen=20)  # its last lines on stderr
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_passes, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def _read_passes(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            self.said.append(line)
            if line.startswith("minidock: "):
                self.passes.append(time.monotonic())

    def settled(self, timeout: float) -> None:
        """Until its first pass ended (it prints a line), then 15 s for the pass its streams
        ring on coming up (a warm probe of every host: about 12 s at 1,000 hosts): its
        start-up is not counted as steady state."""
        end = time.monotonic() + timeout
        while not self.passes and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(15)

    def started_after(self, since: float, timeout: float) -> float | None:
        """Seconds from `since` to the first `started` line printed after it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for at, line in list(self.lines):
                if at >= since and line.startswith("started "):
                    return at - since
            time.sleep(0.01)
        return None

    def account(self) -> str:
        """Where it stands, for a benchmark that gave up waiting on the watches: its exit
        (or, running, its stacks asked for: benchmarks/traced.py) and its last stderr."""
        code = self.proc.poll()
        if code is None:
            self.proc.send_signal(signal.SIGUSR1)
        said = "".join(f"\n    {line}" for line in self.said)
        return f"  watch {self.proc.pid}: {'running' if code is None else f'exited {code}'}{said}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)


def running_tasks(fleet: ScaleFleet, name: str) -> list[str]:
    """The ids of the bench's tasks running on the host `name`."""
    return fleet.docker(name, "ps", "--filter", "label=minidock.cluster=bench", "-q").stdout.split()


def running_task(fleet: ScaleFleet, name: str) -> str:
    return running_tasks(fleet, name)[0]


def a_running_task(fleet: ScaleFleet, names: list[str]) -> tuple[str, str]:
    """A random host of `names` with a task of the bench running, and that task: a host a
    cold start took for lost has had its task moved to another, which holds two."""
    for name in random.sample(names, len(names)):
        if found := running_tasks(fleet, name):
            return name, found[0]
    raise SystemExit("no task of the bench runs on any host")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--interval", default="30s")
    parser.add_argument("--code", type=Path, default=None, help="run MiniDock from this tree")
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    parser.add_argument("--restart-delay", default="100ms", help="the service's restart delay")
    args = parser.parse_args()
    fleet = ScaleFleet(args.root)
    names = fleet.ready(args.hosts)
    code = (args.code or Path(__file__).resolve().parent.parent).resolve()
    try:
        with tempfile.TemporaryDirectory(dir=fleet.root) as tmp:
            # the whole fleet's inventory; the spec spreads over the first n hosts
            md, env = applied(
                Path(tmp), args.hosts, code, fleet.inventory_text(args.hosts), args.restart_delay
            )
            watch = Watch([*md, "watch", "--interval", args.interval], env, code)
            watch.settled(timeout=300)  # its first passes: connections pooled, streams open
            for name in names:
                (fleet.host_dir(name) / "calls").write_text("")
                (fleet.host_dir(name) / "count").write_text("")
            time.sleep(args.steady)
            verbs = [(fleet.host_dir(n) / "calls").read_text().split() for n in names]
            for name in names:
                (fleet.host_dir(name) / "count").unlink()
            per_minute = statistics.mean(len(v) for v in verbs) * 60.0 / args.steady
            counted = Counter(verb for v in verbs for verb in v)
            each = ", ".join(
                f"{verb} {n * 60.0 / args.steady / len(names):.1f}"
                for verb, n in counted.most_common()
            )
            took = []
            for _ in range(args.kills):
                victim = random.choice([n for n in names if fleet.docker(n, "ps", "-q").stdout])
                task = running_task(fleet, victim)
                at = time.monotonic()
                fleet.docker(victim, "kill", task)
                seconds = watch.started_after(at, timeout=90)
                took.append(float("nan") if seconds is None else seconds)
                time.sleep(3)
            watch.stop()
    finally:
        fleet.stop()
    shown = ", ".join(f"{t:.2f}" for t in took)
    print(
        f"| {args.hosts} | {args.interval} | {statistics.median(took):.2f} s ({shown}) "
        f"| {per_minute:.1f} ({each}) |"
    )


if __name__ == "__main__":
    main()
