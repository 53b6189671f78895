"""`minidock backup SERVICE[.SLOT]` and `minidock backups [SERVICE]` (docs/backups.md).

A backup copies each named volume of each running task of the service (or of one slot)
into the restic repository of its `backup` (else the inventory's `[backup]`): the task's
`hooks.before_backup` first (`docker exec`, e.g. a database dump into the volume), then,
with `backup.stop`, the task stopped under the writer lock (no pass starts it again
meanwhile) and started again after; each volume streamed with `docker cp TASK:PATH -`
over SSH (minidock.volumecopy) straight into `restic backup --stdin` (minidock.restic),
tagged cluster, service, slot, volume and generation. After the copies, `keep` prunes each
slot's and volume's snapshots. A failed task is one line and exit 1; the others go on.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from minidock import restic, schedules
from minidock.commands.docker import exec_argv, grace_seconds, start_argv, stop_argv
from minidock.core.failover import snapshot_taken
from minidock.core.schedule import backup_due
from minidock.model import BackupPolicy, Container, Host, Inventory, Schedule, Service, Volume
from minidock.restic import Repository, ResticError
from minidock.spec import SpecError
from minidock.spec.backup import password_value
from minidock.ssh import CommandTimeout, Executor, Unreachable
from minidock.store import StateLocation
from minidock.units import approx_size
from minidock.usecases.access import (
    Desired,
    Writer,
    read_desired,
    reading,
    require_applied,
    writing,
)
from minidock.usecases.clusters import chosen
from minidock.usecases.outcomes import BadInput, ExitCode, UseCaseError
from minidock.usecases.runtime import Runtime, connected
from minidock.usecases.tasks import _cluster_of, _missed, _observe, _Seen, _target
from minidock.volumecopy import CopyError, stream_out

__all__ = [
    "BackupOutcome",
    "BackupSchedules",
    "BackupsOutcome",
    "OnBackupBytes",
    "VolumeBackup",
    "backup",
    "list_backups",
    "repository_of",
    "restorable",
    "run_scheduled",
    "streamed",
]

OnBackupBytes = Callable[[str, int], None]  # "db.1 pgdata", bytes streamed so far
_FAILURES = (CopyError, ResticError, Unreachable, CommandTimeout, UseCaseError)


@dataclass(frozen=True)
class VolumeBackup:
    """One volume of one task saved: its snapshot, bytes streamed and added, seconds."""

    task: str
    host: str
    slot: int
    volume: str
    snapshot: str
    size: int
    added: int
    seconds: float

    @property
    def rate(self) -> float:
        """Bytes a second through the controller."""
        return self.size / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """`db.1.x7 dbdata: snapshot 4f2a9c1e (48.0MiB in 2.1s, 22.9MiB/s, 48.1MiB added)`."""
        rate = f", {approx_size(int(self.rate))}/s" if self.rate else ""
        return (
            f"{self.task} {self.volume}: snapshot {self.snapshot} ({approx_size(self.size)} in "
            f"{self.seconds:.1f}s{rate}, {approx_size(self.added)} added) on {self.host}"
        )


def streamed(label: str, size: int) -> str:
    """A large volume's progress line: `db.1.x7 dbdata: 128.0MiB streamed`."""
    return f"{label}: {approx_size(size)} streamed"


@dataclass(frozen=True)
class BackupOutcome:
    service: str
    repository: str
    made: bool  # the repository was initialised by this backup
    saved: tuple[VolumeBackup, ...]
    forgotten: int  # snapshots `keep` removed afterwards
    failed: tuple[str, ...]  # one line per task that could not be backed up

    @property
    def exit_code(self) -> int:
        return ExitCode.FAILED if self.failed else ExitCode.OK


@dataclass(frozen=True)
class BackupsOutcome:
    repository: str
    snapshots: tuple[restic.Snapshot, ...]

    @property
    def exit_code(self) -> int:
        return ExitCode.OK


def repository_of(spec: Service, inventory: Inventory) -> tuple[BackupPolicy, Repository]:
    """The service's backup policy (its own, else the inventory's `[backup]`) and its
    repository, the password read now; BadInput when neither names one."""
    policy = spec.backup or inventory.backup
    if policy is None:
        raise BadInput(
            f"{spec.name} has no backup repository: give it backup = {{ repository = ..., "
            "password = { file = ... } }, or [backup] in the inventory"
        )
    try:
        return policy, Repository(policy.repository, password_value(policy))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


