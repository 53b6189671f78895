"""The embedded backend: a state directory (minidock.store.directory) and its database,
DIR/state.db, which keeps desired-state generations, the controller's decisions
(ControllerState) and the event log, in WAL mode with synchronous=FULL: every `commit` is
one transaction, so a `kill -9` at any instant leaves either the old or the new state,
never a mix. Writers hold the directory's flock (`SQLiteWriter`) for a whole pass.

Secret values are sealed (minidock.store.sealing) with the directory's key file,
DIR/secrets.key, never stored in the database; `secure_delete` zeroes what a write
replaces. A database of schema 1 (an older MiniDock, secrets in clear) is read as it is and
sealed by the first writer: every row rewritten in one transaction, then the WAL truncated.
Standard library and `cryptography` only: nothing here imports an etcd client. The pure
core never imports this module. See docs/state.md.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from minidock.core import ControllerState
from minidock.model import Cluster, Event
from minidock.store.base import GenerationRecord, Snapshot
from minidock.store.codec import Codec
from minidock.store.directory import (
    CONTROLLER_ID_NAME,
    DB_NAME,
    StateError,
    StateLock,
    check_state_dir,
    controller_id,
    ensure_state_dir,
    private_file,
    tighten_sidecars,
    usable,
)
from minidock.store.location import CLUSTERS, StateLocation
from minidock.store.sealing import KEY_NAME, SEALED, key_box

__all__ = [
    "SCHEMA_VERSION",
    "SQLiteBackend",
    "SQLiteStore",
    "SQLiteWriter",
    "has_state",
    "prepare",
]

# 1: secrets in clear (sealed by the first writer); 2: sealed; 3: written by MiniDock 0.5,
# whose controller state holds records (backup intents, restores awaited) that an older
# MiniDock would drop on its next write, so an older one refuses it (CHANGELOG.md).
# Raised by the first writer (`seal_at_rest`); readers leave an older database as it is.
# A slot's `half_written` (a failed restore's hold, "" when absent) raises nothing: a
# record without it reads as unmarked, which is what it meant, and it lands within 0.5.0,
# the release that brought schema 3, so no released writer of schema 3 lacks it. A field
# like it added after a release would raise the schema: that release's controllers would
# drop it on their next write (etcd.py's SCHEMA_VERSION follows this one).
SCHEMA_VERSION = 3
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


class SQLiteStore:
    """DIR/state.db: desired-state generations, the controller's state, the event log.

    Writers must hold `StateLock(DIR)` for the whole read-decide-act-commit pass; readers
    (status) may open the store without it and see the last committed state.
    """

    def __init__(self, directory: Path, conn: sqlite3.Connection, codec: Codec) -> None:
        """Use `SQLiteStore.open`."""
        self.directory = directory
        self.path = directory / DB_NAME
        self.codec = codec
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    def open(cls, directory: Path) -> Self:
        """Open (creating the directory, the database, its schema and the key file if
        needed). A directory, database or key this user may not use is one line."""
        ensure_state_dir(directory)
        path = directory / DB_NAME
        with usable(path):
            # SQLite gives its -wal/-shm files the database file's mode, so a 0600 database
            # keeps them 0600 whatever the umask; tighten_sidecars double-checks.
            private_file(path)
            conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None)
            try:
                _prepare(conn, path)
                box = key_box(directory / KEY_NAME, holds_sealed=lambda: _holds_sealed(conn))
                store = cls(directory, conn, Codec(box))
                tighten_sidecars(path)
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
        return self.codec.loads(row[0], ControllerState)

    def cluster(self) -> str:
        return self.load().cluster

    def keyed(self, cluster: Cluster) -> Cluster:
        return self.codec.keyed(cluster)

    def latest_generation(self) -> tuple[int, Cluster] | None:
        """The newest desired-state generation and its id, or None before the first apply."""
        row = self._db.execute(
            "SELECT id, cluster_json FROM generations ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), self.codec.loads(row[1], Cluster)

    def generation(self, gen_id: int) -> Cluster | None:
        """The desired state stored as generation `gen_id`, or None if there is none."""
        row = self._db.execute(
            "SELECT cluster_json FROM generations WHERE id = ?", (gen_id,)
        ).fetchone()
        return None if row is None else self.codec.loads(row[0], Cluster)

    def next_generation_id(self) -> int:
        """The id the next `commit(..., generation=...)` will store (ids only grow)."""
        return _next_generation_id(self._db)

    def events(self, limit: int = 100, since_id: int = 0) -> list[tuple[int, Event]]:
        """Events as (id, Event), oldest first.

        since_id 0: the newest `limit` events. since_id > 0: the first `limit` events after
        that id, so a follower paging with the last id it saw never skips one.
        limit <= 0 means no limit.
        """
        return [_event_row(r) for r in _event_rows(self._db, limit, since_id)]

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
        state_json = self.codec.dumps(state)
        cluster_json = None if generation is None else self.codec.dumps(generation)
        with self._transaction() as db:
            gen_id: int | None = None
            if cluster_json is not None:
                gen_id = _next_generation_id(db)
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
            _put_state(db, state_json)
            _append(db, ((None, e) for e in events))
        return gen_id

    def fence(self) -> None:
        """Nothing to check: a flock cannot be lost while its holder lives (a lease can)."""

    # -- a migration's copy, and sealing an older database ------------------------------
    def snapshot(self) -> Snapshot:
        """Everything in the database, read in one read transaction."""
        db = self._db
        db.execute("BEGIN")
        try:
            generations = tuple(_generations(db, self.codec))
            state = self.load()
            events = self.events(limit=0, since_id=0)
        finally:
            db.execute("COMMIT")
        return Snapshot(state=state, generations=generations, events=tuple(events))

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything with `snapshot` in one transaction, ids kept as they were."""
        with self._transaction() as db:
            for table in ("generations", "controller", "events"):
                db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            _put_generations(db, self.codec, snapshot.generations)
            if snapshot.state != ControllerState() or snapshot.generations:
                _put_state(db, self.codec.dumps(snapshot.state))
            _append(db, snapshot.events)

    def seal_at_rest(self) -> None:
        """An older database raised to this schema by its writer before its pass: a
        schema-1 one (secrets in clear) has every generation and the controller row
        rewritten sealed in one transaction, then the WAL checkpointed and truncated, so
        no clear value is left in either file; a schema-2 one is only marked."""
        version = _schema_version(self._db)
        if version in (0, SCHEMA_VERSION):
            return
        with self._transaction() as db:
            _seal_schema_1(db, self.codec)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if version == 1:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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


