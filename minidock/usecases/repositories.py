"""A service's backup repository, and restic's times: what the backup, restore and
forget use cases share (minidock.usecases.backups, restores, hostloss)."""

from __future__ import annotations

import re
from datetime import datetime

from minidock.model import BackupPolicy, Inventory, Service
from minidock.restic import Repository
from minidock.spec import SpecError
from minidock.spec.backup import password_value
from minidock.usecases.outcomes import BadInput

__all__ = ["epoch", "repository_of"]


def repository_of(spec: Service, inventory: Inventory) -> tuple[BackupPolicy, Repository]:
    """The service's backup policy (its own, else the inventory's `[backup]`) and its
    repository, the password read now; BadInput when neither names one."""
    policy = spec.backup or inventory.backup
    if policy is None:
        raise BadInput(
            f"{spec.name} has no backup repository: give it backup = {{ repository = ..., "
            "password = { file = ... } }, or [backup] in the inventory"
        )
    try:
        return policy, Repository(policy.repository, password_value(policy))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def epoch(rfc3339: str) -> float:
    """restic's time (`2026-12-03T03:00:04.405049187Z`, or an offset) as epoch seconds."""
    found = _RFC3339.fullmatch(rfc3339)
    if found is None:
        return 0.0
    zone = "+00:00" if found[3] == "Z" else found[3]
    whole = datetime.fromisoformat(found[1] + zone).timestamp()
    return whole + (float("0." + found[2]) if found[2] else 0.0)


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")
