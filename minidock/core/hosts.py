"""The host machine: is a host ready, unreachable or down, and may it take tasks. Pure.

Two orthogonal things are known about a host, as in SwarmKit (a node's `Status` and its
`Availability`):

- its **phase**, driven by this pass's probe: `ready` (answered), `unreachable` (failed
  fewer than `down_after` consecutive probes, or its sshd answered and its docker did not
  in time, "slow", which is not counted, its tasks holding their slots, until its docker
  has been silent for SLOW_GRACE: hung is not slow; or its engine answered and is one
  MiniDock does not drive, "refused", never counted: core.engines), `down`
  (failed `down_after` in a row: its tasks are lost);
- its **availability**, the operator's durable word: `active` or `drained`.

`probe_step` and `availability_step` are the only places either changes; the tables below
are the whole machine, and docs/architecture.md's diagrams are generated from them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from minidock.core.evolve import evolve
from minidock.model import Engine, Event, Host, HostObservation

__all__ = [
    "AVAILABILITY_TABLE",
    "PROBE_TABLE",
    "SLOW_GRACE",
    "Availability",
    "HostPhase",
    "HostState",
    "Intent",
    "Probe",
    "SeenTask",
    "availability_step",
    "forgotten",
    "mass_loss",
    "probe_step",
    "silent_too_long",
]


class HostPhase(enum.StrEnum):
    READY = "ready"
    UNREACHABLE = "unreachable"
    DOWN = "down"


class Availability(enum.StrEnum):
    ACTIVE = "active"
    DRAINED = "drained"


class Probe(enum.StrEnum):
    """This pass's probe of a host, classified against its `down_after` count."""

    ANSWERED = "answered"
    FAILED = "failed"  # fewer than down_after failures in a row
    FAILED_LIMIT = "failed down_after times"
    FAILED_HELD = "failed, mass-loss guard holds"
    SLOW = "sshd answered, docker not in time"  # never counted towards down_after
    REFUSED = "engine refused"  # it answered, on an engine MiniDock does not drive: not counted


class Intent(enum.StrEnum):
    DRAIN = "drain"
    ACTIVATE = "activate"


@dataclass(frozen=True)
class SeenTask:
    """A live task as last observed on a host: holds its slot while the host is unreachable."""

    service: str
    slot: int
    task: str
    spec: str


@dataclass(frozen=True)
class HostState:
    phase: HostPhase = HostPhase.READY
    availability: Availability = Availability.ACTIVE
    failures: int = 0  # consecutive failed probes, counted across runs
    last_seen: float | None = None
    last_error: str | None = None
    tasks: tuple[SeenTask, ...] = ()  # live tasks at the last successful probe
    last_known: Host | None = None  # its connection details: a drain works once it is unlisted
    move_volumes: bool = False  # drained with --move-volumes-unsafe: pinned tasks move too
    # its engine as a probe last read it, and when: a pass's probe reads it again at
    # ENGINE_AGE, after a failed probe, or when it has none (engine_known)
    engine: Engine | None = None
    engine_read: float | None = None

    @property
    def down(self) -> bool:
        return self.phase is HostPhase.DOWN

    @property
    def unreachable(self) -> bool:
        return self.phase is HostPhase.UNREACHABLE

    @property
    def drained(self) -> bool:
        return self.availability is Availability.DRAINED

    def why_not_eligible(self) -> str | None:
        """None when the host may take new tasks, else why not (for pending reasons)."""
        if self.phase is HostPhase.DOWN:
            return f"down ({self.last_error})"
        if self.phase is HostPhase.UNREACHABLE:
            return f"unreachable ({self.last_error})"
        if self.drained:
            return "drained"
        return None


ENGINE_AGE = 600.0  # seconds a host's recorded engine stands for a probe's version read


