"""One reconcile pass over real hosts: observe -> reconcile -> record -> act -> record.

The decision (the Plan and the next controller state) is committed *before* acting, so a
crash mid-act leaves a state that the next pass converges from: every act is either seen
on the hosts by the next observation or simply decided again. Act results (failures, log
tails of failed tasks) are committed after. The caller holds the state lock; every remote
command is preceded by `store.fence()`, so a controller that lost the lock mid-pass (etcd:
its lease) issues no further command, and its commits fail (docs/ha.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from minidock.commands import (
    image_present_argv,
    logs_argv,
    pull_argv,
    redact,
    rm_argv,
    run_argv,
    secrets_of,
    stop_argv,
)
from minidock.core import (
    ControllerState,
    Plan,
    Run,
    Stop,
    Waiting,
    note_exit,
    note_failure,
    reconcile,
)
from minidock.model import Cluster, Event, Inventory, Observed
from minidock.observe import observe
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable
from minidock.store import Store

STOP_TIMEOUT = 10  # seconds docker waits after SIGTERM before SIGKILL


@dataclass
class PassResult:
    """What one pass decided and did. Its verdict (exit code) is the use-case layer's:
    `minidock.usecases.verdict`."""

    plan: Plan
    observed: Observed
    done: list[str] = field(default_factory=list)  # one line per act that happened
    failures: list[str] = field(default_factory=list)  # one line per act that failed


_Where = tuple[str, int, str, str]  # service, slot, host, task of an event


class _Acts:
    """Carries out a plan's verbs and folds their outcomes back into the state."""

    def __init__(
        self,
        executor: Executor,
        inventory: Inventory,
        cluster: str,
        now: float,
        secrets: Sequence[str],
        fence: Callable[[], None] = lambda: None,
    ):
        self.executor = executor
        self.fence = fence
        self.secrets = secrets
        self.hosts = {h.name: h for h in inventory.hosts}
        self.cluster = cluster
        self.now = now
        self.events: list[Event] = []
        self.done: list[str] = []
        self.failures: list[str] = []
        self.notes: list[Callable[[ControllerState], ControllerState]] = []

    async def sh(self, host: str, argv: Sequence[str], stdin: str | None = None) -> Result:
        """One remote command, only while this controller still holds the writer lock
        (`Store.fence` raises LeaseLost otherwise: a deposed controller acts no more)."""
        self.fence()
        return await self.executor.run(self.hosts[host], argv, input=stdin)

    def record(self, kind: str, line: str, where: _Where) -> None:
        line = redact(line, self.secrets)
        service, slot, host, task = where
        self.events.append(Event(self.now, kind, line, service, slot, host, task))
        (self.failures if kind == "act-failed" else self.done).append(line)

    async def stop(self, s: Stop) -> None:
        c = s.container
        where = (c.service, c.slot, c.host, c.task)
        try:
            if s.failure:
                logs = await self.sh(c.host, logs_argv(c.id))
                tail = " | ".join((logs.stdout + logs.stderr).strip().splitlines()[-3:])
                line = f"{s.reason}; log: {tail}" if tail else s.reason
                line = redact(line, self.secrets)[:300]
                self.notes.append(lambda st: note_exit(st, c.service, c.slot, line, s.reason))
            if c.live:
                await self._check(c.host, stop_argv(c.id, STOP_TIMEOUT), "docker stop")
            await self._check(c.host, rm_argv([c.id], force=True), "docker rm")
            self.record("stop", f"stopped {c.name} on {c.host}: {s.reason}", where)
        except _ActFailed as exc:
            self.record("act-failed", f"stop {c.name} on {c.host}: {exc}", where)
        except (Unreachable, CommandTimeout) as exc:
            self.record("act-failed", f"stop {c.name}: {exc}", where)

    async def run(self, r: Run) -> None:
        svc = r.service
        where = (svc.name, r.slot, r.host, r.task)
        try:
            await self._ensure_image(r.host, svc.image)
            if r.replaces is not None:
                old = r.replaces
                await self._check(old.host, stop_argv(old.id, STOP_TIMEOUT), "docker stop")
                await self._check(old.host, rm_argv([old.id], force=True), "docker rm")
                self.record("stop", f"stopped {old.name} on {old.host}: {r.reason}", where)
            argv, env = run_argv(svc, self.cluster, r.slot, r.task, svc.spec_hash())
            res = await self.sh(r.host, argv, env or None)
            if res.exit_status != 0 and "already in use" in res.stderr:
                self.record("adopt", f"{r.name} already exists on {r.host}: adopted", where)
                return
            if res.exit_status != 0:
                raise _ActFailed(f"docker run failed: {_first_line(res)}")
            self.record("run", f"started {r.name} on {r.host} ({r.reason}, {svc.image})", where)
        except (_ActFailed, Unreachable, CommandTimeout) as exc:
            line = redact(f"{r.name} on {r.host}: {exc}", self.secrets)
            self.notes.append(lambda st: note_failure(st, svc.name, r.slot, r.task, line, self.now))
            self.record("act-failed", f"run {line}", where)

    async def _ensure_image(self, host: str, image: str) -> None:
        """Confirm the image on the host, or pull it, before anything is stopped for it."""
        if (await self.sh(host, image_present_argv(image))).exit_status == 0:
            return
        pulled = await self.sh(host, pull_argv(image))
        if pulled.exit_status != 0:
            raise _ActFailed(
                f"image {image} is not on {host} and cannot be pulled: {_first_line(pulled)}"
            )

    async def _check(self, host: str, argv: Sequence[str], what: str) -> None:
        res = await self.sh(host, argv)
        if res.exit_status != 0 and "No such container" not in res.stderr:
            raise _ActFailed(f"{what} failed: {_first_line(res)}")


