"""The ingress on the lab fleet: latency and throughput through the proxy against the same
task direct, and the time a route change takes to load.

    .venv/bin/minidock lab up --hosts 2 && .venv/bin/python benchmarks/bench_ingress.py

One task of the lab's web image on host2, routed by the proxy on host1 (`[ingress] hosts =
["host1"]`). For SECONDS each, CLIENTS asyncio clients (one request per connection, every
response recorded: tests/integration/loadgen.py) send GETs to host1's published port 80
(through the proxy, which reaches the task at host2's private address and its routed host
port), then to host2's published port 80, which the same task also publishes (`ports =
["80:8080"]`: host2 runs no proxy), so the direct path reaches it with no proxy. A route
change is what a pass does to load one: `caddy reload` of a new config over SSH, as
`minidock.act.ingress` issues it; its wall time, median of ROUNDS loads of two alternating
configs. Prints Markdown tables (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.commands.caddy import RouteSpec, load_argv, proxy_config  # noqa: E402
from minidock.lab import Lab  # noqa: E402
from minidock.model import Ingress  # noqa: E402
from minidock.ssh import SSHExecutor  # noqa: E402
from tests.integration.loadgen import Load  # noqa: E402

SECONDS, CLIENTS, ROUNDS = 10.0, 8, 20
CLUSTER, DOMAIN = "bench", "app.test"
SPEC = """cluster = "bench"
inventory = "{inventory}"

[ingress]
hosts = ["host1"]

[services.web]
image = "minidock-lab/web:5"
ports = ["80:8080"]
constraints = ["host == host2"]
ingress = {{ host = "{domain}", port = 8080 }}
drain_timeout = "1s"
health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 2 }}
"""


def md(env: dict[str, str], *args: str) -> int:
    cmd = [sys.executable, "-m", "minidock", *args]
    return subprocess.run(cmd, env=env, capture_output=True, check=False).returncode


def measure(port: int) -> tuple[float, float, float, int]:
    """(p50 s, p99 s, requests per second, failed) of SECONDS of load on a loopback port."""
    with Load(port, DOMAIN, clients=CLIENTS) as load:
        time.sleep(SECONDS)
    times = sorted(r.seconds for r in load.replies)
    p99 = times[max(0, int(len(times) * 0.99) - 1)]
    return times[len(times) // 2], p99, len(times) / SECONDS, len(load.failed())


def direct_port(lab: Lab) -> int:
    """The loopback port of host2's port 80, which the task publishes (`ports = ["80:8080"]`:
    host2 runs no proxy), so the direct path reaches the same task with no proxy."""
    return lab.host("host2").http_port


async def reload_times(lab: Lab) -> list[float]:
    """Wall times of ROUNDS `caddy reload`s over SSH of two alternating configs."""
    executor = SSHExecutor()
    host = lab.ssh_host("host1")
    address = lab.host("host2").private_address
    configs = [
        proxy_config([RouteSpec(DOMAIN, "/", (f"{address}:{port}",))], Ingress())
        for port in (30000, 30001)
    ]
    times: list[float] = []
    try:
        for i in range(ROUNDS):
            started = time.perf_counter()
            res = await executor.run(host, load_argv(CLUSTER), input=configs[i % 2].text)
            times.append(time.perf_counter() - started)
            assert res.exit_status == 0, res.stderr
    finally:
        await executor.close()
    return times


def main() -> None:
    lab = Lab(ROOT)
    lab.reset()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MINIDOCK_STATE": str(Path(tmp) / "state")}
        spec = Path(tmp) / "bench.toml"
        spec.write_text(SPEC.format(inventory=lab.inventory_path, domain=DOMAIN))
        if md(env, "apply", str(spec), "--wait") != 0:
            raise SystemExit("apply failed")
        through = measure(lab.host("host1").http_port)
        direct = measure(direct_port(lab))
        loads = asyncio.run(reload_times(lab))
        lab.reset()
    print("| path (1 task, lab) | p50 | p99 | requests/s | failed |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (p50, p99, rate, failed) in (("through the ingress", through), ("direct", direct)):
        print(f"| {name} | {p50 * 1000:.1f} ms | {p99 * 1000:.1f} ms | {rate:.0f} | {failed} |")
    print()
    print("| route change | median | max |")
    print("| --- | ---: | ---: |")
    print(
        f"| `caddy reload` of a new config over SSH ({ROUNDS} loads) "
        f"| {statistics.median(loads) * 1000:.0f} ms | {max(loads) * 1000:.0f} ms |"
    )


if __name__ == "__main__":
    main()