def engine_known(old: HostState, now: float) -> Engine | None:
    """The host's engine as recorded, while it is younger than ENGINE_AGE: a pass's probe
    then does not read it again (None: the probe reads it)."""
    if old.engine is None or old.engine_read is None:
        return None
    return old.engine if 0 <= now - old.engine_read < ENGINE_AGE else None


def engines_known(hosts: Mapping[str, HostState], now: float) -> dict[str, Engine]:
    """Each host's recorded engine that a probe need not read again (engine_known)."""
    return {name: e for name, old in hosts.items() if (e := engine_known(old, now)) is not None}


def engine_step(old: HostState, seen: HostObservation | None, now: float) -> HostState:
    """The host's recorded engine after a probe: the one it read (at `now`), or the one it
    was given (kept with its time); forgotten after a failed or refused probe (an engine
    restarted may be another version); kept when the host was not probed."""
    if seen is None:
        return old
    if not seen.ok or seen.engine is None:
        return replace(old, engine=None, engine_read=None)
    if not (seen.engine_read or seen.engine != old.engine or old.engine_read is None):
        return old  # as recorded (most hosts of most passes: no record made anew)
    return replace(old, engine=seen.engine, engine_read=now)


# (phase, probe) -> (next phase, event kind or None)
PROBE_TABLE: dict[tuple[HostPhase, Probe], tuple[HostPhase, str | None]] = {
    (HostPhase.READY, Probe.ANSWERED): (HostPhase.READY, None),
    (HostPhase.READY, Probe.FAILED): (HostPhase.UNREACHABLE, None),
    (HostPhase.READY, Probe.FAILED_LIMIT): (HostPhase.DOWN, "host-down"),
    (HostPhase.UNREACHABLE, Probe.ANSWERED): (HostPhase.READY, None),
    (HostPhase.UNREACHABLE, Probe.FAILED): (HostPhase.UNREACHABLE, None),
    (HostPhase.UNREACHABLE, Probe.FAILED_LIMIT): (HostPhase.DOWN, "host-down"),
    (HostPhase.DOWN, Probe.ANSWERED): (HostPhase.READY, "host-up"),
    (HostPhase.DOWN, Probe.FAILED): (HostPhase.DOWN, None),
    (HostPhase.DOWN, Probe.FAILED_LIMIT): (HostPhase.DOWN, None),
    # the mass-loss guard: the controller is likely the one cut off, so no host goes down
    (HostPhase.READY, Probe.FAILED_HELD): (HostPhase.UNREACHABLE, None),
    (HostPhase.UNREACHABLE, Probe.FAILED_HELD): (HostPhase.UNREACHABLE, None),
    (HostPhase.DOWN, Probe.FAILED_HELD): (HostPhase.DOWN, None),
    # slow is not down: a host whose sshd answers keeps its tasks, whatever its docker does
    (HostPhase.READY, Probe.SLOW): (HostPhase.UNREACHABLE, "host-slow"),
    (HostPhase.UNREACHABLE, Probe.SLOW): (HostPhase.UNREACHABLE, None),
    (HostPhase.DOWN, Probe.SLOW): (HostPhase.DOWN, None),
    # a refused engine is no failure: the host takes no task, its tasks keep their slots
    (HostPhase.READY, Probe.REFUSED): (HostPhase.UNREACHABLE, "host-refused"),
    (HostPhase.UNREACHABLE, Probe.REFUSED): (HostPhase.UNREACHABLE, None),
    (HostPhase.DOWN, Probe.REFUSED): (HostPhase.DOWN, None),
}

AVAILABILITY_TABLE: dict[tuple[Availability, Intent], Availability] = {
    (Availability.ACTIVE, Intent.DRAIN): Availability.DRAINED,
    (Availability.ACTIVE, Intent.ACTIVATE): Availability.ACTIVE,
    (Availability.DRAINED, Intent.DRAIN): Availability.DRAINED,
    (Availability.DRAINED, Intent.ACTIVATE): Availability.ACTIVE,
}


