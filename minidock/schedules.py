"""Cron expressions read with croniter in the job's timezone (zoneinfo): the scheduled
times around now that the pure core decides from (`core.schedule.Times`), the check the
spec loader makes of an expression, and each job's times for a pass, where a schedule
that cannot be read is one job's problem, never the pass's (docs/jobs.md)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from minidock.core.saving import backup_key, verify_key
from minidock.core.schedule import Times
from minidock.model import Schedule, Service

if TYPE_CHECKING:
    from croniter import croniter

# croniter (with dateutil under it) is imported in the functions that read an expression,
# not with this module: every `minidock` process imports this module (the runner and
# status do), and only a spec with a scheduled job reads one (docs/testing.md).

__all__ = [
    "FIRING_YEARS",
    "backup_lines",
    "backup_times",
    "cron_problem",
    "job_times",
    "times",
    "timezone_problem",
]

# A schedule must have a scheduled time within this many calendar years of now, before
# and after (croniter's max_years_between_matches). The smallest bound that refuses no
# plain five-field expression that fires at all: 29 February, the rarest, comes every
# 4 years, every 8 across 2100. Past it: a day no month has (31 February) never comes,
# and `#` can ask for one every 28 years (the fifth Monday of February), almost surely
# a mistake (docs/jobs.md#schedules-that-never-fire).
FIRING_YEARS = 8

# Errors croniter and zoneinfo raise on an expression or a zone they cannot use (the
# croniter errors are ValueErrors; ZoneInfoNotFoundError is a KeyError, a zone name that
# is a directory of the tz database an OSError; an instant past year 9999 an
# OverflowError): a pass catches them per job.
_READ_ERRORS = (ValueError, TypeError, LookupError, OSError, ArithmeticError)


def _cron(schedule: Schedule, at: float, *, bounded: bool = True) -> croniter:
    from croniter import croniter  # lazy: see the top of this module

    zone = ZoneInfo(schedule.timezone)
    years = FIRING_YEARS if bounded else None
    start = datetime.fromtimestamp(at, zone)
    return croniter(schedule.cron, start, max_years_between_matches=years)


def times(schedule: Schedule, now: float) -> Times:
    """The latest scheduled time at or before `now` and the next one after it. Raises
    croniter's CroniterBadDateError when either is more than FIRING_YEARS away (and
    croniter's or zoneinfo's errors on what they cannot read: `job_times` catches them)."""
    after = _cron(schedule, now).get_next(float)
    latest = _cron(schedule, after).get_prev(float)
    if latest > now:  # `now` is itself not a scheduled time: the one before it
        latest = _cron(schedule, latest).get_prev(float)
    return Times(float(latest), float(after))


def job_times(specs: Iterable[Service], now: float) -> dict[str, Times | str]:
    """Each scheduled job of `specs` by name: its times around `now`, or one line saying
    why they cannot be computed (a state stored before `validate` refused its schedule,
    a timezone gone from this machine's tz database). A pass skips that job and goes on."""
    found: dict[str, Times | str] = {}
    for spec in specs:
        if spec.schedule is None:
            continue
        try:
            found[spec.name] = times(spec.schedule, now)
        except _READ_ERRORS as exc:
            found[spec.name] = _unreadable(spec.schedule, exc)
    return found


def backup_times(specs: Iterable[Service], now: float) -> dict[str, Times | str]:
    """Each service's `backup.schedule` and `backup.verify_schedule` times around `now`
    (or why they cannot be had), under the keys the core reads them by
    (core.saving.backup_key, verify_key): decided in the pass with the jobs' times."""
    found: dict[str, Times | str] = {}
    for spec in specs:
        policy = spec.backup
        if policy is None:
            continue
        for key, cron in ((backup_key, policy.schedule), (verify_key, policy.verify_schedule)):
            if cron is None:
                continue
            schedule = Schedule(cron, policy.timezone)
            try:
                found[key(spec.name)] = times(schedule, now)
            except _READ_ERRORS as exc:
                found[key(spec.name)] = _unreadable(schedule, exc)
    return found


def backup_lines(specs: Iterable[Service], now: float) -> list[str]:
    """When each service's scheduled backup and restore drill next run after `now`, one
    line each, as `validate` and `plan` say it ("db: backed up on '*/15 * * * *' (UTC),
    next 2026-12-05 04:45:00 UTC"); a schedule that gives no time says why. Passes run
    them: `reconcile` from cron or `watch` (docs/backups.md#scheduled-backups)."""
    lines: list[str] = []
    found = backup_times(specs, now)
    for spec in specs:
        policy = spec.backup
        if policy is None:
            continue
        for key, cron, what in (
            (backup_key, policy.schedule, "backed up"),
            (verify_key, policy.verify_schedule, "restore drill"),
        ):
            times_of = found.get(key(spec.name)) if cron is not None else None
            if times_of is None:
                continue
            said = f"{spec.name}: {what} on {cron!r} ({policy.timezone})"
            if isinstance(times_of, str):
                lines.append(f"{said}: {times_of}")
                continue
            at = datetime.fromtimestamp(times_of.next, ZoneInfo("UTC"))
            lines.append(f"{said}, next {at.strftime('%Y-%m-%d %H:%M:%S')} UTC")
    return lines


def _unreadable(schedule: Schedule, exc: Exception) -> str:
    """Why `schedule` has no times, in one line that is the same at every pass."""
    from croniter import CroniterBadDateError  # lazy: see the top of this module

    said = f"schedule {schedule.cron!r} ({schedule.timezone})"
    if isinstance(exc, CroniterBadDateError):
        return f"{said} has no scheduled time within {FIRING_YEARS} years"
    zone = timezone_problem(schedule.timezone)
    if zone:
        return f"{said}: {zone}"
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return f"{said} cannot be read: {detail}"


def cron_problem(expression: str, timezone: str = "UTC", now: float | None = None) -> str:
    """Why `expression` is not a schedule MiniDock runs ("" if it is): five fields that
    croniter reads, with no random field, and a scheduled time in `timezone` within
    FIRING_YEARS of `now` (default: the current time) both ways. An unknown `timezone` is
    `timezone_problem`'s to say: the time is then not checked."""
    from croniter import croniter  # lazy: see the top of this module

    if len(expression.split()) != 5:
        return "use five fields (minute hour day-of-month month day-of-week), e.g. '0 3 * * *'"
    if not croniter.is_valid(expression):
        return f"{expression!r} is not a cron expression croniter reads, e.g. '*/15 * * * *'"
    if _random(expression):
        return (
            f"{expression!r} has a random field (R): croniter draws it again at each "
            "reading, so each pass would see other times; give fixed values, e.g. '17 3 * * *'"
        )
    if timezone_problem(timezone):
        return ""
    return _firing_problem(Schedule(expression, timezone), time.time() if now is None else now)


def _random(expression: str) -> bool:
    """Whether a field of `expression` is croniter's `R` (a value drawn at random)."""
    from croniter.croniter import hash_expression_re  # lazy: see the top of this module

    items = (item for field in expression.lower().split() for item in field.split(","))
    return any(
        (found := hash_expression_re.match(item)) is not None and found["hash_type"] == "r"
        for item in items
    )


def _firing_problem(schedule: Schedule, now: float) -> str:
    from croniter import CroniterBadDateError  # lazy: see the top of this module

    try:
        times(schedule, now)
    except CroniterBadDateError:
        pass
    else:
        return ""
    cron, zone = schedule.cron, schedule.timezone
    try:
        later = _cron(schedule, now, bounded=False).get_next(datetime)
    except CroniterBadDateError:
        return (
            f"{cron!r} never fires: no date matches it (a day its months do not have, "
            "like 31 February); give days every month named has, e.g. '0 3 28 2 *'"
        )
    return (
        f"{cron!r} next fires on {later:%Y-%m-%d %H:%M} {zone}, more than {FIRING_YEARS} "
        "years away: give one that fires within that, e.g. '0 3 * 2 1' (February's Mondays)"
    )


def timezone_problem(name: str) -> str:
    """Why `name` is not an IANA timezone this machine knows ("" if it is)."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a tz database directory
        return f"unknown timezone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'"
    return ""
