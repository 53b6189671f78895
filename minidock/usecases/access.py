"""How the use cases reach the state store and the spec files: where the state is, the
one-writer lock and its patience policy, read-only opens, and the desired state, with the
store's refusals as typed ones (BadInput, Busy, Deposed, StoreDown)."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from minidock import store as stores
from minidock.core import ControllerState
from minidock.core.departures import effective_inventory, refusal
from minidock.model import Cluster, Inventory
from minidock.spec import SpecError, load, load_inventory
from minidock.store import StateLocation, Store
from minidock.units import format_duration
from minidock.usecases.outcomes import BadInput, Busy, Deposed, StoreDown
from minidock.usecases.runtime import Clock, unheard

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


def state_location(explicit: str | None) -> StateLocation:
    """Where the state is: --state, else $MINIDOCK_STATE, else .minidock/ (a directory or an
    etcd URL); a bad etcd URL is `BadInput`."""
    with translated():
        return stores.state_location(explicit)


@asynccontextmanager
async def writing(
    location: StateLocation,
    clock: Clock,
    writer: Writer,
    notice: Callable[[str], None] = unheard,
) -> AsyncIterator[stores.PortableStore]:
    """The one-writer section: the lock (waiting as `writer` may, having told `notice`
    once why), then the store it guards. A writer that loses the lock mid-way (etcd: its
    lease) is `Deposed`, committing nothing."""
    with translated():
        stores.prepare(location)
        lock = stores.writer_lock(location)
        try:
            deadline = clock.monotonic() + patience(writer)
            told = False
            while True:
                try:
                    lock.acquire()
                    break
                except stores.WriterBusy as exc:
                    if clock.monotonic() >= deadline:
                        raise Busy(str(exc)) from None
                    if not told:
                        wait = format_duration(patience(writer))
                        notice(f"waiting up to {wait} for the lock: {exc}")
                        told = True
                await clock.sleep(LOCK_RETRY)
            guarded = lock.store()
            try:
                yield guarded
            finally:
                guarded.close()
        finally:
            lock.release()


@contextmanager
def reading(location: StateLocation) -> Iterator[stores.PortableStore]:
    """The store, without the lock: readers see the last committed state."""
    with translated():
        opened = stores.open_reader(location)
        try:
            yield opened
        finally:
            opened.close()


def has_state(location: StateLocation) -> bool:
    """Whether anything was ever stored at `location` (creating nothing)."""
    with translated():
        return stores.has_state(location)


def controller_id(location: StateLocation) -> str:
    """The location's controller id, made on first use (minidock.store.controller_id)."""
    with translated():
        return stores.controller_id(location)


def existing_controller_id(location: StateLocation) -> str | None:
    """The location's controller id if one was made, creating nothing."""
    with translated():
        return stores.existing_controller_id(location)


def further_clusters(location: StateLocation) -> list[str]:
    """The clusters a store keeps beside its own (minidock.store.further_clusters)."""
    with translated():
        return stores.further_clusters(location)


def require_applied(location: StateLocation) -> None:
    """Refuse (creating nothing) when no apply ever stored a generation at `location`."""
    if not has_state(location):
        raise BadInput(_nothing_applied(location))


@contextmanager
def translated() -> Iterator[None]:
    """The store's refusals as the use cases' (one line and an exit code each)."""
    try:
        yield
    except stores.LeaseLost as exc:
        raise Deposed(str(exc)) from None
    except stores.WriterBusy as exc:
        raise Busy(str(exc)) from None
    except stores.StoreUnusable as exc:
        raise BadInput(str(exc)) from None
    except stores.StoreError as exc:  # StoreUnavailable, or a refusal etcd gave
        raise StoreDown(str(exc)) from None


class Inventories:
    """The inventory files a long-lived controller (`watch`) has read, by path and content:
    each pass reads the file afresh, and parses and validates it again only when its bytes
    changed (at 1,000 hosts that is 0.4-0.6 s a pass saved, most of what a pass between
    resyncs costs). The result depends on nothing but the path and the bytes."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[str, Inventory]] = {}

    def load(self, path: str) -> Inventory:
        try:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            return load_inventory(path)  # its own clear error
        seen = self._read.get(path)
        if seen is not None and seen[0] == digest:
            return seen[1]
        inventory = load_inventory(path)
        self._read[path] = (digest, inventory)
        return inventory


def read_desired(
    store: Store, location: StateLocation, inventories: Inventories | None = None
) -> Desired:
    """The latest applied generation and its inventory, the inventory read afresh from disk
    (through `inventories`, which parses it again only when it changed)."""
    latest = store.latest_generation()
    if latest is None:
        raise BadInput(_nothing_applied(location))
    _, cluster = latest
    try:
        path = cluster.inventory_path
        read = load_inventory(path) if inventories is None else inventories.load(path)
        return Desired(cluster, read)
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


def load_spec(path: Path, inventory: Path | None = None) -> Desired:
    """A cluster file and its inventory (the one it names, else `inventory`, ...:
    spec.cluster.inventory_of), validated."""
    try:
        return Desired(*load(path, inventory))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def _nothing_applied(location: StateLocation) -> str:
    return f"nothing applied yet in {location}: run `minidock apply FILE` first"
