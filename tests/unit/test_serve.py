"""`minidock serve` in-process, over in-memory Docker engines: who may read (loopback,
tokens, the session cookie), the headers on every answer, the one shared observation, and
the answers of each route. The lab-fleet side (Prometheus, Chromium) is in
tests/integration/test_serve.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from minidock import serve as web
from minidock import usecases
from minidock.cli import app
from minidock.documents.status import status_schema
from minidock.serve.http import SECURITY_HEADERS
from tests.unit.test_usecases import Setup, make_setup

TOKEN = "0123456789abcdef-token"
Answer = tuple[int, dict[str, str], bytes]


def real_time(setup: Setup) -> usecases.Runtime:
    """The setup's engines and clock, but pauses that really pause (the event follower)."""
    fake = setup.runtime()
    clock = usecases.Clock(setup.clock.now, time.monotonic, asyncio.sleep)
    return usecases.Runtime(fake.executor, clock)


@pytest.fixture
def converged(tmp_path: Path) -> Setup:
    setup = make_setup(tmp_path)
    setup.converged()
    return setup


@pytest.fixture
def server(converged: Setup) -> Iterator[web.Serving]:
    yield from running(converged, web.Access(None))


def running(setup: Setup, access: web.Access, interval: float = 60.0) -> Iterator[web.Serving]:
    listen = web.parse_listen("127.0.0.1:0")
    serving = web.start(setup.state, real_time(setup), listen, access, interval=interval)
    thread = threading.Thread(target=serving.run, daemon=True)
    thread.start()
    try:
        yield serving
    finally:
        serving.server.shutdown()
        thread.join(10)
        serving.close()


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Answer:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects)
    try:
        with opener.open(request, timeout=30) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object) -> None:
        return None


# -- the listen address and the token ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "host", "port", "loopback"),
    [
        ("127.0.0.1:9440", "127.0.0.1", 9440, True),
        ("[::1]:0", "::1", 0, True),
        ("localhost:80", "localhost", 80, True),
        ("0.0.0.0:9440", "0.0.0.0", 9440, False),
        ("controller.example:9440", "controller.example", 9440, False),
    ],
)
def test_listen_addresses(text: str, host: str, port: int, loopback: bool) -> None:
    listen = web.parse_listen(text)
    assert (listen.host, listen.port, listen.loopback) == (host, port, loopback)


@pytest.mark.parametrize("text", ["9440", "127.0.0.1", "127.0.0.1:http", "h:70000", ":9440"])
def test_a_bad_listen_address_names_the_option(text: str) -> None:
    with pytest.raises(web.ServeInputError, match=r"^--listen .*HOST:PORT"):
        web.parse_listen(text)


