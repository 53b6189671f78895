"""How long the pure decision core takes, by fleet size: whole `reconcile()` calls.

    .venv/bin/python benchmarks/bench_reconcile.py [--sizes 1000x200x50] [--runs 5]
    .venv/bin/python benchmarks/bench_reconcile.py --profile 1000x200x50 --case place

For each fleet (HOSTSxSERVICESxREPLICAS), three passes, each one whole `reconcile()` call
on an in-memory fleet (tests/sim.py's World; the observation is built before the clock
starts, so only the decision is timed). The call is the controller's (`runner.decision`:
the observation and state out of the cyclic GC's view while it decides); `--plain` times
the bare `reconcile()` instead. One world lives in the process at a time, as in the
controller:

- *place all*: the first pass after `apply`, which places every task on an empty fleet;
- *converged*: the cron case, nothing to do;
- *lose 20%*: the pass after a fifth of the hosts went down, which places every
  replacement.

The fleet mixes what the scheduler weighs: three host sizes, a `zone` label with five
values, services with and without `spread = "zone"`, cpus and memory reservations, some
with a host port, some with a constraint. Median (min-max) of `--runs` runs. Prints a
Markdown table (docs/benchmarks.md keeps the latest); `--profile` prints a pyinstrument
profile of one case instead (pyinstrument is not a dependency: pip install it).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidock.core import Plan, reconcile
from minidock.model import Constraint, PortMapping, Service
from minidock.runner import decision
from tests.sim import World, host, svc

SIZES = ["10x5x4", "100x20x10", "500x100x25", "1000x200x50"]  # hosts x services x replicas
ZONES = "abcde"
GIB = 1 << 30


def fleet(n_hosts: int) -> World:
    """Hosts of three sizes over five zones."""
    sizes = [(8, 32 * GIB), (16, 64 * GIB), (32, 128 * GIB)]
    return World(
        [
            host(f"h{i:04d}", cpus=sizes[i % 3][0], memory=sizes[i % 3][1], zone=ZONES[i % 5])
            for i in range(n_hosts)
        ]
    )


def services(n_services: int, replicas: int) -> list[Service]:
    """Every other service spread over zones, every 5th kept off zone e, every 10th with a
    host port; reservations from 0.25 cpus / 256 MiB to 1 cpu / 1 GiB."""
    out = []
    for i in range(n_services):
        out.append(
            svc(
                f"s{i:03d}",
                replicas=replicas,
                cpus=(0.25, 0.5, 1.0)[i % 3],
                memory=(256 << 20) * (1 + i % 4),
                spread="zone" if i % 2 == 0 else None,
                constraints=(Constraint("zone", "!=", "e"),) if i % 5 == 0 else (),
                ports=(PortMapping(20000 + i, 8080),) if i % 10 == 0 else (),
            )
        )
    return out


def timed(fn: Callable[[], Plan], runs: int) -> tuple[list[float], Plan]:
    """`runs` timings of `fn`, each plan dropped before the next call (a controller holds
    one), and the last plan."""
    times: list[float] = []
    plan: Plan | None = None
    for _ in range(runs):
        plan = None
        gc.collect()  # every run starts from the same heap
        start = time.perf_counter()
        plan = fn()
        times.append(time.perf_counter() - start)
    assert plan is not None
    return times, plan


def decide(w: World, *, plain: bool = False) -> Callable[[], Plan]:
    """One decision on the world as it is now (the observation made beforehand)."""
    assert w.cluster is not None
    cluster, inventory, observed, state, now = w.cluster, w.inventory, w.observe(), w.state, w.now
    call = reconcile if plain else decision
    return lambda: call(cluster, inventory, observed, state, now)


CASES = ("place", "converged", "lost")


def world(size: str, case: str) -> World:
    """One of the three worlds of one size, ready for its pass."""
    n_hosts, n_services, replicas = (int(x) for x in size.split("x"))
    w = fleet(n_hosts)
    w.apply(*services(n_services, replicas))
    if case == "place":
        return w
    w.converge(limit=5)
    if case == "lost":
        for h in w.hosts[::5]:  # a fifth of the hosts, across the fleet
            w.kill_host(h.name)
        w.step()  # the first failed probe: unreachable; the next pass finds them down
    return w


def cell(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"{statistics.median(ms):.1f} ms ({min(ms):.1f}-{max(ms):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", default="", help="one size: profile it with pyinstrument")
    parser.add_argument("--case", default="place", choices=CASES)
    parser.add_argument("--plain", action="store_true", help="time the bare reconcile()")
    args = parser.parse_args()
    if args.profile:
        from pyinstrument import Profiler

        run = decide(world(args.profile, args.case), plain=args.plain)
        with Profiler(interval=0.0005) as profiler:
            run()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    print("| hosts | services | tasks | place all | converged | lose 20% | replacements |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes.split(","):
        n_hosts, n_services, replicas = (int(x) for x in size.split("x"))
        cells, replaced = [], 0
        for case in CASES:  # one world at a time, each dropped with its plan once checked
            times, plan = timed(decide(world(size, case), plain=args.plain), args.runs)
            cells.append(cell(times))
            if case == "place":
                assert len(plan.run) == n_services * replicas, plan.pending[:3]
            elif case == "converged":
                assert plan.converged, plan
            else:
                replaced = len(plan.run)
            del plan
        print(
            f"| {n_hosts} | {n_services} | {n_services * replicas} | {' | '.join(cells)} "
            f"| {replaced} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
