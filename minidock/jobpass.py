"""A pass's work for the scheduled jobs, after its tasks' (docs/jobs.md): decide each job's
step (core/schedule.py) and record it, collect the runs that finished (their output tail
read and recorded, then the container removed), then start the runs decided, each as a
one-off task placed by the scheduler. Every decision is committed before it is acted on,
and every collection recorded before the container goes, so a kill -9 anywhere loses no
run and starts none twice (a run's name is its scheduled time's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from minidock.core import ControllerState
from minidock.core.jobs import oneoff_spec, place_oneoff
from minidock.core.schedule import JOB_KIND, JobRecord, JobRun, PendingRun, record_run, step
from minidock.jobs import (
    OneOffFailed,
    OneOffTask,
    create_oneoff,
    output_tail,
    remove_oneoff,
    start_detached,
)
from minidock.masking import Masker, masker_for
from minidock.model import Cluster, Event, Inventory, Observed, OneOff
from minidock.push import ControllerEngine
from minidock.runner import PassResult
from minidock.schedules import job_times
from minidock.ssh import CommandTimeout, Executor, Unreachable
from minidock.store import Store

__all__ = ["run_jobs"]


@dataclass
class _Pass:
    """The job pass's inputs, and the state and lines it builds."""

    cluster: Cluster
    inventory: Inventory
    store: Store
    executor: Executor
    observed: Observed
    now: float
    mask: Masker
    engine: ControllerEngine | None
    state: ControllerState
    events: list[Event] = field(default_factory=list)
    committed: int = 0  # events already committed
    done: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def runs(self, job: str) -> list[OneOff]:
        return [
            o
            for seen in self.observed.hosts.values()
            if seen.ok
            for o in seen.oneoffs
            if o.service == job and o.kind == JOB_KIND
        ]

    def record(self, job: str) -> JobRecord:
        return self.state.services[job].job

    def keep(self, job: str, record: JobRecord, events: Sequence[Event | None] = ()) -> None:
        """The job's record, and its events (masked, their lines reported)."""
        ss = replace(self.state.services[job], job=record)
        self.state = replace(self.state, services={**self.state.services, job: ss})
        for e in events:
            if e is not None:
                line = self.mask.line(e.message)
                self.events.append(replace(e, message=line, service=job))
                self.done.append(f"{job}: {line}")  # a failed run is not a failed act

    def commit(self) -> None:
        self.store.commit(self.state, self.events[self.committed :])
        self.committed = len(self.events)


async def run_jobs(
    cluster: Cluster,
    inventory: Inventory,
    store: Store,
    executor: Executor,
    result: PassResult,
    now: float,
    engine: ControllerEngine | None = None,
) -> PassResult:
    """The scheduled jobs' part of the pass whose `result` this is; the result with the
    jobs' state, lines and acts added. Nothing while the mass-loss guard holds."""
    state = result.plan.state
    jobs = sorted(n for n, ss in state.services.items() if ss.spec.schedule and not ss.removed)
    if not jobs or state.guard:
        return result
    mask = masker_for(store, state, result.observed, known=result.masker)  # the command's
    work = _Pass(cluster, inventory, store, executor, result.observed, now, mask, engine, state)
    starts = _decide(work, jobs)
    work.commit()
    await _collect(work, jobs)
    for job, run in starts:
        await _start(work, job, run)
    if starts:
        work.commit()
    result.plan = replace(result.plan, state=work.state)
    result.done += work.done
    result.failures += work.failures
    for e in work.events:
        result.acts[e.kind] = result.acts.get(e.kind, 0) + 1
    return result


