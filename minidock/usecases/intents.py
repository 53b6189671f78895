"""An operator's word on the stored state (drain, activate, rollback, reset): check it,
record it with an `intent` event, then converge. A refused word changes nothing."""

from __future__ import annotations

from collections.abc import Callable

from minidock import core
from minidock.core import ControllerState
from minidock.core.hosts import engines_known
from minidock.core.rebalance import moves as rebalance_moves
from minidock.core.rebalance import record as record_moves
from minidock.core.serving import SERVING, Serving, ServingMode, ended, in_maintenance, paused
from minidock.model import Event
from minidock.observe import observe, observe_host, told_engines
from minidock.store import StateLocation
from minidock.usecases.access import (
    Desired,
    Writer,
    admissible,
    read_desired,
    reading,
    require_applied,
    writing,
)
from minidock.usecases.clusters import one
from minidock.usecases.common import (
    known_host,
    known_service,
    of_host,
    of_service,
    record_intent,
)
from minidock.usecases.hostloss import newest_snapshots
from minidock.usecases.outcomes import (
    BadInput,
    IntentOutcome,
    IntentRecorded,
    RebalanceOutcome,
    Report,
)
from minidock.usecases.passes import converge_passes
from minidock.usecases.runtime import Runtime, connected


async def drain(
    host: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = True,
    timeout: float = 0.0,
    move_volumes: bool = False,
    cluster: str | None = None,
) -> IntentOutcome:
    """Move every task off HOST (replacements first) and keep it empty. Tasks pinned there
    by a named volume are refused (their data stays) unless `move_volumes`."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_host(desired.inventory, host, state)
        pinned = core.pinned_on(state, host)
        if pinned and not move_volumes:
            raise BadInput(
                f"{host} carries (or a move brings) {', '.join(pinned)}, which keep their "
                "named volumes there: "
                f"a drain would leave their data behind; `minidock move {pinned[0]} --to HOST` "
                f"moves each with its data first, `minidock drain {host} --move-volumes-unsafe` "
                "without it (they start with empty volumes)"
            )
        return core.set_drained(state, host, True, move_volumes=move_volumes)

    return await record_intent(
        of_host(directory, cluster, host),
        runtime,
        report,
        change,
        f"draining {host}",
        wait=wait,
        timeout=timeout,
    )


async def forget(
    host: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    cluster: str | None = None,
) -> IntentOutcome:
    """HOST is gone for good: the tasks that ran on it are recorded as lost and refilled
    elsewhere (those of `on_host_loss = "wait"` services too), and the inventory may drop
    it; a pinned slot of which a snapshot exists waits for `minidock restore` instead
    (usecases/hostloss.py). HOST is probed first (by the inventory's details, else its last
    known ones): a host that answers now is refused, whatever the stored state says: drain
    it instead."""

    snapshots: dict[tuple[str, int], str] = {}

    async def answers_now(state: ControllerState, desired: Desired) -> None:
        known_host(desired.inventory, host, state)
        details = desired.inventory.host(host) or state.host(host).last_known
        assert details is not None  # known_host: listed, or known to the state
        async with connected(runtime) as executor:
            probe = await observe_host(executor, details, desired.cluster.name, ports=False)
        if probe.ok:
            raise BadInput(
                f"{host} answered now: `minidock drain {host}` moves its tasks; "
                "forget is for a host that is gone for good"
            )
        found, _ = await newest_snapshots(state, desired, host)  # never empty by surprise
        snapshots.update(found)

    def change(state: ControllerState, desired: Desired) -> tuple[ControllerState, list[Event]]:
        return core.forget(state, host, runtime.clock.now(), snapshots)

    return await record_intent(
        of_host(directory, cluster, host),
        runtime,
        report,
        change,
        f"forgot {host}",
        wait=False,
        timeout=0.0,
        check=answers_now,
    )


async def activate(
    host: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    cluster: str | None = None,
) -> IntentOutcome:
    """Let a drained HOST take tasks again (running tasks are not moved back); one pass.
    A host that no cluster has drained is said to be so (and stays as it was)."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_host(desired.inventory, host, state)
        return core.set_drained(state, host, False)

    targets = of_host(directory, cluster, host)
    drained = any(_drained(h.location, host) for h in targets)
    message = f"activated {host}" if drained else f"{host} was not drained: nothing to activate"
    return await record_intent(targets, runtime, report, change, message, wait=False, timeout=0.0)


def _drained(location: StateLocation, host: str) -> bool:
    with reading(location) as store:
        return store.load().host(host).drained


