"""Passes at fleet size, side by side on the same hosts: MiniDock, the asyncssh floor, Ansible.

    .venv/bin/python benchmarks/bench_scale.py                     # N = 10, 100, 500, 1000
    .venv/bin/python benchmarks/bench_scale.py --sizes 3 --runs 1 --ansible 3   # the smoke

On the scale fleet (benchmarks/scale_fleet.py: OpenSSH sshd per host on loopback, docker
stand-ins; started here if it is not up, under --root), each host seeded with two running
tasks of cluster `bench` and one container MiniDock does not manage (port 9100), for each
fleet size N (the first N hosts of the fleet):

- *observe, cold*: `minidock.observe.observe` with a fresh `SSHExecutor` (what every cron
  `minidock reconcile` pays); *warm*: again on the same executor (what `minidock watch`
  pays); every probe command included (ps, inspect, the host ports read);
- *floor, cold / warm*: the minimal asyncssh fan-out, `asyncssh.connect` + `conn.run` of
  MiniDock's probe (the same batch script: ps, the port reads, inspect of what ps listed)
  + `asyncio.gather`, with the same keys and host-key checking (known_hosts read once),
  connections opened 128 at a time (MiniDock's bound; unbounded, a thousand connects at
  once miss their timeout on two cores), commands unbounded; warm reuses its connections;
- *Ansible*: `ansible all -m command -a 'docker ps ...' -f N` from its own venv
  (ansible-core installed there by this script, never a MiniDock dependency), OpenSSH with
  host keys checked, `ansible_python_interpreter` set; cold (no ControlPersist sockets
  left) and warm (its ControlPersist sockets reused);
- *act*: one `minidock` pass (`runner.run_pass`, fresh executor) that starts one task on
  every host (a service of N replicas spread over the hosts), against the floor running the
  same commands (recorded from MiniDock's pass) on fresh connections, each host's in order;
- *watch*: `usecases.watch_step` on a converged fleet with pooled connections (observe,
  decide, commit), as `minidock watch` runs it;
- *the CLI*: `minidock reconcile` as a subprocess on that converged fleet: wall time, CPU
  seconds (user + sys) and peak RSS; and `minidock watch --interval 1s` run for
  `--watch-seconds`, its peak RSS.

Every figure is the median (min-max) of `--runs` runs; MiniDock's and the floor's runs are
interleaved so both see the same machine. "CPU" is the controller's CPU seconds (the
fleet's sshd and stand-ins are not counted). Prints Markdown tables (docs/benchmarks.md
keeps the latest) and writes every run's numbers to --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncssh  # noqa: E402
from scale_fleet import ScaleFleet  # noqa: E402

from minidock.commands.facts import ps_argv  # noqa: E402
from minidock.model import Cluster, Host, Inventory, Service  # noqa: E402
from minidock.observe import observe, probe_steps  # noqa: E402
from minidock.runner import run_pass  # noqa: E402
from minidock.spec import load_inventory  # noqa: E402
from minidock.ssh import (  # noqa: E402
    Executor,
    Result,
    SSHExecutor,
    batch_script,
    connect_options,
)

CLUSTER = "bench"
PROBE = ps_argv(None)  # what Ansible runs: the probe's `docker ps`
# what the floor runs: MiniDock's whole probe, the same batch script (ps, the port reads,
# inspect of what ps listed) as one command, so both do the same work on the hosts
PROBE_BATCH = ["sh", "-c", batch_script(probe_steps(CLUSTER), "@@minidock-0123456789abcdef")]


@dataclass
class Sample:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)  # MiB

    def add(self, wall: float, cpu: float, rss: float = 0.0) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)
        self.rss.append(rss)

    def cell(self, what: str = "wall") -> str:
        values = getattr(self, what)
        if not values:
            return "-"
        unit, scale = ("MiB", 1.0) if what == "rss" else ("s", 1.0)
        med = statistics.median(values) * scale
        return f"{med:.2f} {unit} ({min(values):.2f}-{max(values):.2f})"

    def median(self, what: str = "wall") -> float:
        return statistics.median(getattr(self, what))


async def timed(work: Awaitable[Any]) -> tuple[float, float, Any]:
    """Wall and CPU seconds of awaiting `work`, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = await work
    return time.perf_counter() - wall, time.process_time() - cpu, out