def _decide(work: _Pass, jobs: list[str]) -> list[tuple[str, PendingRun]]:
    """Each job's step, kept in the state: the runs to start, and the lost ones recorded.
    A job whose times cannot be computed is skipped (`_unscheduled`); the others go on."""
    starts = []
    all_seen = all(o.ok for o in work.observed.hosts.values())
    computed = job_times((work.state.services[job].spec for job in jobs), work.now)
    for job in jobs:
        spec = work.state.services[job].spec
        due = computed[job]
        if isinstance(due, str):
            _unscheduled(work, job, due)
            continue
        runs = work.runs(job)
        decided = step(
            work.cluster.name, spec, work.record(job), runs, due, work.now, all_seen=all_seen
        )
        work.keep(job, decided.record, decided.events)
        for gone in decided.lost:
            lost = JobRun(gone.run, gone.due, work.now, work.now, None, "its container is gone")
            work.keep(job, *_recorded(work.record(job), lost, work.now))
        starts += [(job, run) for run in decided.starts]
    return starts


SCHEDULE_FAILED = "job-schedule-failed"
_LOOKBACK = 100  # the newest events read for the job's last `job-schedule-failed`


def _unscheduled(work: _Pass, job: str, reason: str) -> None:
    """A job whose times cannot be computed this pass: no run decided, a failure line
    (exit 1) every pass while it lasts, as for a failed run; the `job-schedule-failed`
    event once per distinct reason: not again while the job's newest such event among
    the log's last `_LOOKBACK` says the same (docs/jobs.md#schedules-that-never-fire)."""
    line = work.mask.line(f"no run decided: {reason}")
    work.failures.append(f"{job}: {line}")
    logged = [e for _, e in work.store.events(_LOOKBACK) if e.kind == SCHEDULE_FAILED]
    logged += [e for e in work.events if e.kind == SCHEDULE_FAILED]
    last = next((e for e in reversed(logged) if e.service == job), None)
    if last is None or last.message != line:
        work.events.append(Event(work.now, SCHEDULE_FAILED, line, job))  # printed as failed


def _recorded(record: JobRecord, run: JobRun, now: float) -> tuple[JobRecord, list[Event | None]]:
    after, event = record_run(record, run, now)
    return after, [event]


async def _collect(work: _Pass, jobs: list[str]) -> None:
    """Every finished run: its outcome recorded (committed), then its container removed."""
    finished = [(job, o) for job in jobs for o in work.runs(job) if o.finished]
    for job, o in finished:
        host = work.inventory.host(o.host)
        if host is None:
            continue
        work.store.fence()
        tail = work.mask.line(await output_tail(work.executor, host, o))
        started = o.started_at or work.now
        due = work.record(job).due_of(o.run) or started
        run = JobRun(o.run, due, started, o.finished_at or started, o.exit_code, tail)
        work.keep(job, *_recorded(work.record(job), run, work.now))
    if not finished:
        return
    work.commit()
    for _, o in finished:
        host = work.inventory.host(o.host)
        if host is not None:
            work.store.fence()
            left = await remove_oneoff(work.executor, host, o.name)
            if left:
                work.failures.append(work.mask(left))


async def _start(work: _Pass, job: str, run: PendingRun) -> None:
    """Start one decided run as a one-off task of the job's current spec, in the
    background; a run that cannot start is recorded as a failed run, saying why."""
    ss = work.state.services[job]
    spec = oneoff_spec(ss.spec, None)
    placed = place_oneoff(ss, spec, work.inventory, work.observed, work.state)
    host = work.inventory.host(placed.host) if placed.host else None
    try:
        if host is None:
            raise OneOffFailed(f"no host can run it: {placed.why}")
        task = OneOffTask(
            spec, work.cluster.name, host, run.run, JOB_KIND, placed.slot, work.state.controller
        )
        work.store.fence()
        if await create_oneoff(work.executor, work.inventory, task, work.engine):
            await start_detached(work.executor, task)
            line = f"started {task.name} on {host.name}"
            started = Event(work.now, "job-started", line, host=host.name, task=run.run)
            work.keep(job, work.record(job).started(run.run), [started])
        else:
            work.keep(job, work.record(job).started(run.run))
    except (OneOffFailed, Unreachable, CommandTimeout) as exc:
        lost = JobRun(run.run, run.due, work.now, work.now, None, work.mask.line(str(exc)))
        work.keep(job, *_recorded(work.record(job), lost, work.now))
