"""The use cases, called directly: typed outcomes, progress reports and exit codes, with
in-memory Docker engines (`tests.fakes.FakeDocker`) behind the executor seam and a clock
that moves only when a use case pauses, so waiting and lock patience take no real time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from minidock import usecases
from minidock.documents.status import StatusDocument, status_schema
from minidock.model import Event
from minidock.store.directory import StateLock
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import (
    ApplyOutcome,
    BadInput,
    Busy,
    Ending,
    ExitCode,
    FailedUpdate,
    GenerationStored,
    IntentRecorded,
    PassDone,
    PassSkipped,
    Progress,
    Writer,
)
from minidock.usecases.passes import WAIT_INTERVAL
from tests.behaviour import Clock
from tests.fakes import FakeDocker, FakeExecutor

T = TypeVar("T")

INVENTORY = "".join(
    f'[[hosts]]\nname = "host{n}"\naddress = "127.0.0.1"\nport = 1\n'
    f'labels = {{ zone = "{zone}" }}\ncpus = 4\nmemory = "8GiB"\n'
    for n, zone in ((1, "a"), (2, "b"), (3, "c"))
)
STACK = """\
cluster = "uc"
inventory = "inventory.toml"

[services.db]
image = "db:1"

[services.web]
image = "web:5"
replicas = 2
ports = ["8080:8080"]
depends_on = ["db"]
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }
update = { monitor = "0s", failure_action = "rollback" }
"""


class Stop(Exception):
    """Raised from the clock to end `watch` (as Ctrl-C would)."""


@dataclass
class FakeClock:
    """Starts at the real time (FakeDocker stamps containers with it) and moves only when a
    use case sleeps; `on_sleep(n)` runs at the n-th pause."""

    t: float = field(default_factory=time.time)
    sleeps: list[float] = field(default_factory=list)
    on_sleep: Callable[[int], None] | None = None
    engines: FakeDocker | None = None  # their containers act as this clock moves

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if self.engines is not None:
            self.engines.advance(seconds)
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))
        await asyncio.sleep(0)


@dataclass
class Setup:
    root: Path
    docker: FakeDocker
    clock: FakeClock
    executors: list[FakeExecutor] = field(default_factory=list)
    reports: list[Progress] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def file(self) -> Path:
        return self.root / "cluster.toml"

    def runtime(self) -> usecases.Runtime:
        def executor() -> FakeExecutor:
            self.executors.append(self.docker.executor())
            return self.executors[-1]

        clock = usecases.Clock(self.clock.now, self.clock.monotonic, self.clock.sleep)
        return usecases.Runtime(executor, clock)

    def report(self, progress: Progress) -> None:
        self.reports.append(progress)

    def passes(self) -> list[PassDone]:
        return [p for p in self.reports if isinstance(p, PassDone)]

    def apply(self, **kw: Any) -> ApplyOutcome:
        return run(usecases.apply(self.file, self.state, self.runtime(), self.report, **kw))

    def converged(self) -> None:
        """Apply STACK and wait until it converges."""
        outcome = self.apply(wait=True, timeout=60.0)
        assert outcome.exit_code is ExitCode.OK, outcome
        self.reports.clear()
        self.clock.sleeps.clear()

    def running(self, host: str | None = None) -> list[str]:
        return [n for n in self.docker.names(host, "running") if not n.startswith("foreign")]


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


def make_setup(root: Path) -> Setup:
    """INVENTORY and STACK files in `root`, engines and a clock that moves them."""
    (root / "inventory.toml").write_text(INVENTORY)
    (root / "cluster.toml").write_text(STACK)
    clock = FakeClock()
    docker = FakeDocker(clock=Clock(clock.t))
    clock.engines = docker
    return Setup(root, docker, clock)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return make_setup(tmp_path)


# -- the exit codes ---------------------------------------------------------------------------
def test_one_exit_code_enum_with_the_products_values() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "NOT_CONVERGED": 3,
        "DEGRADED": 4,
        "LOCKED": 75,
        "INTERRUPTED": 130,
    }
    assert BadInput("x").exit_code is ExitCode.USAGE
    assert Busy("x").exit_code is ExitCode.LOCKED


# -- apply ------------------------------------------------------------------------------------
def test_apply_stores_a_generation_then_runs_one_pass(setup: Setup) -> None:
    outcome = setup.apply()
    assert outcome.generation == 1
    assert outcome.convergence.ending is Ending.NO_WAIT
    assert outcome.exit_code is ExitCode.NOT_CONVERGED  # db started; web waits for it
    assert outcome.failed_updates == ()
    first, second = setup.reports
    assert first == GenerationStored(1, "uc", 2, setup.state)
    assert isinstance(second, PassDone)
    assert second.exit_code is ExitCode.NOT_CONVERGED
    assert [line.split(".")[0] for line in second.result.done] == ["started db"]
    with SQLiteStore.open(setup.state) as store:
        assert store.next_generation_id() == 2
        (_, applied), *_ = store.events(limit=0)
    assert (applied.kind, applied.at) == ("apply", setup.clock.t)
    assert applied.message == f"applied {setup.file} as generation 1"
    assert all(e.closed for e in setup.executors)


def test_apply_wait_passes_a_second_apart_until_converged(setup: Setup) -> None:
    outcome = setup.apply(wait=True, timeout=60.0)
    assert (outcome.exit_code, outcome.convergence.ending) == (ExitCode.OK, Ending.CONVERGED)
    passes = setup.passes()
    assert outcome.convergence.passes == len(passes) >= 2
    assert [p.exit_code for p in passes][-1] is ExitCode.OK
    assert setup.clock.sleeps == [WAIT_INTERVAL] * (len(passes) - 1)
    assert len(setup.running()) == 3
    assert len(setup.executors) == 1  # one executor (its connections) for all the passes


def test_apply_wait_builds_one_masker_for_all_its_passes(setup: Setup) -> None:
    """The masker is the command's (issue 19.4), not each pass's: built by the first pass,
    handed to the next, which keeps it while no new secret turns up."""
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    maskers = {id(p.result.masker) for p in setup.passes()}
    assert len(setup.passes()) >= 2
    assert len(maskers) == 1


def test_apply_wait_times_out_with_what_it_waits_for(setup: Setup) -> None:
    setup.file.write_text(STACK.replace('"web:5"', '"web:slow"'))  # never turns healthy
    outcome = setup.apply(wait=True, timeout=5.0)
    c = outcome.convergence
    assert (outcome.exit_code, c.ending, c.timeout) == (
        ExitCode.NOT_CONVERGED,
        Ending.TIMED_OUT,
        5.0,
    )
    assert c.passes == 6  # at 0, 1, ..., 5 s: a seventh would start after the timeout
    assert sum(setup.clock.sleeps) == 5.0
    assert c.waiting
    assert any("web" in line for line in c.waiting)


def test_a_failed_act_stops_waiting_with_exit_1(setup: Setup) -> None:
    setup.docker.images = {"db:1"}  # web:5 is nowhere and cannot be pulled
    outcome = setup.apply(wait=True, timeout=60.0)
    assert (outcome.exit_code, outcome.convergence.ending) == (ExitCode.FAILED, Ending.STOPPED)
    last = setup.passes()[-1].result
    assert any("cannot be pulled" in line for line in last.failures)


def test_an_update_rolled_back_fails_its_apply(setup: Setup) -> None:
    setup.converged()
    setup.docker.images = {"db:1", "web:5"}  # web:6 cannot be pulled: its update fails
    setup.file.write_text(STACK.replace("web:5", "web:6"))
    outcome = setup.apply(wait=True, timeout=60.0)
    assert outcome.generation == 2
    assert outcome.exit_code is ExitCode.FAILED
    (failed,) = outcome.failed_updates
    assert isinstance(failed, FailedUpdate)
    assert failed.service == "web"
    assert "rolled back" in failed.reason
    assert "cannot be pulled" in failed.reason


def test_the_unchanged_file_of_an_update_rolled_back_is_a_no_op_unless_retried(
    setup: Setup,
) -> None:
    setup.converged()
    setup.docker.images = {"db:1", "web:5"}  # web:6 cannot be pulled: its update fails
    setup.file.write_text(STACK.replace("web:5", "web:6"))
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.FAILED
    with SQLiteStore.open(setup.state) as store:
        before = store.load().services["web"]
    setup.executors.clear()
    again = setup.apply(wait=True, timeout=60.0)  # the same file again
    assert again.exit_code is ExitCode.FAILED
    (declined,) = again.failed_updates
    assert declined.service == "web"
    assert "rolled back as failed" in declined.reason
    assert "cannot be pulled" in declined.reason
    assert f"minidock apply {setup.file} --retry" in declined.reason
    with SQLiteStore.open(setup.state) as store:
        web = store.load().services["web"]  # nothing started again
        applied = [e.message for _, e in store.events(limit=0) if e.kind == "apply"]
    assert (web.spec, web.previous, web.rollout.rollback) == (before.spec, before.previous, True)
    assert not any("again" in line for line in applied)
    pulls = [c for e in setup.executors for c in e.calls if c.argv[:2] == ["docker", "pull"]]
    assert pulls == []
    setup.docker.images.add("web:6")  # the registry has it now: the operator retries
    retried = setup.apply(retry=True, wait=True, timeout=60.0)
    assert retried.exit_code is ExitCode.OK, retried
    with SQLiteStore.open(setup.state) as store:
        web = store.load().services["web"]
        applied = [e.message for _, e in store.events(limit=0) if e.kind == "apply"]
    assert (web.spec.image, web.rollout.phase) == ("web:6", "completed")
    assert applied[-1] == f"{setup.file} again: retried"


def test_a_bad_file_is_bad_input_and_creates_nothing(setup: Setup) -> None:
    setup.file.write_text(STACK + "replicaz = 3\n")
    with pytest.raises(BadInput) as caught:
        setup.apply()
    assert str(caught.value) == (
        f"{setup.file}: services.web: unknown key 'replicaz' (did you mean 'replicas'?)"
    )
    assert caught.value.exit_code is ExitCode.USAGE
    assert not setup.state.exists()
    assert setup.executors == []


def test_plan_decides_without_writing(setup: Setup) -> None:
    planned = run(usecases.plan(setup.file, setup.state, setup.runtime()))
    assert planned.exit_code is ExitCode.OK
    assert [r.service.name for r in planned.plan.run] == ["db"]
    assert not setup.state.exists()
    assert setup.running() == []


def test_validate_tells_a_cluster_from_an_inventory(setup: Setup) -> None:
    cluster = usecases.validate(setup.file)
    assert (cluster.cluster, cluster.services, cluster.hosts) == ("uc", 2, 3)
    inventory = usecases.validate(setup.root / "inventory.toml")
    assert (inventory.cluster, inventory.hosts) == (None, 3)
    with pytest.raises(BadInput, match=r"nope\.toml: file not found"):
        usecases.validate(setup.root / "nope.toml")


# -- the lock and its patience ------------------------------------------------------------------
def test_an_operator_waits_its_patience_then_is_busy(setup: Setup) -> None:
    setup.converged()
    db = (setup.state / "state.db").read_bytes()
    with StateLock(setup.state), pytest.raises(Busy) as caught:
        setup.apply()
    assert caught.value.exit_code is ExitCode.LOCKED
    assert "is locked by another minidock process" in str(caught.value)
    assert usecases.patience(Writer.OPERATOR) == 30.0
    assert sum(setup.clock.sleeps) == pytest.approx(30.0)
    assert (setup.state / "state.db").read_bytes() == db


def test_cron_reconcile_is_busy_at_once(setup: Setup) -> None:
    setup.converged()
    with StateLock(setup.state), pytest.raises(Busy):
        run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    assert usecases.patience(Writer.SCHEDULED) == 0.0
    assert setup.clock.sleeps == []


def test_an_operator_gets_the_lock_when_the_other_pass_ends(setup: Setup) -> None:
    setup.converged()
    lock = StateLock(setup.state)
    lock.acquire()
    setup.clock.on_sleep = lambda n: lock.release() if n == 3 else None
    try:
        outcome = run(
            usecases.drain("host1", setup.state, setup.runtime(), setup.report, wait=False)
        )
    finally:
        lock.release()
    assert outcome.message == "draining host1"
    assert setup.clock.sleeps == [0.2, 0.2, 0.2]


# -- reconcile and watch ----------------------------------------------------------------------
def test_reconcile_is_one_pass_with_its_verdict(setup: Setup) -> None:
    setup.converged()
    outcome = run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    assert (outcome.exit_code, outcome.ending, outcome.passes) == (
        ExitCode.OK,
        Ending.NO_WAIT,
        1,
    )
    (done,) = setup.reports
    assert isinstance(done, PassDone)
    assert (done.result.done, done.result.failures) == ([], [])


def test_watch_steps_skip_while_another_writer_works(setup: Setup) -> None:
    setup.apply()  # db started, web waits for it
    executor = setup.docker.executor()
    with StateLock(setup.state):
        skipped = run(usecases.watch_step(setup.state, executor, setup.runtime()))
    assert isinstance(skipped, PassSkipped)
    assert "is locked by another minidock process" in skipped.reason
    # a standby: a connection kept to every host of the inventory, nothing run on them
    assert executor.warmed == [["host1", "host2", "host3"]]
    assert executor.calls == []
    assert (skipped.standby, skipped.hosts) == (3, 3)
    done = run(usecases.watch_step(setup.state, executor, setup.runtime()))
    assert isinstance(done, PassDone)
    assert any(line.startswith("started web.") for line in done.result.done)


def test_a_standby_sharing_the_fleet_warms_only_the_hosts_it_keeps(setup: Setup) -> None:
    """Connections by share (a `watch` on etcd: its share and standby set): the other
    hosts are listed, for the ring, but not connected."""
    setup.apply()
    executor = setup.docker.executor()
    with StateLock(setup.state):
        skipped = run(
            usecases.watch_step(
                setup.state, executor, setup.runtime(), kept=frozenset({"host2", "gone"})
            )
        )
    assert isinstance(skipped, PassSkipped)
    assert executor.warmed == [["host2"]]
    assert (skipped.standby, skipped.keeps, skipped.hosts) == (1, 1, 3)
    assert skipped.names == ("host1", "host2", "host3")


def test_watch_passes_until_stopped_on_one_executor(setup: Setup) -> None:
    setup.apply()
    setup.reports.clear()
    setup.executors.clear()

    def stop_at(n: int) -> None:
        if n == 4:
            raise Stop

    setup.clock.on_sleep = stop_at
    with pytest.raises(Stop):
        run(usecases.watch(setup.state, setup.runtime(), setup.report, interval=2.0))
    assert [type(p) for p in setup.reports] == [PassDone] * 4
    # a second after a pass that left work under way (at 0 s: its task starting); else the
    # resync, the interval after the last full pass began: the pass at 1 s was between
    # resyncs, so the next (full) one came at 2 s, not 3 s
    codes = [p.exit_code for p in setup.passes()]
    assert codes == [ExitCode.NOT_CONVERGED] + [ExitCode.OK] * 3
    assert setup.clock.sleeps == [1.0, 1.0, 2.0, 2.0]
    (executor,) = setup.executors
    assert executor.closed


# -- operator words ---------------------------------------------------------------------------
def test_drain_records_its_word_then_waits_until_the_host_is_empty(setup: Setup) -> None:
    setup.converged()
    busy = next(h for h in ("host1", "host2", "host3") if setup.running(h))
    outcome = run(usecases.drain(busy, setup.state, setup.runtime(), setup.report, timeout=60.0))
    assert (outcome.exit_code, outcome.convergence.ending) == (ExitCode.OK, Ending.CONVERGED)
    assert setup.reports[0] == IntentRecorded(f"draining {busy}")
    assert setup.running(busy) == []
    assert len(setup.running()) == 3
    with SQLiteStore.open(setup.state) as store:
        assert store.load().host(busy).drained
        intents = [e for _, e in store.events(limit=0) if e.kind == "intent"]
    assert [e.message for e in intents] == [f"draining {busy}"]
    activated = run(usecases.activate(busy, setup.state, setup.runtime(), setup.report))
    assert activated.convergence.ending is Ending.NO_WAIT
    with SQLiteStore.open(setup.state) as store:
        assert not store.load().host(busy).drained


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        pytest.param(
            lambda s, r, rep: usecases.drain("host9", s, r, rep),
            "unknown host 'host9'; known hosts: host1, host2, host3",
            id="drain",
        ),
        pytest.param(
            lambda s, r, rep: usecases.activate("host9", s, r, rep),
            "unknown host 'host9'; known hosts: host1, host2, host3",
            id="activate",
        ),
        pytest.param(
            lambda s, r, rep: usecases.rollback("wbe", s, r, rep),
            "unknown service 'wbe' (did you mean 'web'?); known services: db, web",
            id="rollback-unknown",
        ),
        pytest.param(
            lambda s, r, rep: usecases.rollback("web", s, r, rep),
            "service web has no previous spec to roll back to",
            id="rollback-no-previous",
        ),
        pytest.param(
            lambda s, r, rep: usecases.reset("wbe", s, r, rep),
            "unknown service 'wbe' (did you mean 'web'?); known services: db, web",
            id="reset",
        ),
    ],
)
def test_a_refused_word_is_bad_input_and_changes_nothing(
    setup: Setup, word: Callable[..., Coroutine[Any, Any, object]], expected: str
) -> None:
    setup.converged()
    db = (setup.state / "state.db").read_bytes()
    calls = sum(len(e.calls) for e in setup.executors)
    with pytest.raises(BadInput) as caught:
        run(word(setup.state, setup.runtime(), setup.report))
    assert str(caught.value).endswith(expected)
    assert (setup.state / "state.db").read_bytes() == db
    assert sum(len(e.calls) for e in setup.executors) == calls  # no host was touched
    assert setup.reports == []


def test_rollback_and_reset_record_their_word(setup: Setup) -> None:
    setup.converged()
    setup.file.write_text(STACK.replace("web:5", "web:6"))
    setup.apply(wait=True, timeout=60.0)
    rolled = run(
        usecases.rollback("web", setup.state, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert (rolled.message, rolled.exit_code) == ("rolling back web", ExitCode.OK)
    images = {d["Config"]["Image"] for d in setup.docker.containers() if "web" in d["Name"]}
    assert images == {"web:5"}
    cleared = run(usecases.reset("web", setup.state, setup.runtime(), setup.report))
    assert (cleared.message, cleared.exit_code) == ("reset web", ExitCode.OK)


# -- reads ------------------------------------------------------------------------------------
def test_status_is_a_typed_document_that_matches_the_schema(setup: Setup) -> None:
    setup.converged()
    setup.docker.down.add("host3")
    outcome = run(usecases.status(setup.state, setup.runtime()))
    doc = outcome.document
    assert isinstance(doc, StatusDocument)
    assert outcome.exit_code is ExitCode.OK
    assert [(s.name, s.state) for s in doc.services] == [("db", "converged"), ("web", "converged")]
    assert [(h.name, h.state) for h in doc.hosts][2] == ("host3", "unreachable")
    assert doc.hosts[2].error == "connection refused by 127.0.0.1:1"
    Draft202012Validator(status_schema()).validate(doc.to_json())
    assert all(e.closed for e in setup.executors)


def test_events_are_the_newest_oldest_first(setup: Setup) -> None:
    setup.converged()
    log = usecases.events(setup.state, limit=2)
    assert log.exit_code is ExitCode.OK
    assert len(log.events) == 2
    assert all(isinstance(e, Event) for e in log.events)
    everything = usecases.events(setup.state, limit=0).events
    assert everything[0].kind == "apply"
    assert everything[-2:] == log.events


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda s, r, rep: usecases.reconcile(s, r, rep), id="reconcile"),
        pytest.param(lambda s, r, rep: usecases.watch(s, r, rep, interval=1.0), id="watch"),
        pytest.param(lambda s, r, rep: usecases.status(s, r), id="status"),
        pytest.param(lambda s, r, rep: usecases.drain("host1", s, r, rep), id="drain"),
        pytest.param(lambda s, r, rep: usecases.reset("web", s, r, rep), id="reset"),
    ],
)
def test_nothing_applied_is_bad_input(
    setup: Setup, use: Callable[..., Coroutine[Any, Any, object]]
) -> None:
    with pytest.raises(BadInput, match=r"nothing applied yet in .*: run `minidock apply FILE`"):
        run(use(setup.state, setup.runtime(), setup.report))
    with pytest.raises(BadInput, match="nothing applied yet"):
        usecases.events(setup.state)
    assert not setup.state.exists()
    assert setup.executors == []


def test_a_state_path_that_is_a_file_is_bad_input(setup: Setup) -> None:
    setup.state.write_text("not a directory")
    with pytest.raises(BadInput) as caught:
        setup.apply()
    assert str(caught.value) == f"state path {setup.state} exists and is not a directory"
    assert setup.state.read_text() == "not a directory"
    assert setup.executors == []


# -- the whole desired state (issue 13) and operator safety (issue 14) --------------------------
def _db_bytes(setup: Setup) -> bytes:
    return (setup.state / "state.db").read_bytes()


def test_an_unchanged_reapply_is_a_no_op(setup: Setup) -> None:
    setup.converged()
    outcome = setup.apply()
    (stored, *_) = setup.reports
    assert stored == GenerationStored(1, "uc", 2, setup.state, changed=False)
    assert outcome.exit_code is ExitCode.OK
    with SQLiteStore.open(setup.state) as store:
        assert store.next_generation_id() == 2  # no new generation


def test_removing_services_needs_prune_and_goes_dependents_first(setup: Setup) -> None:
    setup.converged()
    setup.file.write_text(STACK.split("[services.db]")[0])  # no services at all
    before = _db_bytes(setup)
    with pytest.raises(BadInput) as caught:
        setup.apply()
    assert "no longer names services db, web" in str(caught.value)
    assert "--prune" in str(caught.value)
    assert _db_bytes(setup) == before  # nothing was changed
    with pytest.raises(BadInput) as refused:  # plan refuses what apply refuses (issue 27)
        run(usecases.plan(setup.file, setup.state, setup.runtime()))
    assert str(refused.value) == str(caught.value)
    planned = run(usecases.plan(setup.file, setup.state, setup.runtime(), prune=True))
    assert (planned.removals, planned.pruned) == (("db", "web"), True)
    outcome = setup.apply(prune=True, wait=True, timeout=60.0)
    assert outcome.exit_code is ExitCode.OK
    stopped = [line for p in setup.passes() for line in p.result.done if "stopped" in line]
    assert [line.split(".")[0] for line in stopped] == ["stopped web", "stopped web", "stopped db"]
    assert setup.running() == []
    with SQLiteStore.open(setup.state) as store:
        assert store.load().services == {}


def test_a_store_never_switches_cluster(setup: Setup) -> None:
    """Another cluster's file is kept beside the store's own cluster (tests/unit/
    test_clusters.py), never in its place: the first cluster's state and tasks stay."""
    setup.converged()
    running = setup.running()
    setup.file.write_text(STACK.replace('cluster = "uc"', 'cluster = "other"'))
    setup.apply()
    with SQLiteStore.open(setup.state) as store:
        assert store.load().cluster == "uc"
        assert store.latest_generation() is not None
    assert set(running) <= set(setup.running())


