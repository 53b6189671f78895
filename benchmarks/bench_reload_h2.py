"""HTTP/2 requests across proxy config loads: which clients lose a request, and why.

    .venv/bin/python benchmarks/bench_reload_h2.py        # as root: unshare -n

Runs Debian's Caddy (the binary the lab's proxy image has) with MiniDock's own config
(`proxy_config`, one TLS route, a certificate from a private CA) in a network namespace of
its own with `net.ipv4.tcp_migrate_req=1`, as the proxy container runs, and an upstream
Caddy answering 200. A `POST /load` of three alternating configs (the upstreams differ, as
when tasks join and leave) runs every PAUSE seconds for SECONDS, while, in turn:

1. HTTP/2 clients of tests/integration/loadgen.py (one request per connection, as curl
   sends them), two that do not retry a refused request (as curl 7.88 does not) beside
   two that retry it on a new connection (RFC 9113: a stream above a GOAWAY's
   last-stream-id was not processed); each refused attempt's frames are kept;
2. headless Chromium (the suite's /usr/bin/chromium via Playwright) running four `fetch`
   loops on one page, its net log counting the requests it restarted, by error;
3. the same with the HTTPS server limited to HTTP/1.1 (`"protocols": ["h1"]`).

Prints a Markdown table (docs/ingress.md#http2-and-config-loads).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402

from minidock.commands.caddy import Certificate, RouteSpec, proxy_config  # noqa: E402
from minidock.model import Ingress  # noqa: E402
from tests.integration.loadgen import H2Load  # noqa: E402
from tests.tlsfiles import PrivateCA  # noqa: E402

SECONDS = 40.0
PAUSE = 0.1
NAME = "app.test"
INGRESS = Ingress(http_port=18080, https_port=18443)
UPSTREAMS = (("127.0.0.1:19001", "127.0.0.1:19002"), ("127.0.0.1:19001",), ("127.0.0.1:19002",))
CHROMIUM = "/usr/bin/chromium"
ADMIN = "http://localhost:2019"


def configs(cert: Certificate, protocols: list[str] | None) -> list[bytes]:
    out = []
    for ups in UPSTREAMS:
        body = json.loads(proxy_config([RouteSpec(NAME, "/", ups, tls=True)], INGRESS, [cert]).text)
        if protocols:
            for server in body["apps"]["http"]["servers"].values():
                server["protocols"] = protocols
        out.append(json.dumps(body).encode())
    return out


def load(config: bytes) -> None:
    request = urllib.request.Request(
        f"{ADMIN}/load", config, {"Content-Type": "application/json"}, method="POST"
    )
    urllib.request.urlopen(request, timeout=30).read()  # the loopback admin API


def reloading(texts: list[bytes], seconds: float) -> Callable[[], int]:
    """Load the configs in turn, PAUSE apart, for `seconds`, in a thread; the returned
    function waits for it and gives the number of loads."""
    done: list[int] = []

    def run() -> None:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            load(texts[n % len(texts)])
            n += 1
            time.sleep(PAUSE)
        done.append(n)

    thread = threading.Thread(target=run)
    thread.start()
    return lambda: (thread.join(), done[0])[1]


def spki(chain: str) -> str:
    leaf = x509.load_pem_x509_certificate(chain.encode())
    der = leaf.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


FETCH = """() => {
  window.stop_ = false; window.tally = {ok: 0, failed: 0, errors: {}};
  const one = async () => { while (!window.stop_) {
    try { const r = await fetch('/?' + Math.random(), {cache: 'no-store'}); await r.text();
          if (r.status === 200) tally.ok++; else { tally.failed++; tally.errors[r.status] = 1; } }
    catch (e) { tally.failed++; tally.errors[String(e)] = (tally.errors[String(e)] || 0) + 1; } } };
  window.done_ = Promise.all([one(), one(), one(), one()]);
}"""
STOP = """async () => { window.stop_ = true; await window.done_;
  const p = performance.getEntriesByType('resource').map(e => e.nextHopProtocol);
  return {...tally, protocol: p[p.length - 1]}; }"""


def chromium(chain: str, seconds: float, netlog: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    args = [
        "--no-sandbox",
        f"--host-resolver-rules=MAP {NAME} 127.0.0.1",
        f"--ignore-certificate-errors-spki-list={spki(chain)}",  # the private CA's leaf
        f"--log-net-log={netlog}",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page()
        page.goto(f"https://{NAME}:{INGRESS.https_port}/")
        page.evaluate(FETCH)
        time.sleep(seconds)
        tally: dict[str, Any] = page.evaluate(STOP)
        browser.close()
    tally["restarted"] = restarts(netlog)
    return tally


def restarts(netlog: Path) -> tuple[dict[str, int], dict[str, int]]:
    """From Chromium's net log: the requests it sent again after an error, and the
    requests it lost, each by the error."""
    log = json.loads(netlog.read_text())
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    errors = {v: k for k, v in log["constants"]["netError"].items()}
    again: collections.Counter[str] = collections.Counter()
    lost: collections.Counter[str] = collections.Counter()
    ours: set[int] = set()
    for event in log["events"]:
        kind, params = types[event["type"]], event.get("params", {})
        if kind == "REQUEST_ALIVE" and NAME in params.get("url", ""):
            ours.add(event["source"]["id"])
        elif kind == "REQUEST_ALIVE" and params.get("net_error", 0) not in (0, -3):
            if event["source"]["id"] in ours:  # -3: ERR_IO_PENDING
                lost[errors[params["net_error"]]] += 1
        elif kind == "HTTP_TRANSACTION_RESTART_AFTER_ERROR":
            again[errors[params["net_error"]]] += 1
    return dict(again), dict(lost)


def caddy(config: bytes, home: Path, name: str) -> subprocess.Popen[bytes]:
    path = home / f"{name}.json"
    path.write_bytes(config)
    env = {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home)}
    log = (home / f"{name}.log").open("wb")
    return subprocess.Popen(["caddy", "run", "--config", str(path)], env=env, stderr=log)


def wait_for(url: str) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} does not answer")


def inside() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["sysctl", "-qw", "net.ipv4.tcp_migrate_req=1"], check=True)
    ca = PrivateCA()
    chain, key = ca.leaf(NAME)
    cert = Certificate(chain, key)
    upstream = {
        "admin": {"listen": "localhost:2099"},
        "apps": {"http": {"servers": {"u": {
            "listen": [":19001", ":19002"],
            "routes": [{"handle": [{"handler": "static_response", "body": "ok\n"}]}],
        }}}},
    }  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        up = caddy(json.dumps(upstream).encode(), home, "upstream")
        try:
            for label, protocols in (("HTTP/2", None), ("HTTP/1.1 only", ["h1"])):
                texts = configs(cert, protocols)
                proxy = caddy(texts[0], home, "proxy")
                try:
                    wait_for(f"{ADMIN}/config/")
                    if protocols is None:
                        rows += clients(ca, texts)
                    waited = reloading(texts, SECONDS)
                    tally = chromium(chain, SECONDS, home / "netlog.json")
                    n = waited()
                    total = tally["ok"] + tally["failed"]
                    again, lost = tally["restarted"]
                    rows.append((
                        f"Chromium, server {label} ({tally['protocol']})", n, total,
                        f"{tally['failed']} {lost or ''}", f"{again}",
                    ))  # fmt: skip
                finally:
                    proxy.terminate()
                    proxy.wait()
        finally:
            up.terminate()
            up.wait()
    print("| client | loads | requests | failed | retried, by error |")
    print("| --- | ---: | ---: | ---: | --- |")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")


def clients(ca: PrivateCA, texts: list[bytes]) -> list[tuple[object, ...]]:
    port = INGRESS.https_port
    waited = reloading(texts, SECONDS)
    with (
        H2Load(port, NAME, ca.root_pem, clients=2, retry=False) as plain,
        H2Load(port, NAME, ca.root_pem, clients=2) as retrying,
    ):
        n = waited()
    frames = collections.Counter(r.text for r in plain.failed() + retrying.refusals)
    for text, count in frames.most_common(3):
        print(f"{count} x {text}", file=sys.stderr)
    other = [r.text for r in plain.failed() + retrying.failed() if not r.refused]
    return [
        ("HTTP/2, no retry (curl 7.88)", n, len(plain.replies), len(plain.failed()),
         f"- ({len(other)} failed otherwise)"),
        ("HTTP/2, refused retried (RFC 9113)", n, len(retrying.replies),
         len(retrying.failed()), f"{len(retrying.refusals)} refused"),
    ]  # fmt: skip


def main() -> None:
    if os.environ.get("BENCH_NETNS") == "1":
        inside()
        return
    env = {**os.environ, "BENCH_NETNS": "1"}
    sys.exit(subprocess.run(["unshare", "-n", sys.executable, __file__], env=env).returncode)


if __name__ == "__main__":
    main()
