"""`minidock restore SERVICE[.SLOT] [--snapshot ID]... [--host HOST] [--force]`
(docs/backups.md#restore).

A restore is a move whose source is a backup: each slot's restore is recorded as an intent
(`core.begin_restore`) and carried out by the passes that follow, this command's own or,
if it is interrupted or killed, the next `reconcile` or `watch`: the slot's task drained
and stopped wherever it runs, each named volume made afresh on the target from its
snapshot (`restic dump` streamed in over SSH, minidock.act.relocate), the task started there,
which becomes the slot's recorded host. At any instant at most one task of the slot runs.

Checked before anything is recorded, bad input first (no SSH, no restic), then the
repository's snapshots (restic, on the controller), then the hosts (SSH): the target must
answer; a slot recorded on another host that answers is refused unless `force` (its data
would fork: the volume left there, and the snapshot's copy on the target); one recorded
on a host that does not answer is refused until that host is forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence

from minidock import core, restic
from minidock.core import ControllerState
from minidock.core.failover import never_target
from minidock.core.scheduler import Fleet, counted_as, place
from minidock.model import Host, Service
from minidock.observe import observe_host
from minidock.restic import ResticError, Snapshot
from minidock.store import StateLocation
from minidock.usecases.access import Desired
from minidock.usecases.common import known_host, known_service, of_service, record_intent
from minidock.usecases.outcomes import BadInput, IntentOutcome, Report, UseCaseError
from minidock.usecases.repositories import epoch, repository_of
from minidock.usecases.runtime import Runtime, connected

__all__ = ["choose_snapshots", "parse_subject", "restore"]

Picks = tuple[tuple[str, str], ...]  # (volume, snapshot id), the named ones first


def parse_subject(given: str) -> tuple[str, int | None]:
    """`SERVICE` or `SERVICE.SLOT` as (service, slot or None); BadInput naming the form."""
    service, dot, slot = given.rpartition(".")
    if not dot:
        return given, None
    if not service or not slot.isdigit() or int(slot) < 1:
        raise BadInput(f"restore: {given!r} is not SERVICE or SERVICE.SLOT (e.g. db or db.1)")
    return service, int(slot)


def choose_snapshots(
    found: Sequence[Snapshot],
    where: tuple[str, str, int],
    volumes: Sequence[str],
    given: Sequence[str],
    repository: str,
) -> Picks:
    """The snapshot each of a slot's named `volumes` is restored from. `where` is (cluster,
    service, slot). Each of `given` (an id or its prefix) names one volume's snapshot (any
    slot's, or another cluster's: a clone); each other volume takes the snapshot of the
    same cluster, service and slot as the first given nearest to it in time (one backup
    run takes them one after another), or, when none is given, the slot's newest.
    BadInput (one line) when a snapshot is missing, ambiguous or of no such volume."""
    cluster, service, slot = where
    listing = f"`minidock backups {service}` lists them"
    named: dict[str, Snapshot] = {}
    for ident in given:
        matches = [s for s in found if s.id.startswith(ident.lower())]
        if not matches:
            raise BadInput(f"restore: no snapshot {ident!r} in {repository}: {listing}")
        if len(matches) > 1:
            raise BadInput(f"restore: {ident!r} begins {len(matches)} snapshots' ids: give more")
        s, volume = matches[0], matches[0].tag("volume")
        if volume not in volumes:
            raise BadInput(
                f"restore: snapshot {s.short_id} is of volume {volume or '(none)'}, not one of "
                f"{service}'s named volumes ({', '.join(volumes)})"
            )
        if volume in named:
            raise BadInput(
                f"restore: {named[volume].short_id} and {s.short_id} are both of {volume}: "
                "name one snapshot per volume"
            )
        named[volume] = s
    anchor = next(iter(named.values()), None)
    group = (cluster, service, str(slot))
    if anchor is not None:
        group = (anchor.tag("cluster"), anchor.tag("service"), anchor.tag("slot"))
    picks = [(v, s.id) for v, s in named.items()]
    for volume in volumes:
        if volume in named:
            continue
        mine = [
            s
            for s in found
            if (s.tag("cluster"), s.tag("service"), s.tag("slot"), s.tag("volume"))
            == (*group, volume)
        ]
        if not mine:
            raise BadInput(
                f"restore: no snapshot of {group[1]}.{group[2]} {volume} in {repository} "
                f"(cluster {group[0]}): {listing}, or name one with --snapshot"
            )
        if anchor is None:
            picks.append((volume, mine[-1].id))
        else:
            at = epoch(anchor.time)
            picks.append((volume, min(mine, key=lambda s: abs(epoch(s.time) - at)).id))
    return tuple(picks)


async def restore(
    subject: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    snapshots: Sequence[str] = (),
    host: str | None = None,
    force: bool = False,
    empty: bool = False,
    replace_kept: bool = False,
    wait: bool = True,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> IntentOutcome:
    """Record the restore of SUBJECT's slots (`SERVICE`: each of its slots from its own
    newest snapshots; `SERVICE.SLOT`: that one, from `snapshots` or its newest) on `host`
    (else each slot's recorded host; a slot waiting for its restore, whose host was
    forgotten: a host the scheduler picks), then converge (module doc). `empty`: a slot
    waiting for its restore starts on empty volumes instead. `replace_kept`: a `host` that
    keeps the slot's old volume (a failover or `forget` left it) is written over; else
    refused, and never the scheduler's pick."""
    service, slot = parse_subject(subject)
    if empty:
        return await _empty(service, slot, directory, runtime, report, snapshots, host, force,
                            wait=wait, timeout=timeout, cluster=cluster)  # fmt: skip
    chosen: dict[int, tuple[str, Picks]] = {}  # slot -> (target, picks): what check found

    async def check(state: ControllerState, desired: Desired) -> None:
        targets, spec = _targets(state, desired, service, slot, host)
        chosen.update(await _chosen(desired, spec, targets, snapshots))
        for n, target in sorted(targets.items()):
            if not target:  # awaiting its restore, its host forgotten: the scheduler's pick
                targets[n] = await _scheduled(state, desired, runtime, spec, n)
                chosen[n] = (targets[n], chosen[n][1])
        await _hosts_answer(state, desired, runtime, service, targets, force=force)

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        for n, (target, picks) in sorted(chosen.items()):
            try:
                state = core.begin_restore(
                    state, service, n, target, picks, runtime.clock.now(), replace_kept=replace_kept
                )
            except ValueError as exc:
                raise BadInput(str(exc)) from None
        return state

    held = of_service(directory, cluster, service)
    return await record_intent(
        held,
        runtime,
        report,
        change,
        lambda: _message(service, chosen),
        wait=wait,
        timeout=timeout,
        check=check,
    )