# -- MiniDock ---------------------------------------------------------------------------------
async def mini_cold(hosts: Sequence[Host]) -> tuple[float, float]:
    executor = SSHExecutor()
    wall, cpu, seen = await timed(observe(executor, hosts, CLUSTER))
    await executor.close()
    _check(seen.hosts.values(), len(hosts))
    return wall, cpu


def _check(observations: Any, n: int) -> None:
    failed = [o for o in observations if not o.ok]
    if failed:
        raise RuntimeError(
            f"{len(failed)}/{n} probes failed, e.g. {failed[0].host}: {failed[0].error}"
        )


# -- the floor --------------------------------------------------------------------------------
class Floor:
    """The minimal asyncssh fan-out: connect, run, gather; the same keys and host-key check."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self.hosts = list(hosts)
        known = hosts[0].known_hosts or "~/.ssh/known_hosts"
        self.known = asyncssh.read_known_hosts(os.path.expanduser(known))
        self.conns: dict[str, asyncssh.SSHClientConnection] = {}
        self.opening = asyncio.Semaphore(128)

    async def connect(self, host: Host) -> asyncssh.SSHClientConnection:
        """Connections are opened 128 at a time, MiniDock's bound: unbounded, a thousand at
        once on two cores miss their connect_timeout (seen at N = 1000)."""
        options = connect_options(host) | {"known_hosts": self.known}
        async with self.opening:
            conn = await asyncssh.connect(host.address, **options)
        self.conns[host.name] = conn
        return conn

    async def run(
        self,
        argvs: dict[str, list[tuple[list[str], str | None]]],
        statuses: dict[str, list[int]] | None = None,
    ) -> None:
        """On every host at once, its commands in order (on its connection, made if none),
        each expected to exit as `statuses` says (0 when not given)."""

        async def one(host: Host) -> None:
            conn = self.conns.get(host.name) or await self.connect(host)
            expected = (statuses or {}).get(host.name) or [0] * len(argvs[host.name])
            for (argv, stdin), status in zip(argvs[host.name], expected, strict=True):
                done = await conn.run(_join(argv), input=stdin, check=False)
                if done.exit_status != status:
                    raise RuntimeError(
                        f"{host.name}: {argv[:2]} exit {done.exit_status}: {done.stderr}"
                    )

        await asyncio.gather(*(one(h) for h in self.hosts))

    async def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        await asyncio.gather(*(c.wait_closed() for c in self.conns.values()))
        self.conns.clear()


def _join(argv: Sequence[str]) -> str:
    import shlex

    return shlex.join(argv)


# -- Ansible ----------------------------------------------------------------------------------
def ansible_venv(root: Path) -> Path:
    """ansible-core in a venv of its own under the fleet's root (installed once)."""
    venv = root / "ansible-venv"
    if not (venv / "bin" / "ansible").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "ansible-core"], check=True)
    return venv


