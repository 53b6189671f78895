"""Restart policy and health gates: when a task has failed, and when to try again. Pure.

Policy arithmetic only; the slot machine (`minidock.core.slots`) keeps the counts."""

from __future__ import annotations

from typing import Literal

from minidock.model import Container, RestartPolicy, Service


def should_restart(policy: RestartPolicy, exit_code: int | None) -> bool:
    """Judge an exited task by its exit code; None (never started) counts as a failure."""
    if policy.condition == "none":
        return False
    if policy.condition == "on-failure":
        return exit_code != 0
    return True


# The longest rest of a restart backoff the pass that decides a restart waits out in its
# acts (its start held, as Swarm's restart supervisor holds a new task's start): shorter
# than the default delay (1 s), so a first restart by default still waits for the pass
# its backoff's end wakes, and no pass holds the lock long for a backoff.
CARRIED_BACKOFF = 0.5


def carried(next_start: float, now: float) -> float | None:
    """Seconds a start decided `now` waits for its slot's backoff to end at `next_start`:
    0 when it has ended, None when longer than CARRIED_BACKOFF (a later pass starts it)."""
    left = next_start - now
    if left > CARRIED_BACKOFF:
        return None
    return max(0.0, left)


def backoff(policy: RestartPolicy, attempts: int) -> float:
    """Delay before the next try after `attempts` failures: doubles from delay to max_delay."""
    if attempts <= 0:
        return 0.0
    return float(min(policy.delay * 2 ** (attempts - 1), policy.max_delay))


def exit_line(c: Container) -> str:
    if c.state == "created":
        return f"task {c.task} never started"
    return f"task {c.task} exited with code {c.exit_code}"


def ready(c: Container) -> bool:
    """Running and, where the task has a health check, healthy."""
    return c.state == "running" and c.health in ("none", "healthy")


Gate = Literal["ready", "wait", "fail"]

# what a task still `starting` past its health check's deadline, never checked, is told
NO_CHECK_RAN = (
    "no health check has run: does its host's engine run them? (Podman runs them from "
    "systemd timers; MiniDock runs them where its probe finds Podman, docs/hosts.md)"
)


def still_starting(c: Container, service: Service, now: float) -> str:
    """Why a running task is still `starting` past its health check's start_period +
    retries x interval + timeout ("" while within it, or when it is not starting): the
    last check's output, or that no check has run at all. A gate never waits silently."""
    if c.state != "running" or c.health != "starting" or service.health is None:
        return ""
    started = c.started_at or c.created_at
    limit = service.health.deadline()
    if now - started <= limit:
        return ""
    why = f"last check: {c.health_log}" if c.health_log else NO_CHECK_RAN
    return f"starting {now - started:.0f}s, past its health check's {limit:.0f}s; {why}"


def health_gate(
    c: Container | None,
    service: Service,
    healthy_since: float | None,
    now: float,
    *,
    seen_at: float | None = None,
) -> tuple[Gate, str]:
    """Has a new task proved itself: healthy (or running, without a check) for `monitor`?

    Fails when the task exits, turns unhealthy, or is not healthy within
    start_period + retries x interval + timeout + monitor of its start. Times are the
    controller's own (`healthy_since`: first seen ready; `seen_at`: first seen at all) so a
    host whose clock is off cannot pass or fail a task early; without them, the task's own
    start time stands in."""
    monitor = service.update.monitor
    if c is None:
        return "wait", "not started yet"
    if c.state in ("exited", "dead"):
        return "fail", exit_line(c)
    if c.health == "unhealthy":
        return "fail", f"task {c.task} unhealthy: {c.health_log or 'health check failed'}"
    started = seen_at if seen_at is not None else (c.started_at or c.created_at)
    if c.state == "running" and c.health in ("healthy", "none"):
        if healthy_since is not None:
            since = healthy_since
        else:
            since = started if c.health == "none" else now
        if now - since >= monitor:
            return "ready", ""
        return "wait", f"task {c.task} in monitor for {monitor - (now - since):.0f}s more"
    limit = (service.health.deadline() if service.health else 0.0) + monitor
    if now - started > limit:
        last = f"; last check: {c.health_log}" if c.health_log else ""
        never = f"; {NO_CHECK_RAN}" if c.health == "starting" and not c.health_log else ""
        line = f"task {c.task} not healthy after {limit:.0f}s ({c.state}, {c.health}){last}{never}"
        return "fail", line
    return "wait", f"task {c.task} starting ({c.health})"