class _ActFailed(Exception):
    pass


def _first_line(res: Result) -> str:
    text = (res.stderr.strip() or res.stdout.strip() or f"exit {res.exit_status}").splitlines()
    return text[0][:200] if text else f"exit {res.exit_status}"


async def decide(
    cluster: Cluster,
    inventory: Inventory,
    state: ControllerState,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
) -> PassResult:
    """Observe every host and decide; nothing is recorded or done (plan, status)."""
    observed = await observe(executor, inventory.hosts, cluster.name)
    plan = reconcile(cluster, inventory, observed, state, clock(), force_down=force_down)
    return PassResult(plan, observed)


async def run_pass(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    *,
    clock: Callable[[], float] = time.time,
    force_down: bool = False,
) -> PassResult:
    """Observe every host, decide, record the decision, act, record the outcome.
    `force_down` overrides the mass-loss guard for this pass (the operator knows)."""
    now = clock()
    state = store.load()
    result = await decide(
        cluster, inventory, state, executor, clock=lambda: now, force_down=force_down
    )
    secrets = all_secrets(result.plan.state)
    plan = redacted(result.plan, secrets)
    result.plan = plan
    store.commit(plan.state, plan.events)
    acts = _Acts(executor, inventory, cluster.name, now, secrets, store.fence)
    await asyncio.gather(*(acts.stop(s) for s in plan.stop))
    await _by_host(plan.run, acts.run)
    if acts.events or acts.notes:
        final = plan.state
        for note in acts.notes:
            final = note(final)
        events = acts.events + newly_failed(plan.state, final, now)
        store.commit(final, events)
        result.plan = Plan(final, plan.run, plan.stop, plan.pending, plan.waiting, plan.events)
    result.done, result.failures = acts.done, acts.failures
    return result


def newly_failed(before: ControllerState, after: ControllerState, now: float) -> list[Event]:
    """A `failed` event for each slot that an act's failure took to its crash-loop limit."""
    return [
        Event(now, "failed", f"{name}.{n} failed: {slot.last_exit}", service=name, slot=n)
        for name, ss in after.services.items()
        for n, slot in sorted(ss.slots.items())
        if slot.failed and not (name in before.services and before.services[name].slot(n).failed)
    ]


def all_secrets(state: ControllerState) -> tuple[str, ...]:
    """Every env value of every service spec the controller keeps (current and previous)."""
    found: set[str] = set()
    for ss in state.services.values():
        for spec in (ss.spec, ss.previous):
            if spec is not None:
                found.update(secrets_of(spec))
    return tuple(sorted(found, key=len, reverse=True))


def redacted(plan: Plan, secrets: Sequence[str]) -> Plan:
    """The plan with secrets masked in every line it carries: events, every slot's failure
    line and the rollout's reason (log tails and health output can echo the environment),
    and the reasons of its stops, pending slots and waits."""
    if not secrets:
        return plan
    plan = replace(
        plan,
        stop=tuple(replace(s, reason=redact(s.reason, secrets)) for s in plan.stop),
        pending=tuple(replace(p, reason=redact(p.reason, secrets)) for p in plan.pending),
        waiting=tuple(Waiting(w.subject, redact(w.reason, secrets)) for w in plan.waiting),
    )
    services = {
        name: replace(
            ss,
            slots={
                n: replace(slot, last_exit=redact(slot.last_exit, secrets))
                for n, slot in ss.slots.items()
            },
            rollout=replace(ss.rollout, reason=redact(ss.rollout.reason, secrets)),
        )
        for name, ss in plan.state.services.items()
    }
    events = tuple(replace(e, message=redact(e.message, secrets)) for e in plan.events)
    return replace(plan, state=replace(plan.state, services=services), events=events)


async def _by_host(runs: Sequence[Run], act: Callable[[Run], Awaitable[None]]) -> None:
    """Hosts in parallel; on one host, in plan order (due restarts first)."""
    per_host: dict[str, list[Run]] = {}
    for r in runs:
        per_host.setdefault(r.host, []).append(r)

    async def one(batch: list[Run]) -> None:
        for r in batch:
            await act(r)

    await asyncio.gather(*(one(b) for b in per_host.values()))
