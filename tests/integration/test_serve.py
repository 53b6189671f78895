"""Observability against the lab fleet (docs/observability.md): `minidock serve` scraped by a
real Prometheus (Debian's), its dashboard in a real headless Chromium (Debian's, driven by
Playwright), the token, and `minidock metrics`' textfile parsed by prometheus_client."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import tomli_w
from playwright.sync_api import Page, sync_playwright
from prometheus_client.parser import text_string_to_metric_families

from tests.etcd import free_ports
from tests.integration.conftest import STATUS_SCHEMA, Fleet, Minidock

PROMETHEUS = "/usr/bin/prometheus"
CHROMIUM = "/usr/bin/chromium"
TOKEN = "s3cret-token-of-the-lab-0123456789"
WEB = """
[services.web]
image = "minidock-lab/web:5"
replicas = 2
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 2 }
"""
API = """
[services.api]
image = "minidock-lab/web:6"
replicas = 3
cpus = 0.5
memory = "256MiB"
"""
DEADLINE = 90.0  # seconds a condition may take to come true (not a timing assertion)
T = TypeVar("T")


@pytest.fixture
def md(fleet: Fleet, tmp_path: Path) -> Iterator[Minidock]:
    """The lab's inventory with a 20 s probe timeout: on a machine this loaded, `docker ps`
    inside a lab host can take longer than the default 3 s, and these tests are about what
    serve and metrics show, not about slow probes (those are tests/integration/test_faults.py's)."""
    lab = tomllib.loads(fleet.inventory.read_text())
    lab.setdefault("defaults", {})["probe_timeout"] = "20s"
    path = fleet.inventory.parent / f"serve-{tmp_path.name}.toml"  # its paths stay relative
    path.write_text(tomli_w.dumps(lab))
    try:
        yield Minidock(fleet, tmp_path, inventory=path)
    finally:
        path.unlink()


def eventually(check: Callable[[], T | None], what: str, deadline: float = DEADLINE) -> T:
    """Poll `check` until it returns something other than None."""
    end = time.monotonic() + deadline
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            found = check()
            if found is not None:
                return found
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen (last error: {last})")


@contextlib.contextmanager
def serving(md: Minidock, *args: str) -> Iterator[str]:
    """`minidock serve --listen 127.0.0.1:0 ARGS` running; yields its base URL."""
    proc = md.popen("serve", "--listen", "127.0.0.1:0", *args)
    lines: queue.Queue[str] = queue.Queue()
    for stream in (proc.stdout, proc.stderr):  # both drained: a full pipe would block it
        threading.Thread(target=_pump, args=(stream, lines), daemon=True).start()
    try:
        first = lines.get(timeout=DEADLINE)
        while not first.startswith("serving "):  # stderr's lines come first, if any
            first = lines.get(timeout=DEADLINE)
        assert first.startswith("serving http://127.0.0.1:"), first
        yield first.split()[1].rstrip("/")
    finally:
        proc.terminate()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def dashboard(md: Minidock, *args: str) -> Iterator[Page]:
    """`minidock serve ARGS`' dashboard open in a real headless Chromium."""
    with serving(md, *args) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(url + "/")
            yield page
        finally:
            browser.close()


def _pump(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def applied(md: Minidock, body: str = WEB) -> None:
    res = md("apply", str(md.spec(body)), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr


def token_file(md: Minidock) -> Path:
    path = md.workdir / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def prometheus(tmp: Path, target: str, credentials: Path) -> Iterator[str]:
    """Debian's Prometheus on a free loopback port, scraping `target` every second with the
    bearer token in `credentials`; yields its URL."""
    port = free_ports(1)[0]
    config = tmp / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "minidock",
                        "authorization": {"credentials_file": str(credentials)},
                        "static_configs": [{"targets": [target]}],
                    }
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: get(url + "/-/ready")[0] == 200 or None, "Prometheus ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def query(prom: str, promql: str) -> list[dict[str, Any]]:
    status, _, body = get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert status == 200, body
    result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
    return result


def test_prometheus_scrapes_serve_and_a_query_returns_the_running_tasks(
    md: Minidock, tmp_path: Path
) -> None:
    applied(md)
    credentials = token_file(md)
    with serving(md, "--token-file", str(credentials), "--interval", "1s") as url:
        target = url.removeprefix("http://")
        with prometheus(tmp_path, target, credentials) as prom:
            promql = 'sum(minidock_service_tasks{cluster="itest",service="web",state="running"})'

            def running() -> str | None:
                found = query(prom, promql)
                return found[0]["value"][1] if found else None

            assert eventually(running, "a scrape with the running tasks") == "2"
            up = query(prom, 'minidock_host_up{cluster="itest"}')
            assert {r["metric"]["host"] for r in up} == set(md.fleet.hosts)
            assert {r["value"][1] for r in up} == {"1"}
            # it only reads: cron's reconcile gets the lock while serve is scraped
            assert md("reconcile").returncode != 75


def test_a_wrong_token_gets_401_and_the_right_one_is_let_in(md: Minidock) -> None:
    applied(md)
    with serving(md, "--token-file", str(token_file(md))) as url:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            status, answer, _ = get(url + "/api/status", headers)
            assert status == 401, headers
            assert answer["WWW-Authenticate"].startswith("Bearer")
            assert answer["X-Frame-Options"] == "DENY"
        assert get(url + "/?token=wrong")[0] == 401
        assert get(url + "/metrics", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        status, answer, body = get(url + "/api/status", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200
        assert "frame-ancestors 'none'" in answer["Content-Security-Policy"]
        assert answer["X-Content-Type-Options"] == "nosniff"
        STATUS_SCHEMA.validate(json.loads(body))


def test_api_status_is_the_status_document_and_events_follow(md: Minidock) -> None:
    applied(md)
    with serving(md) as url:
        status, _, body = get(url + "/api/status")
        assert status == 200
        served = json.loads(body)
        STATUS_SCHEMA.validate(served)
        cli = md.status()
        assert [(s["name"], s["running"]) for s in served["services"]] == [
            (s["name"], s["running"]) for s in cli["services"]
        ]
        assert sorted(t["id"] for t in served["tasks"]) == sorted(t["id"] for t in cli["tasks"])
        status, _, body = get(url + "/api/events?since=10m&service=web")
        logged = json.loads(body)
        assert status == 200
        assert logged
        assert {e["service"] for e in logged} == {"web"}
        newest = max(e["id"] for e in json.loads(get(url + "/api/events?limit=0")[2]))
        stream = urllib.request.urlopen(url + "/api/events?follow=1&limit=1", timeout=60)
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        assert md("scale", "web=3").returncode in (
            0,
            3,
        )  # a new event while we follow (3: starting)
        data = eventually(lambda: _next_data(stream, newest), "a new event on the stream")
        assert data["cluster"] == "itest"
        stream.close()


def _next_data(stream: Any, after: int) -> dict[str, Any] | None:
    """The next event on an SSE stream that is newer than `after` (the backlog is older)."""
    line = stream.readline().decode()
    if not line.startswith("data: "):
        return None
    event: dict[str, Any] = json.loads(line.removeprefix("data: "))
    return event if event["id"] > after else None


def test_metrics_textfile_parses_and_says_which_host_is_down(md: Minidock) -> None:
    applied(md)
    out = md.workdir / "textfile" / "minidock.prom"
    out.parent.mkdir()
    web = (("cluster", "itest"), ("service", "web"))
    running = ("minidock_service_tasks", (*web, ("state", "running")))

    def written() -> Samples | None:
        """The textfile once it shows both tasks (a loaded machine's probe may time out)."""
        res = md("metrics", "--output", str(out))
        assert res.returncode == 0, res.stderr
        found = parsed(out.read_text())
        return found if found[running] == 2 else None

    samples = eventually(written, "a textfile with both tasks running")
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert samples[("minidock_service_desired_replicas", web)] == 2
    assert samples[("minidock_passes_total", (("cluster", "itest"), ("code", "0")))] >= 1
    assert samples[("minidock_lock_held", (("cluster", "itest"),))] == 0
    gone = md.tasks("web")[0]["host"]
    md.fleet.kill(gone, "stop")

    def hosts_up() -> dict[str, float] | None:
        res = md("metrics")
        assert res.returncode == 0, res.stderr  # an unreachable host is a metric, not a failure
        up = {
            h: v
            for (name, labels), v in parsed(res.stdout).items()
            if name == "minidock_host_up"
            for k, h in labels
            if k == "host"
        }
        others = [v for h, v in up.items() if h != gone]
        return up if others and all(v == 1 for v in others) else None

    up = eventually(hosts_up, "every other host answering")
    assert up[gone] == 0
    assert set(up) == set(md.fleet.hosts)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(text: str) -> Samples:
    """Prometheus text as (name, sorted labels) -> value, by prometheus_client's parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_dashboard_shows_the_services_and_changes_when_a_task_is_killed(
    md: Minidock, tmp_path: Path
) -> None:
    applied(md, WEB + API)
    with dashboard(md, "--interval", "1s") as page:
        running = page.locator('[data-service="web"] .running')
        running.wait_for(timeout=DEADLINE * 1000)
        assert eventually(lambda: running.inner_text() == "2" or None, "2 running shown")
        assert page.locator('[data-host="host1"]').count() == 1
        assert page.locator('[data-service="api"] .running').inner_text() == "3"
        page.evaluate("window.notReloaded = true")
        _screenshot(page, tmp_path)
        task = eventually(lambda: (md.tasks("web") or [None])[0], "web's tasks listed")
        md.fleet.docker(task["host"], "kill", task["name"], check=True)
        assert eventually(lambda: running.inner_text() == "1" or None, "1 running shown")
        assert page.evaluate("window.notReloaded") is True  # changed on its own


def _screenshot(page: Page, tmp_path: Path) -> None:
    """The dashboard as a PNG (docs/img/dashboard.png is one of these, copied by hand);
    MINIDOCK_SCREENSHOT names where to put it, else the test's temporary directory."""
    path = Path(os.environ.get("MINIDOCK_SCREENSHOT", tmp_path / "dashboard.png"))
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib would send loopback requests through an http_proxy from the environment."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
