"""`kill -9` of the controller at seeded points across apply, rollout and drain (issue 9's
fault matrix): every time, the next cron passes converge, the state opens, no generation
a killed apply reported is lost, and no slot has two running tasks afterwards."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter

from minidock.state import Store
from tests.integration.conftest import Minidock
from tests.integration.test_converge import live_by_host

TRIALS = 12
SEED = 20261201
REPLICAS = 3


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


def killed(md: Minidock, args: list[str], after: float) -> str:
    """Run the real CLI, SIGKILL it `after` seconds in; what it printed before it died."""
    proc = md.popen(*args)
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate()
    return out


def converge(md: Minidock) -> None:
    for _ in range(40):
        res = md("reconcile")
        assert res.returncode in (0, 3), res.stdout + res.stderr
        if res.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError("not converged after a kill -9")


def test_kill_minus_9_at_seeded_points_always_converges(md: Minidock) -> None:
    rng = random.Random(SEED)
    res = md("apply", spec(md, "5"), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    hosts = [h for h in md.fleet.hosts if h != "host4"]  # host4 is zone c
    reported: list[int] = []
    image = "5"
    points = []
    for trial in range(TRIALS):
        kind = ("apply", "rollout", "drain")[trial % 3]
        after = round(rng.uniform(0.05, 2.5), 2)
        points.append((kind, after))
        if kind == "drain":
            target = rng.choice(hosts)
            killed(md, ["drain", target, "--timeout", "60s"], after)
        else:
            image = "6" if image == "5" else "5"
            args = ["apply", spec(md, image), "--wait", "--timeout", "60s"]
            out = killed(md, args, after)
            reported += [
                int(w.split()[1].rstrip(":"))
                for w in out.splitlines()
                if w.startswith("generation ")
            ]
        converge(md)
        with Store.open(md.state) as store:  # the state opens
            latest = store.latest_generation()
            assert latest is not None
            assert all(store.generation(g) is not None for g in reported), (points, reported)
        running = live_by_host(md, md.fleet, md.fleet.hosts)
        slots = Counter(int(n.split(".")[1]) for names in running.values() for n in names)
        assert slots == Counter(dict.fromkeys(range(1, REPLICAS + 1), 1)), (points, running)
        if kind == "drain":
            assert md("activate", target).returncode in (0, 3)
