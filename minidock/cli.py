"""The command line: parse the arguments, call a use case (`minidock.usecases`), print what
it reports and returns. No decisions live here: the workflows, the lock and its patience,
the `--wait` loop and the exit codes (`usecases.ExitCode`) are the use cases'.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, ClassVar, NoReturn, TypeVar, assert_never

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from minidock import usecases
from minidock.core import Plan
from minidock.runner import PassResult
from minidock.ssh import SSHExecutor
from minidock.state import state_dir
from minidock.status import HostSummary, ServiceSummary, StatusDocument
from minidock.units import format_duration, format_size, parse_duration
from minidock.usecases import ConvergeOutcome, Ending, ExitCode, Progress, Report

MIN_INTERVAL = 0.1  # seconds: the shortest `watch --interval`
T = TypeVar("T")


class LazyGroup(TyperGroup):
    """The top-level group, whose sub-apps in LAZY ("name": "module:attribute" of a typer
    app) are imported only when their command runs or the help lists them: `minidock
    reconcile` never loads the lab (tests/unit/test_lazy_lab.py)."""

    LAZY: ClassVar[dict[str, str]] = {"lab": "minidock.lab.cli:lab_app"}

    def list_commands(self, ctx: Any) -> list[str]:
        loaded = super().list_commands(ctx)
        return [*loaded, *(name for name in self.LAZY if name not in loaded)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            module, _, attribute = self.LAZY[cmd_name].partition(":")
            sub_app = getattr(importlib.import_module(module), attribute)
            self.add_command(typer.main.get_command(sub_app), cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="minidock",
    help="Keep Docker services converged on a fleet of SSH hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StateOption = Annotated[
    str | None,
    typer.Option("--state", help="State directory (default: $MINIDOCK_STATE, else .minidock/)."),
]
WaitOption = Annotated[bool, typer.Option("--wait", help="Repeat passes until converged.")]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long --wait may take.")]
FileArg = Annotated[Path, typer.Argument(help="A cluster spec (TOML).", show_default=False)]


# -- wiring -----------------------------------------------------------------------------------
def fail(message: str, code: int = ExitCode.USAGE) -> NoReturn:
    err.print(f"minidock: {message}", markup=False)
    raise typer.Exit(code)


def seconds(value: str, option: str, *, at_least: float = 0.0) -> float:
    """An option's duration in seconds; a bad one is exit 2 naming the option."""
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        fail(f"{option}: {exc}")
    if parsed < at_least:
        least = format_duration(at_least)
        fail(f"{option}: {value} is too short; use at least {least}, e.g. 2s")
    return parsed


def runtime() -> usecases.Runtime:
    """The real world: SSH to the hosts, the system clock."""
    clock = usecases.Clock(now=time.time, monotonic=time.monotonic, sleep=asyncio.sleep)
    return usecases.Runtime(executor=SSHExecutor, clock=clock)