def test_tokens_are_checked_as_bearer_or_session_cookie() -> None:
    access = web.Access(TOKEN)
    assert access.allows(f"Bearer {TOKEN}", None)
    assert access.allows(f"bearer {TOKEN}", None)
    for wrong in (None, "", "Bearer", f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer wrong"):
        assert not access.allows(wrong, None), wrong
    assert access.allows(None, f"other=1; minidock_session={access.session}")
    assert not access.allows(None, f"minidock_session={TOKEN}")  # the cookie is not the token
    assert not access.allows(None, 'minidock_session="unterminated')
    assert TOKEN not in access.session
    assert web.Access(None).allows(None, None)


def test_a_token_file_needs_one_long_word(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    assert web.load_token(path) == TOKEN
    for bad in ("short", "two words of enough length", ""):
        path.write_text(bad)
        with pytest.raises(web.ServeInputError, match=f"^--token-file {path}: "):
            web.load_token(path)
    with pytest.raises(web.ServeInputError, match="cannot read it"):
        web.load_token(tmp_path / "missing")


def test_off_loopback_without_a_token_it_refuses_before_listening(converged: Setup) -> None:
    listen = web.parse_listen("0.0.0.0:0")
    with pytest.raises(web.ServeInputError, match="off loopback: give --token-file"):
        web.start(converged.state, real_time(converged), listen, web.Access(None), interval=5)


def test_the_cli_refuses_off_loopback_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--listen", "0.0.0.0:9440", "--state", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "minidock: --listen 0.0.0.0:9440 is off loopback: give --token-file FILE (a bearer "
        "token), or listen on 127.0.0.1"
    ]


# -- the routes ---------------------------------------------------------------------------------
def test_every_answer_carries_the_security_headers(server: web.Serving) -> None:
    for path, method, status in (
        ("/", "GET", 200),
        ("/static/app.js", "GET", 200),
        ("/nowhere", "GET", 404),
        ("/api/status", "POST", 501),  # http.server's own answer
    ):
        code, headers, _ = get(server.url + path, method=method)
        assert code == status, path
        for name, value in SECURITY_HEADERS.items():
            assert headers[name] == value, (path, name)


def test_status_is_the_status_document_and_metrics_parse(server: web.Serving) -> None:
    code, headers, body = get(server.url + "/api/status")
    assert code == 200
    assert headers["Content-Type"] == "application/json"
    document = json.loads(body)
    Draft202012Validator(status_schema()).validate(document)
    assert [s["name"] for s in document["services"]] == ["db", "web"]
    code, headers, body = get(server.url + "/metrics")
    assert code == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    names = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert {"minidock_service_tasks", "minidock_host_up"} <= names


def test_one_shared_observation_however_many_ask(server: web.Serving) -> None:
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda p: get(server.url + p)[0], ["/api/status", "/metrics"] * 8))
    assert answers == [200] * 16
    assert server.reading.observations == 1  # interval 60 s: every request shared the one


def test_a_new_observation_once_the_last_is_interval_old(converged: Setup) -> None:
    for serving in running(converged, web.Access(None), interval=1.0):
        get(serving.url + "/api/status")
        time.sleep(1.1)
        get(serving.url + "/api/status")
        get(serving.url + "/metrics")
        assert serving.reading.observations == 2


def test_events_as_json_with_filters(server: web.Serving) -> None:
    code, _, body = get(server.url + "/api/events?limit=0&service=web")
    events = json.loads(body)
    assert code == 200
    assert events
    assert {e["service"] for e in events} == {"web"}
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    code, _, body = get(server.url + "/api/events?since=soon")
    assert code == 400
    assert body.decode().startswith("since: ")


def test_a_wrong_token_gets_401_and_a_browser_logs_in_once(converged: Setup) -> None:
    for serving in running(converged, web.Access(TOKEN)):
        url = serving.url
        for headers in ({}, {"Authorization": "Bearer nope"}):
            code, answer, _ = get(url + "/metrics", headers)
            assert code == 401
            assert answer["WWW-Authenticate"] == 'Bearer realm="minidock"'
        assert get(url + "/?token=nope")[0] == 401
        assert get(url + "/api/status", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        code, answer, _ = get(url + f"/?token={TOKEN}")
        assert code == 303
        assert answer["Location"] == "/"
        cookie = answer["Set-Cookie"].split(";")[0]
        assert "HttpOnly" in answer["Set-Cookie"]
        assert "SameSite=Strict" in answer["Set-Cookie"]
        assert TOKEN not in cookie
        assert get(url + "/", {"Cookie": cookie})[0] == 200


def test_nothing_readable_is_503_with_the_reason_not_an_empty_fleet(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)  # nothing applied
    for serving in running(setup, web.Access(None)):
        code, _, body = get(serving.url + "/api/status")
        assert code == 503
        answer = json.loads(body)
        assert answer["status"] is None
        assert answer["errors"][0].startswith("nothing applied yet")
        code, _, body = get(serving.url + "/metrics")
        assert code == 200
        assert "minidock_store_up 0.0" in body.decode()


def test_the_dashboard_is_package_data_with_no_inline_script() -> None:
    from importlib import resources

    static = resources.files("minidock.serve") / "static"
    page = (static / "index.html").read_text()
    assert '<script type="module" src="/static/app.js"></script>' in page
    assert "<style" not in page
    assert " style=" not in page
    assert "innerHTML" not in (static / "app.js").read_text()
