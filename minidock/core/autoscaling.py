"""A pass's part in autoscaling (docs/autoscale.md): each autoscaled service's readings
from the ingress proxies' counters the pass observed (`Observed.traffic`), its decision
(core/autoscale.py), and an `autoscaled` event for each count that changed. Pure.

A reading counts from the marks the state keeps per ingress host and route (`Mark`): a
pass decides once its marks are at least half a window old, and a mark moves to the
counters just read once it is a whole window old, so a reading covers between half a
window and a window (plus one pass's interval). A proxy whose metrics could not be read,
that restarted (its counters began again) or that is read for the first time gives its
routes no data this pass: the count holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from minidock.core.autoscale import Delta, Mark, Scaling, count, decide, delta, reading
from minidock.core.state import ServiceState
from minidock.model import Autoscale, Event, Observed, RouteCounts, Service

__all__ = ["held", "labels", "step"]


def labels(service: Service) -> tuple[str, ...]:
    """The labels of a service's routes as the proxies' metrics name them: Host (`*`
    for any) and path."""
    return tuple(dict.fromkeys(f"{r.domain or '*'}{r.path}" for r in service.ingress))


def step(
    services: Mapping[str, ServiceState], observed: Observed, now: float
) -> tuple[dict[str, ServiceState], list[Event]]:
    """Every service with its decision this pass (those without a policy as they are),
    and an `autoscaled` event for each count that changed."""
    found = dict(services)
    events: list[Event] = []
    for name, ss in services.items():
        policy = ss.spec.autoscale
        if policy is None or ss.removed or ss.spec.desired != "running":
            continue
        after = _decided(ss, policy, observed, now)
        if after == ss.scaling:
            continue
        found[name] = replace(ss, scaling=after)
        before, now_count = ss.replicas(), count(ss.spec, after)
        if now_count != before:
            line = f"{name}: {before} -> {now_count} tasks ({after.reason})"
            events.append(Event(now, "autoscaled", line, name))
    return found, events


def held(ss: ServiceState) -> str:
    """Why the count may not change now ("": it may)."""
    if ss.rollout.active or ss.rollout.paused:
        return f"a rollout is {ss.rollout.phase.value.replace('_', ' ')}"
    if not ss.serving.on:
        return f"its routes are {ss.serving.serving.value}"
    return ""


def _decided(ss: ServiceState, policy: Autoscale, observed: Observed, now: float) -> Scaling:
    routes = labels(ss.spec)
    marks, deltas, gaps, ready = _read(ss.spec.name, routes, ss.scaling, observed, now, policy)
    kept = replace(ss.scaling, marks=marks)
    if not (ready or gaps):
        return kept  # the marks are not half a window old yet: no decision this pass
    readings = {r: None if r in gaps else reading(deltas.get(r, [])) for r in routes}
    return decide(policy, kept, ss.replicas(), readings, now, held=held(ss), gaps=gaps)


def _read(
    service: str,
    routes: tuple[str, ...],
    scaling: Scaling,
    observed: Observed,
    now: float,
    policy: Autoscale,
) -> tuple[tuple[Mark, ...], dict[str, list[Delta | None]], dict[str, str], bool]:
    """The marks after this pass, each route's counts since its marks (one per ingress
    host), why a route has no data (by route), and whether every mark is half a window
    old (the readings may be decided from)."""
    old = {(m.host, m.route): m for m in scaling.marks}
    marks: list[Mark] = []
    deltas: dict[str, list[Delta | None]] = {}
    gaps: dict[str, str] = {}
    ready = bool(observed.traffic)
    for host, counted in sorted(observed.traffic.items()):
        mine = {c.route: c for c in counted or () if c.service == service}
        for route in routes:
            mark = old.get((host, route))
            if counted is None:
                gaps.setdefault(route, f"the ingress proxy on {host} did not answer its metrics")
                if mark is not None:
                    marks.append(mark)
                continue
            seen = _now(host, route, mine.get(route), now)
            if mark is None:
                gaps.setdefault(route, f"first read of the ingress proxy on {host}")
                marks.append(seen)
                continue
            counts = delta(mark.sample(), seen.sample())
            if counts is None:
                gaps.setdefault(route, f"the ingress proxy on {host} began counting again")
                marks.append(seen)
                continue
            deltas.setdefault(route, []).append(counts)
            ready = ready and counts.seconds >= policy.window / 2
            marks.append(seen if counts.seconds >= policy.window else mark)
    if not observed.traffic:
        gaps = dict.fromkeys(routes, "no ingress proxy was read")
    return tuple(marks), deltas, gaps, ready


def _now(host: str, route: str, counted: RouteCounts | None, now: float) -> Mark:
    """A route's counters on a proxy that answered: none yet is no request yet."""
    if counted is None:
        return Mark(host, route, now, 0.0, ())
    return Mark(host, route, now, counted.requests, counted.buckets)
