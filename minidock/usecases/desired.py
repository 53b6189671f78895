"""Use cases on a cluster file: validate it, plan it (a dry run), apply it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from minidock.core import ControllerState, admit, failed_updates, rollouts_started
from minidock.model import Event
from minidock.runner import all_secrets, decide, redacted
from minidock.spec import SpecError, load, load_inventory
from minidock.store import StateLocation
from minidock.usecases.access import Writer, has_state, load_spec, reading, writing
from minidock.usecases.outcomes import (
    ApplyOutcome,
    BadInput,
    FailedUpdate,
    GenerationStored,
    PlanOutcome,
    Report,
    ValidateOutcome,
)
from minidock.usecases.passes import converge_passes
from minidock.usecases.runtime import Runtime, connected


def validate(file: Path) -> ValidateOutcome:
    """Check a cluster file (and its inventory) or an inventory (a file with `hosts`)."""
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
        is_inventory = "hosts" in doc or ("defaults" in doc and "services" not in doc)
    except (OSError, ValueError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        is_inventory = False  # let the loader say what is wrong, in its own words
    try:
        if is_inventory:
            return ValidateOutcome(file, hosts=len(load_inventory(file).hosts))
        cluster, inventory = load(file)
    except SpecError as exc:
        raise BadInput(str(exc)) from None
    return ValidateOutcome(
        file, len(inventory.hosts), cluster=cluster.name, services=len(cluster.services)
    )


async def plan(file: Path, directory: StateLocation, runtime: Runtime) -> PlanOutcome:
    """What `apply FILE` would do now: observe, admit in memory, decide. Writes nothing,
    takes no lock, creates no state directory."""
    desired = load_spec(file)
    current, generation = ControllerState(), 1
    if has_state(directory):
        with reading(directory) as store:
            current, generation = store.load(), store.next_generation_id()
    admitted = admit(current, desired.cluster, generation)
    async with connected(runtime) as executor:
        result = await decide(
            desired.cluster, desired.inventory, admitted, executor, clock=runtime.clock.now
        )
    return PlanOutcome(redacted(result.plan, all_secrets(admitted)))


async def apply(
    file: Path,
    directory: StateLocation,
    runtime: Runtime,
    report: Report,
    *,
    wait: bool = False,
    timeout: float = 0.0,
) -> ApplyOutcome:
    """Validate FILE, store it as the next generation (rollouts start for changed specs),
    then converge. An update this generation started that was rolled back fails it."""
    desired = load_spec(file)
    cluster = desired.cluster
    async with writing(directory, runtime.clock, Writer.OPERATOR) as store:
        generation = store.next_generation_id()
        before = store.load()
        admitted = admit(before, cluster, generation)
        now = runtime.clock.now()
        events = [Event(now, "apply", f"applied {file} as generation {generation}")]
        events += rollouts_started(before, admitted, now)
        store.commit(admitted, events, generation=cluster, source_path=str(file.resolve()))
        report(GenerationStored(generation, cluster.name, len(cluster.services), directory))
        convergence = await converge_passes(
            store, desired, runtime, report, wait=wait, timeout=timeout
        )
        failed = failed_updates(store.load(), generation)
    return ApplyOutcome(
        generation, convergence, tuple(FailedUpdate(name, why) for name, why in failed)
    )
