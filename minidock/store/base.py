"""What every state store is, whatever keeps it: the `Store` and `WriterLock` protocols,
the records a migration copies, and the errors the use cases turn into exit codes.

Two backends implement them: the embedded SQLite store (`minidock.store.sqlite`, its
directory and lock in `minidock.store.directory`) and the etcd v3 store
(`minidock.store.etcd`), with the same semantics: desired-state generations whose ids only
grow, one controller state, an event log whose ids only grow, and one writer at a time.
See docs/state.md and docs/ha.md. This module imports neither backend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

from minidock.core import ControllerState
from minidock.model import Cluster, Event

if TYPE_CHECKING:
    from minidock.store.codec import Codec

__all__ = [
    "GenerationRecord",
    "LeaseLost",
    "Member",
    "PortableStore",
    "Roster",
    "Snapshot",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoreUnusable",
    "WriterBusy",
    "WriterLock",
]


class StoreError(Exception):
    """Anything a state store refuses or cannot do; one line, secrets never in it."""


class StoreUnusable(StoreError):
    """The store cannot be used as named: a path that is a file, a bad etcd URL, a schema
    written by a newer MiniDock, a closed store (the CLI exits 2)."""


class StoreUnavailable(StoreError):
    """The store does not answer now: no etcd endpoint answers, or the etcd cluster has
    no quorum. Said at once, never retried forever (the CLI exits 1)."""


class WriterBusy(StoreError):
    """Another writer holds the writer lock (the use cases may wait; exit 75 when they
    give up: cron skips this run)."""


class LeaseLost(StoreError):
    """This writer lost its lock while it held it (etcd: its lease expired or could not be
    renewed in time, e.g. the process was paused or cut off from etcd). It must commit
    nothing more and act no more: another controller may be acting (exit 75)."""


@dataclass(frozen=True)
class GenerationRecord:
    """One stored desired-state generation, as a migration copies it."""

    id: int
    applied_at: float
    source_path: str
    cluster: Cluster


@dataclass(frozen=True)
class Snapshot:
    """Everything a store holds, read at one point in time: what `state migrate` copies."""

    state: ControllerState
    generations: tuple[GenerationRecord, ...]
    events: tuple[tuple[int, Event], ...]

    @property
    def empty(self) -> bool:
        return not self.generations and not self.events and self.state == ControllerState()


@dataclass(frozen=True)
class Member:
    """One controller's member key: who it is, since when, its last round."""

    id: str
    holder: str  # "pid N on HOST"
    since: float
    last_pass: float | None = None  # when its last pass that held the lock ended
    pass_seconds: float | None = None  # how long that pass took
    passes: int = 0  # its passes that held the lock, since it started
    warm: int = 0  # hosts it holds a connection to (its own passes' or a standby's)
    hosts: int = 0  # of how many in its clusters' inventories
    cluster: str = ""  # the cluster its passes cover ("" for every cluster of the state)
    interval: float = 0.0  # its resync, seconds (core.deciding: when its silence is a stall)
    lease_left: float | None = None  # seconds left on its lease, as etcd says (reading only)
    owned: int = 0  # owner keys it holds: its share of the hosts (reading only)
    created: int = 0  # its key's create revision: its seniority (reading only)
    decides: tuple[str, ...] = ()  # the clusters whose passes it makes (reading only)
    # cluster -> the revision read before its last whole round of probes over its share
    # of that cluster's hosts (their observations written: minidock.store.seen)
    rounds: dict[str, int] = field(default_factory=dict)
    # cluster -> seconds its last whole round over its share took (the probes and the write)
    round_seconds: dict[str, float] = field(default_factory=dict)
    borrowed: int = 0  # hosts its last pass took its owners' observations of, unprobed
    ordered: int = 0  # task verbs its passes handed to the hosts' owners, since it started
    carried: int = 0  # task verbs it carried out on its share for a decider, since started

    def value(self) -> bytes:
        reading_only = ("id", "lease_left", "owned", "created", "decides")
        record = {k: v for k, v in asdict(self).items() if k not in reading_only}
        return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Roster:
    """The controllers of a state as read now: the members, the lock's holder (a pass
    under way) and who committed last."""

    members: tuple[Member, ...]
    writer: str = ""  # the holder of the writer lock now ("" when no pass is under way)
    last_commit: str = ""  # "pid N on HOST" of the last commit


class Store(Protocol):
    """Desired-state generations, the controller's state and the event log.

    A writer uses the store its `WriterLock` gave it for a whole read-decide-act-commit
    pass; readers (status, events, plan) open one without the lock and see the last
    committed state.
    """

    def load(self) -> ControllerState:
        """The last committed ControllerState, or an empty one if nothing was committed."""
        ...

    def cluster(self) -> str:
        """`load().cluster`, the name of the cluster the state is of ("" before the first
        pass), read without the hosts and slots."""
        ...

    def latest_generation(self) -> tuple[int, Cluster] | None:
        """The newest desired-state generation and its id, or None before the first apply."""
        ...

    def generation(self, gen_id: int) -> Cluster | None:
        """The desired state stored as generation `gen_id`, or None if there is none."""
        ...

    def next_generation_id(self) -> int:
        """The id the next `commit(..., generation=...)` will store (ids only grow)."""
        ...

    def events(self, limit: int = 100, since_id: int = 0) -> list[tuple[int, Event]]:
        """Events as (id, Event), oldest first: since_id 0, the newest `limit`; since_id > 0,
        the first `limit` after that id. limit <= 0: no limit."""
        ...

    def commit(
        self,
        state: ControllerState,
        events: Sequence[Event] = (),
        generation: Cluster | None = None,
        source_path: str = "",
    ) -> int | None:
        """State, events and (if given) the next generation, all or nothing; the new
        generation's id. `state.generation` must already name that id (ValueError)."""
        ...

    def keyed(self, cluster: Cluster) -> Cluster:
        """`cluster` with each service's secret digest made under this store's key
        (`model.Service.keyed`): what `apply` stores and `plan` compares."""
        ...

    def fence(self) -> None:
        """Raise `LeaseLost` unless this store's writer still holds the lock: called before
        every act on a host, so a deposed controller stops acting."""
        ...

    def close(self) -> None:
        """Let the store go (idempotent)."""
        ...


class PortableStore(Store, Protocol):
    """A store that can be copied whole: what `state migrate` reads and writes, and
    `state backup` writes out with its own codec (secret values stay sealed)."""

    @property
    def codec(self) -> Codec:
        """Its JSON round-trips, secret values sealed by its key."""
        ...

    def snapshot(self) -> Snapshot:
        """Everything the store holds, read at one point in time."""
        ...

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything with `snapshot`, ids kept (a writer's store only)."""
        ...


class WriterLock(Protocol):
    """The one-writer lock of a state store, and the store whose commits it guards."""

    def acquire(self) -> None:
        """Take the lock now or raise `WriterBusy`; never waits."""
        ...

    def store(self) -> PortableStore:
        """The store for the holder's pass (after `acquire`); the caller closes it."""
        ...

    def release(self) -> None:
        """Let the lock go (idempotent; also after a failed `acquire`)."""
        ...
