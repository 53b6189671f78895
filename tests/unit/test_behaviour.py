"""The test images' behaviour table (tests/behaviour.py), and the two doubles agreeing on it.

Both fleet doubles read one table: the model-level World and the argv-level FakeDocker
behind RunnerWorld. These tests hold the table to its documented rows, and hold the two
doubles to showing the same task the same way, pass after pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.model import Container, HealthCheck, RestartPolicy
from tests.behaviour import CRASH_LOG, HEALTH_LOG, LATE, TICK, Clock, act_of, behave
from tests.fakes import FakeDocker
from tests.sim import RunnerWorld, World, hosts, svc

HC = HealthCheck(("true",))


def started(image: str, health: str = "starting", at: float = 100.0) -> Container:
    return Container(
        "c1", "web.1.t1", "host1", "test", "web", 1, "t1", "s", image, "running",
        health=health, created_at=at, started_at=at,  # type: ignore[arg-type]
    )  # fmt: skip


def seen(c: Container) -> tuple[object, ...]:
    return (c.state, c.health, c.exit_code, c.health_log)


STARTING, HEALTHY = ("running", "starting"), ("running", "healthy")
UNHEALTHY, CRASHED = ("running", "unhealthy"), ("exited", "starting")


@pytest.mark.parametrize(
    ("image", "at_start", "one_tick_later", "late"),
    [
        ("web:5", STARTING, HEALTHY, HEALTHY),
        ("web:broken", STARTING, UNHEALTHY, UNHEALTHY),
        ("web:slow", STARTING, STARTING, STARTING),
        ("web:late", STARTING, HEALTHY, ("exited", "healthy")),
        ("crash:1", STARTING, CRASHED, CRASHED),
        ("minidock-lab/crash:1", STARTING, CRASHED, CRASHED),
    ],
)
def test_each_image_acts_by_its_row_as_time_passes(
    image: str, at_start: tuple[str, str], one_tick_later: tuple[str, str], late: tuple[str, str]
) -> None:
    c = started(image)
    assert (behave(c, 100.0).state, behave(c, 100.0).health) == at_start
    after = behave(c, 100.0 + TICK)
    assert (after.state, after.health) == one_tick_later
    end = behave(after, 100.0 + LATE)
    assert (end.state, end.health) == late


def test_exits_carry_their_code_and_the_time_they_were_seen() -> None:
    crashed = behave(started("crash:1"), 101.0)
    assert (crashed.exit_code, crashed.finished_at) == (1, 101.0)
    late = behave(started("web:late"), 100.0 + LATE)
    assert (late.exit_code, late.finished_at) == (2, 100.0 + LATE)
    assert act_of("crash:1").log == CRASH_LOG


def test_a_broken_check_says_why_and_nothing_moves_backwards() -> None:
    broken = behave(started("web:broken"), 101.0)
    assert broken.health_log == HEALTH_LOG
    by_hand = started("web:5", health="unhealthy")  # set by a test: stays as it is
    assert behave(by_hand, 500.0) is by_hand
    paused = Container("c2", "n", "h", "test", "web", 1, "t", "s", "crash:1", "paused")
    assert behave(paused, 500.0) is paused
    plain = started("web:5", health="none")  # no health check: nothing to settle
    assert behave(plain, 500.0) is plain


def test_only_nope_images_cannot_be_pulled() -> None:
    assert not act_of("web:nope").pullable
    assert act_of("web:5").pullable
    docker = FakeDocker(images={"db:1"})
    assert docker.has("db:1")
    assert not docker.has("web:5")
    assert not FakeDocker().has("web:nope")


def test_fake_docker_containers_change_only_when_its_clock_advances() -> None:
    clock = Clock(500.0)
    docker = FakeDocker(clock=clock)
    argv = ["docker", "run", "-d", "--name", "x", "--health-cmd", "true", "web:broken"]
    assert docker.handler(hosts(1)[0], argv, None).exit_status == 0
    (doc,) = docker.containers("host1")
    assert doc["State"]["Health"]["Status"] == "starting"
    assert doc["State"]["StartedAt"].startswith("1970-01-01T00:08:20")
    clock.now += 60.0  # time passes, but nobody advanced the engines: nothing happens
    assert doc["State"]["Health"]["Status"] == "starting"
    clock.now -= 60.0
    docker.advance()
    assert clock.now == 501.0
    assert doc["State"]["Health"]["Status"] == "unhealthy"
    assert doc["State"]["Health"]["Log"][-1]["Output"] == HEALTH_LOG


@pytest.mark.parametrize("image", ["web:5", "web:broken", "web:slow", "web:late", "crash:1"])
@pytest.mark.parametrize("health", [HC, None], ids=["health-check", "no-health-check"])
def test_both_doubles_show_a_task_the_same_way_pass_after_pass(
    tmp_path: Path, image: str, health: HealthCheck | None
) -> None:
    model = World(hosts(2))
    runner = RunnerWorld(hosts(2), tmp_path)
    try:
        for w in (model, runner):
            w.apply(svc(image=image, replicas=2, health=health, restart=RestartPolicy(delay=2.0)))
        for _ in range(int(LATE) + 4):
            decided = [(len(p.run), len(p.stop)) for p in (model.step(), runner.step())]
            assert decided[0] == decided[1]
            views = [sorted((c.slot, c.host, *seen(c)) for c in w.live()) for w in (model, runner)]
            assert views[0] == views[1]
            exited = [
                sorted((c.slot, *seen(c)) for cs in w.reachable().values() for c in cs)
                for w in (model, runner)
            ]
            assert exited[0] == exited[1]
    finally:
        runner.close()
