"""`tls = "acme"` on the lab (docs/ingress.md#acme): the controller orders certificates from
the lab's Pebble, answers HTTP-01 through every ingress host's proxy, serves them on every
ingress host, adds a second name and renews without a failed request, backs off from a
directory that does not answer while HTTP keeps working, and keeps no key in clear."""

from __future__ import annotations

import json
import socket
import sqlite3
import ssl
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from minidock.lab.acme import LabAcme
from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_ingress import events
from tests.integration.test_tls import HEALTH, http_get, https_get

pytestmark = pytest.mark.integration

EDGES = ("host1", "host2")


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


def spec(acme: LabAcme, names: list[str], *, renew: str = "720h", directory: str = "") -> str:
    routes = "".join(
        f'\n[[services.web.ingress]]\nhost = "{n}"\nport = 8080\ntls = "{tls}"\n'
        for n, tls in (
            (n.removeprefix("plain:"), "off" if n.startswith("plain:") else "acme") for n in names
        )
    )
    return f"""
[ingress]
hosts = {json.dumps(list(EDGES))}

[ingress.acme]
email = "ops@example.test"
directory = "{directory or acme.directory}"
ca_root = {{ file = "{acme.ca_root}" }}
renew_before = "{renew}"

[services.web]
image = "minidock-lab/web:5"
replicas = 1
drain_timeout = "1s"
{routes}{HEALTH}"""


def certificates(md: Minidock) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in md.status().get("certificates", [])}


def until_issued(md: Minidock, name: str, passes: int = 30) -> dict[str, Any]:
    """`reconcile` until the status shows a certificate for `name`, then once more: the
    pass after the one that collects it loads it (docs/ingress.md#acme)."""
    for _ in range(passes):
        found = certificates(md).get(name)
        if found is not None and found["not_after"]:
            md("reconcile")
            return found
        md("reconcile")
    raise AssertionError(f"no certificate for {name}: {certificates(md)}")


def point(acme: LabAcme, name: str, address: str) -> None:
    """The lab's test DNS answers `name` with `address`."""
    body = json.dumps({"host": name, "addresses": [address]}).encode()
    url = f"http://127.0.0.1:{acme.dns_port}/add-a"
    urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=10)


class Probe(threading.Thread):
    """HTTPS GETs of NAME through an ingress host in a loop, every answer recorded."""

    def __init__(self, port: int, name: str, root: str) -> None:
        super().__init__(daemon=True)
        self.port, self.name, self.root = port, name, root
        self.answers: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                got = https_get(self.port, self.name, self.root)
                self.answers.append(
                    "ok" if (got.status, got.body) == (200, "web 5\n") else f"{got.status}"
                )
            except (OSError, ssl.SSLError) as exc:
                self.answers.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Probe:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.join(timeout=60)


def serial(port: int, name: str, root: str) -> str:
    context = ssl.create_default_context(cadata=root)
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname=name
    ) as tls:
        cert = tls.getpeercert()
    assert cert is not None
    return str(cert["serialNumber"])


def test_acme_certificates_are_ordered_served_added_renewed_and_backed_off(
    fleet: Fleet, md: Minidock
) -> None:
    acme = fleet.lab.acme()
    assert acme is not None
    root = Path(acme.ca_root).read_text()
    second = fleet.lab.host(EDGES[1])
    point(acme, "app.test", second.private_address)  # validated through host2's proxy
    md("apply", str(md.spec(spec(acme, ["app.test"]))), "--wait", "--timeout", "3m", timeout=240)
    issued = until_issued(md, "app.test")
    assert issued["source"] == "acme"
    assert issued["names"] == ["app.test"]
    assert issued["issuer"].startswith("Pebble Intermediate CA")
    for edge in EDGES:
        host = fleet.lab.host(edge)
        got = https_get(host.https_port, "app.test", root)
        assert (got.status, got.body) == (200, "web 5\n")
        moved = http_get(host.http_port, "app.test")
        assert (moved.status, moved.headers["Location"]) == (308, "https://app.test/")
    first = fleet.lab.host(EDGES[0]).https_port
    before = serial(first, "app.test", root)
    # a second name later, then a renewal (every certificate under the window), under load
    with Probe(first, "app.test", root) as probe:
        md("apply", str(md.spec(spec(acme, ["app.test", "b.test"]))), timeout=240)
        until_issued(md, "b.test")
        assert serial(first, "app.test", root) == before  # the first one untouched
        md("apply", str(md.spec(spec(acme, ["app.test", "b.test"], renew="50000h"))), timeout=240)
        renewed = [m for m in events(md, "certificate-issued") if "app.test" in m]
        for _ in range(5):  # the apply's pass orders it; a busy machine's may not finish
            if len(renewed) >= 2:
                break
            md("reconcile", timeout=240)
            renewed = [m for m in events(md, "certificate-issued") if "app.test" in m]
        assert len(renewed) >= 2, (renewed, events(md, "certificate-failed"))
        md("reconcile", timeout=240)  # the pass after the collecting one serves it
    assert serial(first, "app.test", root) != before
    bad = [a for a in probe.answers if a != "ok"]
    assert probe.answers
    assert bad == [], f"{len(bad)} of {len(probe.answers)} failed: {bad[:5]}"
    assert https_get(first, "b.test", root).status == 200
    # a directory that does not answer: the order fails and backs off; HTTP keeps working
    dead = "https://127.0.0.1:9/dir"
    body = spec(acme, ["app.test", "b.test", "c.test"], directory=dead)
    md("apply", str(md.spec(body)), timeout=240)
    failed = certificates(md)["c.test"]
    assert failed["not_after"] == 0
    assert failed["failures"] >= 1
    assert "does not answer" in failed["error"]
    assert failed["next_try"] > 0
    count = len(events(md, "certificate-failed"))
    md("reconcile")
    assert len(events(md, "certificate-failed")) == count  # backing off: not asked again
    plain = http_get(fleet.lab.host(EDGES[0]).http_port, "c.test")
    assert (plain.status, plain.body) == (200, "web 5\n")  # served on HTTP meanwhile
    assert https_get(first, "app.test", root).status == 200  # the others still served
    text = md("status").stdout
    assert "c.test (acme): none yet" in text
    assert "does not answer" in text
    # no private key in clear: state files, a backup, events, output
    backup = md.workdir / "backup.db"
    with sqlite3.connect(md.state / "state.db") as source, sqlite3.connect(backup) as copy:
        source.backup(copy)
    for path in [*md.state.rglob("*"), backup]:
        if path.is_file():
            data = path.read_bytes()
            assert b"PRIVATE KEY" not in data, path
            assert b'"kty"' not in data, path  # the account's JWK
    for res in (md("events", "--json"), md("status", "--json")):
        assert "PRIVATE KEY" not in res.stdout + res.stderr
