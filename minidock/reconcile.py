"""The reconcile pass: (desired, observed, state, now) -> Plan. Pure: no I/O, no clock.

Level-based, like controller-runtime and Nomad's reconciler: every pass reads the whole
observed state, diffs it against the effective specs in the controller state and returns
what to do, named by verb (`run`, `stop`), plus the next controller state. Running it again
on the converged result returns an empty plan.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field, replace

from minidock.events import Event
from minidock.model import (
    Cluster,
    Container,
    ControllerState,
    HostState,
    Inventory,
    Observed,
    Rollout,
    RolloutStatus,
    SeenTask,
    Service,
    ServiceState,
    SlotState,
)
from minidock.scheduler import Fleet, place, service_ports
from minidock.supervise import account_exit, count_failure, health_gate, ready


@dataclass(frozen=True)
class Run:
    """Start a new task for a slot on a host. With `replaces`, stop-first: confirm the image on
    the host, then stop and remove the old task, then run."""

    service: Service
    slot: int
    host: str
    task: str
    reason: str
    replaces: Container | None = None
    restart: bool = False

    @property
    def name(self) -> str:
        return f"{self.service.name}.{self.slot}.{self.task}"


@dataclass(frozen=True)
class Stop:
    """Stop (if live) and remove a task; with `failure`, keep its log tail first."""

    container: Container
    reason: str
    failure: bool = False


@dataclass(frozen=True)
class Pending:
    service: str
    slot: int
    reason: str


@dataclass(frozen=True)
class Plan:
    state: ControllerState
    run: tuple[Run, ...] = ()
    stop: tuple[Stop, ...] = ()
    pending: tuple[Pending, ...] = ()
    waiting: tuple[str, ...] = ()  # progress not yet possible: backoff, health gates, holds
    events: tuple[Event, ...] = ()

    @property
    def actions(self) -> int:
        return len(self.run) + len(self.stop)

    @property
    def converged(self) -> bool:
        return not (self.run or self.stop or self.pending or self.waiting)

    def paused(self) -> list[str]:
        """Services whose rollout is paused: they wait for an operator, like Failed slots."""
        return [name for name, ss in self.state.services.items() if ss.rollout.status == "paused"]

    def failed_slots(self) -> list[tuple[str, int, str]]:
        return [
            (name, n, slot.last_exit)
            for name, ss in self.state.services.items()
            if ss.spec.desired == "running"
            for n, slot in sorted(ss.slots.items())
            if slot.failed and n <= ss.spec.replicas
        ]


def task_id(cluster: str, service: str, slot: int, spec: str, now: float) -> str:
    """A deterministic id: the same decision replayed names the same container, so Docker
    itself refuses a duplicate `docker run` (see runner: a name conflict is adoption)."""
    raw = f"{cluster}/{service}/{slot}/{spec}/{now:.6f}"
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


def slot_target(ss: ServiceState, slot: int) -> Service:
    """The spec a slot should run: a paused rollout keeps slots it has not reached on the
    previous spec, so a failed update costs no capacity."""
    r = ss.rollout
    if r.status == "paused" and not r.rollback and slot not in r.done and ss.previous:
        return ss.previous
    return ss.spec


def back_to_previous(ss: ServiceState, slots: list[int]) -> ServiceState:
    """Where a failure paused an update, its failed slots go back to the previous spec,
    known good, at once: the restart backoff the new spec's failure set does not apply."""
    if ss.rollout.status != "paused" or ss.rollout.rollback or not slots:
        return ss
    again = {n: replace(ss.slot(n), next_start=0.0) for n in slots}
    return replace(ss, slots={**ss.slots, **again})


def rollout_active(r: Rollout) -> bool:
    return r.status in ("updating", "rolling_back")


