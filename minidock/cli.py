"""The command line: parse, wire, print. No decisions live here.

Exit codes (PRODUCT.md): 0 done or converged, 1 an operation failed or a service has
Failed slots, 2 bad input or usage, 3 not converged yet, 75 another reconcile holds the lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from minidock import core
from minidock.core import ControllerState, Plan
from minidock.lab import lab_app
from minidock.model import Cluster, Event, Inventory
from minidock.runner import (
    EXIT_FAILED,
    EXIT_NOT_CONVERGED,
    EXIT_OK,
    PassResult,
    all_secrets,
    decide,
    redacted,
    run_pass,
)
from minidock.spec import SpecError, load, load_inventory
from minidock.ssh import SSHExecutor
from minidock.state import (
    DB_NAME,
    Locked,
    StateError,
    StateLock,
    Store,
    ensure_state_dir,
    state_dir,
)
from minidock.status import summarize
from minidock.units import format_duration, format_size, parse_duration

EXIT_USAGE, EXIT_LOCKED = 2, 75
OPERATOR_PATIENCE = 30.0  # seconds apply/drain/... wait for another writer's pass
T = TypeVar("T")


class _Commands(TyperGroup):
    """Every command: an unusable state directory (StateError) is one line and exit 2."""

    def invoke(self, ctx: Any) -> Any:  # ctx: the click Context that typer vendors
        try:
            return super().invoke(ctx)
        except StateError as exc:
            fail(str(exc))


app = typer.Typer(
    cls=_Commands,
    name="minidock",
    help="Keep Docker services converged on a fleet of SSH hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(lab_app, name="lab")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StateOption = Annotated[
    str | None,
    typer.Option("--state", help="State directory (default: $MINIDOCK_STATE, else .minidock/)."),
]
WaitOption = Annotated[bool, typer.Option("--wait", help="Repeat passes until converged.")]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long --wait may take.")]
FileArg = Annotated[Path, typer.Argument(help="A cluster spec (TOML).", show_default=False)]


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    err.print(f"minidock: {message}", markup=False)
    raise typer.Exit(code)


def seconds(value: str, option: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        fail(f"{option}: {exc}")


@contextmanager
def writer(directory: Path, *, patience: float = 0.0) -> Iterator[Store]:
    """The one-writer section: the lock, then the store. Without patience (cron's
    `reconcile`) a taken lock is exit 75 at once; an operator's command waits up to
    `patience` seconds for a running pass (e.g. of `watch`) to finish."""
    ensure_state_dir(directory)
    lock = StateLock(directory)
    deadline = time.monotonic() + patience
    while True:
        try:
            lock.acquire()
            break
        except Locked as exc:
            if time.monotonic() >= deadline:
                fail(str(exc), EXIT_LOCKED)
            time.sleep(0.2)
    try:
        with Store.open(directory) as store:
            yield store
    finally:
        lock.release()


def applied_state_dir(state: str | None) -> Path:
    """The state directory of commands that need an earlier apply; exit 2 (creating
    nothing) when there is none."""
    directory = state_dir(state, None)
    if not (directory / DB_NAME).exists():
        fail(f"nothing applied yet in {directory}: run `minidock apply FILE` first")
    return directory


def desired(store: Store, directory: Path) -> tuple[Cluster, Inventory]:
    """The latest applied generation and its inventory, read afresh from disk."""
    latest = store.latest_generation()
    if latest is None:
        fail(f"nothing applied yet in {directory}: run `minidock apply FILE` first")
    _, cluster = latest
    try:
        return cluster, load_inventory(cluster.inventory_path)
    except SpecError as exc:
        fail(str(exc))


def load_spec(path: Path) -> tuple[Cluster, Inventory]:
    try:
        return load(path)
    except SpecError as exc:
        fail(str(exc))


def run_async(make: Callable[[SSHExecutor], Awaitable[T]]) -> T:
    """Run one coroutine with an SSH executor that is closed afterwards."""

    async def main() -> T:
        executor = SSHExecutor()
        try:
            return await make(executor)
        finally:
            await executor.close()

    return asyncio.run(main())


def print_pass(result: PassResult, *, quiet: bool = False) -> None:
    """Acts as they happened, then failures; nothing at all when quiet and nothing changed."""
    for line in result.done:
        out.print(line, markup=False)
    for line in result.failures:
        err.print(f"failed: {line}", markup=False)
    if quiet and not (result.done or result.failures or result.plan.events):
        return
    for e in result.plan.events:
        out.print(f"{e.kind}: {e.message}", markup=False)
    for p in result.plan.pending:
        out.print(f"pending {p.service}.{p.slot}: {p.reason}", markup=False)
    for name, slot, line in result.plan.failed_slots():
        err.print(f"FAILED {name}.{slot}: {line}", markup=False)


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


def converge(
    store: Store,
    cluster: Cluster,
    inventory: Inventory,
    *,
    wait: bool,
    timeout: float,
    quiet: bool = False,
    interval: float = 1.0,
) -> int:
    """One pass, or (with wait) passes until converged, failed or timed out."""

    async def passes(executor: SSHExecutor) -> int:
        deadline = time.monotonic() + timeout
        while True:
            result = await run_pass(cluster, inventory, store, executor)
            print_pass(result, quiet=quiet)
            code = result.exit_code
            if not wait or code != EXIT_NOT_CONVERGED:
                if wait and code == EXIT_OK:
                    out.print("converged", markup=False)
                return code
            if time.monotonic() + interval > deadline:
                err.print(f"not converged after {format_duration(timeout)}:", markup=False)
                for line in result.plan.waiting:
                    err.print(f"  {line}", markup=False)
                return code
            await asyncio.sleep(interval)

    return run_async(passes)


# -- commands ---------------------------------------------------------------------------------
@app.command()
def validate(file: Annotated[Path, typer.Argument(help="A cluster spec or an inventory.")]) -> None:
    """Check a cluster spec (and its inventory) or an inventory; print OK or the error."""
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
        is_inventory = "hosts" in doc or ("defaults" in doc and "services" not in doc)
    except (OSError, ValueError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        is_inventory = False  # let the loader say what is wrong, in its own words
    try:
        if is_inventory:
            inv = load_inventory(file)
            out.print(f"OK: {file}: inventory with {len(inv.hosts)} hosts", markup=False)
        else:
            cluster, inv = load(file)
            out.print(
                f"OK: {file}: cluster {cluster.name}, {len(cluster.services)} services, "
                f"{len(inv.hosts)} hosts",
                markup=False,
            )
    except SpecError as exc:
        fail(str(exc))


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
    cluster, inventory = load_spec(file)
    directory = state_dir(state, file)
    if dry_run:
        show_plan(directory, cluster, inventory)
        return
    with writer(directory, patience=OPERATOR_PATIENCE) as store:
        gen = store.next_generation_id()
        before = store.load()
        admitted = core.admit(before, cluster, gen)
        now = time.time()
        events = [Event(now, "apply", f"applied {file} as generation {gen}")]
        events += core.rollouts_started(before, admitted, now)
        store.commit(admitted, events, generation=cluster, source_path=str(file.resolve()))
        out.print(f"generation {gen}: {cluster.name} ({len(cluster.services)} services)")
        code = converge(store, cluster, inventory, wait=wait, timeout=limit)
        for name, why in core.failed_updates(store.load(), gen):
            err.print(f"{name}: {why}", markup=False)
            code = EXIT_FAILED
    raise typer.Exit(code)


def show_plan(directory: Path, cluster: Cluster, inventory: Inventory) -> None:
    """What apply would do now: observe, admit in memory, decide; nothing is written."""
    current = ControllerState()
    if (directory / DB_NAME).exists():
        with Store.open(directory) as store:
            current = store.load()
            gen = store.next_generation_id()
    else:
        gen = 1
    admitted = core.admit(current, cluster, gen)

    print_plan(run_async(lambda ex: decide(cluster, inventory, admitted, ex)).plan)


@app.command()
def plan(file: FileArg, state: StateOption = None) -> None:
    """What apply would do, as a list of actions; changes nothing."""
    cluster, inventory = load_spec(file)
    show_plan(state_dir(state, file), cluster, inventory)


@app.command("reconcile")
def reconcile_command(state: StateOption = None) -> None:
    """One pass over the stored desired state: the cron entry point, quiet when idle."""
    directory = applied_state_dir(state)
    with writer(directory) as store:
        cluster, inventory = desired(store, directory)
        code = converge(store, cluster, inventory, wait=False, timeout=0, quiet=True)
    raise typer.Exit(code)


@app.command()
def watch(
    interval: Annotated[str, typer.Option("--interval", help="Time between passes.")] = "2s",
    state: StateOption = None,
) -> None:
    """Passes in a loop until interrupted, reusing SSH connections.

    The lock is held for each pass, not between passes, so `apply`, `drain` and the other
    writers get their turn; a pass that finds the lock taken is skipped."""
    pause = seconds(interval, "--interval")
    if pause < 0.1:
        fail(f"--interval: {interval} is too short; use at least 100ms, e.g. 2s")
    directory = applied_state_dir(state)

    async def loop(executor: SSHExecutor) -> None:
        while True:
            try:
                with StateLock(directory), Store.open(directory) as store:
                    cluster, inventory = desired(store, directory)
                    result = await run_pass(cluster, inventory, store, executor)
                print_pass(result, quiet=True)
            except Locked:
                pass  # another writer is at work: the next pass will see its result
            await asyncio.sleep(pause)

    try:
        run_async(loop)
    except KeyboardInterrupt:
        out.print("stopped", markup=False)


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: StateOption = None,
) -> None:
    """Services, tasks and hosts, observed now."""
    directory = applied_state_dir(state)
    with Store.open(directory) as store:
        current = store.load()
        cluster, inventory = desired(store, directory)

    result = run_async(lambda ex: decide(cluster, inventory, current, ex))
    plan = redacted(result.plan, all_secrets(result.plan.state))
    doc = summarize(current, inventory, result.observed, plan)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    print_status(doc)


def print_status(doc: dict[str, Any]) -> None:
    services = Table(
        "service",
        "desired",
        "running",
        "healthy",
        "state",
        "image",
        "rollout",
        title=f"cluster {doc['cluster']} (generation {doc['generation']})",
    )
    for s in doc["services"]:
        r = s["rollout"]
        rollout = r["status"] if r["status"] != "none" else ""
        if r["status"] in ("updating", "rolling_back"):
            rollout += f" {r['done']}/{r['total']}"
        services.add_row(
            s["name"],
            f"{s['desired']} x{s['replicas']}",
            str(s["running"]),
            str(s["healthy"]),
            s["state"].upper() if s["state"] == "failed" else s["state"],
            s["image"],
            rollout,
        )
    out.print(services)
    for s in doc["services"]:
        if s["last_failure"]:
            out.print(f"{s['name']}: last failure: {s['last_failure']}", markup=False)
        for p in s["pending"]:
            out.print(f"{s['name']}.{p['slot']} pending: {p['reason']}", markup=False)
        for f in s["failed"]:
            out.print(f"{s['name']}.{f['slot']} FAILED: {f['last_exit']}", markup=False)
    tasks = Table("task", "slot", "host", "image", "gen", "state", "health")
    for t in doc["tasks"]:
        tasks.add_row(
            t["name"],
            str(t["slot"]),
            t["host"],
            t["image"],
            str(t["generation"] or "?"),
            t["state"] if t["exit_code"] is None else f"{t['state']} ({t['exit_code']})",
            t["health"],
        )
    out.print(tasks)
    hosts = Table("host", "state", "drained", "last seen", "tasks", "cpus", "memory")
    for h in doc["hosts"]:
        seen = (
            time.strftime("%H:%M:%S", time.localtime(h["last_seen"])) if h["last_seen"] else "never"
        )
        cpus = (
            f"{h['cpus']['used']:g}/{h['cpus']['total']:g}"
            if h["cpus"]["total"]
            else f"{h['cpus']['used']:g}"
        )
        mem = h["memory"]
        memory = (
            f"{format_size(mem['used'])}/{format_size(mem['total'])}"
            if mem["total"]
            else format_size(mem["used"])
        )
        word = h["state"] if not h["error"] else f"{h['state']}: {h['error']}"
        hosts.add_row(
            h["name"], word, "yes" if h["drained"] else "", seen, str(h["tasks"]), cpus, memory
        )
    out.print(hosts)
    for w in doc["waiting"]:
        out.print(f"waiting: {w}", markup=False)


def intent(
    state: str | None,
    change: Callable[[ControllerState, Cluster, Inventory], ControllerState],
    message: str,
    *,
    wait: bool,
    timeout: float,
) -> NoReturn:
    """An operator's word (drain, activate, rollback, reset): record it, then reconcile."""
    directory = applied_state_dir(state)
    with writer(directory, patience=OPERATOR_PATIENCE) as store:
        cluster, inventory = desired(store, directory)
        changed = change(store.load(), cluster, inventory)
        store.commit(changed, [Event(time.time(), "intent", message)])
        out.print(message, markup=False)
        code = converge(store, cluster, inventory, wait=wait, timeout=timeout)
    raise typer.Exit(code)


