"""How test images behave over time: one table, read by every fleet double (unit tests only).

A task acts by its image's name and tag, as a pure function of the task and of the time the
test says it is. The argv-level `tests.fakes.FakeDocker` and the model-level
`tests.sim.World` both evolve their containers with it when their clock advances, so every
scenario sees the same images behave the same way, and no test sleeps.

    image       its health check settles (one TICK after start)   it exits
    crash:*     -                                                  code 1, one TICK after start
    *:broken    unhealthy, the check printing HEALTH_LOG           never
    *:slow      never: stays "starting"                            never
    *:late      healthy                                            code 2, LATE s after start
    *:done      healthy                                            code 0, one TICK after start
    *:nope      (cannot be pulled: `docker image inspect` and `docker pull` fail)
    anything    healthy                                            never

`docker logs` of a `crash:*` task prints CRASH_LOG. Names are matched on the last part of
the reference, so `minidock-lab/crash:1` is a crash image too.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

from minidock.model import Container, ContainerState, Health

TICK = 1.0  # one pass of a double: the clock's default step, and when health settles
LATE = 6.0
HEALTH_LOG = "wget: can't connect to remote host (127.0.0.1): Connection refused"
CRASH_LOG = "starting\nhttpd: bind: address in use\n"


@dataclass(frozen=True)
class Act:
    """What one kind of image does once it is started."""

    health: Health = "healthy"  # where its health check settles, TICK after the start
    health_log: str = ""  # what that check prints
    exit_code: int | None = None  # None: it runs until it is stopped
    exits_after: float = TICK  # seconds after the start
    log: str = ""  # what `docker logs` prints
    pullable: bool = True  # False: no host has it and no registry serves it


TABLE: tuple[tuple[str, Act], ...] = (
    ("crash:*", Act(exit_code=1, log=CRASH_LOG)),
    ("*:broken", Act(health="unhealthy", health_log=HEALTH_LOG)),
    ("*:slow", Act(health="starting")),
    ("*:late", Act(exit_code=2, exits_after=LATE)),
    ("*:done", Act(exit_code=0, log="done\n")),
    ("*:nope", Act(pullable=False)),
    ("*", Act()),
)


def act_of(image: str) -> Act:
    """The first row of TABLE whose pattern matches the image's last path part."""
    name = image.rpartition("/")[2]
    return next(act for pattern, act in TABLE if fnmatch.fnmatchcase(name, pattern))


@dataclass(frozen=True)
class Life:
    """What changes about a container while it runs (what `docker inspect` shows of it)."""

    state: ContainerState
    health: Health
    health_log: str = ""
    exit_code: int | None = None
    finished_at: float | None = None


def advance(life: Life, image: str, started_at: float, now: float) -> Life:
    """`life` as it has become by `now`, by the table.

    A running task may exit and a starting health check may settle; nothing else changes,
    and nothing moves backwards, so what a test set by hand (an exit, an unhealthy check, a
    paused task) stays as it was.
    """
    if life.state != "running":
        return life
    act, age = act_of(image), now - started_at
    if act.exit_code is not None and age >= act.exits_after:
        return replace(life, state="exited", exit_code=act.exit_code, finished_at=now)
    if life.health == "starting" and age >= TICK and act.health != "starting":
        return replace(life, health=act.health, health_log=act.health_log or life.health_log)
    return life


def behave(c: Container, now: float) -> Container:
    """The container as it has become by `now` (see `advance`)."""
    was = Life(c.state, c.health, c.health_log, c.exit_code, c.finished_at)
    life = advance(was, c.image, c.started_at or c.created_at, now)
    if life == was:
        return c
    return replace(
        c,
        state=life.state,
        health=life.health,
        health_log=life.health_log,
        exit_code=life.exit_code,
        finished_at=life.finished_at,
    )


@dataclass
class Clock:
    """The time a test's doubles (and the controller under test) share; only the test moves
    it. Callable, so it can be handed to `run_pass(clock=...)` as is."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float = TICK) -> float:
        self.now += dt
        return self.now