def _event_rows(db: sqlite3.Connection, limit: int, since_id: int) -> list[Any]:
    """The rows `SQLiteStore.events` reads, oldest first."""
    sql_limit = limit if limit > 0 else -1
    if since_id > 0:
        return db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?",  # noqa: S608
            (since_id, sql_limit),
        ).fetchall()
    rows = db.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events ORDER BY id DESC LIMIT ?",  # noqa: S608
        (sql_limit,),
    ).fetchall()
    rows.reverse()
    return rows


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """A connection as every store uses it: WAL, each commit synced, a replaced row's old
    bytes overwritten, and the schema brought up to date."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA secure_delete=ON")  # a replaced row leaves no copy
    _migrate(conn, path)


def _generations(db: sqlite3.Connection, codec: Codec) -> list[GenerationRecord]:
    rows = db.execute(
        "SELECT id, applied_at, source_path, cluster_json FROM generations ORDER BY id"
    ).fetchall()
    return [
        GenerationRecord(int(g[0]), float(g[1]), str(g[2]), codec.loads(g[3], Cluster))
        for g in rows
    ]


def _put_generations(
    db: sqlite3.Connection,
    codec: Codec,
    records: Sequence[GenerationRecord],
    *,
    replace: bool = False,
) -> None:
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    db.executemany(
        f"{verb} INTO generations (id, applied_at, source_path, cluster_json) VALUES (?, ?, ?, ?)",
        ((g.id, g.applied_at, g.source_path, codec.dumps(g.cluster)) for g in records),
    )


def _seal_schema_1(db: sqlite3.Connection, codec: Codec) -> None:
    """Every generation and the controller row of a schema-1 database written again
    sealed, and the schema raised (nothing when another writer did it first)."""
    if _schema_version(db) != 1:
        return
    _put_generations(db, codec, _generations(db, codec), replace=True)
    row = db.execute("SELECT state_json FROM controller WHERE id = 1").fetchone()
    if row is not None:
        _put_state(db, codec.dumps(codec.loads(row[0], ControllerState)))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _put_state(db: sqlite3.Connection, state_json: str) -> None:
    db.execute(
        "INSERT INTO controller (id, state_json) VALUES (1, ?)"
        " ON CONFLICT (id) DO UPDATE SET state_json = excluded.state_json",
        (state_json,),
    )


def _append(db: sqlite3.Connection, events: Iterable[tuple[int | None, Event]]) -> None:
    """Append events; an id of None takes the next one (a restore keeps the ids it has)."""
    db.executemany(
        "INSERT INTO events (id, at, kind, service, slot, host, task, message)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ((i, e.at, e.kind, e.service, e.slot, e.host, e.task, e.message) for i, e in events),
    )


def _next_generation_id(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM generations").fetchone()
    return int(row[0])


def _schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema on first use; refuse a newer one. Readers of a current database
    take no lock; an older one (1, 2) is left for its first writer to raise (and seal)."""
    if 0 < _schema_version(db) <= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(db)  # again, under the write lock
        if version > SCHEMA_VERSION:
            raise StateError(
                f"{path} has schema version {version}; this minidock knows "
                f"up to {SCHEMA_VERSION}: upgrade minidock"
            )
        if version == 0:
            for ddl in _SCHEMA:
                db.execute(ddl)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _holds_sealed(db: sqlite3.Connection) -> bool:
    """Whether any stored row holds a sealed value (then a missing key is not made anew)."""
    pattern = f"%{SEALED}%"
    row = db.execute(
        "SELECT EXISTS (SELECT 1 FROM generations WHERE cluster_json LIKE ?)"
        " OR EXISTS (SELECT 1 FROM controller WHERE state_json LIKE ?)",
        (pattern, pattern),
    ).fetchone()
    return bool(row[0])


