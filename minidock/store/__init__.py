"""The state store: one interface (`Store`, `WriterLock`), two backends.

A directory is the embedded SQLite store (minidock.state, the default); an
`etcd://host:2379[,host:2379]/prefix` URL is the etcd v3 store that several controllers
share, one acting at a time (minidock.store.etcd). Both keep the same things with the same
semantics: generations, the controller's state, the event log, one writer.

The functions here pick the backend by the location's type. The etcd backend (and its
client library) is imported only for an etcd location, so the SQLite path never loads it;
the SQLite adapter is imported when first used, since minidock.state imports
minidock.store.base. See docs/state.md and docs/ha.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from minidock.store.base import (
    GenerationRecord,
    LeaseLost,
    PortableStore,
    Snapshot,
    Store,
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    WriterBusy,
    WriterLock,
)
from minidock.store.location import SCHEMES, EtcdURL, parse_etcd_url

__all__ = [
    "GenerationRecord",
    "LeaseLost",
    "PortableStore",
    "Snapshot",
    "StateLocation",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoreUnusable",
    "WriterBusy",
    "WriterLock",
    "cluster_location",
    "controller_id",
    "further_clusters",
    "has_state",
    "open_reader",
    "parse_location",
    "prepare",
    "state_location",
    "writer_lock",
]

StateLocation = Path | EtcdURL
ENV_STATE = "MINIDOCK_STATE"


def state_location(explicit: str | None) -> StateLocation:
    """--state, else $MINIDOCK_STATE, else .minidock/ in the working directory
    (minidock.state.state_dir); an etcd URL in either is an etcd store."""
    named = explicit or os.environ.get(ENV_STATE)
    if named and named.startswith(SCHEMES):
        return parse_etcd_url(named)
    from minidock.state import state_dir

    return state_dir(explicit)


CLUSTERS = "clusters"  # under a store: one sub-store per further cluster it holds


def cluster_location(root: StateLocation, name: str) -> StateLocation:
    """Where a store keeps a cluster other than the one it holds itself (the first
    applied): DIR/clusters/NAME, or PREFIX/clusters/NAME, a whole store of its own."""
    if isinstance(root, EtcdURL):
        return replace(root, prefix=f"{root.prefix.rstrip('/')}/{CLUSTERS}/{name}")
    return root / CLUSTERS / name


def further_clusters(root: StateLocation) -> list[str]:
    """The names of the clusters a store keeps beside its own, each with a state."""
    if isinstance(root, EtcdURL):
        with _needs_etcd():
            from minidock.store import etcd
        return etcd.further_clusters(root, CLUSTERS)
    from minidock.store import sqlite

    below = root / CLUSTERS
    if not below.is_dir():
        return []
    return sorted(p.name for p in below.iterdir() if sqlite.has_state(p))


def parse_location(text: str) -> StateLocation:
    """A location given in full (`state migrate --to`): a directory or an etcd URL."""
    if text.startswith(SCHEMES):
        return parse_etcd_url(text)
    return Path(text).expanduser().absolute()


def open_reader(location: StateLocation) -> PortableStore:
    """The store without the lock: readers see the last committed state."""
    if isinstance(location, EtcdURL):
        with _needs_etcd():
            from minidock.store.etcd import EtcdStore
        return EtcdStore.open(location)
    from minidock.store.sqlite import SQLiteStore

    return SQLiteStore.open(location)


def writer_lock(location: StateLocation) -> WriterLock:
    """The location's one-writer lock (not yet taken)."""
    if isinstance(location, EtcdURL):
        with _needs_etcd():
            from minidock.store.etcd import EtcdWriter
        return EtcdWriter(location)
    from minidock.store.sqlite import SQLiteWriter

    return SQLiteWriter(location)


def has_state(location: StateLocation) -> bool:
    """Whether anything was ever stored there (reading it creates nothing)."""
    if isinstance(location, EtcdURL):
        with _needs_etcd():
            from minidock.store import etcd
        return etcd.has_state(location)
    from minidock.store import sqlite

    return sqlite.has_state(location)


def controller_id(location: StateLocation) -> str:
    """The location's controller id (made once, random), labelled on every task it starts."""
    if isinstance(location, EtcdURL):
        with _needs_etcd():
            from minidock.store import etcd
        return etcd.controller_id(location)
    from minidock.state import controller_id as directory_id

    return directory_id(location)


def prepare(location: StateLocation) -> None:
    """Make the location ready for a writer: a state directory is created (0700)."""
    if isinstance(location, Path):
        from minidock.store import sqlite

        sqlite.prepare(location)


@contextmanager
def _needs_etcd() -> Iterator[None]:
    """Around the first import of minidock.store.etcd (it loads grpc and aetcd)."""
    try:
        yield
    except ImportError as exc:
        raise StoreUnusable(
            f"an etcd state store needs the etcd client ({exc.name} is missing): "
            "pip install 'minidock[etcd]'"
        ) from None
