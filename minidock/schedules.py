"""Cron expressions read with croniter in the job's timezone (zoneinfo): the scheduled
times around now that the pure core decides from (`core.schedule.Times`), and the check
the spec loader makes of an expression (docs/jobs.md)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from minidock.core.schedule import Times
from minidock.model import Schedule

__all__ = ["cron_problem", "times", "timezone_problem"]


def times(schedule: Schedule, now: float) -> Times:
    """The latest scheduled time at or before `now` and the next one after it."""
    zone = ZoneInfo(schedule.timezone)
    after = croniter(schedule.cron, datetime.fromtimestamp(now, zone)).get_next(float)
    latest = croniter(schedule.cron, datetime.fromtimestamp(after, zone)).get_prev(float)
    if latest > now:  # `now` is itself not a scheduled time: the one before it
        latest = croniter(schedule.cron, datetime.fromtimestamp(latest, zone)).get_prev(float)
    return Times(float(latest), float(after))


def cron_problem(expression: str) -> str:
    """Why `expression` is not a five-field cron expression croniter reads ("" if it is)."""
    if len(expression.split()) != 5:
        return "use five fields (minute hour day-of-month month day-of-week), e.g. '0 3 * * *'"
    if not croniter.is_valid(expression):
        return f"{expression!r} is not a cron expression croniter reads, e.g. '*/15 * * * *'"
    return ""


def timezone_problem(name: str) -> str:
    """Why `name` is not an IANA timezone this machine knows ("" if it is)."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown timezone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'"
    return ""
