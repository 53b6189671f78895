"""One pass, one decision: (desired, observed, state, now) -> Plan. Pure: no I/O, no clock.

Everything a pass will do is decided here, once, from what it observed (Nomad's
`Compute()`, SwarmKit's orchestrators): the act path (minidock.act.acts) only carries out the
plan's fields, and the runner commits the plan before any act and the outcomes after.

The decision, in order, each part reading what the parts before it decided:
0. each autoscaled service's count, from the proxies' counters (`autoscaling.step`);
1. the task verbs (`reconcile`): hosts through their machine, slots decided, wants placed,
   rollouts advanced; a rollout that would replace a task stop-first while the task still
   carries traffic drains it first instead (it asks `traffic.Traffic.holds`);
2. the traffic gate (`traffic.gate`): every stop of a task that routes or exposes waits
   until no answering proxy sends to it and `drain_timeout` has passed;
3. the host ports each routed task publishes on (`task_ports.choose`, host by host);
4. what every proxy holds: the route table and each ingress proxy's step, the endpoints and
   each host's name proxies (`routes`, `endpoints`), all judged from the state the gate
   left (a draining task is out of them in the pass that decides its stop);
5. the ACME orders: those to start (`tls.due`, while every answering proxy runs its
   spec), those started by an earlier pass whose responses this pass loads and then
   tells the CA of (`tls.answering`), those answered to collect (`tls.pending`), those
   past their time failed (`tls.overdue`), and the HTTP-01 responses the proxies serve
   meanwhile (in the config the pass loads anyway);
6. the before_update hooks' steps (`hooks.step`), the scheduled jobs' (`schedule.step`)
   with their placements, and the finished one-off tasks to remove.
While the mass-loss guard holds, only probes are recorded and the proxies keep what they
have (step 4 still runs: hosts that did not answer keep their upstreams); nothing of 6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from minidock.core import autoscaling, gpus, hooks, saving, schedule, tls
from minidock.core.endpoints import endpoint_table, name_steps
from minidock.core.hooks import HOOK_KIND, HookAct, HookStep
from minidock.core.jobs import (
    JobAct,
    JobCollect,
    JobStart,
    finished_oneoffs,
    oneoff_spec,
    place_oneoff,
)
from minidock.core.plan import Plan, Run, Waiting, WaitKind
from minidock.core.reconcile import reconcile
from minidock.core.routes import ProxyStep, RouteTable, proxy_steps, route_table
from minidock.core.schedule import JOB_KIND, JobRecord, JobRun, PendingRun, Times, record_run
from minidock.core.specs import TaskSpecs
from minidock.core.state import ControllerState, ServiceState
from minidock.core.task_ports import choose, held
from minidock.core.tls import due
from minidock.core.traffic import Traffic, gate
from minidock.model import Cluster, Event, Ingress, Inventory, Observed, OneOff

__all__ = ["acme_names", "decide"]


def decide(
    desired: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    times: Mapping[str, Times | str] | None = None,
    force_down: bool = False,
) -> Plan:
    """The whole of one pass's decision. `times`: each scheduled job's times around `now`
    (the adapter reads its cron expression: minidock.schedules), or why they cannot be
    had; `force_down`: the mass-loss guard does not hold this pass."""
    state, scheduled = saving.schedule_all(state, times or {}, now)
    state, scaled = _autoscaled(state, observed, now)
    scheduled = (*scheduled, *scaled)
    specs = TaskSpecs.of_state(desired, state)
    traffic = Traffic.of(desired, inventory, observed, state, now, specs)
    plan = reconcile(
        desired, inventory, observed, state, now, force_down=force_down, traffic=traffic
    )
    plan = gate(plan, traffic)
    if scheduled:
        plan = replace(plan, events=(*scheduled, *plan.events))
    plan = _with_ports(plan, desired, inventory, observed)
    plan = _with_gpus(plan, inventory, observed)
    plan = _with_proxies(plan, desired, inventory, observed, now, specs)
    plan = _with_older_dropped(plan, observed)
    if plan.guard:
        return _with_names(plan, desired, inventory, observed, now, specs)
    plan = _with_hooks(plan, desired, inventory, observed, now)
    plan = _with_jobs(plan, desired, inventory, observed, now, times or {})
    plan = _with_names(plan, desired, inventory, observed, now, specs)
    return _with_removals(plan, observed)


# -- autoscaling ------------------------------------------------------------------------------
def _autoscaled(
    state: ControllerState, observed: Observed, now: float
) -> tuple[ControllerState, list[Event]]:
    """Each autoscaled service's count decided from the proxies' counters, before the
    task fold numbers its slots by it (core/autoscaling.py); a scale-in's stops go
    through the traffic gate like any other."""
    if not any(ss.spec.autoscale for ss in state.services.values()):
        return state, []
    services, events = autoscaling.step(state.services, observed, now)
    if services == state.services:
        return state, events
    return replace(state, services=services), events


# -- the specs old tasks run ------------------------------------------------------------------
def _with_older_dropped(plan: Plan, observed: Observed) -> Plan:
    """Each service's older specs (`ServiceState.older`) that nothing runs any more are
    dropped, once every host answered: no task of it is seen, and for a spec that
    exposes, no name proxy of the service either (the pass that removes the last one
    still looks at the name proxies: `endpoints.names_in_use` counts these specs)."""
    state = plan.state
    if not any(ss.older for ss in state.services.values()):
        return plan
    if not all(o.ok for o in observed.hosts.values()):
        return plan
    if any(names is None for names in observed.names.values()):
        return plan
    running = {(c.service, c.spec) for o in observed.hosts.values() for c in o.containers}
    proxied = {s for names in observed.names.values() for s in names or {}}
    services = dict(state.services)
    for name, ss in state.services.items():
        kept = tuple(
            spec
            for spec in ss.older
            if (name, spec.spec_hash()) in running or (spec.expose and name in proxied)
        )
        if kept != ss.older:
            services[name] = replace(ss, older=kept)
    if services == state.services:
        return plan
    return replace(plan, state=replace(state, services=services))


# -- host ports -------------------------------------------------------------------------------
def _with_ports(plan: Plan, cluster: Cluster, inventory: Inventory, observed: Observed) -> Plan:
    """Each routed run's host ports: the lowest of the ingress's task range that nothing on
    its host holds, nor a run before it on that host in this pass."""
    if cluster.ingress is None or not any(r.service.ingress for r in plan.run):
        return plan
    taken = held(observed)
    runs: list[Run] = []
    for r in plan.run:
        if not r.service.ingress:
            runs.append(r)
            continue
        host = inventory.host(r.host)
        address = host.reached_at if host is not None else r.host
        ports = choose(cluster.ingress, r.service, taken.setdefault(r.host, set()), address)
        taken[r.host].update(ports.taken)
        runs.append(replace(r, ports=ports))
    return replace(plan, run=tuple(runs))


# -- GPU device ids ---------------------------------------------------------------------------
def _with_gpus(plan: Plan, inventory: Inventory, observed: Observed) -> Plan:
    """Each GPU run's device ids (`gpus.choose`): its slot's previous ids when free, else
    the first free ones; a stop-first run's old task frees its own."""
    if not any(r.service.gpus for r in plan.run):
        return plan
    taken = gpus.held(observed)
    runs: list[Run] = []
    for r in plan.run:
        if not r.service.gpus:
            runs.append(r)
            continue
        host = inventory.host(r.host)
        seen = observed.hosts.get(r.host)
        mine = taken.setdefault(r.host, set())
        if r.replaces is not None and r.replaces.host == r.host:
            mine.difference_update(r.replaces.gpus)
        before = gpus.previous(seen.containers if seen else (), r.service.name, r.slot)
        ids = gpus.choose(r.host, host.gpus if host else (), r.service.gpus, mine, before)
        mine.update(ids.ids)
        runs.append(replace(r, gpus=ids))
    return replace(plan, run=tuple(runs))


