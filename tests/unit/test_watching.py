"""The pure decisions of a watching controller (core/watching.py): which listed containers
need `docker inspect`, the probe's answer deadline and when an answer is slow, whether a
pass reads the port tables, and when the next pass runs (events coalesced); the host
machine's slow probe; the batch's inspect step skipping what is known; the probe memory."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidock import runner, streams
from minidock.commands.facts import (
    events_argv,
    health_word,
    inspect_argv,
    listing_key,
    parse_listing,
    ps_argv,
)
from minidock.core import Plan, watching
from minidock.core.hosts import SLOW_GRACE, Availability, HostPhase, HostState, probe_step
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.state import ControllerState, ServiceState
from minidock.core.watching import (
    PROGRESS,
    SETTLE,
    PassTimer,
    answer_deadline,
    backoff_ends,
    port_tables_needed,
    probe_scope,
    slow,
    to_inspect,
    unconfirmed_dies,
)
from minidock.model import (
    Container,
    Host,
    HostObservation,
    Inventory,
    Observed,
    PortMapping,
    Service,
)
from minidock.observe import ProbeMemory, observe
from minidock.runner import run_pass
from minidock.spec import SpecError
from minidock.ssh import Executor, OutputLine, Result, Step, batch_script, parse_batch
from minidock.usecases import access, passes
from tests.fakes import FakeDocker, FakeExecutor, ok
from tests.sim import RunnerWorld, hosts, svc

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


def test_a_docker_silent_past_the_grace_is_hung_and_its_probes_count_again() -> None:
    seen = HostState(last_seen=100.0)
    late = 100.0 + SLOW_GRACE - 1
    slow_still, event = probe_step(
        "h1", seen, answered=None, error="late", down_after=2, now=late, slow=True
    )
    assert (slow_still.phase, slow_still.failures) == (HostPhase.UNREACHABLE, 0)
    hung = 100.0 + SLOW_GRACE
    once, event = probe_step(
        "h1", slow_still, answered=None, error="late", down_after=2, now=hung, slow=True
    )
    assert (once.phase, once.failures, event) == (HostPhase.UNREACHABLE, 1, None)
    down, event = probe_step(
        "h1", once, answered=None, error="late", down_after=2, now=hung + 1, slow=True
    )
    assert down.phase is HostPhase.DOWN
    assert event is not None
    assert f"has not answered for over {SLOW_GRACE:.0f}s" in event.message
    # a host that never answered has no tasks to lose: it stays slow, unreachable
    never, _ = probe_step("h1", HostState(), answered=None, error="late", down_after=1,
                          now=hung, slow=True)  # fmt: skip
    assert (never.phase, never.failures) == (HostPhase.UNREACHABLE, 0)


# -- port tables ----------------------------------------------------------------------------
def test_port_tables_are_read_only_when_a_started_task_takes_a_host_port() -> None:
    plain = Service(name="db", image="db:1")
    ported = Service(name="web", image="web:1", ports=(PortMapping(8080, 8080),))
    assert not port_tables_needed([plain])
    assert port_tables_needed([plain, ported])
    assert not port_tables_needed([])


def test_a_pass_reads_the_port_tables_before_it_decides_while_a_ported_task_may_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One observation, one decision: the port tables are read between them while a
    service that takes a host port is not settled (no task yet, its task gone), so the
    one decision places with them (a port held on host1: the task goes to host2); a
    settled fleet's pass reads none."""
    read: list[int] = []
    decided: list[int] = []
    real_decision = runner.decision

    async def port_tables(executor: Executor, hs: object, seen: Observed, c: str) -> Observed:
        read.append(1)
        held = replace(seen.hosts["host1"], ports_in_use=frozenset({"8080/tcp"}))
        return replace(seen, hosts={**seen.hosts, "host1": held})

    def decision(*args: object, **kw: object) -> Plan:
        decided.append(1)
        return real_decision(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "port_tables", port_tables)
    monkeypatch.setattr(runner, "decision", decision)
    w = RunnerWorld(hosts(2), tmp_path)
    try:
        w.apply(svc("web", ports=(PortMapping(8080, 8080),)), svc("db", image="db:1"))
        counts = []
        for _ in range(4):
            read.clear()
            decided.clear()
            plan = w.step(30.0)
            counts.append((len(read), len(decided), [(r.service.name, r.host) for r in plan.run]))
        assert counts[0] == (1, 1, [("web", "host2"), ("db", "host1")])  # 8080 held on host1
        assert counts[1] == (1, 1, [])  # its task starting: it may fail and start again
        assert counts[2:] == [(0, 1, [])] * 2  # settled: no tables read
        (web,) = [n for n in w.docker.names("host2") if n.startswith("web.")]
        w.docker.handler(w.hosts[1], ["docker", "stop", web], None)  # the next pass restarts it
        runs: list[tuple[str, str]] = []
        while not runs:  # each pass until its restart (after its backoff) reads the tables
            read.clear()
            decided.clear()
            runs = [(r.service.name, r.host) for r in w.step(30.0).run]
            assert (len(read), len(decided)) == (1, 1)
        assert runs == [("web", "host2")]
    finally:
        w.close()


