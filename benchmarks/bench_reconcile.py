"""How long the pure decision core takes, by fleet size.

    .venv/bin/python benchmarks/bench_reconcile.py

Prints a Markdown table (docs/benchmarks.md keeps the latest): for each fleet, the time
of one reconcile pass over a converged fleet (the cron case: nothing to do) and of the
pass after losing a fifth of the hosts (the replacement case). Best of 5 runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sim import World, host, svc

SIZES = [(10, 5, 4), (50, 20, 10), (200, 50, 20), (500, 100, 25)]  # hosts, services, replicas


def best(fn: object, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    print(
        "| hosts | services | tasks | converged pass | after losing 20% of hosts | replacements |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n_hosts, n_services, replicas in SIZES:
        zones = "abc"
        w = World([host(f"h{i}", cpus=64, memory=None, zone=zones[i % 3]) for i in range(n_hosts)])
        w.apply(
            *(svc(f"s{i}", replicas=replicas, cpus=0.1, spread="zone") for i in range(n_services))
        )
        w.converge(limit=5)
        steady = best(w.plan)
        for h in w.hosts[: n_hosts // 5]:
            w.kill_host(h.name)
        w.step()  # first failed probe
        lost = best(w.plan)
        runs = len(w.plan().run)
        tasks = n_services * replicas
        print(
            f"| {n_hosts} | {n_services} | {tasks} | {steady * 1000:.1f} ms "
            f"| {lost * 1000:.1f} ms | {runs} |"
        )


if __name__ == "__main__":
    main()
