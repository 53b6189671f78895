"""One pass, one decision (issue 31): `decide` holds everything a pass does, and where the
features meet (routes and rollouts, names and rollouts, hooks and applies, schedules) the
whole decision converges. Model level: a World whose ingress proxy loads each plan's
route table and whose name proxies load its endpoints, as the act path would."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from minidock.core import ControllerState, Plan
from minidock.core.decide import decide
from minidock.core.endpoints import NameStep, name_steps
from minidock.core.hooks import HOOK_KIND, HookAct
from minidock.core.schedule import Times
from minidock.core.specs import TaskSpecs
from minidock.core.state import HookRecord
from minidock.core.traffic import Traffic
from minidock.model import (
    Cluster,
    Constraint,
    HealthCheck,
    Hook,
    Host,
    Ingress,
    NameProxy,
    Observed,
    OneOff,
    ProxyObservation,
    Route,
    Schedule,
    Service,
    UpdatePolicy,
)
from tests.sim import World, host, svc

HC = HealthCheck(("true",))
ROUTE = (Route("app.test", "/", 8080),)


@dataclass
class TrafficWorld(World):
    """A World with an ingress on every host: each pass is `decide`, the plan's route
    table is what the proxies then hold, and every stop is checked against it (a task
    stopped while a loaded route still sends to it is a `violation`)."""

    loaded: frozenset[str] = frozenset()
    violations: list[str] = field(default_factory=list)
    empty_routes: list[float] = field(default_factory=list)  # when a route had no upstream

    def apply(self, *services: Service) -> None:
        super().apply(*services)
        assert self.cluster is not None
        self.cluster = replace(self.cluster, ingress=Ingress(hosts=("host1",)))

    def observe(self) -> Observed:
        seen = super().observe()
        proxy = ProxyObservation("host1", True, True, Ingress().proxy_spec(), "d", self.loaded)
        return replace(seen, proxies={"host1": proxy})

    def plan(self, state: ControllerState | None = None) -> Plan:
        assert self.cluster is not None
        now_state = self.state if state is None else state
        return decide(self.cluster, self.inventory, self.observe(), now_state, self.now)

    def act(self, plan: Plan) -> None:
        self.loaded = frozenset(u for e in plan.routes for u in e.upstreams)  # loaded first
        if any(not e.upstreams for e in plan.routes):
            self.empty_routes.append(self.now)
        for c in [s.container for s in plan.stop] + [r.replaces for r in plan.run if r.replaces]:
            address = self.inventory.host(c.host).reached_at  # type: ignore[union-attr]
            if any(f"{address}:{port}" in self.loaded for _, port in c.published):
                self.violations.append(f"{c.name} stopped while a proxy sends to it")
        super().act(plan)
        for r in plan.run:  # the host ports the decision gave the task, as docker publishes
            ports = tuple((cp, hp) for _, hp, cp in r.ports.bound)
            held = tuple(f"{hp}/tcp" for _, hp in ports)
            self.containers[r.host] = [
                replace(c, published=ports, host_ports=(*c.host_ports, *held))
                if c.task == r.task
                else c
                for c in self.containers[r.host]
            ]


def edges(n: int) -> list[Host]:
    """host1..hostN, each reached at an address of its own (10.0.0.N)."""
    return [replace(host(f"host{i}"), private_address=f"10.0.0.{i}") for i in range(1, n + 1)]


def web(**kw: object) -> Service:
    base: dict[str, object] = {"replicas": 2, "health": HC, "ingress": ROUTE, "drain_timeout": 1.0}
    base["update"] = UpdatePolicy(monitor=0.0)
    return svc(**{**base, **kw})


def on(name: str) -> tuple[Constraint, ...]:
    return (Constraint("host", "==", name),)


def hosts_of(w: World, service: str = "web") -> list[str]:
    return sorted(c.host for c in w.live(service))


def settled(w: TrafficWorld, spec: Service) -> None:
    """`spec` applied and converged; what the proxies said while it started is forgotten."""
    w.apply(spec)
    converged_within(w, 10)
    w.empty_routes.clear()


def converged_within(w: World, passes: int) -> int:
    for n in range(1, passes + 1):
        if w.step().converged:
            return n
    raise AssertionError(f"not converged in {passes} passes: {w.log[-1].waiting}")


# -- break 1: a constraint change of a routed service -------------------------------------------
def test_a_routed_service_moved_by_a_constraint_change_converges_and_never_loses_a_route() -> None:
    w = TrafficWorld(edges(3))
    settled(w, web(constraints=on("host1")))
    assert hosts_of(w) == ["host1", "host1"]
    w.apply(web(constraints=on("host2")))  # the default order, stop-first: a move surges
    converged_within(w, 20)
    assert hosts_of(w) == ["host2", "host2"]
    assert w.violations == []
    assert w.empty_routes == []


def test_a_stop_first_update_of_a_routed_service_drains_each_task_before_replacing_it() -> None:
    """A new spec stop-first (image and place both change): each old task leaves the
    routes, waits out drain_timeout, and only then is replaced; the slot is not in flight
    while it drains (a drained task is never monitored as if it were the new one)."""
    w = TrafficWorld(edges(3))
    settled(w, web(constraints=on("host1")))
    w.apply(web(image="web:6", constraints=on("host2")))
    first = w.step()
    assert first.run == ()
    assert [e.kind for e in first.events][-1] == "draining"
    assert first.state.services["web"].rollout.inflight == ()
    assert len(first.state.draining) == 1  # parallelism 1: one drains at a time
    converged_within(w, 30)
    assert hosts_of(w) == ["host2", "host2"]
    assert {c.image for c in w.live("web")} == {"web:6"}
    assert w.violations == []
    assert w.empty_routes == []


def test_a_gate_never_takes_a_moved_tasks_old_twin_for_its_new_task() -> None:
    """A move's old task has the very same spec as its replacement: the gate judges only
    the task the slot's record assigned, so the old one never passes the gate for it."""
    w = TrafficWorld(edges(2))
    w.apply(web(replicas=1, constraints=on("host1")))
    converged_within(w, 10)
    w.apply(web(replicas=1, constraints=on("host2")))
    w.down.add("host2")  # the new task's host stops answering after its run
    plan = w.step()
    assert [r.host for r in plan.run] == []  # host2 unreachable: nowhere to move yet
    w.down.discard("host2")
    converged_within(w, 20)
    assert hosts_of(w) == ["host2"]