async def _chosen(
    desired: Desired, spec: Service, targets: dict[int, str], snapshots: Sequence[str]
) -> dict[int, tuple[str, Picks]]:
    """Each target slot's snapshots to restore (`choose_snapshots`), read from the spec's
    repository, beside its target host."""
    policy, repo = repository_of(spec, desired.inventory)
    try:
        found = await restic.snapshots(repo)
    except ResticError as exc:
        raise UseCaseError(f"{policy.repository}: {exc}") from None
    volumes = [v.source for v in spec.volumes if v.named]
    return {
        n: (
            target,
            choose_snapshots(
                found, (desired.cluster.name, spec.name, n), volumes, snapshots, policy.repository
            ),
        )
        for n, target in targets.items()
    }


def _message(service: str, chosen: dict[int, tuple[str, Picks]]) -> str:
    """The intent's line: `restoring db.1 on host3 from snapshot 4f2a9c1e`."""
    return "; ".join(
        f"restoring {service}.{n} on {target} from {_from(picks)}"
        for n, (target, picks) in sorted(chosen.items())
    )


def _from(picks: Picks) -> str:
    if len(picks) == 1:
        return f"snapshot {picks[0][1][:8]}"
    return "snapshots " + ", ".join(f"{ident[:8]} ({volume})" for volume, ident in picks)


def _targets(
    state: ControllerState, desired: Desired, service: str, slot: int | None, host: str | None
) -> tuple[dict[int, str], Service]:
    """Each slot restored and its target, and the service's applied spec: bad input (an
    unknown service, slot or host, no named volume, a slot with no host to restore on)
    refused here, before restic or SSH."""
    known_service(state, service)
    ss = state.services[service]
    spec = desired.cluster.service(service) or ss.spec
    if not any(v.named for v in spec.volumes):
        raise BadInput(f"restore: {service} has no named volume: there is nothing to restore")
    numbers = ss.slot_numbers()
    if slot is not None and slot not in numbers:
        raise BadInput(f"restore: {service} has no slot {slot} (slots 1..{ss.wanted()})")
    chosen = [slot] if slot is not None else sorted(numbers)
    if host is not None:
        known_host(desired.inventory, host, state)
        if desired.inventory.host(host) is None:
            raise BadInput(f"restore: {host} is not in the inventory: a restore streams into it")
        if state.host(host).drained:
            raise BadInput(f"restore: {host} is drained: `minidock activate {host}` first")
        if len(chosen) > 1:
            raise BadInput(f"restore: --host needs one slot: `minidock restore {service}.1 ...`")
    targets: dict[int, str] = {}
    for n in chosen:
        target = host or ss.slot(n).host
        if not target and ss.slot(n).awaiting_restore:
            targets[n] = ""  # the scheduler picks it, once the hosts are probed
            continue
        if not target:
            raise BadInput(
                f"restore: {service}.{n} has no recorded host (its host was forgotten, or it "
                "never ran): name the host to restore it on with --host HOST"
            )
        targets[n] = target
    return targets, spec


