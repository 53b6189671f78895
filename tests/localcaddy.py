"""A real Caddy on this machine for tests of what MiniDock's proxy configs make Caddy do:
Debian's `caddy` (2.6, the lab proxy's own package) run by `caddy run` on free 127.0.0.1
ports, each config loaded through its admin API as a pass loads one (its route sockets
named for the load, `ProxyConfig.loadable`), and stopped by the PID this module started.
The config's admin address (the proxy container's own localhost:2019) is replaced by this
process's. Upstreams are `Upstream`s: HTTP servers in a thread, on a port that can be
closed (a dial refused) and opened again. Without the `caddy` binary the fixture fails,
never skips: run scripts/engine.sh.

A load is waited for until Caddy has closed the listening sockets of the config it
replaced, not only until its admin API answers. Caddy 2.6 opens new SO_REUSEPORT sockets
for each config and closes the old ones, and Go closes a socket only once the goroutine
blocked in its `accept` has run again: on a busy machine that is after the answer to the
load (and the admin server's own is shut down after it anyway). Until then the kernel
queues some new connections on the old socket, and closing it resets them: in the
machine's own network namespace `net.ipv4.tcp_migrate_req` is 0 (the proxy container
sets it to 1, so there they move to the new socket: docs/ingress.md, "Reloads").
Measured with four busy processes beside the test: its fifty loads' request after a load
reset in 2 of 11 runs without the wait; with it, 3 of 4,800 loads answered before the
old sockets were closed, and waited for, and no failure in 40 runs.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from minidock.commands.caddy import ProxyConfig
from tests.etcd import free_ports

__all__ = ["LocalCaddy", "Upstream", "local_caddy"]

START_TIMEOUT = 20.0  # seconds Caddy has to answer its admin API
STOP_TIMEOUT = 10.0
CLOSE_TIMEOUT = 10.0  # seconds Caddy has to close a replaced config's listening sockets
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


@dataclass
class LocalCaddy:
    """A running `caddy run`: its PID, admin port, and the loads made so far."""

    process: subprocess.Popen[bytes]
    admin: int
    loads: int = 0

    def load(self, config: ProxyConfig) -> None:
        """POST /load of `config` as a pass loads it (its route sockets named anew), then
        wait until every TCP port it listens on has one listening socket: the new one."""
        self.loads += 1
        body = json.loads(config.loadable(f"t{os.getpid()}x{self.loads}"))
        body["admin"] = {"listen": f"127.0.0.1:{self.admin}"}
        status, text = self.admin_call("POST", "/load", json.dumps(body))
        assert status == 200, f"load {self.loads} refused: {status} {text}"
        ports = {self.admin, *_tcp_ports(body)}
        deadline = time.monotonic() + CLOSE_TIMEOUT
        while (open_ := {p: n for p in ports if (n := listeners(p)) > 1}) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert not open_, f"load {self.loads}: old listening sockets still open {open_}"

    def admin_call(self, method: str, path: str, body: str = "") -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=30)
        try:
            headers = {"Content-Type": "application/json"} if body else {}
            conn.request(method, path, body=body or None, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read().decode(errors="replace")
        finally:
            conn.close()

    def fds(self) -> int:
        """How many file descriptors the Caddy process holds open now."""
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


def get(port: int, host: str, path: str = "/") -> tuple[int, str]:
    """One GET through the proxy on `port` for Host `host`: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host})
        reply = conn.getresponse()
        return reply.status, reply.read().decode(errors="replace")
    finally:
        conn.close()


def _tcp_ports(body: dict[str, object]) -> set[int]:
    """The TCP ports the http app's servers in a loaded config listen on (`:PORT`)."""
    servers = body.get("apps", {}).get("http", {}).get("servers", {})  # type: ignore[attr-defined]
    return {
        int(address.rsplit(":", 1)[1])
        for server in servers.values()
        for address in server.get("listen", ())
        if address.startswith(":")
    }


def listeners(port: int) -> int:
    """How many TCP sockets on this machine listen on `port` (IPv4 and IPv6 tables)."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            found += state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port
    return found


@contextmanager
def local_caddy(directory: Path) -> Iterator[LocalCaddy]:
    """`caddy run` with its admin API on a free 127.0.0.1 port (its config and data
    under `directory`), stopped (SIGTERM, then SIGKILL) by its PID at the end."""
    (admin,) = free_ports(1)
    directory.mkdir(parents=True, exist_ok=True)
    first = directory / "caddy.json"
    first.write_text(json.dumps({"admin": {"listen": f"127.0.0.1:{admin}"}}))
    env = {
        **os.environ,
        "HOME": str(directory),
        "XDG_CONFIG_HOME": str(directory / "config"),
        "XDG_DATA_HOME": str(directory / "data"),
    }
    log = (directory / "caddy.log").open("wb")
    process = subprocess.Popen(
        ["caddy", "run", "--config", str(first)], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    caddy = LocalCaddy(process, admin)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if caddy.admin_call("GET", "/config/")[0] == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                said = (directory / "caddy.log").read_text()
                raise AssertionError(f"caddy did not start: {said}")
            time.sleep(0.05)
        yield caddy
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.answer.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Upstream:
    """A task's stand-in: an HTTP server answering `answer` on 127.0.0.1:`port` while
    open; closed, a dial to the port is refused."""

    answer: str
    port: int = field(default_factory=lambda: free_ports(1)[0])
    server: ThreadingHTTPServer | None = None

    @property
    def dial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _Answer)
        server.answer = self.answer  # type: ignore[attr-defined]
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.server = server

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def refused(port: int) -> bool:
    """Whether a dial to 127.0.0.1:`port` is refused now."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0