SLOW_GRACE = 120.0  # seconds a host that answered before may go without its docker answering
# (its sshd answering) before its probes count as failed again: slow is not down, hung is


def silent_too_long(old: HostState, now: float) -> bool:
    """Whether a slow host's docker has not answered for SLOW_GRACE since its last answer:
    it is then hung, not slow, and its probes count towards `down_after` (a host that never
    answered has no tasks to lose, and stays unreachable)."""
    return old.last_seen is not None and now - old.last_seen >= SLOW_GRACE


def probe_step(
    name: str,
    old: HostState,
    *,
    answered: tuple[SeenTask, ...] | None,
    error: str | None,
    down_after: int,
    now: float,
    guard_holds: bool = False,
    slow: bool = False,
    refused: bool = False,
) -> tuple[HostState, Event | None]:
    """One probe of a host: `answered` holds its live tasks, or is None when it failed
    (`slow`: its sshd answered, its docker not in time, which counts no failure until its
    docker has been silent for SLOW_GRACE; `refused`: its engine answered and is one
    MiniDock does not drive, `error` says which, never counted). While the mass-loss guard
    holds, a failed probe never takes a host down."""
    if answered is not None:
        phase, kind = PROBE_TABLE[(old.phase, Probe.ANSWERED)]
        new = evolve(old, phase=phase, failures=0, last_seen=now, last_error=None, tasks=answered)
    elif refused:
        phase, kind = PROBE_TABLE[(old.phase, Probe.REFUSED)]
        new = evolve(old, phase=phase, last_error=error)
    elif slow and not silent_too_long(old, now):
        phase, kind = PROBE_TABLE[(old.phase, Probe.SLOW)]
        new = evolve(old, phase=phase, last_error=error)
    else:
        if slow:
            error = f"{error}; its docker has not answered for over {SLOW_GRACE:.0f}s"
        failures = old.failures + 1
        probe = Probe.FAILED_LIMIT if failures >= down_after else Probe.FAILED
        probe = Probe.FAILED_HELD if guard_holds else probe
        phase, kind = PROBE_TABLE[(old.phase, probe)]
        new = evolve(old, phase=phase, failures=failures, last_error=error)
    if kind == "host-down":
        message = f"{name} down after {new.failures} failed probes: {error}"
        return new, Event(now, kind, message, host=name)
    if kind == "host-slow":
        message = f"{name} slow, its tasks kept (not counted towards down): {error}"
        return new, Event(now, kind, message, host=name)
    if kind == "host-refused":
        return new, Event(now, kind, f"{name}: {error}; it takes no task", host=name)
    if kind == "host-up":
        return new, Event(now, kind, f"{name} answers again", host=name)
    return new, None


def forgotten(old: HostState) -> HostState:
    """`minidock forget`: the host's last-seen tasks no longer hold their slots."""
    return replace(old, tasks=())


def availability_step(old: HostState, intent: Intent, *, move_volumes: bool = False) -> HostState:
    """The operator's word: drain (move every task off, keep it empty; with `move_volumes`
    also the tasks pinned there by their volume) or activate."""
    availability = AVAILABILITY_TABLE[(old.availability, intent)]
    moving = move_volumes and availability is Availability.DRAINED
    return replace(old, availability=availability, move_volumes=moving)


def mass_loss(failed: int, total: int, fraction: float, *, forced: bool) -> tuple[bool, str]:
    """The mass-loss guard: more than `fraction` of the hosts failed this pass's probes.
    Returns whether it holds, and the one loud line that says so (also when forced)."""
    if total == 0 or failed <= fraction * total:
        return False, ""
    share = f"{failed} of {total} hosts failed their probes (more than {fraction:.0%})"
    if forced:
        return False, f"mass-loss guard overridden by --force-down: {share}"
    return True, (
        f"mass-loss guard: {share}; the controller may be the one cut off, so no host is "
        "marked down and nothing is replaced (`minidock reconcile --force-down` overrides)"
    )
