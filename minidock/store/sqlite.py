"""The embedded backend: `minidock.state`'s SQLite store and flock, as minidock.store's
`Store` and `WriterLock`, plus the whole-store copy a migration needs (`snapshot`,
`restore`). Standard library only: nothing here imports an etcd client."""

from __future__ import annotations

from pathlib import Path

from minidock import codec
from minidock.core import ControllerState
from minidock.model import Cluster
from minidock.state import DB_NAME, StateLock, ensure_state_dir
from minidock.state import Store as _SQLite
from minidock.store.base import GenerationRecord, Snapshot

__all__ = ["SQLiteStore", "SQLiteWriter", "has_state", "prepare"]


class SQLiteStore(_SQLite):
    """DIR/state.db (minidock.state.Store) with the copy a migration makes of it."""

    def snapshot(self) -> Snapshot:
        """Everything in the database, read in one read transaction."""
        db = self._db
        db.execute("BEGIN")
        try:
            gens = db.execute(
                "SELECT id, applied_at, source_path, cluster_json FROM generations ORDER BY id"
            ).fetchall()
            state = self.load()
            events = self.events(limit=0, since_id=0)
        finally:
            db.execute("COMMIT")
        return Snapshot(
            state=state,
            generations=tuple(
                GenerationRecord(int(g[0]), float(g[1]), str(g[2]), codec.loads(g[3], Cluster))
                for g in gens
            ),
            events=tuple(events),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything with `snapshot` in one transaction, ids kept as they were."""
        state_json = codec.dumps(snapshot.state)
        with self._transaction() as db:
            for table in ("generations", "controller", "events"):
                db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            db.executemany(
                "INSERT INTO generations (id, applied_at, source_path, cluster_json)"
                " VALUES (?, ?, ?, ?)",
                (
                    (g.id, g.applied_at, g.source_path, codec.dumps(g.cluster))
                    for g in snapshot.generations
                ),
            )
            if snapshot.state != ControllerState() or snapshot.generations:
                db.execute("INSERT INTO controller (id, state_json) VALUES (1, ?)", (state_json,))
            db.executemany(
                "INSERT INTO events (id, at, kind, service, slot, host, task, message)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (i, e.at, e.kind, e.service, e.slot, e.host, e.task, e.message)
                    for i, e in snapshot.events
                ),
            )


class SQLiteWriter:
    """The writer lock of a state directory (its flock) and the store it guards."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = StateLock(directory)

    def acquire(self) -> None:
        self._lock.acquire()  # Locked is a WriterBusy

    def store(self) -> SQLiteStore:
        return SQLiteStore.open(self.directory)

    def release(self) -> None:
        self._lock.release()


def has_state(directory: Path) -> bool:
    """Whether anything was ever stored in `directory` (its database exists)."""
    return (directory / DB_NAME).exists()


def prepare(directory: Path) -> None:
    """Create the state directory (0700) for a writer; a path that is a file is refused."""
    ensure_state_dir(directory)
