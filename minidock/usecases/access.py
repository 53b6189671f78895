"""How the use cases reach the state directory and the spec files: the one-writer lock and
its patience policy, read-only opens, and the desired state, with typed refusals."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from minidock.core import ControllerState
from minidock.core.departures import effective_inventory, refusal
from minidock.model import Cluster, Inventory
from minidock.spec import SpecError, load, load_inventory
from minidock.state import DB_NAME, Locked, StateError, StateLock, Store, ensure_state_dir
from minidock.usecases.outcomes import BadInput, Busy
from minidock.usecases.runtime import Clock

OPERATOR_PATIENCE = 30.0  # seconds an operator's command waits for another writer's pass
LOCK_RETRY = 0.2  # seconds between attempts while waiting


class Writer(enum.Enum):
    """Who takes the lock, which decides how long they wait for it."""

    OPERATOR = "operator"  # apply, drain, activate, rollback, reset: up to OPERATOR_PATIENCE
    SCHEDULED = "scheduled"  # cron's reconcile, watch's passes: never; the next run tries


def patience(writer: Writer) -> float:
    """Seconds `writer` waits for a taken lock before giving up (exit 75)."""
    return OPERATOR_PATIENCE if writer is Writer.OPERATOR else 0.0


@dataclass(frozen=True)
class Desired:
    """A cluster spec and its inventory, as one pass needs them."""

    cluster: Cluster
    inventory: Inventory


@asynccontextmanager
async def writing(directory: Path, clock: Clock, writer: Writer) -> AsyncIterator[Store]:
    """The one-writer section: the lock (waiting as `writer` may), then the store."""
    try:
        ensure_state_dir(directory)
    except StateError as exc:
        raise BadInput(str(exc)) from None
    lock = StateLock(directory)
    deadline = clock.monotonic() + patience(writer)
    while True:
        try:
            lock.acquire()
            break
        except Locked as exc:
            if clock.monotonic() >= deadline:
                raise Busy(str(exc)) from None
        await clock.sleep(LOCK_RETRY)
    try:
        with reading(directory) as store:
            yield store
    finally:
        lock.release()


@contextmanager
def reading(directory: Path) -> Iterator[Store]:
    """The store, without the lock: readers see the last committed state."""
    try:
        store = Store.open(directory)
    except StateError as exc:
        raise BadInput(str(exc)) from None
    with store:
        yield store


def require_applied(directory: Path) -> None:
    """Refuse (creating nothing) when no apply ever stored a generation in `directory`."""
    if not (directory / DB_NAME).exists():
        raise BadInput(_nothing_applied(directory))


def read_desired(store: Store, directory: Path) -> Desired:
    """The latest applied generation and its inventory, the inventory read afresh from disk."""
    latest = store.latest_generation()
    if latest is None:
        raise BadInput(_nothing_applied(directory))
    _, cluster = latest
    try:
        return Desired(cluster, load_inventory(cluster.inventory_path))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def admissible(state: ControllerState, desired: Desired) -> Desired:
    """Refuse (BadInput, exit 2) an inventory that dropped a host still carrying tasks
    that were not drained off it; else the desired state a pass works on, with drained
    departing hosts kept by their last known details until they are empty."""
    why = refusal(state, desired.inventory)
    if why:
        raise BadInput(why)
    return replace(desired, inventory=effective_inventory(state, desired.inventory))


def load_spec(path: Path) -> Desired:
    """A cluster file and the inventory it names, validated."""
    try:
        return Desired(*load(path))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def _nothing_applied(directory: Path) -> str:
    return f"nothing applied yet in {directory}: run `minidock apply FILE` first"