async def _scheduled(
    state: ControllerState, desired: Desired, runtime: Runtime, spec: Service, slot: int
) -> str:
    """A host for a slot waiting for its restore: the scheduler's pick (core.scheduler,
    as a pass places a task) among the hosts that answer now and may take tasks, by their
    live tasks' load; UseCaseError when none fits."""
    async with connected(runtime) as executor:
        seen = {
            h.name: await observe_host(executor, h, desired.cluster.name, ports=False)
            for h in desired.inventory.hosts
        }
    eligible = {
        name: (("drained" if state.host(name).drained else None) if o.ok else o.why_not)
        for name, o in seen.items()
    }
    live = [
        counted_as(c, desired.cluster.name)
        for o in seen.values()
        if o.ok
        for c in (*o.containers, *o.others)
        if c.live
    ]
    never = never_target(state.services[spec.name].slot(slot))  # its old volume's host
    where = place(spec, Fleet.build(desired.inventory.hosts, eligible, live), never=never)
    if where.host is None:
        raise UseCaseError(
            f"restore: no host can take {spec.name}.{slot} ({where.why}): name one with --host"
        )
    return where.host


async def _empty(
    service: str,
    slot: int | None,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    snapshots: Sequence[str],
    host: str | None,
    force: bool,
    *,
    wait: bool,
    timeout: float,
    cluster: str | None,
) -> IntentOutcome:
    """`restore SERVICE[.SLOT] --empty`: each slot waiting for its restore (or that one)
    starts on empty volumes, on purpose; no restic, no SSH before the passes."""
    if snapshots or host is not None or force:
        raise BadInput(
            "restore: --empty starts a slot with no data: no --snapshot, --host, --force"
        )
    numbers: list[int] = []

    async def check(state: ControllerState, desired: Desired) -> None:
        known_service(state, service)
        ss = state.services[service]
        wanted = [slot] if slot is not None else [
            n for n in ss.slot_numbers() if ss.slot(n).awaiting_restore
        ]  # fmt: skip
        if not wanted:
            raise BadInput(f"restore: no slot of {service} is waiting for a restore")
        numbers[:] = wanted

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        for n in numbers:
            try:
                state = core.start_empty(state, service, n)
            except ValueError as exc:
                raise BadInput(f"restore: {exc}") from None
        return state

    def message() -> str:
        return "; ".join(f"starting {service}.{n} on empty volumes" for n in numbers)

    held = of_service(directory, cluster, service)
    return await record_intent(
        held, runtime, report, change, message, wait=wait, timeout=timeout, check=check
    )


async def _hosts_answer(
    state: ControllerState,
    desired: Desired,
    runtime: Runtime,
    service: str,
    targets: dict[int, str],
    *,
    force: bool,
) -> None:
    """Each target answers (else UseCaseError: the restore streams into it); a slot's
    recorded host other than its target is refused while it answers (unless `force`) and
    while it does not (until it is forgotten: it may still run the task)."""
    ss = state.services[service]
    wanted = set(targets.values()) | {ss.slot(n).host for n in targets if ss.slot(n).host}
    details: dict[str, Host] = {}
    for name in sorted(wanted):
        found = desired.inventory.host(name) or state.host(name).last_known
        if found is not None:
            details[name] = found
    async with connected(runtime) as executor:
        seen = {
            name: await observe_host(executor, h, desired.cluster.name, ports=False)
            for name, h in details.items()
        }
    for n, target in sorted(targets.items()):
        probe = seen.get(target)
        if probe is None or not probe.ok:
            why = probe.why_not if probe is not None else "not in the inventory"
            raise UseCaseError(
                f"restore: {target} does not answer ({why}): a restore streams into it"
            )
        recorded = ss.slot(n).host
        if not recorded or recorded == target:
            continue
        subject = f"{service}.{n}"
        there = seen.get(recorded)
        if there is not None and there.ok and not force:
            raise BadInput(
                f"restore: {subject} is on {recorded}, which answers: restoring it on {target} "
                f"would fork its data (its volume stays on {recorded}); `--host {recorded}` "
                f"restores it there, `--force` on {target} anyway (its task on {recorded} stops)"
            )
        if there is None or not there.ok:
            raise BadInput(
                f"restore: {subject} is on {recorded}, which does not answer and may still run "
                f"it: `minidock forget {recorded}` if it is gone for good, then restore"
            )