def _event_row(r: Sequence[Any]) -> tuple[int, Event]:
    """An events row (in _EVENT_COLUMNS order) as (id, Event)."""
    return int(r[0]), Event(
        at=r[1], kind=r[2], service=r[3], slot=r[4], host=r[5], task=r[6], message=r[7]
    )


class SQLiteWriter:
    """The writer lock of a state directory (its flock) and the store it guards."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = StateLock(directory)

    def acquire(self) -> None:
        self._lock.acquire()  # Locked is a WriterBusy

    def store(self) -> SQLiteStore:
        """The store, an older database sealed first (`seal_at_rest`)."""
        store = SQLiteStore.open(self.directory)
        try:
            store.seal_at_rest()
        except BaseException:
            store.close()
            raise
        return store

    def release(self) -> None:
        self._lock.release()


def has_state(directory: Path) -> bool:
    """Whether anything was ever stored in `directory` (its database exists)."""
    return (directory / DB_NAME).exists()


def prepare(directory: Path) -> None:
    """Create the state directory (0700) for a writer; a path that is a file is refused."""
    ensure_state_dir(directory)


class SQLiteBackend:
    """A state directory as minidock.store's `Backend`."""

    def __init__(self, directory: Path) -> None:
        self.location = directory

    def open_reader(self) -> SQLiteStore:
        return SQLiteStore.open(self.location)

    def writer_lock(self) -> SQLiteWriter:
        return SQLiteWriter(self.location)

    def has_state(self) -> bool:
        return has_state(self.location)

    def controller_id(self, given: str | None = None) -> str:
        return controller_id(self.location, given)

    def existing_controller_id(self) -> str | None:
        check_state_dir(self.location)  # a path that is a file, another user's: refused
        try:
            return (self.location / CONTROLLER_ID_NAME).read_text().strip() or None
        except FileNotFoundError:
            return None

    def prepare(self) -> None:
        prepare(self.location)

    def cluster_location(self, name: str) -> StateLocation:
        return self.location / CLUSTERS / name

    def further_clusters(self) -> list[str]:
        below = self.location / CLUSTERS
        if not below.is_dir():
            return []
        return sorted(p.name for p in below.iterdir() if has_state(p))
