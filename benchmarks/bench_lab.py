"""End-to-end timings on the lab fleet, through the real command line.

    .venv/bin/minidock lab up --hosts 4 && .venv/bin/python benchmarks/bench_lab.py

Each row is the wall time of one operator-visible operation, median of 3 rounds, on a
4-replica service with a 1 s health check (interval 1s, retries 2):
first deploy (`apply --wait`), a rolling update with parallelism 1 and 2 (monitor 1s),
recovery from a stopped host (cron-style `reconcile` passes until exit 0, down_after 2),
and a drain. Prints a Markdown table (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab_spec import web_spec  # noqa: E402

from minidock.lab import Lab  # noqa: E402

UPDATE = """
[services.web.update]
parallelism = {parallelism}
monitor = "1s"
order = "start-first"
"""


class Bench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.lab = Lab(ROOT)
        self.env = {**os.environ, "MINIDOCK_STATE": str(workdir / "state")}

    def md(self, *args: str) -> int:
        cmd = [sys.executable, "-m", "minidock", *args]
        return subprocess.run(cmd, env=self.env, capture_output=True, check=False).returncode

    def spec(self, version: int, parallelism: int = 1) -> str:
        path = self.workdir / "bench.toml"
        inventory = self.lab.inventory_path
        path.write_text(
            web_spec("bench", inventory, str(version), UPDATE.format(parallelism=parallelism))
        )
        return str(path)

    def until_converged(self) -> None:
        for _ in range(60):
            if self.md("reconcile") == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("not converged")

    def clean(self) -> None:
        self.lab.reset()
        subprocess.run(["rm", "-rf", str(self.workdir / "state")], check=True)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def round_(b: Bench) -> dict[str, float]:
    b.clean()
    out = {"first deploy, 4 replicas": timed(lambda: b.md("apply", b.spec(5), "--wait"))}
    out["rolling update, parallelism 1"] = timed(lambda: b.md("apply", b.spec(6, 1), "--wait"))
    out["rolling update, parallelism 2"] = timed(lambda: b.md("apply", b.spec(5, 2), "--wait"))
    busiest = max(
        ["host1", "host2", "host3"],
        key=lambda h: len(
            b.lab.exec(
                h, "docker", "ps", "-q", "--filter", "label=minidock.cluster=bench"
            ).stdout.split()
        ),
    )
    b.lab.kill(busiest, "stop")
    out["host lost: reconcile passes to converged"] = timed(b.until_converged)
    b.lab.revive(busiest)
    b.until_converged()
    drained = next(h for h in ["host1", "host2", "host3"] if h != busiest)
    out["drain a host (replacements healthy first)"] = timed(lambda: b.md("drain", drained))
    b.md("activate", drained)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(Path(tmp))
        rounds = [round_(b) for _ in range(3)]
        b.clean()
    print("| operation (lab, 4 replicas, real CLI) | median of 3 |")
    print("| --- | ---: |")
    for key in rounds[0]:
        print(f"| {key} | {statistics.median(r[key] for r in rounds):.1f} s |")


if __name__ == "__main__":
    main()