async def rollback(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    force: bool = False,
    cluster: str | None = None,
) -> IntentOutcome:
    """Go back to SERVICE's previous spec, rolled out like an update; never to a spec that
    was itself rolled back as failed, unless `force`."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_service(state, service)
        try:
            return core.rollback(state, service, force=force)
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    return await record_intent(
        of_service(directory, cluster, service),
        runtime,
        report,
        change,
        f"rolling back {service}",
        wait=wait,
        timeout=timeout,
    )


async def promote(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> IntentOutcome:
    """Promote SERVICE's canary: as soon as every canary task is ready, its slots are done
    and the rolling update goes on (docs/rollouts.md#canary). Refused without a canary."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_service(state, service)
        try:
            return core.promote(state, service)
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    return await record_intent(
        of_service(directory, cluster, service),
        runtime,
        report,
        change,
        f"promoting the canary of {service}",
        wait=wait,
        timeout=timeout,
    )


async def reset(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> IntentOutcome:
    """Clear SERVICE's crash-loop Failed slots and backoff timers."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_service(state, service)
        return core.reset(state, service)

    return await record_intent(
        of_service(directory, cluster, service),
        runtime,
        report,
        change,
        f"reset {service}",
        wait=wait,
        timeout=timeout,
    )


async def rebalance(
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    service: str = "",
    plan_only: bool = False,
    wait: bool = True,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> RebalanceOutcome:
    """Moves that restore spread and bin-packing (after a host rejoins or joins), carried
    out one at a time, start-first and health-gated; with `plan_only`, only listed. Never
    runs by itself. In one cluster: `cluster`, else the one with SERVICE, else the only."""
    require_applied(directory)
    directory = one(directory, cluster, service or None)
    async with writing(directory, runtime.clock, Writer.OPERATOR, runtime.notice) as store:
        state = store.load()
        if service:
            known_service(state, service)
        desired = admissible(state, read_desired(store, directory))
        async with connected(runtime) as executor:
            memory = told_engines(engines_known(state.hosts, runtime.clock.now()))
            hosts = desired.inventory.hosts
            seen = await observe(executor, hosts, desired.cluster.name, memory=memory)
            planned = rebalance_moves(state, desired.inventory, seen, service)
            if plan_only or not planned:
                return RebalanceOutcome(planned, None)
            changed, events = record_moves(state, planned, runtime.clock.now())
            store.commit(changed, events)
            report(
                IntentRecorded(
                    f"rebalancing: {len(planned)} move{'' if len(planned) == 1 else 's'}"
                )
            )
            convergence = await converge_passes(
                store, desired, runtime, report, wait=wait, timeout=timeout, executor=executor
            )
    return RebalanceOutcome(planned, convergence)


async def maintenance(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    on: bool,
    message: str = "",
    cluster: str | None = None,
) -> IntentOutcome:
    """SERVICE's routes answer 503 with a page of `message` and `Retry-After` (`on`), or
    serve again (off); one pass loads the proxies. Off for a service not in maintenance
    says so and changes nothing."""
    if on:
        return await _serving(
            service, directory, runtime, report, lambda now: in_maintenance(message, now),
            f"{service} in maintenance", cluster,
        )  # fmt: skip
    return await _ending(service, directory, runtime, report, Serving.MAINTENANCE, cluster)


async def pause(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    timeout: float,
    cluster: str | None = None,
) -> IntentOutcome:
    """SERVICE's routes hold each new request until `resume`, or until it has waited
    `timeout`, then send it to the tasks; one pass loads the proxies."""
    line = f"{service} paused: its routes hold each new request up to {timeout:g}s"
    return await _serving(
        service, directory, runtime, report, lambda now: paused(timeout, now), line, cluster
    )


async def resume(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    cluster: str | None = None,
) -> IntentOutcome:
    """SERVICE's paused routes serve again: the requests they hold go to the tasks. A
    service that is not paused is said to be so (and stays as it was)."""
    return await _ending(service, directory, runtime, report, Serving.PAUSED, cluster)


async def _serving(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    mode: Callable[[float], ServingMode],
    message: str,
    cluster: str | None,
) -> IntentOutcome:
    """Record SERVICE's routes' new mode (refused for an unknown service or one with no
    route), then one pass."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_service(state, service)
        try:
            return core.set_serving(state, service, mode(runtime.clock.now()))
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    targets = of_service(directory, cluster, service)
    return await record_intent(targets, runtime, report, change, message, wait=False, timeout=0.0)


async def _ending(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    serving: Serving,
    cluster: str | None,
) -> IntentOutcome:
    """`maintenance off` (MAINTENANCE) or `resume` (PAUSED): serving again if it was so."""
    targets = of_service(directory, cluster, service)
    with reading(targets[0].location) as store:
        ss = store.load().services.get(service)
    was = ss.serving if ss is not None else SERVING
    back = ended(was, serving)
    word = "in maintenance" if serving is Serving.MAINTENANCE else "paused"
    if back is None:
        message = f"{service} was not {word}: nothing to end"
        if not was.on:
            message += f" (it is {was.serving.value})"
    else:
        message = f"{service} serves again" if serving is Serving.MAINTENANCE else (
            f"{service} resumed: the requests its routes held go to its tasks"
        )  # fmt: skip
    kept = back if back is not None else was
    return await _serving(service, directory, runtime, report, lambda now: kept, message, cluster)
