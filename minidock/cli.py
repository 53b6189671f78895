"""The command line: parse the arguments, call a use case (`minidock.usecases`), print what
it reports and returns. No decisions live here: the workflows, the lock and its patience,
the `--wait` loop and the exit codes (`usecases.ExitCode`) are the use cases'.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import enum
import importlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, NoReturn, TypeVar, assert_never

import typer
from typer.core import TyperGroup, TyperOption

from minidock import usecases
from minidock.model import Event
from minidock.output import Output, Printer, rich_console
from minidock.ssh import SSHExecutor
from minidock.store.directory import StateError
from minidock.units import format_duration, format_size, parse_duration
from minidock.usecases import ConvergeOutcome, Ending, ExitCode, PlanOutcome, Progress, Report

MIN_INTERVAL = 0.1  # seconds: the shortest `watch --interval`
if TYPE_CHECKING:
    from minidock.documents.status import (
        CertificateSummary,
        HostSummary,
        JobSummary,
        ServiceSummary,
        StatusDocument,
    )
    from minidock.progress import LiveProgress, PlainProgress
    from minidock.runner import PassResult
    from minidock.usecases.secrets import SecretsCheckOutcome

T = TypeVar("T")
# The --state given before the command (`minidock --state DIR status`), for `state_dir`. It
# stays ambient (docs/architecture.md, "Ambient values"): click hands each command only its
# own parameters, so an explicit route would add a context parameter to every one of the
# commands that read a state, for one value. Set once per invocation by LazyGroup.invoke,
# read only by `state_dir`.
GLOBAL_STATE: contextvars.ContextVar[str | None] = contextvars.ContextVar("state", default=None)


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """The help's type column, left empty for a flag. Only for typer 0.29, which shows
    `<bool>` beside every flag and which a virtualenv made before pyproject.toml pinned
    0.28 may still have (scripts/setup.sh installs 0.28, which shows none)."""
    return None if self.is_flag or _typed is None else _typed(self, ctx)


_typed: Callable[[TyperOption, Any], str | None] | None = getattr(
    TyperOption, "display_type_rich", None
)
if _typed is not None:
    setattr(TyperOption, "display_type_rich", _flag_type)  # noqa: B010 (a method of typer's)


class LazyGroup(TyperGroup):
    """The top-level group, whose sub-apps in LAZY ("name": "module:attribute" of a typer
    app) are imported only when their command runs or the help lists them: `minidock
    reconcile` never loads the lab (tests/unit/test_lazy_lab.py)."""

    LAZY: ClassVar[dict[str, str]] = {"lab": "minidock.lab.cli:lab_app"}

    def list_commands(self, ctx: Any) -> list[str]:
        loaded = super().list_commands(ctx)
        return [*loaded, *(name for name in self.LAZY if name not in loaded)]

    def invoke(self, ctx: Any) -> Any:  # ctx: the click Context that typer vendors
        """Every command: the global options (`minidock --state DIR CMD`) set for it; an
        unusable state directory (StateError) is one line, exit 2."""
        GLOBAL_STATE.set(ctx.params.get("state"))
        try:
            return super().invoke(ctx)
        except StateError as exc:
            fail(str(exc))

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
out: Printer = Output()  # plain lines on a pipe (cron's path imports no rich), rich on a tty
err: Printer = Output(stderr=True)

StateOption = Annotated[
    str | None,
    typer.Option(
        "--state",
        help="State directory, or etcd://host:2379[,host:2379]/prefix for several "
        "controllers (default: $MINIDOCK_STATE, else .minidock/).",
    ),
]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Only this cluster, of a state that holds several (default: every one, or the "
        "one with the service).",
    ),
]
WaitOption = Annotated[bool, typer.Option("--wait", help="Repeat passes until converged.")]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long --wait may take.")]
FileArg = Annotated[
    Path, typer.Argument(help="A cluster spec (TOML) or a Compose file.", show_default=False)
]
InventoryOption = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        help="The inventory, when the cluster file names none (else $MINIDOCK_INVENTORY, "
        "else inventory.toml beside the file).",
        show_default=False,
    ),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Plain lines, no live view (as on a pipe).")
]


def _print_version(asked: bool) -> None:
    if asked:
        from importlib import metadata  # only --version reads it (it loads email: ~5 ms)

        out.print(f"minidock {metadata.version('minidock')}", markup=False)
        raise typer.Exit()


@app.callback()
def global_options(
    state: StateOption = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Options before the command (`minidock --state DIR status`) count for it, as after."""


# -- wiring -----------------------------------------------------------------------------------
class WarningLines(logging.Handler):
    """Warnings from reading files (a Compose key MiniDock ignores) and the state (a count
    over the maximum an older MiniDock stored): one stderr line each."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"minidock: warning: {record.getMessage()}", markup=False)


_COMPOSE_LOG = logging.getLogger("minidock.spec")  # and minidock.spec.compose
_COMPOSE_LOG.addHandler(WarningLines())
_COMPOSE_LOG.propagate = False
_STORE_LOG = logging.getLogger("minidock.store")
_STORE_LOG.addHandler(WarningLines())
_STORE_LOG.propagate = False


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


def state_dir(state: str | None) -> usecases.StateLocation:
    """Where the state is (a directory or an etcd URL): the command's --state, or the one
    given before the command; a bad URL, or two different ones, is exit 2."""
    before = GLOBAL_STATE.get()
    if state is not None and before is not None and state != before:
        fail(f"--state given twice, {before} before the command and {state} after it: give one")
    chosen = state if state is not None else before
    return checked(lambda: usecases.state_location(chosen))


INTERRUPT = usecases.Interrupt()  # this process's SIGINT/SIGTERM, as the use cases see it


def runtime() -> usecases.Runtime:
    """The real world: SSH to the hosts, the system clock, this process's signals."""
    clock = usecases.Clock(now=time.time, monotonic=time.monotonic, sleep=asyncio.sleep)
    return usecases.Runtime(executor=SSHExecutor, clock=clock, notice=notify, interrupt=INTERRUPT)


def notify(line: str) -> None:
    """A line the command prints before it waits: on stderr, at once."""
    err.print(f"minidock: {line}", markup=False)


def checked(work: Callable[[], T]) -> T:
    """Call a use case; a refusal is one line on stderr and its exit code."""
    try:
        return work()
    except usecases.UseCaseError as exc:
        fail(str(exc), exc.exit_code)


def run(
    work: Coroutine[Any, Any, T], view: contextlib.AbstractContextManager[Any] | None = None
) -> T:
    """Run an async use case to its outcome (or its refusal, as `checked`), inside `view`
    when given (a live progress view: ended, the cursor back, whatever happens)."""
    with view or contextlib.nullcontext():
        return checked(lambda: asyncio.run(signalled(work, INTERRUPT)))


