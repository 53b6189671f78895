"""One read-only look at the whole fleet, for `minidock metrics` and `minidock serve`: per
cluster the status document (the stored state, a fresh observation, the plan a pass would
make), the pass statistics, whether a writer holds the lock, and each ingress proxy's
request metrics (read here, where they are shown, not by the passes: Caddy keeps the
counters, so a read is as fresh as the scrape and a pass carries nothing). Takes no lock, changes
nothing. A store that does not answer, or a cluster that cannot be read, is carried as an
error, never as an empty fleet."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minidock.act.ingress import read_traffic
from minidock.commands.caddy import ProxyTraffic
from minidock.core.passes import PassStats
from minidock.core.routes import ingress_hosts
from minidock.documents.status import StatusDocument
from minidock.runner import decide_pass
from minidock.ssh import Executor
from minidock.store import Member, StateLocation, StoreError
from minidock.store.directory import LOCK_NAME
from minidock.usecases.access import read_desired, reading, require_applied
from minidock.usecases.clusters import Held, chosen
from minidock.usecases.outcomes import UseCaseError
from minidock.usecases.reads import status_of
from minidock.usecases.runtime import Runtime, connected

__all__ = ["ClusterReading", "FleetReading", "LockState", "read_fleet", "status_json"]

PROC_LOCKS = Path("/proc/locks")


@dataclass(frozen=True)
class LockState:
    """The writer lock now: `held` None when this store cannot tell without taking it
    (etcd); `since` when the holder took it (epoch seconds), if known."""

    held: bool | None
    since: float | None = None


@dataclass(frozen=True)
class ClusterReading:
    """One cluster as read now: its status document, or the one line why it could not be
    read (`document` None); each ingress proxy's request metrics (`traffic`)."""

    name: str
    document: StatusDocument | None
    passes: PassStats = field(default_factory=PassStats)
    lock: LockState = LockState(None)
    error: str = ""
    traffic: tuple[ProxyTraffic, ...] = ()


@dataclass(frozen=True)
class FleetReading:
    """Every cluster of a store, read at `at` (epoch seconds); `error`: the store itself
    could not be read (nothing applied, etcd without quorum), so no cluster is known."""

    at: float
    clusters: tuple[ClusterReading, ...] = ()
    error: str = ""
    controllers: tuple[Member, ...] = ()  # an etcd store's member keys (minidock.store.members)

    @property
    def documents(self) -> tuple[StatusDocument, ...]:
        return tuple(c.document for c in self.clusters if c.document is not None)

    @property
    def errors(self) -> tuple[str, ...]:
        """Every reason something could not be read, one line each."""
        own = (self.error,) if self.error else ()
        return own + tuple(f"cluster {c.name}: {c.error}" for c in self.clusters if c.error)


def status_json(documents: tuple[StatusDocument, ...]) -> dict[str, Any]:
    """What `status --json` prints: one cluster's document, or {"clusters": [...]}."""
    if len(documents) == 1:
        return documents[0].to_json()
    return {"clusters": [d.to_json() for d in documents]}


async def read_fleet(
    directory: StateLocation,
    runtime: Runtime,
    *,
    cluster: str | None = None,
    executor: Executor | None = None,
) -> FleetReading:
    """Every cluster of the store (or `cluster`), observed once on `executor` (else on one
    of its own, closed afterwards). Refusals become the reading's errors."""
    if executor is None:
        async with connected(runtime) as own:
            return await read_fleet(directory, runtime, cluster=cluster, executor=own)
    at = runtime.clock.now()
    try:
        require_applied(directory)
        targets = chosen(directory, cluster)
    except UseCaseError as exc:
        return FleetReading(at, error=str(exc))
    readings = [await _read_cluster(h, executor, runtime) for h in targets]
    return FleetReading(at, tuple(readings), controllers=members(directory))


def members(location: StateLocation) -> tuple[Member, ...]:
    """An etcd store's running `watch` controllers (none for a directory, or when etcd
    does not answer now: the clusters' readings say so)."""
    if isinstance(location, Path):
        return ()
    from minidock.store.members import read_roster  # the etcd client: etcd stores only

    try:
        return read_roster(location).members
    except StoreError:
        return ()


async def _read_cluster(h: Held, executor: Executor, runtime: Runtime) -> ClusterReading:
    """As `status` reads a cluster: the store stays open while the hosts are observed,
    for the masker that every stored generation in use makes (minidock.masking)."""
    try:
        with reading(h.location) as store:
            current = store.load()
            desired = read_desired(store, h.location)
            edges = ingress_hosts(desired.cluster, desired.inventory)
            routed = any(s.ingress for s in desired.cluster.services)
            hosts = [x for x in desired.inventory.hosts if x.name in edges] if routed else []
            ingress = desired.cluster.ingress
            counted = ingress is None or ingress.request_metrics
            result, traffic = await asyncio.gather(
                decide_pass(
                    desired.cluster, desired.inventory, current, executor, clock=runtime.clock.now
                ),
                read_traffic(executor, hosts, desired.cluster.name, counted),
            )
            plan = runtime.masks.of(store, result.plan.state, result.observed).plan(result.plan)
    except UseCaseError as exc:
        return ClusterReading(h.name, None, lock=lock_state(h.location), error=str(exc))
    document = status_of(current, desired, result, plan)  # as `status` reads it
    return ClusterReading(h.name, document, current.passes, lock_state(h.location), traffic=traffic)


def lock_state(location: StateLocation) -> LockState:
    """Whether a writer holds the lock of a state directory, read from the kernel's table
    of file locks (/proc/locks) without touching the lock; etcd stores: unknown."""
    if not isinstance(location, Path):
        return LockState(None)
    path = location / LOCK_NAME
    try:
        st = path.stat()
    except FileNotFoundError:
        return LockState(False)  # no writer ever took it
    except OSError:
        return LockState(None)
    try:
        table = PROC_LOCKS.read_text()
    except OSError:  # not Linux: no way to tell without taking it
        return LockState(None)
    held = flock_held(table, os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    return LockState(held, st.st_mtime if held else None)


def flock_held(table: str, major: int, minor: int, inode: int) -> bool:
    """Whether /proc/locks text `table` has a granted flock on the file (device, inode):
    lines like `1: FLOCK  ADVISORY  WRITE 4242 00:2f:1234 0 EOF` (waiters have `->`)."""
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        dev_major, dev_minor, ino = ([*fields[5].split(":"), "", "", ""])[:3]
        try:
            same = (int(dev_major, 16), int(dev_minor, 16), int(ino)) == (major, minor, inode)
        except ValueError:
            continue
        if same:
            return True
    return False
