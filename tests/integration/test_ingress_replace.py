"""Proxies replaced one ingress host at a time (docs/ingress.md, "Replacing the proxies"):
a change of `[ingress] image` replaces one host's proxy per pass, the next once it answers
with its routes loaded, under a load generator that is a client behind round-robin DNS
(each request to the next ingress host, another one when an address gives no reply)."""

from __future__ import annotations

import json

import pytest

from minidock.commands.caddy import proxy_name
from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import Load
from tests.integration.test_ingress import (
    DOMAIN,
    LOAD_PAUSE,
    WEB5,
    apply,
    converge,
    http_port,
    latency,
)

pytestmark = pytest.mark.integration

EDGES = ("host1", "host2")
OLD, NEW = "caddy:2", "minidock-lab/proxy:next"  # the same Caddy under another name


def spec(image: str, edges: tuple[str, ...] = EDGES) -> str:
    hosts = ", ".join(f'"{h}"' for h in edges)
    return f"""
[ingress]
hosts = [{hosts}]
image = "{image}"

[services.web]
image = "{WEB5}"
replicas = 2
ingress = {{ host = "{DOMAIN}", port = 8080 }}
drain_timeout = "1s"

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3
"""


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


def proxy_events(md: Minidock) -> list[str]:
    res = md("events", "--json", "--limit", "2000")
    assert res.returncode == 0, res.stderr
    document = json.loads(res.stdout)
    found = document["events"] if isinstance(document, dict) else document
    kinds = ("proxy-started", "routes-loaded")
    return [f"{e['kind']} {e['host']}" for e in found if e["kind"] in kinds]


def image_of(fleet: Fleet, md: Minidock, host: str) -> str:
    name = proxy_name(md.cluster)
    res = fleet.docker(host, "inspect", "-f", "{{.Config.Image}}", name, check=True)
    return res.stdout.strip()


def replace_under_load(
    fleet: Fleet, md: Minidock, edges: tuple[str, ...]
) -> tuple[Load, list[str]]:
    """The image changed under load; the load, and the proxy events of the change."""
    for host in edges:
        fleet.docker(host, "tag", OLD, NEW, check=True)
    apply(md, spec(OLD, edges))
    before = len(proxy_events(md))
    ports = [http_port(fleet, h) for h in edges]
    with Load(ports[0], DOMAIN, pause=LOAD_PAUSE, others=tuple(ports[1:])) as load:
        apply(md, spec(NEW, edges))
        converge(md)
    assert [image_of(fleet, md, h) for h in edges] == [NEW] * len(edges)
    assert load.replies, "the load generator sent nothing"
    replaced = proxy_events(md)[before:]
    starts = [e for e in replaced if e.startswith("proxy-started")]
    assert sorted(starts) == [f"proxy-started {h}" for h in edges]
    return load, replaced


def test_an_image_change_replaces_one_ingress_host_at_a_time(fleet: Fleet, md: Minidock) -> None:
    load, replaced = replace_under_load(fleet, md, EDGES)
    assert load.failed() == [], f"{len(load.failed())} of {len(load.replies)}: {load.failed()[:5]}"
    first = replaced.index("proxy-started host1")
    # host2's proxy is replaced only after host1's new one has loaded its routes
    assert replaced.index("routes-loaded host1", first) < replaced.index("proxy-started host2")
    print(f"proxy image change, 2 ingress hosts: {latency(load)}, {load.fallbacks} took host2")


def test_one_ingress_host_is_replaced_at_once(fleet: Fleet, md: Minidock) -> None:
    """Nothing else serves: its clients get no reply while it is replaced (the figure is
    printed for docs/ingress.md; the test asserts the replacement converges)."""
    load, _ = replace_under_load(fleet, md, EDGES[:1])
    print(
        f"proxy image change, 1 ingress host: {len(load.failed())} of {len(load.replies)} "
        f"got no reply, {latency(load)}"
    )