async def signalled(work: Coroutine[Any, Any, T], interrupt: usecases.Interrupt) -> T:
    """`work`, with SIGINT and SIGTERM handled at this one boundary: while it runs passes
    (`interrupt.gentle`) a signal asks them to stop after the pass under way, whose acts
    finish and are recorded (the use case then ends with exit 130 and says so); else, or
    at a second signal, it stops at once (SIGINT: KeyboardInterrupt, exit 130; SIGTERM:
    the default action)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_signal(sig: signal.Signals) -> None:
        if interrupt.gentle and not interrupt.requested:
            interrupt.signal = sig.name
            notice = f"minidock: {sig.name}: {interrupt.doing} (again: stop now)"
            err.print(notice, markup=False)
        elif sig is signal.SIGTERM:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await work
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# -- printing ---------------------------------------------------------------------------------
def printer(*, quiet: bool = False, summaries: bool = False) -> Report:
    """Prints progress as the use case reports it; `quiet` passes (cron's reconcile, watch)
    print nothing when nothing changed. A line printed once (a pending slot's reason) is
    not printed again; with `summaries` (watch), each pass's why-line when it changes."""
    seen: set[str] = set()
    last_why: dict[str, str] = {}  # per cluster

    def report(progress: Progress) -> None:
        if isinstance(progress, usecases.GenerationStored):
            for line in progress.warnings:
                err.print(f"minidock: warning: {line}", markup=False)
        match progress:
            case usecases.GenerationStored(changed=False, generation=gen, directory=where):
                out.print(f"no changes: generation {gen} is current (state: {where})")
            case usecases.GenerationStored(
                generation=gen, cluster=cluster, services=n, directory=where
            ):
                out.print(f"generation {gen}: {cluster} ({n} services)", markup=False)
                out.print(f"state: {where}; for cron: {cron_line(where)}", markup=False)
            case usecases.IntentRecorded(message=message, cluster=cluster):
                out.print(f"[{cluster}] {message}" if cluster else message, markup=False)
            case usecases.PassDone(result=result, exit_code=code, cluster=cluster):
                print_pass(result, quiet=quiet, seen=seen, cluster=cluster)
                line = usecases.why(result, code)
                if summaries and line != last_why.get(cluster, ""):
                    tag = f"[{cluster}] " if cluster else ""
                    err.print(f"minidock: {tag}{line or 'converged'}", markup=False)
                    last_why[cluster] = line
            case usecases.PassSkipped(reason=reason, deposed=True):
                err.print(f"minidock: {reason}", markup=False)  # another controller leads
            case usecases.PassSkipped(cluster=cluster, standby=warm, hosts=hosts, keeps=keeps):
                # another writer is at work: the next pass will see its result; said once
                # for each change of how many hosts this standby holds connections to
                line = f"standing by, {warm} of {hosts} hosts connected"
                if keeps is not None and keeps < hosts:  # connections by share
                    line = f"standing by, {warm} of {keeps} hosts connected"
                    line += f" (its share and standby set, of {hosts})"
                if summaries and line != last_why.get(cluster, ""):
                    tag = f"[{cluster}] " if cluster else ""
                    err.print(f"minidock: {tag}{line}", markup=False)
                    last_why[cluster] = line
            case usecases.ImageBuilt(service=name, image=image, built=False):
                out.print(f"{name}: {image} is built already", markup=False)
            case usecases.ImageBuilt(service=name, image=image, seconds=took):
                out.print(f"{name}: built {image} in {took:.1f}s", markup=False)
            case _:
                assert_never(progress)

    return report


def live_view(wait: bool, quiet: bool = False) -> LiveProgress | PlainProgress:
    """Progress of passes: a live view on a terminal while they are waited for, else (a
    pipe, `-q`, no wait) the plain lines of `printer` (minidock/progress.py)."""
    from minidock.progress import progress_view  # the commands that wait, only

    return progress_view(out, err, printer(), print_convergence, live=wait and not quiet)


def cron_line(directory: usecases.StateLocation) -> str:
    """The crontab line for this state, with absolute paths (cron has no PATH to speak of)."""
    program = Path(sys.argv[0]).resolve()
    command = str(program) if program.name == "minidock" else f"{sys.executable} -m minidock"
    return f"* * * * * MINIDOCK_STATE={directory} {command} reconcile"


def print_pass(
    result: PassResult, *, quiet: bool = False, seen: set[str] | None = None, cluster: str = ""
) -> None:
    """Acts as they happened, then failures; nothing at all when quiet and nothing changed;
    lines in `seen` (printed by an earlier pass) are not printed again. Each line starts
    with `[CLUSTER] ` when the store holds several clusters."""
    seen = set() if seen is None else seen
    tag = f"[{cluster}] " if cluster else ""
    for line in result.done:
        out.print(tag + line, markup=False)
    for line in result.failures:
        err.print(f"{tag}failed: {line}", markup=False)
    if quiet and not (result.done or result.failures or result.plan.events):
        return
    for e in result.plan.events:
        out.print(f"{tag}{e.kind}: {e.message}", markup=False)
    for line in [f"{tag}pending {p.service}.{p.slot}: {p.reason}" for p in result.plan.pending]:
        if line not in seen:
            out.print(line, markup=False)
            seen.add(line)
    for name, slot, line in result.plan.failed_slots():
        failed = f"{tag}FAILED {name}.{slot}: {line}"
        if failed not in seen:
            err.print(failed, markup=False)
            seen.add(failed)


def print_convergence(outcome: ConvergeOutcome) -> None:
    """How passes ended: `converged`, what a timed-out wait still waits for, or for any
    other non-zero exit the one line that says why."""
    if outcome.ending is Ending.CONVERGED:
        out.print("converged", markup=False)
    elif outcome.ending is Ending.TIMED_OUT:
        err.print(f"not converged after {format_duration(outcome.timeout)}:", markup=False)
        for line in outcome.waiting:
            err.print(f"  {line}", markup=False)
    elif outcome.why:
        err.print(f"minidock: {outcome.why}", markup=False)


def print_plan(planned: PlanOutcome, *, as_json: bool = False) -> None:
    """The whole road: per service what changes, then every simulated pass that acts (its
    runs, in rolling-update batches, and its stops), what stays pending and why, and what
    would run below its replicas."""
    doc = planned.document
    assert doc is not None
    if as_json:
        sys.stdout.write(json.dumps(doc.to_json(), indent=2, sort_keys=True) + "\n")
        return
    changes = [s for s in doc.services if s.change != "unchanged"]
    loads = [r for r in doc.routes if r.action != "unchanged"]
    for line in service_modes(planned):
        out.print(line, markup=False)
    for line in planned.schedules:  # when the passes run each scheduled backup next
        out.print(line, markup=False)
    for name, n, why in planned.plan.half_written():  # held across this apply too
        out.print(f"FAILED {name}.{n}: {why}", markup=False)
    if not (changes or doc.steps or doc.pending or doc.below or loads) and planned.plan.converged:
        out.print("nothing to do: converged", markup=False)
        return
    for s in changes:
        how = "needs --prune" if s.change == "removed" and not planned.pruned else s.change
        out.print(f"service {s.name}: {how}", markup=False)
        for f in s.diff:
            out.print(f"  {f.field}: {field_change(f.field, f.old, f.new)}", markup=False)
    for hook in planned.hooks_first:
        out.print(f"first: {hook}", markup=False)  # the passes below assume it succeeds
    for step in doc.steps:
        out.print(f"pass {step.number}:", markup=False)
        for st in step.stop:
            out.print(
                f"  stop {st.service}.{st.slot}.{st.task} on {st.host}: {st.reason}", markup=False
            )
        for r in step.run:
            how = f"replacing {r.replaces}, " if r.replaces else ""
            line = f"  run {r.service}.{r.slot}.{r.task} on {r.host} ({how}{r.reason}, {r.image})"
            out.print(line, markup=False)
    for load in doc.routes:
        if load.action != "unchanged":
            out.print(f"routes on {load.host}: {load.action}", markup=False)
            for line in load.changes:
                out.print(f"  {line}", markup=False)
    for p in doc.pending:
        out.print(f"pending {p.service}.{p.slot}: {p.reason}", markup=False)
    for b in doc.below:
        out.print(f"below: {b.service} would run {b.running} of {b.wanted}", markup=False)
    if planned.plan.guard:
        out.print(f"now: {planned.plan.guard}", markup=False)
    for line in planned.promotes:  # a canary that waits for the operator's promote
        out.print(f"waits: {line}", markup=False)
    for line in planned.failed_probes:
        out.print(f"probes failed: {line}", markup=False)
    lost = f" after losing {', '.join(doc.lost)}" if doc.lost else ""
    drained = f" after draining {', '.join(doc.drained)}" if doc.drained else ""
    end = "converges" if doc.converged else "does not converge"
    out.print(f"{end}{lost}{drained}, assuming {doc.assumption}", markup=False)


KEY_CHANGES = {"+": "added", "-": "removed", "~": "changed"}


def service_modes(planned: PlanOutcome) -> list[str]:
    """What every plan says of a service first: the operator's maintenance or pause (kept
    by every plan) and its autoscaling (docs/autoscale.md)."""
    doc = planned.document
    assert doc is not None
    lines = []
    for note in doc.serving:
        if note.mode == "maintenance":
            line = f"in maintenance: its routes answer 503 ({note.message})"
        else:
            line = f"paused: its routes hold each new request up to {format_duration(note.timeout)}"
        lines.append(f"service {note.service}: {line}")
    for scaled in doc.autoscale:
        line = f"autoscaled {scaled.min}..{scaled.max}, target {scaled.target}: {scaled.reason}"
        lines.append(f"service {scaled.service}: {line}")
    return lines


def field_change(field: str, old: str, new: str) -> str:
    """`image: web:5 -> web:6`; for `env` and `secrets`, whose values are not shown, what
    happened to each key: `A changed, C added` (the plan document's `+C ~A`)."""
    if field not in ("env", "secrets"):
        return f"{old} -> {new}"
    words = [f"{key[1:]} {KEY_CHANGES[key[0]]}" for key in new.split() if key[:1] in KEY_CHANGES]
    return ", ".join(words) or f"{old} -> {new}"


# -- commands ---------------------------------------------------------------------------------
@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="A cluster spec, a Compose file or an inventory.")],
    inventory: InventoryOption = None,
) -> None:
    """Check a cluster spec (and its inventory) or an inventory; print OK or the error."""
    resultfile = checked(lambda: usecases.validate(file, inventory))
    for line in resultfile.warnings:
        err.print(f"minidock: warning: {line}", markup=False)
    if resultfile.cluster is None:
        out.print(f"OK: {file}: inventory with {resultfile.hosts} hosts", markup=False)
    else:
        out.print(
            f"OK: {file}: cluster {resultfile.cluster}, {resultfile.services} services, "
            f"{resultfile.hosts} hosts",
            markup=False,
        )
        for line in resultfile.schedules:
            out.print(line, markup=False)


