"""A recorded plan carried out on the hosts: every field of one pass's `Plan`, in the order
that keeps traffic whole. It decides nothing (minidock.core.decide did): each act's result
the state must know is an outcome for the core (`minidock.core.outcomes`), and each act's
line and event is kept on `Acts`.

The order:
1. the ingress proxies: started where the plan says, then loaded where the pass's
   rendered config (`minidock.commands.proxies`: its route table, the state's
   certificates and every pending order's HTTP-01 responses) differs from what each
   holds; the name proxies with its endpoints, likewise: a task that drains leaves every
   proxy in the pass that decides its stop, before any stop;
2. the ACME acts (minidock.act.certify), none of which loads a proxy or waits for the CA:
   the CA told of the orders whose responses step 1 loaded, the answered orders
   collected, the due ones started (their responses loaded by the next pass);
3. the stops (every host at once), then the starts (hosts in parallel), then the volume
   moves' copies and removals (minidock.act.relocate), then the backups' hooks, copies,
   `keep`s and restore drills (minidock.act.backups);
4. the hooks' acts, the scheduled jobs' acts, and the finished one-off tasks removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from minidock.act.acts import ActFailed, Acts, ensure_network
from minidock.act.backups import carry_backup
from minidock.act.certify import order
from minidock.act.ingress import converge_proxies
from minidock.act.jobs import (
    OneOffFailed,
    OneOffTask,
    create_oneoff,
    output_tail,
    remove_oneoff,
    start_detached,
)
from minidock.act.names import converge_names
from minidock.act.relocate import carry_move
from minidock.commands.haproxy import NAMES_IMAGE
from minidock.commands.proxies import Rendered
from minidock.core.hooks import HOOK_KIND, HookAct, HookStep
from minidock.core.jobs import JobAct, JobStart
from minidock.core.outcomes import CertFailed, HookEnded, HookStarted, JobEnded, JobStarted
from minidock.core.plan import Plan, Run, Stop
from minidock.core.schedule import JOB_KIND, JobRun
from minidock.model import Cluster, Observed, OneOff
from minidock.ssh import CommandTimeout, Unreachable

__all__ = ["TAIL_LINES", "TaskActs", "carry_out", "carry_tasks"]

TAIL_LINES = 5  # lines of a hook's or a run's output kept with its outcome

# how a pass's task verbs are carried out: `carry_tasks`, or handed by host to the hosts'
# owners (minidock.usecases.delegating, acting by share)
TaskActs = Callable[[Acts, Sequence[Stop], Sequence[Run]], Awaitable[None]]


async def carry_out(
    acts: Acts,
    plan: Plan,
    cluster: Cluster,
    observed: Observed,
    rendered: Rendered,
    tasks: TaskActs | None = None,
) -> None:
    """Every act of a recorded plan, in the module's order, the proxies loaded with the
    configs the pass rendered (`rendered`: `minidock.commands.proxies.render` of `plan`);
    the task verbs by `tasks` (`carry_tasks` unless given)."""
    acts.engines.update({n: o.engine.kind for n, o in observed.hosts.items() if o.engine})
    loaded = await _routes(acts, plan, cluster, rendered)
    await _certificates(acts, plan, cluster, loaded)
    await _names(acts, plan, cluster, rendered)
    await (tasks or carry_tasks)(acts, plan.stop, plan.run)
    for move in plan.moves:
        await carry_move(acts, move)
    for backup in plan.backups:
        await carry_backup(acts, backup)
    for hook in plan.hooks:
        await _HOOK_ACTS[hook.act](acts, cluster, hook)
    for job in plan.jobs:
        await _job(acts, cluster, job)
    for oneoff in plan.removals:
        await _remove(acts, oneoff)


# -- proxies ----------------------------------------------------------------------------------
async def _routes(acts: Acts, plan: Plan, cluster: Cluster, rendered: Rendered) -> bool:
    """The plan's route table into every answering ingress proxy (before any stop), as the
    pass rendered it (with the state's certificates and the pending orders' HTTP-01
    responses); whether every step's proxy holds it."""
    if cluster.ingress is None or rendered.ingress is None or not plan.proxies:
        return False
    acts.fence()
    outcome = await converge_proxies(
        acts.sh, cluster.name, cluster.ingress, rendered.ingress, rendered.proxies, acts.now
    )
    for event in outcome.events:
        acts.record_event(event)
    return not outcome.failures


async def _certificates(acts: Acts, plan: Plan, cluster: Cluster, loaded: bool) -> None:
    """The plan's ACME acts after the routes' load (`loaded`: every proxy holds the pending
    orders' responses, so the CA may be told); a refused order is a failed act."""
    if cluster.ingress is None or not (plan.answer or plan.collect or plan.certificates):
        return
    acts.fence()
    done = await order(cluster.ingress.acme, plan, acts.now, loaded=loaded)
    acts.outcomes.extend(done)
    for o in done:
        if isinstance(o, CertFailed):  # an order refused is a failed act (exit 1)
            acts.failures.append(f"certificate for {o.name} not issued: {o.reason}")


async def _names(acts: Acts, plan: Plan, cluster: Cluster, rendered: Rendered) -> None:
    """The plan's endpoints into the name proxies its steps run (as the pass rendered
    them), the others removed."""
    if not plan.names:
        return

    async def prepare(host: str) -> str:
        if host not in acts.networked:
            try:
                await ensure_network(acts.sh, host, cluster.name)
            except ActFailed as exc:
                return str(exc)
            acts.networked.add(host)
        return ""

    outcome = await converge_names(
        acts.sh, cluster.name, NAMES_IMAGE, rendered.names, acts.now, prepare
    )
    for event in outcome.events:
        acts.record_event(event)