def _inventory_without(setup: Setup, host: str) -> None:
    kept = [b for b in INVENTORY.split("[[hosts]]") if b.strip() and f'"{host}"' not in b]
    (setup.root / "inventory.toml").write_text("".join("[[hosts]]" + b for b in kept))


def _carrier(setup: Setup) -> str:
    return next(h for h in ("host1", "host2", "host3") if setup.running(h))


def test_an_inventory_that_drops_a_host_with_tasks_is_refused(setup: Setup) -> None:
    setup.converged()
    gone = _carrier(setup)
    _inventory_without(setup, gone)
    before = _db_bytes(setup)
    for attempt in (
        lambda: run(usecases.reconcile(setup.state, setup.runtime(), setup.report)),
        lambda: setup.apply(),
        lambda: run(usecases.plan(setup.file, setup.state, setup.runtime())),
    ):
        with pytest.raises(BadInput) as caught:
            attempt()
        message = str(caught.value)
        assert f"no longer lists host {gone}, which carries " in message
        assert f"`minidock drain {gone}`" in message
        assert f"`minidock forget {gone}`" in message
    assert _db_bytes(setup) == before


def test_a_drain_of_an_unlisted_host_moves_its_tasks_off_it_then_it_is_dropped(
    setup: Setup,
) -> None:
    setup.converged()
    gone = _carrier(setup)
    _inventory_without(setup, gone)
    drained = run(
        usecases.drain(gone, setup.state, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert drained.exit_code is ExitCode.OK
    assert setup.running(gone) == []  # no orphan left on it
    assert len(setup.running()) == 3
    run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    with SQLiteStore.open(setup.state) as store:
        assert gone not in store.load().hosts


def test_forget_refuses_a_listed_host_that_answers(setup: Setup) -> None:
    setup.converged()
    with pytest.raises(BadInput) as caught:
        run(usecases.forget("host1", setup.state, setup.runtime(), setup.report))
    assert "host1 answered now: `minidock drain host1` moves its tasks" in str(caught.value)


def test_forget_probes_the_host_rather_than_read_the_stored_state(setup: Setup) -> None:
    """Issue 27: right after a host stops, the stored state still says ready; forget
    probes it, finds it gone and forgets it. A host the state calls down that answers now
    is refused, and nothing is recorded."""
    setup.converged()
    gone = _carrier(setup)
    setup.docker.down.add(gone)  # stopped just now: no pass has seen it fail yet
    forgot = run(usecases.forget(gone, setup.state, setup.runtime(), setup.report))
    assert forgot.message == f"forgot {gone}"
    setup.docker.down.discard(gone)
    setup.docker.down.add("host3" if gone != "host3" else "host2")
    for _ in range(2):  # down_after = 2: the state now calls it down
        run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    down = next(iter(setup.docker.down))
    setup.docker.down.clear()  # ... and it answers again before the operator's forget
    before = _db_bytes(setup)
    with pytest.raises(BadInput) as caught:
        run(usecases.forget(down, setup.state, setup.runtime(), setup.report))
    assert f"{down} answered now" in str(caught.value)
    assert _db_bytes(setup) == before


def test_forget_lets_an_inventory_drop_a_dead_host_and_its_tasks_start_elsewhere(
    setup: Setup,
) -> None:
    setup.converged()
    gone = _carrier(setup)
    setup.docker.down.add(gone)  # the machine died
    _inventory_without(setup, gone)
    with pytest.raises(BadInput):
        run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    forgot = run(usecases.forget(gone, setup.state, setup.runtime(), setup.report))
    assert forgot.message == f"forgot {gone}"
    with SQLiteStore.open(setup.state) as store:
        kinds = [e.kind for _, e in store.events(limit=0)]
    assert "host-forgotten" in kinds
    assert "task-lost" in kinds
    setup.reports.clear()
    outcome = run(
        usecases.converge(setup.state, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert outcome.exit_code is ExitCode.OK
    others = [h for h in ("host1", "host2", "host3") if h != gone]
    assert sum(len(setup.running(h)) for h in others) == 3


def test_a_new_store_refuses_another_stores_tasks_unless_adopting(setup: Setup) -> None:
    """Issue 14: with MINIDOCK_STATE forgotten, a fresh store would have proposed stopping
    every service another store manages; it refuses, names whose, and adopts when told."""
    setup.converged()
    running = sorted(setup.running())
    other = setup.root / "other-state"
    with pytest.raises(BadInput) as caught:
        run(usecases.apply(setup.file, other, setup.runtime(), setup.report))
    with open(setup.state / "controller-id") as f:
        theirs = f.read().strip()
    assert (
        f"3 running tasks of cluster uc belong to another state store's controller ({theirs})"
        in (str(caught.value))
    )
    assert "--adopt" in str(caught.value)
    assert not other.exists()  # refused before anything was made: no directory, no id
    with pytest.raises(BadInput) as refused:  # plan refuses what apply refuses (issue 27)
        run(usecases.plan(setup.file, other, setup.runtime()))
    assert str(refused.value) == str(caught.value)
    planned = run(usecases.plan(setup.file, other, setup.runtime(), adopt=True))
    assert planned.plan.run == ()
    setup.reports.clear()
    adopted = run(
        usecases.apply(
            setup.file, other, setup.runtime(), setup.report, adopt=True, wait=True, timeout=60.0
        )
    )
    assert adopted.exit_code is ExitCode.OK
    assert sorted(setup.running()) == running  # nothing started, nothing stopped
    with SQLiteStore.open(other) as store:
        assert store.load().adopted == (theirs,)


def test_losing_state_db_keeps_the_controller_id_so_apply_adopts_at_once(setup: Setup) -> None:
    setup.converged()
    running = sorted(setup.running())
    for f in setup.state.glob("state.db*"):
        f.unlink()
    outcome = setup.apply(wait=True, timeout=60.0)
    assert outcome.exit_code is ExitCode.OK
    assert sorted(setup.running()) == running


# -- whole-change plans and what-ifs (issue 11) --------------------------------------------------
def _valid_plan(doc: dict[str, Any]) -> None:
    from minidock.documents.plan import plan_schema

    Draft202012Validator(plan_schema()).validate(doc)


def test_plan_shows_the_whole_road_and_validates_against_its_schema(setup: Setup) -> None:
    setup.converged()
    setup.file.write_text(STACK.replace("web:5", "web:6").replace("replicas = 2", "replicas = 3"))
    planned = run(usecases.plan(setup.file, setup.state, setup.runtime()))
    doc = planned.document
    assert doc is not None
    web = next(s for s in doc.services if s.name == "web")
    assert {(f.field, f.old, f.new) for f in web.diff} >= {
        ("image", "web:5", "web:6"),
        ("replicas", "2", "3"),
    }
    runs = [r for step in doc.steps for r in step.run]
    assert sorted(r.slot for r in runs if r.service == "web") == [1, 2, 3]
    assert doc.converged
    assert "healthy" in doc.assumption
    _valid_plan(doc.to_json())
    assert sorted(setup.running())  # nothing was done


def test_what_if_a_host_is_lost_exits_1_when_its_tasks_cannot_land(setup: Setup) -> None:
    setup.converged()  # web publishes 8080 on 2 of 3 hosts; db on one
    carrier = next(h for h in ("host1", "host2", "host3") if len(setup.running(h)) == 2)
    planned = run(usecases.plan(setup.file, setup.state, setup.runtime(), lose=(carrier,)))
    doc = planned.document
    assert doc is not None
    assert doc.lost == (carrier,)
    landed = {r.host for step in doc.steps for r in step.run}
    assert carrier not in landed
    _valid_plan(doc.to_json())
    both = tuple(h for h in ("host1", "host2", "host3") if setup.running(h))
    worse = run(usecases.plan(setup.file, setup.state, setup.runtime(), lose=both))
    assert worse.exit_code is ExitCode.FAILED
    assert worse.document is not None
    assert worse.document.below or worse.document.pending


def test_drain_plan_changes_nothing_and_says_where_tasks_go(setup: Setup) -> None:
    setup.converged()
    db = _db_bytes(setup)
    carrier = _carrier(setup)
    planned = run(usecases.drain_plan(carrier, setup.state, setup.runtime()))
    assert planned.exit_code is ExitCode.OK
    assert planned.document is not None
    stops = {st.host for step in planned.document.steps for st in step.stop}
    assert stops == {carrier}
    assert _db_bytes(setup) == db
    with pytest.raises(BadInput):
        run(usecases.drain_plan("host9", setup.state, setup.runtime()))


def test_rebalance_lists_moves_with_plan_and_makes_them_one_at_a_time(setup: Setup) -> None:
    setup.docker.down.add("host3")
    setup.file.write_text(
        STACK.replace(
            "[services.web]", '[services.api]\nimage = "web:5"\nreplicas = 4\n\n[services.web]'
        )
    )
    outcome = setup.apply(wait=True, timeout=120.0)
    assert outcome.exit_code in (ExitCode.OK, ExitCode.DEGRADED)
    setup.docker.down.discard("host3")
    run(usecases.converge(setup.state, setup.runtime(), setup.report, wait=True, timeout=60))
    db = _db_bytes(setup)
    listed = run(usecases.rebalance(setup.state, setup.runtime(), setup.report, plan_only=True))
    assert listed.moves
    assert {m.target for m in listed.moves} == {"host3"}
    assert listed.convergence is None
    assert _db_bytes(setup) == db  # --plan changes nothing
    done = run(
        usecases.rebalance(setup.state, setup.runtime(), setup.report, wait=True, timeout=120)
    )
    assert done.exit_code is ExitCode.OK
    assert setup.running("host3")
    again = run(usecases.rebalance(setup.state, setup.runtime(), setup.report, plan_only=True))
    assert again.moves == ()


def test_events_filter_by_service_host_and_time(setup: Setup) -> None:
    setup.converged()
    every = run_sync_events(setup)
    assert {e.kind for e in every.events} >= {"apply", "run"}
    web = usecases.events(setup.state, limit=0, where=usecases.EventFilter(service="web"))
    assert web.events
    assert all(e.service == "web" for e in web.events)
    one_host = next(e.host for e in every.events if e.host)
    on_it = usecases.events(setup.state, limit=0, where=usecases.EventFilter(host=one_host))
    assert all(e.host == one_host for e in on_it.events)
    later = usecases.events(setup.state, limit=0, where=usecases.EventFilter(since=1e12))
    assert later.events == ()
    assert list(every.ids) == sorted(every.ids)


def run_sync_events(setup: Setup) -> Any:
    return usecases.events(setup.state, limit=0)


def test_events_follow_prints_new_events_as_they_are_committed(setup: Setup) -> None:
    setup.converged()
    last = usecases.events(setup.state, limit=1).ids[-1]
    seen: list[tuple[int, Event]] = []

    def stop_after_two(n: int) -> None:
        if n == 1:
            with SQLiteStore.open(setup.state) as store:
                store.commit(store.load(), [Event(1.0, "intent", "hello", service="web")])
        if n == 2:
            raise Stop

    setup.clock.on_sleep = stop_after_two
    with pytest.raises(Stop):
        run(
            usecases.follow_events(
                setup.state,
                setup.runtime(),
                lambda i, e: seen.append((i, e)),
                after=last,
                where=usecases.EventFilter(service="web"),
            )
        )
    assert [(e.kind, e.message) for _, e in seen] == [("intent", "hello")]
    assert seen[0][0] > last


# -- interrupts (issue 27 item 4) --------------------------------------------------------------
class _SignalledDuringRun:
    """An executor that receives "SIGINT" as the pass's first `docker run` goes out."""

    def __init__(self, inner: FakeExecutor, interrupt: usecases.Interrupt) -> None:
        self.inner, self.interrupt = inner, interrupt

    async def run(self, host: Any, argv: Any, **kw: Any) -> Any:
        if list(argv[:2]) == ["docker", "run"] and self.interrupt.gentle:
            self.interrupt.signal = self.interrupt.signal or "SIGINT"
        return await self.inner.run(host, argv, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_signal_during_a_pass_lets_its_acts_finish_records_them_and_exits_130(
    setup: Setup,
) -> None:
    interrupt = usecases.Interrupt()
    base = setup.runtime()
    runtime = dataclasses.replace(
        base, executor=lambda: _SignalledDuringRun(base.executor(), interrupt), interrupt=interrupt
    )
    outcome = run(
        usecases.apply(setup.file, setup.state, runtime, setup.report, wait=True, timeout=60.0)
    )
    assert outcome.exit_code is ExitCode.INTERRUPTED
    assert outcome.convergence.ending is Ending.INTERRUPTED
    assert outcome.convergence.why == "interrupted: 1 act done, recorded; run reconcile to go on"
    assert len(setup.passes()) == 1  # no pass after the signal
    assert setup.running() == ["db.1." + setup.passes()[0].result.plan.run[0].task]
    with SQLiteStore.open(setup.state) as store:
        assert [e.kind for _, e in store.events(limit=0)][-1] == "run"
    assert not interrupt.gentle  # the passes are over: a signal now stops at once
    again = run(usecases.converge(setup.state, runtime, setup.report))
    assert again.ending is Ending.INTERRUPTED  # a requested stop holds for the process
    assert again.why == "interrupted between passes, nothing under way; run reconcile to go on"