def checked(work: Callable[[], T]) -> T:
    """Call a use case; a refusal is one line on stderr and its exit code."""
    try:
        return work()
    except usecases.UseCaseError as exc:
        fail(str(exc), exc.exit_code)


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run an async use case to its outcome (or its refusal, as `checked`)."""
    return checked(lambda: asyncio.run(work))


# -- printing ---------------------------------------------------------------------------------
def printer(*, quiet: bool = False) -> Report:
    """Prints progress as the use case reports it; `quiet` passes (cron's reconcile, watch)
    print nothing when nothing changed."""

    def report(progress: Progress) -> None:
        match progress:
            case usecases.GenerationStored(generation=gen, cluster=cluster, services=n):
                out.print(f"generation {gen}: {cluster} ({n} services)", markup=False)
            case usecases.IntentRecorded(message=message):
                out.print(message, markup=False)
            case usecases.PassDone(result=result):
                print_pass(result, quiet=quiet)
            case usecases.PassSkipped():
                pass  # another writer is at work: the next pass will see its result
            case _:
                assert_never(progress)

    return report


def print_pass(result: PassResult, *, quiet: bool = False) -> None:
    """Acts as they happened, then failures; nothing at all when quiet and nothing changed."""
    for line in result.done:
        out.print(line, markup=False)
    for line in result.failures:
        err.print(f"failed: {line}", markup=False)
    if result.plan.guard:  # loud on every pass it holds, so cron mails each time
        err.print(f"minidock: {result.plan.guard}", markup=False)
    if quiet and not (result.done or result.failures or result.plan.events):
        return
    for e in result.plan.events:
        out.print(f"{e.kind}: {e.message}", markup=False)
    for p in result.plan.pending:
        out.print(f"pending {p.service}.{p.slot}: {p.reason}", markup=False)
    for name, slot, line in result.plan.failed_slots():
        err.print(f"FAILED {name}.{slot}: {line}", markup=False)


def print_convergence(outcome: ConvergeOutcome) -> None:
    """How waiting ended: `converged`, or what a timed-out wait still waits for."""
    if outcome.ending is Ending.CONVERGED:
        out.print("converged", markup=False)
    elif outcome.ending is Ending.TIMED_OUT:
        err.print(f"not converged after {format_duration(outcome.timeout)}:", markup=False)
        for line in outcome.waiting:
            err.print(f"  {line}", markup=False)


def print_plan(plan: Plan) -> None:
    for s in plan.stop:
        out.print(f"stop {s.container.name} on {s.container.host}: {s.reason}", markup=False)
    for r in plan.run:
        how = f"replacing {r.replaces.name}, " if r.replaces else ""
        out.print(f"run {r.name} on {r.host} ({how}{r.reason}, {r.service.image})", markup=False)
    for p in plan.pending:
        out.print(f"pending {p.service}.{p.slot}: {p.reason}", markup=False)
    for w in plan.waiting:
        out.print(f"waiting {w}", markup=False)
    if plan.converged:
        out.print("nothing to do: converged", markup=False)


# -- commands ---------------------------------------------------------------------------------
@app.command()
def validate(file: Annotated[Path, typer.Argument(help="A cluster spec or an inventory.")]) -> None:
    """Check a cluster spec (and its inventory) or an inventory; print OK or the error."""
    checked_file = checked(lambda: usecases.validate(file))
    if checked_file.cluster is None:
        out.print(f"OK: {file}: inventory with {checked_file.hosts} hosts", markup=False)
    else:
        out.print(
            f"OK: {file}: cluster {checked_file.cluster}, {checked_file.services} services, "
            f"{checked_file.hosts} hosts",
            markup=False,
        )


@app.command()
def apply(
    file: FileArg,
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan only.")] = False,
    state: StateOption = None,
) -> None:
    """Validate, store as the next desired-state generation, reconcile."""
    limit = seconds(timeout, "--timeout")
    directory = state_dir(state, file)
    if dry_run:
        print_plan(run(usecases.plan(file, directory, runtime())).plan)
        return
    applied = run(usecases.apply(file, directory, runtime(), printer(), wait=wait, timeout=limit))
    print_convergence(applied.convergence)
    for failed in applied.failed_updates:
        err.print(f"{failed.service}: {failed.reason}", markup=False)
    raise typer.Exit(applied.exit_code)


@app.command()
def plan(file: FileArg, state: StateOption = None) -> None:
    """What apply would do, as a list of actions; changes nothing."""
    print_plan(run(usecases.plan(file, state_dir(state, file), runtime())).plan)


@app.command("reconcile")
def reconcile_command(
    state: StateOption = None,
    force_down: Annotated[
        bool,
        typer.Option(
            "--force-down",
            help="Let hosts go down and be replaced even when most of the fleet failed its "
            "probes (overrides the mass-loss guard for this pass).",
        ),
    ] = False,
) -> None:
    """One pass over the stored desired state: the cron entry point, quiet when idle."""
    work = usecases.reconcile(
        state_dir(state, None), runtime(), printer(quiet=True), force_down=force_down
    )
    outcome = run(work)
    raise typer.Exit(outcome.exit_code)


@app.command()
def watch(
    interval: Annotated[str, typer.Option("--interval", help="Time between passes.")] = "2s",
    state: StateOption = None,
) -> None:
    """Passes in a loop until interrupted, reusing SSH connections.

    The lock is held for each pass, not between passes, so `apply`, `drain` and the other
    writers get their turn; a pass that finds the lock taken is skipped."""
    pause = seconds(interval, "--interval", at_least=MIN_INTERVAL)
    loop = usecases.watch(state_dir(state, None), runtime(), printer(quiet=True), interval=pause)
    try:
        run(loop)
    except KeyboardInterrupt:
        out.print("stopped", markup=False)


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
) -> None:
    """Services, tasks and hosts, observed now."""
    doc = run(usecases.status(state_dir(state, None), runtime())).document
    if as_json:
        sys.stdout.write(json.dumps(doc.to_json(), indent=2, sort_keys=True) + "\n")
        return
    print_status(doc)


def print_status(doc: StatusDocument) -> None:
    if doc.guard:
        err.print(f"minidock: {doc.guard}", markup=False)
    if doc.rebuilt:
        out.print(f"note: {doc.rebuilt}", markup=False)
    services = Table(
        "service",
        "desired",
        "running",
        "healthy",
        "state",
        "image",
        "rollout",
        title=f"cluster {doc.cluster} (generation {doc.generation})",
    )
    for s in doc.services:
        services.add_row(*service_row(s))
    out.print(services)
    for s in doc.services:
        if s.last_failure:
            out.print(f"{s.name}: last failure: {s.last_failure}", markup=False)
        for p in s.pending:
            out.print(f"{s.name}.{p.slot} pending: {p.reason}", markup=False)
        for f in s.failed:
            out.print(f"{s.name}.{f.slot} FAILED: {f.last_exit}", markup=False)
    tasks = Table("task", "slot", "host", "image", "gen", "state", "health")
    for t in doc.tasks:
        tasks.add_row(
            t.name,
            str(t.slot),
            t.host,
            t.image,
            str(t.generation or "?"),
            t.state if t.exit_code is None else f"{t.state} ({t.exit_code})",
            t.health,
        )
    out.print(tasks)
    hosts = Table("host", "state", "drained", "last seen", "tasks", "cpus", "memory")
    for h in doc.hosts:
        hosts.add_row(*host_row(h))
    out.print(hosts)
    for w in doc.waiting:
        out.print(f"waiting: {w}", markup=False)


def service_row(s: ServiceSummary) -> tuple[str, ...]:
    r = s.rollout
    rollout: str = r.status if r.status != "none" else ""
    if r.active:
        rollout += f" {r.done}/{r.total}"
    word = s.state.upper() if s.state == "failed" else s.state
    desired = f"{s.desired} x{s.replicas}"
    return (s.name, desired, str(s.running), str(s.healthy), word, s.image, rollout)


def host_row(h: HostSummary) -> tuple[str, ...]:
    seen = time.strftime("%H:%M:%S", time.localtime(h.last_seen)) if h.last_seen else "never"
    cpus = f"{h.cpus.used:g}/{h.cpus.total:g}" if h.cpus.total else f"{h.cpus.used:g}"
    mem = h.memory
    memory = (
        f"{format_size(mem.used)}/{format_size(mem.total)}" if mem.total else format_size(mem.used)
    )
    word = h.state if not h.error else f"{h.state}: {h.error}"
    return (h.name, word, "yes" if h.drained else "", seen, str(h.tasks), cpus, memory)


@app.command()
def drain(
    host: str,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Until the host is empty.")] = True,
    timeout: TimeoutOption = "5m",
    state: StateOption = None,
) -> None:
    """Move every task off a host (replacements first) and keep it empty."""
    limit = seconds(timeout, "--timeout")
    drained = run(
        usecases.drain(host, state_dir(state, None), runtime(), printer(), wait=wait, timeout=limit)
    )
    print_convergence(drained.convergence)
    raise typer.Exit(drained.exit_code)


@app.command()
def activate(host: str, state: StateOption = None) -> None:
    """Let a drained host take tasks again (running tasks are not moved back)."""
    activated = run(usecases.activate(host, state_dir(state, None), runtime(), printer()))
    raise typer.Exit(activated.exit_code)


@app.command()
def rollback(
    service: str, wait: WaitOption = False, timeout: TimeoutOption = "5m", state: StateOption = None
) -> None:
    """Go back to the service's previous spec, rolled out like an update."""
    limit = seconds(timeout, "--timeout")
    rolled = run(
        usecases.rollback(
            service, state_dir(state, None), runtime(), printer(), wait=wait, timeout=limit
        )
    )
    print_convergence(rolled.convergence)
    raise typer.Exit(rolled.exit_code)


@app.command()
def reset(
    service: str, wait: WaitOption = False, timeout: TimeoutOption = "5m", state: StateOption = None
) -> None:
    """Clear a service's crash-loop Failed slots and backoff timers."""
    limit = seconds(timeout, "--timeout")
    cleared = run(
        usecases.reset(
            service, state_dir(state, None), runtime(), printer(), wait=wait, timeout=limit
        )
    )
    print_convergence(cleared.convergence)
    raise typer.Exit(cleared.exit_code)


@app.command()
def events(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest last.")] = 50,
    state: StateOption = None,
) -> None:
    """The event log: every change the controller made."""
    log = checked(lambda: usecases.events(state_dir(state, None), limit=limit))
    for e in log.events:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at))
        out.print(f"{at} {e.kind}: {e.message}", markup=False)