def known_host(inventory: Inventory, host: str) -> None:
    if inventory.host(host) is None:
        known = ", ".join(h.name for h in inventory.hosts)
        fail(f"{inventory.path}: unknown host {host!r}; known hosts: {known}")


def known_service(state: ControllerState, service: str) -> None:
    if service not in state.services:
        known = ", ".join(state.services) or "none"
        fail(f"unknown service {service!r}; known services: {known}")


@app.command()
def drain(
    host: str,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Until the host is empty.")] = True,
    timeout: TimeoutOption = "5m",
    state: StateOption = None,
) -> None:
    """Move every task off a host (replacements first) and keep it empty."""

    def change(s: ControllerState, c: Cluster, inv: Inventory) -> ControllerState:
        known_host(inv, host)
        return core.set_drained(s, host, True)

    intent(state, change, f"draining {host}", wait=wait, timeout=seconds(timeout, "--timeout"))


@app.command()
def activate(host: str, state: StateOption = None) -> None:
    """Let a drained host take tasks again (running tasks are not moved back)."""

    def change(s: ControllerState, c: Cluster, inv: Inventory) -> ControllerState:
        known_host(inv, host)
        return core.set_drained(s, host, False)

    intent(state, change, f"activated {host}", wait=False, timeout=0)


@app.command()
def rollback(
    service: str, wait: WaitOption = False, timeout: TimeoutOption = "5m", state: StateOption = None
) -> None:
    """Go back to the service's previous spec, rolled out like an update."""

    def change(s: ControllerState, c: Cluster, inv: Inventory) -> ControllerState:
        known_service(s, service)
        try:
            return core.rollback(s, service)
        except ValueError as exc:
            fail(str(exc))

    intent(
        state, change, f"rolling back {service}", wait=wait, timeout=seconds(timeout, "--timeout")
    )


@app.command()
def reset(
    service: str, wait: WaitOption = False, timeout: TimeoutOption = "5m", state: StateOption = None
) -> None:
    """Clear a service's crash-loop Failed slots and backoff timers."""

    def change(s: ControllerState, c: Cluster, inv: Inventory) -> ControllerState:
        known_service(s, service)
        return core.reset(s, service)

    intent(state, change, f"reset {service}", wait=wait, timeout=seconds(timeout, "--timeout"))


@app.command()
def events(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest last.")] = 50,
    state: StateOption = None,
) -> None:
    """The event log: every change the controller made."""
    directory = applied_state_dir(state)
    with Store.open(directory) as store:
        for _, e in store.events(limit=limit):
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at))
            out.print(f"{at} {e.kind}: {e.message}", markup=False)


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app()