async def backup(
    target: str,
    directory: StateLocation,
    runtime: Runtime,
    on_bytes: OnBackupBytes,
    *,
    cluster: str | None = None,
) -> BackupOutcome:
    """Back up each named volume of the running tasks of SERVICE[.SLOT] (module doc)."""
    require_applied(directory)
    directory = _cluster_of(directory, cluster, target)
    async with connected(runtime) as executor:
        seen = await _observe(directory, runtime, executor)
        service, slot = _target(seen, target)
        spec, generation = _applied(directory, service)
        volumes = tuple(v for v in spec.volumes if v.named)
        if not volumes:
            raise BadInput(f"{service} has no named volume to back up")
        policy, repo = repository_of(spec, seen.inventory)
        tasks = [c for c in seen.tasks(service, slot) if c.state == "running"]
        if not tasks:
            raise UseCaseError(f"no running task of {target} on the reachable hosts{_missed(seen)}")
        job = _Job(executor, seen, spec, policy, repo, generation, volumes, on_bytes)
        try:
            made = await restic.ensure(repo)
        except ResticError as exc:
            raise UseCaseError(f"{policy.repository}: {exc}") from None
        saved: list[VolumeBackup] = []
        failed: list[str] = []
        taken: list[tuple[VolumeBackup, float]] = []  # each snapshot, and when its copy began
        for task in tasks:
            try:
                async with _stopped(job, task, directory, runtime):
                    for v in volumes:
                        began = runtime.clock.now()
                        saved.append(await job.volume(task, v))
                        taken.append((saved[-1], began))
            except _FAILURES as exc:
                failed.append(seen.mask(repo.mask(f"{task.name}: {exc}")))
        await _recorded(directory, runtime, service, taken)
        forgotten = await _prune(job, saved, failed)
    return BackupOutcome(service, policy.repository, made, tuple(saved), forgotten, tuple(failed))


async def _recorded(
    directory: StateLocation,
    runtime: Runtime,
    service: str,
    taken: Sequence[tuple[VolumeBackup, float]],
) -> None:
    """Each snapshot saved kept in its slot's record (core.failover.snapshot_taken): the
    recovery point status and metrics show, and what a failover restores."""
    if not taken:
        return
    async with writing(directory, runtime.clock, Writer.OPERATOR, runtime.notice) as store:
        state = store.load()
        for done, began in taken:
            state = snapshot_taken(state, service, done.slot, done.volume, done.snapshot, began)
        store.commit(state)


def _applied(directory: StateLocation, service: str) -> tuple[Service, int]:
    with reading(directory) as store:
        latest = store.latest_generation()
        assert latest is not None  # require_applied
        found = latest[1].service(service)
    assert found is not None  # _target knew it
    return found, latest[0]


@dataclass(frozen=True)
class _Job:
    """What each task's backup takes."""

    executor: Executor
    seen: _Seen
    spec: Service
    policy: BackupPolicy
    repo: Repository
    generation: int
    volumes: tuple[Volume, ...]
    on_bytes: OnBackupBytes

    def host(self, task: Container) -> Host:
        return self.seen.host(task.host)

    def tags(self, slot: int, volume: str) -> dict[str, str]:
        return {
            "cluster": self.seen.cluster,
            "service": self.spec.name,
            "slot": str(slot),
            "volume": volume,
            "generation": str(self.generation),
        }

    async def hook(self, task: Container) -> None:
        """The task's `hooks.before_backup`, if any, run in it; a failure raises."""
        hook = self.spec.before_backup
        if hook is None:
            return
        argv = exec_argv(task.id, hook.command)
        done = await self.executor.run(self.host(task), argv, timeout=hook.timeout)
        if done.exit_status != 0:
            said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise UseCaseError(f"before_backup hook exited {done.exit_status}: {said[:200]}")

    async def volume(self, task: Container, volume: Volume) -> VolumeBackup:
        label = f"{task.name} {volume.source}"

        async def feed(write: restic.Write) -> int:
            return await stream_out(
                self.executor,
                self.host(task),
                task.id,
                volume.target,
                write,
                on_bytes=lambda n: self.on_bytes(label, n),
            )

        tags, filename = self.tags(task.slot, volume.source), restic.stdin_name(volume.source)
        done = await restic.backup(self.repo, filename, tags, task.host, feed)
        return VolumeBackup(
            task.name,
            task.host,
            task.slot,
            volume.source,
            done.snapshot,
            done.size,
            done.added,
            done.seconds,
        )


