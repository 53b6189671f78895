"""Operator commands on running tasks: `ps` (where each task runs), `logs` (their output,
over SSH) and `exec` (a command in one task). They observe the hosts afresh, read the
state without the lock (so they answer while `watch` works) and change nothing. Every line
of a task's output is masked with the secrets of the specs the controller keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minidock.commands.docker import exec_argv, task_logs_argv
from minidock.core.hosts import engines_known
from minidock.masking import Masker
from minidock.model import Container, Host, Inventory, Observed
from minidock.observe import observe, told_engines
from minidock.runner import decision
from minidock.ssh import CommandTimeout, Executor, OutputLine, Terminal, Unreachable
from minidock.store import StateLocation
from minidock.usecases.access import read_desired, reading, require_applied
from minidock.usecases.clusters import chosen
from minidock.usecases.clusters import one as one_cluster
from minidock.usecases.common import cluster_of
from minidock.usecases.outcomes import (
    BadInput,
    ExecOutcome,
    HostProblem,
    LogLine,
    LogsOutcome,
    OnLogLine,
    PsOutcome,
    TaskRow,
    UseCaseError,
    unknown,
)
from minidock.usecases.runtime import Runtime, connected


@dataclass(frozen=True)
class _Seen:
    """What a read-only command starts from: the fleet observed now, and the masks."""

    cluster: str
    inventory: Inventory
    services: tuple[str, ...]
    observed: Observed
    mask: Masker  # every generation in use's secrets (minidock.masking)
    slots: Mapping[str, tuple[int, ...]]  # the slots each service wants filled
    traffic: dict[str, str]  # task id -> "routed" / "draining" (docs/ingress.md)

    def tasks(self, service: str | None = None, slot: int | None = None) -> list[Container]:
        """This cluster's tasks (any state), by service, slot and creation."""
        found = [
            c
            for c in self.observed.containers()
            if (service is None or c.service == service) and (slot is None or c.slot == slot)
        ]
        return sorted(found, key=lambda c: (c.service, c.slot, c.created_at, c.host))

    def host(self, name: str) -> Host:
        found = self.inventory.host(name)
        assert found is not None  # observed hosts are the inventory's
        return found


async def _observe(directory: StateLocation, runtime: Runtime, executor: Executor) -> _Seen:
    require_applied(directory)
    with reading(directory) as store:
        state = store.load()
        desired = read_desired(store, directory)
        memory = told_engines(engines_known(state.hosts, runtime.clock.now()))
        hosts = desired.inventory.hosts
        observed = await observe(executor, hosts, desired.cluster.name, memory=memory)
        mask = runtime.masks.of(store, state, observed)
    names = tuple(s.name for s in desired.cluster.services)
    slots = {name: ss.slot_numbers() for name, ss in state.services.items()}
    plan = decision(desired.cluster, desired.inventory, observed, state, runtime.clock.now())
    traffic = {t: "routed" for entry in plan.routes for t in entry.tasks}
    traffic |= dict.fromkeys(state.draining, "draining")
    return _Seen(desired.cluster.name, desired.inventory, names, observed, mask, slots, traffic)


def _known(seen: _Seen, service: str, slot: int | None = None) -> None:
    """A service of the spec and, when given, one of its slots: a slot it wants filled or
    one a task was observed in (a scale-down's leftover); else `BadInput`."""
    if service not in seen.services:
        raise _unknown(seen, service)
    wanted = seen.slots.get(service, ())
    if slot is not None and slot not in wanted and not seen.tasks(service, slot):
        listed = ", ".join(map(str, wanted)) or "none"
        raise BadInput(f"{service} has no slot {slot}; its slots: {listed}")


def _unknown(seen: _Seen, service: str) -> BadInput:
    return unknown("service", service, seen.services)


def _unreachable(seen: _Seen) -> tuple[HostProblem, ...]:
    return tuple(
        HostProblem(name, seen.mask(o.error or "unreachable"))
        for name, o in sorted(seen.observed.hosts.items())
        if not o.ok
    )


def _missed(seen: _Seen) -> str:
    """ " (not observed: host3, host4)" when some hosts could not be seen, else ""."""
    names = [p.host for p in _unreachable(seen)]
    return f" (not observed: {', '.join(names)})" if names else ""


