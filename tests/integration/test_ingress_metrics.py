"""Request metrics through the lab's real ingress under load (docs/observability.md,
"Request metrics"): what `minidock metrics` says each route's proxy answered, by status
class, is exactly what the clients got. `web` takes a paced load on app.test/ (every reply
a 200 from a task); `api`, in maintenance, answers each GET of app.test/api with its 503.
Meanwhile the dashboard of `minidock serve` charts web's requests per second."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from playwright.sync_api import sync_playwright
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import get
from tests.integration.test_ingress import (
    DOMAIN,
    EDGE,
    apply,
    http_port,
    loaded,
    paced_load,
    spec,
)
from tests.integration.test_serve import CHROMIUM, DEADLINE, eventually, serving

pytestmark = pytest.mark.integration

API = """
[services.api]
image = "minidock-lab/web:5"
ingress = { host = "app.test", path = "/api", port = 8080 }
drain_timeout = "1s"
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", timeout = "5s" }
"""
Key = tuple[str, str, str]  # service, route, class


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


def counted(md: Minidock) -> tuple[Counter[Key], dict[str, float]]:
    """`minidock metrics`: the edge's requests by (service, route, class), and each
    route's histogram count."""
    res = md("metrics")
    assert res.returncode == 0, res.stdout + res.stderr
    requests: Counter[Key] = Counter()
    histograms: dict[str, float] = {}
    for family in text_string_to_metric_families(res.stdout):
        for s in family.samples:
            if s.labels.get("host") != EDGE:
                continue
            if s.name == "minidock_ingress_up":
                assert s.value == 1
            elif s.name == "minidock_ingress_requests_total":
                requests[(s.labels["service"], s.labels["route"], s.labels["class"])] += s.value
            elif s.name == "minidock_ingress_request_duration_seconds_count":
                histograms[s.labels["service"]] = s.value
    return requests, histograms


def test_the_counts_by_route_and_class_are_the_replies_the_clients_got(
    fleet: Fleet, md: Minidock
) -> None:
    apply(md, spec(replicas=2) + API)
    assert md("maintenance", "api", "on").returncode == 0
    before, _ = counted(md)
    with paced_load(fleet) as load, serving(md, "--interval", "1s") as url:
        with sync_playwright() as p:  # its own event loop: closed before asyncio.run below
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(url + "/")
                card = f'[data-route="web {DOMAIN}/"]'
                figure = page.locator(f"{card} .figure")
                figure.wait_for(timeout=DEADLINE * 1000)
                # a rate once two readings are in: the figure has its number, the chart bars
                rate = eventually(lambda: _rate(figure.inner_text()), "web's requests/s shown")
                assert page.locator(f"{card} svg rect").count() > 0
            finally:
                browser.close()
        api = [asyncio.run(get(http_port(fleet), DOMAIN, "/api/x")) for _ in range(25)]
        while len(load.replies) < 200:
            time.sleep(0.1)
    assert rate > 0
    after, histograms = counted(md)
    got = Counter((r.status // 100) for r in load.replies)
    assert got[2] == len(load.replies)  # every web reply a task's 200
    assert [r.status for r in api] == [503] * 25  # the maintenance page
    delta = {k: after[k] - before[k] for k in after}
    assert delta[("web", f"{DOMAIN}/", "2xx")] == len(load.replies)
    assert delta[("api", f"{DOMAIN}/api", "5xx")] == 25
    assert sum(delta.values()) == len(load.replies) + 25  # no other class, no other route
    assert histograms["web"] == after[("web", f"{DOMAIN}/", "2xx")]
    assert histograms["api"] == after[("api", f"{DOMAIN}/api", "5xx")]


def _rate(text: str) -> float | None:
    """The requests per second a traffic card shows ("12.5 requests/s"), once it has one."""
    word = text.split()[0]
    return float(word) if word.replace(".", "", 1).isdigit() and float(word) > 0 else None


def test_with_request_metrics_off_the_front_serves_and_only_up_is_exposed(
    fleet: Fleet, md: Minidock
) -> None:
    """`[ingress] request_metrics = false`: the edge's loaded config has no route server,
    its front server proxies to the task itself, and `minidock metrics` has one ingress
    series for the edge, `minidock_ingress_up 1`: nothing counted, so nothing shown."""
    body = spec(replicas=1).replace("[ingress]\n", "[ingress]\nrequest_metrics = false\n", 1)
    apply(md, body)
    servers = loaded(fleet, md)["apps"]["http"]["servers"]
    assert sorted(servers) == ["minidock"]
    replies = [asyncio.run(get(http_port(fleet), DOMAIN)) for _ in range(10)]
    assert [(r.status, r.text) for r in replies] == [(200, "web 5\n")] * 10
    res = md("metrics")
    assert res.returncode == 0, res.stdout + res.stderr
    ingress = [
        (s.name, s.labels.get("host"), s.value)
        for family in text_string_to_metric_families(res.stdout)
        for s in family.samples
        if s.name.startswith("minidock_ingress")
    ]
    assert ingress == [("minidock_ingress_up", EDGE, 1.0)]