# -- what every proxy holds -------------------------------------------------------------------
def acme_names(table: RouteTable) -> tuple[str, ...]:
    """The host names the route table asks ACME certificates for, sorted."""
    return tuple(sorted({e.route.domain for e in table if e.route.tls.mode == "acme"}))


def _with_proxies(
    plan: Plan,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    now: float,
    specs: TaskSpecs,
) -> Plan:
    """The route table and each answering ingress proxy's step, and the certificates due."""
    state = plan.state
    if cluster.ingress is not None:
        routes = route_table(cluster, inventory, observed, state, now, specs)
        down = frozenset(name for name, hs in state.hosts.items() if hs.down)
        steps = proxy_steps(cluster.ingress, observed.proxies, down)
        plan = _with_orders(plan, routes, now)
        due_now = _due(cluster.ingress, routes, steps, plan.state, now)
        waits = tuple(
            Waiting(f"ingress proxy on {s.host}", s.waits, WaitKind.PROXY) for s in steps if s.waits
        ) + tuple(
            Waiting(
                f"certificate {n}", "order started, answered by the next pass", WaitKind.CERTIFICATE
            )
            for n in due_now
        )
        plan = replace(
            plan,
            routes=routes,
            proxies=steps,
            certificates=due_now,
            waiting=(*plan.waiting, *waits),
        )
    return plan


