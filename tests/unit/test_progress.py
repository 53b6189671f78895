"""The live progress view (minidock/progress.py), from real passes.

Every pass here is the real runner over FakeDocker (tests.sim.RunnerWorld, a real Store):
its `PassResult`s are read as the values the view shows (wanted, placed, healthy, state,
rollout and batch, hosts, waits) and drawn as a terminal gets them, on a rich Console
writing to a string with `force_terminal`. The clock of the view is a counter, so the
figures and the summary line are exact and nothing here waits.
"""

from __future__ import annotations

import fcntl
import io
import itertools
import os
import re
import struct
import termios
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

import minidock.cli
from minidock.core import RolloutPhase, Waiting, set_drained
from minidock.core.plan import WaitKind
from minidock.core.rebalance import moves, record
from minidock.core.state import Rollout
from minidock.model import HealthCheck, PortMapping, RestartPolicy, Service, UpdatePolicy
from minidock.progress import (
    LiveProgress,
    PlainProgress,
    progress_table,
    progress_view,
    rollout_progress,
    service_progress,
    summary_line,
    waiting_lines,
)
from minidock.runner import PassResult
from minidock.usecases import (
    ConvergeOutcome,
    Ending,
    ExitCode,
    FailedUpdate,
    IntentRecorded,
    PassDone,
    Progress,
    verdict,
)
from tests.sim import RunnerWorld, hosts, svc

HC = HealthCheck(("wget", "-qO-", "http://127.0.0.1:8080/"), interval=1, timeout=1, retries=2)
BY_TWO = UpdatePolicy(parallelism=2, monitor=0)
REDRAW = re.compile(r"\x1b\[[0-9]*[AK]|\r")  # a live region's redraw: cursor up, erase line
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # the rest: colours, cursor hide and show


MakeRunner = Callable[[int], RunnerWorld]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[MakeRunner]:
    """RunnerWorld(host1..hostN) factory; each world's store closed after the test."""
    worlds: list[RunnerWorld] = []

    def world(n: int) -> RunnerWorld:
        worlds.append(RunnerWorld(hosts(n), tmp_path / f"state{len(worlds)}"))
        return worlds[-1]

    yield world
    for w in worlds:
        w.close()


def rows(result: PassResult) -> dict[str, tuple[int, int, int, str, str]]:
    """Service -> (wanted, placed, healthy, state, rollout) as the view shows it."""
    return {
        s.name: (s.wanted, s.placed, s.healthy, s.state, s.rollout)
        for s in service_progress(result)
    }


def passes(w: RunnerWorld, limit: int = 30) -> list[PassResult]:
    """The results of passes until one has nothing left to do (that one included)."""
    start = len(w.results)
    w.converge(limit)
    return w.results[start:]


def updated(w: RunnerWorld, web: Service) -> list[PassResult]:
    """`web` converged, then web:6 rolled out: the results of the update's passes."""
    w.apply(web)
    w.converge()
    w.apply(svc(image="web:6", replicas=web.replicas, health=HC, update=web.update))
    return passes(w)


def terminal(width: int = 100) -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=width, color_system=None), screen


def drawn(results: Sequence[PassResult], width: int = 100) -> tuple[LiveProgress, str, str]:
    """The results reported to a live view on a terminal, ended as converged: the view,
    what the terminal got (control sequences stripped) and what stderr got."""
    console, screen = terminal(width)
    errors, errs = terminal(width)
    ticks = itertools.count()
    fallback: list[Progress] = []
    view = LiveProgress(console, errors, fallback.append, clock=lambda: float(next(ticks)))
    with view:
        view.report(IntentRecorded("rolling out"))
        for r in results:
            view.report(PassDone(r, verdict(r)))
    view.finish(ConvergeOutcome(ExitCode.OK, Ending.CONVERGED, len(results), 60.0))
    assert fallback == [IntentRecorded("rolling out")]  # not a pass: the CLI's printer's
    return view, lines_of(screen.getvalue()), errs.getvalue()


def lines_of(output: str) -> str:
    """What a terminal got, as lines: each redraw's erases a line break, no blank lines."""
    text = CONTROL.sub("", REDRAW.sub("\n", output))
    return "".join(f"{line.rstrip()}\n" for line in text.splitlines() if line.strip())


