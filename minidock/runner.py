"""One reconcile pass over real hosts: observe -> decide -> commit -> act -> fold -> commit.

A pass observes once (the hosts' port tables too, read after the probes and before the
decision, while a task that takes a host port may start: core.watching.port_tables_wanted)
and decides once. The decision is the
core's, whole (`minidock.core.decide`: the task verbs, the drain gate, what every proxy
holds, certificates, hooks, jobs); right after it, every proxy's config is rendered once
from the plan (`minidock.commands.proxies.render`: each proxy step's digest and whether it
loads), which the act path, `plan`, `status` and `serve` read; the acts are the act path's
(`minidock.act.carry`); this module only sequences them. The plan (its next controller
state) is committed *before* acting, so a crash mid-act leaves a state that the next pass
converges from: every act is either seen on the hosts by the next observation or simply
decided again. What the acts learned (failures, log tails, hooks' and runs' outcomes,
certificates) is folded into the state by the core and committed after. Secrets are masked
once, at the two places a pass's words leave it: each commit, and its result. The caller
holds the state lock; every remote command is preceded by `store.fence()`, so a controller
that lost the lock mid-pass (etcd: its lease) issues no further command, and its commits
fail (docs/ha.md).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field, replace

from minidock.act.acts import Acts, stop_graces
from minidock.act.carry import TaskActs, carry_out
from minidock.act.ingress import observe_proxies, observe_traffic
from minidock.act.names import observe_names
from minidock.commands.docker import health_checks_argv
from minidock.commands.proxies import NOTHING_RENDERED, Rendered, render
from minidock.core import ControllerState, Plan, fold_outcomes
from minidock.core.decide import decide
from minidock.core.endpoints import names_in_use
from minidock.core.engines import health_checks_due
from minidock.core.hosts import engines_known
from minidock.core.routes import ingress_hosts
from minidock.core.schedule import Times
from minidock.core.watching import port_tables_wanted
from minidock.masking import NO_SECRETS, Masker, Masks
from minidock.model import Cluster, Event, HostObservation, Inventory, Observed
from minidock.observe import ProbeMemory, observe, port_tables, told_engines
from minidock.schedules import backup_times, job_times
from minidock.ssh import CommandTimeout, Executor, Unreachable
from minidock.store import Store

__all__ = ["PassResult", "decide_pass", "decision", "health_checks", "run_pass"]

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    """What one pass decided and did. Its verdict (exit code) is the use-case layer's:
    `minidock.usecases.verdict`."""

    plan: Plan
    observed: Observed
    done: list[str] = field(default_factory=list)  # one line per act that happened
    failures: list[str] = field(default_factory=list)  # one line per act that failed
    acts: dict[str, int] = field(default_factory=dict)  # acts made, by event kind (metrics)
    masker: Masker = NO_SECRETS  # the pass's masker: the command's next pass starts from it
    rendered: Rendered = NOTHING_RENDERED  # every proxy's config, from `plan` (render)
    touched: frozenset[str] = frozenset()  # the hosts of its acts' events ("": of none)
    now: float = 0.0  # the decision's time: its acts and their outcomes are at it too


async def decide_pass(
    cluster: Cluster,
    inventory: Inventory,
    state: ControllerState,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
    borrowed: Mapping[str, HostObservation] | None = None,
) -> PassResult:
    """Observe every host (and the ingress proxies, their route counters while a service
    autoscales, and the name proxies while a service exposes ports), decide once, and
    render every proxy's config from the plan (commands.proxies.render); nothing is
    recorded or done (plan, status). The hosts' port tables are read, between the
    observation and the decision, only when a task that takes a host port may start this
    pass (core.watching.port_tables_wanted: a service that takes one is not settled), so
    the one decision places with them.
    `memory`: what this command's earlier probes inspected (watch's; else a new one), told
    the engines the state recorded less than core.hosts.ENGINE_AGE ago; `scope`:
    the only hosts to probe, the others' last observation in `memory` standing for them
    (observe.observe); `borrowed`: the hosts' owners' observations standing for probes
    (watch's decider: core.borrowing)."""
    edges = [h for h in inventory.hosts if h.name in ingress_hosts(cluster, inventory)]
    named = inventory.hosts if names_in_use(cluster, state) else ()
    counted = edges if any(ss.spec.autoscale for ss in state.services.values()) else []
    recorded = engines_known(state.hosts, clock())
    if memory is None:
        memory = told_engines(recorded)
    else:
        memory.know_engines(recorded)
    observed, proxies, names, traffic = await asyncio.gather(
        observe(
            executor,
            inventory.hosts,
            cluster.name,
            ports=False,
            memory=memory,
            scope=scope,
            borrowed=borrowed,
            clock=clock,
        ),
        observe_proxies(executor, edges, cluster.name),
        observe_names(executor, named, cluster.name),
        observe_traffic(executor, counted, cluster.name),
    )
    observed = replace(observed, proxies=proxies, names=names, traffic=traffic)
    if port_tables_wanted(inventory, state, observed):
        observed = await port_tables(executor, inventory.hosts, observed, cluster.name)
    now = clock()
    plan = decision(cluster, inventory, observed, state, now, force_down=force_down)
    return PassResult(plan, observed, rendered=render(plan, cluster.ingress, observed), now=now)


async def health_checks(
    executor: Executor,
    inventory: Inventory,
    observed: Observed,
    cluster: str,
    fence: Callable[[], None],
) -> list[str]:
    """Run the health checks no engine timer runs (core.engines.health_checks_due: this
    cluster's health-checked tasks on Podman hosts), one command per host, all hosts at
    once; the hosts where they ran. Best effort: a host that fails it is logged (its next
    probe says what it must), and the checks' verdicts are read by the next probe."""
    due = health_checks_due(observed, cluster)
    hosts = [h for h in inventory.hosts if h.name in due]
    if not hosts:
        return []
    fence()
    ran = await asyncio.gather(
        *(
            executor.run(h, health_checks_argv(due[h.name]), timeout=h.command_timeout)
            for h in hosts
        ),
        return_exceptions=True,
    )
    for host, result in zip(hosts, ran, strict=True):
        if isinstance(result, Unreachable | CommandTimeout):
            log.info("%s: health checks not run: %s", host.name, result.reason)
        elif isinstance(result, BaseException):
            raise result
    return [h.name for h in hosts]


def decision(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    force_down: bool = False,
) -> Plan:
    """`decide`, given the scheduled jobs' times (minidock.schedules reads their cron
    expressions: a job whose times cannot be had says why, and the pass goes on), with
    what already lives in the process (the observation, the state) out of the cyclic
    garbage collector's view while it runs (`gc.freeze`): the decision frees what it makes
    by reference counting, and a full collection in the middle of it would walk every task
    and slot of the fleet again (20-45 ms a time at 1,000 hosts and 10,000 tasks,
    docs/benchmarks.md)."""
    specs = [ss.spec for ss in state.services.values() if not ss.removed]
    times: Mapping[str, Times | str] = job_times(specs, now) | backup_times(specs, now)
    gc.freeze()
    try:
        return decide(cluster, inventory, observed, state, now, times=times, force_down=force_down)
    finally:
        gc.unfreeze()


def _folded(result: PassResult, acts: Acts, store: Store, now: float) -> list[Event]:
    """What the acts learned folded into the state and committed with their events
    (masked), the result's plan updated; the events the fold said."""
    if not (acts.events or acts.outcomes):
        return []
    plan, mask = result.plan, result.masker
    final, learned = fold_outcomes(plan.state, acts.outcomes, now)
    final = mask.state(final)
    said = [replace(e, message=mask.line(e.message)) for e in learned]
    done = [replace(e, message=mask.line(e.message)) for e in acts.events]
    store.commit(final, done + said)
    result.plan = replace(plan, state=final, events=(*plan.events, *said))
    return said


async def run_pass(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
    masks: Masks | None = None,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
    borrowed: Mapping[str, HostObservation] | None = None,
    tasks: TaskActs | None = None,
) -> PassResult:
    """Observe every host (or those in `scope`, `decide_pass`), decide, record the
    decision, act, record the outcome. `force_down`: the mass-loss guard overridden;
    `masks`: the command's maskers (`masking.Masks`); `memory`: its probes'
    (`observe.ProbeMemory`), which forgets the hosts acted on; `tasks` carries out the
    task verbs (act.carry.carry_tasks unless given: usecases.delegating's orders)."""
    state = store.load()
    result = await decide_pass(
        cluster,
        inventory,
        state,
        executor,
        clock=clock,
        force_down=force_down,
        memory=memory,
        scope=scope,
        borrowed=borrowed,
    )
    now = result.now
    log.debug("%s: decided", cluster.name)
    masks = masks if masks is not None else Masks()
    mask = result.masker = masks.of(store, result.plan.state, result.observed)
    plan = result.plan = mask.plan(result.plan)
    store.commit(plan.state, plan.events)
    log.debug("%s: committed: %d runs, %d stops", cluster.name, len(plan.run), len(plan.stop))
    acts = Acts(
        executor,
        inventory,
        cluster.name,
        now,
        plan.state.controller,
        graces=stop_graces(plan.state),
        fence=store.fence,
    )
    if memory is not None:
        memory.forget([r.host for r in plan.run] + [s.container.host for s in plan.stop])
    await carry_out(acts, plan, cluster, result.observed, result.rendered, tasks)
    checked = await health_checks(executor, inventory, result.observed, cluster.name, store.fence)
    if memory is not None:
        memory.forget(checked)  # the next pass reads what the checks found
    result.touched = frozenset(e.host for e in acts.events)
    log.debug("%s: acted: %d done, %d failed", cluster.name, len(acts.done), len(acts.failures))
    said = _folded(result, acts, store, now)
    result.done = [mask(line) for line in acts.done]
    result.failures = [mask(line) for line in acts.failures]
    result.acts = dict(Counter(e.kind for e in acts.events + said))
    return result
