"""Scheduled jobs (docs/jobs.md): when passes start runs, and each run's record. The pure
decision (core/schedule.py) over a schedule read with croniter (minidock.schedules)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.core import intents
from minidock.core.schedule import (
    HISTORY,
    JobRecord,
    JobRun,
    PendingRun,
    Times,
    job_run_id,
    record_run,
    step,
)
from minidock.documents.status import status_document
from minidock.model import OneOff, Schedule, Service
from minidock.runner import PassResult
from minidock.schedules import FIRING_YEARS, cron_problem, job_times, times, timezone_problem
from minidock.spec import SpecError, load, load_cluster
from minidock.usecases import ExitCode, verdict, why
from minidock.usecases.passes import one_pass
from tests.sim import RunnerWorld, hosts

EVERY_MINUTE = Service("report", "web:5", replicas=0, schedule=Schedule("* * * * *"))
ALLOW = replace(EVERY_MINUTE, schedule=Schedule("* * * * *", concurrency="allow"))


def minute(now: float) -> Times:
    return times(Schedule("* * * * *"), now)


def each_minute(now: float) -> Times:
    """`* * * * *` as arithmetic (what `times` reads it as, without croniter's cost)."""
    latest = now // 60 * 60
    return Times(latest, latest + 60)


def run_of(run: str, state: str = "running") -> OneOff:
    return OneOff("id", f"report.job.{run}", "h", "report", run, "job", state)  # type: ignore[arg-type]


def test_times_are_the_latest_at_or_before_now_and_the_next_in_the_jobs_timezone() -> None:
    assert times(Schedule("* * * * *"), 600.0) == Times(600.0, 660.0)
    assert times(Schedule("* * * * *"), 659.9) == Times(600.0, 660.0)
    paris = times(Schedule("0 3 * * *", "Europe/Paris"), 1764644400.5)  # 04:00 in Paris
    assert paris == Times(1764640800.0, 1764727200.0)  # 03:00 today, 03:00 tomorrow
    assert cron_problem("0 3 * * *") == ""
    assert "five fields" in cron_problem("0 0 3 * * *")
    assert "not a cron expression" in cron_problem("61 3 * * *")
    assert timezone_problem("Europe/Paris") == ""
    assert "unknown timezone 'Mars/Olympus'" in timezone_problem("Mars/Olympus")


DEC_2026 = 1796083200.0  # 2026-12-01 00:00 UTC
MARCH_2096 = 3981398400.0  # 2096-03-01 00:00 UTC: the next 29 February is in 2104


def test_a_schedule_with_no_time_within_the_bound_is_refused_saying_why() -> None:
    """Within FIRING_YEARS (8) of now, both ways, in the job's timezone: a day no month
    has never comes; one every 28 years is refused; 29 February, the rarest, is not."""
    assert FIRING_YEARS == 8
    never = cron_problem("0 0 31 2 *", "UTC", DEC_2026)
    assert never == (
        "'0 0 31 2 *' never fires: no date matches it (a day its months do not have, like "
        "31 February); give days every month named has, e.g. '0 3 28 2 *'"
    )
    assert "never fires" in cron_problem("0 0 31 4,6,9,11 *", "Europe/Paris", DEC_2026)
    assert cron_problem("0 0 * 2 1#5", "UTC", DEC_2026) == (  # the fifth Monday of February
        "'0 0 * 2 1#5' next fires on 2044-02-29 00:00 UTC, more than 8 years away: give one "
        "that fires within that, e.g. '0 3 * 2 1' (February's Mondays)"
    )
    for now in (DEC_2026, MARCH_2096):  # 2096 -> 2104: no leap day in 2100
        assert cron_problem("0 0 29 2 *", "UTC", now) == ""
        assert cron_problem("0 0 29 2 *", "Pacific/Auckland", now) == ""
    assert cron_problem("0 0 31 2 1", "UTC", DEC_2026) == ""  # or every Monday (cron's OR)
    assert cron_problem("0 3 * * *", "Mars/Olympus", DEC_2026) == ""  # timezone_problem's
    assert "has a random field (R)" in cron_problem("R 3 * * *", "UTC", DEC_2026)
    assert "has a random field (R)" in cron_problem("0 r/2 * * *", "UTC", DEC_2026)
    assert cron_problem("0 3 * mar fri", "UTC", DEC_2026) == ""  # names with an R in them


def test_a_timezone_that_is_a_directory_of_the_tz_database_is_unknown_not_a_traceback() -> None:
    assert "unknown timezone 'America'" in timezone_problem("America")


def test_job_times_gives_each_job_its_times_or_one_line_saying_why_not() -> None:
    now = 1764644400.5
    specs = [
        replace(EVERY_MINUTE, name="good"),
        replace(EVERY_MINUTE, name="feb31", schedule=Schedule("0 0 31 2 *")),
        replace(EVERY_MINUTE, name="mars", schedule=Schedule("0 3 * * *", "Mars/Olympus")),
        replace(EVERY_MINUTE, name="hashed", schedule=Schedule("H 3 * * *")),
        Service("web", "web:5"),  # not a job
    ]
    assert job_times(specs, now) == {
        "good": Times(1764644400.0, 1764644460.0),
        "feb31": "schedule '0 0 31 2 *' (UTC) has no scheduled time within 8 years",
        "mars": "schedule '0 3 * * *' (Mars/Olympus): unknown timezone 'Mars/Olympus': use an "
        "IANA name such as 'UTC' or 'Europe/Paris'",
        "hashed": "schedule 'H 3 * * *' (UTC) cannot be read: Hashed definitions must include "
        "hash_id",
    }


def test_a_schedule_that_never_fires_is_refused_at_load_naming_its_key(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "host1"\naddress = "10.0.0.1"\n')
    toml = tmp_path / "cluster.toml"
    toml.write_text(
        'cluster = "prod"\ninventory = "inventory.toml"\n[services.report]\nimage = "web:5"\n'
        'schedule = "0 0 30 2 *"\ntimezone = "Europe/Paris"\n'
    )
    with pytest.raises(SpecError) as err:
        load(toml)
    assert str(err.value).startswith(
        f"{toml}: services.report.schedule: '0 0 30 2 *' never fires: no date matches it"
    )
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "name: prod\nx-minidock:\n  inventory: inventory.toml\nservices:\n  report:\n"
        "    image: web:5\n    x-minidock:\n      schedule: '0 0 31 2 *'\n"
    )
    with pytest.raises(SpecError) as err:
        load(compose)
    assert str(err.value).startswith(
        f"{compose}: services.report.x-minidock.schedule (line 8): '0 0 31 2 *' never fires"
    )


def test_a_new_job_is_armed_then_runs_once_per_scheduled_time() -> None:
    armed = step("c", EVERY_MINUTE, JobRecord(), (), minute(630.0), 630.0)
    assert (armed.starts, armed.record.due) == ((), 600.0)  # no run for a time before it
    assert step("c", EVERY_MINUTE, armed.record, (), minute(650.0), 650.0).starts == ()
    due = step("c", EVERY_MINUTE, armed.record, (), minute(661.0), 661.0)
    (run,) = due.starts
    assert run == PendingRun(job_run_id("c", "report", 660.0), 660.0)
    assert (due.record.due, due.record.pending) == (660.0, (run,))
    # a crash between the record and the act: the next pass starts the same run again
    assert step("c", EVERY_MINUTE, due.record, (), minute(670.0), 670.0).starts == (run,)
    # started: not again, even while no host shows it yet
    started = due.record.started(run.run)
    assert step("c", EVERY_MINUTE, started, (), minute(670.0), 670.0, all_seen=False).starts == ()
    # started, and gone from every host while all answered: lost
    assert step("c", EVERY_MINUTE, started, (), minute(670.0), 670.0).lost == (
        replace(run, started=True),
    )
    seen = step("c", EVERY_MINUTE, started, (run_of(run.run),), minute(675.0), 675.0)
    assert (seen.starts, seen.lost) == ((), ())


def test_a_stopped_job_lets_its_times_pass() -> None:
    stopped = replace(EVERY_MINUTE, desired="stopped")
    decided = step("c", stopped, JobRecord(due=600.0), (), minute(700.0), 700.0)
    assert (decided.starts, decided.record.due) == ((), 660.0)


def test_a_run_still_going_skips_the_next_time_under_forbid_but_not_under_allow() -> None:
    first = step("c", EVERY_MINUTE, JobRecord(due=600.0), (), minute(660.0), 660.0)
    (run,) = first.starts
    record = first.record.started(run.run)
    going = (run_of(run.run),)
    skipped = step("c", EVERY_MINUTE, record, going, minute(720.0), 720.0)
    assert skipped.starts == ()
    assert [e.kind for e in skipped.events] == ["job-skipped"]
    assert (skipped.record.due, skipped.record.skipped) == (720.0, 1)
    # the run has finished (a pass collects it): the next time is not skipped
    done = step("c", EVERY_MINUTE, record, (run_of(run.run, "exited"),), minute(720.0), 720.0)
    assert len(done.starts) == 1
    allowed = step("c", ALLOW, record, going, minute(720.0), 720.0)
    assert [p.run for p in allowed.starts] == [job_run_id("c", "report", 720.0)]


@settings(max_examples=60, deadline=None)  # a loaded machine: values, not speed
@given(st.lists(st.floats(min_value=1.0, max_value=900.0), min_size=1, max_size=30))
def test_passes_start_at_most_one_run_per_scheduled_time_and_one_after_a_gap(
    gaps: list[float],
) -> None:
    """Whatever the passes' times: never two runs in one pass, never two for one scheduled
    time, and a run for every pass that comes after a scheduled time it has not run for."""
    now, record = 6000.0, JobRecord(due=6000.0)
    started: list[float] = []
    for gap in gaps:
        now += gap
        decided = step("c", ALLOW, record, (), each_minute(now), now)
        crossed = each_minute(now).latest > record.due
        assert len(decided.starts) == (1 if crossed else 0)
        record = decided.record
        for run in decided.starts:
            started.append(run.due)
            record, _ = record_run(record, JobRun(run.run, run.due, now, now + 1, 0), now)
    assert len(started) == len(set(started))
    assert started == sorted(started)
    assert all(minute(t) == each_minute(t) for t in (*started, now))


def test_runs_are_recorded_once_the_last_ones_kept_and_a_failure_lasts_until_a_success() -> None:
    record = JobRecord(due=600.0)
    for n in range(HISTORY + 2):
        record, event = record_run(record, JobRun(f"r{n}", 600.0 + n, 0.0, 2.5, 0), 9.0)
        assert event is not None
        assert event.kind == "job-succeeded"
    assert len(record.runs) == HISTORY
    assert record.runs[0].run == "r2"
    failed, event = record_run(record, JobRun("bad", 700.0, 0.0, 1.0, 3, "boom"), 9.0)
    assert failed.failing
    assert event is not None
    assert (event.kind, event.message) == ("job-failed", "run bad failed (exit 3): boom")
    pending = replace(failed, pending=(PendingRun("lost", 760.0, started=True),))
    never, _ = record_run(pending, JobRun("lost", 760.0, 0.0, 0.0, None, "no host"), 9.0)
    assert never.pending == ()
    assert record_run(failed, JobRun("bad", 700.0, 0.0, 1.0, 3), 9.0) == (failed, None)
    assert never.failing
    fixed, _ = record_run(never, JobRun("good", 820.0, 0.0, 1.0, 0), 9.0)
    assert not fixed.failing


def test_a_job_in_a_cluster_file_is_a_service_with_a_schedule_and_no_slots(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "host1"\naddress = "10.0.0.1"\n')
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        'cluster = "prod"\ninventory = "inventory.toml"\n[services.report]\nimage = "web:5"\n'
        'command = ["./report"]\nschedule = "0 3 * * *"\ntimezone = "Europe/Paris"\n'
        'concurrency = "allow"\n[services.web]\nimage = "web:5"\n'
    )
    report, web = load_cluster(spec).services
    assert report.schedule == Schedule("0 3 * * *", "Europe/Paris", "allow")
    assert report.replicas == 0
    assert (web.schedule, web.replicas) == (None, 1)


# -- the jobs' steps (core/decide.py, minidock.act.carry) through the real passes, over FakeDocker
def job(image: str, concurrency: str = "forbid") -> Service:
    schedule = Schedule("* * * * *", concurrency=concurrency)  # type: ignore[arg-type]
    return Service("report", image, replicas=0, command=("./report",), schedule=schedule)


def passes(world: RunnerWorld, until: float, every: float) -> list[PassResult]:
    """Cron-like passes (the real pass and its jobs' part) every `every` s until `until`."""
    done = []
    while world.now < until:
        assert world.cluster is not None
        run = one_pass(
            world.cluster, world.inventory, world.store, world.executor, clock=world.clock
        )
        done.append(asyncio.run(run))
        world.docker.advance(every)
    return done


def kinds(world: RunnerWorld) -> list[str]:
    return [e.kind for e in world.events() if e.kind.startswith("job-")]


def test_a_job_every_minute_runs_once_a_minute_and_once_after_a_gap(tmp_path: Path) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state", now=1010.0)
    world.apply(job("tools:done"))
    passes(world, 1320.0, 10.0)  # armed at 960; the minutes 1020 ... 1260 come
    assert kinds(world) == ["job-started", "job-succeeded"] * 5
    record = world.state.services["report"].job
    assert [r.due for r in record.runs] == [1020.0, 1080.0, 1140.0, 1200.0, 1260.0]
    assert record.runs[-1].tail == "done"
    assert world.docker.names() == []  # each collected run was removed
    world.docker.advance(600.0)  # no pass for ten minutes: ten times missed
    results = passes(world, world.now + 20.0, 10.0)
    assert kinds(world)[10:] == ["job-started", "job-succeeded"]  # one run, not ten
    assert world.state.services["report"].job.runs[-1].due == 1920.0
    assert all(r.plan.state.services["report"].job.pending == () for r in results[1:])
    world.close()


def test_a_run_still_going_skips_its_next_times_under_forbid_and_not_under_allow(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "forbid", now=1010.0)
    world.apply(job("tools:1"))  # runs until stopped
    passes(world, 1200.0, 10.0)  # minutes 1020, 1080, 1140
    assert kinds(world) == ["job-started", "job-skipped", "job-skipped"]
    assert len(world.docker.names(status="running")) == 1
    assert world.state.services["report"].job.skipped == 2
    world.close()
    allowing = RunnerWorld(hosts(2), tmp_path / "allow", now=1010.0)
    allowing.apply(job("tools:1", "allow"))
    passes(allowing, 1200.0, 10.0)
    assert kinds(allowing) == ["job-started"] * 3
    assert len(allowing.docker.names(status="running")) == 3
    allowing.close()


def test_a_failed_run_is_exit_1_until_a_later_run_succeeds(tmp_path: Path) -> None:
    world = RunnerWorld(hosts(1), tmp_path / "state", now=1010.0)
    world.apply(job("crash:1"))
    results = passes(world, 1040.0, 10.0)
    assert kinds(world) == ["job-started", "job-failed"]
    assert verdict(results[-1]) == ExitCode.FAILED
    assert why(results[-1], ExitCode.FAILED) == "failed: report last run failed (exit 1)"
    world.apply(job("tools:done"))
    results = passes(world, 1100.0, 10.0)
    assert kinds(world)[-1] == "job-succeeded"
    assert verdict(results[-1]) == ExitCode.OK
    world.close()


def test_a_rollback_keeps_a_jobs_record_so_a_run_still_going_is_not_run_twice(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state", now=1010.0)
    world.apply(job("tools:1"))  # runs until stopped
    passes(world, 1030.0, 10.0)  # the 1020 run starts
    world.apply(job("tools:2"))  # an update: tools:1 is its previous spec
    world.state = intents.rollback(world.state, "report")
    record = world.state.services["report"].job
    assert [p.run for p in record.pending if p.started] != []  # the 1020 run, still going
    passes(world, 1150.0, 10.0)  # 1080 and 1140 come while it runs
    assert kinds(world) == ["job-started", "job-skipped", "job-skipped"]
    assert len(world.docker.names(status="running")) == 1
    other = replace(job("tools:1"), schedule=Schedule("*/5 * * * *"))
    assert record.across(job("tools:1").schedule, other.schedule).due == 0.0  # armed afresh
    world.close()


def test_a_pass_goes_on_past_a_job_whose_schedule_cannot_be_computed(tmp_path: Path) -> None:
    """A state stored before validate refused its schedule: each pass skips that job and
    says so (exit 1, a failure line), logs `job-schedule-failed` once per distinct
    reason, and runs every other job and task as if it were not there."""
    world = RunnerWorld(hosts(2), tmp_path / "state", now=1010.0)
    feb31 = replace(job("tools:done"), name="feb31", schedule=Schedule("0 0 31 2 *"))
    world.apply(feb31, job("tools:done"), Service("web", "web:5", replicas=2))
    results = passes(world, 1140.0, 10.0)
    line = "feb31: no run decided: schedule '0 0 31 2 *' (UTC) has no scheduled time within 8 years"
    assert all(r.failures == [] for r in results)  # no act failed: the job's schedule did
    assert {verdict(r) for r in results} == {ExitCode.FAILED}
    assert why(results[-1], ExitCode.FAILED) == f"failed: {line}"
    assert kinds(world) == ["job-schedule-failed"] + ["job-started", "job-succeeded"] * 2
    assert len(world.docker.names(status="running")) == 2  # web's tasks
    (logged,) = [e for e in world.events() if e.kind == "job-schedule-failed"]
    assert (logged.service, logged.message) == ("feb31", line.removeprefix("feb31: "))
    # another reason (the job's timezone gone from this machine's tz database): once again
    state = world.state
    ss = state.services["feb31"]
    gone = replace(ss.spec, schedule=Schedule("0 3 * * *", "Mars/Olympus"))
    world.state = replace(state, services={**state.services, "feb31": replace(ss, spec=gone)})
    passes(world, 1200.0, 10.0)
    assert kinds(world)[5:] == ["job-schedule-failed", "job-started", "job-succeeded"]
    said = [e for e in world.events() if e.kind == "job-schedule-failed"]
    assert "unknown timezone 'Mars/Olympus'" in said[-1].message
    # status shows it with no next time rather than raising
    armed = replace(world.state.services["feb31"], job=JobRecord(due=960.0))
    world.state = replace(world.state, services={**world.state.services, "feb31": armed})
    doc = status_document(world.state, world.inventory, world.observe(), world.plan())
    (summary,) = [s.job for s in doc.services if s.name == "feb31"]
    assert summary is not None
    assert summary.next is None
    world.close()