# -- break 2: old tasks judged by the spec they run -------------------------------------------
def test_old_tasks_keep_their_routes_while_a_rollout_adds_a_health_check() -> None:
    w = TrafficWorld(edges(2))
    settled(w, web(health=None, update=UpdatePolicy(monitor=1.0, order="start-first")))
    w.apply(web(health=HC, update=UpdatePolicy(monitor=1.0, order="start-first")))
    converged_within(w, 20)
    assert w.empty_routes == []
    assert w.violations == []


def test_old_tasks_keep_their_routes_while_a_rollout_changes_the_routes_container_port() -> None:
    w = TrafficWorld(edges(2))
    settled(w, web())
    moved = (Route("app.test", "/", 9090),)
    w.apply(web(ingress=moved, update=UpdatePolicy(monitor=0.0, order="start-first")))
    plan = w.step()
    (entry,) = plan.routes
    assert len(entry.upstreams) == 2  # the old tasks, at the port their own spec routes
    converged_within(w, 20)
    assert w.empty_routes == []
    assert w.violations == []


def test_task_specs_judge_a_task_by_the_spec_its_label_names() -> None:
    old, new = web(health=None), web(health=HC)
    state = ControllerState()
    w = World([host("host1")])
    w.apply(old)
    w.converge()
    w.apply(new)
    state = w.state
    specs = TaskSpecs.of_state(w.cluster or Cluster("t", "", "", ()), state)
    (task,) = w.live()[:1]
    assert specs.of(task) == old
    assert specs.of(replace(task, spec="unknown")) == new  # not kept: the effective spec


