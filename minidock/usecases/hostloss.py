"""What a lost host's pinned slots can be restored from: the newest snapshot of each, as
`minidock forget HOST` records it (docs/backups.md#never-empty-by-surprise).

The pure core must know whether a snapshot of a slot exists without I/O: `forget` lists
the repository here (restic, on the controller) before it records anything, and hands
the core one fact per slot, "ID of TIME" (`core.forget`'s `snapshots`), which the slot's
record keeps (`awaiting_restore`) until a restore or `restore --empty` clears it. A
repository that cannot be listed is said so and counts as no snapshot (the slot starts
afresh, as before): a forget is for a host gone for good and must not hang on restic.
"""

from __future__ import annotations

from datetime import UTC, datetime

from minidock import restic
from minidock.core import ControllerState
from minidock.restic import ResticError, Snapshot
from minidock.usecases.access import Desired
from minidock.usecases.outcomes import BadInput
from minidock.usecases.repositories import epoch, repository_of

__all__ = ["newest_snapshots", "shown"]


def shown(snapshot: Snapshot) -> str:
    """A snapshot as a slot's record and its lines show it: `4f2a9c1e of 2026-12-05 03:00
    UTC`."""
    at = datetime.fromtimestamp(epoch(snapshot.time), UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{snapshot.short_id} of {at} UTC"


async def newest_snapshots(
    state: ControllerState, desired: Desired, host: str
) -> tuple[dict[tuple[str, int], str], list[str]]:
    """The newest snapshot (`shown`) of each pinned slot recorded on `host`, by (service,
    slot), and a line for each repository that could not be listed."""
    found: dict[tuple[str, int], str] = {}
    problems: list[str] = []
    for spec in desired.cluster.services:
        ss = state.services.get(spec.name)
        if ss is None or not spec.pinned:
            continue
        numbers = sorted(n for n, r in ss.slots.items() if r.host == host)
        if not numbers:
            continue
        try:
            _, repo = repository_of(spec, desired.inventory)
        except BadInput:
            continue  # no repository: no snapshot
        tags = {"cluster": desired.cluster.name, "service": spec.name}
        try:
            listed = await restic.snapshots(repo, tags)
        except ResticError as exc:
            problems.append(f"{spec.name}: its backups could not be listed: {repo.mask(str(exc))}")
            continue
        for n in numbers:
            mine = [s for s in listed if s.tag("slot") == str(n)]
            if mine:
                found[(spec.name, n)] = shown(max(mine, key=lambda s: epoch(s.time)))
    return found, problems
