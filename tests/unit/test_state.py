"""The durable store and the lock: round-trips, atomicity, permissions, one writer, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn, overload

import pytest

from minidock.core import (
    Availability,
    ControllerState,
    HostPhase,
    HostState,
    Rollout,
    ServiceState,
    SlotPhase,
    SlotState,
)
from minidock.model import (
    Cluster,
    Constraint,
    Event,
    HealthCheck,
    PortMapping,
    RestartPolicy,
    Service,
    UpdatePolicy,
)
from minidock.store import codec
from minidock.store.directory import (
    DB_NAME,
    ENV_STATE,
    LOCK_NAME,
    Locked,
    StateError,
    StateLock,
    state_dir,
)
from minidock.store.sqlite import SQLiteStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")


# -- fixtures ---------------------------------------------------------------------------------
def _service(name: str, image: str, replicas: int = 3) -> Service:
    return Service(
        name=name,
        image=image,
        replicas=replicas,
        command=("httpd", "-f", "-p", "8080"),
        env=(("MODE", "prod"),),
        ports=(PortMapping(8080, 8080),),
        cpus=0.5,
        memory=256 * 2**20,
        constraints=(Constraint("zone", "!=", "c"),),
        spread="zone",
        depends_on=("db",),
        health=HealthCheck(cmd=("wget", "-qO-", "http://127.0.0.1:8080/"), start_period=2.0),
        update=UpdatePolicy(parallelism=2, order="start-first", failure_action="rollback"),
        restart=RestartPolicy(condition="on-failure", max_attempts=3),
    )


def _cluster(i: int) -> Cluster:
    return Cluster(
        name="prod",
        path=f"/srv/cluster-{i}.toml",
        inventory_path="/srv/inventory.toml",
        services=(_service("web", f"web:{i}"), Service(name="db", image="postgres:16")),
    )


def _state(i: int) -> ControllerState:
    """A rich state for generation i, big enough (> 1 page) that a torn write would show."""
    web = ServiceState(
        spec=_service("web", f"web:{i}", replicas=i % 5 + 1),
        generation=i,
        previous=_service("web", f"web:{i - 1}") if i > 1 else None,
        previous_generation=i - 1 if i > 1 else None,
        rollout=Rollout(
            phase="updating", reason=f"r{i}", failures=i % 2, total=4, done=(1, 2)[: i % 3]
        ),
        slots={
            1: SlotState(attempts=(float(i), i + 0.5), counted=(f"t{i}",), next_start=i * 1.5),
            3: SlotState(
                phase=SlotPhase.FAILED if i % 2 == 0 else SlotPhase.COMPLETE,
                last_exit=f"{i}:" + "x" * 6000,
            ),
        },
    )
    db = ServiceState(spec=Service(name="db", image="postgres:16"), generation=max(i - 1, 0))
    return ControllerState(
        cluster="prod",
        generation=i,
        order=("db", "web"),
        services={"db": db, "web": web},
        hosts={
            "host1": HostState(
                failures=i % 3,
                phase=HostPhase.DOWN if i % 3 == 2 else HostPhase.READY,
                last_seen=float(i),
            ),
            "host2": HostState(
                availability=Availability.DRAINED if i % 2 else Availability.ACTIVE,
                last_error=f"refused {i}",
            ),
        },
    )


def _event(i: int, kind: str = "apply") -> Event:
    return Event(
        at=1000.0 + i, kind=kind, message=f"commit {i}", service="web", slot=i, host="h", task="t"
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- round-trips ------------------------------------------------------------------------------
def test_empty_store_loads_empty_state(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "st") as store:
        assert store.load() == ControllerState()
        assert store.latest_generation() is None
        assert store.generation(1) is None
        assert store.events() == []
        assert store.next_generation_id() == 1


def test_round_trip_state_generation_events(tmp_path: Path) -> None:
    d = tmp_path / "st"
    with SQLiteStore.open(d) as store:
        gen = store.commit(_state(1), [_event(1), _event(1, "task.started")], _cluster(1), "a.toml")
        assert gen == 1
    with SQLiteStore.open(d) as store:  # a fresh connection sees it all
        loaded = store.load()
        assert loaded == _state(1)
        assert loaded.services["web"].slots[3].last_exit.startswith("1:")  # int keys survive
        assert store.latest_generation() == (1, _cluster(1))
        assert store.generation(1) == _cluster(1)
        assert [e for _, e in store.events()] == [_event(1), _event(1, "task.started")]


def test_commit_without_generation_replaces_state_only(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path) as store:
        store.commit(_state(1), generation=_cluster(1))
        drained = ControllerState(
            generation=1, hosts={"host1": HostState(availability=Availability.DRAINED)}
        )
        assert store.commit(drained, [_event(2, "host.drained")]) is None
        assert store.load() == drained
        assert store.latest_generation() == (1, _cluster(1))


def test_generation_ids_increase(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path) as store:
        ids = []
        for i in range(1, 6):
            assert store.next_generation_id() == i
            ids.append(store.commit(_state(i), generation=_cluster(i), source_path=f"{i}.toml"))
        assert ids == [1, 2, 3, 4, 5]
        assert store.latest_generation() == (5, _cluster(5))
        assert store.generation(2) == _cluster(2)


def test_generation_must_match_state(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path) as store:
        with pytest.raises(ValueError, match="generation"):
            store.commit(_state(7), [_event(7)], generation=_cluster(7))
        assert store.load() == ControllerState()
        assert store.events() == []


def test_events_paging(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path) as store:
        for i in range(1, 11):
            store.commit(ControllerState(), [_event(i)])
        newest = store.events(limit=3)
        assert [e.message for _, e in newest] == ["commit 8", "commit 9", "commit 10"]
        ids = [i for i, _ in store.events(limit=0)]
        assert ids == sorted(ids)
        assert len(ids) == 10
        page = store.events(limit=4, since_id=ids[2])
        assert [i for i, _ in page] == ids[3:7]
        assert store.events(since_id=ids[-1]) == []


# -- atomicity --------------------------------------------------------------------------------
class _Exploding(Sequence[Event]):
    """Yields one event, then fails: the failure lands after rows were written."""

    def __len__(self) -> int:
        return 2

    @overload
    def __getitem__(self, i: int) -> Event: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Event]: ...
    def __getitem__(self, i: int | slice) -> Event | Sequence[Event]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Event]:
        yield _event(2)
        raise RuntimeError("boom mid-transaction")


def _assert_untouched(store: SQLiteStore) -> None:
    assert store.load() == _state(1)
    assert store.latest_generation() == (1, _cluster(1))
    assert store.generation(2) is None
    assert [e.message for _, e in store.events()] == ["commit 1"]


def test_commit_is_all_or_nothing_on_python_error(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path) as store:
        store.commit(_state(1), [_event(1)], _cluster(1))
        with pytest.raises(RuntimeError, match="boom"):
            store.commit(_state(2), _Exploding(), _cluster(2))
        _assert_untouched(store)
    with SQLiteStore.open(tmp_path) as store:
        _assert_untouched(store)
        assert store.commit(_state(2), [_event(2)], _cluster(2)) == 2  # still usable


def test_commit_is_all_or_nothing_on_database_error(tmp_path: Path) -> None:
    """A statement-level abort (SQLite keeps the transaction open) still rolls back it all."""
    with SQLiteStore.open(tmp_path) as store:
        store.commit(_state(1), [_event(1)], _cluster(1))
    raw = sqlite3.connect(tmp_path / DB_NAME)
    raw.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.kind = 'boom'"
        " BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    raw.commit()
    raw.close()
    with SQLiteStore.open(tmp_path) as store:
        with pytest.raises(sqlite3.DatabaseError, match="boom"):
            store.commit(_state(2), [_event(2), _event(2, "boom")], _cluster(2))
        _assert_untouched(store)


def test_closed_store_refuses(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path)
    store.close()
    store.close()
    with pytest.raises(StateError, match="closed"):
        store.load()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    SQLiteStore.open(tmp_path).close()
    raw = sqlite3.connect(tmp_path / DB_NAME)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(StateError, match="schema version 99"):
        SQLiteStore.open(tmp_path)


# -- permissions ------------------------------------------------------------------------------
@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
def test_permissions_hold_under_open_umask(tmp_path: Path) -> None:
    d = tmp_path / "deep" / ".minidock"
    with SQLiteStore.open(d) as store:
        store.commit(_state(1), [_event(1)], _cluster(1))
        assert _mode(d) == 0o700
        files = [d / DB_NAME, d / f"{DB_NAME}-wal", d / f"{DB_NAME}-shm"]
        for f in files:
            assert f.exists(), f
            assert _mode(f) == 0o600, f
    with StateLock(d):
        assert _mode(d / LOCK_NAME) == 0o600


@pytest.mark.usefixtures("open_umask")
def test_loose_files_are_tightened(tmp_path: Path) -> None:
    (tmp_path / DB_NAME).touch(mode=0o666)
    (tmp_path / LOCK_NAME).touch(mode=0o666)
    with SQLiteStore.open(tmp_path):
        assert _mode(tmp_path / DB_NAME) == 0o600
    with StateLock(tmp_path):
        assert _mode(tmp_path / LOCK_NAME) == 0o600


# -- the lock ---------------------------------------------------------------------------------
def test_second_lock_in_process_is_refused_at_once(tmp_path: Path) -> None:
    with StateLock(tmp_path) as held:
        assert held.held
        with pytest.raises(Locked) as info:  # a lock that waited would never return here
            StateLock(tmp_path).acquire()
        assert info.value.pid == os.getpid()
        assert str(tmp_path) in str(info.value)
        assert f"pid {os.getpid()}" in str(info.value)
    with StateLock(tmp_path):  # released: free again
        pass
    assert (tmp_path / LOCK_NAME).read_text() == ""  # no stale pid left behind


_TRY_LOCK = """
import sys
from pathlib import Path
from minidock.store.directory import Locked, StateLock
try:
    with StateLock(Path(sys.argv[1])):
        print("acquired", flush=True)
        sys.stdin.readline()