# -- tasks ------------------------------------------------------------------------------------
async def carry_tasks(acts: Acts, stops: Sequence[Stop], runs: Sequence[Run]) -> None:
    """The stops (every host at once), then the starts (`_by_host`)."""
    await asyncio.gather(*(acts.stop(s) for s in stops))
    await _by_host(runs, acts.run)


async def _by_host(runs: Sequence[Run], act: Callable[[Run], Awaitable[None]]) -> None:
    """Hosts in parallel; on one host, in plan order (due restarts first)."""
    per_host: dict[str, list[Run]] = {}
    for r in runs:
        per_host.setdefault(r.host, []).append(r)

    async def one(batch: list[Run]) -> None:
        for r in batch:
            await act(r)

    await asyncio.gather(*(one(b) for b in per_host.values()))


# -- one-off tasks: hooks, scheduled runs, the finished -----------------------------------------
def _task(acts: Acts, cluster: Cluster, step: HookStep | JobStart) -> OneOffTask:
    if isinstance(step, HookStep):
        assert step.spec is not None
        spec, run, kind, host = step.spec, step.record.run, HOOK_KIND, step.host
    else:
        spec, run, kind, host = step.spec, step.run, JOB_KIND, step.host
    return OneOffTask(spec, cluster.name, acts.hosts[host], run, kind, step.slot, acts.controller)


async def _start(acts: Acts, task: OneOffTask, made: bool) -> bool:
    """Create (unless `made`: a created one of its name was found) and start a one-off in
    the background; whether this act created it. Raises OneOffFailed saying why not."""
    acts.fence()
    fresh = False if made else await create_oneoff(acts.executor, acts.inventory, task, acts.engine)
    acts.fence()
    await start_detached(acts.executor, task)
    return fresh


async def _hook_start(acts: Acts, cluster: Cluster, step: HookStep) -> None:
    task = _task(acts, cluster, step)
    try:
        fresh = await _start(acts, task, made=step.oneoff is not None)
    except (OneOffFailed, Unreachable, CommandTimeout) as exc:
        acts.outcomes.append(HookEnded(step.service, task.run, None, str(exc), "could not start"))
        return
    acts.outcomes.append(HookStarted(step.service, task.run, task.host.name, fresh))


async def _hook_collect(acts: Acts, cluster: Cluster, step: HookStep) -> None:
    """A finished hook: the end of its output read for its outcome (the container goes
    with the finished one-offs of the next pass, once the outcome is recorded)."""
    found = step.oneoff
    assert found is not None
    tail = await _tail(acts, found)
    record = step.record
    took = (found.finished_at or acts.now) - (found.started_at or record.started or acts.now)
    acts.outcomes.append(HookEnded(step.service, record.run, found.exit_code, tail, took=took))


async def _hook_time_out(acts: Acts, cluster: Cluster, step: HookStep) -> None:
    """A hook past its timeout (recorded failed by the decision): its output read for the
    outcome, then removed, which kills it."""
    found = step.oneoff
    assert found is not None
    tail = await _tail(acts, found)
    acts.outcomes.append(HookEnded(step.service, step.record.run, None, tail))
    await _remove(acts, found)


async def _hook_remove(acts: Acts, cluster: Cluster, step: HookStep) -> None:
    if step.oneoff is not None:
        await _remove(acts, step.oneoff)


_HOOK_ACTS: dict[HookAct, Callable[[Acts, Cluster, HookStep], Awaitable[None]]] = {
    HookAct.START: _hook_start,
    HookAct.COLLECT: _hook_collect,
    HookAct.TIME_OUT: _hook_time_out,
    HookAct.REMOVE: _hook_remove,
    HookAct.SUPERSEDE: _hook_remove,
}


async def _job(acts: Acts, cluster: Cluster, act: JobAct) -> None:
    """A scheduled run started in the background, or a finished one read for its record."""
    if isinstance(act, JobStart):
        task = _task(acts, cluster, act)
        try:
            fresh = await _start(acts, task, made=False)
        except (OneOffFailed, Unreachable, CommandTimeout) as exc:
            lost = JobRun(act.run, act.due, acts.now, acts.now, None, str(exc))
            acts.outcomes.append(JobEnded(act.job, lost))
            return
        acts.outcomes.append(JobStarted(act.job, act.run, task.host.name, fresh))
        return
    o = act.oneoff
    tail = await _tail(acts, o)
    started = o.started_at or acts.now
    run = JobRun(o.run, act.due, started, o.finished_at or started, o.exit_code, tail)
    acts.outcomes.append(JobEnded(act.job, run))


async def _tail(acts: Acts, found: OneOff) -> str:
    host = acts.hosts.get(found.host)
    if host is None:
        return ""
    acts.fence()
    return await output_tail(acts.executor, host, found, TAIL_LINES)


async def _remove(acts: Acts, o: OneOff) -> None:
    """A one-off removed (killed first if it still runs): one event; a failure to remove
    is an act failure (a later pass tries again)."""
    host = acts.hosts.get(o.host)
    if host is None:
        return
    acts.fence()
    left = await remove_oneoff(acts.executor, host, o.name)
    where = (o.service, 0, o.host, o.run)
    if left:
        acts.record("act-failed", left, where)
    elif o.finished:
        acts.record("oneoff-removed", f"removed finished one-off {o.name} on {o.host}", where)
    else:
        acts.record("oneoff-removed", f"removed {o.name} on {o.host} (it still ran)", where)
