"""The durable store and the one-writer lock on the state directory (an I/O adapter).

`Store` keeps desired-state generations, the controller's decisions (ControllerState) and
the event log in one SQLite database, DIR/state.db, in WAL mode with synchronous=FULL:
every `commit` is one transaction, so a `kill -9` at any instant leaves either the old or
the new state, never a mix. `StateLock` is an flock on DIR/lock that a writer holds for a
whole reconcile pass; a second writer gets `Locked` at once (the CLI exits 75).
It implements minidock.store.base's Store and is the embedded default; it never imports
an etcd client. The pure core never imports this module. See docs/state.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from minidock import codec
from minidock.core import ControllerState
from minidock.model import Cluster, Event
from minidock.store.base import StoreUnusable, WriterBusy

__all__ = [
    "DB_NAME",
    "ENV_STATE",
    "LOCK_NAME",
    "SCHEMA_VERSION",
    "Locked",
    "StateError",
    "StateLock",
    "Store",
    "check_state_dir",
    "controller_id",
    "ensure_state_dir",
    "state_dir",
]

DB_NAME = "state.db"
LOCK_NAME = "lock"
ENV_STATE = "MINIDOCK_STATE"
SCHEMA_VERSION = 1

_DIR_MODE = 0o700
_FILE_MODE = 0o600
_BUSY_TIMEOUT = 10.0  # seconds a reader/writer waits for SQLite's own short-lived locks

_SCHEMA = (
    """CREATE TABLE generations (
        id INTEGER PRIMARY KEY,
        applied_at REAL NOT NULL,
        source_path TEXT NOT NULL,
        cluster_json TEXT NOT NULL
    )""",
    """CREATE TABLE controller (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        state_json TEXT NOT NULL
    )""",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        service TEXT NOT NULL,
        slot INTEGER NOT NULL,
        host TEXT NOT NULL,
        task TEXT NOT NULL,
        message TEXT NOT NULL
    )""",
)

_EVENT_COLUMNS = "id, at, kind, service, slot, host, task, message"


class StateError(StoreUnusable):
    """The state directory or database cannot be used (e.g. written by a newer MiniDock)."""


class Locked(WriterBusy):
    """Another process holds the state directory's lock (the use cases decide whether to
    wait; exit 75, EX_TEMPFAIL, when they give up: cron skips this run)."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"state directory {directory} is locked by another minidock process ({holder})"
        )


# -- the state directory ----------------------------------------------------------------------
def state_dir(explicit: str | None) -> Path:
    """--state DIR, else $MINIDOCK_STATE, else .minidock/ in the working directory: one
    rule for every command, so `apply` and a later `status` or cron `reconcile` run from
    the same place find the same state. An existing directory must be private to this
    user (`check_state_dir`)."""
    if explicit:
        directory = Path(explicit).expanduser().absolute()
    elif from_env := os.environ.get(ENV_STATE):
        directory = Path(from_env).expanduser().absolute()
    else:
        directory = Path.cwd() / ".minidock"
    check_state_dir(directory)
    return directory


def check_state_dir(directory: Path) -> None:
    """Refuse an existing state directory that is not private to this user: owned by
    another user, or open to group or others (its events and specs hold the cluster's
    secrets). A missing one is fine: `ensure_state_dir` creates it 0700."""
    try:
        st = directory.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateError(f"state directory {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"state path {directory} exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise StateError(
            f"state directory {directory} is owned by uid {st.st_uid}, not by this user "
            f"(uid {os.geteuid()}): use your own --state DIR"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise StateError(
            f"state directory {directory} is accessible by group or others "
            f"(mode {mode:04o}): run chmod 700 {directory}"
        )


def ensure_state_dir(directory: Path) -> Path:
    """Create `directory` (mode 0700) if missing; an existing one must be private to this
    user (`check_state_dir`) and is otherwise left as it is."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=_DIR_MODE)
    except FileExistsError:
        check_state_dir(directory)
    except OSError as exc:
        raise StateError(f"cannot create state directory {directory}: {exc.strerror}") from None
    else:
        os.chmod(directory, _DIR_MODE)  # mkdir's mode is filtered by the umask; be exact
    return directory


