"""The benchmarks of issue 12 run at a tiny size, so they cannot rot (docs/benchmarks.md
has the figures). Benchmarks are not tests: nothing here asserts a time, only that each
benchmark ran every case and printed its table.

bench_scale starts its own scale fleet of real OpenSSH sshd processes (3 here) with
docker stand-ins, under a temporary root; Ansible is left out of the smoke (its venv
would be a download of its own on every CI run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The rows of the Markdown tables in `text` whose first cell is `first_cell`."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if "|" in line]
    return [[c.strip() for c in r] for r in rows if r and r[0].strip() == first_cell]


def test_bench_reconcile_smoke() -> None:
    out = bench("benchmarks/bench_reconcile.py", "--sizes", "10x5x4", "--runs", "1")
    (row,) = table_rows(out, "10")
    assert all(cell not in ("", "-") for cell in row), out


def test_bench_scale_smoke_on_three_sshd_hosts(tmp_path: Path) -> None:
    out = bench(
        "benchmarks/bench_scale.py",
        "--sizes", "3", "--runs", "1", "--ansible", "", "--act", "3", "--cli", "3",
        "--watch-seconds", "3", "--root", str(tmp_path / "scale"),
    )  # fmt: skip
    observe, act = table_rows(out, "3")
    ansible = {4, 8}  # the Ansible columns: not run in the smoke
    assert all(c not in ("", "-") for i, c in enumerate(observe) if i not in ansible), out
    assert all(c not in ("", "-") for c in act), out


def test_bench_fixed_cost_smoke_beside_another_scale_fleet(tmp_path: Path) -> None:
    """Two scale fleets on one machine take two loopback networks (a benchmark's fleet
    left running beside the smoke's once answered its probes: host key changed), and the
    fixed-cost benchmark runs on the second: both its commands reach its own hosts."""
    roots = [tmp_path / "first", tmp_path / "second"]
    try:
        for root in roots:
            bench("benchmarks/scale_fleet.py", "up", "--hosts", "2", "--root", str(root))
        first, second = ((root / "inventory.toml").read_text() for root in roots)
        assert 'address = "127.' in first
        assert set(re.findall(r'address = "([\d.]+)"', first)).isdisjoint(
            re.findall(r'address = "([\d.]+)"', second)
        )
        out = bench(
            "benchmarks/bench_fixed_cost.py",
            "--inventory", str(roots[1] / "inventory.toml"), "--runs", "1",
        )  # fmt: skip
        (row,) = table_rows(out, "2")
        assert all(cell not in ("", "-") for cell in row), out
    finally:
        for root in roots:
            bench("benchmarks/scale_fleet.py", "down", "--root", str(root))


def test_bench_etcd_rest_smoke_counts_four_keys_a_quiet_pass(tmp_path: Path) -> None:
    """etcd's writes at rest on a 3-host scale fleet: a pass in which nothing happened
    writes `meta`, `rest` and `seen`, and the lock's `tenure` as it is taken; no host's
    or slot's key (docs/benchmarks.md)."""
    root = tmp_path / "scale"
    try:
        bench("benchmarks/scale_fleet.py", "up", "--hosts", "3", "--root", str(root))
        out = bench(
            "benchmarks/bench_etcd_rest.py",
            "--inventory", str(root / "inventory.toml"), "--hosts", "3", "--passes", "1",
        )  # fmt: skip
        (row,) = table_rows(out, "3")
        assert row[1:3] == ["5", "4"], out  # the lock's put, tenure, delete; two commits
    finally:
        bench("benchmarks/scale_fleet.py", "down", "--root", str(root))


def test_bench_shares_smoke_a_settled_hold_writes_nothing() -> None:
    """Holding the shares of 50 hosts on 3 controllers: the first holds take each
    controller's share in one transaction, a settled hold writes nothing, a join and a
    death settle within three turns of holds (the benchmark itself checks the keys
    against the ring each time), and every controller hears of the join and the death
    (the benchmark fails if one does not within 30 s)."""
    out = bench("benchmarks/bench_shares.py", "--hosts", "50", "--controllers", "3")
    (row,) = table_rows(out, "50")
    assert row[3] == "3", out  # a batch each
    assert row[5] == "0", out  # at rest
    assert row[6].split(" / ")[0] in ("2", "3"), out  # the last turn changes nothing
    assert row[7].split(" / ")[0] in ("2", "3"), out
    join_news, death_news = row[8].removesuffix(" ms").split(" / ")
    assert float(join_news) > 0, out
    assert float(death_news) > 0, out


def test_bench_watches_smoke_one_of_two_watches_makes_the_passes(tmp_path: Path) -> None:
    """Two watches on one etcd state over a 3-host scale fleet, at rest: one makes the
    passes, the other none (docs/ha.md, "One watch decides"); a task killed is replaced;
    then the decider is killed with -9 and a task with it, and the other replaces the task
    (the benchmark fails if nobody does within 120 s); the row has every column, the
    task verbs the owner carried among them.
    15 s to settle: a watch passes once only if it looked before any had a member key,
    which is its first round, within a few seconds of its start even on a loaded machine."""
    out = bench(
        "benchmarks/bench_watches.py",
        "--hosts", "3", "--watches", "2", "--settle", "15", "--seconds", "8",
        "--deaths", "1", "--kill-decider", "--ttl", "3s", "--root", str(tmp_path / "scale"),
    )  # fmt: skip
    (row,) = table_rows(out, "3")
    made = [int(n) for n in row[3].split(" / ")]
    assert len(made) == 2, out
    assert made[0] > 0, out
    assert made[1] == 0, out
    assert all(cell not in ("", "-") for cell in row), out
    for cell in (row[-1], row[-3]):  # the failover's seconds, the death's (median / longest)
        printed, started = cell.removesuffix(" s)").split(" s (started: ")
        for line, start in zip(printed.split(" / "), started.split(" / "), strict=True):
            assert 0 < float(start) <= float(line), out  # started before its pass printed it
    carried, ordered = (int(n) for n in row[-2].split(" / "))  # the owners' verbs
    assert 0 <= carried <= ordered, out
    held = [int(n) for n in row[-4].split(" / ")]  # each watch's connections: two share
    assert held == [3, 3], out  # three hosts: each keeps all (the other's is its standby)
    (line,) = [s for s in out.splitlines() if s.startswith("rounds over a share of ")]
    rounds, passes = line.removeprefix("rounds over a share of ").split("; passes: ")
    shares, took = rounds.split(" hosts: ")
    assert all(int(n) > 0 for n in shares.split(" / ")), out  # the standby's share
    assert float(took.split()[0]) > 0, out  # the median of its whole rounds' seconds
    assert float(passes.split()[0]) > 0, out  # and of the decider's passes
