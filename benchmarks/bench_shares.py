"""What holding the shares costs (issue 47, items 2 and 5): the owner keys of N hosts held
by C controllers on one etcd member, each hold as a `watch` makes it after a round
(minidock.usecases.shares.Shares), measured by etcd itself (its revisions) and the clock.

    .venv/bin/python benchmarks/bench_shares.py                  # 1,000 and 10,000 hosts
    .venv/bin/python benchmarks/bench_shares.py --hosts 1000 --controllers 5 10

For each (N, C): an etcd member of its own on free loopback ports (tests/etcd.py), C
member keys (Membership, lease TTL 10 s) in this one process, then:

- **first holds**: each controller holds once in turn (the first takes its share, the
  others theirs): the seconds and the etcd revisions (one per take that wrote);
- **at rest**: every controller holds again, five turns: the seconds a hold takes when
  its share is settled (one read of the member ids) and the revisions (none);
- **a join**: one more controller; holds in turns until a turn changes no key: the turns
  (the last changing none), the hosts that changed hands, the revisions (a give-up and a
  take each), and the seconds of the longest hold;
- **a death**: one controller's lease revoked (as etcd does when a killed controller's
  lease ends; the TTL itself is not waited for); holds until settled, as above;
- **the news**: every controller follows the members and the owner keys
  (Membership.follow, etcd's watch, as each `watch` does); the milliseconds from the
  joiner's first beat, and from the revoke, until the last of the others has the news
  that rings its round (a `watch` otherwise holds at its next resync, 2 s by default).

Prints one Markdown row per (N, C) for docs/benchmarks.md. No SSH and no hosts: the
shares are etcd's and the ring's work alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.core.ring import assign  # noqa: E402
from minidock.store import parse_location  # noqa: E402
from minidock.store.etcd_client import EtcdClient  # noqa: E402
from minidock.store.location import EtcdURL  # noqa: E402
from minidock.store.members import Membership  # noqa: E402
from minidock.store.owners import read_owners  # noqa: E402
from minidock.usecases.shares import Shares  # noqa: E402
from tests.etcd import EtcdCluster, revision  # noqa: E402


class Bench:
    """C controllers on one etcd member, and the fleet's owner key names."""

    def __init__(self, cluster: EtcdCluster, url: EtcdURL, hosts: frozenset[str]) -> None:
        self.cluster, self.url, self.hosts = cluster, url, hosts
        self.members: list[Membership] = []
        self.shares: list[Shares] = []
        self.client = EtcdClient(url)
        self.beats = 0  # member key writes, one etcd revision each: not the shares'
        self.heard: list[Heard] = []  # each member's news, in the order of `members`

    def join(self) -> None:
        member = Membership(self.url)
        heard = Heard()
        member.follow(heard)
        member.beat()
        self.beats += 1
        self.members.append(member)
        self.shares.append(Shares(member))
        self.heard.append(heard)

    def news_of(self, change: str) -> float:
        """Seconds from a join ("join") or a death ("death") until each of the others
        heard of it: the slowest of them."""
        others = list(self.heard)
        for heard in others:
            heard.clear()
        start = time.perf_counter()
        if change == "join":
            self.join()
        else:
            self.die(0)
            others = others[1:]
        return max(heard.wait() for heard in others) - start

    def die(self, i: int) -> None:
        self.members.pop(i).leave()  # its lease revoked: its keys go at once
        self.shares.pop(i)
        self.heard.pop(i)

    def revision(self) -> int:
        """etcd's revision less the member keys' beats: the shares' own writes."""
        return revision(self.cluster.endpoints[0]) - self.beats

    def turn(self) -> list[float]:
        """Every controller beats and holds once; the seconds of each hold."""
        took = []
        for member, shares in zip(self.members, self.shares, strict=True):
            member.beat()
            self.beats += 1
            start = time.perf_counter()
            shares.hold(self.hosts)
            took.append(time.perf_counter() - start)
        return took

    def owners(self) -> dict[str, str]:
        return {h: k.controller for h, k in read_owners(self.url, self.client).items()}

    def settle(self) -> tuple[int, int, float]:
        """Turns until one changes no key: (turns, etcd revisions, longest hold)."""
        before, start, longest = self.owners(), self.revision(), 0.0
        for turns in range(1, 10):
            longest = max(longest, *self.turn())
            after = self.owners()
            if after == before:
                return turns, self.revision() - start, longest
            before = after
        raise SystemExit("the shares did not settle in 9 turns")

    def check(self) -> None:
        ids = [m.member.id for m in self.members]
        if self.owners() != assign(self.hosts, ids):
            raise SystemExit("the owner keys are not the ring's map over the live members")

    def close(self) -> None:
        for member in self.members:
            member.leave()
        self.client.close()


class Heard:
    """When a member first had news since `clear` (perf_counter), from its watch's thread."""

    def __init__(self) -> None:
        self.at: float | None = None
        self._news = threading.Event()

    def __call__(self) -> None:
        if self.at is None:
            self.at = time.perf_counter()
        self._news.set()

    def clear(self) -> None:
        self.at = None
        self._news.clear()

    def wait(self) -> float:
        if not self._news.wait(30) or self.at is None:
            raise SystemExit("a controller had no news of the change within 30 s")
        return self.at


def measure(work: Path, n: int, c: int) -> str:
    cluster = EtcdCluster(work / f"etcd-{n}-{c}", size=1)
    cluster.start()
    bench: Bench | None = None
    try:
        url = parse_location(cluster.url(ttl="10s"))
        assert isinstance(url, EtcdURL)
        bench = Bench(cluster, url, frozenset(f"bench/s{i:05d}" for i in range(n)))
        for _ in range(c):
            bench.join()
        start, first = bench.revision(), time.perf_counter()
        bench.turn()
        first_s, first_rev = time.perf_counter() - first, bench.revision() - start
        bench.settle()
        bench.check()
        start = bench.revision()
        rest = [t for _ in range(5) for t in bench.turn()]
        rest_rev = bench.revision() - start
        before = bench.owners()
        join_news = bench.news_of("join")
        join_turns, join_rev, join_long = bench.settle()
        bench.check()
        moved = sum(1 for h, m in bench.owners().items() if before[h] != m)
        before = bench.owners()
        death_news = bench.news_of("death")
        death_turns, death_rev, death_long = bench.settle()
        bench.check()
        taken = sum(1 for h, m in bench.owners().items() if before[h] != m)
        return (
            f"| {n:,} | {c} | {first_s:.2f} s | {first_rev:,} | "
            f"{statistics.median(rest) * 1000:.1f} ms | {rest_rev} | "
            f"{join_turns} / {moved:,} / {join_rev:,} / {join_long:.2f} s | "
            f"{death_turns} / {taken:,} / {death_rev:,} / {death_long:.2f} s | "
            f"{join_news * 1000:.1f} / {death_news * 1000:.1f} ms |"
        )
    finally:
        if bench is not None:
            bench.close()
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--controllers", type=int, nargs="+", default=[5, 10])
    args = parser.parse_args()
    print(
        "| hosts | controllers | first holds | revisions | a settled hold (median) | "
        "its revisions | a join: turns / hosts moved / revisions / longest hold | "
        "a death: turns / hosts taken / revisions / longest hold | "
        "the news of a join / a death, slowest controller |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="bench-shares-") as tmp:
        for n in args.hosts:
            for c in args.controllers:
                print(measure(Path(tmp), n, c), flush=True)


if __name__ == "__main__":
    main()