def test_a_settled_fleet_wants_no_port_tables_and_anything_unsettled_does() -> None:
    ported = Service(name="web", image="web:1", replicas=1, ports=(PortMapping(8080, 8080),))
    record = SlotState(SlotPhase.RUNNING, task="t1", host="h1")
    ss = ServiceState(ported, 1, slots={1: record})
    inventory = Inventory("inventory.toml", (Host("h1", "10.0.0.1"), Host("h2", "10.0.0.2")))
    task = Container("c1", "web.1.t1", "h1", "c", "web", 1, "t1", ported.spec_hash(), "web:1",
                     "running")  # fmt: skip
    seen = Observed({"h1": HostObservation("h1", True, (task,)), "h2": HostObservation("h2", True)})
    state = ControllerState(services={"web": ss})
    assert not watching.port_tables_wanted(inventory, state, seen)
    exited = Observed({"h1": HostObservation("h1", True, (replace(task, state="exited"),))})
    assert watching.port_tables_wanted(inventory, state, exited)
    silent = Observed({"h1": HostObservation("h1", False, error="timed out")})
    assert watching.port_tables_wanted(inventory, state, silent)
    scaled = replace(ss, spec=replace(ported, replicas=2))
    assert watching.port_tables_wanted(inventory, replace(state, services={"web": scaled}), seen)
    drained = replace(state, hosts={"h1": HostState(availability=Availability.DRAINED)})
    assert watching.port_tables_wanted(inventory, drained, seen)
    # its task of another spec (scaled down, then back up while it drained: seed 124 of
    # the operator property): the pass replaces it
    older = Observed({**seen.hosts, "h1": HostObservation("h1", True, (replace(task, spec="x"),))})
    assert watching.port_tables_wanted(inventory, state, older)
    plain = replace(ss, spec=replace(ported, ports=()), slots={})
    assert not watching.port_tables_wanted(inventory, ControllerState(services={"w": plain}), seen)


# -- when the next pass runs ----------------------------------------------------------------
def test_events_from_many_hosts_make_one_pass_soon_and_the_interval_is_the_resync() -> None:
    timer = PassTimer(30.0)
    assert timer.resync_due(0.0)  # the first pass probes every host
    timer = timer.started(100.0)
    assert timer.wait(100.0) == 30.0
    rung = timer.event(101.0).event(101.01).event(101.02)  # three hosts, one pass
    assert rung.due() == 101.0 + SETTLE
    assert rung.wait(200.0) == 0.0
    assert not rung.resync_due(101.05)  # a pass between resyncs: scoped
    after = rung.started(101.05, full=False)
    assert after.due() == 130.0  # the resync stays 30 s after the last full pass began
    during = after.event(101.5)  # an event during the pass: one more pass after it
    assert during.finished(102.0, under_way=False).wait(102.0) == 0.0
    assert after.resync_due(130.0)
    assert after.started(130.0, full=True).due() == 160.0


def test_an_order_for_this_watch_is_due_at_once_an_event_after_it_not_later() -> None:
    """An order for a host it owns rings unsettled: the round is due at once, also after
    a docker event that began a settle; an event after the order leaves it due now."""
    timer = PassTimer(30.0).started(100.0)
    assert timer.event(101.0, settle=False).due() == 101.0
    settling = timer.event(101.0)
    assert settling.event(101.02, settle=False).due() == 101.02
    assert timer.event(101.0, settle=False).event(101.01).due() == 101.0