@contextlib.asynccontextmanager
async def _stopped(
    job: _Job, task: Container, directory: StateLocation, runtime: Runtime
) -> AsyncIterator[None]:
    """The task ready to be copied: its hook run, and with `backup.stop` the task stopped
    (under the writer lock, so no pass starts or replaces it meanwhile) until the copies
    end, then started again."""
    await job.hook(task)
    if not job.policy.stop:
        yield
        return
    host = job.host(task)
    async with writing(directory, runtime.clock, Writer.OPERATOR, runtime.notice):
        stopped = await job.executor.run(host, stop_argv(task.id, grace_seconds(job.spec)))
        if stopped.exit_status != 0:
            raise UseCaseError(f"docker stop failed: {stopped.stderr.strip()[:200]}")
        try:
            yield
        finally:
            started = await job.executor.run(host, start_argv(task.id))
            if started.exit_status != 0:
                raise UseCaseError(f"docker start failed: {started.stderr.strip()[:200]}")


async def _prune(job: _Job, saved: Sequence[VolumeBackup], failed: list[str]) -> int:
    """`keep` applied to each slot's and volume's snapshots just saved; a failure is a
    line of `failed` (the snapshots are saved)."""
    removed = 0
    for slot, volume in sorted({(s.slot, s.volume) for s in saved}):
        tags = {k: v for k, v in job.tags(slot, volume).items() if k != "generation"}
        try:
            removed += len(await restic.forget(job.repo, job.policy.keep, tags))
        except ResticError as exc:
            failed.append(job.repo.mask(f"retention of {job.spec.name}.{slot} {volume}: {exc}"))
    return removed


async def list_backups(
    service: str | None, directory: StateLocation, *, cluster: str | None = None
) -> BackupsOutcome:
    """The snapshots of the cluster's services (or of one) in their repository, oldest
    first. Every service listed must back up into the same repository: the first named
    (by the service, else the inventory) is read."""
    require_applied(directory)
    directory = _cluster_of(directory, cluster, service) if service else directory
    with reading(directory) as store:
        desired = read_desired(store, directory)
    specs = desired.cluster.services
    if service is not None:
        specs = tuple(s for s in specs if s.name == service)
        if not specs:
            raise BadInput(f"unknown service {service!r}")
    backed = [s for s in specs if s.backup is not None or (s.pinned and desired.inventory.backup)]
    if not backed:
        raise BadInput(f"{service or desired.cluster.name} has no backup repository")
    policy, repo = repository_of(backed[0], desired.inventory)
    tags = {"cluster": desired.cluster.name} | ({"service": service} if service else {})
    try:
        found = await restic.snapshots(repo, tags)
    except ResticError as exc:
        raise UseCaseError(f"{policy.repository}: {exc}") from None
    return BackupsOutcome(policy.repository, tuple(found))


async def restorable(
    host: str, directory: StateLocation, *, cluster: str | None = None
) -> tuple[str, ...]:
    """For `forget HOST`: one line per volume of each pinned slot recorded on HOST, naming
    the latest snapshot that could restore it (and the command), or saying it has none.
    Read before the forget (which clears the records); nothing applied: no line."""
    try:
        targets = chosen(directory, cluster)
    except UseCaseError:
        return ()
    lines: list[str] = []
    for held in targets:
        with reading(held.location) as store:
            state = store.load()
            desired = read_desired(store, held.location)
        for spec in desired.cluster.services:
            ss = state.services.get(spec.name)
            numbers = sorted(n for n, r in ss.slots.items() if r.host == host) if ss else []
            if spec.pinned and numbers:
                lines += await _restorable_slots(
                    spec, numbers, desired.cluster.name, desired.inventory
                )
    return tuple(lines)