# -- the pass ---------------------------------------------------------------------------------
@dataclass
class _Pass:
    cluster: Cluster
    inventory: Inventory
    observed: Observed
    state: ControllerState
    now: float
    runs: list[Run] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    hosts: dict[str, HostState] = field(default_factory=dict)
    services: dict[str, ServiceState] = field(default_factory=dict)
    handled: set[str] = field(default_factory=set)  # container ids already given an action
    held: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # slot -> hosts
    # placements wait until every slot is decided, then go in priority order:
    wanted: list[tuple[bool, str, int, Service]] = field(default_factory=list)  # empty slots
    moves: list[tuple[str, int, Service, Container, str]] = field(default_factory=list)
    updates: list[tuple[str, list[tuple[int, Container]], bool]] = field(default_factory=list)
    fleet: Fleet = field(init=False)
    _mine: list[Container] | None = None

    def event(
        self, kind: str, message: str, *, service: str = "", slot: int = 0, host: str = ""
    ) -> None:
        self.events.append(Event(self.now, kind, message, service=service, slot=slot, host=host))

    # hosts ---------------------------------------------------------------------------------
    def update_hosts(self) -> None:
        """One probe per host per pass: a failure counts toward `down_after` across runs."""
        for host in self.inventory.hosts:
            old = self.state.host(host.name)
            obs = self.observed.hosts.get(host.name)
            if obs is not None and obs.ok:
                seen = tuple(
                    SeenTask(c.service, c.slot, c.task, c.spec) for c in obs.containers if c.live
                )
                new = HostState(drained=old.drained, last_seen=self.now, tasks=seen)
                if old.down:
                    self.event("host-up", f"{host.name} answers again", host=host.name)
            else:
                failures = old.failures + 1
                down = failures >= host.down_after
                error = obs.error if obs is not None else "not probed"
                new = replace(old, failures=failures, down=down, last_error=error)
                if not down:
                    self.waiting.append(
                        f"{host.name}: unreachable ({failures}/{host.down_after} failed probes)"
                    )
                if down and not old.down:
                    self.event(
                        "host-down",
                        f"{host.name} down after {failures} failed probes: {error}",
                        host=host.name,
                    )
            self.hosts[host.name] = new
        for name, hs in self.hosts.items():
            if hs.failures and not hs.down:
                for t in hs.tasks:
                    self.held.setdefault((t.service, t.slot), []).append(name)
        eligible = {h: self.why_not_eligible(h) for h in self.hosts}
        live = [c for c in self.observed.containers() if c.host in self.hosts and c.live]
        self.fleet = Fleet.build(self.inventory.hosts, eligible, live)

    def why_not_eligible(self, name: str) -> str | None:
        hs = self.hosts[name]
        if hs.down:
            return f"down ({hs.last_error})"
        if hs.failures:
            return f"unreachable ({hs.last_error})"
        if hs.drained:
            return "drained"
        return None

    def mine(self) -> list[Container]:
        """Live and exited containers of this cluster on hosts that answered this pass."""
        if self._mine is None:
            self._mine = [
                c
                for c in self.observed.containers()
                if c.cluster == self.cluster.name and self.is_up(c.host)
            ]
        return self._mine

    def is_up(self, host: str) -> bool:
        hs = self.hosts.get(host)
        return hs is not None and hs.failures == 0

    # services ------------------------------------------------------------------------------
    def run_all(self) -> None:
        self.update_hosts()
        self.services = dict(self.state.services)
        containers = self.mine()
        by_service: dict[str, list[Container]] = defaultdict(list)
        for c in containers:
            by_service[c.service].append(c)
        for name, found in sorted(by_service.items()):
            if name not in self.services:
                for c in found:
                    self.stop(c, f"service {name} is no longer in the spec")
        for name in self.state.order or tuple(self.services):
            if name not in self.services:
                continue
            if self.services[name].spec.desired == "stopped":
                self.stop_service(name, by_service.get(name, []))
            else:
                self.run_service(name, by_service.get(name, []))
        self.place_wanted()  # due restarts, then new tasks,
        for move in self.moves:  # then drains' replacements,
            self.replace_elsewhere(*move)
        for name, outdated, complete in self.updates:  # then rolling updates
            self.advance_rollout(name, outdated, complete=complete)

    def stop(self, c: Container, reason: str, *, failure: bool = False) -> None:
        if c.id in self.handled:
            return
        self.handled.add(c.id)
        self.stops.append(Stop(c, reason, failure))
        if c.live:
            self.fleet.free(c)

    def stop_service(self, name: str, found: list[Container]) -> None:
        """Desired stopped: remove its tasks, after every stopping dependent is gone."""
        dependents = [
            other
            for other, ss in self.services.items()
            if name in ss.spec.depends_on and ss.spec.desired == "stopped"
        ]
        blocking = [c.service for c in self.mine() if c.service in dependents and c.live]
        if blocking and any(c.live for c in found):
            self.waiting.append(f"{name}: waiting for {', '.join(sorted(set(blocking)))} to stop")
            return
        for c in sorted(found, key=lambda c: (c.live, c.slot)):
            self.stop(c, f"service {name} is desired stopped")

    def deps_ready(self, ss: ServiceState) -> str | None:
        """None when every dependency has all replicas running and healthy and is not rolling
        (updating or rolling back); else why not."""
        for dep in ss.spec.depends_on:
            dss = self.services.get(dep)
            if dss is None or dss.spec.desired != "running":
                return f"waiting for dependency {dep} (not running)"
            if rollout_active(dss.rollout):
                return f"waiting for dependency {dep} to finish its rollout"
            healthy = {c.slot for c in self.mine() if c.service == dep and ready(c)}
            if len(healthy & set(range(1, dss.spec.replicas + 1))) < dss.spec.replicas:
                return f"waiting for dependency {dep} to be healthy"
        return None

    def run_service(self, name: str, found: list[Container]) -> None:
        ss = self.services[name]
        replicas = ss.spec.replicas
        for c in sorted(found, key=lambda c: (c.live, -c.slot)):
            if c.slot > replicas:
                self.stop(c, f"scale down {name} to {replicas}")
        self.services[name] = self.gate_rollout(ss, [c for c in found if c.slot <= replicas])
        outdated: list[tuple[int, Container]] = []
        for slot in range(1, replicas + 1):
            here = [c for c in found if c.slot == slot and c.id not in self.handled]
            stale = self.run_slot(name, slot, here)
            if stale is not None and slot not in self.services[name].rollout.inflight:
                outdated.append((slot, stale))
        settled = {
            c.slot
            for c in found
            if c.id not in self.handled and c.spec == ss.spec.spec_hash() and ready(c)
        }
        self.updates.append((name, outdated, len(settled) >= replicas))

    def ghosts(self, service: str, slot: int) -> list[str]:
        """Hosts that are unreachable but not yet down and last held this slot."""
        return self.held.get((service, slot), [])

    def run_slot(self, name: str, slot: int, here: list[Container]) -> Container | None:
        """Decide one slot; returns its task when that task is outdated (for the rollout)."""
        ss = self.services[name]
        target = slot_target(ss, slot)
        spec = target.spec_hash()
        live = [c for c in here if c.live and c.state != "created"]
        dead = [c for c in here if not (c.live and c.state != "created")]
        held = self.ghosts(name, slot)

        if live or held:
            for c in dead:
                self.stop(c, f"{c.name} superseded")
        else:
            state = ss.slot(slot)
            lapsed: list[Container] = []
            for c in sorted(dead, key=lambda c: c.finished_at or 0.0):
                before = state
                state = account_exit(state, c, target.restart, self.now)
                self.stop(c, state.last_exit, failure=state is not before)
                if state is not before and not state.complete:
                    lapsed.append(c)
            self.set_slot(name, slot, state)
            if lapsed:
                target = self.failed_after_gate(name, slot, lapsed[-1], state.last_exit)
            # a restart is due also when the exited task was removed in an earlier pass
            self.fill(name, slot, target, restart=bool(dead or state.attempts))
            return None

        for c in [c for c in live if c.health == "unhealthy" and slot not in ss.rollout.inflight]:
            line = f"task {c.task} unhealthy: {c.health_log or 'health check failed'}"
            state = count_failure(ss.slot(slot), c.task, self.now, line, target.restart)
            self.set_slot(name, slot, state)
            self.stop(c, line, failure=True)
            live.remove(c)
            target = self.failed_after_gate(name, slot, c, line)
            spec = target.spec_hash()
        if not live:
            if not held:
                self.fill(name, slot, target, restart=True)
            return None
        if held:
            return None  # an unreachable host may still run it: act on what we can see

        good = [c for c in live if c.spec == spec and not self.hosts[c.host].drained]
        settled = [c for c in good if ready(c)]
        if len(live) > 1:
            if good and slot in ss.rollout.inflight:
                return None  # start-first: the old task stays until the new one passes its gate
            if settled:
                keep = max(settled, key=lambda c: (c.created_at, c.id))
            elif good:
                self.waiting.append(f"{name}.{slot}: replacement starting")
                return None
            else:
                keep = max(live, key=lambda c: (c.state == "running", c.created_at, c.id))
            for c in live:
                if c is not keep:
                    self.stop(c, f"{name}.{slot} has a newer task {keep.task}")
            live = [keep]
        task = live[0]
        if self.hosts[task.host].drained:
            self.moves.append((name, slot, target, task, f"drain {task.host}"))
            return None
        if task.spec != spec:
            return task
        if not ready(task):
            self.waiting.append(f"{name}.{slot}: task {task.task} {task.state} ({task.health})")
        return None

    def failed_after_gate(self, name: str, slot: int, c: Container, why: str) -> Service:
        """A task that passed its health gate fails later in the same rollout: count it
        against the rollout (SwarmKit stops watching after `monitor`). Returns the slot's
        target spec afterwards (the failure action may pause or roll back)."""
        ss = self.services[name]
        r = ss.rollout
        if rollout_active(r) and slot in r.done and c.spec == ss.spec.spec_hash():
            r = replace(r, done=tuple(n for n in r.done if n != slot), failures=r.failures + 1)
            ss = self.on_failure(replace(ss, rollout=r), f"{why} (after its monitor)")
            self.services[name] = back_to_previous(ss, [slot])
        return slot_target(self.services[name], slot)

    def set_slot(self, name: str, slot: int, state: SlotState) -> None:
        """Keep a slot's bookkeeping; reaching the crash-loop limit (by exits, unhealthy
        tasks or failed health gates alike) is an event."""
        ss = self.services[name]
        if state.failed and not ss.slot(slot).failed:
            self.event(
                "failed", f"{name}.{slot} failed: {state.last_exit}", service=name, slot=slot
            )
        if ss.slot(slot) != state:
            self.services[name] = replace(ss, slots={**ss.slots, slot: state})

    def fill(self, name: str, slot: int, target: Service, *, restart: bool) -> None:
        """An empty slot: wants a task unless Failed, complete, backing off or blocked."""
        ss = self.services[name]
        state = ss.slot(slot)
        if state.failed or state.complete:
            return
        if self.now < state.next_start:
            self.waiting.append(
                f"{name}.{slot}: restart backoff, {state.next_start - self.now:.0f}s left"
            )
            return
        blocked = self.deps_ready(ss)
        if blocked:
            self.pending.append(Pending(name, slot, blocked))
            return
        self.wanted.append((not restart, name, slot, target))

    def place_wanted(self) -> None:
        """Place the empty slots' tasks: due restarts first, so lost capacity comes back
        before anything new takes the room."""
        for fresh, name, slot, target in sorted(self.wanted, key=lambda w: w[0]):
            where = place(target, self.fleet)
            if where.host is None:
                self.pending.append(Pending(name, slot, where.why))
                continue
            reason = "place" if fresh else "restart"
            self.runs.append(self.new_run(target, slot, where.host, reason, restart=not fresh))
            ss = self.services[name]
            r = ss.rollout
            if rollout_active(r) and slot not in r.done and slot not in r.inflight:
                self.services[name] = replace(ss, rollout=replace(r, inflight=(*r.inflight, slot)))

    def new_run(self, service: Service, slot: int, host: str, reason: str, **kw: object) -> Run:
        tid = task_id(self.cluster.name, service.name, slot, service.spec_hash(), self.now)
        return Run(service, slot, host, tid, reason, **kw)  # type: ignore[arg-type]

    def replace_elsewhere(
        self, name: str, slot: int, target: Service, old: Container, why: str
    ) -> None:
        """Start-first replacement on another host; the old task stops once it is ready."""
        blocked = self.deps_ready(self.services[name])
        if blocked is not None:
            self.pending.append(Pending(name, slot, f"{why}: {blocked}"))
            return
        where = place(target, self.fleet, avoid=[old.host])
        if where.host is None:
            self.pending.append(Pending(name, slot, f"{why}: {where.why}"))
            return
        self.runs.append(self.new_run(target, slot, where.host, why))

    # rollouts ------------------------------------------------------------------------------
    def gate_rollout(self, ss: ServiceState, found: list[Container]) -> ServiceState:
        """Judge every in-flight slot's new task; pass, wait, or fail with the failure action."""
        r = ss.rollout
        if not rollout_active(r) or not r.inflight:
            return ss
        spec = ss.spec.spec_hash()
        since, seen = dict(r.healthy_since), dict(r.first_seen)
        done, inflight, failures, failed = list(r.done), [], [], []
        for slot in r.inflight:
            new = [c for c in found if c.slot == slot and c.spec == spec]
            newest = max(new, key=lambda c: (c.created_at, c.id)) if new else None
            if newest is not None:  # the gate runs on the controller's clock, not the host's
                seen.setdefault(slot, self.now)
                if ready(newest):
                    since.setdefault(slot, self.now)
            verdict, why = health_gate(
                newest, ss.spec, since.get(slot), self.now, seen_at=seen.get(slot)
            )
            if verdict != "wait" or newest is None:
                seen.pop(slot, None)
            if verdict == "ready":
                done.append(slot)
                since.pop(slot, None)
                r = replace(r, last_batch_at=self.now)
                for c in found:
                    if c.slot == slot and c is not newest and c.live:
                        self.stop(c, f"replaced by {newest.task if newest else ''}")
            elif verdict == "fail" and newest is not None:
                failures.append(why)
                failed.append(slot)
                since.pop(slot, None)
                self.stop(newest, why, failure=True)
                state = count_failure(ss.slot(slot), newest.task, self.now, why, ss.spec.restart)
                self.set_slot(ss.spec.name, slot, state)
                ss = self.services[ss.spec.name]
            elif newest is None and self.ghosts(ss.spec.name, slot):
                inflight.append(slot)  # on a host that did not answer: still counts in flight
                self.waiting.append(f"{ss.spec.name}.{slot}: its host is unreachable")
            elif newest is None:
                since.pop(slot, None)  # its run never happened: the slot is decided afresh
            else:
                inflight.append(slot)
                self.waiting.append(f"{ss.spec.name}.{slot}: {why}")
        r = replace(
            r,
            done=tuple(sorted(set(done))),
            inflight=tuple(inflight),
            healthy_since=tuple(sorted(since.items())),
            first_seen=tuple(sorted(seen.items())),
            failures=r.failures + len(failures),
        )
        ss = replace(ss, rollout=r)
        if failures:
            ss = back_to_previous(self.on_failure(ss, failures[-1]), failed)
        return ss

    def on_failure(self, ss: ServiceState, why: str) -> ServiceState:
        ss, event = failure_action(ss, why, self.now)
        self.events.append(event)
        return ss

    def advance_rollout(
        self, name: str, outdated: list[tuple[int, Container]], *, complete: bool
    ) -> None:
        """Start the next replacements, `parallelism` in flight at a time, `delay` apart;
        the rollout completes when every slot runs a ready task of the target spec."""
        ss = self.services[name]
        r = ss.rollout
        if not outdated and not r.inflight:
            if rollout_active(r) and complete:
                status: RolloutStatus = "rolled_back" if r.status == "rolling_back" else "completed"
                self.event(f"rollout-{status}", f"{name}: rollout {status}", service=name)
                self.services[name] = replace(
                    ss, rollout=replace(r, status=status, inflight=(), healthy_since=())
                )
            return
        if r.status == "paused":
            return
        if not rollout_active(r):
            r = Rollout(status="updating", total=ss.spec.replicas, last_batch_at=0.0)
            self.event("rollout-started", f"{name}: updating {len(outdated)} tasks", service=name)
        policy = ss.spec.update
        room = policy.parallelism - len(r.inflight)
        if r.inflight and room > 0 and self.now < r.last_batch_at + policy.delay:
            room = 0
        if not r.inflight and self.now < r.last_batch_at + policy.delay:
            self.waiting.append(f"{name}: update delay")
            room = 0
        started = []
        blocked = self.deps_ready(ss)
        # a slot whose replacement failed waits out its backoff (or stays Failed) and goes
        # after slots not tried yet: the rollout moves on rather than retry one every pass
        due = [
            (n, c)
            for n, c in outdated
            if self.now >= ss.slot(n).next_start and not ss.slot(n).failed
        ]
        due.sort(key=lambda d: len(ss.slot(d[0]).attempts))
        for slot, old in due[: max(0, room)]:
            if blocked:
                self.pending.append(Pending(name, slot, blocked))
                break
            if self.start_replacement(ss.spec, slot, old):
                started.append(slot)
        if len(outdated) > len(started) or started or r.inflight:
            verb = "rolling back" if r.rollback else "updating"
            total = r.total or ss.spec.replicas
            self.waiting.append(f"{name}: {verb} {len(r.done) + len(started)}/{total}")
        self.services[name] = replace(ss, rollout=replace(r, inflight=(*r.inflight, *started)))

    def start_replacement(self, target: Service, slot: int, old: Container) -> bool:
        if target.update.order == "start-first":
            where = place(target, self.fleet, avoid=[old.host])
            if where.host is not None:
                self.runs.append(self.new_run(target, slot, where.host, "update (start-first)"))
                return True
            if not set(service_ports(target)) & set(old.host_ports):
                self.pending.append(Pending(target.name, slot, where.why))
                return False
            self.event(
                "rollout-stop-first",
                f"{target.name}.{slot}: host port held by the old task, replacing stop-first",
                service=target.name,
                slot=slot,
            )
        self.handled.add(old.id)
        self.fleet.free(old)
        where = place(target, self.fleet, avoid=())
        if where.host is None:
            self.handled.discard(old.id)
            self.fleet.reserve(old.host, target)
            self.pending.append(Pending(target.name, slot, where.why))
            return False
        self.runs.append(self.new_run(target, slot, where.host, "update", replaces=old))
        return True

    def finish(self) -> Plan:
        state = replace(self.state, hosts=self.hosts, services=self.services)
        runs = sorted(self.runs, key=lambda r: not r.restart)  # due restarts first
        return Plan(
            state=state,
            run=tuple(runs),
            stop=tuple(self.stops),
            pending=tuple(self.pending),
            waiting=tuple(self.waiting),
            events=tuple(self.events),
        )


