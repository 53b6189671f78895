"""A pass's backup acts (`Plan.backups`, decided by core/saving.py) carried out: a slot's
`hooks.before_backup` run in its task, its named volumes streamed into the service's restic
repository, `keep` applied after, and restore drills. Each act's result is an outcome for
the core (`Hooked`, `Copied`, `BackupKept`, `BackupEnded`, `VerifyEnded`); it decides
nothing.

A copy streams each volume with `docker cp` (a Podman host: the volume's export, renamed
into the same stream) over SSH (minidock.act.volumecopy) straight into
`restic backup --stdin` (minidock.restic), tagged cluster, service, slot, volume and
generation: out of the running task (`backup.stop` false), or, the task stopped by the
passes, out of a helper holding the volume (never one made empty: a volume that is not
there fails the copy). A copy cut off by a kill is done again whole by the next pass: a
restic snapshot is only ever added, never half-written.

A restore drill (`VerifyAct`) reads the slot's newest snapshot of each named volume,
streams it into a throwaway volume of its own on the host (`<volume>.verify`, through a
helper), runs the spec's `backup.verify` in a throwaway container of the service's image
(`--network none`, no minidock label, so no pass, route or name proxy ever counts it) with
those volumes mounted where the task mounts them, and removes the container and the
volumes, whatever the outcome.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from minidock import restic
from minidock.act.acts import ActFailed, Acts, ensure_image
from minidock.act.relocate import ResticSnapshots
from minidock.act.volumecopy import (
    CopyError,
    close_volume,
    open_volume,
    remove_volume,
    stream_in,
    stream_out,
    volume_exists,
)
from minidock.commands.docker import exec_argv, rm_argv, verify_argv, volume_name
from minidock.core.backing import BackupAct, BackupStep, VerifyAct
from minidock.core.saving import BackupEnded, BackupKept, Copied, Hooked, VerifyEnded
from minidock.model import BackupPolicy, Host, Service, Volume
from minidock.restic import Repository, ResticError
from minidock.spec import SpecError
from minidock.spec.backup import password_value
from minidock.ssh import CommandTimeout, Unreachable

__all__ = ["VERIFY_TIMEOUT", "carry_backup", "tags_of", "verify_name"]

VERIFY_TIMEOUT = 600.0  # seconds a drill's command may take
_FAILURES = (CopyError, ActFailed, ResticError, Unreachable, CommandTimeout)


class _Refused(Exception):
    """A step that cannot run (no repository, no volume), said in one line."""


def tags_of(cluster: str, spec: Service, slot: int, volume: str, generation: int) -> dict[str, str]:
    """The tags of a slot's volume's snapshot (`generation` 0: the group `keep` prunes)."""
    tags = {"cluster": cluster, "service": spec.name, "slot": str(slot), "volume": volume}
    return tags | ({"generation": str(generation)} if generation else {})


def verify_name(volume: str) -> str:
    """The throwaway volume (and, of the first volume, container) of a drill."""
    return f"{volume}.verify"


def _repository(acts: Acts, spec: Service) -> Repository:
    policy = _policy(acts, spec)
    try:
        return Repository(policy.repository, password_value(policy))
    except SpecError as exc:
        raise _Refused(str(exc)) from None


def _host(acts: Acts, name: str) -> Host:
    found = acts.hosts.get(name)
    if found is None:
        raise _Refused(f"{name} is not in the inventory")
    return found


async def carry_backup(
    acts: Acts, act: BackupAct | VerifyAct, clock: Callable[[], float] = time.monotonic
) -> None:
    """One backup act or drill; its outcome appended to `acts.outcomes`."""
    if isinstance(act, VerifyAct):
        acts.outcomes.append(await _verify(acts, act))
        return
    repo: Repository | None = None
    try:
        if act.step is BackupStep.HOOK:
            await _hook(acts, act)
            acts.outcomes.append(Hooked(act.service, act.slot))
            return
        repo = _repository(acts, act.spec)
        if act.step is BackupStep.COPY:
            started = clock()
            await restic.ensure(repo)
            saved = [await _copy(acts, act, repo, v.source, v.target) for v in _named(act.spec)]
            size = sum(s.size for _, s in saved)
            snapshots = tuple((volume, s.snapshot) for volume, s in saved)
            acts.outcomes.append(Copied(act.service, act.slot, snapshots, size, clock() - started))
            return
        forgotten = 0
        for v in _named(act.spec):
            tags = tags_of(acts.cluster, act.spec, act.slot, v.source, 0)
            forgotten += len(await restic.forget(repo, _policy(acts, act.spec).keep, tags))
        acts.outcomes.append(BackupKept(act.service, act.slot, forgotten))
    except (_Refused, *_FAILURES) as exc:
        line = repo.mask(str(exc)) if repo is not None else str(exc)
        acts.outcomes.append(BackupEnded(act.service, act.slot, line))


def _named(spec: Service) -> list[Volume]:
    return [v for v in spec.volumes if v.named]


def _policy(acts: Acts, spec: Service) -> BackupPolicy:
    policy = spec.backup or acts.inventory.backup
    if policy is None:
        raise _Refused(f"{spec.name} has no backup repository")
    return policy


async def _hook(acts: Acts, act: BackupAct) -> None:
    """The service's `hooks.before_backup` run in the slot's task; a failure raises."""
    hook = act.spec.before_backup
    if hook is None:
        return
    done = await acts.sh(act.host, exec_argv(act.container, hook.command), timeout=hook.timeout)
    if done.exit_status != 0:
        said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise _Refused(f"before_backup hook exited {done.exit_status}: {said[:200]}")


async def _copy(
    acts: Acts, act: BackupAct, repo: Repository, source: str, path: str
) -> tuple[str, restic.Saved]:
    """One named volume into the repository: out of the running task, else out of a helper
    holding the volume (the task stopped for the copy)."""
    host = _host(acts, act.host)
    volume = volume_name(acts.cluster, act.spec.name, act.slot, source)
    container = act.container
    if not container:
        if not await volume_exists(acts.executor, host, volume):
            raise _Refused(f"volume {volume} is not on {host.name}: nothing to back up")
        acts.fence()
        container = await open_volume(acts.executor, host, volume, path, act.spec.image)

    async def feed(write: restic.Write) -> int:
        acts.fence()
        engine = acts.engine_of(host.name)
        return await stream_out(
            acts.executor, host, container, path, write, engine=engine, volume=volume
        )

    tags = tags_of(acts.cluster, act.spec, act.slot, source, act.generation)
    try:
        saved = await restic.backup(repo, restic.stdin_name(source), tags, host.name, feed)
    finally:
        if not act.container:
            with contextlib.suppress(*_FAILURES):
                await close_volume(acts.executor, host, volume)
    return source, saved


# -- restore drills ---------------------------------------------------------------------------
async def _verify(acts: Acts, act: VerifyAct) -> VerifyEnded:
    """A drill (module doc): its outcome, the throwaway container and volumes removed."""
    repo: Repository | None = None
    snapshot = ""
    volumes: list[tuple[str, str]] = []  # (throwaway volume, where the task mounts it)
    try:
        policy = _policy(acts, act.spec)
        if not policy.verify:
            raise _Refused("backup.verify gives no command to run")
        repo = _repository(acts, act.spec)
        host = _host(acts, act.host)
        group = {"cluster": acts.cluster, "service": act.service, "slot": str(act.slot)}
        found = await restic.snapshots(repo, group)
        picks: list[tuple[str, str, str]] = []  # (volume, snapshot id, where it mounts)
        for v in _named(act.spec):
            mine = [s for s in found if s.tag("volume") == v.source]
            if not mine:
                raise _Refused(f"no snapshot of {act.service}.{act.slot} {v.source}")
            picks.append((v.source, mine[-1].id, v.target))
        snapshot = picks[0][1]
        await ensure_image(acts, host.name, act.spec, (act.service, act.slot, host.name, ""))
        reader = ResticSnapshots(repo)
        for source, ident, path in picks:
            throwaway = verify_name(volume_name(acts.cluster, act.service, act.slot, source))
            volumes.append((throwaway, path))
            acts.fence()
            await remove_volume(acts.executor, host, throwaway)
            helper = await open_volume(acts.executor, host, throwaway, path, act.spec.image)
            try:
                stream = reader.stream(ident, source)
                async with contextlib.aclosing(stream):
                    engine = acts.engine_of(host.name)
                    await stream_in(
                        acts.executor, host, helper, path, stream, engine=engine, volume=throwaway
                    )
            finally:
                await close_volume(acts.executor, host, throwaway)
        name = verify_name(volumes[0][0])
        await acts.sh(host.name, rm_argv([name], force=True))
        argv = verify_argv(name, act.spec.image, volumes, policy.verify)
        done = await acts.sh(host.name, argv, timeout=VERIFY_TIMEOUT)
        said = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[-1][:200]
        if done.exit_status != 0:
            return VerifyEnded(
                act.service, act.slot, snapshot, False, f"exit {done.exit_status}: {said}"
            )
        return VerifyEnded(act.service, act.slot, snapshot, True, said)
    except (_Refused, *_FAILURES) as exc:
        line = repo.mask(str(exc)) if repo is not None else str(exc)
        return VerifyEnded(act.service, act.slot, snapshot, False, line)
    finally:
        await _throw_away(acts, act.host, volumes)


async def _throw_away(acts: Acts, host_name: str, volumes: list[tuple[str, str]]) -> None:
    """A drill's container and volumes removed (best effort: the next drill removes them
    first anyway)."""
    host = acts.hosts.get(host_name)
    if host is None or not volumes:
        return
    with contextlib.suppress(*_FAILURES):
        await acts.executor.run(host, rm_argv([verify_name(volumes[0][0])], force=True))
    for volume, _ in volumes:
        with contextlib.suppress(*_FAILURES):
            await remove_volume(acts.executor, host, volume)