def ansible_inventory(fleet: ScaleFleet, hosts: Sequence[Host], where: Path) -> Path:
    lines = ["[fleet]"]
    for h in hosts:
        lines.append(
            f"{h.name} ansible_host={h.address} ansible_port={h.port} ansible_user={h.user} "
            f"ansible_ssh_private_key_file={fleet.key} ansible_python_interpreter=/usr/bin/python3"
        )
    path = where / f"ansible-{len(hosts)}.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_run(
    venv: Path, inventory: Path, fleet: ScaleFleet, n: int, sockets: Path
) -> tuple[float, float, float]:
    """One ad-hoc command on every host: wall, CPU seconds and peak RSS (MiB) of Ansible."""
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": (
            f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes "
            "-o ControlMaster=auto -o ControlPersist=60s -o GSSAPIAuthentication=no"
        ),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(sockets),
        "ANSIBLE_LOCAL_TEMP": str(sockets / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    # docker's {{.ID}} is not Jinja's; and args that start with "{" would be read as JSON
    raw = f"{PROBE[0]} {{% raw %}}{_join(PROBE[1:])}{{% endraw %}}"
    cmd = [
        str(venv / "bin" / "ansible"),
        "all",
        "-i",
        str(inventory),
        "-m",
        "command",
        "-a",
        raw,
        "-f",
        str(n),
    ]
    return _measured(cmd, env)


def _measured(
    cmd: list[str], env: dict[str, str], stop_after: float | None = None
) -> tuple[float, float, float]:
    """Run a command: its wall time, CPU seconds (user + sys, with its children) and peak
    RSS (MiB, its largest process). With `stop_after`, SIGINT it after that many seconds."""
    begin = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_after is not None:
        time.sleep(stop_after)
        proc.send_signal(signal.SIGINT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begin
    out, err = proc.stdout.read() if proc.stdout else "", proc.stderr.read() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if stop_after is None and code not in (0, 3):
        raise RuntimeError(f"{cmd[:3]} exit {code}: {(err or out)[-600:]}")
    cpu = usage.ru_utime + usage.ru_stime  # with the children it waited for
    return wall, cpu, usage.ru_maxrss / 1024  # its largest process (Ansible's forks apart)


# -- acting on every host ---------------------------------------------------------------------
class Recorder:
    """An executor that records every command it passes on, per host (to replay them)."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.calls: dict[str, list[tuple[list[str], str | None]]] = {}
        self.statuses: dict[str, list[int]] = {}  # each call's exit status, as it ran

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        self.calls.setdefault(host.name, []).append((list(argv), input))
        done = await self.inner.run(host, argv, input=input, timeout=timeout)
        self.statuses.setdefault(host.name, []).append(done.exit_status)
        return done

    def disconnect(self, host: Host) -> None:
        self.inner.disconnect(host)

    async def warm(self, hosts: Sequence[Host]) -> int:
        return await self.inner.warm(hosts)

    def release(self, keep: Set[str], idle: float) -> int:
        return self.inner.release(keep, idle)

    async def close(self) -> None:
        await self.inner.close()


def one_per_host(n: int, inventory: Path) -> Cluster:
    """A service of n replicas: spread first, so one task on each of n hosts."""
    service = Service(
        name="one",
        image="bench/web:1",
        replicas=n,
        spread="zone",
        command=("sleep", "1d"),
        cpus=0.1,
        memory=64 << 20,
    )
    return Cluster(CLUSTER, "bench.toml", str(inventory), (service,))


def minidock(*args: str, state: Path) -> list[str]:
    return [sys.executable, "-m", "minidock", *args, "--state", str(state)]


@dataclass
class Row:
    n: int
    results: dict[str, Sample] = field(default_factory=dict)
    commands: float = 0.0  # commands per host of the pass that starts one task on each

    def sample(self, name: str) -> Sample:
        return self.results.setdefault(name, Sample())


class Bench:
    def __init__(self, fleet: ScaleFleet, hosts: Sequence[Host], work: Path, runs: int) -> None:
        self.fleet = fleet
        self.all_hosts = list(hosts)
        self.work = work
        self.runs = runs

    def inventory_file(self, n: int) -> Path:
        """The fleet's inventory cut to its first n hosts."""
        import tomllib

        import tomli_w

        doc = tomllib.loads(self.fleet.inventory.read_text())
        doc["hosts"] = doc["hosts"][:n]
        path = self.work / f"inventory-{n}.toml"
        path.write_text(tomli_w.dumps(doc))
        return path

    async def observe_rows(self, row: Row, hosts: Sequence[Host]) -> None:
        for _ in range(self.runs):
            row.sample("observe cold").add(*await mini_cold(hosts))
            floor = Floor(hosts)
            wall, cpu, _ = await timed(floor.run({h.name: [(PROBE_BATCH, None)] for h in hosts}))
            row.sample("floor cold").add(wall, cpu)
            await floor.close()
        executor, floor = SSHExecutor(), Floor(hosts)
        await observe(executor, hosts, CLUSTER)
        await floor.run({h.name: [(PROBE_BATCH, None)] for h in hosts})
        for _ in range(self.runs):
            wall, cpu, seen = await timed(observe(executor, hosts, CLUSTER))
            _check(seen.hosts.values(), len(hosts))
            row.sample("observe warm").add(wall, cpu)
            wall, cpu, _ = await timed(floor.run({h.name: [(PROBE_BATCH, None)] for h in hosts}))
            row.sample("floor warm").add(wall, cpu)
        await executor.close()
        await floor.close()

    def ansible_rows(self, row: Row, hosts: Sequence[Host], venv: Path) -> None:
        inventory = ansible_inventory(self.fleet, hosts, self.work)
        for _ in range(self.runs):
            sockets = Path(tempfile.mkdtemp(dir=self.work, prefix="cp"))
            (sockets / "tmp").mkdir()
            row.sample("ansible cold").add(
                *ansible_run(venv, inventory, self.fleet, len(hosts), sockets)
            )
            row.sample("ansible warm").add(
                *ansible_run(venv, inventory, self.fleet, len(hosts), sockets)
            )
            subprocess.run(
                ["ssh", "-O", "exit", "-o", f"ControlPath={sockets}/x"],
                capture_output=True,
                check=False,
            )
            _close_control_masters(sockets)
            shutil.rmtree(sockets, ignore_errors=True)

    async def act_rows(self, row: Row, hosts: Sequence[Host]) -> Path:
        """Start one task on every host: MiniDock's pass, then the floor with its commands.
        Returns the state directory of the last MiniDock pass (a converged fleet)."""
        from minidock.core import admit
        from minidock.store.sqlite import SQLiteStore

        n = len(hosts)
        inventory_path = self.inventory_file(n)
        inventory = Inventory(str(inventory_path), tuple(hosts))
        state = self.work / f"state-{n}"
        recorded: dict[str, list[tuple[list[str], str | None]]] = {}
        for _ in range(self.runs):
            self.fleet.restore()
            shutil.rmtree(state, ignore_errors=True)
            store = SQLiteStore.open(state)
            cluster = one_per_host(n, inventory_path)
            store.commit(
                admit(store.load(), cluster, 1, prune=True),
                [],
                generation=cluster,
                source_path="bench.toml",
            )
            recorder = Recorder(SSHExecutor())
            wall, cpu, result = await timed(run_pass(cluster, inventory, store, recorder))
            await recorder.close()
            store.close()
            if len(result.done) != n or result.failures:
                raise RuntimeError(f"pass started {len(result.done)}/{n}: {result.failures[:2]}")
            row.sample("act").add(wall, cpu)
            recorded = recorder.calls
            self.fleet.restore()
            floor = Floor(hosts)
            wall, cpu, _ = await timed(floor.run(recorded, recorder.statuses))
            row.sample("act floor").add(wall, cpu)
            await floor.close()
        row.commands = sum(len(v) for v in recorded.values()) / n
        self.fleet.restore()
        return state

    async def watch_rows(self, row: Row, state: Path, hosts: Sequence[Host]) -> None:
        """watch_step on the converged fleet (its first pass starts the tasks)."""
        from minidock import usecases
        from minidock.usecases.runtime import Clock, Runtime

        clock = Clock(time.time, time.monotonic, asyncio.sleep)
        executor = SSHExecutor()
        runtime = Runtime(executor=lambda: executor, clock=clock)
        await usecases.watch_step(state, executor, runtime)  # starts every task
        await usecases.watch_step(state, executor, runtime)  # converged, connections pooled
        for _ in range(self.runs):
            wall, cpu, _ = await timed(usecases.watch_step(state, executor, runtime))
            row.sample("watch").add(wall, cpu)
        await executor.close()

    def cli_rows(self, row: Row, state: Path, watch_seconds: float) -> None:
        env = {**os.environ}
        for _ in range(self.runs):
            row.sample("cli reconcile").add(*_measured(minidock("reconcile", state=state), env))
        wall, cpu, rss = _measured(
            minidock("watch", "--interval", "1s", state=state), env, stop_after=watch_seconds
        )
        row.sample("cli watch").add(wall, cpu, rss)


def _close_control_masters(sockets: Path) -> None:
    """End the ControlPersist masters Ansible left (each by its socket: ours only)."""
    for sock in sockets.iterdir():
        if sock.is_socket():
            subprocess.run(
                ["ssh", "-O", "exit", "-o", f"ControlPath={sock}", "x"],
                capture_output=True,
                check=False,
            )


# -- the report -------------------------------------------------------------------------------
def ratio(row: Row, a: str, b: str) -> str:
    if a not in row.results or b not in row.results:
        return "-"
    return f"{row.results[a].median() / row.results[b].median():.2f}x"


def report(rows: list[Row]) -> str:
    out = [
        "### Observe passes (wall seconds; controller CPU seconds)",
        "",
        "| N | MiniDock cold | floor cold | ratio | Ansible cold | MiniDock warm | floor warm "
        "| ratio | Ansible warm | CPU cold / warm (MiniDock) | CPU cold / warm (floor) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        g = r.results.get
        cells = [
            g(k).cell() if g(k) else "-"
            for k in (
                "observe cold",
                "floor cold",
                "ansible cold",
                "observe warm",
                "floor warm",
                "ansible warm",
            )
        ]
        cpu = [
            f"{g(a).median('cpu'):.2f} / {g(b).median('cpu'):.2f}" if g(a) and g(b) else "-"
            for a, b in (("observe cold", "observe warm"), ("floor cold", "floor warm"))
        ]
        out.append(
            f"| {r.n} | {cells[0]} | {cells[1]} | {ratio(r, 'observe cold', 'floor cold')} "
            f"| {cells[2]} | {cells[3]} | {cells[4]} | {ratio(r, 'observe warm', 'floor warm')} "
            f"| {cells[5]} | {cpu[0]} | {cpu[1]} |"
        )
    out += [
        "",
        "### Acting on every host, watch, the CLI",
        "",
        "| N | start one task per host | floor, same commands | ratio | commands per host "
        "| watch pass (warm) | CPU per watch pass | `minidock reconcile` (CLI) | its CPU "
        "| its peak RSS | `minidock watch` peak RSS |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if not r.results.get("act") and not r.results.get("cli reconcile"):
            continue

        def c(k: str, what: str = "wall", r: Row = r) -> str:
            found = r.results.get(k)
            return found.cell(what) if found else "-"

        out.append(
            f"| {r.n} | {c('act')} | {c('act floor')} | {ratio(r, 'act', 'act floor')} "
            f"| {r.commands:g} | {c('watch')} | {c('watch', 'cpu')} | {c('cli reconcile')} "
            f"| {c('cli reconcile', 'cpu')} | {c('cli reconcile', 'rss')} "
            f"| {c('cli watch', 'rss')} |"
        )
    return "\n".join(out)


def sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


async def bench_size(bench: Bench, n: int, args: argparse.Namespace, venv: Path | None) -> Row:
    row = Row(n)
    hosts = bench.all_hosts[:n]
    bench.fleet.restore()
    await bench.observe_rows(row, hosts)
    print(f"N={n}: observe done", file=sys.stderr, flush=True)
    if venv is not None and n in sizes(args.ansible):
        bench.ansible_rows(row, hosts, venv)
        print(f"N={n}: ansible done", file=sys.stderr, flush=True)
    if n in sizes(args.act):
        state = await bench.act_rows(row, hosts)
        await bench.watch_rows(row, state, hosts)
        print(f"N={n}: act and watch done", file=sys.stderr, flush=True)
    if n in sizes(args.cli):
        state = bench.work / f"state-{n}"
        if not state.exists():
            await bench.act_rows(row, hosts)
            await bench.watch_rows(row, state, hosts)
        bench.cli_rows(row, state, args.watch_seconds)
        print(f"N={n}: cli done", file=sys.stderr, flush=True)
    bench.fleet.restore()
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,500,1000")
    parser.add_argument("--ansible", default="10,100,500", help="sizes to run Ansible at")
    parser.add_argument("--act", default="100,500", help="sizes to start a task on every host")
    parser.add_argument("--cli", default="100,500,1000", help="sizes to run the CLI at")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--watch-seconds", type=float, default=20.0)
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the fleet running")
    args = parser.parse_args()
    n_max = max(sizes(args.sizes))
    fleet = ScaleFleet(args.root)
    fleet.create(max(n_max, len(fleet.hosts)))
    fleet.start()
    fleet.clear()
    fleet.seed(2)
    fleet.snapshot()
    venv = ansible_venv(fleet.root) if args.ansible else None
    hosts = list(load_inventory(fleet.inventory).hosts)
    rows = []
    try:
        with tempfile.TemporaryDirectory(dir=fleet.root) as tmp:
            bench = Bench(fleet, hosts, Path(tmp), args.runs)
            for n in sizes(args.sizes):
                rows.append(asyncio.run(bench_size(bench, n, args, venv)))
                print(report(rows[-1:]), file=sys.stderr, flush=True)  # kept if a later size fails
    finally:
        if not args.keep:
            fleet.stop()
    print(report(rows))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"n": r.n, "commands": r.commands, **{k: vars(v) for k, v in r.results.items()}}
                    for r in rows
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
