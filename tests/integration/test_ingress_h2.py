"""HTTP/2 through the ingress during a rolling update (docs/ingress.md#http2-and-config-loads).

Each config load shuts the proxy's old server down, and Go's HTTP/2 server sends every
connection it holds one GOAWAY with the last stream it processed: a request that crosses
it is refused, not processed, which RFC 9113 lets a client retry on a new connection, as
Chromium does. The load here is HTTP/2 over TLS, one request per connection (as curl sends
it), through host1's published 443, with `[ingress] http2 = true` (HTTP/2 is off by
default for this reason): the clients that retry such a request must see no failure, and
the twin that does not (curl 7.88, exit 16) may fail only by such refusals.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import H2Load
from tests.integration.test_ingress import (
    DOMAIN,
    EDGE,
    LOAD_PAUSE,
    WEB5,
    WEB6,
    apply,
    assert_no_failure,
    events,
    latency,
)
from tests.tlsfiles import PrivateCA, write_pair

pytestmark = pytest.mark.integration


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    """Patient probes: a slow `docker ps` on a loaded machine says nothing about traffic."""
    return patient_md


def spec(image: str, cert: Path, key: Path) -> str:
    """The routed service `web` over HTTPS on the edge's proxy (HTTP/2 on), replaced
    start-first."""
    return f"""
[ingress]
hosts = ["{EDGE}"]
http2 = true

[services.web]
image = "{image}"
replicas = 2
drain_timeout = "1s"

[[services.web.ingress]]
host = "{DOMAIN}"
port = 8080
tls = {{ cert = {{ file = "{cert}" }}, key = {{ file = "{key}" }} }}

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3

[services.web.update]
parallelism = 1
monitor = "1s"
order = "start-first"
"""


def test_http2_clients_that_retry_refused_streams_see_no_failure_in_a_rolling_update(
    fleet: Fleet, md: Minidock, tmp_path: Path
) -> None:
    ca = PrivateCA()
    cert, key = write_pair(tmp_path, *ca.leaf(DOMAIN))
    apply(md, spec(WEB5, cert, key))
    port = fleet.lab.host(EDGE).https_port
    loads_before = len(events(md, "routes-loaded"))
    retrying = H2Load(port, DOMAIN, ca.root_pem, clients=3, pause=LOAD_PAUSE)
    plain = H2Load(port, DOMAIN, ca.root_pem, clients=1, pause=LOAD_PAUSE, retry=False)
    with retrying, plain:
        apply(md, spec(WEB6, cert, key))
        time.sleep(1)
    assert_no_failure(retrying, fleet, md)
    assert retrying.bodies() == {"web 5\n", "web 6\n"}
    assert {t["image"] for t in md.tasks("web")} == {WEB6}
    # the twin that does not retry fails by refusals only: requests the proxy did not process
    assert plain.replies
    assert [r for r in plain.failed() if not r.refused] == []
    loads = len(events(md, "routes-loaded")) - loads_before
    print(
        f"HTTP/2 rolling update, {loads} loads: {latency(retrying)}; "
        f"{len(retrying.refusals)} refused and retried; without retry "
        f"{len(plain.failed())} of {len(plain.replies)} failed"
    )
    for refusal in (retrying.refusals + plain.failed())[:3]:
        print(f"  refused: {refusal.text}")
