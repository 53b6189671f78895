"""Live progress of the commands that wait for passes (`apply --wait`, `drain`, `rebalance`).

On a terminal, `LiveProgress` keeps a rich live view under the output, redrawn after each
pass: per service the replicas wanted, placed and healthy, its state and its rolling
update (`updating 2/6, batch 2 of 3`), the drained and down hosts, and what the pass waits
for. Acts, events and failures are printed above the view as they happen, so nothing is
lost; one summary line ends it (`converged: 2 services, 5 tasks healthy in 14s`). On a
pipe or with `-q`, `PlainProgress` prints what the CLI always printed: one plain line per
event, a line already printed not again, so cron mail stays short.

An adapter beside `minidock.cli`, reading the values a pass returns (`PassResult`: the
observation and the plan with the next controller state); the decision core never
imports rich, and neither does this module until a live view draws (a pipe's passes never
load it). Both views are used the same way: `with view: ...report(...)...`, then
`view.finish(outcome)`.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minidock.core import ControllerState, Rollout, ServiceState, SlotPhase
from minidock.core.plan import WaitKind
from minidock.core.supervise import ready
from minidock.documents.status import service_state
from minidock.model import Container
from minidock.output import Printer, rich_console
from minidock.runner import PassResult
from minidock.units import format_duration
from minidock.usecases import (
    ConvergeOutcome,
    Ending,
    FailedUpdate,
    PassDone,
    Progress,
    Report,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

__all__ = [
    "LiveProgress",
    "PlainProgress",
    "ServiceProgress",
    "progress_view",
    "rollout_progress",
    "service_progress",
    "summary_line",
]

ASSIGNED = (SlotPhase.STARTING, SlotPhase.RUNNING, SlotPhase.UNREACHABLE)
MOST_WAITS = 8  # waiting lines the view shows; the rest are counted
STATE_STYLES = {"converged": "green", "failed": "bold red", "paused": "red", "degraded": "yellow"}


# -- what the view shows, from one pass's result (pure) ---------------------------------------
@dataclass(frozen=True)
class ServiceProgress:
    """One service after a pass. `placed`: wanted slots with a task on a host (started,
    running or held by an unreachable host); `healthy`: slots whose task is ready (running,
    and healthy where it has a health check), as `status` counts them. `state`: status's
    word for a stopped, Failed, paused or rolling service, else converged, moving (all
    healthy, a replacement starting elsewhere: a drain, a rebalance), starting (placed,
    not all healthy yet) or degraded (a slot no host can take)."""

    name: str
    wanted: int
    placed: int
    healthy: int
    state: str  # status's word: converged, starting, updating, degraded, failed, ...
    rollout: str  # "updating 2/6, batch 2 of 3", "paused: ...", "rebalancing: 1 move left"


def service_progress(result: PassResult) -> tuple[ServiceProgress, ...]:
    """Every service of the pass's next state, in the applied file's order."""
    state = result.plan.state
    gone = {s.container.id for s in result.plan.stop}
    gone |= {r.replaces.id for r in result.plan.run if r.replaces is not None}
    mine = [
        c
        for c in result.observed.containers()
        if c.cluster == state.cluster and c.live and c.id not in gone
    ]
    shown = []
    for name in state.order:
        ss = state.services.get(name)
        if ss is not None:
            unplaced = any(p.service == name and not p.dependency for p in result.plan.pending)
            tasks = [c for c in mine if c.service == name]
            shown.append(_service_row(name, ss, tasks, unplaced=unplaced))
    return tuple(shown)


def _service_row(
    name: str, ss: ServiceState, mine: Sequence[Container], *, unplaced: bool
) -> ServiceProgress:
    """One service's row from its next state and its live tasks (those this pass left)."""
    wanted = set(ss.slot_numbers()) if ss.spec.desired == "running" else set()
    tasks = [c for c in mine if c.slot in wanted]
    done = {n for n in wanted if ss.slot(n).complete}
    healthy = {c.slot for c in tasks if ready(c)} | done
    placed = {n for n in wanted if ss.slot(n).phase in ASSIGNED} | healthy
    placed |= {c.slot for c in tasks}
    # a drain's or rebalance's move: the old task serves while its replacement starts
    moving = any(
        ready(c) and ss.slot(c.slot).phase is SlotPhase.STARTING and c.task != ss.slot(c.slot).task
        for c in tasks
    )
    failed = sum(ss.slot(n).failed for n in wanted)
    word: str = service_state(ss, len(placed), len(healthy), failed)
    if word in ("converged", "degraded", "starting"):  # status's words for these counts
        if len(healthy) >= len(wanted):
            word = "moving" if moving else "converged"
        else:
            word = "degraded" if unplaced else "starting"
    return ServiceProgress(name, len(wanted), len(placed), len(healthy), word, _moves(ss))


