"""Scheduled jobs (`schedule = "0 3 * * *"`): when a pass starts a run, and each run's record.
Pure: the schedule's times come in as numbers (the adapter reads the cron expression in
its timezone: minidock.schedules), like the clock.

A job keeps `due`, the latest scheduled time it has accounted for. A pass at or after a
later scheduled time starts one run (however many times were missed since: never a
burst) and moves `due` there; under `concurrency = "forbid"` a run still going makes it
a skipped run instead. The run's id is a hash of the job and its scheduled time, so a pass
that repeats the decision (a crash between its record and its act) names the same
container, and `pending` keeps each run decided and not yet recorded, so that one never
started is started again rather than lost, and one started that no host shows any more
(while every host answers) is recorded as lost. Finished runs are recorded (exit code,
duration, output tail), the last `HISTORY` kept; the latest one failing counts toward
exit 1 until a later run succeeds (docs/jobs.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from minidock.model import Event, OneOff, Schedule, Service

__all__ = [
    "HISTORY",
    "JOB_KIND",
    "JobRecord",
    "JobRun",
    "JobStep",
    "PendingRun",
    "Times",
    "job_run_id",
    "record_run",
    "step",
    "unscheduled",
]

HISTORY = 10  # finished runs kept per job
JOB_KIND = "job"  # the minidock.oneoff label of a scheduled job's run


@dataclass(frozen=True)
class JobRun:
    """One finished run: `exit_code` None when it never started (`tail` says why)."""

    run: str
    due: float  # the scheduled time it ran for
    started: float
    finished: float
    exit_code: int | None
    tail: str = ""  # the last lines of its output, masked

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    @property
    def duration(self) -> float:
        return max(0.0, self.finished - self.started)


@dataclass(frozen=True)
class PendingRun:
    """A run decided and not yet recorded: `started` once a pass has started it."""

    run: str
    due: float
    started: bool = False


@dataclass(frozen=True)
class JobRecord:
    """A scheduled job's durable side (in its ServiceState)."""

    due: float = 0.0  # the latest scheduled time accounted for (0: not armed yet)
    pending: tuple[PendingRun, ...] = ()  # runs decided and not yet recorded
    runs: tuple[JobRun, ...] = ()  # finished runs, newest last, at most HISTORY
    skipped: int = 0  # runs skipped under concurrency = "forbid", all told
    # why its schedule gives no time now ("": it does), said once per reason
    unscheduled: str = ""

    @property
    def last(self) -> JobRun | None:
        return self.runs[-1] if self.runs else None

    @property
    def failing(self) -> bool:
        """Whether its latest run failed, or its schedule gives no time (exit 1 until a
        later run succeeds, or the schedule gives times again)."""
        return bool(self.unscheduled) or (self.last is not None and not self.last.succeeded)

    def due_of(self, run: str) -> float | None:
        return next((p.due for p in self.pending if p.run == run), None)

    def started(self, run: str) -> JobRecord:
        """The record once `run` has been started on a host."""
        marked = tuple(replace(p, started=True) if p.run == run else p for p in self.pending)
        return replace(self, pending=marked)

    def across(self, old_schedule: Schedule | None, new_schedule: Schedule | None) -> JobRecord:
        """The record across a change of spec (an apply or a rollback): its history and
        runs in flight stay; a new schedule is armed afresh (its first run is its next
        time, not one it would have had before the change)."""
        return self if old_schedule == new_schedule else replace(self, due=0.0)


@dataclass(frozen=True)
class Times:
    """The job's schedule around now: the latest scheduled time at or before now, and the
    next one after it (epoch seconds)."""

    latest: float
    next: float


@dataclass(frozen=True)
class JobStep:
    """What one pass decided for a job: its next record, the runs to start (decided now,
    or decided before and never started), the runs lost (started, gone from every host
    while all answered) and the events."""

    record: JobRecord
    starts: tuple[PendingRun, ...] = ()
    lost: tuple[PendingRun, ...] = ()
    events: tuple[Event, ...] = ()


def job_run_id(cluster: str, service: str, due: float) -> str:
    """The run of a job's scheduled time: the same decision names the same container."""
    return hashlib.sha256(f"{cluster}/{service}/job/{due:.3f}".encode()).hexdigest()[:10]


def step(
    cluster: str,
    job: Service,
    record: JobRecord,
    runs: Sequence[OneOff],
    times: Times,
    now: float,
    *,
    all_seen: bool = True,
) -> JobStep:
    """One pass's decision for a job: arm a new one at its latest time (no run for a
    time before it was applied); start the run of a later scheduled time, once, or skip
    it while one runs under "forbid"; start again a run decided but never started. A run
    started but on no host while every host answered (`all_seen`) is lost."""
    assert job.schedule is not None
    seen = {o.run for o in runs}
    again = tuple(p for p in record.pending if not p.started and p.run not in seen)
    lost = tuple(p for p in record.pending if p.started and p.run not in seen) if all_seen else ()
    if record.due == 0.0:
        return JobStep(replace(record, due=times.latest), again, lost)
    if times.latest <= record.due:
        return JobStep(record, again, lost)
    if job.desired == "stopped":  # a stopped job starts nothing: its times pass
        return JobStep(replace(record, due=times.latest), again, lost)
    busy = [o.name for o in runs if not o.finished]
    busy += [p.run for p in record.pending if p.run not in seen and p not in lost]
    if job.schedule.concurrency == "forbid" and busy:
        line = f"run of {times.latest:.0f} skipped: {busy[0]} still runs (concurrency forbid)"
        skipped = replace(record, due=times.latest, skipped=record.skipped + 1)
        return JobStep(skipped, again, lost, (Event(now, "job-skipped", line, job.name),))
    run = PendingRun(job_run_id(cluster, job.name, times.latest), times.latest)
    decided = replace(record, due=times.latest, pending=(*record.pending, run))
    return JobStep(decided, (*again, run), lost)


def unscheduled(record: JobRecord, job: str, why: str, now: float) -> JobStep:
    """A pass at which the job's schedule gives no time (`why`): no run is decided, runs
    decided before are neither started nor lost; `job-schedule-failed` is said once per
    reason (docs/jobs.md#schedules-that-never-fire)."""
    if record.unscheduled == why:
        return JobStep(record)
    said = Event(now, "job-schedule-failed", f"no run decided: {why}", job)
    return JobStep(replace(record, unscheduled=why), events=(said,))


def record_run(record: JobRecord, run: JobRun, now: float) -> tuple[JobRecord, Event | None]:
    """A finished run into the record (once: a run already recorded changes nothing), out
    of the pending ones, the last HISTORY kept, and its event: `job-succeeded` or
    `job-failed`."""
    if any(r.run == run.run for r in record.runs):
        return record, None
    pending = tuple(p for p in record.pending if p.run != run.run)
    after = replace(record, runs=(*record.runs, run)[-HISTORY:], pending=pending)
    if run.succeeded:
        line = f"run {run.run} succeeded ({run.duration:.1f}s)"
        return after, Event(now, "job-succeeded", line, task=run.run)
    said = f"exit {run.exit_code}" if run.exit_code is not None else "did not run"
    line = f"run {run.run} failed ({said})" + (f": {run.tail}" if run.tail else "")
    return after, Event(now, "job-failed", line, task=run.run)
