"""`minidock run`: a one-off task of a service's current spec, placed by the scheduler (or on
the host asked for), its output streamed with secrets masked, its exit status ours, and
its container removed afterwards, also when the command is interrupted (docs/jobs.md).
Like `exec`, it takes no lock and changes no state: it starts no task of a slot."""

from __future__ import annotations

import asyncio
import secrets as tokens
from collections.abc import Sequence
from dataclasses import dataclass

from minidock.act.jobs import OneOffFailed, OneOffTask, attach_oneoff, create_oneoff, remove_oneoff
from minidock.core.hosts import engines_known
from minidock.core.jobs import oneoff_spec, place_oneoff
from minidock.masking import Masker
from minidock.model import looks_secret
from minidock.observe import observe, told_engines
from minidock.ssh import CommandTimeout, Executor, OutputLine, Terminal, Unreachable
from minidock.store import StateLocation
from minidock.usecases.access import read_desired, reading, require_applied
from minidock.usecases.clusters import one as one_cluster
from minidock.usecases.outcomes import (
    BadInput,
    ExitCode,
    LogLine,
    OnLogLine,
    UseCaseError,
    unknown,
)
from minidock.usecases.runtime import Runtime, connected

__all__ = ["RunOutcome", "env_pairs", "run_oneoff"]


@dataclass(frozen=True)
class RunOutcome:
    """The one-off `task` ran on `host` and exited with `status`; `interrupted` when this
    command was stopped first (exit 130); `left` says why its container may remain."""

    task: str
    host: str
    status: int
    interrupted: bool = False
    left: str = ""

    @property
    def exit_code(self) -> int:
        return ExitCode.INTERRUPTED if self.interrupted else self.status


def env_pairs(given: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--env K=V` values as pairs; BadInput for one without a name and `=`."""
    pairs = []
    for item in given:
        key, equals, value = item.partition("=")
        if not (key and equals) or any(c.isspace() for c in key):
            raise BadInput(f"run --env: use KEY=VALUE, e.g. --env MODE=debug (got {item!r})")
        pairs.append((key, value))
    return tuple(pairs)


async def run_oneoff(
    service: str,
    command: Sequence[str],
    directory: StateLocation,
    runtime: Runtime,
    on_line: OnLogLine,
    *,
    host: str = "",
    env: Sequence[tuple[str, str]] = (),
    terminal: Terminal | None = None,
    cluster: str | None = None,
) -> RunOutcome:
    """Run COMMAND as a one-off task of SERVICE and wait for it to end."""
    if not command:
        raise BadInput("run: give the command after --, e.g. minidock run web -- sh -c 'env'")
    require_applied(directory)
    directory = one_cluster(directory, cluster, service)
    async with connected(runtime) as executor:
        with reading(directory) as store:
            state = store.load()
            desired = read_desired(store, directory)
            if host and desired.inventory.host(host) is None:
                raise unknown("host", host, [h.name for h in desired.inventory.hosts])
            ss = state.services.get(service)
            if ss is None or ss.removed:
                raise unknown("service", service, sorted(state.services))
            memory = told_engines(engines_known(state.hosts, runtime.clock.now()))
            hosts = desired.inventory.hosts
            observed = await observe(executor, hosts, desired.cluster.name, memory=memory)
            mask = runtime.masks.of(store, state, observed)
        mask = Masker((*mask.secrets, *(v for k, v in env if looks_secret(k))))
        spec = oneoff_spec(ss.spec, command, env)
        placed = place_oneoff(ss, spec, desired.inventory, observed, state, host)
        if not placed.host:
            raise UseCaseError(mask(f"no host can run a one-off of {service}: {placed.why}"))
        on = desired.inventory.host(placed.host)
        assert on is not None  # placed among the inventory's hosts
        task = OneOffTask(
            spec, desired.cluster.name, on, tokens.token_hex(5),
            slot=placed.slot, controller=state.controller, terminal=terminal,
        )  # fmt: skip
        try:
            await create_oneoff(executor, desired.inventory, task, runtime.engine())
        except (OneOffFailed, Unreachable, CommandTimeout) as exc:
            raise UseCaseError(mask(str(exc))) from None
        return await _attached(executor, runtime, task, mask, on_line)


async def _attached(
    executor: Executor, runtime: Runtime, task: OneOffTask, mask: Masker, on_line: OnLogLine
) -> RunOutcome:
    """Start the created one-off attached and wait for it; a first SIGINT or SIGTERM stops
    waiting. Either way, the container is removed before this returns."""

    def masked(line: OutputLine) -> None:
        on_line(LogLine(task.name, line.stream, mask(line.text)))

    waiting = asyncio.ensure_future(attach_oneoff(executor, task, masked))
    status, failure = 0, ""
    stopping = runtime.interrupt.passes(f"removing {task.name}")
    with stopping, runtime.interrupt.listening(lambda: _cancel(waiting)):
        try:
            status = await waiting
        except (Unreachable, CommandTimeout) as exc:
            failure = mask(f"{task.name} on {task.host.name}: {exc}")
        except asyncio.CancelledError:
            if not runtime.interrupt.requested:
                raise
        finally:
            left = mask(await remove_oneoff(executor, task.host, task.name))
    if failure:
        raise UseCaseError(failure + (f"; {left}" if left else ""))
    interrupted = runtime.interrupt.requested
    return RunOutcome(task.name, task.host.name, status, interrupted, left)


def _cancel(waiting: asyncio.Future[int]) -> None:
    waiting.cancel()