# -- break 3: expose on and off keep the name answering ----------------------------------------
def test_a_name_proxy_never_starts_with_no_upstream_and_an_empty_one_yields_to_the_alias() -> None:
    from minidock.core.endpoints import Endpoints

    empty = (Endpoints("api", 8080),)
    full = (Endpoints("api", 8080, ("10.0.0.1:31000",), ("t1",)),)
    none: dict[str, dict[str, NameProxy] | None] = {"host1": {}}
    assert name_steps(empty, none, {"host1"}, {}) == ()  # expose on, no new task ready yet
    assert name_steps(full, none, {"host1"}, {}) == (NameStep("host1", ("api",)),)
    running = {"host1": {"api": NameProxy("api", True, "d")}}
    # expose off: the old tasks' proxy stays while it has an upstream...
    assert name_steps(full, running, {"host1"}, {"host1": {"api"}}) == (
        NameStep("host1", ("api",)),
    )
    # ...and goes once it has none and a task there carries the alias again
    assert name_steps(empty, running, {"host1"}, {"host1": {"api"}}) == (
        NameStep("host1", (), ("api",)),
    )
    assert name_steps(empty, running, {"host1"}, {}) == (NameStep("host1", ("api",)),)


# -- break 4: hooks one at a time ----------------------------------------------------------------
def hooked(image: str) -> Service:
    return svc(image=image, replicas=2, before_update=Hook(("migrate",), timeout=600.0))


def hook_run(w: World, record: HookRecord, state: str = "running") -> OneOff:
    return OneOff("h1", f"web.hook.{record.run}", "host1", "web", record.run, HOOK_KIND, state)  # type: ignore[arg-type]


def test_a_new_generation_while_a_hook_runs_ends_it_first_and_starts_nothing_meanwhile() -> None:
    w = World([host("host1"), host("host2")])
    w.apply(hooked("web:5"))
    first = decide(w.cluster, w.inventory, w.observe(), w.state, w.now)  # type: ignore[arg-type]
    (start,) = first.hooks
    assert start.act is HookAct.START
    assert first.run == ()
    w.state = first.state
    running = hook_run(w, first.state.services["web"].hook)
    w.apply(hooked("web:6"))  # generation 2 while generation 1's hook runs
    seen = w.observe()
    seen.hosts["host1"] = replace(seen.hosts["host1"], oneoffs=(running,))
    plan = decide(w.cluster, w.inventory, seen, w.state, w.now)  # type: ignore[arg-type]
    (ended,) = plan.hooks
    assert ended.act is HookAct.SUPERSEDE
    assert ended.oneoff == running
    assert plan.run == ()  # no task of either generation before its hook succeeded
    assert "hook-superseded" in [e.kind for e in plan.events]
    w.state = plan.state
    gone = decide(w.cluster, w.inventory, w.observe(), w.state, w.now)  # type: ignore[arg-type]
    (second,) = gone.hooks
    assert second.act is HookAct.START
    assert second.record.generation == 2
    assert gone.run == ()


def test_the_previous_generation_refills_slots_only_where_its_hook_succeeded() -> None:
    from minidock.core.rollout import slot_target

    w = World([host("host1")])
    w.apply(hooked("web:5"))
    w.apply(hooked("web:6"))
    ss = w.state.services["web"]
    assert slot_target(ss, 1).image == "web:6"  # generation 1 never cleared: nothing runs
    done = replace(ss, hook=HookRecord(1, ss.previous.spec_hash(), run="r").ended(0, "", 0.0))  # type: ignore[union-attr]
    assert slot_target(done, 1).image == "web:5"  # cleared: it keeps the capacity


# -- break 5: a schedule that gives no time ------------------------------------------------------
def test_a_job_whose_schedule_gives_no_time_waits_alone_and_says_so_once() -> None:
    w = World([host("host1")])
    job = svc("feb31", image="tools:done", replicas=0, schedule=Schedule("0 0 31 2 *"))
    w.apply(job, svc())
    why = "schedule '0 0 31 2 *' (UTC) has no scheduled time within 8 years"
    plan = decide(w.cluster, w.inventory, w.observe(), w.state, w.now, times={"feb31": why})  # type: ignore[arg-type]
    assert [r.service.name for r in plan.run] == ["web"]
    assert [e.kind for e in plan.events if e.service == "feb31"] == ["job-schedule-failed"]
    again = decide(w.cluster, w.inventory, w.observe(), plan.state, w.now, times={"feb31": why})  # type: ignore[arg-type]
    assert [e.kind for e in again.events if e.service == "feb31"] == []
    back = Times(w.now - 10, w.now + 100)
    fine = decide(w.cluster, w.inventory, w.observe(), again.state, w.now, times={"feb31": back})  # type: ignore[arg-type]
    assert fine.state.services["feb31"].job.unscheduled == ""


