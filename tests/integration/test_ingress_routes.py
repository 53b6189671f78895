"""Routes as Caddy matches them, on the lab's real proxy (docs/ingress.md, "Route
precedence"): an exact host before a wildcard one, a longer path before a shorter one, and
host and path matched ignoring case, so two claims that differ in case only are refused."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import get
from tests.integration.test_ingress import EDGE, WEB5, WEB6, apply, http_port

pytestmark = pytest.mark.integration

HEALTH = """
[services.{name}.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3
"""


def service(name: str, image: str, routes: str) -> str:
    return (
        f'\n[services.{name}]\nimage = "{image}"\nreplicas = 1\ningress = [{routes}]\n'
        f'drain_timeout = "1s"\n' + HEALTH.format(name=name)
    )


# The wildcard service comes first in the file (and `'*' < 'a'`): only the precedence
# sends api.example.com, and /INDEX.HTML on any name, to `api`.
SPEC = (
    f'[ingress]\nhosts = ["{EDGE}"]\n'
    + service("wild", WEB5, '{ host = "*.example.com", port = 8080 }')
    + service(
        "api",
        WEB6,
        '{ host = "api.example.com", port = 8080 }, '
        '{ host = "*.example.com", path = "/INDEX.HTML", port = 8080 }',
    )
)


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


def answer(fleet: Fleet, host: str, path: str = "/") -> tuple[int, str]:
    reply = asyncio.run(get(http_port(fleet), host, path))
    return reply.status, reply.text


def test_caddy_takes_the_exact_host_and_the_longer_path_ignoring_case(
    fleet: Fleet, md: Minidock
) -> None:
    apply(md, SPEC)
    assert answer(fleet, "api.example.com") == (200, "web 6\n")  # exact before wildcard
    assert answer(fleet, "API.Example.COM") == (200, "web 6\n")  # hosts ignore case
    assert answer(fleet, "www.example.com") == (200, "web 5\n")  # the wildcard
    assert answer(fleet, "www.example.com", "/index.html") == (200, "web 6\n")  # paths too
    assert answer(fleet, "a.b.example.com") == (404, "no route\n")  # `*` is one label
    clash = SPEC + service("shout", WEB5, '{ host = "API.example.COM", path = "/", port = 8080 }')
    res = md("validate", str(md.spec(clash, "clash.toml")))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "is claimed by both services api and shout" in res.stderr
    assert "Traceback" not in res.stderr