# -- what the view shows ----------------------------------------------------------------------
def test_a_first_apply_is_placed_then_turns_healthy(make: MakeRunner) -> None:
    w = make(3)
    w.apply(svc("db", image="db:1"), svc(replicas=3, health=HC, depends_on=("db",)))
    first, second, third = passes(w)
    assert rows(first) == {
        "db": (1, 1, 0, "starting", ""),  # started this pass: placed, not yet seen healthy
        "web": (3, 0, 0, "starting", ""),  # waits for db
    }
    assert rows(second) == {"db": (1, 1, 1, "converged", ""), "web": (3, 3, 0, "starting", "")}
    assert rows(third) == {"db": (1, 1, 1, "converged", ""), "web": (3, 3, 3, "converged", "")}


def test_a_rolling_update_shows_its_batches(make: MakeRunner) -> None:
    results = updated(make(3), svc(replicas=6, health=HC, update=BY_TWO))
    assert [rows(r)["web"] for r in results] == [
        (6, 6, 4, "updating", "updating 0/6, batch 1 of 3 (2 in flight)"),  # stop-first
        (6, 6, 4, "updating", "updating 2/6, batch 2 of 3 (2 in flight)"),
        (6, 6, 4, "updating", "updating 4/6, batch 3 of 3 (2 in flight)"),
        (6, 6, 6, "converged", ""),
    ]


def test_the_view_leaves_out_a_rollouts_count_by_its_kind_not_its_words(
    make: MakeRunner,
) -> None:
    """Issue 19 (Deliver 9): the view reads the wait's kind; a wait of another kind that
    happens to read like a rollout's count is still shown."""
    first = updated(make(3), svc(replicas=6, health=HC, update=BY_TWO))[0]
    plan = first.plan
    (count,) = [w for w in plan.waiting if w.kind is WaitKind.ROLLOUT]
    assert count.startswith("web: updating ")
    assert count not in waiting_lines(first)
    lookalike = Waiting("web", count.reason, WaitKind.GATE, "web")
    shown = PassResult(replace(plan, waiting=(*plan.waiting, lookalike)), first.observed)
    assert waiting_lines(shown).count(count) == 1


def test_a_rollout_between_batches_names_the_next_one() -> None:
    waiting = Rollout(RolloutPhase.UPDATING, total=5, done=(1, 2))  # e.g. an update delay
    assert rollout_progress(waiting, 2) == "updating 2/5, batch 2 of 3"
    back = Rollout(RolloutPhase.ROLLING_BACK, total=3, done=(1,), inflight=(2,), rollback=True)
    assert rollout_progress(back, 1) == "rolling back 1/3, batch 2 of 3 (1 in flight)"
    assert rollout_progress(Rollout(RolloutPhase.PAUSED, reason="web.2 unhealthy"), 1) == (
        "paused: web.2 unhealthy"
    )
    assert rollout_progress(Rollout(RolloutPhase.COMPLETED, total=3, done=(1, 2, 3)), 1) == ""


def test_a_drain_shows_what_is_left_on_the_host(make: MakeRunner) -> None:
    w = make(3)
    w.apply(svc(replicas=3, health=HC))
    w.converge()
    w.state = set_drained(w.state, "host1", True)
    first, *rest = passes(w)
    console, screen = terminal()
    console.print(progress_table(first, 1, 0.0))
    assert "host1: drained, 1 task left" in screen.getvalue()  # its replacement starts first
    assert rows(first)["web"] == (3, 3, 3, "moving", "")  # never below its replicas
    assert [rows(r)["web"] for r in rest] == [(3, 3, 3, "converged", "")] * len(rest)


def test_tasks_no_host_can_take_are_degraded_and_say_why(make: MakeRunner) -> None:
    w = make(3)
    w.apply(svc(replicas=4, ports=(PortMapping(8080, 8080),)))
    w.step()
    w.step()
    second = w.results[-1]
    assert rows(second)["web"] == (4, 3, 3, "degraded", "")
    _, screen, _ = drawn([second])
    assert "waiting for web.4 pending: host1: host port 8080/tcp in use; host2: " in screen


def test_a_rebalance_counts_its_moves(make: MakeRunner) -> None:
    w = make(2)
    w.apply(svc(replicas=4, health=HC))
    w.converge()
    w.hosts = hosts(3)  # host3 joins
    w.state, _ = record(w.state, moves(w.state, w.inventory, w.observe()), w.now)
    first, *_ = passes(w)
    assert rows(first)["web"] == (4, 4, 4, "moving", "rebalancing: 1 move left")


