"""The state store: one interface (`Store`, `WriterLock`), two backends.

A directory is the embedded SQLite store (minidock.store.sqlite, the default); an
`etcd://host:2379[,host:2379]/prefix` URL is the etcd v3 store that several controllers
share, one acting at a time (minidock.store.etcd). Both keep the same things with the same
semantics: generations, the controller's state, the event log, one writer.

`backend(location)` is the one place that looks at the location's type; it gives a
`Backend`, and the functions here each ask it. The etcd backend (and its client library)
is imported only for an etcd location, so the SQLite path never loads it. See
docs/state.md and docs/ha.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from minidock.store.base import (
    GenerationRecord,
    LeaseLost,
    Member,
    PortableStore,
    Roster,
    Snapshot,
    Store,
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    WriterBusy,
    WriterLock,
)
from minidock.store.location import CLUSTERS, SCHEMES, EtcdURL, StateLocation, parse_etcd_url

__all__ = [
    "CLUSTERS",
    "Backend",
    "GenerationRecord",
    "LeaseLost",
    "Member",
    "PortableStore",
    "Roster",
    "Snapshot",
    "StateLocation",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoreUnusable",
    "WriterBusy",
    "WriterLock",
    "backend",
    "cluster_location",
    "controller_id",
    "existing_controller_id",
    "further_clusters",
    "has_state",
    "open_reader",
    "parse_location",
    "prepare",
    "state_location",
    "writer_lock",
]

ENV_STATE = "MINIDOCK_STATE"


class Backend(Protocol):
    """One state location and what can be done with it, whatever keeps it: the SQLite
    backend (minidock.store.sqlite) for a directory, the etcd one (minidock.store.etcd)."""

    @property
    def location(self) -> StateLocation:
        """Where the state is."""
        ...

    def open_reader(self) -> PortableStore:
        """The store without the lock: readers see the last committed state."""
        ...

    def writer_lock(self) -> WriterLock:
        """The location's one-writer lock (not yet taken)."""
        ...

    def has_state(self) -> bool:
        """Whether anything was ever stored there (reading it creates nothing)."""
        ...

    def controller_id(self, given: str | None = None) -> str:
        """The location's controller id (made once, random, or `given` when none was made
        yet: a restored state keeps its id), labelled on every task."""
        ...

    def existing_controller_id(self) -> str | None:
        """The controller id if one was ever made there, else None, creating nothing (a
        command that may still refuse looks with this); an unusable location is refused."""
        ...

    def prepare(self) -> None:
        """Make the location ready for a writer (a state directory is created, 0700)."""
        ...

    def cluster_location(self, name: str) -> StateLocation:
        """Where the store keeps a cluster other than its own (the first applied):
        DIR/clusters/NAME, or PREFIX/clusters/NAME, a whole store of its own."""
        ...

    def further_clusters(self) -> list[str]:
        """The names of the clusters the store keeps beside its own, each with a state."""
        ...


def backend(location: StateLocation) -> Backend:
    """The backend of a location: the one place that looks at what kind it is. The etcd
    backend (and its client library) is imported only for an etcd location."""
    if isinstance(location, EtcdURL):
        with _needs_etcd():
            from minidock.store.etcd import EtcdBackend
        return EtcdBackend(location)
    from minidock.store.sqlite import SQLiteBackend

    return SQLiteBackend(location)


def state_location(explicit: str | None) -> StateLocation:
    """--state, else $MINIDOCK_STATE, else .minidock/ in the working directory
    (minidock.store.directory.state_dir); an etcd URL in either is an etcd store."""
    named = explicit or os.environ.get(ENV_STATE)
    if named and named.startswith(SCHEMES):
        return parse_etcd_url(named)
    from minidock.store.directory import state_dir

    return state_dir(explicit)


def parse_location(text: str) -> StateLocation:
    """A location given in full (`state migrate --to`): a directory or an etcd URL."""
    if text.startswith(SCHEMES):
        return parse_etcd_url(text)
    return Path(text).expanduser().absolute()


def cluster_location(root: StateLocation, name: str) -> StateLocation:
    """`Backend.cluster_location` of `root`."""
    return backend(root).cluster_location(name)


def further_clusters(root: StateLocation) -> list[str]:
    """`Backend.further_clusters` of `root`."""
    return backend(root).further_clusters()


def open_reader(location: StateLocation) -> PortableStore:
    """`Backend.open_reader` of `location`."""
    return backend(location).open_reader()


def writer_lock(location: StateLocation) -> WriterLock:
    """`Backend.writer_lock` of `location`."""
    return backend(location).writer_lock()


def has_state(location: StateLocation) -> bool:
    """`Backend.has_state` of `location`."""
    return backend(location).has_state()


def controller_id(location: StateLocation, given: str | None = None) -> str:
    """`Backend.controller_id` of `location`."""
    return backend(location).controller_id(given)


def existing_controller_id(location: StateLocation) -> str | None:
    """`Backend.existing_controller_id` of `location`."""
    return backend(location).existing_controller_id()


def prepare(location: StateLocation) -> None:
    """`Backend.prepare` of `location`."""
    backend(location).prepare()


@contextmanager
def _needs_etcd() -> Iterator[None]:
    """Around the first import of minidock.store.etcd (it loads grpc and aetcd)."""
    try:
        yield
    except ImportError as exc:
        raise StoreUnusable(
            f"an etcd state store needs the etcd client ({exc.name} is missing): install "
            "MiniDock's wheel with its etcd extra, e.g. pipx install --force "
            "'minidock-VERSION-py3-none-any.whl[etcd]' (docs/ha.md)"
        ) from None
