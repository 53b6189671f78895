"""Reconcile passes as use cases: converge (one pass, or passes until converged, failed or
timed out), cron's single `reconcile`, and `watch`'s loop of passes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from minidock.act.carry import TaskActs
from minidock.core.jobs import JobStart
from minidock.core.watching import backoff_ends, probe_scope
from minidock.masking import Masks
from minidock.model import Cluster, EngineKind, HostObservation, Inventory, Observed
from minidock.observe import ProbeMemory
from minidock.runner import PassResult, run_pass
from minidock.ssh import Executor
from minidock.store import StateLocation, Store
from minidock.streams import EventStreams
from minidock.usecases.access import (
    Desired,
    Inventories,
    Writer,
    admissible,
    read_desired,
    reading,
    require_applied,
    writing,
)
from minidock.usecases.clusters import Held, chosen, each, tagged
from minidock.usecases.outcomes import (
    Busy,
    ConvergeOutcome,
    Deposed,
    Ending,
    ExitCode,
    PassDone,
    PassSkipped,
    Report,
    UseCaseError,
    labelled,
    verdict,
    waited_for,
    why,
)
from minidock.usecases.passlog import record_pass
from minidock.usecases.runtime import Runtime, connected
from minidock.usecases.wakeups import Bell

if TYPE_CHECKING:
    from minidock.usecases.borrowing import Shared

log = logging.getLogger(__name__)

WAIT_INTERVAL = 1.0  # seconds between the passes of `--wait`


async def one_pass(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    *,
    clock: Callable[[], float],
    force_down: bool = False,
    masks: Masks | None = None,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
    borrowed: Mapping[str, HostObservation] | None = None,
    tasks: TaskActs | None = None,
) -> PassResult:
    """One reconcile pass (runner.run_pass: its tasks, proxies, certificates, hooks and
    scheduled jobs, one decision); `masks`: the command's maskers (its Runtime's);
    `memory`: its probes' (watch's); `scope`: the only hosts it probes (watch's passes
    between resyncs); `borrowed`: observations its hosts' owners made, and `tasks` the
    task verbs handed to them (watch's decider)."""
    return await run_pass(
        cluster,
        inventory,
        store,
        executor,
        clock=clock,
        force_down=force_down,
        masks=masks,
        memory=memory,
        scope=scope,
        borrowed=borrowed,
        tasks=tasks,
    )


async def converge_passes(
    store: Store,
    desired: Desired,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool,
    timeout: float,
    force_down: bool = False,
    executor: Executor | None = None,
) -> ConvergeOutcome:
    """One pass, or (with `wait`) passes `WAIT_INTERVAL` apart while they exit 3 and the
    timeout allows another, on `executor` (else one of its own). The caller holds the
    lock. The passes share the command's masker (`runtime.masks`): built by the first,
    extended only by a secret it has not met (masking.Masks)."""
    if executor is None:
        async with connected(runtime) as own:
            return await converge_passes(
                store,
                desired,
                runtime,
                report,
                wait=wait,
                timeout=timeout,
                force_down=force_down,
                executor=own,
            )
    clock, interrupt = runtime.clock, runtime.interrupt
    deadline = clock.monotonic() + timeout
    passes = 0
    with interrupt.passes():
        while not interrupt.requested:
            started = clock.monotonic()
            result = await one_pass(
                desired.cluster,
                desired.inventory,
                store,
                executor,
                clock=clock.now,
                force_down=force_down,
                masks=runtime.masks,
            )
            passes += 1
            code = verdict(result)
            record_pass(store, result, code, clock.monotonic() - started, clock.now())
            report(PassDone(result, code))
            if interrupt.requested:
                return interrupted(passes, timeout, len(result.done) + len(result.failures))
            ending = _ending(code, wait, clock.monotonic() + WAIT_INTERVAL > deadline)
            if ending is not None:
                what = waited_for(result) if ending is Ending.TIMED_OUT else ()
                return ConvergeOutcome(code, ending, passes, timeout, what, why(result, code))
            await clock.sleep(WAIT_INTERVAL)  # a signal meanwhile ends the loop after it
    return interrupted(passes, timeout, None)


def interrupted(passes: int, timeout: float, acts: int | None) -> ConvergeOutcome:
    """The outcome of passes a signal stopped: how many acts the pass under way did (all
    recorded), or (None) that it came between passes."""
    if acts is None:
        line = "interrupted between passes, nothing under way; run reconcile to go on"
    else:
        line = f"interrupted: {acts} act{'' if acts == 1 else 's'} done, recorded; "
        line += "run reconcile to go on"
    return ConvergeOutcome(ExitCode.INTERRUPTED, Ending.INTERRUPTED, passes, timeout, (), line)


def _ending(code: ExitCode, wait: bool, out_of_time: bool) -> Ending | None:
    """How passes end after one that exited `code`; None: wait for another."""
    if not wait:
        return Ending.NO_WAIT
    if code is ExitCode.OK:
        return Ending.CONVERGED
    if code is not ExitCode.NOT_CONVERGED:
        return Ending.STOPPED
    return Ending.TIMED_OUT if out_of_time else None


async def converge(
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    writer: Writer = Writer.OPERATOR,
    force_down: bool = False,
    cluster: str | None = None,
) -> ConvergeOutcome:
    """Passes over the stored desired state of every cluster the store holds (or of
    `cluster`), one cluster after another, each under its lock as `writer`."""
    require_applied(directory)
    targets = chosen(directory, cluster)

    async def one_cluster(h: Held) -> ConvergeOutcome:
        async with writing(h.location, runtime.clock, writer, runtime.notice) as store:
            desired = admissible(store.load(), read_desired(store, h.location))
            return await converge_passes(
                store,
                desired,
                runtime,
                labelled(report, tagged(h, len(targets))),
                wait=wait,
                timeout=timeout,
                force_down=force_down,
            )

    return await each(targets, one_cluster)


async def reconcile(
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    force_down: bool = False,
    cluster: str | None = None,
) -> ConvergeOutcome:
    """Cron's entry point: one pass per cluster; a taken lock is `Busy` (exit 75) at once.
    With `force_down`, the mass-loss guard does not hold this pass."""
    return await converge(
        directory,
        runtime,
        report,
        writer=Writer.SCHEDULED,
        force_down=force_down,
        cluster=cluster,
    )


async def watch_step(
    directory: StateLocation,
    executor: Executor,
    runtime: Runtime,
    cluster: str = "",
    *,
    memory: ProbeMemory | None = None,
    streams: EventStreams | None = None,
    full: bool = True,
    inventories: Inventories | None = None,
    defer_to: str | None = None,
    shared: Shared | None = None,
    kept: frozenset[str] | None = None,
) -> PassDone | PassSkipped:
    """One pass of `watch` on its long-lived executor; skipped while another writer works,
    or (`defer_to`: its member id) while another `watch` makes this cluster's passes. The
    generation is read afresh (its secrets join `runtime.masks`); `memory`: its probes';
    `streams` follow its hosts. A pass not `full` probes only the hosts whose stream rang
    or is not up, or not in `memory` (probe_scope); `inventories`: the files read before.
    `shared` (etcd): a deferring step probes and writes its share, a pass borrows the
    owners' writes and hands its bound down (usecases.borrowing); a skip keeps `kept` warm."""
    if defer_to is not None:
        why = f"controller {defer_to} makes this cluster's passes"
        share = None if shared is None else Share(shared, memory or ProbeMemory(), streams, full)
        return await standing_by(directory, executor, inventories, cluster, why, True, share, kept)
    try:
        async with writing(directory, runtime.clock, Writer.SCHEDULED) as store:
            desired = admissible(store.load(), read_desired(store, directory, inventories))
            log.debug("%s: the state read", desired.cluster.name)
            scope, rung = _scope(desired, streams, memory, full, shared)
            lent, tasks = shared.lend(store, rung, runtime.clock.monotonic()) if shared else UNLENT
            log.debug("%s: pass begins: %d borrowed", desired.cluster.name, len(lent))
            with runtime.interrupt.passes():  # a signal now lets this pass finish
                started = runtime.clock.monotonic()
                result = await one_pass(
                    desired.cluster,
                    desired.inventory,
                    store,
                    executor,
                    clock=runtime.clock.now,
                    masks=runtime.masks,
                    memory=memory,
                    scope=scope,
                    borrowed=lent,
                    tasks=tasks,
                )
                code, seconds = verdict(result), runtime.clock.monotonic() - started
                did = (acted(result), acted_on(result))  # its bound rides the last commit
                if shared is not None:
                    shared.borrowing.hand_down(store, shared.cluster, *did)
                record_pass(store, result, code, seconds, runtime.clock.now())
            if shared is not None:
                shared.borrowing.ended(shared.cluster, *did)
            if streams is not None:
                streams_saw(streams, desired.cluster.name, result.observed)
    except Busy as exc:
        return await standing_by(directory, executor, inventories, cluster, str(exc), kept=kept)
    except Deposed as exc:  # this pass lost the lock mid-way: another controller leads now
        return PassSkipped(str(exc), deposed=True, cluster=cluster)
    return PassDone(result, code, cluster, seconds)


def _scope(
    desired: Desired,
    streams: EventStreams | None,
    memory: ProbeMemory | None,
    full: bool,
    shared: Shared | None = None,
) -> tuple[Set[str] | None, Set[str]]:
    """The hosts a `watch` pass probes (None: all; core.watching.probe_scope) and those
    whose event stream rang since the last pass took its rings; `streams` follow the
    hosts the inventory lists now, or with `shared` those of its own share only (every
    other host's owner follows it; each is probed, unless its observation is borrowed)."""
    if streams is None or memory is None:
        return None, frozenset()
    hosts = desired.inventory.hosts
    if shared is not None:
        mine = shared.borrowing.mine(shared.cluster)
        hosts = tuple(h for h in hosts if h.name in mine)
    streams.follow(desired.cluster.name, hosts)
    rung, up = streams.take(desired.cluster.name)
    if full:
        return None, rung
    names = (h.name for h in desired.inventory.hosts)
    return probe_scope(names, rung=rung, up=up, remembered=memory.remembered()), rung


UNLENT: tuple[dict[str, HostObservation], None] = ({}, None)  # no share: nothing lent, no order


def streams_saw(streams: EventStreams, cluster: str, observed: Observed) -> None:
    """Tell `streams` what a pass or a round of `cluster` observed: the containers live
    (a `die` is confirmed once its container is gone) and each host's engine."""
    streams.seen(cluster, live_ids(observed))
    streams.engines(cluster, engine_kinds(observed))


def acted(result: PassResult) -> bool:
    """Whether a pass did anything to a host's containers (or tried to): an act said
    (done or failed), a task to start or stop, or a one-off's act (a hook's or a job's
    start, which says no line, a one-off removed, a volume move's or a backup's step)."""
    plan = result.plan
    oneoffs = plan.hooks or plan.jobs or plan.removals or plan.moves or plan.backups
    return bool(result.done or result.failures or plan.run or plan.stop or oneoffs)


def acted_on(result: PassResult) -> frozenset[str] | None:
    """The hosts a pass that `acted` acted on: only their bound on borrowed observations
    moves (core.borrowing.Trust). None when it cannot say which (a volume move's or a
    backup's steps, an act of no one host): then every host's does."""
    plan = result.plan
    if plan.moves or plan.backups:
        return None
    hosts = {r.host for r in plan.run} | {s.container.host for s in plan.stop}
    hosts |= {r.replaces.host for r in plan.run if r.replaces is not None}
    hosts |= {o.host for o in plan.removals} | set(result.touched)
    hosts |= {h.host or (h.oneoff.host if h.oneoff else "") for h in plan.hooks}
    hosts |= {j.host if isinstance(j, JobStart) else j.oneoff.host for j in plan.jobs}
    return None if "" in hosts else frozenset(hosts)


@dataclass(frozen=True)
class Share:
    """What a deferring `watch` step needs to probe its share: its cluster's observing by
    share, probe memory and event streams, and whether the round is a resync."""

    shared: Shared
    memory: ProbeMemory
    streams: EventStreams | None
    full: bool


async def standing_by(
    directory: StateLocation,
    executor: Executor,
    inventories: Inventories | None,
    cluster: str,
    why_not: str,
    deferred: bool = False,
    share: Share | None = None,
    kept: frozenset[str] | None = None,
) -> PassSkipped:
    """A skipped pass (`why_not`) that keeps its hosts' connections warm (`stand_by`:
    those `kept`, or all); with a `share` (deferred to another `watch`), that share of
    them probed and written."""
    warm, inventory = await stand_by(directory, executor, inventories, kept)
    listed = inventory.hosts if inventory is not None else ()
    probed = 0
    if share is not None and inventory is not None and listed:
        probed = await share.shared.borrowing.probe_share(
            executor, share.shared.cluster, inventory, share.memory, share.streams, share.full
        )
    return PassSkipped(
        why_not,
        cluster=cluster,
        standby=warm,
        hosts=len(listed),
        keeps=None if kept is None else sum(1 for h in listed if h.name in kept),
        names=tuple(h.name for h in listed),
        deferred=deferred,
        probed=probed,
    )


async def stand_by(
    directory: StateLocation,
    executor: Executor,
    inventories: Inventories | None,
    kept: frozenset[str] | None = None,
) -> tuple[int, Inventory | None]:
    """While another controller works: a connection to each host of the inventory (or of
    it, those `kept`: a sharing `watch`'s share and standby set, docs/scale.md) kept open,
    nothing run on it, so this one's first pass after a takeover needs no SSH handshake
    (docs/ha.md, "Warm takeover"). How many of those are connected, of which inventory;
    (0, None) when the state or the inventory cannot be read now (the next round tries
    again)."""
    try:
        with reading(directory) as store:
            inventory = read_desired(store, directory, inventories).inventory
    except UseCaseError:
        return 0, None
    hosts = [h for h in inventory.hosts if kept is None or h.name in kept]
    return await executor.warm(hosts), inventory


def engine_kinds(observed: Observed) -> dict[str, EngineKind]:
    """Each observed host's engine kind, where its probe read it."""
    return {n: o.engine.kind for n, o in observed.hosts.items() if o.engine is not None}


def live_ids(observed: Observed) -> dict[str, set[str]]:
    """The short ids of the live containers on each host a pass observed."""
    return {
        name: {c.id[:12] for c in (*seen.containers, *seen.others) if c.live}
        for name, seen in observed.hosts.items()
        if seen.ok
    }


@dataclass
class _Left:
    """What a watch round's passes left for the next round: work under way (a pass exited
    3, or found another writer at work), and the seconds to the soonest restart
    backoff's end among them; and its steps,
    each with its cluster's name, for the controller's member key and share
    (roster.Heartbeat)."""

    under_way: bool = False
    backoff: float | None = None
    steps: list[tuple[str, PassDone | PassSkipped]] = field(default_factory=list)

    def took(self, cluster: str, step: PassDone | PassSkipped, now: float) -> None:
        self.steps.append((cluster, step))
        if isinstance(step, PassSkipped):  # found the lock taken: try again in a second
            self.under_way |= not step.deferred
        if isinstance(step, PassDone):
            self.add(step, now)
            log.debug("%s: pass exit %d", step.cluster or "pass", step.exit_code)

    def add(self, step: PassDone, now: float) -> None:
        self.under_way |= step.exit_code is ExitCode.NOT_CONVERGED
        left = backoff_ends(step.result.plan.state, now, step.result.now or None)
        if left is not None:
            self.backoff = left if self.backoff is None else min(left, self.backoff)


async def watch(
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    interval: float,
    cluster: str | None = None,
) -> NoReturn:
    """Passes until cancelled (Ctrl-C), reusing one executor's connections: each round a
    pass for every cluster (or `cluster`), a cluster applied meanwhile included. A round
    begins `interval` after the last one began (the resync), or at once when a host's
    docker events stream rang (minidock.streams; core.watching.PassTimer coalesces), and
    a second after a round that left work under way (a pass exited 3), or when its
    soonest restart backoff ends if sooner. A round at the resync probes every host; one
    between, only the hosts whose stream rang or is not up (watch_step). The lock is held
    for each pass only; a signal during one lets it finish (KeyboardInterrupt after it).
    On an etcd state (roster.Heartbeat) the most senior `watch` makes each cluster's
    passes, the others stand by; each round ends holding its member key, its share and
    its connections by share, and etcd's news of a handover rings the next at once."""
    from minidock.usecases.roster import Heartbeat  # its imports: watch's alone

    require_applied(directory)
    memories: dict[str, ProbeMemory] = {}  # each cluster's probe memory
    inventories = Inventories()
    bell = Bell(runtime.clock, interval)
    heartbeat = Heartbeat(directory, *bell.etcd_rings(), cluster=cluster or "", interval=interval)
    async with connected(runtime) as executor:
        streams = EventStreams(executor, bell.ring)
        try:
            while True:
                full = bell.started()
                log.debug("round begins%s", " (resync)" if full else "")
                heartbeat.look(runtime.clock.monotonic())
                targets = chosen(directory, cluster)
                left = _Left()
                for h in targets:
                    step = await watch_step(
                        h.location,
                        executor,
                        runtime,
                        tagged(h, len(targets)),
                        memory=memories.setdefault(h.name, ProbeMemory()),
                        streams=streams,
                        full=full,
                        inventories=inventories,
                        defer_to=heartbeat.defers(h.name),
                        shared=heartbeat.shared(h.name),
                        kept=heartbeat.kept(h.name),
                    )
                    left.took(h.name, step, runtime.clock.now())
                    report(step)
                    if runtime.interrupt.requested:  # its pass finished and was recorded
                        raise KeyboardInterrupt
                heartbeat.round(left.steps, runtime.clock.now(), heartbeat.release(executor))
                under_way = left.under_way or streams.unconfirmed()  # docker's ps lags its `die`
                bell.finished(under_way=under_way, backoff_left=left.backoff)
                await bell.wait()
        finally:
            heartbeat.leave()
            await streams.close()
