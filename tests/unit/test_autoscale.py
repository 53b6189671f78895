"""Autoscaling's decision (issue 48, deliverable 2): out at once, in after the cooldown
and with margin, never beyond min..max, never without data or during a rollout, a reason
for every decision; and the properties: no flapping under a steady rate with noise, the
count within its bounds whatever the readings."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.core import admit, scale
from minidock.core.autoscale import (
    Delta,
    Mark,
    Reading,
    Sample,
    Scaling,
    admitted,
    count,
    decide,
    delta,
    quantile,
    reading,
)
from minidock.core.autoscaling import step
from minidock.core.state import ControllerState, Rollout, RolloutPhase, ServiceState
from minidock.model import Autoscale, Cluster, Observed, Route, RouteCounts
from tests.sim import svc

BY_RATE = Autoscale(min=2, max=10, requests_per_task=50.0, window=60.0, cooldown=180.0)
BY_P95 = Autoscale(min=1, max=8, p95=0.25, window=60.0, cooldown=180.0)
ROUTE = "app.test/ -> :8080"


def rate(value: float, p95: float | None = None) -> dict[str, Reading | None]:
    return {ROUTE: Reading(value, p95)}


def steady(n: int, changed: float = 0.0) -> Scaling:
    return Scaling(n, changed, "steady")


# -- out at once, in after the cooldown -------------------------------------------------------
def test_a_rate_over_the_target_scales_out_at_once_to_what_it_needs() -> None:
    after = decide(BY_RATE, steady(3, changed=990.0), 3, rate(260.0), now=1000.0)
    assert (after.count, after.changed) == (6, 1000.0)  # ceil(260 / 50), cooldown or not
    assert after.reason == "out: 260 req/s is 86.67 a task, above the target 50: 6 tasks"
    assert after.rate == 260.0


def test_a_lower_rate_scales_in_only_after_the_cooldown() -> None:
    early = decide(BY_RATE, steady(6, changed=1000.0), 6, rate(100.0), now=1100.0)
    assert (early.count, early.changed) == (6, 1000.0)
    assert early.reason.endswith("after the cooldown (1m20s left)")
    late = decide(BY_RATE, steady(6, changed=1000.0), 6, rate(100.0), now=1180.0)
    assert (late.count, late.changed) == (3, 1180.0)  # ceil(100 / (0.8 * 50))
    assert late.reason == (
        "in: 100 req/s is 16.67 a task; 3 tasks would take 33.33 each, under 80% of the target 50"
    )


def test_scale_in_keeps_the_margin() -> None:
    """At 4 tasks and 150 req/s, 3 tasks would take 50 each: the target itself, with no
    margin, so the count stays."""
    after = decide(BY_RATE, steady(4), 4, rate(150.0), now=10_000.0)
    assert (after.count, after.reason) == (4, "steady: 150 req/s is 37.5 a task, target 50")


def test_the_count_stays_within_min_and_max() -> None:
    high = decide(BY_RATE, steady(10), 10, rate(5000.0), now=10_000.0)
    assert (high.count, high.reason) == (10, "at max 10: 5000 req/s wants 100 at 50 a task")
    low = decide(BY_RATE, steady(3), 3, rate(0.0), now=10_000.0)
    assert low.count == 2
    assert decide(BY_RATE, steady(2), 2, rate(0.0), now=10_000.0).count == 2


def test_no_data_holds_the_count_and_is_never_zero_traffic() -> None:
    readings: dict[str, Reading | None] = {ROUTE: None, "*/api -> :8080": Reading(900.0)}
    after = decide(BY_RATE, steady(6), 6, readings, now=10_000.0)
    assert (after.count, after.rate) == (6, None)
    assert after.reason == (
        "held at 6: no data for app.test/ -> :8080 (a proxy's metrics were not read)"
    )


def test_a_rollout_or_a_canary_holds_the_count() -> None:
    after = decide(BY_RATE, steady(3), 3, rate(900.0), now=10_000.0, held="a rollout runs")
    assert (after.count, after.reason, after.rate) == (3, "held at 3: a rollout runs", 900.0)


def test_every_routes_requests_count_together() -> None:
    readings: dict[str, Reading | None] = {ROUTE: Reading(120.0), "*/api -> :8080": Reading(80.0)}
    assert decide(BY_RATE, steady(2), 2, readings, now=10_000.0).count == 4


def test_a_first_decision_starts_the_cooldown_from_the_operators_count() -> None:
    first = decide(BY_RATE, Scaling(), 5, rate(10.0), now=500.0)
    assert (first.count, first.changed) == (5, 500.0)
    assert first.reason.endswith("after the cooldown (3m left)")


# -- a p95 target -----------------------------------------------------------------------------
def test_a_slow_p95_scales_out_in_proportion_once_the_count_has_a_whole_window() -> None:
    after = decide(BY_P95, steady(2, changed=0.0), 2, rate(40.0, 0.6), now=1000.0)
    assert (after.count, after.reason) == (5, "out: p95 600ms, above the target 250ms: 5 tasks")
    soon = decide(BY_P95, steady(5, changed=1000.0), 5, rate(40.0, 0.6), now=1030.0)
    assert soon.count == 5  # its readings are still of the 2 tasks before
    assert "a whole window old (30s)" in soon.reason


def test_a_fast_p95_scales_in_one_task_with_margin() -> None:
    fast = decide(BY_P95, steady(4), 4, rate(40.0, 0.1), now=10_000.0)
    assert fast.count == 3  # 0.1 * 4 / 3 = 133ms, under 200ms
    near = decide(BY_P95, steady(4), 4, rate(40.0, 0.16), now=10_000.0)
    assert (near.count, near.reason) == (4, "steady: p95 160ms, target 250ms")


def test_no_request_at_all_scales_a_latency_target_in_one_task_at_a_time() -> None:
    after = decide(BY_P95, steady(3), 3, rate(0.0), now=10_000.0)
    assert after.count == 2


def test_from_no_task_the_first_request_starts_one() -> None:
    to_zero = replace(BY_P95, min=0)
    assert decide(to_zero, steady(0), 0, rate(2.0), now=10_000.0).count == 1
    by_rate = replace(BY_RATE, min=0)
    assert decide(by_rate, steady(0), 0, rate(2.0), now=10_000.0).count == 1


# -- readings from the proxies' counters ------------------------------------------------------
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, math.inf)


def sample(at: float, requests: float, *counts: float) -> Sample:
    return Sample(at, requests, tuple(zip(BUCKETS, counts, strict=True)))


def test_a_reading_is_the_counts_growth_over_the_time_between_two_samples() -> None:
    before = sample(100.0, 1000, 500, 800, 950, 990, 1000, 1000)
    after = sample(160.0, 4000, 500, 800, 950, 2990, 4000, 4000)
    found = reading([delta(before, after)])
    assert found is not None
    assert found.rate == 50.0
    assert found.p95 == 0.5 + 0.5 * (0.95 * 3000 - 2000) / 1000  # in the (0.5, 1] bucket


def test_every_proxys_rate_adds_and_their_buckets_merge() -> None:
    one = Delta(60.0, 600.0, ((0.1, 600.0), (math.inf, 600.0)))
    two = Delta(30.0, 300.0, ((0.1, 0.0), (math.inf, 300.0)))
    found = reading([one, two])
    assert found == Reading(20.0, 0.1)  # the p95 is in +Inf: the highest finite bound


def test_a_proxy_that_restarted_or_was_not_read_is_no_data() -> None:
    before = sample(100.0, 1000, 500, 800, 950, 990, 1000, 1000)
    restarted = sample(160.0, 20, 20, 20, 20, 20, 20, 20)
    assert delta(before, restarted) is None
    assert delta(before, before) is None  # no time between: no window
    assert reading([delta(before, restarted)]) is None
    assert reading([]) is None


def test_a_quiet_window_has_a_rate_of_zero_and_no_p95() -> None:
    same = sample(100.0, 1000, 500, 800, 950, 990, 1000, 1000)
    found = reading([delta(same, replace(same, at=160.0))])
    assert found == Reading(0.0, None)
    assert quantile(0.95, ()) is None


# -- the count as the state keeps it ----------------------------------------------------------
ROUTED = (Route("app.test", "/", 8080),)


def web(replicas: int = 2, policy: Autoscale | None = BY_RATE, image: str = "web:5") -> object:
    return svc(image=image, replicas=replicas, ingress=ROUTED, autoscale=policy)


def test_the_decided_count_is_the_count_and_the_spec_starts_it() -> None:
    spec = web()
    assert count(spec, Scaling()) == 2  # type: ignore[arg-type]
    assert count(spec, Scaling(7)) == 7  # type: ignore[arg-type]
    assert count(web(policy=None), Scaling(7)) == 2  # type: ignore[arg-type]
    ss = ServiceState(spec=spec, generation=1, scaling=Scaling(7))  # type: ignore[arg-type]
    assert ss.slot_numbers() == (1, 2, 3, 4, 5, 6, 7)


def test_an_apply_keeps_the_decided_count_unless_the_file_changes_replicas() -> None:
    decided = Scaling(7, 50.0, "out")
    new_image = web(image="web:6")
    assert admitted(decided, web(), new_image) == decided  # type: ignore[arg-type]
    narrower = web(policy=replace(BY_RATE, max=5))
    assert admitted(decided, web(), narrower).count == 5  # type: ignore[arg-type]
    assert admitted(decided, web(), web(replicas=3)) == Scaling()  # type: ignore[arg-type]
    marked = replace(decided, marks=(Mark("h1", "*/", 10.0, 500.0),))
    again = admitted(marked, web(), web(replicas=3))  # type: ignore[arg-type]
    assert again == Scaling(marks=marked.marks)  # the readings go on from their marks
    assert admitted(decided, web(), web(policy=None)) == Scaling()  # type: ignore[arg-type]


def test_apply_and_scale_through_the_states_transitions() -> None:
    cluster = Cluster("c", "/c.toml", "/i.toml", (web(),))  # type: ignore[arg-type]
    state = admit(ControllerState(), cluster, 1)
    ss = state.services["web"]
    state = replace(state, services={"web": replace(ss, scaling=Scaling(6, 10.0, "out"))})
    image = replace(cluster, services=(web(image="web:6"),))
    again = admit(state, image, 2).services["web"]
    assert (again.replicas(), again.rollout.total) == (6, 6)
    scaled = scale(state, "web", 4, 3).services["web"]
    assert (scaled.scaling, scaled.replicas()) == (Scaling(), 4)


# -- properties -------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    base=st.floats(min_value=0.0, max_value=2000.0),
    noise=st.lists(st.floats(min_value=-0.1, max_value=0.1), min_size=2, max_size=60),
    start=st.integers(min_value=2, max_value=10),
    step=st.floats(min_value=1.0, max_value=400.0),
)
def test_a_steady_rate_with_ten_percent_noise_never_flaps(
    base: float, noise: list[float], start: int, step: float
) -> None:
    """Under a constant rate with +-10% noise, the count never changes twice in a row in
    opposite directions (the issue's property), whatever the pace of the passes."""
    scaling, current, now, moves = steady(start), start, 0.0, []
    for n in noise:
        now += step
        scaling = decide(BY_RATE, scaling, current, rate(base * (1 + n)), now)
        assert scaling.count is not None
        if scaling.count != current:
            moves.append(scaling.count > current)
        current = scaling.count
    assert all(a == b for a, b in itertools.pairwise(moves)), moves


readings_strategy = st.one_of(
    st.none(),
    st.builds(
        Reading,
        st.floats(min_value=0.0, max_value=1e6),
        st.one_of(st.none(), st.floats(min_value=0.0, max_value=60.0)),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from([BY_RATE, BY_P95, replace(BY_RATE, min=0, max=1)]),
    seen=st.lists(
        st.tuples(readings_strategy, st.floats(min_value=0.0, max_value=600.0), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_the_count_stays_within_its_bounds_and_holds_without_data(
    policy: Autoscale, seen: list[tuple[Reading | None, float, bool]]
) -> None:
    """Whatever the readings (None among them), the count stays in min..max; a pass
    without data or held by a rollout changes nothing; a scale-in comes at least
    `cooldown` after the change before it."""
    scaling, current, now = Scaling(), policy.min, 0.0
    for found, pause, rolling in seen:
        now += pause
        before = scaling
        scaling = decide(policy, scaling, current, {ROUTE: found}, now, held="r" if rolling else "")
        assert scaling.count is not None
        assert policy.min <= scaling.count <= policy.max
        assert scaling.reason
        if found is None or rolling:
            assert scaling.count == current
        if scaling.count < current:
            assert before.count is not None
            assert now - before.changed >= policy.cooldown
        current = scaling.count


# -- a pass's part: readings from the observed counters ---------------------------------------
def counted(n: float, route: str = "app.test/") -> tuple[RouteCounts, ...]:
    return (RouteCounts("web", route, n, ((0.1, n),)),)


def passes(
    ss: ServiceState, *seen: tuple[float, dict[str, tuple[RouteCounts, ...] | None]]
) -> list[ServiceState]:
    """`ss` through a pass at each (time, each ingress host's counters)."""
    found = []
    for now, traffic in seen:
        services, _ = step({"web": ss}, Observed({}, traffic=traffic), now)
        ss = services["web"]
        found.append(ss)
    return found


def autoscaled(n: int = 2) -> ServiceState:
    return ServiceState(spec=web(replicas=n), generation=1)  # type: ignore[arg-type]


def test_the_first_read_marks_the_counters_and_holds() -> None:
    (first,) = passes(autoscaled(), (100.0, {"h1": counted(500)}))
    assert first.scaling.marks == (Mark("h1", "app.test/", 100.0, 500, ((0.1, 500),)),)
    assert first.scaling.kind == "no-data"
    assert first.scaling.reason == (
        "held at 2: no data for app.test/ (first read of the ingress proxy on h1)"
    )


def test_every_proxys_counts_add_once_half_a_window_has_passed() -> None:
    seen = passes(
        autoscaled(),
        (100.0, {"h1": counted(0), "h2": counted(0)}),
        (110.0, {"h1": counted(3000), "h2": counted(3000)}),  # 10s: not half a window
        (140.0, {"h1": counted(6000), "h2": counted(6000)}),  # 40s: 300 req/s
    )
    assert seen[1].scaling.reason == seen[0].scaling.reason  # the marks are only 10s old
    assert (seen[2].scaling.count, seen[2].scaling.rate) == (6, 300.0)
    assert {m.at for m in seen[2].scaling.marks} == {100.0}  # kept until a window old
    after = passes(seen[2], (165.0, {"h1": counted(9000), "h2": counted(9000)}))[0]
    assert {m.at for m in after.scaling.marks} == {165.0}  # 65s: the marks move on


def test_an_unread_proxy_or_one_that_restarted_is_no_data() -> None:
    seen = passes(
        autoscaled(),
        (100.0, {"h1": counted(1000), "h2": counted(1000)}),
        (160.0, {"h1": counted(2000), "h2": None}),
        (220.0, {"h1": counted(3000), "h2": counted(10)}),
    )
    assert seen[1].scaling.reason.endswith("(the ingress proxy on h2 did not answer its metrics)")
    assert seen[1].scaling.rate is None
    assert seen[2].scaling.reason.endswith("(the ingress proxy on h2 began counting again)")
    assert [c.replicas() for c in seen] == [2, 2, 2]


def test_a_route_a_proxy_has_not_counted_yet_is_no_request_not_no_data() -> None:
    seen = passes(autoscaled(4), (0.0, {"h1": ()}), (60.0, {"h1": ()}))
    assert (seen[1].scaling.rate, seen[1].scaling.kind) == (0.0, "cooldown")


def test_a_rollout_holds_the_count_and_the_count_changing_is_an_event() -> None:
    ss = passes(autoscaled(), (0.0, {"h1": counted(0)}))[0]
    rolling = replace(ss, rollout=Rollout(RolloutPhase.UPDATING))
    services, events = step({"web": rolling}, Observed({}, traffic={"h1": counted(30000)}), 60.0)
    assert services["web"].scaling.reason == "held at 2: a rollout is updating"
    assert events == []
    services, events = step({"web": ss}, Observed({}, traffic={"h1": counted(30000)}), 60.0)
    assert [e.message for e in events] == [
        "web: 2 -> 10 tasks (out: 500 req/s is 250 a task, above the target 50: 10 tasks)"
    ]


def test_the_decided_count_and_its_marks_round_trip_through_the_stores_json() -> None:
    """The store keeps the decision as JSON that any reader takes: no infinity in it."""
    from minidock.store.codec import dumps, loads

    ss = passes(autoscaled(), (0.0, {"h1": counted(10)}), (60.0, {"h1": counted(3010)}))[-1]
    assert ss.scaling.count == 2
    assert ss.scaling.marks
    state = ControllerState(cluster="c", services={"web": ss})
    text = dumps(state)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the stored state")

    json.loads(text, parse_constant=refuse)
    assert loads(text, ControllerState) == state


@settings(max_examples=300, deadline=None)
@given(
    load=st.floats(min_value=0.01, max_value=5.0),
    noise=st.lists(st.floats(min_value=-0.1, max_value=0.1), min_size=2, max_size=60),
    start=st.integers(min_value=1, max_value=8),
    pause=st.floats(min_value=1.0, max_value=400.0),
    shared=st.booleans(),
)
def test_a_steady_latency_with_ten_percent_noise_never_flaps(
    load: float, noise: list[float], start: int, pause: float, shared: bool
) -> None:
    """The same for a p95 target, whether the p95 is shared by the tasks (each task's
    share of a steady load: `load / count` seconds) or set elsewhere (`load / 4` whatever
    the count), each with +-10% noise."""
    scaling, current, now, moves = steady(start), start, 0.0, []
    for n in noise:
        now += pause
        p95 = (load / max(current, 1) if shared else load / 4) * (1 + n)
        scaling = decide(BY_P95, scaling, current, rate(10.0, p95), now)
        assert scaling.count is not None
        if scaling.count != current:
            moves.append(scaling.count > current)
        current = scaling.count
    assert all(a == b for a, b in itertools.pairwise(moves)), moves
