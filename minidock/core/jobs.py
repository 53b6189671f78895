"""One-off tasks (`minidock run`): what one runs and where, and which a pass removes. Pure.

A one-off task runs the service's current spec (the controller's, after any rollback) with
another command: the same image, env, secrets, configs, networks, volumes and run options,
but no published ports, no health check and no routes (it serves nothing, and the
service's host ports belong to its tasks: `docker compose run` without `--service-ports`).
It is never a slot's task: it has no slot label, is never counted, never restarted, and
a pass removes it once it has finished (docs/jobs.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from minidock.core.hooks import HOOK_KIND
from minidock.core.schedule import JOB_KIND
from minidock.core.scheduler import Fleet, counted_as, place
from minidock.core.state import ControllerState, ServiceState
from minidock.model import Inventory, Observed, OneOff, Service

__all__ = [
    "JobAct",
    "JobCollect",
    "JobStart",
    "OneOffPlacement",
    "failing_jobs",
    "finished_oneoffs",
    "oneoff_spec",
    "place_oneoff",
]


@dataclass(frozen=True)
class JobStart:
    """Start a scheduled job's decided run: a one-off task of `spec` (the job's one-off
    spec) on `host`, with the volumes of `slot`."""

    job: str
    run: str
    due: float
    host: str
    slot: int
    spec: Service


@dataclass(frozen=True)
class JobCollect:
    """Read a scheduled job's finished run (the end of its output) for its record; the
    container goes with the finished one-offs of a later pass, once the run is recorded."""

    job: str
    oneoff: OneOff
    due: float


JobAct = JobStart | JobCollect


def oneoff_spec(
    service: Service, command: Sequence[str] | None, env: Sequence[tuple[str, str]] = ()
) -> Service:
    """The spec a one-off of `service` runs: its own, with `command` (None: the service's;
    the image's entrypoint kept, as `docker run IMAGE CMD` keeps it), `env` added over the
    service's (a key given again takes the new value), and nothing published, checked or
    routed."""
    given = dict(env)
    kept = tuple((k, v) for k, v in service.env if k not in given)
    secrets = tuple((k, v) for k, v in service.secrets if k not in given)
    return replace(
        service,
        command=service.command if command is None else tuple(command),
        env=(*kept, *env),
        secrets=secrets,
        ports=(),
        health=None,
        ingress=(),
    )


@dataclass(frozen=True)
class OneOffPlacement:
    """Where a one-off runs (`host`, "" when nowhere: `why` says), and whose named volumes
    it mounts (`slot`: the slot whose data it works on, for a pinned service)."""

    host: str
    slot: int = 1
    why: str = ""


def place_oneoff(
    ss: ServiceState,
    spec: Service,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    host: str = "",
) -> OneOffPlacement:
    """The host for a one-off of `spec` (a service's one-off spec, `ss` its record): the
    scheduler's choice among the hosts that answered and may take tasks (filters, spread,
    bin-packing), or `host` when given, if every filter passes it. A service with named
    volumes runs it on the host of its lowest slot that has one, with that slot's
    volumes: the data is there (any other `host` is refused)."""
    pinned = _pinned(ss) if spec.pinned else None
    if pinned is not None:
        slot, on = pinned
        if host and host != on:
            why = f"{spec.name} keeps its volumes on {on} (slot {slot}): run it there"
            return OneOffPlacement("", slot, why)
        host = on
    else:
        slot = 1
    placed = place(spec, _fleet(inventory, observed, state), only=host)
    return OneOffPlacement(placed.host or "", slot, "" if placed.host else placed.why)


def _pinned(ss: ServiceState) -> tuple[int, str] | None:
    """(slot, host) of the lowest slot whose task has a host on record."""
    return next(((n, s.host) for n, s in sorted(ss.slots.items()) if s.host), None)


def _fleet(inventory: Inventory, observed: Observed, state: ControllerState) -> Fleet:
    """The hosts as a placement now sees them: those that answered this observation and
    are not drained, loaded with every live task of any cluster."""
    eligible: dict[str, str | None] = {}
    for h in inventory.hosts:
        seen = observed.hosts.get(h.name)
        if seen is None or not seen.ok:
            eligible[h.name] = f"did not answer ({seen.why_not if seen else 'not probed'})"
        else:
            eligible[h.name] = "drained" if state.host(h.name).drained else None
    live = [counted_as(c, state.cluster) for c in observed.load() if c.live]
    foreign: Mapping[str, frozenset[str]] = {
        name: o.ports_in_use for name, o in observed.hosts.items() if o.ok
    }
    return Fleet.build(inventory.hosts, eligible, live, foreign)


def finished_oneoffs(
    observed: Observed, jobs: Collection[str] = (), hooks: Collection[str] = ()
) -> tuple[OneOff, ...]:
    """The one-off tasks a pass removes as such: every finished one on a host that answered
    (a running one belongs to whoever runs it; the pass never stops it), except the
    scheduled jobs' runs not yet recorded (`jobs`: their run ids, which their job reads
    first: core/schedule.py), and the `hooks` (run ids) whose outcome is still to be read
    (core/hooks.py)."""
    return tuple(
        o
        for seen in observed.hosts.values()
        if seen.ok
        for o in seen.oneoffs
        if o.finished
        and not (o.kind == JOB_KIND and o.run in jobs)
        and not (o.kind == HOOK_KIND and o.run in hooks)
    )


def failing_jobs(state: ControllerState) -> list[tuple[str, str]]:
    """(job, line) of each scheduled job whose latest run failed (exit 1 until one
    succeeds), or whose schedule gives no time (until it does)."""
    found = []
    for name, ss in sorted(state.services.items()):
        last = ss.job.last
        if ss.spec.schedule is not None and ss.job.unscheduled:
            found.append((name, f"{name}: no run decided: {ss.job.unscheduled}"))
        elif ss.spec.schedule is not None and last is not None and not last.succeeded:
            said = f"exit {last.exit_code}" if last.exit_code is not None else "did not start"
            found.append((name, f"{name} last run failed ({said})"))
    return found
