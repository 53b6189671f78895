"""Maintenance and pause on the lab's real proxy, under continuous load (docs/ingress.md,
"Maintenance and pause"): `maintenance on` makes the route answer 503 with the page and
`Retry-After` while its tasks keep running, and `off` brings the 200s back; a 5 s pause
holds the requests that arrive meanwhile and every one of them is answered, by a task,
once `resume` has loaded."""

from __future__ import annotations

import asyncio
import http.client
import time
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import Background, Reply, get
from tests.integration.test_ingress import DOMAIN, apply, http_port, paced_load, spec

pytestmark = pytest.mark.integration

MESSAGE = "Back at 14:00 UTC"


@pytest.fixture
def md(patient_md: Minidock) -> Minidock:
    return patient_md


@dataclass
class Arrivals(Background):
    """Open-loop load: a new request every `every` seconds, whatever the ones before are
    doing (a client waiting on its reply sends nothing more, so only arrivals like these
    show how many requests a pause holds); `replies` holds every one."""

    port: int
    host: str
    every: float = 0.1
    replies: list[Reply] = field(default_factory=list)
    join_timeout: ClassVar[float] = 90.0

    async def _one(self) -> None:
        self.replies.append(await get(self.port, self.host, timeout=60))

    async def _run(self) -> None:
        sent: list[asyncio.Task[None]] = []
        while not self._stop.is_set():
            sent.append(asyncio.create_task(self._one()))
            await asyncio.sleep(self.every)
        await asyncio.gather(*sent)


def head(fleet: Fleet) -> tuple[int, dict[str, str], str]:
    """One GET of the route: its status, headers and body."""
    conn = http.client.HTTPConnection("127.0.0.1", http_port(fleet), timeout=30)
    try:
        conn.request("GET", "/", headers={"Host": DOMAIN})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read().decode()
    finally:
        conn.close()


def ok(md: Minidock, *args: str) -> None:
    res = md(*args)
    assert res.returncode == 0, res.stdout + res.stderr


def test_maintenance_answers_503_with_the_page_and_off_restores_200s(
    fleet: Fleet, md: Minidock
) -> None:
    apply(md, spec(replicas=2))
    with paced_load(fleet) as load, Arrivals(http_port(fleet), DOMAIN) as arrivals:
        time.sleep(1)
        begun = time.monotonic()
        ok(md, "maintenance", "web", "on", "--message", MESSAGE)
        on = time.monotonic()
        status, headers, body = head(fleet)
        time.sleep(2)
        ending = time.monotonic()
        ok(md, "maintenance", "web", "off")
        off = time.monotonic()
        time.sleep(1)
    assert (status, headers.get("retry-after")) == (503, "60")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert f"<p>{MESSAGE}</p>" in body
    replies = load.replies + arrivals.replies
    page = [r for r in replies if r.status == 503]
    assert all(MESSAGE in r.text for r in page)
    assert [r for r in replies if r.status not in (200, 503)] == []  # no request failed
    during = [r for r in replies if r.started >= on and r.started + r.seconds <= ending]
    assert during
    assert all(r.status == 503 for r in during)
    before = [r for r in replies if r.started + r.seconds <= begun]
    after = [r for r in replies if r.started >= off]
    assert before
    assert all(r.ok for r in before)
    assert after
    assert all(r.ok for r in after)
    assert {r.text for r in after} == {"web 5\n"}
    assert len(md.tasks("web")) == 2  # maintenance stopped no task
    print(
        f"maintenance: {len(replies)} requests, {len(page)} answered 503 with the page, "
        f"{len(replies) - len(page)} 200, 0 failed; on took {on - begun:.2f}s, "
        f"off {off - ending:.2f}s"
    )


def test_a_pause_holds_requests_and_answers_every_one_after_it(fleet: Fleet, md: Minidock) -> None:
    apply(md, spec(replicas=2))
    with paced_load(fleet) as load, Arrivals(http_port(fleet), DOMAIN) as arrivals:
        time.sleep(1)
        ok(md, "pause", "web", "--timeout", "30s")
        paused = time.monotonic()
        status = md.status()
        time.sleep(max(0.0, 5 - (time.monotonic() - paused)))  # a pause of 5 s
        resuming = time.monotonic()
        ok(md, "resume", "web")
        resumed = time.monotonic()
        time.sleep(1)
    (web,) = [s for s in status["services"] if s["name"] == "web"]
    assert (web["serving"]["mode"], web["serving"]["timeout"]) == ("paused", 30.0)
    replies = load.replies + arrivals.replies
    assert [r for r in replies if not r.ok] == []  # every request answered by a task
    held = [r for r in arrivals.replies if paused <= r.started < resuming]
    assert len(held) >= 10
    # each was answered only once the resume began: held, not served, while paused
    assert all(r.started + r.seconds >= resuming for r in held)
    after = [r for r in replies if r.started >= resumed]
    assert after
    assert all(r.ok for r in after)
    waits = sorted(r.seconds for r in held)
    print(
        f"pause: {len(replies)} requests, 0 failed; {len(held)} arrived during the 5 s pause "
        f"and were held {waits[0]:.2f}-{waits[-1]:.2f}s (median {waits[len(waits) // 2]:.2f}s), "
        f"answered after the resume began; the pause lasted {resuming - paused:.2f}s, "
        f"resume took {resumed - resuming:.2f}s"
    )
