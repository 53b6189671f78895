"""Use cases on a cluster file: validate it, plan it (a dry run), apply it; and `scale`,
a new generation of the spec a service runs with its replica count changed."""

from __future__ import annotations

import secrets
import time
import tomllib
from dataclasses import replace
from pathlib import Path

from minidock.core import (
    ControllerState,
    Plan,
    admit,
    declined_retries,
    failed_updates,
    foreign_controllers,
    removals,
    rollouts_started,
    scaled_cluster,
)
from minidock.core import scale as scale_service
from minidock.core.causes import failed_probes
from minidock.core.simulate import Simulation, simulate
from minidock.documents.plan import autoscale_notes, plan_document, route_loads
from minidock.masking import NO_SECRETS, Masker
from minidock.model import MAX_REPLICAS, Cluster, Event, Observed, keyed_cluster
from minidock.runner import PassResult, decide_pass
from minidock.schedules import backup_lines
from minidock.spec import SpecError, load, load_inventory, secret_env_warnings
from minidock.ssh import Executor
from minidock.store import StateLocation, Store
from minidock.usecases.access import (
    Desired,
    Writer,
    admissible,
    controller_id,
    existing_controller_id,
    has_state,
    load_spec,
    read_desired,
    reading,
    require_applied,
    writing,
)
from minidock.usecases.clusters import home, knowing_host, one
from minidock.usecases.images import build_images
from minidock.usecases.outcomes import (
    ApplyOutcome,
    BadInput,
    ExitCode,
    FailedUpdate,
    GenerationStored,
    PlanOutcome,
    Report,
    ScaleOutcome,
    ValidateOutcome,
    unknown,
)
from minidock.usecases.passes import converge_passes
from minidock.usecases.runtime import Runtime, connected