def rollout_progress(r: Rollout, parallelism: int) -> str:
    """A rolling update's progress: slots done of all, which batch of `parallelism` tasks
    is in flight (or next) and how many are in their health gate; "" when none is under
    way (`updating 2/6, batch 2 of 3 (2 in flight)`)."""
    if r.paused:
        return f"paused: {r.reason}" if r.reason else "paused"
    if not r.active:
        return ""
    if r.in_canary:
        promoted = ", promoted" if r.promoted else ""
        return f"canary: {len(r.canary)} beside the old tasks{promoted}"
    verb = "rolling back" if r.rollback else "moving" if r.relocating else "updating"
    total = r.total or len(r.done) + len(r.inflight)
    width = max(1, parallelism)
    batches = max(1, math.ceil(total / width))
    if r.inflight:
        batch = math.ceil((len(r.done) + len(r.inflight)) / width)
    else:
        batch = len(r.done) // width + 1
    line = f"{verb} {len(r.done)}/{total}, batch {min(max(batch, 1), batches)} of {batches}"
    return line + (f" ({len(r.inflight)} in flight)" if r.inflight else "")


def _moves(ss: ServiceState) -> str:
    line = rollout_progress(ss.rollout, ss.spec.update.parallelism)
    if not line and ss.rebalance:
        line = f"rebalancing: {_count(len(ss.rebalance), 'move')} left"
    return line


def host_lines(result: PassResult) -> list[str]:
    """The hosts that take no tasks: drained (with what still runs there) and down."""
    state: ControllerState = result.plan.state
    gone = {s.container.id for s in result.plan.stop}
    lines = []
    for name, hs in sorted(state.hosts.items()):
        if hs.down:
            lines.append(f"{name}: down")
        elif hs.drained:
            left = [
                c
                for c in result.observed.containers()
                if c.host == name and c.cluster == state.cluster and c.live and c.id not in gone
            ]
            lines.append(
                f"{name}: drained, {_count(len(left), 'task')} left" if left else f"{name}: drained"
            )
    return lines


def waiting_lines(result: PassResult) -> list[str]:
    """What the pass waits for: its waits, then its pending slots with their reasons. A
    rolling update's own count (`web: updating 2/6`) is left to the table's rollout
    column, which says it better (done, batch, in flight)."""
    plan = result.plan
    rolling = {n for n, ss in plan.state.services.items() if ss.rollout.active}
    waits = [w for w in plan.waiting if not (w.kind is WaitKind.ROLLOUT and w.subject in rolling)]
    return [*waits, *(f"{p.service}.{p.slot} pending: {p.reason}" for p in plan.pending)]


