"""Mermaid state diagrams of the core's machines, generated from their transition tables.

docs/architecture.md embeds the output of `python -m minidock.core.diagram` between
`<!-- machines -->` markers; tests/unit/test_machines.py fails when they disagree.

Where an input moves *every* phase of a group to the same place (the slot machine is
level-based: whatever a pass observes, it believes), the edge is drawn once, from the
group; a phase of the group that an input leaves as it is gets a note instead.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import TypeVar

from minidock.core import backing, hosts, rollout, slots, traffic
from minidock.core.state import RolloutPhase

__all__ = ["diagrams", "mermaid"]

P = TypeVar("P", bound=StrEnum)  # a machine's phases
In = TypeVar("In", bound=StrEnum)  # its inputs


def mermaid(
    title: str,
    table: Mapping[tuple[P, In], P],
    start: P,
    *,
    group: Collection[P] = (),
    group_name: str = "",
) -> str:
    """One `stateDiagram-v2` block: an edge per phase change, labelled by its inputs."""
    edges: dict[tuple[str, str], list[str]] = {}
    ignored: dict[str, list[str]] = {}
    inputs = list(dict.fromkeys(given for _, given in table))
    for given in inputs:
        drawn = _from_group(table, given, group)
        if drawn is not None:
            edges.setdefault((group_name, drawn.value), []).append(given.value)
            for phase in group:
                if table[(phase, given)] == phase != drawn:
                    ignored.setdefault(phase.value, []).append(given.value)
        for (phase, g), nxt in table.items():
            if g == given and nxt != phase and (drawn is None or phase not in group):
                edges.setdefault((phase.value, nxt.value), []).append(given.value)
    lines = [f"### {title}", "", "```mermaid", "stateDiagram-v2", f"    [*] --> {start.value}"]
    if group:
        lines.append(f"    state {group_name} {{")
        lines += [f"        {phase.value}" for phase in group]
        lines.append("    }")
    lines += [f"    {src} --> {dst}: {', '.join(labels)}" for (src, dst), labels in edges.items()]
    lines += [f"    note right of {p}: stays on {', '.join(why)}" for p, why in ignored.items()]
    return "\n".join([*lines, "```"])


def _from_group(table: Mapping[tuple[P, In], P], given: In, group: Collection[P]) -> P | None:
    """The phase `given` takes every member of `group` to (members may stay), if there is
    one such phase and it is reached from most of the group; else None."""
    if not group:
        return None
    targets = {table[(p, given)] for p in group if table[(p, given)] != p}
    if len(targets) != 1:
        return None
    (target,) = targets
    moved = sum(1 for p in group if table[(p, given)] == target)
    return target if moved * 2 > len(group) else None


def diagrams() -> str:
    """Every machine's diagram, in the order docs/architecture.md shows them."""
    probe = {key: nxt for key, (nxt, _) in hosts.PROBE_TABLE.items()}
    open_slots = [p for p in slots.SlotPhase if p not in slots.TERMINAL]
    blocks = [
        mermaid("Host phase (this pass's probe)", probe, hosts.HostPhase.READY),
        mermaid(
            "Host availability (the operator's word)",
            hosts.AVAILABILITY_TABLE,
            hosts.Availability.ACTIVE,
        ),
        mermaid(
            "Slot",
            slots.TABLE,
            slots.SlotPhase.EMPTY,
            group=open_slots,
            group_name="open",
        ),
        mermaid("Rollout", rollout.TABLE, RolloutPhase.NONE),
        mermaid("Task traffic (routed services)", traffic.TABLE, traffic.TrafficPhase.UNROUTED),
        mermaid("Backup (a slot's, core/backing.py)", backing.TABLE, backing.BackupPhase.HOOKING),
    ]
    return "\n\n".join(blocks) + "\n"


if __name__ == "__main__":
    print(diagrams(), end="")
