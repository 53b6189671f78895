"""`minidock backup SERVICE[.SLOT]`, `minidock backup verify SERVICE[.SLOT]` and `minidock
backups [SERVICE]` (docs/backups.md).

A backup is an intent recorded in the state (core.saving.begin) and carried out by the
passes that follow, this command's own or, if it is interrupted or killed, the next
`reconcile` or `watch`: each slot's `hooks.before_backup` run in its task, with
`backup.stop` the task drained and stopped (the passes hold the slot: its stop is never
taken for an exit), each named volume streamed with `docker cp` over SSH straight into
`restic backup --stdin` (minidock.act.backups), tagged cluster, service, slot, volume and
generation, the task started again, then `keep` applied to each slot's and volume's
snapshots. A scheduled backup (`backup.schedule`) is the same intent, recorded by the pass
itself at each scheduled time. The command then reads each slot's last backup and prints
its snapshots; a failed slot is one line and exit 1.

A restore drill (`backup verify`) is recorded the same way: the slot's newest snapshots
restored into a throwaway container on a host, `backup.verify` run in it, both removed;
its outcome is the slot's last verified snapshot (status, metrics, events).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from minidock import restic
from minidock.core import ControllerState
from minidock.core.backing import LastBackup, Verified
from minidock.core.saving import backed_slots, begin, begin_verify
from minidock.model import Inventory, Service
from minidock.restic import ResticError
from minidock.store import StateLocation
from minidock.units import approx_size
from minidock.usecases.access import Desired, read_desired, reading, require_applied
from minidock.usecases.clusters import chosen
from minidock.usecases.common import cluster_of, known_service, of_service, record_intent
from minidock.usecases.outcomes import (
    BadInput,
    ConvergeOutcome,
    ExitCode,
    Report,
    UseCaseError,
)
from minidock.usecases.repositories import repository_of
from minidock.usecases.runtime import Runtime

__all__ = [
    "BackupOutcome",
    "BackupsOutcome",
    "SlotBacked",
    "VerifyOutcome",
    "backup",
    "list_backups",
    "repository_of",
    "restorable",
    "verify",
]


@dataclass(frozen=True)
class SlotBacked:
    """One slot's backup as it ended: its task (as it runs now), host and last backup."""

    service: str
    slot: int
    task: str
    host: str
    last: LastBackup

    def lines(self) -> list[str]:
        """`db.1.x7 dbdata: snapshot 4f2a9c1e (48.0MiB in 2.1s, 22.9MiB/s) on host1`."""
        who = f"{self.service}.{self.slot}" + (f".{self.task}" if self.task else "")
        last = self.last
        rate = f", {approx_size(int(last.size / last.seconds))}/s" if last.seconds > 0 else ""
        figure = f"{approx_size(last.size)} in {last.seconds:.1f}s{rate}"
        return [
            f"{who} {volume}: snapshot {ident[:8]} ({figure}) on {self.host}"
            for volume, ident in last.snapshots
        ]


@dataclass(frozen=True)
class BackupOutcome:
    service: str
    repository: str
    slots: tuple[SlotBacked, ...]
    convergence: ConvergeOutcome

    @property
    def saved(self) -> tuple[str, ...]:
        return tuple(line for s in self.slots for line in s.lines())

    @property
    def forgotten(self) -> int:
        return sum(s.last.forgotten for s in self.slots)

    @property
    def failed(self) -> tuple[str, ...]:
        """One line per slot whose backup failed, or did not end before the timeout."""
        return tuple(
            f"{s.service}.{s.slot}: {s.last.failed or 'not backed up before the timeout'}"
            for s in self.slots
            if s.last.failed or not s.last.snapshots
        )

    @property
    def exit_code(self) -> int:
        if self.failed:
            return ExitCode.FAILED
        return self.convergence.exit_code


@dataclass(frozen=True)
class VerifyOutcome:
    service: str
    slots: tuple[tuple[int, Verified | None], ...]  # None: no drill ended before the timeout
    convergence: ConvergeOutcome

    def lines(self) -> list[str]:
        found = []
        for n, v in self.slots:
            subject = f"{self.service}.{n}"
            if v is None:
                found.append(f"{subject}: no drill ended before the timeout")
            elif v.ok:
                said = f": {v.line}" if v.line else ""
                found.append(f"{subject}: snapshot {v.snapshot[:8]} verified{said}")
            else:
                what = f"snapshot {v.snapshot[:8]}" if v.snapshot else "drill"
                found.append(f"{subject}: {what} failed its verify: {v.line}")
        return found

    @property
    def exit_code(self) -> int:
        if any(v is None or not v.ok for _, v in self.slots):
            return ExitCode.FAILED
        return self.convergence.exit_code


@dataclass(frozen=True)
class BackupsOutcome:
    repository: str
    snapshots: tuple[restic.Snapshot, ...]

    @property
    def exit_code(self) -> int:
        return ExitCode.OK