# -- operator commands: tasks and images ------------------------------------------------------
@app.command("ps")
def ps_command(
    service: Annotated[str | None, typer.Argument(help="Only this service's tasks.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
) -> None:
    """Tasks observed now: where each runs, its state, health and host ports."""
    listed = run(usecases.ps(state_dir(state, None), runtime(), service))
    for problem in listed.unreachable:
        err.print(f"minidock: {problem.host} not observed: {problem.error}", markup=False)
    if as_json:
        doc = {
            "tasks": [dataclasses.asdict(t) for t in listed.tasks],
            "unreachable": [dataclasses.asdict(u) for u in listed.unreachable],
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    table = Table("TASK", "HOST", "STATE", "HEALTH", "PORTS", "IMAGE", box=None, pad_edge=False)
    for t in listed.tasks:
        word = t.state if t.exit_code is None else f"{t.state} ({t.exit_code})"
        table.add_row(t.name, t.host, word, t.health, ", ".join(t.ports), t.image)
    out.print(table)


def print_log_line(line: usecases.LogLine, *, prefix: bool = True) -> None:
    """One line of a task's output, on the stream the task wrote it to, flushed at once."""
    stream = sys.stderr if line.stream == "stderr" else sys.stdout
    stream.write(f"{line.task} | {line.text}\n" if prefix else f"{line.text}\n")
    stream.flush()


@app.command()
def logs(
    service: Annotated[str, typer.Argument(help="The service whose tasks' output to show.")],
    slot: Annotated[
        int | None, typer.Option("--slot", help="Only this slot's tasks.", min=1)
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines of each task.", min=0)
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only lines of the last DURATION, e.g. 10m.")
    ] = None,
    state: StateOption = None,
) -> None:
    """The output of a service's tasks (docker logs over SSH), each line prefixed by its task
    and secrets masked; with --follow, until Ctrl-C."""
    window = seconds(since, "--since") if since is not None else None
    work = usecases.logs(
        service, state_dir(state, None), runtime(), print_log_line,
        slot=slot, follow=follow, tail=tail, since=window,
    )  # fmt: skip
    try:
        shown = run(work)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.OK) from None
    for line in shown.failed:
        err.print(f"failed: {line}", markup=False)
    raise typer.Exit(shown.exit_code)


@app.command("exec")
def exec_command(
    target: Annotated[str, typer.Argument(help="SERVICE or SERVICE.SLOT (default: lowest slot).")],
    command: Annotated[
        list[str], typer.Argument(help="The command, after --.", show_default=False)
    ],
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Send stdin to it.")
    ] = False,
    tty: Annotated[bool, typer.Option("--tty", "-t", help="Run it on a terminal (a PTY).")] = False,
    state: StateOption = None,
) -> None:
    """Run a command in one running task (docker exec over SSH); its exit status is ours.
    `-it` gives an interactive terminal, e.g. `minidock exec -it web.1 -- sh`."""
    if tty and not os.isatty(0):
        fail("exec -t: stdin is not a terminal (drop -t, or run from one)")
    terminal = usecases.Terminal(interactive=interactive, tty=tty) if interactive or tty else None
    work = usecases.exec_task(
        target, command, state_dir(state, None), runtime(),
        lambda line: print_log_line(line, prefix=False), terminal=terminal,
    )  # fmt: skip
    try:
        done = run(work)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(done.exit_code)


@app.command()
def scale(
    assignment: Annotated[str, typer.Argument(help="SERVICE=N, e.g. web=5.", show_default=False)],
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    state: StateOption = None,
) -> None:
    """Give a service a new replica count: the stored spec with N replicas, stored as a new
    generation and converged (the cluster file is not changed)."""
    service, equals, count = assignment.partition("=")
    if not (service and equals and count.isdigit()):
        fail(f"scale: use SERVICE=N with N a number of replicas, e.g. web=3 (got {assignment!r})")
    limit = seconds(timeout, "--timeout")
    work = usecases.scale(
        service, int(count), state_dir(state, None), runtime(), printer(), wait=wait, timeout=limit
    )
    scaled = run(work)
    out.print(f"scaled {scaled.service} from {scaled.before} to {scaled.replicas}", markup=False)
    print_convergence(scaled.convergence)
    raise typer.Exit(scaled.exit_code)


@app.command()
def push(
    image: Annotated[str, typer.Argument(help="An image in this machine's Docker engine.")],
    hosts: Annotated[str | None, typer.Option("--hosts", help="Only these hosts: h1,h2.")] = None,
    inventory: Annotated[
        Path | None, typer.Option("--inventory", help="Hosts from this inventory, not the state's.")
    ] = None,
    state: StateOption = None,
) -> None:
    """Stream an image from this machine's Docker engine to hosts over SSH (docker save |
    docker load, no registry); hosts that hold the same image id are skipped."""
    names = [h.strip() for h in hosts.split(",") if h.strip()] if hosts else None
    with PushProgressBars(err) as shown:
        work = usecases.push(
            image, state_dir(state, None), runtime(), shown.update, hosts=names, inventory=inventory
        )
        pushed = run(work)
    for p in pushed.pushed:
        if p.skipped:
            out.print(f"{p.host}: already has {p.image}", markup=False)
        else:
            out.print(f"{p.host}: pushed {p.image} ({p.figure()})", markup=False)
    for problem in pushed.failed:
        err.print(f"failed: {problem.host}: {problem.error}", markup=False)
    raise typer.Exit(pushed.exit_code)


class PushProgressBars:
    """A progress bar per host on a terminal (stderr); nothing when it is not one."""

    def __init__(self, console: Console) -> None:
        from rich import progress as bars  # only `push` draws bars: cron's path skips it

        self.bars: bars.Progress | None = None
        if console.is_terminal:
            self.bars = bars.Progress(
                bars.TextColumn("{task.description}"), bars.BarColumn(), bars.DownloadColumn(),
                bars.TransferSpeedColumn(), console=console, transient=True,
            )  # fmt: skip
        self.tasks: dict[str, Any] = {}  # rich TaskIDs

    def __enter__(self) -> PushProgressBars:
        if self.bars is not None:
            self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bars is not None:
            self.bars.stop()

    def update(self, progress: usecases.PushProgress) -> None:
        if self.bars is None:
            return
        if progress.host not in self.tasks:
            self.tasks[progress.host] = self.bars.add_task(progress.host, total=progress.total)
        self.bars.update(self.tasks[progress.host], completed=progress.sent)


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app()