def validate(file: Path, inventory: Path | None = None) -> ValidateOutcome:
    """Check a cluster file (and its inventory: its own, else `inventory`, ...:
    spec.cluster.inventory_of) or an inventory (a file with `hosts`)."""
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
        is_inventory = "hosts" in doc or ("defaults" in doc and "services" not in doc)
    except (OSError, ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        is_inventory = False  # let the loader say what is wrong, in its own words
    try:
        if is_inventory:
            return ValidateOutcome(file, hosts=len(load_inventory(file).hosts))
        cluster, hosts = load(file, inventory)
    except SpecError as exc:
        raise BadInput(str(exc)) from None
    return ValidateOutcome(
        file,
        len(hosts.hosts),
        cluster=cluster.name,
        services=len(cluster.services),
        warnings=secret_env_warnings(cluster, str(file)),
        schedules=tuple(backup_lines(cluster.services, time.time())),
    )


async def plan(
    file: Path,
    directory: StateLocation,
    runtime: Runtime,
    *,
    prune: bool = False,
    lose: tuple[str, ...] = (),
    adopt: bool = False,
    inventory: Path | None = None,
) -> PlanOutcome:
    """What `apply FILE` would do, every step until convergence: observe, admit in memory,
    simulate the passes. Writes nothing, takes no lock, creates no state directory.
    Refuses (exit 2) exactly what `apply` refuses, by the same checks: another cluster's
    file, removed services without `prune`, another store's tasks without `adopt`.
    Removed services are planned (dependents first) with `prune`. With `lose` (a what-if),
    those hosts are lost first; it exits 1 when something would stay pending."""
    desired = load_spec(file, inventory)
    location = home(directory, desired.cluster.name)
    current, generation, mask, new = ControllerState(), 1, NO_SECRETS, True
    if has_state(location):
        with reading(location) as store:
            current, generation = store.load(), store.next_generation_id()
            mask = runtime.masks.of(store, current)
            new = store.latest_generation() is None
            desired = replace(desired, cluster=store.keyed(desired.cluster))
    else:  # the key the first apply makes is not known yet: any other key compares alike
        desired = replace(desired, cluster=keyed_cluster(desired.cluster, secrets.token_bytes(32)))
    mask = mask.also(desired.cluster.services)  # the file's secrets, new ones included
    gone = tuple(removals(current, desired.cluster))
    admitted = _admitted(current, file, desired.cluster, location, generation, prune=prune)
    desired = admissible(admitted, desired)
    _known_hosts(desired, lose)
    plan, sim, result = await _simulated(desired, admitted, runtime, mask, lose=lose)
    observed = result.observed
    if new:  # a new store: what runs may be another store's (its own id, if kept, owns)
        own = admitted.controller or existing_controller_id(location) or NO_ID_YET
        known = replace(admitted, controller=own)
        _refuse_foreign(known, observed, desired.cluster, file, adopt=adopt)
    document = plan_document(current, desired.cluster, sim, lost=lose, removals=gone, mask=mask)
    loads = route_loads(plan.routes, result.rendered, observed.proxies)  # the pass's render
    scaled = autoscale_notes(plan.state, desired.cluster)
    document = replace(document, routes=loads, autoscale=scaled)
    code = ExitCode.FAILED if lose and not document.converged else ExitCode.OK
    probes = failed_probes(observed)
    said = tuple(backup_lines(desired.cluster.services, runtime.clock.now()))
    return PlanOutcome(
        plan, code, gone, prune, document, tuple(mask(p) for p in probes), schedules=said
    )


async def _simulated(
    desired: Desired,
    state: ControllerState,
    runtime: Runtime,
    mask: Masker,
    *,
    lose: tuple[str, ...] = (),
    drain: tuple[str, ...] = (),
) -> tuple[Plan, Simulation, PassResult]:
    """Observe the fleet, then simulate every pass from `state` (with the what-ifs): the
    first pass's plan (masked), the simulation, and the first pass (what was observed,
    the proxies' configs rendered)."""
    async with connected(runtime) as executor:
        result = await decide_pass(
            desired.cluster, desired.inventory, state, executor, clock=runtime.clock.now
        )
    now = runtime.clock.now()
    sim = simulate(
        desired.cluster, desired.inventory, result.observed, state, now, lose=lose, drain=drain
    )
    return mask.plan(result.plan), sim, result


def _known_hosts(desired: Desired, hosts: tuple[str, ...]) -> None:
    for name in hosts:
        if desired.inventory.host(name) is None:
            known = [h.name for h in desired.inventory.hosts]
            raise unknown("host", name, known, where=f"--lose {name}")


async def apply(
    file: Path,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    prune: bool = False,
    adopt: bool = False,
    retry: bool = False,
    inventory: Path | None = None,
) -> ApplyOutcome:
    """Validate FILE, store it as the next generation (rollouts start for changed specs),
    then converge. An update this generation started that was rolled back fails it; the
    spec of an update rolled back as failed, applied again, is left as it is (exit 1,
    saying so) unless `retry` starts that update again.
    Refused (nothing stored): a file of another cluster than the store's; removing
    services without `prune`; a new store finding another store's tasks running, without
    `adopt`. The file the latest generation already holds stores nothing new. A store
    that holds another cluster keeps this one beside it (minidock.usecases.clusters)."""
    desired = load_spec(file, inventory)
    cluster = desired.cluster
    location = home(directory, cluster.name)
    fresh = not adopt and not has_state(location)
    own = (existing_controller_id(location) or NO_ID_YET) if fresh else ""  # a bad path: refused
    async with connected(runtime) as executor:
        if fresh:
            await _look_first(desired, executor, runtime, file, own)
        async with writing(location, runtime.clock, Writer.OPERATOR, runtime.notice) as store:
            desired, generation, declined = await _store_next(
                store,
                desired,
                executor,
                runtime,
                report,
                file,
                directory,
                location,
                prune=prune,
                adopt=adopt,
                retry=retry,
            )
            convergence = await converge_passes(
                store, desired, runtime, report, wait=wait, timeout=timeout, executor=executor
            )
            failed = _declined(declined, file) or _failed(failed_updates(store.load(), generation))
    return ApplyOutcome(generation, convergence, failed)


async def _store_next(
    store: Store,
    desired: Desired,
    executor: Executor,
    runtime: Runtime,
    report: Report,
    file: Path,
    directory: StateLocation,
    location: StateLocation,
    *,
    prune: bool,
    adopt: bool,
    retry: bool,
) -> tuple[Desired, int, list[tuple[str, str]]]:
    """Admit the file as the next generation (or the latest one again, unchanged), adopt
    what runs on a new store, build its images, store it and report it: the desired state
    to converge, its generation, and the failed updates `retry` was not given for."""
    cluster = store.keyed(desired.cluster)  # the spec hash takes its secrets keyed, never clear
    desired = replace(desired, cluster=cluster)
    before = store.load()
    latest = store.latest_generation()
    unchanged = latest is not None and latest[1] == cluster
    generation = latest[0] if unchanged and latest else store.next_generation_id()
    declined = [] if retry else declined_retries(before, cluster)
    admitted = _admitted(before, file, cluster, location, generation, prune=prune, retry=retry)
    own = admitted.controller or controller_id(directory)
    admitted = replace(admitted, controller=own)
    desired = admissible(admitted, desired)
    notes = _rekeyed(before, cluster, file)
    if latest is None:  # a new store: what runs may be another store's
        admitted, adopted = await _adoption(admitted, desired, executor, runtime, file, adopt=adopt)
        notes += adopted
    await build_images(cluster, runtime, file, report)  # before anything is stored
    now = runtime.clock.now()
    _store_generation(store, before, admitted, file, cluster, now, unchanged=unchanged, retry=retry)
    warned = (*secret_env_warnings(cluster, str(file)), *notes)
    report(
        GenerationStored(
            generation, cluster.name, len(cluster.services), directory, not unchanged, warned
        )
    )
    return desired, generation, declined


def _failed(updates: list[tuple[str, str]]) -> tuple[FailedUpdate, ...]:
    return tuple(FailedUpdate(name, why) for name, why in updates)


def _declined(declined: list[tuple[str, str]], file: Path) -> tuple[FailedUpdate, ...]:
    """The services whose failed update the apply did not start again, each saying so."""
    return tuple(
        FailedUpdate(
            name,
            f"this spec was rolled back as failed ({why}); applying it again changes "
            f"nothing: `minidock apply {file} --retry` starts the update again",
        )
        for name, why in declined
    )


def _admitted(
    state: ControllerState,
    file: Path,
    cluster: Cluster,
    directory: StateLocation,
    generation: int,
    *,
    prune: bool,
    retry: bool = False,
) -> ControllerState:
    """The state `apply FILE` would store, after what both `apply` and `plan` refuse (one
    code for both): another cluster's file, removing services without `prune`."""
    _refuse_removals(state, file, cluster, directory, prune=prune)
    return admit(state, cluster, generation, prune=prune, retry=retry)


def _refuse_removals(
    state: ControllerState, file: Path, cluster: Cluster, directory: StateLocation, *, prune: bool
) -> None:
    """Refuse another cluster's file, and removing services without `prune`."""
    _same_cluster(state, file, cluster, directory)
    gone = removals(state, cluster)
    if gone and not prune:
        raise BadInput(
            f"{file} no longer names {_services(gone)}: `minidock apply {file} --prune` "
            "removes them (dependents first); nothing was changed"
        )


def _store_generation(
    store: Store,
    before: ControllerState,
    admitted: ControllerState,
    file: Path,
    cluster: Cluster,
    now: float,
    *,
    unchanged: bool,
    retry: bool = False,
) -> None:
    """Commit the applied file as the next generation, or, unchanged, only what the same
    spec again did (it resumes a paused rollout, or with `retry` starts again an update
    that was rolled back as failed)."""
    if unchanged:
        if admitted != before:
            again = "retried" if retry else "resumed"
            events = [Event(now, "apply", f"{file} again: {again}")]
            store.commit(admitted, events + rollouts_started(before, admitted, now))
        return
    generation = admitted.generation
    events = [Event(now, "apply", f"applied {file} as generation {generation}")]
    events += rollouts_started(before, admitted, now)
    store.commit(admitted, events, generation=cluster, source_path=str(file.resolve()))


async def _adoption(
    admitted: ControllerState,
    desired: Desired,
    executor: Executor,
    runtime: Runtime,
    file: Path,
    *,
    adopt: bool,
) -> tuple[ControllerState, tuple[str, ...]]:
    """A new store looks before it acts: tasks of its cluster that another store's
    controller started are adopted only with `adopt` (state loss, recovered on purpose);
    with a line per secret-bearing service whose adopted tasks roll once (`_relabelled`)."""
    result = await decide_pass(
        desired.cluster, desired.inventory, admitted, executor, clock=runtime.clock.now
    )
    foreign = _refuse_foreign(admitted, result.observed, desired.cluster, file, adopt=adopt)
    adopted = replace(admitted, adopted=tuple(sorted({*admitted.adopted, *foreign})))
    return adopted, _relabelled(result.observed, desired.cluster, file) if foreign else ()


_WHY_KEYED = "the new labels reveal nothing of the values (docs/secrets.md#the-spec-hash)"


def _rekeyed(before: ControllerState, cluster: Cluster, file: Path) -> tuple[str, ...]:
    """A line per service whose secrets are the same as stored but whose stored digest
    is not this state's (an older MiniDock's unkeyed one, or another key's: a state
    migrated to a store with another key file): its tasks roll once."""
    lines = []
    for svc in cluster.services:
        ss = before.services.get(svc.name)
        old = None if ss is None else ss.spec
        if old is None or old.secret_digest == svc.secret_digest:
            continue
        if replace(old, secret_digest=svc.secret_digest) == svc:
            how = (
                "under another state's key (a state migrated without its key file)"
                if old.secret_digest
                else "by an older MiniDock from an unkeyed digest of the secrets"
            )
            lines.append(
                f"{file}: services.{svc.name}: its tasks roll once: their label was made "
                f"{how}; {_WHY_KEYED}"
            )
    return tuple(lines)


def _relabelled(observed: Observed, cluster: Cluster, file: Path) -> tuple[str, ...]:
    """A line per secret-bearing service with adopted tasks whose label is not this
    state's: their secrets' digest was keyed by the lost state's key, so they roll once."""
    names = {
        c.service
        for c in observed.containers()
        if c.cluster == cluster.name
        and (svc := cluster.service(c.service)) is not None
        and svc.secret_digest
        and c.spec != svc.spec_hash()
    }
    return tuple(
        f"{file}: services.{name}: its adopted tasks roll once: their label digests the "
        f"secrets under the lost state's key, which this state cannot check; {_WHY_KEYED}"
        for name in sorted(names)
    )


def _refuse_foreign(
    admitted: ControllerState, observed: Observed, cluster: Cluster, file: Path, *, adopt: bool
) -> dict[str, int]:
    """A new store's refusal (for `apply` and `plan` alike) of tasks of its cluster that
    another store's controller runs, unless `adopt`; the count per controller."""
    foreign = foreign_controllers(admitted, observed, cluster.name)
    if foreign and not adopt:
        raise BadInput(
            f"{_count(foreign)} of cluster {cluster.name} belong to another state "
            f"store's controller ({', '.join(sorted(foreign))}): `minidock apply {file} "
            "--adopt` takes them over; or use that store (--state DIR or MINIDOCK_STATE)"
        )
    return foreign


NO_ID_YET = "-"  # the controller id of a store that has none yet: no task carries it


async def _look_first(
    desired: Desired, executor: Executor, runtime: Runtime, file: Path, own: str
) -> None:
    """Before a new store is created (its directory, its controller id `own`), the
    adoption check it would make: a refused apply leaves nothing behind."""
    state = replace(admit(ControllerState(), desired.cluster, 1), controller=own)
    await _adoption(state, desired, executor, runtime, file, adopt=False)  # refuses, or no-op


def _count(per_controller: dict[str, int]) -> str:
    n = sum(per_controller.values())
    return f"{n} running task" + ("s" if n != 1 else "")


def _same_cluster(
    state: ControllerState, file: Path, cluster: Cluster, directory: StateLocation
) -> None:
    """A cluster's store never switches cluster (an apply of another cluster's file that
    raced this one to an empty store): the other one's tasks would run on, unseen."""
    if state.cluster and state.cluster != cluster.name:
        raise BadInput(
            f"{directory} now holds cluster {state.cluster!r}, applied meanwhile; {file} is "
            f"cluster {cluster.name!r}: apply it again and it goes beside it"
        )


def _services(names: list[str]) -> str:
    return ("service " if len(names) == 1 else "services ") + ", ".join(names)


async def drain_plan(
    host: str, directory: StateLocation, runtime: Runtime, *, cluster: str | None = None
) -> PlanOutcome:
    """`minidock drain HOST --plan`: where every task of HOST would land (or why it
    cannot), simulated from the stored desired state; nothing is changed. Exit 1 when
    something would stay pending or run below its replicas. One cluster's plan: with
    several that know HOST, `cluster` names it."""
    require_applied(directory)
    knowing = knowing_host(directory, cluster, host)
    if len(knowing) > 1:
        names = ", ".join(h.name for h in knowing)
        raise BadInput(f"{host} is a host of clusters {names}: plan one with --cluster NAME")
    directory = knowing[0].location
    with reading(directory) as store:
        state = store.load()
        desired = admissible(state, read_desired(store, directory))
        mask = runtime.masks.of(store, state)
    if desired.inventory.host(host) is None and state.host(host).last_known is None:
        known = [h.name for h in desired.inventory.hosts]
        raise unknown("host", host, known, where=str(desired.inventory.path))
    plan, sim, _ = await _simulated(desired, state, runtime, mask, drain=(host,))
    running = _as_running(state, desired.cluster)
    document = plan_document(state, running, sim, drained=(host,), mask=mask)
    code = ExitCode.OK if document.converged else ExitCode.FAILED
    return PlanOutcome(plan, code, document=document)


def _as_running(state: ControllerState, cluster: Cluster) -> Cluster:
    """The cluster with each service's spec as the state runs it (after an automatic
    rollback, the rolled-back spec, not the generation's): a drain changes no spec, so
    its plan shows no spec change."""
    specs = {name: ss.spec for name, ss in state.services.items()}
    return replace(cluster, services=tuple(specs.get(s.name, s) for s in cluster.services))


def too_many_replicas(service: str, given: str) -> str:
    """`scale SERVICE=N` refused with N over `MAX_REPLICAS`, before anything is stored."""
    return (
        f"scale {service}={given}: replicas must be at most {MAX_REPLICAS} "
        f"(docs/formats.md#at-most-1000-replicas): give {service}={MAX_REPLICAS} or fewer"
    )


async def scale(
    service: str,
    replicas: int,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> ScaleOutcome:
    """`scale SERVICE=N`: the count of the spec SERVICE runs (after a rollback, the
    rolled-back-to spec, never the one it left; core.scale), stored as the next
    generation with that spec, then converged. The cluster file is not rewritten: the
    next `apply FILE` sets what the file says."""
    if replicas < 0:
        raise BadInput(f"scale {service}={replicas}: replicas must be 0 or more")
    if replicas > MAX_REPLICAS:
        raise BadInput(too_many_replicas(service, str(replicas)))
    require_applied(directory)
    store_root, directory = directory, one(directory, cluster, service)
    async with writing(directory, runtime.clock, Writer.OPERATOR, runtime.notice) as store:
        desired = read_desired(store, directory)
        before = store.load()
        ss = before.services.get(service)
        if desired.cluster.service(service) is None or ss is None or ss.removed:
            raise unknown("service", service, [s.name for s in desired.cluster.services])
        old = ss.spec
        policy = old.autoscale
        if policy is not None and policy.bounded(replicas) != replicas:
            raise BadInput(
                f"scale {service}={replicas}: {service} is autoscaled within "
                f"{policy.min}..{policy.max} (docs/autoscale.md): give a count within them, "
                "or change autoscale in the file"
            )
        generation = store.next_generation_id()
        admitted = scale_service(before, service, replicas, generation)
        scaled = scaled_cluster(admitted, desired.cluster, service)
        was = ss.replicas()
        message = f"scaled {service} from {was} to {replicas} as generation {generation}"
        event = Event(runtime.clock.now(), "scale", message, service)
        store.commit(admitted, [event], generation=scaled, source_path=f"scale {service}")
        services = len(scaled.services)
        report(GenerationStored(generation, scaled.name, services, store_root))
        convergence = await converge_passes(
            store, Desired(scaled, desired.inventory), runtime, report, wait=wait, timeout=timeout
        )
    return ScaleOutcome(service, was, replicas, generation, convergence)