def _subject(given: str, verb: str) -> tuple[str, int | None]:
    service, dot, slot = given.rpartition(".")
    if not dot:
        return given, None
    if not service or not slot.isdigit() or int(slot) < 1:
        raise BadInput(f"{verb}: {given!r} is not SERVICE or SERVICE.SLOT (e.g. db or db.1)")
    return service, int(slot)


def _slots(
    state: ControllerState, desired: Desired, service: str, slot: int | None, verb: str
) -> tuple[Service, tuple[int, ...]]:
    """The service's applied spec and the slots the command takes, bad input refused (one
    line, before anything is recorded)."""
    known_service(state, service)
    ss = state.services[service]
    spec = desired.cluster.service(service) or ss.spec
    if not any(v.named for v in spec.volumes):
        raise BadInput(f"{service} has no named volume to back up")
    if spec.desired != "running":
        raise BadInput(f"{service} is desired {spec.desired}: nothing runs to back up")
    repository_of(spec, desired.inventory)
    if slot is not None and slot not in ss.slot_numbers():
        raise BadInput(f"{verb}: {service} has no slot {slot} (slots 1..{ss.wanted()})")
    numbers = (slot,) if slot is not None else backed_slots(ss)
    unplaced = [n for n in numbers if not ss.slot(n).host]
    if unplaced or not numbers:
        raise UseCaseError(
            f"{verb}: {service}.{(unplaced or [1])[0]} has no task: it never ran, or its host "
            "was forgotten"
        )
    return spec, numbers


async def backup(
    target: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    timeout: float = 3600.0,
    cluster: str | None = None,
) -> BackupOutcome:
    """Record the backup of SERVICE[.SLOT]'s slots and converge (module doc)."""
    service, slot = _subject(target, "backup")
    taken: list[int] = []
    since = runtime.clock.now()
    policy_seen: list[str] = []

    async def check(state: ControllerState, desired: Desired) -> None:
        _, numbers = _slots(state, desired, service, slot, "backup")
        taken[:] = numbers

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        spec, numbers = _slots(state, desired, service, slot, "backup")
        policy = spec.backup or desired.inventory.backup
        assert policy is not None  # _slots: repository_of
        policy_seen.append(policy.repository)
        ss = state.services[service]
        for n in numbers:
            ss = begin(ss, n, since, stop=policy.stop, hook=spec.before_backup is not None)
        return replace(state, services={**state.services, service: ss})

    held = of_service(directory, cluster, service)
    done = await record_intent(
        held,
        runtime,
        report,
        change,
        lambda: f"backing up {', '.join(f'{service}.{n}' for n in taken)}",
        wait=True,
        timeout=timeout,
        check=check,
    )
    with reading(held[0].location) as store:
        ss = store.load().services.get(service)
    slots: list[SlotBacked] = []
    for n in taken:
        last = ss.backups.last.get(n) if ss is not None else None
        if last is None or last.at < since:
            last = LastBackup()
        record = ss.slot(n) if ss is not None else None
        task, host = (record.task, record.host) if record is not None else ("", "")
        slots.append(SlotBacked(service, n, task, host, last))
    repository = policy_seen[0] if policy_seen else ""
    return BackupOutcome(service, repository, tuple(slots), done.convergence)


async def verify(
    target: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    timeout: float = 3600.0,
    cluster: str | None = None,
) -> VerifyOutcome:
    """Record a restore drill of SERVICE[.SLOT]'s slots and converge (module doc)."""
    service, slot = _subject(target, "backup verify")
    taken: list[int] = []
    since = runtime.clock.now()

    async def check(state: ControllerState, desired: Desired) -> None:
        spec, numbers = _slots(state, desired, service, slot, "backup verify")
        policy = spec.backup or desired.inventory.backup
        if policy is None or not policy.verify:
            raise BadInput(
                f"backup verify: {service} has no backup.verify: give it the command a drill "
                'runs, e.g. verify = ["pg_restore", "--list", "/backup/db.dump"]'
            )
        taken[:] = numbers

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        ss = state.services[service]
        for n in taken:
            ss = begin_verify(ss, n)
        return replace(state, services={**state.services, service: ss})

    held = of_service(directory, cluster, service)
    done = await record_intent(
        held,
        runtime,
        report,
        change,
        lambda: f"restore drill of {', '.join(f'{service}.{n}' for n in taken)}",
        wait=True,
        timeout=timeout,
        check=check,
    )
    with reading(held[0].location) as store:
        ss = store.load().services.get(service)
    found: list[tuple[int, Verified | None]] = []
    for n in taken:
        v = ss.backups.verified.get(n) if ss is not None else None
        found.append((n, v if v is not None and v.at >= since else None))
    return VerifyOutcome(service, tuple(found), done.convergence)


async def list_backups(
    service: str | None, directory: StateLocation, *, cluster: str | None = None
) -> BackupsOutcome:
    """The snapshots of the cluster's services (or of one) in their repository, oldest
    first. Every service listed must back up into the same repository: the first named
    (by the service, else the inventory) is read."""
    require_applied(directory)
    directory = cluster_of(directory, cluster, service) if service else directory
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
