"""Mermaid state diagrams of the core's machines, generated from their transition tables.

docs/architecture.md embeds the output of `python -m minidock.core.diagram` between
`<!-- machines -->` markers; tests/unit/test_machines.py fails when they disagree.

Where an input moves *every* phase of a group to the same place (the slot machine is
level-based: whatever a pass observes, it believes), the edge is drawn once, from the
group; a phase of the group that an input leaves as it is gets a note instead.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from minidock.core import backing, hosts, rollout, slots, traffic, volumes
from minidock.core.state import RolloutPhase

__all__ = ["MACHINES", "Machine", "diagrams", "mermaid"]

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


@dataclass(frozen=True)
class Machine:
    """One of the core's machines as the docs show it: `name` is its row in
    docs/architecture.md's machine table, `title` its diagram's heading, `table` its
    transition table as its module holds it (a value may carry more than the next phase: the
    probe's says which event it is), `start` the phase a record is born in."""

    name: str
    title: str
    table: Mapping[tuple[Any, Any], Any]
    start: StrEnum
    group: tuple[StrEnum, ...] = ()
    group_name: str = ""

    @property
    def phases(self) -> type[StrEnum]:
        """The machine's phase enum."""
        return type(self.start)

    def diagram(self) -> str:
        moves = {key: nxt[0] if isinstance(nxt, tuple) else nxt for key, nxt in self.table.items()}
        return mermaid(self.title, moves, self.start, group=self.group, group_name=self.group_name)


MACHINES = (
    Machine(
        "host phase", "Host phase (this pass's probe)", hosts.PROBE_TABLE, hosts.HostPhase.READY
    ),
    Machine(
        "host availability",
        "Host availability (the operator's word)",
        hosts.AVAILABILITY_TABLE,
        hosts.Availability.ACTIVE,
    ),
    Machine(
        "slot",
        "Slot",
        slots.TABLE,
        slots.SlotPhase.EMPTY,
        group=tuple(p for p in slots.SlotPhase if p not in slots.TERMINAL),
        group_name="open",
    ),
    Machine("rollout", "Rollout", rollout.TABLE, RolloutPhase.NONE),
    Machine(
        "task traffic",
        "Task traffic (routed services)",
        traffic.TABLE,
        traffic.TrafficPhase.UNROUTED,
    ),
    Machine(
        "backup",
        "Backup (a slot's, core/backing.py)",
        backing.TABLE,
        backing.BackupPhase.HOOKING,
    ),
    Machine(
        "volume move",
        "Volume move (a slot's, core/volumes.py)",
        volumes.TABLE,
        volumes.MovePhase.STOPPING,
    ),
)


def diagrams() -> str:
    """Every machine's diagram, in the order docs/architecture.md shows them."""
    return "\n\n".join(m.diagram() for m in MACHINES) + "\n"


if __name__ == "__main__":
    print(diagrams(), end="")
