"""Connections a proxy reload resets: Caddy on the host's network against Caddy as MiniDock
runs it (a network namespace of its own with `net.ipv4.tcp_migrate_req=1`).

    .venv/bin/minidock lab up --hosts 2 && .venv/bin/python benchmarks/bench_reload_resets.py

On host1, two tasks of the lab's web image and two proxies, each routing to them: one on
the host's network (MiniDock's proxy before the change), one started with MiniDock's own
`proxy_run_argv`. For each, CLIENTS asyncio clients (one request per connection) send GETs
to host1's private address on the proxy's port while RELOADS `caddy reload`s of three
alternating configs run, PAUSE apart. Caddy 2.6 opens a new listening socket per load and
closes the old one; a connection still in the old one's accept queue is reset unless the
sysctl moves it (docs/ingress.md, "Reloads"). Prints a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.commands.caddy import RouteSpec, proxy_config, proxy_run_argv  # noqa: E402
from minidock.lab import Lab  # noqa: E402
from minidock.model import Ingress  # noqa: E402

CLIENTS = 4
RELOADS = 150
PAUSE = 0.1
IMAGE = "minidock-lab/web:5"
TASKS = {"bench-w1": 30901, "bench-w2": 30902}
HOST_NETWORK = ("bench-px-host", Ingress(http_port=8091))
OWN_NAMESPACE = ("bench", Ingress(http_port=8092))  # proxy_run_argv names it minidock-ingress-bench


def docker(container: str, *argv: str, stdin: str | None = None) -> str:
    """`docker ARGV` on the lab host `container` (its own engine)."""
    res = subprocess.run(
        ["docker", "exec", "-i", container, "docker", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout


def start(container: str, address: str) -> None:
    for name, port in TASKS.items():
        docker(container, "rm", "-f", name)
        docker(container, "run", "-d", "--name", name, "-p", f"{address}:{port}:8080", IMAGE)
    name, ingress = HOST_NETWORK
    docker(container, "rm", "-f", name)
    docker(container, *on_host_network(proxy_run_argv("x", ingress)[1:], name))
    cluster, ingress = OWN_NAMESPACE
    docker(container, "rm", "-f", f"minidock-ingress-{cluster}")
    docker(container, *proxy_run_argv(cluster, ingress)[1:])


def on_host_network(run: list[str], name: str) -> list[str]:
    """MiniDock's `docker run` argv for the proxy, named `name` and moved onto the host's
    network: its --publish and --sysctl options (and their values) dropped."""
    out: list[str] = []
    words = iter(run)
    for word in words:
        if word in ("--publish", "--sysctl"):
            next(words)
        elif word == "--name":
            out += [word, name]
            next(words)
        elif word == "run":
            out += [word, "--network", "host"]
        else:
            out.append(word)
    return out


def stop(container: str) -> None:
    docker(container, "rm", "-f", *TASKS, HOST_NETWORK[0], f"minidock-ingress-{OWN_NAMESPACE[0]}")


def configs(address: str, ingress: Ingress) -> list[str]:
    ups = [f"{address}:{port}" for port in TASKS.values()]
    sets = [(ups[0],), tuple(ups), (ups[1],)]
    return [proxy_config([RouteSpec("app.test", "/", s)], ingress).text for s in sets]


def measure(container: str, proxy: str, address: str, ingress: Ingress) -> Counter[str]:
    """Replies by kind ("200", "reset", "empty", ...) while the proxy reloads RELOADS times."""
    texts = configs(address, ingress)
    load = ["exec", "-i", proxy, "caddy", "reload", "--config", "/dev/stdin"]
    for _ in range(20):  # a fresh proxy's admin API comes up within a second or so
        try:
            docker(container, *load, stdin=texts[0])
            break
        except subprocess.CalledProcessError:
            time.sleep(0.2)
    seen: Counter[str] = Counter()
    done = threading.Event()

    async def client() -> None:
        while not done.is_set():
            try:
                reader, writer = await asyncio.open_connection(address, ingress.http_port)
                writer.write(b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
                await writer.drain()
                raw = await reader.read()
                writer.close()
                seen[raw.split(b" ")[1].decode() if raw else "empty"] += 1
            except ConnectionResetError:
                seen["reset"] += 1
            except OSError as exc:
                seen[type(exc).__name__] += 1

    async def clients() -> None:
        await asyncio.gather(*(client() for _ in range(CLIENTS)))

    thread = threading.Thread(target=lambda: asyncio.run(clients()), daemon=True)
    thread.start()
    time.sleep(1)
    for i in range(RELOADS):
        docker(container, *load, stdin=texts[i % 3])
        time.sleep(PAUSE)
    done.set()
    thread.join(timeout=30)
    return seen


def main() -> None:
    lab = Lab(ROOT)
    host = lab.host("host1")
    address = host.private_address
    start(host.container, address)
    try:
        rows = [
            ("host network", measure(host.container, HOST_NETWORK[0], address, HOST_NETWORK[1])),
            (
                "own namespace, tcp_migrate_req=1",
                measure(
                    host.container,
                    f"minidock-ingress-{OWN_NAMESPACE[0]}",
                    address,
                    OWN_NAMESPACE[1],
                ),
            ),
        ]
    finally:
        stop(host.container)
    print(f"| proxy ({RELOADS} reloads, {CLIENTS} clients) | requests | reset or empty | other |")
    print("| --- | ---: | ---: | ---: |")
    for name, seen in rows:
        lost = seen["reset"] + seen["empty"]
        other = sum(seen.values()) - seen["200"] - lost
        print(f"| {name} | {sum(seen.values())} | {lost} | {other} |")


if __name__ == "__main__":
    main()
