"""`kill -9` of the controller at seeded points across apply, rollout and drain (issue 9's
fault matrix): every time, the next cron passes converge, the state opens, no generation
a killed apply reported is lost, every task runs the stored image, and no slot has two
running tasks afterwards.

Each point is a step of the command, found by the line it printed when that step's pass
ended, plus a seeded delay: a delay from the start alone mostly landed in the process's
imports on a loaded machine, where a kill proves nothing (docs/testing.md "Suite time")."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass

from minidock.store.sqlite import SQLiteStore
from tests.integration.conftest import Minidock
from tests.integration.test_converge import live_by_host

SEED = 20261201
REPLICAS = 3
IMAGES = {"minidock-lab/web:5": "6", "minidock-lab/web:6": "5"}  # the stored one: the next


@dataclass(frozen=True)
class Point:
    """A kill -9 of `command` `delay` seconds after it printed a line starting with
    `after`; `step` says what it was doing then."""

    command: str
    after: str
    delay: float
    step: str


def points(rng: random.Random) -> list[Point]:
    """A point in each step where a kill leaves work half done (docs/testing.md)."""
    return [
        Point("apply", "generation ", rng.uniform(0.0, 1.0), "its first pass"),
        Point("apply", "started web.", rng.uniform(0.0, 2.0), "the rollout, between tasks"),
        Point("drain", "started web.", rng.uniform(0.0, 2.0), "the drain, between tasks"),
    ]


def spec(md: Minidock, image: str) -> str:
    return str(
        md.spec(f"""
[services.web]
image = "minidock-lab/web:{image}"
replicas = {REPLICAS}
constraints = ["zone != c"]
update = {{ order = "start-first", monitor = "1s" }}

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
""")
    )


class Printed(threading.Thread):
    """The lines a command prints, read as they come; `seen` is set at the first one
    starting with `marker`."""

    def __init__(self, md: Minidock, args: list[str], marker: str) -> None:
        super().__init__(daemon=True)
        self.proc = md.popen(*args)
        self.marker = marker
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.start()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(self.marker):
                self.seen.set()
        self.seen.set()  # it ended first: the caller finds the marker missing

    def end(self) -> int:
        """Its exit status, once it ended and its output is read."""
        code = self.proc.wait(timeout=180)
        self.join(timeout=30)
        for pipe in (self.proc.stdout, self.proc.stderr):
            assert pipe is not None
            pipe.close()
        return code


def killed(md: Minidock, args: list[str], point: Point) -> str:
    """Run the real CLI and SIGKILL it at `point`; what it printed before it died."""
    printed = Printed(md, args, point.after)
    assert printed.seen.wait(timeout=180), (point, printed.lines)
    assert any(line.startswith(point.after) for line in printed.lines), (point, printed.lines)
    time.sleep(point.delay)
    printed.proc.send_signal(signal.SIGKILL)
    printed.end()
    return "".join(printed.lines)


def converge(md: Minidock) -> None:
    for _ in range(40):
        res = md("reconcile")
        assert res.returncode in (0, 3), res.stdout + res.stderr
        if res.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError("not converged after a kill -9")


def stored_image(md: Minidock) -> str:
    """The stored generation's image, which every live task runs once converged."""
    (web,) = md.status()["services"]
    tasks = md.tasks("web")
    assert {t["image"] for t in tasks} == {web["image"]}, tasks
    return str(web["image"])


def test_kill_minus_9_at_seeded_points_always_converges(md: Minidock) -> None:
    rng = random.Random(SEED)
    res = md("apply", spec(md, "5"), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    reported: list[int] = []
    done: list[tuple[Point, str]] = []
    for point in points(rng):
        if point.command == "drain":
            busy = live_by_host(md, md.fleet, md.fleet.hosts)  # a drain that moves a task
            target = rng.choice(sorted(h for h, names in busy.items() if names))
            out = killed(md, ["drain", target, "--timeout", "60s"], point)
        else:
            image = IMAGES[stored_image(md)]  # always a change, so always a rollout
            out = killed(md, ["apply", spec(md, image), "--wait", "--timeout", "60s"], point)
            reported += [
                int(w.split()[1].rstrip(":"))
                for w in out.splitlines()
                if w.startswith("generation ")
            ]
        done.append((point, out))
        converge(md)
        with SQLiteStore.open(md.state) as store:  # the state opens
            latest = store.latest_generation()
            assert latest is not None
            assert all(store.generation(g) is not None for g in reported), (done, reported)
        stored_image(md)
        running = live_by_host(md, md.fleet, md.fleet.hosts)
        slots = Counter(int(n.split(".")[1]) for names in running.values() for n in names)
        assert slots == Counter(dict.fromkeys(range(1, REPLICAS + 1), 1)), (done, running)
        if point.command == "drain":
            assert md("activate", target).returncode in (0, 3)