def test_a_pass_that_leaves_work_under_way_is_followed_within_a_second() -> None:
    timer = PassTimer(30.0).started(0.0).finished(0.5, under_way=True)
    assert timer.due() == 0.5 + PROGRESS
    assert PassTimer(30.0).started(0.0).finished(0.5, under_way=False).due() == 30.0
    # a restart backoff that ends sooner than a second: the pass comes when it ends
    soon = PassTimer(30.0).started(0.0).finished(0.5, under_way=True, backoff_left=0.1)
    assert soon.due() == 0.6
    later = PassTimer(30.0).started(0.0).finished(0.5, under_way=True, backoff_left=8.0)
    assert later.due() == 0.5 + PROGRESS
    # a backoff with nothing under way (the pass converged otherwise) wakes nothing
    idle = PassTimer(30.0).started(0.0).finished(0.5, under_way=False, backoff_left=0.1)
    assert idle.due() == 30.0


def test_the_soonest_running_backoff_is_found_and_failed_slots_wait_for_nobody() -> None:
    def service(*slots: SlotState) -> ServiceState:
        spec = Service(name="s", image="s:1", replicas=len(slots))
        return ServiceState(spec, 1, slots=dict(enumerate(slots, 1)))

    waiting, sooner = SlotState(next_start=105.0), SlotState(next_start=100.5)
    failed = SlotState(phase=SlotPhase.FAILED, next_start=100.1)
    past = SlotState(next_start=99.0)
    state = ControllerState(services={"a": service(waiting, failed), "b": service(sooner, past)})
    assert backoff_ends(state, 100.0) == 0.5
    assert backoff_ends(ControllerState(services={"a": service(failed, past)}), 100.0) is None
    # decided at 98.5, the pass ended at 100: `past` (99.0) ended while it acted, so the
    # next pass is due at once, not a PROGRESS later; one ended before the decision was
    # the decision's to start (or to leave waiting for room), and wakes nothing
    assert backoff_ends(state, 100.0, decided=98.5) == 0.0
    assert backoff_ends(state, 100.0, decided=99.5) == 0.5
    alone = ControllerState(services={"a": service(past)})
    assert backoff_ends(alone, 100.0, decided=98.5) == 0.0
    assert backoff_ends(alone, 100.0, decided=99.0) is None


@given(
    st.sets(st.sampled_from([f"h{i}" for i in range(8)])),
    st.sets(st.sampled_from([f"h{i}" for i in range(8)])),
    st.sets(st.sampled_from([f"h{i}" for i in range(8)])),
)
def test_a_pass_between_resyncs_reuses_only_hosts_up_silent_and_remembered(
    rung: set[str], up: set[str], remembered: set[str]
) -> None:
    hosts = [f"h{i}" for i in range(8)]
    scope = probe_scope(hosts, rung=rung, up=up, remembered=remembered)
    for h in hosts:
        reused = h not in scope
        assert reused == (h in up and h not in rung and h in remembered)


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


# -- passes between resyncs see what a full probe sees --------------------------------------
def _listing(docker: FakeDocker, host: str) -> tuple[tuple[str, str, str], ...]:
    """What a host's event stream tells of: each container's id, state and health (a
    change rings it: die, start, health_status, destroy)."""
    engine = docker.engines.get(host, {})
    return tuple(
        sorted(
            (cid, doc["State"]["Status"], (doc["State"].get("Health") or {}).get("Status", ""))
            for cid, doc in engine.items()
        )
    )


def _seen(o: HostObservation) -> tuple[object, ...]:
    return (o.ok, o.containers, o.others, o.oneoffs)


