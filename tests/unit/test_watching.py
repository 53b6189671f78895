"""The pure decisions of a watching controller (core/watching.py): which listed containers
need `docker inspect`, the probe's answer deadline and when an answer is slow, whether a
pass reads the port tables, and when the next pass runs (events coalesced); the host
machine's slow probe; the batch's inspect step skipping what is known; the probe memory."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from minidock.commands import inspect_argv, parse_listing, ps_argv
from minidock.core.hosts import HostPhase, HostState, probe_step
from minidock.core.watching import (
    PROGRESS,
    SETTLE,
    PassTimer,
    answer_deadline,
    health_word,
    listing_key,
    port_tables_needed,
    ports_conflict,
    slow,
    to_inspect,
)
from minidock.model import Host, PortMapping, Service
from minidock.observe import ProbeMemory, observe
from minidock.ssh import Result, Step, batch_script, parse_batch
from tests.fakes import FakeExecutor, ok

DATA = Path(__file__).parent.parent / "data" / "docker"
MIXED = (DATA / "mixed.json").read_text()
WEB = "56b2269cb439aa309c57fd6947d3de64994634ca6f273ce6689973882001bb8a"
CRASH = "977530def7aa98a90b6c1cec8599fda68cf5ab0cf7427d6035e300ba4a976574"


# -- which containers need inspect ----------------------------------------------------------
def test_health_is_read_from_the_status_column() -> None:
    assert health_word("Up 3 minutes (healthy)") == "healthy"
    assert health_word("Up 3 minutes (unhealthy)") == "unhealthy"
    assert health_word("Up Less than a second (health: starting)") == "starting"
    assert health_word("Exited (137) 2 seconds ago") == "none"


def test_only_new_and_changed_containers_are_inspected() -> None:
    known = {"a1": listing_key("a1", "running", "Up 1 hour (healthy)"), "b2": "b2/running/none"}
    listed = {
        "a1": listing_key("a1", "running", "Up 2 hours (healthy)"),  # unchanged: only time
        "b2": listing_key("b2", "exited", "Exited (137) 1 second ago"),  # died
        "c3": listing_key("c3", "running", "Up 1 second"),  # new
    }
    assert to_inspect(listed, known) == ["b2", "c3"]
    assert to_inspect(listed, {}) == ["a1", "b2", "c3"]
    unhealthy = {"a1": listing_key("a1", "running", "Up 2 hours (unhealthy)")}
    assert to_inspect(unhealthy, known) == ["a1"]


@given(st.dictionaries(st.text("0123456789abcdef", min_size=1), st.sampled_from(["x", "y"])))
def test_a_second_probe_of_an_unchanged_host_inspects_nothing(listed: dict[str, str]) -> None:
    assert to_inspect(listed, listed) == []
    assert sorted(to_inspect(listed, {})) == sorted(listed)


# -- slow is not down -----------------------------------------------------------------------
def test_the_answer_deadline_grows_with_the_hosts_recent_answers() -> None:
    assert answer_deadline([], 3.0, 60.0) == 12.0  # 4 x probe_timeout at first
    assert answer_deadline([0.1, 0.2], 3.0, 60.0) == 12.0
    assert answer_deadline([5.0, 6.0], 3.0, 60.0) == 24.0  # 4 x its slowest recent answer
    assert answer_deadline([50.0], 3.0, 60.0) == 60.0  # never over command_timeout
    assert answer_deadline([], 3.0, 1.0) == 3.0  # never under probe_timeout
    assert answer_deadline([30.0, 0.1, 0.1, 0.1, 0.1, 0.1], 3.0, 60.0) == 12.0  # the last 5


def test_an_answer_is_slow_past_probe_timeout_and_twice_its_usual() -> None:
    assert slow(5.0, [], 3.0)
    assert not slow(2.0, [], 3.0)
    assert slow(5.0, [0.2, 0.3, 0.2], 3.0)
    assert not slow(5.0, [4.8, 5.1, 5.0], 3.0)  # its usual: not slow for this host


def test_a_slow_probe_keeps_the_host_and_never_counts_towards_down() -> None:
    ready = HostState()
    new, event = probe_step(
        "h1", ready, answered=None, error="late", down_after=1, now=1.0, slow=True
    )
    assert (new.phase, new.failures) == (HostPhase.UNREACHABLE, 0)
    assert event is not None
    assert event.kind == "host-slow"
    again, event = probe_step(
        "h1", new, answered=None, error="late", down_after=1, now=2.0, slow=True
    )
    assert (again.phase, again.failures, event) == (HostPhase.UNREACHABLE, 0, None)
    down, event = probe_step("h1", ready, answered=None, error="refused", down_after=1, now=1.0)
    assert down.phase is HostPhase.DOWN  # a real failure still counts


# -- port tables ----------------------------------------------------------------------------
def test_port_tables_are_read_only_when_a_started_task_takes_a_host_port() -> None:
    plain = Service(name="db", image="db:1")
    ported = Service(name="web", image="web:1", ports=(PortMapping(8080, 8080),))
    assert not port_tables_needed([plain])
    assert port_tables_needed([plain, ported])
    assert not port_tables_needed([])
    assert ports_conflict([("h1", ported)], {"h1": frozenset({"8080/tcp"})})
    assert not ports_conflict([("h1", ported)], {"h2": frozenset({"8080/tcp"})})
    assert not ports_conflict([("h1", plain)], {"h1": frozenset({"8080/tcp"})})


# -- when the next pass runs ----------------------------------------------------------------
def test_events_from_many_hosts_make_one_pass_soon_and_the_interval_is_the_resync() -> None:
    timer = PassTimer(30.0).started(100.0)
    assert timer.wait(100.0) == 30.0
    rung = timer.event(101.0).event(101.01).event(101.02)  # three hosts, one pass
    assert rung.due() == 101.0 + SETTLE
    assert rung.wait(200.0) == 0.0
    after = rung.started(101.05)
    assert after.due() == 131.05  # the events before it began are its own
    during = after.event(101.5)  # an event during the pass: one more pass after it
    assert during.finished(102.0, under_way=False).wait(102.0) == 0.0


def test_a_pass_that_leaves_work_under_way_is_followed_within_a_second() -> None:
    timer = PassTimer(30.0).started(0.0).finished(0.5, under_way=True)
    assert timer.due() == 0.5 + PROGRESS
    assert PassTimer(30.0).started(0.0).finished(0.5, under_way=False).due() == 30.0


# -- the batch's inspect skips what the memory knows -----------------------------------------
def test_the_batch_inspects_only_the_listed_containers_whose_key_changed() -> None:
    a, b, dead = "a" * 12, "b" * 12, "dead00000000"  # "dead" is hex: the state word is not
    listing = (
        f"{a} running Up 2 hours (healthy)\n{b} exited Exited (0) 1 second ago\n{dead} dead Dead\n"
    )
    skip = (listing_key(a, "running", "Up 1 hour (healthy)"),)
    steps = [Step(("printf", "%s", listing)), Step(("echo", "inspect"), ids_from=0, skip=skip)]
    script = batch_script(steps, "@@m")
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    found = parse_batch(done.stdout, done.stderr, "@@m", 2)
    assert found is not None
    assert found[1] == Result(0, f"inspect {b} {dead}\n", "")
    everything = tuple(parse_listing(listing).values())
    steps[1] = Step(("echo", "inspect"), ids_from=0, skip=everything)
    done = subprocess.run(
        ["sh", "-c", batch_script(steps, "@@m")], capture_output=True, text=True, check=False
    )
    assert parse_batch(done.stdout, done.stderr, "@@m", 2) == [found[0], None]


def test_the_probe_memory_inspects_a_container_again_only_when_it_changed() -> None:
    listing = f"{WEB} running Up 1 hour\n{CRASH} exited Exited (1) 1 hour ago\n"

    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        return ok(listing) if argv == ps_argv("rec") else ok(MIXED)

    executor = FakeExecutor(handler)
    memory = ProbeMemory()
    h1 = Host(name="h1", address="10.0.0.1")
    for _ in range(2):
        seen = asyncio.run(observe(executor, [h1], "rec", ports=False, others=False, memory=memory))
    assert executor.argvs() == [ps_argv("rec"), inspect_argv([WEB, CRASH]), ps_argv("rec")]
    assert [c.name for c in seen.hosts["h1"].containers] == ["web.1.t1run", "crash.1.t6crash"]
    listing = f"{WEB} exited Exited (137) 1 second ago\n{CRASH} exited Exited (1) 1 hour ago\n"
    asyncio.run(observe(executor, [h1], "rec", ports=False, others=False, memory=memory))
    assert executor.argvs()[-1] == inspect_argv([WEB])
    assert memory.inspected == 3