def reconcile(
    desired: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
) -> Plan:
    """One decision: what to run and stop so the observed fleet matches the desired state."""
    p = _Pass(desired, inventory, observed, state, now)
    p.run_all()
    return p.finish()


# -- operator intents: pure state transitions --------------------------------------------------
def admit(state: ControllerState, cluster: Cluster, generation: int) -> ControllerState:
    """Take a newly applied cluster spec as the desired state.

    A service whose run settings changed starts a rollout and keeps its old spec for
    rollback; any change to a service clears its Failed slots and backoff; the same spec
    again resumes a paused update."""
    services: dict[str, ServiceState] = {}
    for svc in cluster.services:
        old = state.services.get(svc.name)
        if old is None:
            services[svc.name] = ServiceState(spec=svc, generation=generation)
        elif old.spec == svc and old.rollout.status == "paused" and not old.rollout.rollback:
            resumed = replace(old.rollout, status="updating", failures=0, reason="")
            services[svc.name] = replace(old, rollout=resumed)  # as `docker service update`
        elif old.spec == svc:
            services[svc.name] = old
        else:
            changed = old.spec.spec_hash() != svc.spec_hash()
            rollout = Rollout(status="updating", total=svc.replicas) if changed else old.rollout
            services[svc.name] = ServiceState(
                spec=svc,
                generation=generation,
                previous=old.spec if changed else old.previous,
                previous_generation=old.generation if changed else old.previous_generation,
                rollout=rollout,
                slots={},
            )
    return replace(
        state,
        cluster=cluster.name,
        generation=generation,
        order=tuple(s.name for s in cluster.services),
        services=services,
    )