def _with_names(
    plan: Plan,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    now: float,
    specs: TaskSpecs,
) -> Plan:
    """The endpoints and each answering host's name proxies, on every host the cluster
    uses: where it has a task or starts one, and where a one-off of it starts or is still
    seen (a hook, a scheduled run, `minidock run`, until a pass removes it), so that a
    migration reaches `db:5432` from a host none of the cluster's tasks is on yet. Decided
    after the hooks and jobs, carried out before them (carry.py), so the name answers when
    the one-off starts."""
    if observed.names:
        table = endpoint_table(cluster, inventory, observed, plan.state, now, specs)
        used = {c.host for c in observed.containers()} | {r.host for r in plan.run}
        # a one-off keeps its host's names until it is removed: the pass that sees a hook
        # finish records its outcome, and only the next one starts the update's tasks
        # (often on that host); dropping the names in between restarted the proxy there
        used |= {o.host for h in observed.hosts.values() if h.ok for o in h.oneoffs}
        used |= {h.host for h in plan.hooks if h.act is HookAct.START and h.host}
        used |= {j.host for j in plan.jobs if isinstance(j, JobStart)}
        aliased: dict[str, set[str]] = {}
        for c in observed.containers():
            own = specs.of(c)
            if c.live and own is not None and not own.expose:  # it carries the alias
                aliased.setdefault(c.host, set()).add(c.service)
        plan = replace(
            plan, endpoints=table, names=name_steps(table, observed.names, used, aliased)
        )
    return plan


def _with_orders(plan: Plan, routes: RouteTable, now: float) -> Plan:
    """The pending ACME orders: those past ORDER_TIMEOUT failed (backing off, the old
    certificate kept), the others answered (the CA told once this pass's config, which
    serves their HTTP-01 responses, is loaded) or collected, their responses kept in
    every proxy's config, and a wait line each (a later pass collects what this one
    does not)."""
    state = plan.state
    events = list(plan.events)
    certs = state.tls
    for name in tls.overdue(certs, now):
        why = f"the CA did not issue within {tls.ORDER_TIMEOUT:.0f}s of the order"
        certs = tls.failed(certs, name, why, now)
        wait = certs.record(name).next_try - now
        line = f"certificate for {name} not issued: {why}; next try in {wait:.0f}s"
        events.append(Event(now, "certificate-failed", line))
    answer = tls.answering(acme_names(routes), certs)
    collect = tls.pending(acme_names(routes), certs)
    lines = dict.fromkeys(answer, "challenge responses loaded, then the CA told")
    lines |= dict.fromkeys(collect, "order started, collected by a pass")
    waits = tuple(
        Waiting(f"certificate {n}", line, WaitKind.CERTIFICATE) for n, line in sorted(lines.items())
    )
    return replace(
        plan,
        state=replace(state, tls=certs),
        events=tuple(events),
        answer=answer,
        collect=collect,
        challenges=tuple(sorted(tls.challenges(certs).items())),
        waiting=(*plan.waiting, *waits),
    )


def _due(
    ingress: Ingress,
    routes: RouteTable,
    steps: Sequence[ProxyStep],
    state: ControllerState,
    now: float,
) -> tuple[str, ...]:
    """The names to order a certificate for now: due (`tls.due`), while every answering
    proxy runs this ingress's spec (a proxy this pass starts is ordered for by the next)."""
    if ingress.acme is None or not steps or any(s.start for s in steps):
        return ()
    acme = ingress.acme
    return due(acme_names(routes), state.tls, acme.directory, now, acme.renew_before)


# -- hooks ------------------------------------------------------------------------------------
def _with_hooks(
    plan: Plan, cluster: Cluster, inventory: Inventory, observed: Observed, now: float
) -> Plan:
    """Each service's hook step, its record kept in the state (committed before the act).
    What is known at once is said here: a hook lost, superseded, or that no host can take;
    a start's and a run's outcome are said when the act's outcome is folded."""
    state = plan.state
    names = [n for n, ss in sorted(state.services.items()) if ss.spec.before_update or ss.hook.run]
    if not names:
        return plan
    all_seen = all(o.ok for o in observed.hosts.values())
    seen = [o for h in observed.hosts.values() if h.ok for o in h.oneoffs if o.kind == HOOK_KIND]
    services = dict(state.services)
    steps: list[HookStep] = []
    events: list[Event] = []
    for name in names:
        ss = services[name]
        decided = hooks.step(cluster.name, ss, seen, now, all_seen=all_seen)
        if decided.act is HookAct.START:
            decided = _placed(decided, ss, inventory, observed, state, now)
        if decided.record != ss.hook:
            services[name] = replace(ss, hook=decided.record)
        kind = _SAID.get(decided.act)
        if kind and decided.record.why:
            line = f"{name}: {decided.record.why}"
            events.append(Event(now, kind, line, service=name, task=decided.record.run))
        if decided.act in _ACTED:
            steps.append(decided)
    return replace(
        plan,
        state=replace(state, services=services),
        hooks=tuple(steps),
        events=(*plan.events, *events),
    )