IMAGES = ["web:5", "crash:1", "web:broken", "web:late", "web:slow"]
FAULTS = ["advance", "advance", "kill", "down", "up", "foreign"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_passes_between_resyncs_see_exactly_what_a_full_probe_sees(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Every pass probes only the hosts whose stream rang (a change since the last pass's
    acts: never the pass's own acts, which the memory forgets instead), whose stream is
    down (the host is), or that the memory has no good observation of; every host's
    observation is still exactly what a full, fresh probe of it sees, whatever the
    containers do (crash, turn unhealthy, exit late), tasks killed, hosts lost and back."""
    fleet = hosts(data.draw(st.integers(1, 4)))
    w = RunnerWorld(fleet, tmp_path_factory.mktemp("scoped"))
    names = [h.name for h in fleet]
    specs = [
        svc(
            f"s{i}", image=data.draw(st.sampled_from(IMAGES)), replicas=data.draw(st.integers(1, 5))
        )
        for i in range(data.draw(st.integers(1, 2)))
    ]
    w.apply(*specs)
    memory = ProbeMemory()
    quiet = {h: _listing(w.docker, h) for h in names}  # as the last pass left them
    probed = 0
    for _ in range(data.draw(st.integers(4, 14))):
        fault, where = data.draw(st.sampled_from(FAULTS)), data.draw(st.sampled_from(names))
        live = [c for c in w.docker.engines.get(where, {}).values() if c["State"]["Running"]]
        if fault == "advance":
            w.docker.advance()
        elif fault == "kill" and live:
            live[0]["State"].update(Status="exited", Running=False, ExitCode=137)
        elif fault == "down":
            w.docker.down.add(where)
        elif fault == "up":
            w.docker.down.discard(where)
        elif fault == "foreign":  # another cluster's task: its stream says nothing
            w.docker.add(where, f"other-{probed}", {"minidock.cluster": "other"})
        rung = {h for h in names if _listing(w.docker, h) != quiet[h]}
        up = {h for h in names if h not in w.docker.down}
        scope = probe_scope(names, rung=rung, up=up, remembered=memory.remembered())
        truth = asyncio.run(observe(w.executor, fleet, w.cluster_name, ports=False))
        assert w.cluster is not None
        result = asyncio.run(
            run_pass(
                w.cluster, w.inventory, w.store, w.executor,
                clock=w.clock, memory=memory, scope=scope,
            )
        )  # fmt: skip
        for h in names:
            if h in scope or fault != "foreign" or h != where:
                assert _seen(result.observed.hosts[h]) == _seen(truth.hosts[h]), h
        probed += len(scope)
        quiet = {h: _listing(w.docker, h) for h in names}  # the pass's acts ring nothing
    w.close()


# -- the event streams' rings and ups -------------------------------------------------------
def test_a_first_stream_replays_from_the_second_it_started_and_a_reopened_one_from_its_last_event(
    tmp_path: Path,
) -> None:
    """Run by a real sh, with a docker that prints its argv: a first stream's `--since` is
    the host's clock when it started (an event before docker subscribes it is replayed);
    a reopened one's is the last event it delivered, given as it is."""
    docker = tmp_path / "docker"
    docker.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    docker.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    before = int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
    first = subprocess.run(events_argv("prod"), env=env, capture_output=True, text=True)
    after = int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
    said = first.stdout.splitlines()
    assert said[:3] == ["events", "--filter", "type=container"]
    assert "label=minidock.cluster=prod" in said
    assert said[-2] == "--since"
    assert before <= int(said[-1]) <= after, said
    again = events_argv("prod", "1700000000.000000123")
    assert again[:2] == ["docker", "events"]
    assert again[-2:] == ["--since", "1700000000.000000123"]


class _HeldStream:
    """An executor whose `docker events` stays open until the test ends it, printing the
    lines the test sends."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()

    async def follow(self, host: Host, argv: object, on_line: Callable[[OutputLine], None]) -> int:
        while (line := await self.lines.get()) is not None:
            on_line(OutputLine("stdout", line))
        return 0


def test_a_stream_counts_as_up_only_once_it_would_tell_and_its_rings_are_taken_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "UP_AFTER", 0.05)
    monkeypatch.setattr(streams, "FIRST_PAUSE", 0.05)
    h1 = Host("h1", "127.0.0.1")

    async def scenario() -> list[tuple[frozenset[str], frozenset[str]]]:
        held = _HeldStream()
        rings: list[str] = []
        events = streams.EventStreams(cast(Executor, held), rings.append)
        events.follow("c", [h1])
        taken = [events.take("c")]  # just opened: not up, so a pass probes h1
        await asyncio.sleep(0.1)
        taken.append(events.take("c"))  # up, and it rang once on coming up
        taken.append(events.take("c"))  # its rings were taken
        await held.lines.put(f"die {WEB} 1700000000000000000")
        await asyncio.sleep(0.01)
        taken.append(events.take("c"))  # an event rang it
        await held.lines.put(None)  # the stream ends: it rings, and is not up
        await asyncio.sleep(0.01)
        taken.append(events.take("c"))
        await events.close()
        assert rings == ["h1"] * 3
        return taken

    none, only = frozenset[str](), frozenset({"h1"})
    assert asyncio.run(scenario()) == [
        (none, none),
        (only, only),
        (none, only),
        (only, only),
        (only, none),
    ]


def test_a_die_stands_while_a_probe_lists_its_container_live_and_until_the_patience() -> None:
    died = {"a": 100.0, "b": 100.0}
    assert unconfirmed_dies(died, {"a", "c"}, 101.0) == {"a": 100.0}  # b: probed, not live
    assert unconfirmed_dies(died, None, 101.0) == died  # the host was not observed
    assert unconfirmed_dies(died, {"a", "b"}, 100.0 + watching.DIED_PATIENCE) == {}


def test_a_die_stands_while_the_probes_observation_lists_its_task_live() -> None:
    """What a watch pass hands the streams (passes.live_ids of its observation) confirms
    a die once the probe no longer lists the task live."""
    docker = FakeDocker()
    labels = {
        "minidock.cluster": "c",
        "minidock.service": "web",
        "minidock.slot": "1",
        "minidock.task": "t1",
        "minidock.spec": "s",
    }
    web = docker.add("host1", "web.1.t1", labels)
    host = Host("host1", "10.0.0.1")
    executor = docker.executor()
    events = streams.EventStreams(executor, lambda name: None)

    async def scenario() -> list[bool]:
        events.follow("c", [host])
        await asyncio.sleep(0.01)  # the fake answers no `docker events`: the stream ends
        stream = events.stream("c", "host1")
        assert stream is not None
        stream.died[web[:12]] = time.monotonic()  # its `die` came
        said = []
        for status in ("running", "exited"):  # ps lags, then catches up
            docker.engines["host1"][web]["State"]["Status"] = status
            observed = await observe(executor, [host], "c")
            assert [c.task for c in observed.containers()] == ["t1"]
            events.seen("c", passes.live_ids(observed))
            said.append(events.unconfirmed())
        await events.close()
        return said

    assert asyncio.run(scenario()) == [True, False]


def test_a_die_keeps_its_host_rung_until_a_probe_shows_the_container_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Docker logs `die` before `ps` shows it (it cleans the container up first): the host
    stays rung, and the watch busy, until a probe of it no longer shows the container live;
    a `start` or `destroy` of it ends the wait too, and so does DIED_PATIENCE."""
    monkeypatch.setattr(streams, "UP_AFTER", 60.0)
    h1 = Host("h1", "127.0.0.1")
    other = "b" * 64

    async def scenario() -> None:
        held = _HeldStream()
        events = streams.EventStreams(cast(Executor, held), lambda host: None)
        events.follow("c", [h1])
        events.take("c")
        await held.lines.put(f"die {WEB} 1700000000000000000")
        await asyncio.sleep(0.01)
        assert events.take("c")[0] == {"h1"}
        assert events.unconfirmed()
        events.seen("c", {"h1": {WEB[:12]}})  # ps lags: still running
        assert events.take("c")[0] == {"h1"}
        assert events.unconfirmed()
        events.seen("c", {"h2": set()})  # another host's probe says nothing of h1's
        assert events.unconfirmed()
        events.seen("c", {"h1": {other[:12]}})  # ps caught up: gone
        assert events.take("c")[0] == frozenset()
        assert not events.unconfirmed()
        for ends in (f"start {WEB} 1700000000000000001", f"destroy {WEB} 1700000000000000002"):
            await held.lines.put(f"die {WEB} 1700000000000000000")
            await held.lines.put(ends)
            await asyncio.sleep(0.01)
            assert not events.unconfirmed()
        await held.lines.put(f"die {other} 1700000000000000003")
        await asyncio.sleep(0.01)
        monkeypatch.setattr(watching, "DIED_PATIENCE", 0.0)
        events.seen("c", {})  # h1 did not answer, and the patience is out
        assert not events.unconfirmed()
        await held.lines.put(None)
        await events.close()

    asyncio.run(scenario())


# -- watch parses its inventory again only when the file changed ----------------------------
def test_watch_parses_the_inventory_again_only_when_its_bytes_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inventory.toml"
    text = (Path(__file__).parents[2] / "inventory" / "example.toml").read_text()
    path.write_text(text)
    parsed: list[str] = []
    real = access.load_inventory

    def counted(p: str) -> Inventory:
        parsed.append(p)
        return real(p)

    monkeypatch.setattr(access, "load_inventory", counted)
    inventories = access.Inventories()
    first = inventories.load(str(path))
    assert inventories.load(str(path)) is first
    assert len(parsed) == 1
    path.write_text(text.replace('name = "host1"', 'name = "host9"'))
    changed = inventories.load(str(path))
    assert changed.hosts[0].name == "host9"
    assert len(parsed) == 2
    path.write_text(text.replace("[[hosts]]", "[[hosts]]\nbogus = 1", 1))
    with pytest.raises(SpecError, match="bogus"):  # a broken edit is refused as before
        inventories.load(str(path))
    path.unlink()
    with pytest.raises(SpecError):
        inventories.load(str(path))