def failure_action(ss: ServiceState, why: str, now: float) -> tuple[ServiceState, Event]:
    """Apply `update.failure_action` once the failure ratio is exceeded."""
    r = ss.rollout
    policy = ss.spec.update
    name = ss.spec.name
    if (
        policy.failure_action == "continue"
        or r.failures / max(1, r.total) <= policy.max_failure_ratio
    ):
        return (
            replace(ss, rollout=replace(r, reason=why)),
            Event(now, "rollout-failure", f"{name}: {why}; continuing", service=name),
        )
    if policy.failure_action == "rollback" and r.status == "updating" and ss.previous:
        return (
            rolled_back(ss, f"rolled back: {why}"),
            Event(now, "rollout-rollback", f"{name}: rolling back: {why}", service=name),
        )
    return (
        replace(ss, rollout=replace(r, status="paused", reason=why, inflight=(), healthy_since=())),
        Event(now, "rollout-paused", f"{name}: paused: {why}", service=name),
    )


def rollouts_started(before: ControllerState, after: ControllerState, now: float) -> list[Event]:
    """A `rollout-started` event for each service that `admit` set updating."""
    return [
        Event(now, "rollout-started", f"{name}: updating to generation {ss.generation}", name)
        for name, ss in after.services.items()
        if ss.rollout.status == "updating"
        and (name not in before.services or before.services[name].rollout != ss.rollout)
    ]


