"""Host loss -> converged under `minidock watch`, for each kind of host loss, on the lab.

    .venv/bin/minidock lab up --hosts 4 && .venv/bin/python benchmarks/bench_loss.py

A 4-replica service (health check every 1 s, retries 2) runs on host1..host3 of the lab
(inventory/lab.toml: connect_timeout 2s, down_after 2; probe_timeout is the default 3s).
`minidock watch --interval 2s` runs as a subprocess and has pooled its connections (two
passes) when the host carrying 2 of the 4 tasks is lost by `lab kill --mode MODE` (stop,
pause, partition, sshd, dockerd). Measured from the moment the fault is in place, by
reading the surviving hosts every 0.2 s (docker exec):

- *running*: the survivors run one task for each of the 4 slots;
- *healthy*: and all 4 are healthy (converged).

Median of 3 rounds per mode. Prints a Markdown table (docs/benchmarks.md keeps the latest).
Options: `--modes stop,pause` to measure some modes only, `--rounds N`. The lab is the one
in the working directory (its project is read from .lab/lab.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab_spec import web_spec  # noqa: E402

from minidock.lab import KILL_MODES, Lab  # noqa: E402

# a full disk is not host loss: the host still answers (docs/reliability.md has its row)
LOSS_MODES = tuple(m for m in KILL_MODES if m != "disk")

CLUSTER = "bench"
ELIGIBLE = ["host1", "host2", "host3"]


class Bench:
    def __init__(self, workdir: Path, lab: Lab) -> None:
        self.workdir = workdir
        self.lab = lab
        self.env = {**os.environ, "MINIDOCK_STATE": str(workdir / "state")}
        self.spec = workdir / "bench.toml"
        self.spec.write_text(web_spec(CLUSTER, lab.inventory_path))

    def md(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "minidock", *args]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=False)

    def tasks(self, host: str, healthy: bool = False) -> list[int]:
        """Slots of this cluster's running (or healthy) tasks on a host, read inside it."""
        argv = ["docker", "ps", "--filter", f"label=minidock.cluster={CLUSTER}"]
        argv += ["--filter", "health=healthy"] if healthy else []
        argv += ["--format", "{{.Names}}"]
        names = self.lab.exec(host, *argv, check=False).stdout.split()
        return [int(n.split(".")[1]) for n in names]

    def one_per_slot(self, hosts: list[str], healthy: bool) -> bool:
        slots = Counter(s for h in hosts for s in self.tasks(h, healthy))
        return slots == Counter({1: 1, 2: 1, 3: 1, 4: 1})

    def clean(self) -> None:
        self.lab.reset()
        subprocess.run(["rm", "-rf", str(self.workdir / "state")], check=True)

    def until_converged(self) -> None:
        for _ in range(120):
            if self.md("reconcile").returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("not converged")


def one_loss(b: Bench, mode: str) -> dict[str, float]:
    """Lose the host with 2 tasks under watch; seconds until running, and healthy."""
    b.clean()
    if b.md("apply", str(b.spec), "--wait", "--timeout", "90s").returncode != 0:
        raise RuntimeError("first deploy did not converge")
    lost = max(ELIGIBLE, key=lambda h: len(b.tasks(h)))
    survivors = [h for h in ELIGIBLE if h != lost]
    cmd = [sys.executable, "-m", "minidock", "watch", "--interval", "2s"]
    watcher = subprocess.Popen(cmd, env=b.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, float] = {}
    try:
        time.sleep(5)  # two passes: every connection is pooled
        b.lab.kill(lost, mode)  # type: ignore[arg-type]
        start = time.monotonic()
        while "healthy" not in out:
            now = time.monotonic() - start
            if now > 180:
                raise RuntimeError(f"{mode}: not converged after 180 s")
            if "running" not in out and b.one_per_slot(survivors, healthy=False):
                out["running"] = now
            if b.one_per_slot(survivors, healthy=True):
                out["running"] = out.get("running", now)
                out["healthy"] = now
            time.sleep(0.2)
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=60)
        b.lab.revive(lost)
    b.until_converged()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default=",".join(LOSS_MODES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    modes = args.modes.split(",")
    project = json.loads(Path(".lab/lab.json").read_text())["project"]
    lab = Lab(Path.cwd(), project=project)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(Path(tmp), lab)
        for _ in range(args.rounds):
            for mode in modes:
                results[mode].append(one_loss(b, mode))
                print(mode, results[mode][-1], file=sys.stderr, flush=True)
        b.clean()
    print(f"| host loss under watch (median of {args.rounds}) | 4 running | 4 healthy |")
    print("| --- | ---: | ---: |")
    for mode in modes:
        cells = [statistics.median(r[k] for r in results[mode]) for k in ("running", "healthy")]
        print(f"| {mode} | " + " | ".join(f"{c:.1f} s" for c in cells) + " |")


if __name__ == "__main__":
    main()