def progress_table(
    result: PassResult, passes: int, elapsed: float, cluster: str = ""
) -> RenderableType:
    """The live view of one pass: the services' table, the hosts that take no tasks and
    what the pass waits for (the first MOST_WAITS of it); titled by `cluster` when the
    store holds several."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    title = f"pass {passes}, {format_duration(round(elapsed))}"
    title = f"cluster {cluster}, {title}" if cluster else title
    table = Table(
        "service", "wanted", "placed", "healthy", "state", "rollout",
        title=title, title_justify="left", box=None, pad_edge=False,
    )  # fmt: skip
    for s in service_progress(result):
        style = STATE_STYLES.get(s.state, "")
        table.add_row(
            s.name, str(s.wanted), str(s.placed), str(s.healthy), Text(s.state, style), s.rollout
        )
    lines: list[RenderableType] = [table]
    lines += [
        Text(line, "yellow", no_wrap=True, overflow="ellipsis") for line in host_lines(result)
    ]
    waits = waiting_lines(result)
    for line in waits[:MOST_WAITS]:
        lines.append(Text(f"waiting for {line}", "dim", no_wrap=True, overflow="ellipsis"))
    if len(waits) > MOST_WAITS:
        lines.append(Text(f"... and {len(waits) - MOST_WAITS} more", "dim"))
    return Group(*lines)


def summary_line(
    outcome: ConvergeOutcome,
    last: PassResult | Sequence[PassResult] | None,
    elapsed: float,
    failed_updates: Sequence[FailedUpdate] = (),
) -> str:
    """The one line that ends a live view: converged (with counts and time), what a
    timed-out wait still waits for, or why the passes stopped."""
    took = format_duration(round(elapsed))
    if failed_updates:
        names = ", ".join(f.service for f in failed_updates)
        return f"failed: the update of {names} was rolled back (after {took})"
    if outcome.ending is Ending.TIMED_OUT:
        waits = _few(outcome.waiting) if outcome.waiting else "tasks are starting"
        return f"not converged after {format_duration(outcome.timeout)}: waiting for {waits}"
    if outcome.exit_code == 0:
        results = [last] if isinstance(last, PassResult) else list(last or ())
        services = [s for r in results for s in service_progress(r)]
        healthy = sum(s.healthy for s in services)
        counted = f"{_count(len(services), 'service')}, {_count(healthy, 'task')} healthy"
        return f"converged: {counted} in {took}"
    return f"{outcome.why or 'not converged'} (after {outcome.passes} passes, {took})"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _few(items: Sequence[str], most: int = 3) -> str:
    shown = "; ".join(items[:most])
    return shown + (f" (and {len(items) - most} more)" if len(items) > most else "")


# -- the two views ----------------------------------------------------------------------------
class LiveProgress:
    """The terminal's view: acts, events and failures printed above a live region that is
    redrawn after each pass (no redraw between passes: no thread), and a summary line.
    `fallback` prints what is not a pass (a stored generation, a recorded intent)."""

    def __init__(
        self,
        console: Console,
        errors: Console,
        fallback: Report,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.errors, self.fallback, self.clock = console, errors, fallback, clock
        self.live: Live | None = None
        self.started = clock()
        self.passes = 0
        self.last: dict[str, PassResult] = {}  # per cluster ("" when the store holds one)
        self.seen: set[str] = set()  # Failed-slot lines printed once

    def __enter__(self) -> LiveProgress:
        self.started = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the live region, leaving its last frame on the screen."""
        if self.live is not None:
            self.live.stop()
            self.live = None

    def report(self, progress: Progress) -> None:
        if not isinstance(progress, PassDone):
            self.fallback(progress)
            return
        result, cluster = progress.result, progress.cluster
        self.passes += 1
        self.last[cluster] = result
        self._print_above(result, f"[{cluster}] " if cluster else "")
        tables = [
            progress_table(r, self.passes, self._elapsed(), name) for name, r in self.last.items()
        ]
        from rich.console import Group
        from rich.constrain import Constrain

        frame = Constrain(Group(*tables), _width(self.console))
        if self.live is None:
            from rich.live import Live

            self.live = Live(frame, console=self.console, auto_refresh=False)
            self.live.start(refresh=True)
        else:
            self.live.update(frame, refresh=True)

    def _print_above(self, result: PassResult, tag: str) -> None:
        say = self.console.print
        for line in result.done:
            say(tag + line, markup=False, highlight=False)
        for line in result.failures:
            say(f"{tag}failed: {line}", style="red", markup=False, highlight=False)
        for e in result.plan.events:
            say(f"{tag}{e.kind}: {e.message}", markup=False, highlight=False)
        for name, slot, why in result.plan.failed_slots():
            line = f"{tag}FAILED {name}.{slot}: {why}"
            if line not in self.seen:
                say(line, style="bold red", markup=False, highlight=False)
                self.seen.add(line)

    def _elapsed(self) -> float:
        return max(0.0, self.clock() - self.started)

    def finish(self, outcome: ConvergeOutcome, failed_updates: Sequence[FailedUpdate] = ()) -> None:
        """Stop the live region and print the one summary line: on stdout when converged,
        else (a non-zero exit) on stderr; a rolled-back update's reason first."""
        self.stop()
        for f in failed_updates:
            self.errors.print(f"minidock: {f.service}: {f.reason}", style="red", markup=False)
        line = summary_line(outcome, list(self.last.values()), self._elapsed(), failed_updates)
        if outcome.exit_code == 0 and not failed_updates:
            self.console.print(line, style="green", markup=False, highlight=False)
        else:
            self.errors.print(line, style="red", markup=False, highlight=False)


class PlainProgress:
    """A pipe's (or `-q`'s) view: the CLI's own line printer and ending, unchanged."""

    def __init__(
        self, report: Report, ending: Callable[[ConvergeOutcome], None], errors: Printer
    ) -> None:
        self.report, self.ending, self.errors = report, ending, errors

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def stop(self) -> None:
        pass

    def finish(self, outcome: ConvergeOutcome, failed_updates: Sequence[FailedUpdate] = ()) -> None:
        """The CLI's ending (`converged`, what a timed-out wait waits for, the why-line),
        then each rolled-back update's reason on stderr, `minidock: web: rolled back: ...`;
        a rolled-back update did not converge to what was applied: no `converged` then."""
        if not (failed_updates and outcome.ending is Ending.CONVERGED):
            self.ending(outcome)
        for f in failed_updates:
            self.errors.print(f"minidock: {f.service}: {f.reason}", markup=False)


def progress_view(
    console: Printer,
    errors: Printer,
    plain: Report,
    ending: Callable[[ConvergeOutcome], None],
    *,
    live: bool,
) -> LiveProgress | PlainProgress:
    """The live view when `live` is asked for and stdout is a terminal (as rich detects
    it: FORCE_COLOR and TTY_COMPATIBLE count, NO_COLOR only drops colour), else plain
    (which never makes a rich Console: a pipe's passes import no rich)."""
    if live and console.is_terminal:
        return LiveProgress(rich_console(console), rich_console(errors), plain)
    return PlainProgress(plain, ending, errors)


def _width(console: Console) -> int:
    """The live region must fit the real terminal (the CLI sets a wide $COLUMNS for pipes,
    which would wrap the region's lines and break its redraw)."""
    file: Any = console.file
    try:
        columns = os.get_terminal_size(file.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return console.width
    return max(20, min(columns, console.width))