def failed_updates(state: ControllerState, generation: int) -> list[tuple[str, str]]:
    """Services whose update from `generation` was rolled back automatically, with why:
    the apply that made that generation failed, though the fleet converged."""
    return [
        (name, ss.rollout.reason)
        for name, ss in state.services.items()
        if ss.rollout.rollback and ss.previous_generation == generation
    ]


def rolled_back(ss: ServiceState, reason: str) -> ServiceState:
    """Swap to the previous spec and roll every task back the same way; a failing rollback
    pauses (never loops), since its rollout is `rolling_back`, not `updating`."""
    assert ss.previous is not None
    return ServiceState(
        spec=ss.previous,
        generation=ss.previous_generation or ss.generation,
        previous=ss.spec,
        previous_generation=ss.generation,
        rollout=Rollout(
            status="rolling_back", reason=reason, total=ss.previous.replicas, rollback=True
        ),
        slots={},
    )


def rollback(state: ControllerState, service: str) -> ControllerState:
    """`minidock rollback SERVICE`: go back to the previous spec."""
    ss = state.services[service]
    if ss.previous is None:
        raise ValueError(f"service {service} has no previous spec to roll back to")
    return _with_service(state, rolled_back(ss, "rolled back by the operator"))


def reset(state: ControllerState, service: str) -> ControllerState:
    """`minidock reset SERVICE`: clear crash-loop failures and backoff timers."""
    ss = state.services[service]
    return _with_service(state, replace(ss, slots={}))