def test_traffic_holds_only_a_live_task_that_carries_traffic_and_is_not_drained() -> None:
    w = TrafficWorld(edges(1))
    w.apply(web(replicas=1))
    converged_within(w, 10)
    (t,) = w.live()
    assert w.cluster is not None
    traffic = Traffic.of(w.cluster, w.inventory, w.observe(), w.state, w.now)
    assert traffic.holds(t)
    assert not traffic.holds(replace(t, state="exited"))
    plain = replace(w.cluster, services=(svc(replicas=1),))
    w2 = World([host("host1")])
    w2.apply(svc(replicas=1))
    w2.converge()
    assert not Traffic.of(plain, w2.inventory, w2.observe(), w2.state, w2.now).holds(w2.live()[0])


# -- tasks of a spec two applies behind ----------------------------------------------------------
def test_a_task_two_applies_behind_is_judged_by_its_own_spec_until_none_runs_it() -> None:
    """Two applies within one rollout: the first generation's tasks run a spec that is
    neither current nor previous. They are still judged by it (they expose, so they drain
    and the name proxies keep them), the state keeps it while one is seen, and it goes
    with the last of them."""
    from minidock.core.endpoints import names_in_use
    from minidock.store.codec import dumps, loads

    w = TrafficWorld(edges(2))
    first = web(replicas=1, ingress=(), expose=(7070,))
    settled(w, first)
    (task,) = w.live()
    w.apply(web(replicas=1, ingress=(), image="web:6"))
    w.apply(web(replicas=1, ingress=(), image="web:7"))  # before web:6 ran a task
    assert w.cluster is not None
    assert TaskSpecs.of_state(w.cluster, w.state).of(task) == first
    assert names_in_use(w.cluster, w.state)
    kept = w.state.services["web"]
    assert kept.older == (first,)
    assert loads(dumps(kept), type(kept)) == kept  # stored with the state
    converged_within(w, 20)
    assert w.state.services["web"].older == ()
    assert not names_in_use(w.cluster, w.state)


# -- a one-off reaches the cluster's names from a host none of its tasks is on -----------------
def test_a_hook_on_a_host_without_tasks_gets_the_name_proxies_before_it_starts() -> None:
    w = World([host("host1"), host("host2")])
    db = svc("db", image="db:1", replicas=1, health=HC, expose=(5432,))
    w.apply(replace(db, constraints=(Constraint("host", "==", "host2"),)))
    w.converge()
    (task,) = w.live()
    w.containers["host2"] = [replace(c, published=((5432, 31000),)) for c in w.containers["host2"]]
    w.now += 60  # past its monitor: it takes traffic
    w.apply(replace(db, constraints=(Constraint("host", "==", "host2"),)), hooked("web:5"))
    seen = replace(w.observe(), names={"host1": {}, "host2": {}})
    plan = decide(w.cluster, w.inventory, seen, w.state, w.now)  # type: ignore[arg-type]
    (start,) = plan.hooks
    assert (start.act, start.host) == (HookAct.START, "host1")  # no task of the cluster there
    assert plan.run == ()  # web's tasks wait for the hook
    assert [(e.service, e.tasks) for e in plan.endpoints] == [("db", (task.task,))]
    assert NameStep("host1", ("db",)) in plan.names  # started before the hook, in carry's order
    later = replace(seen, hosts={**seen.hosts})
    running = OneOff("h", "web.hook.x", "host1", "web", "x", HOOK_KIND, "running")
    later.hosts["host1"] = replace(later.hosts["host1"], oneoffs=(running,))
    w.state = plan.state
    kept = decide(w.cluster, w.inventory, later, w.state, w.now)  # type: ignore[arg-type]
    assert all(n.host != "host1" or "db" not in n.remove for n in kept.names)
    # the pass that sees it finish (and records the hook's success) keeps the names too:
    # the update's tasks start only in the next pass, one of them on host1
    run = start.record.run
    done = OneOff("h", f"web.hook.{run}", "host1", "web", run, HOOK_KIND, "exited", 0, w.now, w.now)
    later.hosts["host1"] = replace(later.hosts["host1"], oneoffs=(done,))
    proxied = replace(later, names={**later.names, "host1": {"db": NameProxy("db", True)}})
    w.state = kept.state
    finished = decide(w.cluster, w.inventory, proxied, w.state, w.now)  # type: ignore[arg-type]
    assert NameStep("host1", ("db",)) in finished.names  # kept, not removed