async def _restorable_slots(
    spec: Service, numbers: Sequence[int], cluster: str, inventory: Inventory
) -> list[str]:
    volumes = [v.source for v in spec.volumes if v.named]
    try:
        policy, repo = repository_of(spec, inventory)
        found = await restic.snapshots(repo, {"cluster": cluster, "service": spec.name})
    except BadInput:
        return [f"{spec.name}.{n}: no backup repository: its volumes are lost" for n in numbers]
    except ResticError as exc:
        return [f"{spec.name}: its backups could not be listed: {repo.mask(str(exc))}"]
    lines = []
    for n in numbers:
        for volume in volumes:
            mine = [s for s in found if s.tag("slot") == str(n) and s.tag("volume") == volume]
            if not mine:
                lines.append(
                    f"{spec.name}.{n} {volume}: no backup in {policy.repository}: it starts "
                    "afresh with an empty volume"
                )
                continue
            last = mine[-1]
            lines.append(
                f"{spec.name}.{n} {volume}: snapshot {last.short_id} of "
                f"{last.time[:19].replace('T', ' ')} UTC (from {last.hostname}) can restore "
                f"it, so it waits: minidock restore {spec.name}.{n} (or --empty to start it "
                "empty)"
            )
    return lines


# -- scheduled backups: run by `watch` after each round -------------------------------------
@dataclass
class BackupSchedules:
    """What one `watch` remembers of its services' backup schedules: the latest scheduled
    time handled, by (cluster, service). A service first seen counts its latest scheduled
    time as handled when its newest snapshot is at or after it (one restic listing), so a
    time missed while no watch ran is caught up once, and a restart runs nothing twice."""

    handled: dict[tuple[str, str], float]

    @classmethod
    def fresh(cls) -> BackupSchedules:
        return cls({})


async def run_scheduled(
    locations: Sequence[StateLocation],
    runtime: Runtime,
    memory: BackupSchedules,
    tell: Callable[[str], None],
) -> None:
    """Each service of `locations` whose `backup.schedule` has a time not yet handled is
    backed up now (every slot), then pruned by its `keep`; each outcome is one line to
    `tell`. A failure is a line: the next scheduled time tries again."""
    now = runtime.clock.now()
    for location in locations:
        with reading(location) as store:
            if store.latest_generation() is None:
                continue
            desired = read_desired(store, location)
        for spec in desired.cluster.services:
            if spec.backup is None or spec.backup.schedule is None:
                continue
            key = (desired.cluster.name, spec.name)
            latest = schedules.times(Schedule(spec.backup.schedule, spec.backup.timezone), now)
            if key not in memory.handled:
                memory.handled[key] = await _handled_at_start(spec, desired, latest.latest)
            if not backup_due(latest.latest, memory.handled[key]):
                continue
            memory.handled[key] = latest.latest
            tell(await _scheduled_one(spec.name, location, runtime))


async def _handled_at_start(spec: Service, desired: Desired, latest: float) -> float:
    """`latest` when the service's newest snapshot is at or after it, else just before it
    (due now); a repository that cannot be read: due now (the backup says why)."""
    try:
        _, repo = repository_of(spec, desired.inventory)
        found = await restic.snapshots(
            repo, {"cluster": desired.cluster.name, "service": spec.name}
        )
    except (UseCaseError, ResticError):
        return latest - 1.0
    newest = max((_epoch(s.time) for s in found), default=None)
    return latest if newest is not None and newest >= latest else latest - 1.0


def _epoch(rfc3339: str) -> float:
    """restic's time (`2026-12-03T03:00:04.405049187Z`, or an offset) as epoch seconds."""
    found = _RFC3339.fullmatch(rfc3339)
    if found is None:
        return 0.0
    zone = "+00:00" if found[3] == "Z" else found[3]
    whole = datetime.fromisoformat(found[1] + zone).timestamp()
    return whole + (float("0." + found[2]) if found[2] else 0.0)


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


async def _scheduled_one(service: str, location: StateLocation, runtime: Runtime) -> str:
    try:
        done = await backup(service, location, runtime, _unheard)
    except UseCaseError as exc:
        return f"scheduled backup of {service} failed: {exc}"
    lines = [s.line() for s in done.saved] + [f"failed: {f}" for f in done.failed]
    kept = f"; forgot {done.forgotten} snapshot(s) by keep" if done.forgotten else ""
    return f"scheduled backup of {service}: " + "; ".join(lines) + kept


def _unheard(label: str, size: int) -> None:
    """No progress lines from a scheduled backup: its outcome is one line."""
