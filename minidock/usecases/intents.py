"""An operator's word on the stored state (drain, activate, rollback, reset): check it,
record it with an `intent` event, then converge. A refused word changes nothing."""

from __future__ import annotations

from collections.abc import Callable

from minidock import core
from minidock.core import ControllerState
from minidock.model import Event, Inventory
from minidock.store import StateLocation
from minidock.usecases.access import Desired, Writer, read_desired, require_applied, writing
from minidock.usecases.outcomes import BadInput, IntentOutcome, IntentRecorded, Report
from minidock.usecases.passes import converge_passes
from minidock.usecases.runtime import Runtime

Change = Callable[[ControllerState, Desired], ControllerState]  # may raise BadInput


async def _intent(
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    change: Change,
    message: str,
    *,
    wait: bool,
    timeout: float,
) -> IntentOutcome:
    require_applied(directory)
    async with writing(directory, runtime.clock, Writer.OPERATOR) as store:
        desired = read_desired(store, directory)
        changed = change(store.load(), desired)
        store.commit(changed, [Event(runtime.clock.now(), "intent", message)])
        report(IntentRecorded(message))
        convergence = await converge_passes(
            store, desired, runtime, report, wait=wait, timeout=timeout
        )
    return IntentOutcome(message, convergence)


def _known_host(inventory: Inventory, host: str) -> None:
    if inventory.host(host) is None:
        known = ", ".join(h.name for h in inventory.hosts)
        raise BadInput(f"{inventory.path}: unknown host {host!r}; known hosts: {known}")


def _known_service(state: ControllerState, service: str) -> None:
    if service not in state.services:
        known = ", ".join(state.services) or "none"
        raise BadInput(f"unknown service {service!r}; known services: {known}")


async def drain(
    host: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = True,
    timeout: float = 0.0,
) -> IntentOutcome:
    """Move every task off HOST (replacements first) and keep it empty."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        _known_host(desired.inventory, host)
        return core.set_drained(state, host, True)

    return await _intent(
        directory, runtime, report, change, f"draining {host}", wait=wait, timeout=timeout
    )


async def activate(
    host: str, directory: StateLocation, runtime: Runtime, report: Report
) -> IntentOutcome:
    """Let a drained HOST take tasks again (running tasks are not moved back); one pass."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        _known_host(desired.inventory, host)
        return core.set_drained(state, host, False)

    return await _intent(
        directory, runtime, report, change, f"activated {host}", wait=False, timeout=0.0
    )


async def rollback(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
) -> IntentOutcome:
    """Go back to SERVICE's previous spec, rolled out like an update."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        _known_service(state, service)
        try:
            return core.rollback(state, service)
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    return await _intent(
        directory, runtime, report, change, f"rolling back {service}", wait=wait, timeout=timeout
    )


async def reset(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
) -> IntentOutcome:
    """Clear SERVICE's crash-loop Failed slots and backoff timers."""

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        _known_service(state, service)
        return core.reset(state, service)

    return await _intent(
        directory, runtime, report, change, f"reset {service}", wait=wait, timeout=timeout
    )
