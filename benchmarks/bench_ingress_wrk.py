"""The ingress's added latency with a real load generator (Debian's `wrk`): one task on
host2, reached these ways from this machine, on the lab network (the host containers' own
addresses, so docker's loopback port mapping in front of the lab is on no path):

- direct: host2's private address and the task's routed host port (`docker run -p
  ADDR:30000:8080`, as MiniDock publishes it), no proxy;
- ingress: host1's address, port 80: MiniDock's proxy (its own network namespace, port 80
  published, the config a pass loads) sending to that same address and port;
- minimal Caddy: the same image on host1, in a namespace of its own with its port
  published the same way, loaded with a hand-written config of one route and nothing
  else (`reverse_proxy` to the same address and port);
- minimal Caddy, host network: that config in a container on host1's network (no
  namespace, no published port): what the namespace and docker's port mapping cost.

    .venv/bin/minidock lab up --hosts 2
    .venv/bin/python benchmarks/bench_ingress_wrk.py [--rounds 5] [--seconds 5]
        [--root DIR --project NAME]  # another lab than the working directory's

The task is Caddy's `caddy respond` (the lab's proxy image, on port 8080): it keeps
connections alive and forks nothing, so what is measured is the path, not the task. The
lab's web image (busybox httpd) forks a process per connection and closes each one first:
at wrk's rate the ports its host holds in TIME_WAIT come round again within the minute,
and every path (direct too) then waits out 1 s SYN retransmissions at p99.

Each round runs `wrk -t1 -c4 -dSECONDS --latency` on every path in turn (the order
rotated each round), so a machine that slows down slows every path alike; the table
gives each path's median over the rounds of wrk's p50, p99 and requests/s, and the load
average at the start and the end. Prints Markdown (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.lab import Lab  # noqa: E402

DOMAIN = "bench.test"
MINIMAL, MINIMAL_HOST = "minidock-bench-minimal", "minidock-bench-minimal-host"
MINIMAL_PORT, MINIMAL_HOST_PORT = 8081, 8082
SPEC = """cluster = "bench"
inventory = "{inventory}"

[ingress]
hosts = ["host1"]

[services.web]
image = "caddy:2"
command = ["caddy", "respond", "--listen", ":8080", "hello from the task"]
constraints = ["host == host2"]
ingress = {{ host = "{domain}", port = 8080 }}
drain_timeout = "1s"

[services.web.health]  # bash's /dev/tcp (the image has no wget); $0 names the port
cmd = [
  "bash", "-c",
  "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q hello <&3",
  "task:8080",
]
interval = "5s"
"""


def minimal_config(port: int, upstream: str) -> str:
    """The hand-written config: one server, one route, Caddy's defaults for the rest."""
    route = {"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": upstream}]}]}
    server = {"listen": [f":{port}"], "automatic_https": {"disable": True}, "routes": [route]}
    return json.dumps({"apps": {"http": {"servers": {"bench": server}}}})


def md(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "minidock", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def start_minimal(lab: Lab, upstream: str) -> None:
    """The two minimal Caddy containers on host1, each loaded with its one route."""
    for name, net in (
        (MINIMAL, ["--publish", f"{MINIMAL_PORT}:{MINIMAL_PORT}"]),
        (MINIMAL_HOST, ["--network", "host"]),
    ):
        lab.exec("host1", "docker", "rm", "-f", name, check=False)
        lab.exec("host1", "docker", "run", "-d", "--name", name, *net,
                 "--env", "XDG_CONFIG_HOME=/config", "--env", "XDG_DATA_HOME=/data",
                 "caddy:2", "caddy", "run")  # fmt: skip
    # each admin API is its namespace's localhost:2019 (host1's own, for the host-network
    # one): each is loaded by a `docker exec` into its own container
    for name, port in ((MINIMAL, MINIMAL_PORT), (MINIMAL_HOST, MINIMAL_HOST_PORT)):
        config = minimal_config(port, upstream).encode()
        for _ in range(50):
            res = lab.exec("host1", "docker", "exec", "-i", name, "caddy", "reload",
                           "--config", "/dev/stdin", input=config, check=False)  # fmt: skip
            if res.returncode == 0:
                break
        else:
            raise SystemExit(f"{name}: {res.stderr}")


def wrk(url: str, seconds: int, host: str | None) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, requests/s) of one wrk run."""
    header = ["-H", f"Host: {host}"] if host else []
    argv = ["wrk", "-t1", "-c4", f"-d{seconds}s", "--latency", *header, url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        print(out, file=sys.stderr)

    def ms(word: str) -> float:
        found = re.search(rf"^\s+{word}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert found, out
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[found[2]]
        return float(found[1]) * scale

    rate = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    assert rate, out
    return ms("50"), ms("99"), float(rate[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("--project", default="minidock-lab")
    options = parser.parse_args()
    lab = Lab(Path(options.root), project=options.project)
    lab.reset()
    h1 = lab.host("host1").private_address
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MINIDOCK_STATE": str(Path(tmp) / "state")}
        spec = Path(tmp) / "bench.toml"
        spec.write_text(SPEC.format(inventory=lab.inventory_path, domain=DOMAIN))
        applied = md(env, "apply", str(spec), "--wait")
        if applied.returncode != 0:
            raise SystemExit(f"apply failed: {applied.stdout}{applied.stderr}")
        status = json.loads(md(env, "status", "--json").stdout)
        (upstream,) = status["routes"][0]["upstreams"]
        start_minimal(lab, upstream)
        paths = {
            "direct to the task": (f"http://{upstream}/", None),
            "through MiniDock's ingress": (f"http://{h1}:80/", DOMAIN),
            "through a minimal Caddy config": (f"http://{h1}:{MINIMAL_PORT}/", None),
            "minimal Caddy, host network": (f"http://{h1}:{MINIMAL_HOST_PORT}/", None),
        }
        for url, host in paths.values():  # warm up: connections, caches
            wrk(url, 1, host)
        load_before = os.getloadavg()[0]
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in paths}
        names = list(paths)
        for i in range(options.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                url, host = paths[name]
                runs[name].append(wrk(url, options.seconds, host))
        load_after = os.getloadavg()[0]
        for name in (MINIMAL, MINIMAL_HOST):
            lab.exec("host1", "docker", "rm", "-f", name, check=False)
        lab.reset()
    print(f"load average {load_before:.1f} at the start, {load_after:.1f} at the end; "
          f"{options.rounds} rounds of {options.seconds} s, wrk -t1 -c4")  # fmt: skip
    print()
    print("| path (1 task, lab) | p50 | p99 | requests/s |")
    print("| --- | ---: | ---: | ---: |")
    for name, found in runs.items():
        p50, p99, rate = (statistics.median(x) for x in zip(*found, strict=True))
        print(f"| {name} | {p50:.2f} ms | {p99:.2f} ms | {rate:.0f} |")


if __name__ == "__main__":
    main()
