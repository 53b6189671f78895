"""Backup, restore and move throughput through the controller, against plain pipelines.

    .venv/bin/minidock lab --project minidock-bench up --hosts 2
    .venv/bin/python benchmarks/bench_volumes.py [--mib 64] [--runs 3]
    .venv/bin/minidock lab --project minidock-bench down

(or `--inventory PATH` for another lab's inventory.) A volume of `--mib` MiB of random
bytes is made on the first host; then, each run, each operation is timed as MiniDock does
it and as a plain shell pipeline does the same on the same volume, one after the other:

- backup: `minidock backup`'s stream (`docker cp HELPER:/data -` read over asyncssh by
  minidock.act.volumecopy, written into `restic backup --stdin`) against
  `ssh HOST docker cp HELPER:/data - | restic backup --stdin`, each into a fresh
  repository (a first backup: every byte chunked, compressed, encrypted and written);
- restore: `minidock restore`'s stream (`restic dump` read by minidock.restic, written into
  `docker cp -a - HELPER:/` over asyncssh on the second host) against
  `restic dump SNAPSHOT /bench.tar | ssh HOST2 docker cp -a - HELPER:/`;
- move: `minidock move`'s copy (minidock.act.volumecopy.copy_volume: both streams over
  asyncssh, at most 8 MiB in flight) against `ssh HOST1 docker cp ... - | ssh HOST2 docker
  cp -a - ...`.

Each copy that lands on the second host is checked (the blob's sha256 there is the
first host's) outside the timing. Wall seconds, median of `--runs`; MB/s with MB = 10^6
bytes of the tar stream. Prints a Markdown table (docs/benchmarks.md keeps the latest).
The helpers, the volumes and the repositories are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidock import restic
from minidock.act import volumecopy
from minidock.lab.images import WEB5_IMAGE
from minidock.model import Host
from minidock.restic import Repository
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor

VOLUME = "minidock_bench.1_vol"
PATH = "/data"
PASSWORD = "bench-volumes-pass"
BLOB_SUM = "sha256sum /data/blob | cut -d' ' -f1"


def ssh_argv(host: Host, command: list[str]) -> list[str]:
    """OpenSSH to a lab host as the inventory describes it, running `command`."""
    argv = ["ssh", "-o", "BatchMode=yes", "-p", str(host.port)]
    if host.identity_file:
        argv += ["-i", str(host.identity_file)]
    if host.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={host.known_hosts}"]
    return [*argv, f"{host.user}@{host.address}", shlex.join(command)]


def env(repo: Path) -> dict[str, str]:
    return {**os.environ, "RESTIC_REPOSITORY": str(repo), "RESTIC_PASSWORD": PASSWORD}


def pipeline(left: list[str], right: list[str], repo: Path) -> None:
    """`left | right`, both run here; either failing fails it."""
    with subprocess.Popen(left, stdout=subprocess.PIPE, env=env(repo)) as source:
        subprocess.run(right, stdin=source.stdout, env=env(repo), check=True)
    if source.returncode != 0:
        raise RuntimeError(f"{left[0]} exited {source.returncode}")


class Bench:
    def __init__(self, executor: SSHExecutor, a: Host, b: Host, tmp: Path) -> None:
        self.executor, self.a, self.b, self.tmp = executor, a, b, tmp
        self.size = 0  # bytes of the tar stream
        self.digest = ""
        self.repos = 0

    async def sh(self, host: Host, command: str) -> str:
        done = await self.executor.run(host, ["sh", "-c", command])
        if done.exit_status != 0:
            raise RuntimeError(f"{host.name}: {command}: {done.stderr.strip()}")
        return done.stdout.strip()

    async def prepare(self, mib: int) -> None:
        await volumecopy.remove_volume(self.executor, self.a, VOLUME)
        await volumecopy.remove_volume(self.executor, self.b, VOLUME)
        fill = f"head -c {mib}m /dev/urandom > /data/blob && {BLOB_SUM}"
        run = ["docker", "run", "--rm", "-v", f"{VOLUME}:/data", WEB5_IMAGE]
        self.digest = await self.sh(self.a, shlex.join(run) + " sh -c " + shlex.quote(fill))
        self.helper_a = await volumecopy.open_volume(
            self.executor, self.a, VOLUME, PATH, WEB5_IMAGE
        )

    async def fresh_b(self) -> str:
        """The second host's volume removed and its helper made again (empty volume)."""
        await volumecopy.remove_volume(self.executor, self.b, VOLUME)
        return await volumecopy.open_volume(self.executor, self.b, VOLUME, PATH, WEB5_IMAGE)

    async def check_b(self) -> None:
        await volumecopy.close_volume(self.executor, self.b, VOLUME)
        run = ["docker", "run", "--rm", "-v", f"{VOLUME}:/data", WEB5_IMAGE]
        found = await self.sh(self.b, shlex.join(run) + " sh -c " + shlex.quote(BLOB_SUM))
        assert found == self.digest, (found, self.digest)

    async def new_repo(self) -> Repository:
        self.repos += 1
        repo = Repository(str(self.tmp / f"repo{self.repos}"), PASSWORD)
        await restic.ensure(repo)
        return repo

    # -- the operations, each as MiniDock does it and as a plain pipeline -------------------
    async def backup_minidock(self) -> float:
        repo = await self.new_repo()

        async def feed(write: restic.Write) -> int:
            return await volumecopy.stream_out(self.executor, self.a, self.helper_a, PATH, write)

        started = time.perf_counter()
        saved = await restic.backup(repo, "bench.tar", {"bench": "minidock"}, "a", feed)
        took = time.perf_counter() - started
        self.size = saved.size
        return took

    async def backup_plain(self) -> float:
        repo = await self.new_repo()
        left = ssh_argv(self.a, ["docker", "cp", f"{self.helper_a}:{PATH}", "-"])
        right = ["restic", "backup", "-q", "--stdin", "--stdin-filename", "bench.tar"]
        started = time.perf_counter()
        await asyncio.to_thread(pipeline, left, right, Path(repo.location))
        return time.perf_counter() - started

    async def snapshot(self) -> tuple[Repository, str]:
        """A repository holding one backup of the volume (for the restores)."""
        repo = await self.new_repo()

        async def feed(write: restic.Write) -> int:
            return await volumecopy.stream_out(self.executor, self.a, self.helper_a, PATH, write)

        saved = await restic.backup(repo, "bench.tar", {}, "a", feed)
        return repo, saved.snapshot

    async def restore_minidock(self, repo: Repository, snap: str) -> float:
        helper = await self.fresh_b()
        started = time.perf_counter()
        stream = restic.dump(repo, snap, "/bench.tar")
        await volumecopy.stream_in(self.executor, self.b, helper, PATH, stream)
        took = time.perf_counter() - started
        await self.check_b()
        return took

    async def restore_plain(self, repo: Repository, snap: str) -> float:
        helper = await self.fresh_b()
        left = ["restic", "dump", snap, "/bench.tar"]
        right = ssh_argv(self.b, ["docker", "cp", "-a", "-", f"{helper}:/"])
        started = time.perf_counter()
        await asyncio.to_thread(pipeline, left, right, Path(repo.location))
        took = time.perf_counter() - started
        await self.check_b()
        return took

    async def move_minidock(self) -> float:
        await volumecopy.remove_volume(self.executor, self.b, VOLUME)
        await volumecopy.close_volume(self.executor, self.a, VOLUME)
        started = time.perf_counter()
        await volumecopy.copy_volume(
            self.executor, self.a, self.b, VOLUME, (PATH, WEB5_IMAGE)
        )  # the helpers made and removed inside, as a move's act does
        took = time.perf_counter() - started
        self.helper_a = await volumecopy.open_volume(
            self.executor, self.a, VOLUME, PATH, WEB5_IMAGE
        )
        await self.check_b()
        return took

    async def move_plain(self) -> float:
        helper = await self.fresh_b()
        left = ssh_argv(self.a, ["docker", "cp", f"{self.helper_a}:{PATH}", "-"])
        right = ssh_argv(self.b, ["docker", "cp", "-a", "-", f"{helper}:/"])
        started = time.perf_counter()
        await asyncio.to_thread(pipeline, left, right, self.tmp)
        took = time.perf_counter() - started
        await self.check_b()
        return took

    async def clean(self) -> None:
        for host in (self.a, self.b):
            await volumecopy.remove_volume(self.executor, host, VOLUME)


