"""The controller's own backup: `minidock state backup FILE` and `minidock state restore FILE`.

A backup file is one JSON document (mode 0600, written atomically) holding every cluster a
store keeps, each read at one point in time (`PortableStore.snapshot`: one SQLite read
transaction, one etcd revision), so it is consistent while a pass runs and takes no writer
lock. Secret values stay sealed as the store seals them (the store's `Codec`); the key file
is never in it: the file names the key's id, and a restore refuses a store whose key is
another, before it writes anything. The store's controller id travels with it, so the
restored controller owns the fleet's tasks at once (no `--adopt`). docs/operations.md
"The controller's own backup" says what to keep beside it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minidock import __version__
from minidock import store as stores
from minidock.core import ControllerState
from minidock.model import Cluster, Event
from minidock.store import GenerationRecord, Snapshot, StateLocation
from minidock.store.codec import Codec
from minidock.store.directory import ensure_state_dir
from minidock.store.sealing import KEY_ENV, KEY_NAME, KeyProblem, key_box
from minidock.usecases.access import (
    Writer,
    existing_controller_id,
    has_state,
    reading,
    writing,
)
from minidock.usecases.clusters import held
from minidock.usecases.outcomes import BadInput, StoreDown
from minidock.usecases.runtime import Clock

__all__ = ["FORMAT", "StateBackupOutcome", "backup_state", "restore_state"]

FORMAT = "minidock-state-backup/1"


@dataclass(frozen=True)
class StateBackupOutcome:
    """A state written to (backup) or read from (restore) `file`."""

    file: Path
    location: StateLocation
    clusters: tuple[str, ...]
    generations: int
    events: int
    key_id: str
    controller: str


def backup_state(
    location: StateLocation, file: Path, now: float | None = None
) -> StateBackupOutcome:
    """Write every cluster the store at `location` holds into `file` (0600, atomically)."""
    if not has_state(location):
        raise BadInput(f"nothing to back up: no state in {location}")
    clusters: list[dict[str, Any]] = []
    key_id = ""
    for h in held(location):
        with reading(h.location) as store:
            snapshot = store.snapshot()
            codec = store.codec
        key_id = key_id or (codec.box.key_id if codec.box is not None else "")
        clusters.append({"name": h.name, **_to_doc(codec, snapshot)})
    doc = {
        "format": FORMAT,
        "minidock": __version__,
        "created": time.time() if now is None else now,
        "key_id": key_id,
        "controller": existing_controller_id(location) or "",
        "clusters": clusters,
    }
    _write_private(file, json.dumps(doc, sort_keys=True, indent=1))
    return _outcome(file, location, doc)


async def restore_state(
    file: Path,
    location: StateLocation,
    clock: Clock,
    *,
    key_file: Path | None = None,
    force: bool = False,
) -> StateBackupOutcome:
    """Put the state in `file` back at `location` (a new controller's store), each cluster
    where it was, holding each store's writer lock; read back to check. A location that
    holds a state is refused unless `force`; a key file that is not the backup's is refused
    before anything is written. `key_file`: the old controller's key, copied (0600) into a
    state directory that has none."""
    doc = _read_doc(file)
    if has_state(location) and not force:
        raise BadInput(f"{location} already holds a state: add --force to replace it")
    if key_file is not None:
        _place_key(location, key_file)
    _check_key(location, doc["key_id"])
    if doc["controller"]:
        taken = stores.controller_id(location, doc["controller"])
        if taken != doc["controller"] and not force:
            raise BadInput(
                f"{location} has controller id {taken}, the backup {doc['controller']}: "
                "restore into a new state location (or add --force to keep this id and "
                "adopt the tasks with `apply --adopt`)"
            )
    for i, cluster in enumerate(doc["clusters"]):
        there = location if i == 0 else stores.cluster_location(location, cluster["name"])
        async with writing(there, clock, Writer.OPERATOR) as store:
            snapshot = _from_doc(store.codec, cluster)
            store.restore(snapshot)
            if store.snapshot() != snapshot:
                raise StoreDown(f"the state restored in {there} differs from {file}: restore again")
    return _outcome(file, location, doc)


def _to_doc(codec: Codec, snapshot: Snapshot) -> dict[str, Any]:
    return {
        "state": codec.to_data(snapshot.state),
        "generations": [
            {
                "id": g.id,
                "applied_at": g.applied_at,
                "source_path": g.source_path,
                "cluster": codec.to_data(g.cluster),
            }
            for g in snapshot.generations
        ],
        "events": [{"id": i, "event": codec.to_data(e)} for i, e in snapshot.events],
    }


def _from_doc(codec: Codec, doc: dict[str, Any]) -> Snapshot:
    return Snapshot(
        state=codec.from_data(doc["state"], ControllerState),
        generations=tuple(
            GenerationRecord(
                g["id"], g["applied_at"], g["source_path"], codec.from_data(g["cluster"], Cluster)
            )
            for g in doc["generations"]
        ),
        events=tuple((e["id"], codec.from_data(e["event"], Event)) for e in doc["events"]),
    )


def _read_doc(file: Path) -> dict[str, Any]:
    try:
        doc = json.loads(file.read_text())
    except FileNotFoundError:
        raise BadInput(f"{file}: no such file (a file `minidock state backup` wrote)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{file}: not a state backup ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInput(
            f"{file}: format is not {FORMAT}: a file `minidock state backup` wrote, by this "
            "version or an older one"
        )
    if not doc.get("clusters"):
        raise BadInput(f"{file}: the backup holds no cluster: nothing to restore")
    return doc


def _check_key(location: StateLocation, key_id: str) -> None:
    """Refuse, before anything is written, a store whose key file cannot open the backup's
    sealed values: a state directory's DIR/secrets.key, or $MINIDOCK_KEY_FILE for etcd."""
    if not key_id:
        return
    if isinstance(location, Path):
        path = location / KEY_NAME
        where = f"{path}"
    else:
        named = os.environ.get(KEY_ENV, "")
        path = Path(named).expanduser() if named else Path()
        where = f"${KEY_ENV} ({named or 'not set'})"
    if not path.name or not path.is_file():
        raise BadInput(
            f"the backup's secrets are sealed with key {key_id}: put that key file at {where} "
            "(mode 0600) before the restore; a new key cannot open them"
        )
    try:
        found = key_box(path, holds_sealed=lambda: True).key_id
    except KeyProblem as exc:
        raise BadInput(str(exc)) from None
    if found != key_id:
        raise BadInput(
            f"{where} is key {found}, the backup's secrets are sealed with key {key_id}: "
            "put the old controller's key file there"
        )


def _place_key(location: StateLocation, key_file: Path) -> None:
    """Copy `key_file` to DIR/secrets.key (0600), unless the same key is there already."""
    if not isinstance(location, Path):
        raise BadInput(
            f"--key-file is for a state directory; an etcd state reads ${KEY_ENV}: set it to "
            "the old controller's key file"
        )
    try:
        key = key_file.expanduser().read_bytes()
    except OSError as exc:
        raise BadInput(f"--key-file {key_file}: {exc.strerror or exc}") from None
    target = location / KEY_NAME
    if target.is_file():
        if target.read_bytes() != key:
            raise BadInput(
                f"{target} holds another key: restore into a new state location, or remove "
                "it if nothing was ever sealed with it"
            )
        return
    ensure_state_dir(location)
    _write_private(target, key.decode("ascii", errors="replace"))


def _write_private(file: Path, text: str) -> None:
    """`text` into `file`, mode 0600 from its creation, atomically (a temporary file in
    the same directory, fsynced, then renamed)."""
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise BadInput(f"cannot write {file}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)


def _outcome(file: Path, location: StateLocation, doc: dict[str, Any]) -> StateBackupOutcome:
    clusters = doc["clusters"]
    return StateBackupOutcome(
        file=file,
        location=location,
        clusters=tuple(c["name"] for c in clusters),
        generations=sum(len(c["generations"]) for c in clusters),
        events=sum(len(c["events"]) for c in clusters),
        key_id=doc["key_id"],
        controller=doc["controller"],
    )
