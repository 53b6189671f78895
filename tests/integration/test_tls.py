"""TLS on the lab's ingress (docs/ingress.md#tls): certificates brought as files served over
HTTPS by every ingress host's Caddy, plain HTTP redirected, and no private key in clear in
the state, the events or the command output."""

from __future__ import annotations

import json
import socket
import sqlite3
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest

from minidock.commands.caddy import AUTOSAVE, proxy_name
from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_ingress import apply, events
from tests.tlsfiles import PrivateCA, write_pair

pytestmark = pytest.mark.integration

EDGES = ("host1", "host2")
HEALTH = """
[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3
"""


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Patient probes: a loaded machine's 3 s probes say nothing about TLS."""
    return patient_md


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: str


def https_get(port: int, name: str, root: str, path: str = "/") -> Answer:
    """GET https://NAME/PATH through 127.0.0.1:port, verifying the certificate against
    `root` for NAME (SNI and Host NAME)."""
    context = ssl.create_default_context(cadata=root)
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with context.wrap_socket(raw, server_hostname=name) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        data = b"".join(iter(lambda: tls.recv(65536), b""))
    return _answer(data)


def http_get(port: int, name: str, path: str = "/") -> Answer:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(f"GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        data = b"".join(iter(lambda: raw.recv(65536), b""))
    return _answer(data)


def _answer(data: bytes) -> Answer:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return Answer(int(lines[0].split()[1]), headers, body.decode(errors="replace"))


def spec(tmp_path: Path, ca: PrivateCA) -> str:
    chain, key = ca.leaf("app.test")
    cert_path, key_path = write_pair(tmp_path, chain, key)
    return f"""
[ingress]
hosts = {json.dumps(list(EDGES))}

[services.web]
image = "minidock-lab/web:5"
replicas = 1
drain_timeout = "1s"

[[services.web.ingress]]
host = "app.test"
port = 8080
tls = {{ cert = {{ file = "{cert_path}" }}, key = {{ file = "{key_path}" }} }}

[[services.web.ingress]]
host = "plain.test"
port = 8080
{HEALTH}"""


def test_brought_certificates_are_served_on_every_ingress_host_and_never_kept_in_clear(
    fleet: Fleet, md: Minidock, tmp_path: Path
) -> None:
    ca = PrivateCA()
    body = spec(tmp_path, ca)
    key = (tmp_path / "app.key").read_text()
    apply(md, body)
    for edge in EDGES:
        host = fleet.lab.host(edge)
        secure = https_get(host.https_port, "app.test", ca.root_pem)
        assert (secure.status, secure.body) == (200, "web 5\n")
        moved = http_get(host.http_port, "app.test", "/a?b=1")
        assert (moved.status, moved.headers["Location"]) == (308, "https://app.test/a?b=1")
        plain = http_get(host.http_port, "plain.test")  # tls off: served as it was
        assert (plain.status, plain.body) == (200, "web 5\n")
    with pytest.raises(ssl.SSLCertVerificationError):  # verified, not merely encrypted
        https_get(fleet.lab.host(EDGES[0]).https_port, "app.test", PrivateCA().root_pem)
    # the key: in the proxies (they serve it), nowhere in clear on the controller's side
    saved = fleet.docker(EDGES[0], "exec", proxy_name(md.cluster), "cat", AUTOSAVE, check=True)
    assert key.splitlines()[1] in saved.stdout
    secret_line = key.splitlines()[1].encode()
    for path in md.state.rglob("*"):
        if path.is_file():
            assert secret_line not in path.read_bytes(), path
    outputs = [
        md(*args)
        for args in (("status", "--json"), ("events", "--json"), ("plan", str(md.spec(body))))
    ]
    for res in outputs:
        assert res.returncode in (0, 3), res.stderr
        assert secret_line.decode() not in res.stdout + res.stderr
    assert events(md, "routes-loaded")
    # a backup of the database holds no key either
    backup = tmp_path / "backup.db"
    with sqlite3.connect(md.state / "state.db") as source, sqlite3.connect(backup) as copy:
        source.backup(copy)
    assert secret_line not in backup.read_bytes()
