"""Several controllers on one etcd state, through the real runner and the use cases over
in-memory Docker engines (tests/fakes.py) and a real etcd (tests/etcd.py).

The window docs/ha.md describes: a controller that lost its lease while its `docker run`
was in flight (paused, cut off from etcd) may still see that run land after the next
leader started its own task for the slot. It commits nothing more and acts no more, and
the next leader's next pass fences the late task like any stale task: the controller's
slot record (core/reconcile.py `_survivor`) decides which task survives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from minidock import usecases
from minidock.core import admit
from minidock.model import Cluster, Host, Inventory
from minidock.runner import run_pass
from minidock.ssh import Result
from minidock.store import LeaseLost, WriterBusy, parse_location
from minidock.store.etcd import EtcdStore, EtcdWriter, every_key
from minidock.store.location import EtcdURL
from minidock.usecases import Busy, Deposed, Ending, ExitCode, PassDone, Progress, Writer
from tests.behaviour import Clock
from tests.fakes import FakeDocker
from tests.sim import hosts, svc
from tests.unit.test_usecases import INVENTORY, STACK, FakeClock, run

TTL = 2.0


def _url(text: str) -> EtcdURL:
    location = parse_location(text)
    assert isinstance(location, EtcdURL)
    return location


def _take(url: EtcdURL, within: float = TTL + 3) -> EtcdWriter:
    """The writer lock, as soon as it comes free."""
    deadline = time.monotonic() + within
    writer = EtcdWriter(url)
    while True:
        try:
            writer.acquire()
            return writer
        except WriterBusy:
            if time.monotonic() > deadline:
                writer.release()
                raise
            time.sleep(0.1)


class CutOffAtRun:
    """An executor that, at this controller's first command starting with `at` (a `docker
    run`), cuts it off from etcd (its lease renewals stop, as when paused or partitioned)
    and lets `meanwhile` (another controller's takeover) happen before that command goes
    on and lands. `sent` holds when each command reached a host (monotonic)."""

    def __init__(
        self,
        docker: FakeDocker,
        writer: EtcdWriter,
        meanwhile: Callable[[], None],
        at: Sequence[str] = ("docker", "run"),
    ):
        self.inner = docker.executor()
        self.writer = writer
        self.meanwhile = meanwhile
        self.at = list(at)
        self.cut = False
        self.sent: list[tuple[float, list[str]]] = []

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        if list(argv[: len(self.at)]) == self.at and not self.cut:
            self.cut = True
            assert self.writer._keeper is not None
            self.writer._keeper.stop()
            await asyncio.to_thread(self.meanwhile)
        self.sent.append((time.monotonic(), list(argv)))
        return await self.inner.run(host, argv, input=input, timeout=timeout)

    async def close(self) -> None:
        await self.inner.close()


def test_a_deposed_controllers_late_docker_run_is_fenced_by_the_next_pass(etcd_url: str) -> None:
    url = _url(etcd_url)
    clock = Clock(time.time())
    docker = FakeDocker(clock=clock)
    inventory = Inventory("inventory.toml", tuple(hosts(2)))
    cluster = Cluster("ha", "cluster.toml", "inventory.toml", (svc("web", "web:5", replicas=1),))
    first = _take(url)
    first.store().commit(admit(first.store().load(), cluster, 1), [], generation=cluster)
    first.release()

    passes_of_b: list[list[str]] = []

    def b_pass() -> None:
        """Controller B: takes the lock once A's lease has expired, and makes one pass (a
        second later by the shared clock: its decisions name tasks of its own)."""
        b = _take(url)
        docker.advance(1.0)
        try:
            result = asyncio.run(
                run_pass(cluster, inventory, b.store(), docker.executor(), clock=clock)
            )
            passes_of_b.append(result.done)
        finally:
            b.release()

    a = _take(url)
    cut_off = CutOffAtRun(docker, a, b_pass)
    with pytest.raises(LeaseLost, match="lost the writer lease"):
        asyncio.run(run_pass(cluster, inventory, a.store(), cut_off, clock=clock))
    a.release()
    (b_started,) = passes_of_b
    assert len(b_started) == 1, b_started
    assert b_started[0].startswith("started web.1.")
    live = docker.names(status="running")
    assert len(live) == 2, live  # A's run landed late, beside B's task
    b_task = b_started[0].split()[1]
    (a_task,) = [n for n in live if n != b_task]
    a_host = next(h for h in docker.engines if a_task in docker.names(h))

    b_pass()  # B's next pass: the slot's record names B's task; A's is stale and goes
    assert passes_of_b[-1] == [
        f"stopped {a_task} on {a_host}: fenced: web.1 is assigned to task {b_task.split('.')[2]}"
    ]
    assert docker.names(status="running") == [b_task]


# -- the use cases on an etcd state -----------------------------------------------------------
class EtcdSetup:
    """tests/unit/test_usecases.py's Setup with its state in etcd."""

    def __init__(self, root: Path, url: str) -> None:
        (root / "inventory.toml").write_text(INVENTORY)
        (root / "cluster.toml").write_text(STACK)
        self.file = root / "cluster.toml"
        self.location = parse_location(url)
        self.clock = FakeClock()
        self.docker = FakeDocker(clock=Clock(self.clock.t))
        self.clock.engines = self.docker
        self.reports: list[Progress] = []

    def runtime(self) -> usecases.Runtime:
        clock = usecases.Clock(self.clock.now, self.clock.monotonic, self.clock.sleep)
        return usecases.Runtime(self.docker.executor, clock)

    def report(self, progress: Progress) -> None:
        self.reports.append(progress)


@pytest.fixture
def ha(tmp_path: Path, etcd_url: str) -> EtcdSetup:
    return EtcdSetup(tmp_path, etcd_url)


def test_apply_reconcile_status_and_events_on_an_etcd_state(ha: EtcdSetup) -> None:
    applied = run(
        usecases.apply(ha.file, ha.location, ha.runtime(), ha.report, wait=True, timeout=60)
    )
    assert (applied.exit_code, applied.convergence.ending) == (ExitCode.OK, Ending.CONVERGED)
    assert applied.generation == 1
    assert len(ha.docker.names(status="running")) == 3
    again = run(usecases.reconcile(ha.location, ha.runtime(), ha.report))
    assert again.exit_code is ExitCode.OK
    last = ha.reports[-1]
    assert isinstance(last, PassDone)
    assert (last.result.done, last.result.failures) == ([], [])
    doc = run(usecases.status(ha.location, ha.runtime())).document
    assert sorted(s.name for s in doc.services) == ["db", "web"]
    assert [e.kind for e in usecases.events(ha.location, limit=1).events] == ["run"]


def test_a_pass_in_which_nothing_happened_writes_four_keys_whatever_the_fleet(
    ha: EtcdSetup,
) -> None:
    """etcd's writes at rest (docs/scale.md, "What etcd carries"): a pass that probed every
    host and changed nothing writes PREFIX/meta, the state's `rest` (its pass counters)
    and `seen` (the hosts' last_seen), and the lock's tenure as it took the lock; no
    host's, service's or slot's key."""
    run(usecases.apply(ha.file, ha.location, ha.runtime(), ha.report, wait=True, timeout=60))
    run(usecases.reconcile(ha.location, ha.runtime(), ha.report))
    store = EtcdStore.open(_url(str(ha.location)))
    try:
        before = {
            bytes(kv.key): int(kv.mod_revision) for kv in every_key(store, store.keys.root, 0)
        }
        ha.clock.t += 30
        ha.docker.advance(30)
        run(usecases.reconcile(ha.location, ha.runtime(), ha.report))
        after = {bytes(kv.key): int(kv.mod_revision) for kv in every_key(store, store.keys.root, 0)}
    finally:
        store.close()
    changed = {k.removeprefix(store.keys.root) for k in after if after[k] != before.get(k)}
    assert changed == {b"meta", b"state/rest", b"state/seen", b"tenure"}
    assert len(after) > 10  # hosts, services and slots: none of them written


def test_a_taken_etcd_lock_is_busy_at_once_for_cron_and_after_patience_for_operators(
    ha: EtcdSetup,
) -> None:
    run(usecases.apply(ha.file, ha.location, ha.runtime(), ha.report))
    assert isinstance(ha.location, EtcdURL)
    holder = _take(ha.location)
    try:
        with pytest.raises(Busy, match="is locked by another minidock process"):
            run(usecases.reconcile(ha.location, ha.runtime(), ha.report))
        assert ha.clock.sleeps == []
        with pytest.raises(Busy):
            run(usecases.drain("host1", ha.location, ha.runtime(), ha.report, wait=False))
        assert sum(ha.clock.sleeps) == pytest.approx(usecases.patience(Writer.OPERATOR))
    finally:
        holder.release()


def test_a_pass_that_loses_its_lease_is_deposed_exit_75_and_acts_no_more(
    ha: EtcdSetup,
) -> None:
    """Cut off from etcd at its first `docker image inspect` while another controller takes
    over: the pass sends no command to any host after the takeover (its fence fails first)
    and the use case ends `Deposed` (exit 75) with one line."""
    run(usecases.apply(ha.file, ha.location, ha.runtime(), ha.report))  # db started
    assert isinstance(ha.location, EtcdURL)
    url = ha.location
    taken: list[float] = []

    def takeover() -> None:
        _take(url).release()
        taken.append(time.monotonic())

    writers: list[EtcdWriter] = []
    executors: list[CutOffAtRun] = []
    acquire = EtcdWriter.acquire

    def recording(self: EtcdWriter) -> None:
        acquire(self)
        writers.append(self)

    def cut_off() -> CutOffAtRun:
        executors.append(CutOffAtRun(ha.docker, writers[-1], takeover, ("docker", "image")))
        return executors[-1]

    ha.clock.t += 5  # db is healthy now: web's two tasks are due
    ha.docker.advance(5)
    runtime = usecases.Runtime(cut_off, ha.runtime().clock)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EtcdWriter, "acquire", recording)
        with pytest.raises(Deposed, match="lost the writer lease") as info:
            run(usecases.reconcile(url, runtime, ha.report))
    assert info.value.exit_code is ExitCode.LOCKED
    assert "\n" not in str(info.value)
    (executor,) = executors
    assert executor.cut
    (took_over,) = taken
    late = [argv for at, argv in executor.sent if at >= took_over]
    assert len(late) == 1, late  # only the command held at the cut itself
    assert late[0][:3] == ["docker", "image", "inspect"]


def test_a_watch_pass_that_loses_its_lease_is_skipped_as_deposed(ha: EtcdSetup) -> None:
    """`watch` goes on after a deposed pass (the next passes contend for the lock again),
    and says why once: the CLI prints a deposed skip's line."""
    run(usecases.apply(ha.file, ha.location, ha.runtime(), ha.report))
    assert isinstance(ha.location, EtcdURL)
    url = ha.location
    writers: list[EtcdWriter] = []
    acquire = EtcdWriter.acquire

    def recording(self: EtcdWriter) -> None:
        acquire(self)
        writers.append(self)

    class Late:
        """The executor of watch's pass: resolves the writer only when the pass acts."""

        def __init__(self) -> None:
            self.cut: CutOffAtRun | None = None

        async def run(self, host: Host, argv: Sequence[str], **kw: object) -> Result:
            if self.cut is None:
                self.cut = CutOffAtRun(
                    ha.docker, writers[-1], lambda: _take(url).release(), ("docker", "image")
                )
            return await self.cut.run(host, argv, **kw)  # type: ignore[arg-type]

        async def close(self) -> None:
            pass

    ha.clock.t += 5
    ha.docker.advance(5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EtcdWriter, "acquire", recording)
        skipped = run(usecases.watch_step(url, Late(), ha.runtime()))  # type: ignore[arg-type]
    assert isinstance(skipped, usecases.PassSkipped)
    assert skipped.deposed
    assert skipped.reason.startswith(f"lost the writer lease on {url}")
    again = run(usecases.watch_step(url, ha.docker.executor(), ha.runtime()))
    assert isinstance(again, PassDone)  # the next pass takes the lock afresh
