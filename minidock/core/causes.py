"""The hosts' own failure reasons carried to the top: a pass's failed probes grouped by
cause, with a count, so a guard, a plan or a timeout says why in one line. Pure."""

from __future__ import annotations

from minidock.model import Observed

__all__ = ["failed_probes"]

NAMED = 3  # hosts named in a group; more are counted


def failed_probes(observed: Observed) -> tuple[str, ...]:
    """One line per cause, the most hosts first: `3 of 3 hosts (host1, host2, host3): host
    key unknown: is not in ~/.ssh/known_hosts`. The cause is the probe's own words without
    what names the host (model.HostObservation.cause), so one fault on many hosts is one
    line."""
    by_cause: dict[str, list[str]] = {}
    for name, probe in sorted(observed.hosts.items()):
        if not probe.ok:
            by_cause.setdefault(probe.why_not, []).append(name)
    total = len(observed.hosts)
    groups = sorted(by_cause.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return tuple(f"{len(names)} of {total} hosts ({_named(names)}): {c}" for c, names in groups)


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f", and {len(names) - NAMED} more" if len(names) > NAMED else "")