# -- drawn on a terminal ----------------------------------------------------------------------
def test_the_live_view_redraws_each_pass_and_prints_acts_above_it_once(
    make: MakeRunner,
) -> None:
    results = updated(make(3), svc(replicas=6, health=HC, update=BY_TWO))
    _, screen, errors = drawn(results)
    lines = screen.splitlines()
    acts = [line for r in results for line in r.done]
    assert len(acts) == 12  # 6 stops and 6 starts
    assert all(lines.count(act) == 1 for act in acts)
    for n in (1, 2, 3, 4):
        assert any(line.startswith(f"pass {n}, {n}s") for line in lines), n  # one frame each
    assert re.search(r"^web +6 +6 +4 +updating +updating 2/6, batch 2 of 3", screen, re.M)
    assert "rollout-completed: web: rollout completed" in lines  # an event, above
    assert not [line for line in lines if line.startswith("waiting for web: updating")]
    # the last frame stays on the screen, then exactly one summary line
    *_, header, web_row, summary = screen.rstrip("\n").split("\n")
    assert header.split() == ["service", "wanted", "placed", "healthy", "state", "rollout"]
    assert web_row.split() == ["web", "6", "6", "6", "converged"]
    assert summary == "converged: 1 service, 6 tasks healthy in 5s"
    assert errors == ""


def test_a_failed_slot_is_printed_once_however_many_passes_show_it(
    make: MakeRunner,
) -> None:
    w = make(2)
    w.apply(svc("job", image="crash:1", restart=RestartPolicy("on-failure", max_attempts=2)))
    for _ in range(6):
        w.step()
    assert [bool(r.plan.failed_slots()) for r in w.results] == [False] * 3 + [True] * 3
    _, screen, _ = drawn(w.results)
    failed = [line for line in screen.splitlines() if line.startswith("FAILED job.1: ")]
    assert failed == ["FAILED job.1: task " + failed[0].split("task ", 1)[1]]
    assert re.search(r"^job +1 +0 +0 +failed", screen, re.M)


def _drain(master: int) -> str:
    """All a pty's master side holds once its slave is closed (Linux then reads EIO)."""
    chunks = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_the_live_region_fits_the_real_terminal_whatever_columns_says(
    make: MakeRunner,
) -> None:
    """The CLI sets COLUMNS=160 for pipes; on a 60-column terminal the region must still
    fit, or each line wraps and the redraw climbs too few lines."""
    w = make(3)
    w.apply(svc(replicas=4, ports=(PortMapping(8080, 8080),)))  # a long pending reason
    w.step()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    with os.fdopen(slave, "w") as tty:
        wide = Console(file=tty, force_terminal=True, width=160, color_system=None)
        view = LiveProgress(wide, wide, print, clock=lambda: 0.0)
        with view:
            view.report(PassDone(w.results[0], verdict(w.results[0])))
        tty.flush()
    got = _drain(master)  # everything written, the slave closed: one read may return part
    os.close(master)
    frame = lines_of(got).splitlines()
    assert any(line.startswith("waiting for web.4 pending: host1: host port") for line in frame)
    assert all(len(line) <= 60 for line in frame), frame


def test_a_dumb_terminal_gets_only_the_last_frame_as_rich_draws_it(
    make: MakeRunner,
) -> None:
    results = updated(make(3), svc(replicas=2, health=HC))
    screen = io.StringIO()
    dumb = Console(file=screen, force_terminal=True, width=100, _environ={"TERM": "dumb"})
    view = LiveProgress(dumb, dumb, print, clock=lambda: 0.0)
    with view:
        for r in results:
            view.report(PassDone(r, verdict(r)))
    view.finish(ConvergeOutcome(ExitCode.OK, Ending.CONVERGED, len(results), 60.0))
    text = screen.getvalue()
    assert "\x1b[1A" not in text  # no cursor moves: no redraws
    assert text.count("service  wanted  placed") == 1
    assert text.rstrip("\n").endswith("converged: 1 service, 2 tasks healthy in 0s")