async def ps(
    directory: StateLocation,
    runtime: Runtime,
    service: str | None = None,
    *,
    cluster: str | None = None,
) -> PsOutcome:
    """Every task of every cluster the store holds (or of `cluster`, or of one service's
    cluster), observed now; each row names its cluster."""
    require_applied(directory)
    if service is not None:
        locations = [one_cluster(directory, cluster, service)]
    else:
        locations = [h.location for h in chosen(directory, cluster)]
    rows: list[TaskRow] = []
    problems: dict[str, HostProblem] = {}
    async with connected(runtime) as executor:
        for location in locations:
            seen = await _observe(location, runtime, executor)
            if service is not None:
                _known(seen, service)
            rows += [_row(c, seen.cluster, seen.traffic) for c in seen.tasks(service)]
            problems.update((p.host, p) for p in _unreachable(seen))
    return PsOutcome(tuple(rows), tuple(problems[name] for name in sorted(problems)))


def _row(c: Container, cluster: str, traffic: dict[str, str]) -> TaskRow:
    return TaskRow(
        c.task,
        c.name,
        c.service,
        c.slot,
        c.host,
        c.image,
        c.state,
        c.health,
        c.host_ports,
        c.exit_code,
        cluster,
        c.id,
        traffic.get(c.task, ""),
    )


async def logs(
    service: str,
    directory: StateLocation,
    runtime: Runtime,
    on_line: OnLogLine,
    *,
    slot: int | None = None,
    follow: bool = False,
    tail: int | None = None,
    since: float | None = None,
    cluster: str | None = None,
) -> LogsOutcome:
    """`docker logs` of each task of SERVICE (or of one slot), each line handed to
    `on_line` with its task's name, secrets masked. Task by task; with `follow`, all at
    once as the lines come, until every task's log ends or the caller cancels."""
    require_applied(directory)
    directory = one_cluster(directory, cluster, service)
    async with connected(runtime) as executor:
        seen = await _observe(directory, runtime, executor)
        _known(seen, service, slot)
        tasks = seen.tasks(service, slot)
        if not tasks:
            which = f"{service}.{slot}" if slot is not None else service
            raise UseCaseError(f"no task of {which} on the reachable hosts{_missed(seen)}")

        async def one(c: Container) -> str | None:
            def masked(line: OutputLine) -> None:
                on_line(LogLine(c.name, line.stream, seen.mask(line.text)))

            argv = task_logs_argv(c.id, tail=tail, since=since, follow=follow)
            try:
                status = await executor.follow(seen.host(c.host), argv, masked)
            except (Unreachable, CommandTimeout) as exc:
                return seen.mask(f"{c.name}: {exc}")
            return None if status == 0 else f"{c.name}: docker logs exited {status}"

        if follow:
            results = await asyncio.gather(*(one(c) for c in tasks))
        else:
            results = [await one(c) for c in tasks]
    failed = tuple(r for r in results if r is not None)
    return LogsOutcome(tuple(c.name for c in tasks), failed)


def _target(seen: _Seen, target: str) -> tuple[str, int | None]:
    """SERVICE or SERVICE.SLOT: a known service name wins (names may hold dots)."""
    if target in seen.services:
        return target, None
    service, dot, slot = target.rpartition(".")
    if not (dot and slot.isdigit() and int(slot) > 0):
        raise _unknown(seen, target)
    _known(seen, service, int(slot))
    return service, int(slot)


async def exec_task(
    target: str,
    command: Sequence[str],
    directory: StateLocation,
    runtime: Runtime,
    on_line: OnLogLine,
    *,
    terminal: Terminal | None = None,
    cluster: str | None = None,
) -> ExecOutcome:
    """Run COMMAND in one running task of SERVICE[.SLOT] (the lowest slot when none is
    given). Without `terminal` its output comes line by line, masked; with one, the
    command is joined to it (`-i`: stdin, `-t`: a PTY), bytes as they are."""
    if not command:
        raise BadInput("exec: give the command after --, e.g. minidock exec web -- sh -c 'env'")
    require_applied(directory)
    directory = cluster_of(directory, cluster, target)
    async with connected(runtime) as executor:
        seen = await _observe(directory, runtime, executor)
        service, slot = _target(seen, target)
        running = [c for c in seen.tasks(service, slot) if c.state == "running"]
        if not running:
            raise UseCaseError(f"no running task of {target} on the reachable hosts{_missed(seen)}")
        task = running[0]
        host = seen.host(task.host)
        try:
            if terminal is None:

                def masked(line: OutputLine) -> None:
                    on_line(LogLine(task.name, line.stream, seen.mask(line.text)))

                status = await executor.follow(host, exec_argv(task.id, command), masked)
            else:
                argv = exec_argv(
                    task.id, command, interactive=terminal.interactive, tty=terminal.tty
                )
                status = await executor.attach(host, argv, terminal)
        except (Unreachable, CommandTimeout) as exc:
            raise UseCaseError(seen.mask(f"{task.name}: {exc}")) from None
    return ExecOutcome(task.name, task.host, status)