def set_drained(state: ControllerState, host: str, drained: bool) -> ControllerState:
    return replace(state, hosts={**state.hosts, host: replace(state.host(host), drained=drained)})


def note_failure(
    state: ControllerState, service: str, slot: int, task: str, line: str, now: float
) -> ControllerState:
    """An act failed (e.g. `docker run` refused, image missing): count it against the slot,
    and against the rollout when the slot was part of one."""
    ss = state.services.get(service)
    if ss is None:
        return state
    slot_state = count_failure(ss.slot(slot), task, now, line, ss.spec.restart)
    ss = replace(ss, slots={**ss.slots, slot: slot_state})
    r = ss.rollout
    if rollout_active(r) and slot in r.inflight:
        r = replace(r, inflight=tuple(s for s in r.inflight if s != slot), failures=r.failures + 1)
        ss, _ = failure_action(replace(ss, rollout=r), line, now)
    return _with_service(state, ss)


def note_exit(
    state: ControllerState, service: str, slot: int, line: str, reason: str = ""
) -> ControllerState:
    """Keep the diagnosis (exit code and log tail) of a slot's last failure; where that
    failure (`reason`, without the log) is the rollout's reason, the rollout's too."""
    ss = state.services.get(service)
    if ss is None:
        return state
    ss = replace(ss, slots={**ss.slots, slot: replace(ss.slot(slot), last_exit=line)})
    r = ss.rollout
    if reason and reason != line and reason in r.reason:
        ss = replace(ss, rollout=replace(r, reason=r.reason.replace(reason, line, 1)))
    return _with_service(state, ss)


def _with_service(state: ControllerState, ss: ServiceState) -> ControllerState:
    return replace(state, services={**state.services, ss.spec.name: ss})
