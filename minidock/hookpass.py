"""A pass's work for the services' before_update hooks, after its tasks' (docs/jobs.md#hooks):
each hook's step (core/hooks.py), recorded before it is acted on. A hook to run is started
in the background as a one-off task of its generation's spec, placed by the scheduler; one
that finished has the end of its output read (masked) and its outcome recorded, then its
container removed; one past its timeout is read, recorded as failed and removed. Later
passes read the outcome: meanwhile the rollout waits (core/rollout.py `hook_gate`), and a
kill -9 anywhere neither loses the hook nor runs it twice (its name is its generation's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from minidock.core import ControllerState
from minidock.core.hooks import (
    HOOK_KIND,
    HookAct,
    HookRecord,
    HookStep,
    failed_line,
    step,
    timed_out,
)
from minidock.core.jobs import oneoff_spec, place_oneoff
from minidock.jobs import (
    OneOffFailed,
    OneOffTask,
    create_oneoff,
    output_tail,
    remove_oneoff,
    start_detached,
)
from minidock.masking import Masker, masker_for
from minidock.model import Cluster, Event, Inventory, Observed, OneOff
from minidock.runner import PassResult
from minidock.ssh import CommandTimeout, Executor, Unreachable
from minidock.store import Store

__all__ = ["run_hooks"]

TAIL_LINES = 5  # lines of a hook's output kept with its outcome (and said by its event)


@dataclass
class _Hooks:
    """The hook pass's inputs, and the state and lines it builds."""

    cluster: Cluster
    inventory: Inventory
    store: Store
    executor: Executor
    observed: Observed
    now: float
    mask: Masker
    state: ControllerState
    events: list[Event] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def keep(self, name: str, record: HookRecord, kind: str = "", line: str = "") -> None:
        """The service's hook record and (with `kind`) its event, committed at once: the
        record is what a controller that comes back after a kill -9 goes by."""
        ss = self.state.services[name]
        if ss.hook == record and not kind:
            return
        self.state = replace(
            self.state, services={**self.state.services, name: replace(ss, hook=record)}
        )
        events = []
        if kind:
            said = self.mask.line(line)
            events = [Event(self.now, kind, f"{name}: {said}", service=name, task=record.run)]
            self.done.append(f"{name}: {said}")
        self.store.fence()
        self.store.commit(self.state, events)
        self.events += events


async def run_hooks(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    result: PassResult,
    now: float,
) -> PassResult:
    """The hooks' part of the pass whose `result` this is; the result with the hooks'
    state, lines and acts added. Nothing while the mass-loss guard holds."""
    state = result.plan.state
    names = [n for n, ss in sorted(state.services.items()) if ss.spec.before_update]
    if not names or state.guard:
        return result
    observed = result.observed
    mask = masker_for(store, state, observed, known=result.masker)
    work = _Hooks(cluster, inventory, store, executor, observed, now, mask, state)
    all_seen = all(o.ok for o in observed.hosts.values())
    seen = [o for h in observed.hosts.values() if h.ok for o in h.oneoffs if o.kind == HOOK_KIND]
    for name in names:
        decided = step(cluster.name, work.state.services[name], seen, now, all_seen=all_seen)
        if decided.act is HookAct.NONE:
            continue
        work.keep(name, decided.record)
        await _ACTS[decided.act](work, name, decided)
    result.plan = replace(result.plan, state=work.state)
    result.done += work.done
    for e in work.events:
        result.acts[e.kind] = result.acts.get(e.kind, 0) + 1
    return result


async def _start(work: _Hooks, name: str, decided: HookStep) -> None:
    """Start the hook as a one-off of the generation's spec with the hook's command (a
    created one found is started as it is); one that cannot start has failed, saying why."""
    ss, record = work.state.services[name], decided.record
    assert ss.spec.before_update is not None
    spec = oneoff_spec(ss.spec, ss.spec.before_update.command)
    try:
        if decided.oneoff is not None:
            where, slot = decided.oneoff.host, 1
        else:
            placed = place_oneoff(ss, spec, work.inventory, work.observed, work.state)
            if not placed.host:
                raise OneOffFailed(f"no host can run it: {placed.why}")
            where, slot = placed.host, placed.slot
        host = work.inventory.host(where)
        if host is None:
            raise OneOffFailed(f"its host {where} is not in the inventory")
        task = OneOffTask(
            spec, work.cluster.name, host, record.run, HOOK_KIND, slot, work.state.controller
        )
        work.store.fence()
        if decided.oneoff is None:
            await create_oneoff(work.executor, work.inventory, task)  # False: made already
        await start_detached(work.executor, task)
    except (OneOffFailed, Unreachable, CommandTimeout) as exc:
        why = work.mask.line(failed_line(record, "could not start", str(exc)))
        work.keep(name, record.ended(None, why, work.now), "hook-failed", why)
        return
    line = f"before_update hook {task.name} started on {host.name}"
    work.keep(name, record.started_on(host.name, work.now), "hook-started", line)


async def _collect(work: _Hooks, name: str, decided: HookStep) -> None:
    """A finished hook: the end of its output read, its outcome recorded, then removed."""
    found, record = decided.oneoff, decided.record
    assert found is not None
    tail = await _tail(work, found)
    code = found.exit_code
    if code == 0:
        took = (found.finished_at or work.now) - (found.started_at or record.started or work.now)
        line = f"before_update hook {record.run} succeeded ({max(0.0, took):.1f}s)"
        work.keep(name, record.ended(0, "", work.now), "hook-succeeded", line)
    else:
        why = failed_line(record, f"failed (exit {code})", tail)
        work.keep(name, record.ended(code, why, work.now), "hook-failed", why)
    await _remove(work, name, decided)


async def _time_out(work: _Hooks, name: str, decided: HookStep) -> None:
    """A hook past its timeout: read, recorded as failed, then removed (which kills it)."""
    found, record = decided.oneoff, decided.record
    assert found is not None
    spec = work.state.services[name].spec
    why = failed_line(record, timed_out(spec), await _tail(work, found))
    work.keep(name, record.ended(None, why, work.now), "hook-failed", why)
    await _remove(work, name, decided)


async def _lost(work: _Hooks, name: str, decided: HookStep) -> None:
    record = decided.record
    why = failed_line(record, "is gone from every host (removed by hand?)", "")
    work.keep(name, record.ended(None, why, work.now), "hook-failed", why)


async def _wait(work: _Hooks, name: str, decided: HookStep) -> None:
    """It runs (its record, started, is kept already): a later pass reads it."""


async def _remove(work: _Hooks, name: str, decided: HookStep) -> None:
    found = decided.oneoff
    host = work.inventory.host(found.host) if found else None
    if found is None or host is None:
        return
    work.store.fence()
    left = await remove_oneoff(work.executor, host, found.name)
    work.done.append(f"{name}: " + (work.mask.line(left) or f"removed {found.name} on {host.name}"))


async def _tail(work: _Hooks, found: OneOff) -> str:
    host = work.inventory.host(found.host)
    if host is None:
        return ""
    work.store.fence()
    return work.mask.line(await output_tail(work.executor, host, found, TAIL_LINES))


_ACTS: dict[HookAct, Callable[[_Hooks, str, HookStep], Awaitable[None]]] = {
    HookAct.START: _start,
    HookAct.WAIT: _wait,
    HookAct.COLLECT: _collect,
    HookAct.TIME_OUT: _time_out,
    HookAct.LOST: _lost,
    HookAct.REMOVE: _remove,
}