_SAID = {HookAct.LOST: "hook-failed", HookAct.SUPERSEDE: "hook-superseded"}
_ACTED = frozenset(
    {HookAct.START, HookAct.COLLECT, HookAct.TIME_OUT, HookAct.REMOVE, HookAct.SUPERSEDE}
)


def _placed(
    decided: HookStep,
    ss: ServiceState,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
) -> HookStep:
    """A hook to start, placed as a one-off of its generation's spec with the hook's
    command; one that no host can take has failed, saying why (as a lost one does)."""
    assert ss.spec.before_update is not None
    spec = oneoff_spec(ss.spec, ss.spec.before_update.command)
    if decided.oneoff is not None:  # created before a crash: started where it is
        return replace(decided, host=decided.oneoff.host, spec=spec)
    placed = place_oneoff(ss, spec, inventory, observed, state)
    if not placed.host:
        why = f"no host can run it: {placed.why}"
        why = hooks.failed_line(decided.record, "could not start", why)
        return replace(decided, record=decided.record.ended(None, why, now), act=HookAct.LOST)
    return replace(decided, host=placed.host, slot=placed.slot, spec=spec)


# -- scheduled jobs ---------------------------------------------------------------------------
def _with_jobs(
    plan: Plan,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    now: float,
    times: Mapping[str, Times | str],
) -> Plan:
    """Each scheduled job's step (core/schedule.py), its record kept in the state: the runs
    to start, placed; its finished runs to read; lost runs recorded. A job whose times
    cannot be had this pass (`times` says why) decides no run (its finished runs are still
    read): no other job, and no other part of the pass, depends on it."""
    state = plan.state
    jobs = sorted(n for n, ss in state.services.items() if ss.spec.schedule and not ss.removed)
    if not jobs:
        return plan
    all_seen = all(o.ok for o in observed.hosts.values())
    services = dict(state.services)
    acts: list[JobAct] = []
    events: list[Event] = []
    for job in jobs:
        ss = services[job]
        runs = _runs(observed, job)
        around = times.get(job, "its times were not given")
        if isinstance(around, Times):
            record = replace(ss.job, unscheduled="")
            decided = schedule.step(
                cluster.name, ss.spec, record, runs, around, now, all_seen=all_seen
            )
        else:  # its schedule gives no time: this job waits, nothing else does
            decided = schedule.unscheduled(ss.job, job, around, now)
        record, said = _lost(decided.record, decided.lost, now)
        events += [replace(e, service=job) for e in (*decided.events, *said)]
        acts += [
            JobCollect(job, o, due)
            for o in runs
            if o.finished and (due := record.due_of(o.run)) is not None
        ]
        ss = replace(ss, job=record)
        spec = oneoff_spec(ss.spec, None)
        for start in decided.starts:
            placed = place_oneoff(ss, spec, inventory, observed, state)
            if placed.host:
                acts.append(JobStart(job, start.run, start.due, placed.host, placed.slot, spec))
                continue
            nowhere = JobRun(
                start.run, start.due, now, now, None, f"no host can run it: {placed.why}"
            )
            record, more = _lost(record, (), now, nowhere)
            events += [replace(e, service=job) for e in more]
        services[job] = replace(ss, job=record)
    state = replace(state, services=services)
    return replace(plan, state=state, jobs=tuple(acts), events=(*plan.events, *events))


def _lost(
    record: JobRecord, lost: Sequence[PendingRun], now: float, *ended: JobRun
) -> tuple[JobRecord, list[Event]]:
    """Runs that will never report into the record: those started and gone from every
    host (`lost`), and `ended` ones (one that no host could take), with their events."""
    events: list[Event] = []
    runs = [JobRun(p.run, p.due, now, now, None, "its container is gone") for p in lost]
    for run in (*runs, *ended):
        record, said = record_run(record, run, now)
        events += [said] if said is not None else []
    return record, events


def _runs(observed: Observed, job: str) -> list[OneOff]:
    return [
        o
        for seen in observed.hosts.values()
        if seen.ok
        for o in seen.oneoffs
        if o.service == job and o.kind == JOB_KIND
    ]


# -- finished one-offs ------------------------------------------------------------------------
def _with_removals(plan: Plan, observed: Observed) -> Plan:
    """Every finished one-off task is removed, but a scheduled job's run not yet recorded
    and a hook whose outcome is still to be read (their next pass reads them first)."""
    state = plan.state
    unread = {
        p.run
        for ss in state.services.values()
        if ss.spec.schedule is not None
        for p in ss.job.pending
    }
    removals = finished_oneoffs(observed, unread, hooks.awaited(state))
    return replace(plan, removals=removals) if removals else plan
