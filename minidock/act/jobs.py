"""One-off tasks over SSH (`minidock run`): made ready on the host, created, started
attached to the caller, and removed. The decisions (what it runs, where) are
`minidock.core.jobs`'; this module only issues the docker commands (docs/jobs.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from minidock.act.acts import PrepareFailed, prepare_host
from minidock.act.push import ControllerEngine
from minidock.commands.docker import (
    logs_argv,
    network_connect_argv,
    oneoff_create_argv,
    oneoff_name,
    oneoff_start_argv,
    rm_argv,
    secret_files_argv,
    secret_files_tar,
    start_argv,
)
from minidock.commands.errors import name_conflict
from minidock.model import Host, Inventory, OneOff, Service, cluster_network
from minidock.ssh import CommandTimeout, Executor, OnLine, Terminal, Unreachable

__all__ = [
    "OneOffFailed",
    "OneOffTask",
    "attach_oneoff",
    "create_oneoff",
    "output_tail",
    "remove_oneoff",
    "start_detached",
]

REMOVE_TIMEOUT = 30.0  # seconds `docker rm -f` of a one-off may take (it kills it first)


class OneOffFailed(Exception):
    """The one-off could not be made or started: one line (mask it before showing it)."""


@dataclass(frozen=True)
class OneOffTask:
    """A one-off task to run: its spec (`core.jobs.oneoff_spec`), where, and as whom."""

    spec: Service
    cluster: str
    host: Host
    run: str  # its run id
    kind: str = "run"
    slot: int = 1  # whose named volumes it mounts
    controller: str = ""
    terminal: Terminal | None = None  # joined to it (-i, -t), else its output line by line

    @property
    def name(self) -> str:
        return oneoff_name(self.spec.name, self.kind, self.run)


async def create_oneoff(
    executor: Executor,
    inventory: Inventory,
    task: OneOffTask,
    engine: ControllerEngine | None = None,
) -> bool:
    """Make the host ready (image, configs, network, as for a task) and create the one-off,
    with its secret files copied in, joined to the service's extra networks; False when a
    container of its name exists already (a decision made again); raises OneOffFailed (a
    half-made one is removed)."""
    spec, host = task.spec, task.host
    try:
        configs = await prepare_host(
            executor, inventory, task.cluster, host.name, spec, task.name, engine=engine
        )
    except PrepareFailed as exc:
        raise OneOffFailed(str(exc)) from None
    terminal = task.terminal
    argv, env = oneoff_create_argv(
        spec, task.cluster, task.kind, task.run, task.controller,
        slot=task.slot, network=cluster_network(task.cluster), configs=configs,
        interactive=terminal is not None and terminal.interactive,
        tty=terminal is not None and terminal.tty,
    )  # fmt: skip
    made = await executor.run(host, argv, input=env or None)
    conflict = name_conflict(made.stderr) if made.exit_status != 0 else None
    if conflict is not None and conflict.name == task.name:
        return False
    if made.exit_status != 0:
        raise OneOffFailed(f"docker create {task.name} on {host.name}: {_said(made.stderr)}")
    if spec.secret_files:  # into the created one-off's own filesystem, as for a task
        tar = secret_files_tar(spec.secret_files)
        copied = await executor.run(host, secret_files_argv(task.name), input=tar)
        if copied.exit_status != 0:
            await remove_oneoff(executor, host, task.name)
            raise OneOffFailed(f"{task.name}: copying its secret files: {_said(copied.stderr)}")
    for net in spec.networks:
        joined = await executor.run(host, network_connect_argv(net, task.name, task.name))
        if joined.exit_status != 0:
            await remove_oneoff(executor, host, task.name)
            raise OneOffFailed(f"{task.name} joining {net} on {host.name}: {_said(joined.stderr)}")
    return True


async def start_detached(executor: Executor, task: OneOffTask) -> None:
    """Start a created one-off in the background (a job's run: a later pass collects it)."""
    started = await executor.run(task.host, start_argv(task.name))
    if started.exit_status != 0:
        await remove_oneoff(executor, task.host, task.name)
        raise OneOffFailed(f"docker start {task.name} on {task.host.name}: {_said(started.stderr)}")


async def output_tail(executor: Executor, host: Host, oneoff: OneOff, lines: int = 5) -> str:
    """The last lines of a finished one-off's output, joined by " | " (mask it)."""
    try:
        logs = await executor.run(host, logs_argv(oneoff.id, lines))
    except (Unreachable, CommandTimeout) as exc:
        return f"(output not read: {exc})"
    return " | ".join((logs.stdout + logs.stderr).strip().splitlines()[-lines:])


async def attach_oneoff(executor: Executor, task: OneOffTask, on_line: OnLine) -> int:
    """Start the created one-off attached: its output line by line to `on_line`, or joined
    to `task.terminal`; its exit status once it ends (cancel to stop waiting for it)."""
    terminal = task.terminal
    if terminal is None:
        return await executor.follow(task.host, oneoff_start_argv(task.name), on_line)
    argv = oneoff_start_argv(task.name, interactive=terminal.interactive)
    return await executor.attach(task.host, argv, terminal)


async def remove_oneoff(executor: Executor, host: Host, name: str) -> str:
    """`docker rm -f` the one-off (killing it if it still runs), shielded from a cancel
    so that an interrupt cannot leave it behind; "" when done, else why not."""
    argv = rm_argv([name], force=True)
    try:
        res = await asyncio.shield(executor.run(host, argv, timeout=REMOVE_TIMEOUT))
    except (Unreachable, CommandTimeout) as exc:
        return f"removing {name} on {host.name}: {exc} (the next pass removes it once finished)"
    if res.exit_status != 0 and "No such container" not in res.stderr:
        return f"removing {name} on {host.name}: {_said(res.stderr)}"
    return ""


def _said(stderr: str) -> str:
    return " ".join(stderr.split())[:300] or "no reason given"
