"""What `minidock status` reports, as one JSON-ready document. Pure.

The document is the stable `status --json` contract (docs/cli.md): services, tasks and
hosts, from the controller state, a fresh observation and the plan a pass would make.
"""

from __future__ import annotations

from typing import Any

from minidock.core import ControllerState, Plan, ServiceState
from minidock.core.supervise import ready
from minidock.model import Inventory, Observed


def service_state(ss: ServiceState, running: int, healthy: int, failed: int) -> str:
    """One word for a service: stopped, failed, paused, updating, rolling_back, converged,
    degraded (fewer healthy tasks than replicas) or starting."""
    if ss.spec.desired == "stopped":
        return "stopped"
    if failed:
        return "failed"
    r = ss.rollout
    if r.paused or r.active:
        return str(r.status)
    if healthy >= ss.spec.replicas and running == ss.spec.replicas:
        return "converged"
    return "degraded" if healthy < running or running < ss.spec.replicas else "starting"


def generation_of(ss: ServiceState, spec_hash: str) -> int | None:
    if ss.spec.spec_hash() == spec_hash:
        return ss.generation
    if ss.previous is not None and ss.previous.spec_hash() == spec_hash:
        return ss.previous_generation
    return None


def summarize(
    state: ControllerState, inventory: Inventory, observed: Observed, plan: Plan
) -> dict[str, Any]:
    """The status document. `plan` is the dry-run decision for this observation (pending
    reasons and what the next pass would wait for)."""
    mine = [c for c in observed.containers() if c.cluster == state.cluster]
    services = []
    for name in state.order:
        ss = plan.state.services.get(name) or state.services.get(name)
        if ss is None:
            continue
        tasks = [c for c in mine if c.service == name and c.live]
        failed = [
            {"slot": n, "last_exit": s.last_exit}
            for n, s in sorted(ss.slots.items())
            if s.failed and n <= ss.spec.replicas
        ]
        done = {n for n, s in ss.slots.items() if s.complete}  # exited, not to restart
        running = len({c.slot for c in tasks if c.state == "running"} - done)
        healthy = len({c.slot for c in tasks if ready(c)} - done)
        r = ss.rollout
        last_failure = r.reason or next(
            (s.last_exit for _, s in sorted(ss.slots.items(), reverse=True) if s.last_exit), ""
        )
        services.append(
            {
                "name": name,
                "desired": ss.spec.desired,
                "replicas": ss.spec.replicas,
                "running": running,
                "healthy": healthy,
                "state": service_state(ss, running + len(done), healthy + len(done), len(failed)),
                "completed": len(done),
                "image": ss.spec.image,
                "generation": ss.generation,
                "rollout": {
                    "status": r.status,
                    "done": len(r.done),
                    "total": r.total,
                    "failures": r.failures,
                    "reason": r.reason,
                },
                "failed": failed,
                "pending": [
                    {"slot": p.slot, "reason": p.reason} for p in plan.pending if p.service == name
                ],
                "last_failure": last_failure,
            }
        )
    tasks_out = []
    for c in sorted(mine, key=lambda c: (c.service, c.slot, c.host)):
        ss = state.services.get(c.service)
        tasks_out.append(
            {
                "id": c.task,
                "name": c.name,
                "service": c.service,
                "slot": c.slot,
                "host": c.host,
                "image": c.image,
                "state": c.state,
                "health": c.health,
                "exit_code": c.exit_code,
                "generation": generation_of(ss, c.spec) if ss else None,
            }
        )
    hosts_out = []
    for h in inventory.hosts:
        hs = plan.state.host(h.name)
        obs = observed.hosts.get(h.name)
        live = [c for c in mine if c.host == h.name and c.live]
        word = str(hs.phase)
        hosts_out.append(
            {
                "name": h.name,
                "address": h.address,
                "state": word,
                "drained": hs.drained,
                "last_seen": hs.last_seen,
                "error": None if obs is None or obs.ok else obs.error,
                "tasks": len(live),
                "cpus": {"used": sum((c.cpus for c in live), 0.0), "total": h.cpus},
                "memory": {"used": sum(c.memory for c in live), "total": h.memory},
            }
        )
    return {
        "cluster": state.cluster,
        "generation": state.generation,
        "converged": plan.converged,
        "waiting": list(plan.waiting),
        "services": services,
        "tasks": tasks_out,
        "hosts": hosts_out,
    }