@app.command()
def convert(
    file: Annotated[Path, typer.Argument(help="A Compose file.", show_default=False)],
) -> None:
    """Print the TOML cluster spec a Compose file is (checked as apply checks it)."""
    out.print(checked(lambda: usecases.convert(file)).toml.rstrip("\n"), markup=False)


@app.command()
def apply(
    file: FileArg,
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan only.")] = False,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove services the file no longer names.")
    ] = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt", help="A new state store takes over tasks another store's controller runs."
        ),
    ] = False,
    retry: Annotated[
        bool,
        typer.Option("--retry", help="Start again an update that was rolled back as failed."),
    ] = False,
    quiet: QuietOption = False,
    state: StateOption = None,
    inventory: InventoryOption = None,
) -> None:
    """Validate, store as the next desired-state generation, reconcile."""
    limit = seconds(timeout, "--timeout")
    directory = state_dir(state)
    if dry_run:
        print_plan(run(usecases.plan(file, directory, runtime(), prune=prune, inventory=inventory)))
        return
    view = live_view(wait, quiet)
    applied = run(
        usecases.apply(
            file,
            directory,
            runtime(),
            view.report,
            wait=wait,
            timeout=limit,
            prune=prune,
            adopt=adopt,
            retry=retry,
            inventory=inventory,
        ),
        view,
    )
    view.finish(applied.convergence, applied.failed_updates)
    raise typer.Exit(applied.exit_code)