except Locked as exc:
    print(exc, flush=True)
    sys.exit(75)
"""


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    with StateLock(tmp_path):  # held until the child has answered: a lock that waited
        run = subprocess.run(  # would never answer (the timeout only ends a hung test)
            [sys.executable, "-c", _TRY_LOCK, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert run.returncode == 75, run.stderr
    assert str(tmp_path) in run.stdout
    assert f"pid {os.getpid()}" in run.stdout


def test_lock_held_by_another_process_and_freed_by_kill_9(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _TRY_LOCK, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "acquired"
        with pytest.raises(Locked) as info:
            StateLock(tmp_path).acquire()
        assert info.value.pid == child.pid
        child.kill()  # SIGKILL: the kernel drops the flock
        child.wait(timeout=10)
        with StateLock(tmp_path):
            pass
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def test_lock_cannot_be_taken_twice_by_one_object(tmp_path: Path) -> None:
    lock = StateLock(tmp_path)
    with lock, pytest.raises(RuntimeError, match="already held"):
        lock.acquire()
    assert not lock.held
    lock.release()  # idempotent


# -- the state directory ----------------------------------------------------------------------
def test_state_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STATE, raising=False)
    # one rule for every command (PRODUCT.md, issue 11): never beside the cluster file
    assert state_dir(None) == tmp_path / ".minidock"
    monkeypatch.setenv(ENV_STATE, str(tmp_path / "env"))
    assert state_dir(None) == tmp_path / "env"
    assert state_dir(str(tmp_path / "flag")) == tmp_path / "flag"
    assert state_dir("rel") == tmp_path / "rel"


def test_state_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(StateError, match="not a directory"):
        SQLiteStore.open(tmp_path / "f")


# -- kill -9 at random instants ---------------------------------------------------------------
def _writer(directory: Path, ack_fd: int) -> NoReturn:
    """Child: commit generations i = last + 1, last + 2, ... in a tight loop, acking each."""
    code = 1
    try:
        os.write(ack_fd, b"S\n")
        with SQLiteStore.open(directory) as store:
            i = store.load().generation
            while True:
                i += 1
                store.commit(_state(i), [_event(i)], _cluster(i), f"c{i}.toml")
                os.write(ack_fd, b"%d\n" % i)
    except BaseException as exc:
        os.write(2, f"writer failed: {exc!r}\n".encode())
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_kill_9_at_random_instants_leaves_a_committed_state(tmp_path: Path) -> None:
    rng = random.Random(7533)
    d = tmp_path / "st"
    verified = 0
    deadline = time.monotonic() + 4.0
    for trial in range(20):
        if time.monotonic() > deadline and verified > 0:
            break
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(rfd)
            _writer(d, wfd)
        os.close(wfd)
        try:
            assert os.read(rfd, 2) == b"S\n"
            # lands in open, in a commit, or between; on a loaded machine the first commit
            # can take longer than the window, so a run with none yet waits longer
            time.sleep(rng.uniform(0.0, 0.05) + (0.0 if verified or trial < 5 else 0.3))
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            acks = [int(x) for x in _read_all(rfd).split()]
        finally:
            os.close(rfd)
        assert os.WIFSIGNALED(status), status
        assert os.WTERMSIG(status) == signal.SIGKILL, status
        acked = max(acks, default=verified)

        with SQLiteStore.open(d) as store:
            state = store.load()
            n = state.generation
            # every acknowledged commit is durable; at most the one in flight is extra
            assert acked <= n <= acked + 1
            events = store.events(limit=0)
            assert [e.message for _, e in events] == [f"commit {k}" for k in range(1, n + 1)]
            if n == 0:
                assert state == ControllerState()
                assert store.latest_generation() is None
            else:
                assert state == _state(n)  # whole, not torn
                assert store.latest_generation() == (n, _cluster(n))
        verified = n
    assert verified > 0, "the writer never got a commit in"


def test_state_written_before_the_phase_enums_keeps_its_drains_and_failures() -> None:
    """A state.db from before the core's machines (booleans) is read into phases."""
    legacy = json.dumps(
        {
            "cluster": "prod",
            "generation": 3,
            "order": ["web"],
            "hosts": {
                "h1": {"failures": 3, "down": True, "drained": True, "tasks": []},
                "h2": {"failures": 1, "down": False, "drained": False, "tasks": []},
            },
            "services": {
                "web": {
                    "spec": {"name": "web", "image": "web:5"},
                    "generation": 3,
                    "slots": {
                        "1": {"failed": True, "complete": False, "attempts": [1.0]},
                        "2": {"failed": False, "complete": True},
                        "3": {"failed": False, "complete": False, "attempts": [2.0]},
                    },
                }
            },
        }
    )
    state = codec.loads(legacy, ControllerState)
    assert (state.host("h1").phase, state.host("h1").drained) == (HostPhase.DOWN, True)
    assert (state.host("h2").phase, state.host("h2").drained) == (HostPhase.UNREACHABLE, False)
    slots = state.services["web"].slots
    assert [slots[n].phase for n in (1, 2, 3)] == [
        SlotPhase.FAILED,
        SlotPhase.COMPLETE,
        SlotPhase.BACKING_OFF,
    ]
    assert codec.loads(codec.dumps(state), ControllerState) == state
