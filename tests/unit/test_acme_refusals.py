"""The ACME client against a CA that refuses (a loopback HTTP server answering every
request with an RFC 8555 problem document): the order fails with the CA's reason, and no
new order is made before the CA's own Retry-After."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from minidock.act.acme import RATE_LIMITED, AcmeFailed, retry_after, start
from minidock.model import AcmeSettings


class _Refusing(BaseHTTPRequestHandler):
    """Every request: 429 rateLimited, Retry-After two hours (in seconds)."""

    def do_GET(self) -> None:
        body = json.dumps(
            {"type": "urn:ietf:params:acme:error:rateLimited", "detail": "too many orders"}
        ).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Retry-After", "7200")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_ca() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/directory"
    finally:
        server.shutdown()
        server.server_close()


def test_a_refusal_waits_for_the_cas_retry_after_on_the_pass_clock(refusing_ca: str) -> None:
    now = 1_000_000.0  # the pass's clock, not the machine's
    with pytest.raises(AcmeFailed) as failed:
        asyncio.run(start(AcmeSettings(directory=refusing_ca), None, "a.test", now))
    assert failed.value.reason == "the CA refused: too many orders"
    assert failed.value.retry_after == now + 7200 > now + RATE_LIMITED


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("120", 1000.0) == 1120.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 0.0) == 1445412480.0
    assert retry_after("soon", 1000.0) == 0.0
