"""The command line: parse the arguments, call a use case (`minidock.usecases`), print what
it reports and returns. No decisions live here: the workflows, the lock and its patience,
the `--wait` loop and the exit codes (`usecases.ExitCode`) are the use cases'.
"""

from __future__ import annotations

import asyncio
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
    typer.Option(
        "--state",
        help="State directory, or etcd://host:2379[,host:2379]/prefix for several "
        "controllers (default: $MINIDOCK_STATE, else .minidock/).",
    ),
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


def state_dir(state: str | None, file: Path | None) -> usecases.StateLocation:
    """Where the state is (a directory or an etcd URL); a bad URL is exit 2."""
    return checked(lambda: usecases.state_location(state, file))


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
            case usecases.PassSkipped(reason=reason, deposed=True):
                err.print(f"minidock: {reason}", markup=False)  # another controller leads
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


state_app = typer.Typer(
    name="state", help="The state store: move it between stores.", no_args_is_help=True
)
app.add_typer(state_app)


@state_app.command("migrate")
def state_migrate(
    to: Annotated[str, typer.Option("--to", help="The new store: a directory or an etcd:// URL.")],
    source: Annotated[
        str | None,
        typer.Option("--from", help="The store to copy (default: --state, $MINIDOCK_STATE)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a state the new store already holds.")
    ] = False,
    state: StateOption = None,
) -> None:
    """Copy a whole state (generations, controller state, events) into another store."""
    origin, target = state_dir(source or state, None), state_dir(to, None)
    moved = run(usecases.migrate(origin, target, runtime().clock, force=force))
    how = "replacing the state there" if moved.replaced else "an empty store"
    out.print(
        f"copied {moved.generations} generations, the controller state and {moved.events} "
        f"events from {origin} to {target} ({how}); the copy reads back the same",
        markup=False,
    )
    out.print(
        f"point every controller at {target} now (--state or MINIDOCK_STATE); "
        f"{origin} is left as it was",
        markup=False,
    )


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app()