# -- the summary line, and which view ---------------------------------------------------------
def test_the_summary_says_how_the_passes_ended(make: MakeRunner) -> None:
    w = make(2)
    w.apply(svc(replicas=2))
    last = passes(w)[-1]
    done = ConvergeOutcome(ExitCode.OK, Ending.CONVERGED, 2, 300.0)
    assert summary_line(done, last, 14.2) == "converged: 1 service, 2 tasks healthy in 14s"
    waits = ("web.3: task 1a2b starting (starting)", "web.4 pending: no host fits")
    late = ConvergeOutcome(ExitCode.NOT_CONVERGED, Ending.TIMED_OUT, 300, 300.0, waits)
    assert summary_line(late, last, 301.0) == (
        "not converged after 5m: waiting for web.3: task 1a2b starting (starting); "
        "web.4 pending: no host fits"
    )
    paused = ConvergeOutcome(
        ExitCode.FAILED, Ending.STOPPED, 3, 300.0, why="failed: web rollout paused"
    )
    assert summary_line(paused, last, 12.0) == "failed: web rollout paused (after 3 passes, 12s)"
    back = [FailedUpdate("web", "rolled back: web.1 unhealthy")]
    assert summary_line(done, last, 9.0, back) == (
        "failed: the update of web was rolled back (after 9s)"
    )


def test_a_failed_ending_goes_to_stderr_with_the_reason_first() -> None:
    console, screen = terminal()
    errors, errs = terminal()
    view = LiveProgress(console, errors, print, clock=lambda: 0.0)
    paused = ConvergeOutcome(ExitCode.FAILED, Ending.STOPPED, 1, 60.0, why="failed: web.1 Failed")
    with view:
        pass
    view.finish(paused, [FailedUpdate("web", "rolled back: unhealthy")])
    assert screen.getvalue() == ""
    assert errs.getvalue().splitlines() == [
        "minidock: web: rolled back: unhealthy",
        "failed: the update of web was rolled back (after 0s)",
    ]


def test_the_live_view_is_for_a_terminal_only() -> None:
    term, _ = terminal()
    pipe = Console(file=io.StringIO())
    ending: list[ConvergeOutcome] = []
    assert isinstance(progress_view(term, term, print, ending.append, live=True), LiveProgress)
    assert isinstance(progress_view(pipe, pipe, print, ending.append, live=True), PlainProgress)
    plain = progress_view(term, term, print, ending.append, live=False)  # -q, or no wait
    assert isinstance(plain, PlainProgress)
    outcome = ConvergeOutcome(ExitCode.OK, Ending.CONVERGED, 1, 60.0)
    with plain:
        plain.finish(outcome)
    assert ending == [outcome]  # the CLI's own ending, unchanged


def test_an_interrupted_view_ends_and_gives_the_cursor_back(make: MakeRunner) -> None:
    """The CLI runs the use case inside the view (minidock.cli.run): Ctrl-C in the middle
    of the passes ends the live region and shows the cursor again."""
    w = make(2)
    w.apply(svc(replicas=2))
    w.step()
    console, screen = terminal()
    view = LiveProgress(console, console, print, clock=lambda: 0.0)

    async def a_pass_then_ctrl_c() -> None:
        view.report(PassDone(w.results[0], verdict(w.results[0])))
        assert view.live is not None
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        minidock.cli.run(a_pass_then_ctrl_c(), view)
    assert view.live is None
    assert screen.getvalue().count("\x1b[?25l") == screen.getvalue().count("\x1b[?25h") == 1


def test_a_store_of_several_clusters_draws_a_table_for_each_and_names_their_lines(
    make: MakeRunner,
) -> None:
    w = make(3)
    w.apply(svc(replicas=2, health=HC))
    first, *_, last = passes(w)
    console, screen = terminal(100)
    errors, _ = terminal(100)
    view = LiveProgress(console, errors, lambda p: None, clock=lambda: 0.0)
    with view:
        for result in (first, last):
            view.report(PassDone(result, verdict(result), "shop"))
            view.report(PassDone(result, verdict(result), "blog"))
    view.finish(ConvergeOutcome(ExitCode.OK, Ending.CONVERGED, 4, 60.0))
    shown = lines_of(screen.getvalue())
    assert "cluster shop, pass 3" in shown
    assert "cluster blog, pass 4" in shown
    started = [line for line in shown.splitlines() if " started web." in line]
    assert {line.split(" ")[0] for line in started} == {"[shop]", "[blog]"}
    assert shown.splitlines()[-1] == "converged: 2 services, 4 tasks healthy in 0s"
