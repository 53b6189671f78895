"""Autoscaling's decision (docs/autoscale.md): from the readings of a service's routes
over the policy's window and the count it has, the count it should have, and why. Pure.

A reading is a route's request rate and 95th percentile over the window, or None: a
proxy whose metrics could not be read is "no data", never zero traffic, and no data
holds the count. The rule has hysteresis, so a steady rate with noise never turns the
count back and forth:

- out at once, when the target is exceeded: `ceil(rate / requests_per_task)` tasks; for a
  `p95` target, `ceil(count * p95 / target)` (one more at least), once the last change
  is a whole window old (the readings must be of the count in effect);
- in only `cooldown` after the last change, and only to a count that would still meet
  the target with margin: each task at most `MARGIN` of `requests_per_task`
  (`ceil(rate / (MARGIN * requests_per_task))` tasks), or, for `p95`, one task fewer when
  the p95 scaled to it (`p95 * count / (count - 1)`) is at most `MARGIN` of the target;
- never beyond min..max, never while a rollout or a canary runs (`held`), never while a
  route has no data.

The count a pass decided is durable (`Scaling`, in the service's state): `count` says
which count a service wants (the decided one, else the spec's `replicas`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from minidock import units
from minidock.model import Autoscale, Service

__all__ = [
    "DECISIONS",
    "MARGIN",
    "Delta",
    "Mark",
    "Reading",
    "Sample",
    "Scaling",
    "admitted",
    "count",
    "decide",
    "delta",
    "quantile",
    "reading",
    "target",
]

# the decision in one word (`Scaling.kind`): the count went out or in, stays (steady, at
# max, in held by the cooldown, out held until the count has a window), or was held
DECISIONS = ("out", "in", "steady", "max", "cooldown", "window", "held", "no-data", "bounds")

# a lower count must hold each task at or under this share of the target: with it, a rate
# that varies by up to +-10% around a steady value never turns the count back
# (tests/unit/test_autoscale.py's property)
MARGIN = 0.8


@dataclass(frozen=True)
class Mark:
    """Where the next reading of a route on one ingress host counts from: that proxy's
    counters as a pass read them at `at` (its finite buckets: +Inf is `requests`, and
    the state's JSON holds no infinity)."""

    host: str
    route: str
    at: float
    requests: float
    buckets: tuple[tuple[float, float], ...] = ()

    def sample(self) -> Sample:
        return Sample(self.at, self.requests, (*self.buckets, (math.inf, self.requests)))


@dataclass(frozen=True)
class Scaling:
    """A service's autoscaled count as the passes decided it (`ServiceState.scaling`):
    `count` None until a pass decides (the spec's `replicas` meanwhile), `changed` when
    the count was last set (the cooldown and a p95 step's window run from it), the
    decision's `reason`, and the readings it was made from (`rate` in requests a second
    over every route, `p95` in seconds; None: no data)."""

    count: int | None = None
    changed: float = 0.0
    reason: str = ""
    rate: float | None = None
    p95: float | None = None
    marks: tuple[Mark, ...] = ()  # each (ingress host, route)'s counters readings start from
    kind: str = ""  # the decision in one word, one of DECISIONS ("" before a pass decided)


@dataclass(frozen=True)
class Reading:
    """A route's traffic over the window, every proxy's together: requests a second, and
    the 95th percentile of their durations in seconds (None: no request timed)."""

    rate: float
    p95: float | None = None


@dataclass(frozen=True)
class Sample:
    """One proxy's cumulative counters of one route when read: requests answered, and
    the duration histogram's cumulative buckets as (upper bound, count), +Inf last."""

    at: float
    requests: float
    buckets: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Delta:
    """What one proxy counted for a route between two samples: over `seconds`, `requests`
    and the histogram's buckets' growth."""

    seconds: float
    requests: float
    buckets: tuple[tuple[float, float], ...] = ()


def delta(before: Sample, after: Sample) -> Delta | None:
    """The counts between two samples of one proxy's route; None when they make no window
    (not later) or a counter went back (the proxy restarted: what it counted before is
    gone, and the count since is not the window's)."""
    seconds = after.at - before.at
    if seconds <= 0 or after.requests < before.requests:
        return None
    old = dict(before.buckets)
    grown = tuple((le, n - old.get(le, 0.0)) for le, n in after.buckets)
    if any(n < 0 for _, n in grown):
        return None
    return Delta(seconds, after.requests - before.requests, grown)


def reading(deltas: Sequence[Delta | None]) -> Reading | None:
    """A route's reading from each proxy's counts: the rates added, the p95 of the
    buckets added; None (no data) when a proxy's counts are missing or there are none."""
    if not deltas or any(d is None for d in deltas):
        return None
    found = [d for d in deltas if d is not None]
    rate = sum(d.requests / d.seconds for d in found)
    merged: dict[float, float] = {}
    for d in found:
        for le, n in d.buckets:
            merged[le] = merged.get(le, 0.0) + n
    return Reading(rate, quantile(0.95, tuple(sorted(merged.items()))))


def quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """The `q` quantile of a cumulative histogram, as Prometheus' histogram_quantile
    reads one: linear within the bucket it falls in (from 0 for the first); in the +Inf
    bucket, the highest finite bound. None when it counted nothing."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    below, lower = 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if math.isinf(le):
                return lower
            if n == below:
                return le
            return lower + (le - lower) * (rank - below) / (n - below)
        below, lower = n, le
    return lower


def target(policy: Autoscale) -> str:
    """A policy's target in words: '50 requests a second a task', 'p95 250ms'."""
    if policy.requests_per_task is not None:
        return f"{_rate(policy.requests_per_task)} requests a second a task"
    return f"p95 {units.format_duration(policy.p95 or 0.0)}"


def count(spec: Service, scaling: Scaling) -> int:
    """The count a service wants: the decided one within the policy's bounds, else the
    spec's `replicas` (no policy, or no pass has decided yet)."""
    policy = spec.autoscale
    if policy is None or scaling.count is None:
        return spec.replicas
    return policy.bounded(scaling.count)


def admitted(scaling: Scaling, old: Service, new: Service) -> Scaling:
    """The decided count once `new` is applied over `old`: kept (within the new bounds)
    while both have a policy and the file's `replicas` is the same; else the file's
    `replicas` is the count again (a new policy, or the operator changed the count). The
    marks the readings count from are kept either way."""
    if new.autoscale is None:
        return Scaling()
    if old.autoscale is None or old.replicas != new.replicas:
        return Scaling(marks=scaling.marks)
    if scaling.count is None:
        return scaling
    return replace(scaling, count=new.autoscale.bounded(scaling.count))


def decide(
    policy: Autoscale,
    scaling: Scaling,
    current: int,
    readings: Mapping[str, Reading | None],
    now: float,
    *,
    held: str = "",
    gaps: Mapping[str, str] | None = None,
) -> Scaling:
    """The count a service should have now, with why: `current` is the count in effect
    (`count`), `readings` each route's (by its name), `held` why the count may not change
    now ("" when it may: a rollout or a canary holds it), `gaps` why a route that has no
    reading has none. The marks are carried."""
    since = scaling.changed if scaling.count is not None else now  # a first decision
    bounded = policy.bounded(current)
    missing = sorted(route for route, r in readings.items() if r is None)
    seen = [r for r in readings.values() if r is not None]
    rate = sum(r.rate for r in seen) if not missing and seen else None
    timed = [r.p95 for r in seen if r.p95 is not None]
    p95 = max(timed) if timed and not missing else None

    def at(n: int, why: str, changed: float, kind: str) -> Scaling:
        return Scaling(n, changed, why, rate, p95, scaling.marks, kind)

    if bounded != current:
        why = f"{current} is outside {policy.min}..{policy.max}: {bounded}"
        return at(bounded, why, now, "bounds")
    if held:
        return at(current, f"held at {current}: {held}", since, "held")
    if missing or not readings:
        route = missing[0] if missing else "its routes"
        cause = (gaps or {}).get(route, "a proxy's metrics were not read")
        why = f"held at {current}: no data for {route} ({cause})"
        return at(current, why, since, "no-data")
    assert rate is not None
    if policy.requests_per_task is not None:
        want, why, kind = _by_rate(policy, policy.requests_per_task, current, rate)
    else:
        want, why, kind = _by_latency(policy, current, rate, p95, now - since)
    if want > current:
        return at(want, why, now, kind)
    if want < current:
        left = since + policy.cooldown - now
        if left > 0:
            why = f"{why}, after the cooldown ({_seconds(left)} left)"
            return at(current, why, since, "cooldown")
        return at(want, why, now, kind)
    return at(current, why, since, kind)


def _by_rate(policy: Autoscale, target: float, current: int, rate: float) -> tuple[int, str, str]:
    """The count a request rate wants, why, and the decision's kind."""
    shown = f"{_rate(rate)} req/s"
    each = f"{_rate(rate / current)} a task" if current else "no task"
    out = math.ceil(rate / target - 1e-9)
    if out > current:
        want = policy.bounded(out)
        if want == current:
            why = f"at max {current}: {shown} wants {out} at {_rate(target)} a task"
            return current, why, "max"
        why = f"out: {shown} is {each}, above the target {_rate(target)}: {want} tasks"
        return want, why, "out"
    low = policy.bounded(math.ceil(rate / (MARGIN * target) - 1e-9))
    if low < current:
        why = (
            f"in: {shown} is {each}; {low} tasks would take {_rate(rate / low) if low else 0} "
            f"each, under {_percent()} of the target {_rate(target)}"
        )
        return low, why, "in"
    return current, f"steady: {shown} is {each}, target {_rate(target)}", "steady"


def _by_latency(
    policy: Autoscale, current: int, rate: float, p95: float | None, age: float
) -> tuple[int, str, str]:
    """The count a p95 wants (`age`: seconds since the count last changed), why, and the
    decision's kind."""
    assert policy.p95 is not None
    target = units.format_duration(policy.p95)
    shown = "no request timed" if p95 is None else f"p95 {units.format_duration(p95)}"
    if current == 0 and rate > 0:
        want = policy.bounded(1)
        return want, f"out: {_rate(rate)} req/s and no task: {want}", "out"
    if p95 is not None and p95 > policy.p95:
        out = policy.bounded(max(current + 1, math.ceil(current * p95 / policy.p95 - 1e-9)))
        if out == current:
            return current, f"at max {current}: {shown}, above the target {target}", "max"
        if age < policy.window:
            why = (
                f"{shown}, above the target {target}: out once the count of "
                f"{_seconds(age)} ago is a whole window old ({_seconds(policy.window - age)})"
            )
            return current, why, "window"
        return out, f"out: {shown}, above the target {target}: {out} tasks", "out"
    fewer = policy.bounded(current - 1)
    if fewer < current:
        if p95 is None and rate == 0:
            why = f"in: no request in the window, target p95 {target}: {fewer} tasks"
            return fewer, why, "in"
        if p95 is not None and fewer > 0:
            scaled = p95 * current / fewer
            if scaled <= MARGIN * policy.p95:
                why = (
                    f"in: {shown} would be about {units.format_duration(scaled)} on {fewer} "
                    f"tasks, under {_percent()} of the target {target}"
                )
                return fewer, why, "in"
    return current, f"steady: {shown}, target {target}", "steady"


def _rate(value: float) -> str:
    """A rate as people read it: '52.5', '50', '0.25'."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"


def _percent() -> str:
    return f"{round(MARGIN * 100)}%"


def _seconds(value: float) -> str:
    return units.format_duration(max(0.0, math.ceil(value)))