async def measure(hosts: list[Host], mib: int, runs: int) -> tuple[int, dict[str, list[float]]]:
    executor = SSHExecutor()
    times: dict[str, list[float]] = {}

    def note(name: str) -> Callable[[float], None]:
        return times.setdefault(name, []).append

    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(executor, hosts[0], hosts[1], Path(tmp))
        try:
            await bench.prepare(mib)
            repo, snap = await bench.snapshot()
            for n in range(runs):
                first, second = ("minidock", "plain") if n % 2 == 0 else ("plain", "minidock")
                for op in ("backup", "restore", "move"):
                    for way in (first, second):
                        method = getattr(bench, f"{op}_{way}")
                        args = (repo, snap) if op == "restore" else ()
                        took = await method(*args)
                        note(f"{op} {way}")(took)
                        print(f"run {n + 1}: {op} {way} {took:.2f} s", file=sys.stderr, flush=True)
        finally:
            await bench.clean()
            await executor.close()
    return bench.size, times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", default="inventory/lab.toml")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    hosts = list(load_inventory(args.inventory).hosts)
    if len(hosts) < 2:
        raise SystemExit("bench_volumes: the lab needs two hosts (lab up --hosts 2)")
    size, times = asyncio.run(measure(hosts, args.mib, args.runs))
    print(f"{args.mib} MiB of random bytes ({size / 1e6:.1f} MB of tar), median of {args.runs}:")
    print()
    print("| operation | through the controller (MiniDock) | plain pipeline | rate, ours / plain |")
    print("| --- | ---: | ---: | ---: |")
    for op, plain in (
        ("backup", "`ssh H docker cp C:/data - \\| restic backup --stdin`"),
        ("restore", "`restic dump S F \\| ssh H docker cp -a - C:/`"),
        ("move", "`ssh H1 docker cp C:/data - \\| ssh H2 docker cp -a - C:/`"),
    ):
        ours = statistics.median(times[f"{op} minidock"])
        theirs = statistics.median(times[f"{op} plain"])
        print(
            f"| {op} (plain: {plain}) | {ours:.2f} s, {size / ours / 1e6:.1f} MB/s "
            f"| {theirs:.2f} s, {size / theirs / 1e6:.1f} MB/s | {theirs / ours:.2f}x |"
        )


if __name__ == "__main__":
    main()
