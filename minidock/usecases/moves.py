"""`minidock move SERVICE.SLOT --to HOST`: a slot's task moved with its named volumes.

The move is recorded as an intent (core/volumes.py) and carried out by the passes that
follow (core/moving.py decides each step, minidock.act.relocate copies): this command's own
passes, or, if it is interrupted or killed, the next `reconcile` or `watch`. At any instant
at most one task of the slot runs, and the source's volumes go only once the target's task
is ready.
"""

from __future__ import annotations

from minidock import core
from minidock.core import ControllerState
from minidock.store import StateLocation
from minidock.usecases.access import Desired
from minidock.usecases.common import known_host, known_service, of_service, record_intent
from minidock.usecases.outcomes import BadInput, IntentOutcome, Report
from minidock.usecases.runtime import Runtime

__all__ = ["move", "parse_slot"]


def parse_slot(given: str, command: str) -> tuple[str, int]:
    """`SERVICE.SLOT` as (service, slot); BadInput naming the form otherwise."""
    service, _, slot = given.rpartition(".")
    if not service or not slot.isdigit() or int(slot) < 1:
        raise BadInput(f"{command}: {given!r} is not SERVICE.SLOT (e.g. db.1)")
    return service, int(slot)


async def move(
    subject: str,
    target: str,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    keep_source: bool = False,
    replace_kept: bool = False,
    wait: bool = True,
    timeout: float = 0.0,
    cluster: str | None = None,
) -> IntentOutcome:
    """Record SUBJECT's (`SERVICE.SLOT`) move to TARGET, then converge: drained and
    stopped, its volumes streamed to TARGET, started there, its old volumes removed
    (unless `keep_source`). A TARGET that keeps the slot's old volume (a failover or
    `forget` left it) is refused unless `replace_kept`."""
    service, slot = parse_slot(subject, "move")

    def change(state: ControllerState, desired: Desired) -> ControllerState:
        known_service(state, service)
        known_host(desired.inventory, target, state)
        if desired.inventory.host(target) is None:
            raise BadInput(f"move: {target} is not in the inventory: a move needs to reach it")
        if state.host(target).drained:
            raise BadInput(f"move: {target} is drained: `minidock activate {target}` first")
        why = state.host(target).why_not_eligible()  # as the last pass found it
        if why is not None:
            raise BadInput(f"move: {target} is not ready ({why}): a move streams into it")
        try:
            return core.begin_move(
                state,
                service,
                slot,
                target,
                runtime.clock.now(),
                keep_source=keep_source,
                replace_kept=replace_kept,
            )
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    return await record_intent(
        of_service(directory, cluster, service),
        runtime,
        report,
        change,
        f"moving {subject} to {target}",
        wait=wait,
        timeout=timeout,
    )
