"""Canary updates, decision by decision (docs/rollouts.md#canary): the CANARY phase of the
rollout machine (core/rollout.py), its helpers (core/canary.py), the operator's `promote`
(core/intents.py) and the route table's weights (core/routes.py), on the model-level World
with an injected clock. Images behave by tests/behaviour.py's table: web:N turns healthy
one tick after it starts, web:broken turns unhealthy."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidock.commands.caddy import RouteSpec, proxy_config
from minidock.core import canary, promote, rollback, set_drained
from minidock.core.plan import WaitKind
from minidock.core.progress_rule import outlook
from minidock.core.routes import route_changes, route_table
from minidock.model import (
    Cluster,
    HealthCheck,
    HostObservation,
    Ingress,
    Inventory,
    Observed,
    Route,
    Service,
    UpdatePolicy,
)
from minidock.spec.errors import SpecError
from tests.caddyview import front
from tests.sim import World, hosts, svc

HC = HealthCheck(("wget", "-qO-", "http://127.0.0.1:8080/"), interval=1, timeout=1, retries=2)


def web(
    image: str = "web:5", replicas: int = 3, ingress: tuple[Route, ...] = (), **update: object
) -> Service:
    given = {"monitor": 0.0, "canary": 1, "canary_monitor": 6.0, **update}
    policy = UpdatePolicy(**given)  # type: ignore[arg-type]
    return svc(image=image, replicas=replicas, health=HC, update=policy, ingress=ingress)


def canaried(
    image: str = "web:6", replicas: int = 3, ingress: tuple[Route, ...] = (), **update: object
) -> World:
    """A fleet converged on web:5, then `image` applied with a canary policy."""
    w = World(hosts(3))
    w.apply(web("web:5", replicas, ingress, **update))
    w.converge()
    assert w.images() == ["web:5"] * replicas
    w.apply(web(image, replicas, ingress, **update))
    return w


def ids(w: World, image: str) -> set[str]:
    return {c.id for c in w.live() if c.image == image}


def test_a_canary_starts_beside_the_old_tasks_and_stops_nothing() -> None:
    w = canaried(canary=1)
    old = ids(w, "web:5")
    assert w.rollout().phase == "canary"
    plan = w.step()
    (run,) = plan.run
    assert (run.slot, run.replaces, plan.stop) == (1, None, ())
    for _ in range(5):  # healthy, then in its canary monitor: the old tasks all stay
        w.step()
        assert ids(w, "web:5") == old
    assert len(ids(w, "web:6")) == 1
    assert w.rollout().canary_slots() == (1,)


def test_manual_promote_waits_for_the_operator_then_the_update_rolls_on() -> None:
    w = canaried(promote="manual")
    old = ids(w, "web:5")
    for _ in range(10):
        plan = w.step()
    assert ids(w, "web:5") == old
    assert w.rollout().phase == "canary"
    kinds = {x.kind for x in plan.waiting}
    assert WaitKind.PROMOTE in kinds
    assert not outlook(plan).progressing  # exit 4: it waits on the operator, not on time
    assert any("minidock promote web" in x for x in plan.waiting)
    w.state = promote(w.state, "web")
    plan = w.step()
    assert [e.kind for e in plan.events] == ["rollout-promoted"]
    assert "by the operator" in plan.events[0].message
    w.converge()
    assert w.images() == ["web:6"] * 3
    assert w.rollout().phase == "completed"


def test_auto_promote_after_the_canary_monitor() -> None:
    w = canaried(promote="auto", canary_monitor=6.0)
    started = w.now
    promoted_at = None
    for _ in range(20):
        plan = w.step()
        if any(e.kind == "rollout-promoted" for e in plan.events):
            promoted_at = w.now
            break
        assert len(ids(w, "web:5")) == 3  # nothing stopped before the promotion
    assert promoted_at is not None
    assert promoted_at - started >= 6.0  # the whole canary_monitor healthy
    w.converge()
    assert w.images() == ["web:6"] * 3


def test_promote_before_the_canary_is_ready_waits_for_it() -> None:
    w = canaried(promote="manual", canary_monitor=600.0)
    w.state = promote(w.state, "web")  # before its task even started
    assert w.rollout().promoted
    plan = w.step()
    assert plan.run
    assert not plan.stop
    for _ in range(8):
        plan = w.step()
        if any(e.kind == "rollout-promoted" for e in plan.events):
            break
    assert w.rollout().phase == "updating"  # through update.monitor, not canary_monitor


def test_promote_without_a_canary_is_refused() -> None:
    w = World(hosts(2))
    w.apply(web(replicas=2))
    w.converge()
    with pytest.raises(ValueError, match="no canary to promote"):
        promote(w.state, "web")


def test_a_failed_canary_is_rolled_back_and_the_old_tasks_never_stop() -> None:
    w = canaried("web:broken", failure_action="pause")  # a canary's failure rolls back anyway
    old = ids(w, "web:5")
    events: list[str] = []
    for _ in range(12):
        plan = w.step()
        events += [e.kind for e in plan.events]
        assert old <= ids(w, "web:5")
    assert "rollout-rollback" in events
    assert w.rollout().phase == "rolled_back"
    assert "canary" in w.rollout().reason
    assert ids(w, "web:5") == old
    assert not ids(w, "web:broken")
    assert w.state.services["web"].spec.image == "web:5"


def test_rollback_during_a_canary_removes_it_and_keeps_every_old_task() -> None:
    w = canaried(canary=2)
    old = ids(w, "web:5")
    for _ in range(3):
        w.step()
    assert len(ids(w, "web:6")) == 2
    w.state = rollback(w.state, "web")
    w.converge()
    assert ids(w, "web:5") == old
    assert w.images() == ["web:5"] * 3
    assert w.rollout().phase == "rolled_back"


def test_a_slot_refilled_during_the_canary_gets_the_previous_spec() -> None:
    w = canaried(promote="manual")
    for _ in range(3):
        w.step()
    lost = next(c for c in w.live() if c.slot == 3)
    w.remove(lost)
    w.step()
    assert sorted(c.image for c in w.live() if c.slot == 3) == ["web:5"]
    assert w.rollout().phase == "canary"


def test_canary_as_many_as_replicas_runs_one_beside_each() -> None:
    w = canaried(canary=5, replicas=2, promote="auto", canary_monitor=0.0)
    plan = w.step()
    assert sorted(r.slot for r in plan.run) == [1, 2]
    w.converge()
    assert w.images() == ["web:6"] * 2


def test_a_canary_larger_than_the_old_tasks_is_promoted_once_each_has_one_beside_it() -> None:
    # one task of web:5, then web:6 with 2 replicas and 2 canaries: one old task to stand
    # beside, so the canary is one task, and it is promoted (found by the whole-decision
    # property: it waited for a second canary that no slot could take)
    w = World(hosts(3))
    w.apply(web("web:5", 1))
    w.converge()
    w.apply(web("web:6", 2, canary=2, promote="auto", canary_monitor=0.0))
    w.converge()
    assert w.images() == ["web:6"] * 2
    assert w.rollout().phase != "canary"


# -- the route's share -------------------------------------------------------------------
@given(
    percent=st.integers(1, 99),
    canaries=st.integers(1, 4),
    others=st.integers(1, 8),
)
def test_the_weights_give_the_canary_its_percent(percent: int, canaries: int, others: int) -> None:
    weight, other = canary.share(percent, canaries, others)
    got = 100 * weight * canaries / (weight * canaries + other * others)
    assert abs(got - percent) <= canary.SHARE_TOLERANCE
    assert weight * canaries + other * others <= 100 * (canaries + others)


ROUTE = Route("app.test", "/", 8080)


def _route_table_of(w: World) -> tuple[Cluster, Inventory, Observed]:
    """The world's fleet as the ingress sees it: its cluster with an ingress on host1,
    each task published on a host port of its own."""
    assert w.cluster is not None
    cluster = replace(w.cluster, ingress=Ingress(hosts=("host1",)))
    live = sorted(w.live(), key=lambda c: c.id)
    tasks = [replace(c, published=((8080, 30000 + i),)) for i, c in enumerate(live)]
    seen = Observed(
        {
            h.name: HostObservation(h.name, True, tuple(t for t in tasks if t.host == h.name))
            for h in w.hosts
        }
    )
    return cluster, w.inventory, seen


def test_the_route_sends_the_canary_its_weight_then_even_shares_once_promoted() -> None:
    w = canaried(promote="manual", canary_weight=20, replicas=2, ingress=(ROUTE,))
    for _ in range(4):
        w.step()
    cluster, inventory, seen = _route_table_of(w)
    (entry,) = route_table(cluster, inventory, seen, w.state, w.now)
    new = w.state.services["web"].spec.spec_hash()
    spec_of = {c.task: c.spec for c in seen.containers()}
    weighed = dict(entry.weighed())
    share = sum(
        weighed[u] for u, t in zip(entry.upstreams, entry.tasks, strict=True) if spec_of[t] == new
    )
    total = sum(weighed.values())
    assert (len(entry.upstreams), entry.canary, entry.canaries) == (3, 20, 1)
    assert abs(100 * share / total - 20) <= canary.SHARE_TOLERANCE
    spec = RouteSpec("app.test", "/", entry.upstreams, weights=entry.weights)
    config = proxy_config([spec], Ingress(hosts=("host1",)))
    (route, _) = front(config.text)["routes"]
    assert len(route["handle"][0]["upstreams"]) == total  # a turn of the round robin per weight
    lines = route_changes((entry,), (("app.test", "/", entry.upstreams),))
    assert lines == ("~ app.test/: canary 20% of requests (1 of 3 upstreams)",)
    w.state = promote(w.state, "web")
    w.step()
    assert w.rollout().phase == "updating"
    cluster, inventory, seen = _route_table_of(w)
    (even,) = route_table(cluster, inventory, seen, w.state, w.now)
    assert (even.weights, even.canary) == ((), 0)


# -- the spec ------------------------------------------------------------------------------
def _load(tmp_path: object, update: str, extra: str = "") -> Service:
    from pathlib import Path

    from minidock.spec.cluster import load

    base = Path(str(tmp_path))
    (base / "inventory.toml").write_text('[[hosts]]\nname = "h1"\naddress = "10.0.0.1"\n')
    (base / "cluster.toml").write_text(
        'cluster = "c"\ninventory = "inventory.toml"\n[services.web]\nimage = "web:5"\n'
        f"{extra}update = {{ {update} }}\n"
    )
    cluster, _ = load(base / "cluster.toml")
    found = cluster.service("web")
    assert found is not None
    return found


def test_the_canary_keys_load(tmp_path: object) -> None:
    s = _load(tmp_path, 'canary = 1, canary_weight = 20, promote = "auto", canary_monitor = "5m"')
    assert (s.update.canary, s.update.canary_weight, s.update.promote) == (1, 20, "auto")
    assert s.update.canary_monitor == 300.0
    plain = _load(tmp_path, "parallelism = 1")
    assert (plain.update.canary, plain.update.promote) == (0, "manual")


@pytest.mark.parametrize(
    ("update", "extra", "words"),
    [
        ("canary_weight = 20", "", "update.canary_weight: applies to a canary only"),
        ("canary = 1", 'mode = "global"\n', "update.canary: a global service"),
        ("canary = 1", 'volumes = ["data:/data"]\n', "update.canary: a canary would share"),
        ("canary = 1, canary_weight = 100", "", "canary_weight"),
        ('canary = 1, promote = "later"', "", "promote"),
    ],
)
def test_canary_keys_refused_with_one_line(
    tmp_path: object, update: str, extra: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _load(tmp_path, update, extra)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


# -- the canary across the operator's other commands (issue 43, breaks 9 and 10) ----------
def test_a_drain_during_a_manual_canary_moves_old_tasks_on_the_old_spec() -> None:
    # break 9: drain HOST moved the non-canary slots onto the unpromoted spec, so the
    # canary grew past update.canary
    w = canaried(promote="manual", canary=1)
    for _ in range(4):
        w.step()
    drained = next(c.host for c in w.live() if c.slot == 3)
    w.state = set_drained(w.state, drained, True)
    for _ in range(12):
        w.step()
    assert w.rollout().phase == "canary"
    assert len(ids(w, "web:6")) == 1  # update.canary, not one more per drained task
    assert all(c.host != drained for c in w.live() if c.image == "web:5" and c.slot != 1)
    assert sorted(c.image for c in w.live() if c.slot == 3) == ["web:5"]


def test_an_apply_during_a_canary_ends_it_and_starts_its_own() -> None:
    # break 10: the superseded canary stayed running (and routed) until a promote, and
    # its slot held three live tasks meanwhile
    w = canaried(promote="manual", canary=1)
    for _ in range(4):
        w.step()
    (superseded,) = ids(w, "web:6")
    w.apply(web("web:7", 3, promote="manual", canary=1))
    for _ in range(4):  # the traffic gate holds its stop while it drains out of the routes
        plan = w.plan()
        assert superseded in {s.container.id for s in plan.stop}
        w.act(replace(plan, stop=tuple(s for s in plan.stop if s.container.id != superseded)))
        w.record(plan)
        w.tick()
        for n, tasks in w.slots("web").items():
            assert len(tasks) <= 2, f"slot {n} holds {tasks}"
    for _ in range(12):
        w.step()
        for n, tasks in w.slots("web").items():
            assert len(tasks) <= 2, f"slot {n} holds {tasks}"
    assert superseded not in {c.id for c in w.live()}
    assert not ids(w, "web:6")
    assert len(ids(w, "web:7")) == 1  # its own canary, beside an old task
    assert len(ids(w, "web:5")) == 3
    assert w.rollout().phase == "canary"
    w.state = promote(w.state, "web")
    w.converge()
    assert w.images() == ["web:7"] * 3


def test_an_apply_during_a_canary_of_a_start_first_update_never_makes_three_tasks() -> None:
    w = canaried(promote="manual", canary=1)
    for _ in range(4):
        w.step()
    (superseded,) = ids(w, "web:6")
    w.apply(svc(image="web:7", replicas=3, health=HC, update=UpdatePolicy(order="start-first")))
    for _ in range(4):  # the traffic gate holds its stop while it drains out of the routes
        plan = w.plan()
        w.act(replace(plan, stop=tuple(s for s in plan.stop if s.container.id != superseded)))
        w.record(plan)
        w.tick()
        for n, tasks in w.slots("web").items():
            assert len(tasks) <= 2, f"slot {n} holds {tasks}"
    w.converge()
    assert w.images() == ["web:7"] * 3


def test_an_apply_during_a_canary_keeps_the_promoted_spec_as_previous() -> None:
    # seed 67 of the operator property: an apply during a manual canary took the canary's
    # own spec (never promoted) for `previous`, so a drain refilled the slots outside the
    # new canary with it, and a rollback would have gone to it
    w = canaried(promote="manual", canary=1)
    for _ in range(4):
        w.step()
    w.apply(web("web:7", 3, promote="manual", canary=1))
    ss = w.state.services["web"]
    assert ss.previous is not None
    assert ss.previous.image == "web:5"
    assert "web:6" in {s.image for s in ss.older}  # its tasks are still judged by it
    for _ in range(6):
        w.step()
    drained = next(c.host for c in w.live() if c.slot == 3)
    w.state = set_drained(w.state, drained, True)
    for _ in range(12):
        w.step()
        for n, tasks in w.slots("web").items():
            assert len(tasks) <= 2, f"slot {n} holds {tasks}"
    assert not ids(w, "web:6")
    assert len(ids(w, "web:7")) == 1  # its own canary, beside an old task
    assert sorted(c.image for c in w.live() if c.slot == 3) == ["web:5"]
    w.state = rollback(w.state, "web")
    w.converge()
    assert w.images() == ["web:5"] * 3
