"""One reconcile pass over real hosts: observe -> reconcile -> record -> act -> record.
The acts themselves are the act path's (`minidock.acts`); this module only sequences them.

The decision (the Plan and the next controller state) is committed *before* acting, so a
crash mid-act leaves a state that the next pass converges from: every act is either seen
on the hosts by the next observation or simply decided again. Act results (failures, log
tails of failed tasks) are committed after. The caller holds the state lock; every remote
command is preceded by `store.fence()`, so a controller that lost the lock mid-pass (etcd:
its lease) issues no further command, and its commits fail (docs/ha.md).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Callable, Set
from dataclasses import dataclass, field, replace

from minidock.acts import Acts, carry_out, held_ports, stop_graces
from minidock.certify import certify
from minidock.core import ControllerState, Plan, fold_outcomes, reconcile
from minidock.core.endpoints import names_in_use
from minidock.core.routes import ingress_hosts, route_table
from minidock.core.traffic import gate
from minidock.core.watching import port_tables_needed, ports_conflict
from minidock.ingress import observe_proxies
from minidock.masking import NO_SECRETS, Masker, masker_for
from minidock.model import Cluster, Inventory, Observed
from minidock.names import observe_names
from minidock.observe import ProbeMemory, observe, port_tables
from minidock.ssh import Executor
from minidock.store import Store


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


async def decide(
    cluster: Cluster,
    inventory: Inventory,
    state: ControllerState,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
) -> PassResult:
    """Observe every host (and the ingress proxies, and the name proxies while a service
    exposes ports) and decide; nothing is recorded or done (plan, status). The hosts' port
    tables are read only when the decision made without them starts a task that takes a
    host port (core.watching.port_tables_needed), and it is made again only if one of its
    tasks' ports turns out held (ports_conflict). `memory`: what this command's earlier
    probes inspected (watch's; else none); `scope`: the only hosts to probe, the others'
    last observation in `memory` standing for them (observe.observe)."""
    edges = [h for h in inventory.hosts if h.name in ingress_hosts(cluster, inventory)]
    named = inventory.hosts if names_in_use(cluster, state) else ()
    observed, proxies, names = await asyncio.gather(
        observe(executor, inventory.hosts, cluster.name, ports=False, memory=memory, scope=scope),
        observe_proxies(executor, edges, cluster.name),
        observe_names(executor, named, cluster.name),
    )
    observed = replace(observed, proxies=proxies, names=names)
    now = clock()
    plan = decision(cluster, inventory, observed, state, now, force_down=force_down)
    if port_tables_needed(r.service for r in plan.run):
        observed = await port_tables(executor, inventory.hosts, observed, cluster.name)
        held = {name: o.ports_in_use for name, o in observed.hosts.items()}
        if ports_conflict(((r.host, r.service) for r in plan.run), held):
            plan = decision(cluster, inventory, observed, state, now, force_down=force_down)
    return PassResult(plan, observed)


def decision(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    *,
    force_down: bool = False,
) -> Plan:
    """`reconcile`, with what already lives in the process (the observation, the state)
    out of the cyclic garbage collector's view while it runs (`gc.freeze`): the decision
    frees what it makes by reference counting, and a full collection in the middle of it
    would walk every task and slot of the fleet again (20-45 ms a time at 1,000 hosts and
    10,000 tasks, docs/benchmarks.md)."""
    gc.freeze()
    try:
        plan = reconcile(cluster, inventory, observed, state, now, force_down=force_down)
        return gate(plan, cluster, inventory, observed, now)  # routed tasks drain first
    finally:
        gc.unfreeze()


async def run_pass(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
    masker: Masker | None = None,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
) -> PassResult:
    """Observe every host (or those in `scope`, `decide`), decide, record the decision,
    act, record the outcome. `force_down` overrides the mass-loss guard for this pass
    (the operator knows); `masker` is the command's masker from its previous pass
    (`masking.masker_for`), `memory` its probes' (`observe.ProbeMemory`), which forgets
    the hosts acted on: the next pass probes them."""
    now = clock()
    state = store.load()
    result = await decide(
        cluster,
        inventory,
        state,
        executor,
        clock=lambda: now,
        force_down=force_down,
        memory=memory,
        scope=scope,
    )
    mask = result.masker = masker_for(store, result.plan.state, result.observed, known=masker)
    plan = mask.plan(result.plan)
    result.plan = plan
    store.commit(plan.state, plan.events)
    acts = Acts(
        executor,
        inventory,
        cluster.name,
        now,
        mask,
        plan.state.controller,
        graces=stop_graces(plan.state),
        fence=store.fence,
        ingress=cluster.ingress,
        held_ports=held_ports(result.observed),
    )
    plan, result.observed = await _certify(acts, cluster, inventory, result.observed, plan, store)
    result.plan = plan
    if memory is not None:
        memory.forget([r.host for r in plan.run] + [s.container.host for s in plan.stop])
    await carry_out(acts, plan, cluster, inventory, result.observed, now)
    if acts.events or acts.outcomes:
        final, learned = fold_outcomes(plan.state, acts.outcomes, now)
        events = [replace(e, message=mask.line(e.message)) for e in acts.events + learned]
        store.commit(final, events)
        result.plan = Plan(final, plan.run, plan.stop, plan.pending, plan.waiting, plan.events)
    result.done, result.failures = acts.done, acts.failures
    result.acts = dict(Counter(e.kind for e in acts.events))
    return result


async def _certify(
    acts: Acts,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    plan: Plan,
    store: Store,
) -> tuple[Plan, Observed]:
    """Order the ACME certificates that are due (minidock.certify) and commit what came of
    it; the plan's state and the proxies' loaded digests as they are after it."""
    if cluster.ingress is None or cluster.ingress.acme is None or not observed.proxies:
        return plan, observed
    table = route_table(cluster, inventory, observed, plan.state, acts.now)
    done = await certify(acts.sh, cluster, table, plan.state.tls, observed.proxies, acts.now)
    if not done.events:
        return plan, observed
    plan = replace(plan, state=replace(plan.state, tls=done.tls))
    acts.fence()
    store.commit(plan.state, done.events)
    for event in done.events:
        (acts.failures if event.kind.endswith("failed") else acts.done).append(event.message)
    return plan, replace(observed, proxies=done.proxies)