@app.command()
def plan(
    file: FileArg,
    prune: Annotated[
        bool, typer.Option("--prune", help="Plan the removal of services the file drops.")
    ] = False,
    lose: Annotated[
        list[str] | None,
        typer.Option("--lose", help="What if this host were lost (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    adopt: Annotated[
        bool,
        typer.Option("--adopt", help="Plan as `apply --adopt`: take over another store's tasks."),
    ] = False,
    state: StateOption = None,
    inventory: InventoryOption = None,
) -> None:
    """What apply would do, every step until convergence; changes nothing; refuses what
    apply refuses. With --lose, where the lost hosts' tasks would land, or why they cannot
    (exit 1)."""
    lost = tuple(lose or ())
    directory = state_dir(state)
    planned = run(
        usecases.plan(
            file, directory, runtime(), prune=prune, lose=lost, adopt=adopt, inventory=inventory
        )
    )
    print_plan(planned, as_json=as_json)
    raise typer.Exit(planned.exit_code)


@app.command("reconcile")
def reconcile_command(
    state: StateOption = None,
    cluster: ClusterOption = None,
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
        state_dir(state), runtime(), printer(quiet=True), force_down=force_down, cluster=cluster
    )
    outcome = run(work)
    print_convergence(outcome)
    raise typer.Exit(outcome.exit_code)


@app.command()
def watch(
    interval: Annotated[str, typer.Option("--interval", help="Time between passes.")] = "2s",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Passes in a loop until interrupted, reusing SSH connections.

    The lock is held for each pass, not between passes, so `apply`, `drain` and the other
    writers get their turn; a pass that finds the lock taken is skipped."""
    pause = seconds(interval, "--interval", at_least=MIN_INTERVAL)
    report = printer(quiet=True, summaries=True)
    loop = usecases.watch(state_dir(state), runtime(), report, interval=pause, cluster=cluster)
    try:
        run(loop)
    except KeyboardInterrupt:
        out.print("stopped", markup=False)


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Services, tasks and hosts, observed now: of every cluster the state holds, or one.
    With several, --json is {"clusters": [DOCUMENT, ...]}; --cluster gives one DOCUMENT."""
    docs = run(usecases.status(state_dir(state), runtime(), cluster=cluster)).documents
    if as_json:
        shown = docs[0].to_json() if len(docs) == 1 else {"clusters": [d.to_json() for d in docs]}
        sys.stdout.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
        return
    for doc in docs:
        print_status(doc)


@app.command()
def controllers(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
) -> None:
    """The controllers at work on the state: each running `watch` (its member key on an
    etcd state: since when, its lease, its last pass, the hosts it holds connections to,
    the hosts whose owner key it holds: its share), the writer lock's holder now, and who
    committed last."""
    roster = checked(lambda: usecases.controllers(state_dir(state)))
    if as_json:
        doc = {
            "members": [dataclasses.asdict(m) for m in roster.members],
            "writer": roster.writer,
            "last_commit": roster.last_commit,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    from rich.table import Table

    now = time.time()
    table = Table(
        "controller", "holder", "since", "lease", "last pass", "passes", "hosts", "owns", "decides"
    )
    for m in roster.members:
        table.add_row(*member_row(m, now))
    out.print(table)
    out.print(f"writer now: {roster.writer or 'none (no pass under way)'}", markup=False)
    if roster.last_commit:
        out.print(f"last commit: {roster.last_commit}", markup=False)


def member_row(m: usecases.Member, now: float) -> tuple[str, ...]:
    def ago(t: float | None) -> str:
        return "never" if t is None else f"{max(now - t, 0):.0f}s ago"

    lease = "expired" if m.lease_left is None else f"{m.lease_left:.0f}s"
    hosts = f"{m.warm}/{m.hosts} connected"
    owns = f"{m.owned} hosts"
    if m.round_seconds:  # its last whole round over its share, the slowest cluster's
        owns += f", round {max(m.round_seconds.values()):.1f}s"
    if m.carried:  # task verbs it carried out on its share for the decider's orders
        owns += f" ({m.carried} acts carried)"
    decides = ", ".join(m.decides) or "-"
    if m.decides and m.borrowed:  # observations its last pass took from the owners
        decides += f" ({m.borrowed} hosts borrowed)"
    last = ago(m.last_pass)
    if m.last_pass is not None and m.pass_seconds is not None:
        last += f" ({m.pass_seconds:.1f}s)"  # how long that pass took
    return (m.id, m.holder, ago(m.since), lease, last, str(m.passes), hosts, owns, decides)


def print_status(doc: StatusDocument) -> None:
    if doc.guard:
        err.print(f"minidock: {doc.guard}", markup=False)
    if doc.rebuilt:
        out.print(f"note: {doc.rebuilt}", markup=False)
    from rich.table import Table

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
        for line in service_notes(s):
            out.print(line, markup=False)
    routed = bool(doc.routes)
    tasks = Table("task", "slot", "host", "image", "gen", "state", "health")
    if routed:
        tasks.add_column("traffic")
    for t in doc.tasks:
        row = (
            t.name,
            str(t.slot),
            t.host,
            t.image,
            str(t.generation or "?"),
            t.state if t.exit_code is None else f"{t.state} ({t.exit_code})",
            t.health,
        )
        tasks.add_row(*row, *((t.traffic,) if routed else ()))
    out.print(tasks)
    if routed:
        print_routes(doc)
    hosts = Table("host", "state", "engine", "drained", "last seen", "tasks", "cpus", "memory")
    owned = any(h.controller for h in doc.hosts)  # an etcd state with watches at work
    if owned:
        hosts.add_column("controller")
    for h in doc.hosts:
        hosts.add_row(*host_row(h), *([h.controller or "-"] if owned else []))
    out.print(hosts)
    for w in doc.waiting:
        out.print(f"waiting: {w}", markup=False)


def recovery_lines(s: ServiceSummary, now: float) -> list[str]:
    """A pinned service's recovery point per slot and volume, and the old volumes a
    failover or a forget left (docs/backups.md#the-recovery-point)."""
    lines = []
    for p in s.recovery:
        if p.taken is None:
            lines.append(f"{s.name}.{p.slot} {p.volume}: recovery point: no snapshot known")
        else:
            age = format_duration(max(0.0, now - p.taken))
            lines.append(
                f"{s.name}.{p.slot} {p.volume}: recovery point: snapshot {p.snapshot[:8]}, "
                f"{age} old"
            )
    for slot, host in sorted({(p.slot, p.kept_on) for p in s.recovery if p.kept_on}):
        lines.append(
            f"{s.name}.{slot}: its old volume is kept on {host} (it may hold writes newer "
            "than the snapshot; remove it by hand once checked)"
        )
    return lines


def service_notes(s: ServiceSummary) -> list[str]:
    """The lines status prints under the services table for one service: its failures,
    pending and Failed slots, job, hook, backups, serving mode, canary, recovery points."""
    notes: list[str] = []
    if s.last_failure:
        notes.append(f"{s.name}: last failure: {s.last_failure}")
    for p in s.pending:
        notes.append(f"{s.name}.{p.slot} pending: {p.reason}")
    for f in s.failed:
        notes.append(f"{s.name}.{f.slot} FAILED: {f.last_exit}")
    if s.job is not None:
        notes.append(f"{s.name}: {job_line(s.job)}")
    if s.hook is not None and s.hook.state == "failed":  # running: its waiting line
        notes.append(f"{s.name}: {s.hook.why}")
    for line in s.backups.lines(s.name) if s.backups is not None else ():
        notes.append(line)
    if s.serving is not None and s.serving.mode != "serving":
        notes.append(f"{s.name}: {serving_line(s)}")
    if s.rollout.canary is not None:  # a canary (docs/rollouts.md#canary)
        notes.append(f"{s.name}: {s.rollout.canary.line()}")
    if s.autoscale is not None:  # docs/autoscale.md
        notes.append(f"{s.name}: {s.autoscale.line()}")
    for line in recovery_lines(s, time.time()):
        notes.append(line)
    return notes


def serving_line(s: ServiceSummary) -> str:
    """A routed service's maintenance or pause, for `status`."""
    m = s.serving
    assert m is not None
    since = time.strftime(" since %H:%M:%S", time.localtime(m.since)) if m.since else ""
    if m.mode == "maintenance":
        return f"in maintenance{since}: its routes answer 503 ({m.message})"
    return f"paused{since}: its routes hold each new request up to {format_duration(m.timeout)}"


def certificate_line(c: CertificateSummary) -> str:
    """One TLS name's certificate for `status`: its issuer and end, or why it has none."""
    day = "%Y-%m-%d"
    if c.not_after:
        until = time.strftime(day, time.gmtime(c.not_after))
        line = f"certificate {c.name} ({c.source}): {c.issuer}, until {until}"
        if c.renews_at:
            line += f", renews {time.strftime(day, time.gmtime(c.renews_at))}"
    else:
        line = f"certificate {c.name} ({c.source}): none yet (plain HTTP meanwhile)"
    if c.error:
        when = time.strftime("%H:%M UTC", time.gmtime(c.next_try))
        line += f"; last order failed: {c.error}; next try {when}"
    return line


def print_routes(doc: StatusDocument) -> None:
    """The ingress route table and each proxy's state (docs/ingress.md)."""
    from rich.table import Table

    routes = Table("route", "service", "port", "tasks taking traffic", title="ingress routes")
    for r in doc.routes:
        where = f"{r.host or '*'}{r.path}"
        taking = ", ".join(r.upstreams) or "none (503)"
        if r.mode == "maintenance":
            taking = "none: maintenance (503 with its page)"
        elif r.mode == "paused":
            taking = f"paused: held, then {taking}"
        routes.add_row(where, r.service, str(r.port), taking)
    out.print(routes)
    for c in doc.certificates:
        out.print(certificate_line(c), markup=False)
    for p in doc.proxies:
        detail = f" ({p.error})" if p.error else ""
        out.print(f"proxy on {p.host}: {p.state}{detail}", markup=False)


def service_row(s: ServiceSummary) -> tuple[str, ...]:
    r = s.rollout
    rollout: str = r.status if r.status != "none" else ""
    if r.canary is not None:
        rollout = r.canary.line()
    elif r.active:
        rollout += f" {r.done}/{r.total}"
    desired = f"{s.desired} x{s.replicas}"
    return (s.name, desired, str(s.running), str(s.healthy), s.state, s.image, rollout)


def host_row(h: HostSummary) -> tuple[str, ...]:
    seen = time.strftime("%H:%M:%S", time.localtime(h.last_seen)) if h.last_seen else "never"
    cpus = f"{h.cpus.used:g}/{h.cpus.total:g}" if h.cpus.total else f"{h.cpus.used:g}"
    mem = h.memory
    memory = (
        f"{format_size(mem.used)}/{format_size(mem.total)}" if mem.total else format_size(mem.used)
    )
    word = h.state if not h.error else f"{h.state}: {h.error}"
    word += " (over-committed)" if h.overcommitted else ""
    word += f" (slow: {h.answer_seconds:.1f}s)" if h.slow and h.answer_seconds else ""
    word += " (slow)" if h.slow and not h.answer_seconds else ""
    engine = str(h.engine) if h.engine is not None else "?"
    return (h.name, word, engine, "yes" if h.drained else "", seen, str(h.tasks), cpus, memory)


@app.command()
def drain(
    host: str,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Until the host is empty.")] = True,
    timeout: TimeoutOption = "5m",
    move_volumes_unsafe: Annotated[
        bool,
        typer.Option(
            "--move-volumes-unsafe",
            help="Also move tasks pinned by a named volume (their data stays behind).",
        ),
    ] = False,
    plan_only: Annotated[
        bool, typer.Option("--plan", help="Where its tasks would land; change nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --plan: JSON.")] = False,
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Move every task off a host (replacements first) and keep it empty."""
    if as_json and not plan_only:
        fail("drain --json: only with --plan (a drain prints its acts as lines)")
    if plan_only:
        planned = run(usecases.drain_plan(host, state_dir(state), runtime(), cluster=cluster))
        print_plan(planned, as_json=as_json)
        raise typer.Exit(planned.exit_code)
    limit = seconds(timeout, "--timeout")
    view = live_view(wait, quiet)
    work = usecases.drain(
        host,
        state_dir(state),
        runtime(),
        view.report,
        wait=wait,
        timeout=limit,
        move_volumes=move_volumes_unsafe,
        cluster=cluster,
    )
    drained = run(work, view)
    view.finish(drained.convergence)
    raise typer.Exit(drained.exit_code)


# -- moves with volumes (docs/moves.md) ---------------------------------------------------------
@app.command()
def move(
    slot: Annotated[str, typer.Argument(metavar="SERVICE.SLOT", help="The slot, e.g. db.1.")],
    to: Annotated[str, typer.Option("--to", metavar="HOST", help="The host to move it to.")],
    keep_source: Annotated[
        bool, typer.Option("--keep-source", help="Keep the old host's volumes once moved.")
    ] = False,
    replace_kept: Annotated[
        bool,
        typer.Option(
            "--replace-kept", help="Write over the old volume a failover or forget kept there."
        ),
    ] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Until it runs there.")] = True,
    timeout: TimeoutOption = "10m",
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Move a slot's task and its named volumes to another host: drained, stopped, its
    volumes streamed there, started there; its old volumes removed once it is ready."""
    limit = seconds(timeout, "--timeout")
    view = live_view(wait, quiet)
    work = usecases.move(
        slot,
        to,
        state_dir(state),
        runtime(),
        view.report,
        keep_source=keep_source,
        replace_kept=replace_kept,
        wait=wait,
        timeout=limit,
        cluster=cluster,
    )
    moved = run(work, view)
    view.finish(moved.convergence)
    raise typer.Exit(moved.exit_code)


@app.command()
def activate(host: str, state: StateOption = None, cluster: ClusterOption = None) -> None:
    """Let a drained host take tasks again (running tasks are not moved back)."""
    activated = run(
        usecases.activate(host, state_dir(state), runtime(), printer(), cluster=cluster)
    )
    print_convergence(activated.convergence)
    raise typer.Exit(activated.exit_code)


@app.command()
def rebalance(
    service: Annotated[str, typer.Argument(help="Only this service.")] = "",
    plan_only: Annotated[bool, typer.Option("--plan", help="List the moves only.")] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Until the moves are done.")
    ] = True,
    timeout: TimeoutOption = "10m",
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Move tasks to restore spread and bin-packing (after a host rejoins or joins): one at
    a time, start-first, health-gated. Never runs by itself."""
    limit = seconds(timeout, "--timeout")
    view = live_view(wait and not plan_only, quiet)
    work = usecases.rebalance(
        state_dir(state),
        runtime(),
        view.report,
        service=service,
        plan_only=plan_only,
        wait=wait,
        timeout=limit,
        cluster=cluster,
    )
    done = run(work, view)
    for m in done.moves:
        out.print(f"move {m.service}.{m.slot} ({m.task}) {m.source} -> {m.target}", markup=False)
    if not done.moves:
        out.print("nothing to move: spread and packing are as the scheduler would choose")
    if done.convergence is not None:
        view.finish(done.convergence)
    raise typer.Exit(done.exit_code)


@app.command()
def forget(host: str, state: StateOption = None, cluster: ClusterOption = None) -> None:
    """A host gone for good: record its tasks as lost, so they are started elsewhere (and
    the inventory may drop it). A listed host that still answers is refused: drain it."""
    from minidock.usecases import backups  # the backups that could restore its pinned slots

    restoring = run(backups.restorable(host, state_dir(state), cluster=cluster))
    forgot = run(usecases.forget(host, state_dir(state), runtime(), printer(), cluster=cluster))
    print_convergence(forgot.convergence)
    for line in restoring:
        out.print(line, markup=False)
    raise typer.Exit(forgot.exit_code)


@app.command()
def rollback(
    service: str,
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    force: Annotated[
        bool, typer.Option("--force", help="Even to a spec that was rolled back as failed.")
    ] = False,
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Go back to the service's previous spec, rolled out like an update."""
    limit = seconds(timeout, "--timeout")
    view = live_view(wait, quiet)
    work = usecases.rollback(
        service,
        state_dir(state),
        runtime(),
        view.report,
        wait=wait,
        timeout=limit,
        force=force,
        cluster=cluster,
    )
    rolled = run(work, view)
    view.finish(rolled.convergence)
    raise typer.Exit(rolled.exit_code)


# -- canary: promote (docs/rollouts.md#canary) ------------------------------------------------
@app.command()
def promote(
    service: str,
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Promote the service's canary: once every canary task is ready, the rolling update
    goes on. `minidock rollback SERVICE` removes the canary instead."""
    limit = seconds(timeout, "--timeout")
    view = live_view(wait, quiet)
    work = usecases.promote(
        service, state_dir(state), runtime(), view.report, wait=wait, timeout=limit, cluster=cluster
    )
    promoted = run(work, view)
    view.finish(promoted.convergence)
    raise typer.Exit(promoted.exit_code)


# -- end of canary ---------------------------------------------------------------------------------
@app.command()
def reset(
    service: str,
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Clear a service's crash-loop Failed slots and backoff timers."""
    limit = seconds(timeout, "--timeout")
    work = usecases.reset(
        service, state_dir(state), runtime(), printer(), wait=wait, timeout=limit, cluster=cluster
    )
    cleared = run(work)
    print_convergence(cleared.convergence)
    raise typer.Exit(cleared.exit_code)


class Switch(enum.StrEnum):
    ON = "on"
    OFF = "off"


@app.command()
def maintenance(
    service: str,
    switch: Annotated[Switch, typer.Argument(help="on: answer 503 with the page; off: serve.")],
    message: Annotated[
        str | None, typer.Option("--message", help="The page's message (with `on`).")
    ] = None,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """The service's routes answer 503 with a maintenance page and Retry-After (on), or
    serve its tasks again (off). Its tasks keep running."""
    if message is not None and switch is Switch.OFF:
        fail("--message goes with `on`: `minidock maintenance SERVICE on --message TEXT`")
    if message is not None and not message.strip():
        fail("--message: give the page's text, e.g. --message 'Back at 14:00 UTC'")
    work = usecases.maintenance(
        service,
        state_dir(state),
        runtime(),
        printer(),
        on=switch is Switch.ON,
        message=message or "",
        cluster=cluster,
    )
    done = run(work)
    print_convergence(done.convergence)
    raise typer.Exit(done.exit_code)


@app.command("pause")
def pause_command(
    service: str,
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long a request is held at most.")
    ] = "30s",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """The service's routes hold each new request until `minidock resume SERVICE`, or
    until it has waited --timeout; then it goes to the tasks. Its tasks keep running."""
    limit = seconds(timeout, "--timeout", at_least=1.0)
    work = usecases.pause(
        service, state_dir(state), runtime(), printer(), timeout=limit, cluster=cluster
    )
    done = run(work)
    print_convergence(done.convergence)
    raise typer.Exit(done.exit_code)


@app.command("resume")
def resume_command(service: str, state: StateOption = None, cluster: ClusterOption = None) -> None:
    """A paused service's routes serve again: the requests they hold go to its tasks."""
    done = run(usecases.resume(service, state_dir(state), runtime(), printer(), cluster=cluster))
    print_convergence(done.convergence)
    raise typer.Exit(done.exit_code)


@app.command()
def events(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest last.")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Then print new ones.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON (one per line with -f).")] = False,
    service: Annotated[str, typer.Option("--service", help="Only this service's.")] = "",
    host: Annotated[str, typer.Option("--host", help="Only this host's.")] = "",
    since: Annotated[str, typer.Option("--since", help="Only the last DURATION, e.g. 10m.")] = "",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """The event log: every change the controller made."""
    start = time.time() - seconds(since, "--since") if since else 0.0
    where = usecases.EventFilter(service=service, host=host, since=start)
    location = state_dir(state)
    log = checked(lambda: usecases.events(location, limit=limit, where=where, cluster=cluster))
    if as_json and not follow:
        doc = [_event_json(i, e) for i, e in zip(log.ids, log.events, strict=True)]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return

    def show(i: int, e: Event) -> None:
        if as_json:  # with --follow, one JSON document per line
            print(json.dumps(_event_json(i, e)), flush=True)
        else:
            out.print(_event_line(e, several=log.several), markup=False)

    for i, e in zip(log.ids, log.events, strict=True):
        show(i, e)
    if follow:
        after = None if log.several else log.ids[-1] if log.ids else _last_id(location, cluster)
        work = usecases.follow_events(
            location, runtime(), show, after=after, where=where, cluster=cluster
        )
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends following
            run(work)


def _last_id(location: usecases.StateLocation, cluster: str | None) -> int:
    every = checked(lambda: usecases.events(location, limit=1, cluster=cluster))
    return every.ids[-1] if every.ids else 0


def _event_line(e: Event, *, several: bool = False) -> str:
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at))
    tag = f"[{e.cluster}] " if several else ""
    return f"{at} {tag}{e.kind}: {e.message}"


def _event_json(i: int, e: Event) -> dict[str, object]:
    return {"id": i, **dataclasses.asdict(e)}


# -- operator commands: tasks and images ------------------------------------------------------
@app.command("ps")
def ps_command(
    service: Annotated[str | None, typer.Argument(help="Only this service's tasks.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Tasks observed now: where each runs, its state, health and host ports."""
    listed = run(usecases.ps(state_dir(state), runtime(), service, cluster=cluster))
    for problem in listed.unreachable:
        err.print(f"minidock: {problem.host} not observed: {problem.error}", markup=False)
    if as_json:
        doc = {
            "tasks": [dataclasses.asdict(t) for t in listed.tasks],  # id: the task id
            "unreachable": [dataclasses.asdict(u) for u in listed.unreachable],
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    several = len({t.cluster for t in listed.tasks}) > 1
    heads = ("CLUSTER",) if several else ()
    from rich.table import Table

    routed = any(t.traffic for t in listed.tasks)
    tail = ("TRAFFIC",) if routed else ()
    table = Table(
        *heads, "TASK", "HOST", "STATE", "HEALTH", "PORTS", "IMAGE", *tail, box=None, pad_edge=False
    )
    for t in listed.tasks:
        word = t.state if t.exit_code is None else f"{t.state} ({t.exit_code})"
        named = (t.cluster,) if several else ()
        row = (t.name, t.host, word, t.health, ", ".join(t.ports), t.image)
        table.add_row(*named, *row, *((t.traffic or "-",) if routed else ()))
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
    cluster: ClusterOption = None,
) -> None:
    """The output of a service's tasks (docker logs over SSH), each line prefixed by its task
    and secrets masked; with --follow, until Ctrl-C."""
    window = seconds(since, "--since") if since is not None else None
    work = usecases.logs(
        service, state_dir(state), runtime(), print_log_line,
        slot=slot, follow=follow, tail=tail, since=window, cluster=cluster,
    )  # fmt: skip
    try:
        shown = run(work)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.OK) from None
    for line in shown.failed:
        err.print(f"failed: {line}", markup=False)
    raise typer.Exit(shown.exit_code)


def job_line(job: JobSummary) -> str:
    """A scheduled job's line in `status`: its schedule, last run and next time (UTC)."""

    def at(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    line = f"job {job.schedule!r} ({job.timezone}, {job.concurrency})"
    last = job.last
    if last is None:
        line += "; no run yet"
    else:
        said = "succeeded" if last.exit_code == 0 else "FAILED"
        code = "did not run" if last.exit_code is None else f"exit {last.exit_code}"
        line += f"; last run {at(last.started)} {said} ({code}, {last.duration:.1f}s)"
    line += f"; {job.running} running" if job.running else ""
    return line + (f"; next {at(job.next)}" if job.next is not None else "; armed by the next pass")


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
    cluster: ClusterOption = None,
) -> None:
    """Run a command in one running task (docker exec over SSH); its exit status is ours.
    `-it` gives an interactive terminal, e.g. `minidock exec -it web.1 -- sh`."""
    if tty and not os.isatty(0):
        fail("exec -t: stdin is not a terminal (drop -t, or run from one)")
    terminal = usecases.Terminal(interactive=interactive, tty=tty) if interactive or tty else None
    work = usecases.exec_task(
        target, command, state_dir(state), runtime(),
        lambda line: print_log_line(line, prefix=False), terminal=terminal, cluster=cluster,
    )  # fmt: skip
    try:
        done = run(work)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(done.exit_code)


@app.command("run")
def run_command(
    service: Annotated[str, typer.Argument(help="The service whose current spec to run.")],
    command: Annotated[
        list[str], typer.Argument(help="The command, after --.", show_default=False)
    ],
    host: Annotated[
        str | None, typer.Option("--host", help="On this host (default: the scheduler's choice).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE more (repeatable).")
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Send stdin to it.")
    ] = False,
    tty: Annotated[bool, typer.Option("--tty", "-t", help="Run it on a terminal (a PTY).")] = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Run a one-off task of a service (its image, env, secrets, configs, networks, volumes)
    with COMMAND: output streamed, secrets masked; its exit status is ours; its container is
    removed afterwards, e.g. `minidock run web -- ./migrate` or `minidock run -it web -- sh`."""
    if tty and not os.isatty(0):
        fail("run -t: stdin is not a terminal (drop -t, or run from one)")
    terminal = usecases.Terminal(interactive=interactive, tty=tty) if interactive or tty else None
    pairs = checked(lambda: usecases.env_pairs(env or []))
    work = usecases.run_oneoff(
        service, command, state_dir(state), runtime(),
        lambda line: print_log_line(line, prefix=False),
        host=host or "", env=pairs, terminal=terminal, cluster=cluster,
    )  # fmt: skip
    try:
        done = run(work)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    if done.left:
        err.print(f"minidock: {done.left}", markup=False)
    if done.interrupted:
        err.print(f"minidock: interrupted: {done.task} removed from {done.host}", markup=False)
    raise typer.Exit(done.exit_code)


@app.command()
def scale(
    assignment: Annotated[str, typer.Argument(help="SERVICE=N, e.g. web=5.", show_default=False)],
    wait: WaitOption = False,
    timeout: TimeoutOption = "5m",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Give a service a new replica count: the stored spec with N replicas, stored as a new
    generation and converged (the cluster file is not changed)."""
    service, equals, count = assignment.partition("=")
    if not (service and equals and count.isascii() and count.isdigit()):
        fail(f"scale: use SERVICE=N with N a number of replicas, e.g. web=3 (got {assignment!r})")
    if len(count) > 18:  # past any maximum, and past what int() reads past 4300 digits
        fail(usecases.too_many_replicas(service, "N"))
    limit = seconds(timeout, "--timeout")
    work = usecases.scale(
        service, int(count), state_dir(state), runtime(), printer(),
        wait=wait, timeout=limit, cluster=cluster,
    )  # fmt: skip
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
            image, state_dir(state), runtime(), shown.update, hosts=names, inventory=inventory
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

    def __init__(self, printer: Printer) -> None:
        from rich import progress as bars  # only `push` draws bars: cron's path skips it

        self.bars: bars.Progress | None = None
        if printer.is_terminal:
            console = rich_console(printer)
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
    origin, target = state_dir(source or state), state_dir(to)
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


@state_app.command("backup")
def state_backup(
    file: Annotated[Path, typer.Argument(help="The file to write (0600; replaced atomically).")],
    state: StateOption = None,
) -> None:
    """Write a consistent copy of the whole state (every cluster, generations, controller
    state, events, the controller id) into FILE; secrets stay sealed, the key file is not
    in it. Takes no lock: safe while a pass runs."""
    location = state_dir(state)
    done = checked(lambda: usecases.backup_state(location, file))
    out.print(
        f"wrote {file}: {len(done.clusters)} cluster(s) ({', '.join(done.clusters)}), "
        f"{done.generations} generations, {done.events} events, controller {done.controller}",
        markup=False,
    )
    if done.key_id:
        out.print(
            f"its secrets are sealed with key {done.key_id}: keep the key file "
            "(DIR/secrets.key or $MINIDOCK_KEY_FILE) apart from it; a restore needs both",
            markup=False,
        )


@state_app.command("restore")
def state_restore(
    file: Annotated[Path, typer.Argument(help="A file `minidock state backup` wrote.")],
    key_file: Annotated[
        Path | None,
        typer.Option("--key-file", help="The old controller's key file, copied into the state."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a state the store already holds.")
    ] = False,
    state: StateOption = None,
) -> None:
    """Put a state backup back into this controller's store (a new machine's), with the
    old controller's id, so the next pass converges the same fleet with no change."""
    location = state_dir(state)
    done = run(
        usecases.restore_state(file, location, runtime().clock, key_file=key_file, force=force)
    )
    out.print(
        f"restored {', '.join(done.clusters)} into {location}: {done.generations} "
        f"generations, {done.events} events, controller {done.controller}; "
        "`minidock plan` shows what a pass would do",
        markup=False,
    )


hosts_app = typer.Typer(
    name="hosts",
    help="The hosts themselves: check each is fit to run tasks; prepare Debian or Ubuntu ones.",
    no_args_is_help=True,
)
app.add_typer(hosts_app)
HostsInventoryOption = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        help="The hosts of this inventory (else $MINIDOCK_INVENTORY, else the applied "
        "spec's inventory).",
        show_default=False,
    ),
]


@hosts_app.command("check")
def hosts_check(
    hosts: Annotated[
        list[str] | None, typer.Argument(help="Only these hosts (default: every one).")
    ] = None,
    inventory: HostsInventoryOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
) -> None:
    """Check each host: SSH and its host key, the engine and its version, the user's right
    to run docker, the kernel, free disk under the engine's root, the clock, the proxies'
    images and the task ports from every other host; each failure with its fix. Exit 1
    when a check fails."""
    from minidock.usecases.hostcheck import check_hosts

    work = check_hosts(state_dir(state), runtime(), hosts=hosts or (), inventory=inventory)
    result = run(work)
    if as_json:
        sys.stdout.write(json.dumps(result.document(), indent=2) + "\n")
        raise typer.Exit(result.exit_code)
    from rich.table import Table

    for report in result.hosts:
        table = Table("check", "", "found", "fix", title=report.host, title_justify="left")
        for c in report.checks:
            mark = "ok" if c.ok else ("FAIL" if c.ok is False else "-")
            table.add_row(c.name, mark, c.found, c.fix)
        out.print(table)
    failed = sum(1 for h in result.hosts if not h.ok)
    if failed:
        err.print(f"minidock: {failed} of {len(result.hosts)} hosts failed a check", markup=False)
    raise typer.Exit(result.exit_code)


@hosts_app.command("prepare")
def hosts_prepare(
    hosts: Annotated[list[str], typer.Argument(help="The hosts to prepare.")],
    inventory: HostsInventoryOption = None,
    state: StateOption = None,
) -> None:
    """Where the user can become root (root, or sudo -n): install and start the engine
    from the distribution's packages (Debian, Ubuntu), add the user to the docker group,
    load the proxies' images from this machine's engine. Each step is said; a step
    already done is left as it is. Exit 1 when a host's step fails."""
    from minidock.usecases.hostcheck import prepare_hosts

    def said(host: str, step: Any) -> None:
        line = f"{host}: {step.name}: {step.what}"
        if step.ok:
            out.print(line, markup=False)
        else:
            err.print(f"failed: {line}", markup=False)

    result = run(prepare_hosts(state_dir(state), runtime(), hosts, said, inventory=inventory))
    raise typer.Exit(result.exit_code)


secrets_app = typer.Typer(
    name="secrets",
    help="Secrets: edit an age-encrypted file; check which tasks hold an older value.",
    no_args_is_help=True,
)
app.add_typer(secrets_app)


@secrets_app.command("edit")
def secrets_edit(
    file: Annotated[Path, typer.Argument(help="The age file (a new one starts empty).")],
    identity: Annotated[
        str | None,
        typer.Option("--identity", "-i", help="The age identity (default ~/.config/age/key.txt)."),
    ] = None,
    recipients: Annotated[
        Path | None,
        typer.Option(
            "--recipients-file", "-R", help="Who may decrypt it (default FILE.recipients)."
        ),
    ] = None,
) -> None:
    """Decrypt FILE into a private 0600 file, open it in $VISUAL or $EDITOR, encrypt it
    again to its recipients and replace FILE atomically."""
    from minidock.usecases.secrets import edit_age_file

    edited = checked(lambda: edit_age_file(file, identity=identity, recipients=recipients))
    if edited.changed:
        out.print(f"{file}: encrypted to the recipients of {edited.recipients}", markup=False)
    else:
        out.print(f"{file}: no changes", markup=False)


@secrets_app.command("check")
def secrets_check(
    file: FileArg, state: StateOption = None, inventory: InventoryOption = None
) -> None:
    """Which services' running tasks hold an older secret value than FILE's sources give
    now (read as at apply; no value or digest is printed). Exit 1 when one does."""
    from minidock.usecases.secrets import check_secrets

    result = run(check_secrets(file, state_dir(state), runtime(), inventory))
    for line in secrets_lines(result):
        out.print(line, markup=False)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def secrets_lines(outcome: SecretsCheckOutcome) -> list[str]:
    """One line per secret-bearing service of `secrets check`."""
    lines = []
    for s in outcome.services:
        of = f"{s.older} of {s.running} running task{'s' if s.running != 1 else ''}"
        if s.older:
            lines.append(
                f"{s.service}: {of} {'holds' if s.older == 1 else 'hold'} an older "
                f"{', '.join(s.changed)}: "
                f"`minidock apply {outcome.file}` rolls them out"
            )
        elif s.running == 0:
            lines.append(f"{s.service}: no running task")
        else:
            lines.append(f"{s.service}: every running task holds the current values")
        if s.unknown:
            lines.append(
                f"{s.service}: {s.unknown} running task(s) run a spec no stored generation "
                "holds: cannot tell"
            )
    if not outcome.services:
        lines.append(f"{outcome.file}: no service has secrets")
    return lines


# -- observability: metrics and the web view (docs/observability.md) ---------------------------
@app.command()
def metrics(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write FILE atomically (a textfile collector's)."),
    ] = None,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Prometheus metrics of every cluster, from the state and one observation."""
    from minidock.metrics import metrics_text, write_textfile

    reading = run(usecases.read_fleet(state_dir(state), runtime(), cluster=cluster))
    text = metrics_text(reading)
    if output is None:
        sys.stdout.buffer.write(text)
    else:
        try:
            write_textfile(output, text)
        except OSError as exc:
            fail(f"--output {output}: {exc.strerror or exc}")
    if reading.errors:  # written all the same: minidock_store_up 0 is what alerts
        fail("; ".join(reading.errors), ExitCode.FAILED)


@app.command()
def serve(
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT; off loopback needs --token-file.")
    ] = "127.0.0.1:9440",
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="A file holding the bearer token.")
    ] = None,
    interval: Annotated[
        str, typer.Option("--interval", help="Observe the fleet at most this often.")
    ] = "5s",
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Serve /metrics, /api/status, /api/events and a live dashboard; reads only."""
    from minidock import serve as web

    every = seconds(interval, "--interval", at_least=1.0)
    location = state_dir(state)
    try:
        where = web.parse_listen(listen)
        access = web.Access(None if token_file is None else web.load_token(token_file))
        with contextlib.suppress(KeyboardInterrupt):
            web.serve(
                location,
                runtime(),
                where,
                access,
                interval=every,
                cluster=cluster,
                ready=lambda url: out.print(f"serving {url}/ (Ctrl-C stops)", markup=False),
            )
    except web.ServeInputError as exc:
        fail(str(exc))


# -- backups (docs/backups.md) -----------------------------------------------------------------
@app.command("backup")
def backup_command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="SERVICE[.SLOT]",
            help="SERVICE or SERVICE.SLOT (default: every slot); `verify SERVICE[.SLOT]`: a drill.",
        ),
    ],
    drilled: Annotated[
        str | None,
        typer.Argument(metavar="[SUBJECT]", help="After `verify`: the slot(s) to drill."),
    ] = None,
    timeout: TimeoutOption = "1h",
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Back up each named volume of the service's slots into its restic repository, inside
    the passes (hook, stop with backup.stop, docker cp over SSH into restic backup --stdin,
    start, keep); `backup verify SERVICE[.SLOT]` restores the newest snapshot into a
    throwaway container, runs backup.verify in it, and removes both."""
    from minidock.usecases import backups

    limit = seconds(timeout, "--timeout")
    view = live_view(True, quiet)
    if target == "verify" and drilled is not None:
        work = backups.verify(
            drilled, state_dir(state), runtime(), view.report, timeout=limit, cluster=cluster
        )
        drill = run(work, view)
        view.finish(drill.convergence)
        for line in drill.lines():
            (out if "verified" in line else err).print(line, markup=False)
        raise typer.Exit(drill.exit_code)
    if drilled is not None:
        fail(f"backup takes one SERVICE[.SLOT], got {target!r} and {drilled!r}")
    done = run(
        backups.backup(
            target, state_dir(state), runtime(), view.report, timeout=limit, cluster=cluster
        ),
        view,
    )
    view.finish(done.convergence)
    for line in done.saved:
        out.print(line, markup=False)
    if done.forgotten:
        out.print(f"forgot {done.forgotten} snapshot(s) by keep", markup=False)
    for line in done.failed:
        err.print(f"failed: {line}", markup=False)
    raise typer.Exit(done.exit_code)


@app.command("backups")
def backups_command(
    service: Annotated[str | None, typer.Argument(help="Only this service's snapshots.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """The snapshots of the cluster's backups (or of one service's), oldest first."""
    from minidock.usecases import backups

    listed = run(backups.list_backups(service, state_dir(state), cluster=cluster))
    if as_json:
        doc = {
            "repository": listed.repository,
            "snapshots": [
                {**dataclasses.asdict(s), "tags": dict(s.tags), "paths": list(s.paths)}
                for s in listed.snapshots
            ],
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    from rich.table import Table

    table = Table("SNAPSHOT", "TIME", "SERVICE", "SLOT", "VOLUME", "HOST", "GENERATION", box=None)
    for s in listed.snapshots:
        row = (s.tag("service"), s.tag("slot"), s.tag("volume"), s.hostname, s.tag("generation"))
        table.add_row(s.short_id, s.time[:19].replace("T", " "), *row)
    out.print(table)


@app.command("restore")
def restore_command(
    target: Annotated[
        str, typer.Argument(metavar="SERVICE[.SLOT]", help="The slot (default: every slot).")
    ],
    snapshot: Annotated[
        list[str] | None,
        typer.Option("--snapshot", metavar="ID", help="A snapshot, once per volume."),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", metavar="HOST", help="Restore it on this host.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Even while its host answers (its data forks).")
    ] = False,
    empty: Annotated[
        bool,
        typer.Option("--empty", help="Start a slot waiting for its restore empty, on purpose."),
    ] = False,
    replace_kept: Annotated[
        bool,
        typer.Option(
            "--replace-kept", help="Write over the old volume a failover or forget kept there."
        ),
    ] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Until it runs.")] = True,
    timeout: TimeoutOption = "10m",
    quiet: QuietOption = False,
    state: StateOption = None,
    cluster: ClusterOption = None,
) -> None:
    """Put a backup back: the task stopped, each named volume made afresh from its
    snapshot (restic dump over SSH), the task started (on --host, its new home)."""
    from minidock.usecases import restores

    limit = seconds(timeout, "--timeout")
    view = live_view(wait, quiet)
    work = restores.restore(
        target,
        state_dir(state),
        runtime(),
        view.report,
        snapshots=snapshot or (),
        host=host,
        force=force,
        empty=empty,
        replace_kept=replace_kept,
        wait=wait,
        timeout=limit,
        cluster=cluster,
    )
    restored = run(work, view)
    view.finish(restored.convergence)
    raise typer.Exit(restored.exit_code)


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app()