CONTROLLER_ID_NAME = "controller-id"


def controller_id(directory: Path) -> str:
    """This state directory's controller id (made once, random), labelled on every task it
    starts. It lives beside state.db, not in it: a lost state.db keeps its identity, so an
    apply adopts the tasks at once, while another directory's store needs `--adopt`."""
    path = directory / CONTROLLER_ID_NAME
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    ensure_state_dir(directory)
    new = os.urandom(6).hex()
    tmp = path.with_name(f".{CONTROLLER_ID_NAME}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(new + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return new


def _private_file(path: Path) -> None:
    """Create `path` 0600 if missing, and take group/other bits off it if present."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
    try:
        _tighten(fd)
    finally:
        os.close(fd)


def _tighten(fd: int) -> None:
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, _FILE_MODE)


def _tighten_sidecars(db: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        side = db.with_name(db.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(side.stat().st_mode) & 0o077:
                os.chmod(side, _FILE_MODE)


@contextlib.contextmanager
def _usable(path: Path) -> Iterator[None]:
    """A state file this user may not open or write, as a one-line StateError."""
    try:
        yield
    except PermissionError as exc:
        raise StateError(f"cannot use {exc.filename or path}: permission denied") from None
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc) and "unable to open" not in str(exc):
            raise
        raise StateError(f"cannot use {path}: {exc}") from None


# -- the store --------------------------------------------------------------------------------
class Store:
    """DIR/state.db: desired-state generations, the controller's state, the event log.

    Writers must hold `StateLock(DIR)` for the whole read-decide-act-commit pass; readers
    (status) may open the store without it and see the last committed state.
    """

    def __init__(self, directory: Path, conn: sqlite3.Connection) -> None:
        """Use `Store.open`."""
        self.directory = directory
        self.path = directory / DB_NAME
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    def open(cls, directory: Path) -> Self:
        """Open (creating the directory, the database and its schema if needed).

        A directory or database this user may not use is a `StateError`, one line."""
        ensure_state_dir(directory)
        path = directory / DB_NAME
        with _usable(path):
            # SQLite gives its -wal/-shm files the database file's mode, so a 0600 database
            # keeps them 0600 whatever the umask; _tighten_sidecars double-checks.
            _private_file(path)
            conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                store = cls(directory, conn)
                store._migrate()
                _tighten_sidecars(path)
            except BaseException:
                conn.close()
                raise
        return store

    def close(self) -> None:
        """Close the database (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads ----------------------------------------------------------------------------
    def load(self) -> ControllerState:
        """The last committed ControllerState, or an empty one if nothing was committed."""
        row = self._db.execute("SELECT state_json FROM controller WHERE id = 1").fetchone()
        if row is None:
            return ControllerState()
        return codec.loads(row[0], ControllerState)

    def latest_generation(self) -> tuple[int, Cluster] | None:
        """The newest desired-state generation and its id, or None before the first apply."""
        row = self._db.execute(
            "SELECT id, cluster_json FROM generations ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), codec.loads(row[1], Cluster)

    def generation(self, gen_id: int) -> Cluster | None:
        """The desired state stored as generation `gen_id`, or None if there is none."""
        row = self._db.execute(
            "SELECT cluster_json FROM generations WHERE id = ?", (gen_id,)
        ).fetchone()
        return None if row is None else codec.loads(row[0], Cluster)

    def next_generation_id(self) -> int:
        """The id the next `commit(..., generation=...)` will store (ids only grow)."""
        return self._next_generation_id(self._db)

    def events(self, limit: int = 100, since_id: int = 0) -> list[tuple[int, Event]]:
        """Events as (id, Event), oldest first.

        since_id 0: the newest `limit` events. since_id > 0: the first `limit` events after
        that id, so a follower paging with the last id it saw never skips one.
        limit <= 0 means no limit.
        """
        sql_limit = limit if limit > 0 else -1
        if since_id > 0:
            rows = self._db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?",  # noqa: S608
                (since_id, sql_limit),
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events ORDER BY id DESC LIMIT ?",  # noqa: S608
                (sql_limit,),
            ).fetchall()
            rows.reverse()
        return [_event_row(r) for r in rows]

    # -- the one write --------------------------------------------------------------------
    def commit(
        self,
        state: ControllerState,
        events: Sequence[Event] = (),
        generation: Cluster | None = None,
        source_path: str = "",
    ) -> int | None:
        """Store everything in ONE transaction: all of it or none of it.

        If `generation` is given it is stored as the next generation, whose id is returned;
        `state.generation` must already name that id (see `next_generation_id`), so the
        controller row and the generations table can never disagree. Then the controller
        row is replaced and `events` are appended.
        """
        state_json = codec.dumps(state)
        cluster_json = None if generation is None else codec.dumps(generation)
        with self._transaction() as db:
            gen_id: int | None = None
            if cluster_json is not None:
                gen_id = self._next_generation_id(db)
                if state.generation != gen_id:
                    raise ValueError(
                        f"state.generation is {state.generation}, "
                        f"but the new generation's id is {gen_id}"
                    )
                db.execute(
                    "INSERT INTO generations (id, applied_at, source_path, cluster_json)"
                    " VALUES (?, ?, ?, ?)",
                    (gen_id, time.time(), source_path, cluster_json),
                )
            db.execute(
                "INSERT INTO controller (id, state_json) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET state_json = excluded.state_json",
                (state_json,),
            )
            db.executemany(
                "INSERT INTO events (at, kind, service, slot, host, task, message)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                ((e.at, e.kind, e.service, e.slot, e.host, e.task, e.message) for e in events),
            )
        return gen_id

    def fence(self) -> None:
        """Nothing to check: a flock cannot be lost while its holder lives (a lease can)."""

    # -- internals ------------------------------------------------------------------------
    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateError(f"store {self.path} is closed")
        return self._conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; any exception (even after a partial write) rolls back."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @staticmethod
    def _next_generation_id(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM generations").fetchone()
        return int(row[0])

    def _migrate(self) -> None:
        """Create the schema on first use; readers of a current database take no lock."""
        if self._schema_version(self._db) == SCHEMA_VERSION:
            return
        with self._transaction() as db:
            version = self._schema_version(db)  # again, under the write lock
            if version == SCHEMA_VERSION:
                return
            if version > SCHEMA_VERSION:
                raise StateError(
                    f"{self.path} has schema version {version}; this minidock knows "
                    f"up to {SCHEMA_VERSION}: upgrade minidock"
                )
            for ddl in _SCHEMA:
                db.execute(ddl)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _schema_version(db: sqlite3.Connection) -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def _event_row(r: Sequence[Any]) -> tuple[int, Event]:
    """An events row (in _EVENT_COLUMNS order) as (id, Event)."""
    return int(r[0]), Event(
        at=r[1], kind=r[2], service=r[3], slot=r[4], host=r[5], task=r[6], message=r[7]
    )


# -- the lock ---------------------------------------------------------------------------------
class StateLock:
    """An exclusive, non-blocking flock on DIR/lock, held by the one writer.

    The holder writes its pid into the file so `Locked` can name it. The kernel drops the
    lock when the holder exits, even by kill -9, so a crash never leaves a stale lock.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock now or raise `Locked`; never waits."""
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this StateLock")
        ensure_state_dir(self.directory)
        with _usable(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
        try:
            _tighten(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise Locked(self.directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale pid for the next reader
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
