"""Every start is a start (issue 19): a move (drain, rebalance, over capacity, constraints)
obeys the restart backoff, `max_attempts` and Failed, and avoids the host where its start
failed, exactly as a restart does; a move that cannot start anywhere stops the drain with
its reason (exit 1), never a loop."""

from __future__ import annotations

from pathlib import Path

from minidock import usecases
from minidock.core import set_drained
from minidock.model import RestartPolicy
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode
from tests.sim import RunnerWorld, hosts, svc
from tests.unit.test_usecases import make_setup, run

POLICY = RestartPolicy(delay=1.0, max_delay=4.0, max_attempts=3, window=0)


def runs_on(w: RunnerWorld, host: str) -> int:
    """How many starts the controller tried on a host (each pulls the missing image first)."""
    return sum(1 for argv in w.executor.argvs(host) if argv[:2] == ["docker", "pull"])


def world_without_the_image_on(tmp_path: Path, lacking: str, n: int = 3) -> RunnerWorld:
    """web:6 is on every host but `lacking`, and no registry serves it."""
    w = RunnerWorld(hosts(n), tmp_path, images=())
    w.docker.host_images = {h.name: {"web:6"} for h in w.hosts if h.name != lacking}
    return w


def test_a_drain_move_avoids_the_host_its_start_failed_on(tmp_path: Path) -> None:
    w = world_without_the_image_on(tmp_path, "host2")
    w.apply(svc("web", image="web:6", restart=POLICY))
    w.converge()
    assert [c.host for c in w.live("web")] == ["host1"]
    w.state = set_drained(w.state, "host1", True)
    w.converge()
    assert [c.host for c in w.live("web")] == ["host3"]
    assert runs_on(w, "host2") == 1  # tried once, then avoided
    record = w.state.services["web"].slot(1)
    assert len(record.attempts) == 1
    assert not record.failed
    failed = [e for e in w.events() if e.kind == "act-failed"]
    assert len(failed) == 1
    assert "cannot be pulled" in failed[0].message


def test_a_move_that_cannot_start_anywhere_stops_at_failed_with_its_reason(
    tmp_path: Path,
) -> None:
    w = world_without_the_image_on(tmp_path, "host2", n=2)
    w.apply(svc("web", image="web:6", restart=POLICY))
    w.converge()
    w.state = set_drained(w.state, "host1", True)
    w.run_until(lambda plan: bool(plan.failed_slots()), limit=40, what="Failed")
    for _ in range(10):  # and nothing more is tried: no loop
        plan = w.step(dt=10.0)
    assert runs_on(w, "host2") == POLICY.max_attempts
    assert len(w.state.services["web"].slot(1).attempts) == POLICY.max_attempts
    ((_, _, line),) = plan.failed_slots()
    assert "cannot be pulled" in line
    (pending,) = plan.pending
    assert "Failed after 3 failed starts" in pending.reason
    assert "minidock reset web" in pending.reason
    assert [c.host for c in w.live("web")] == ["host1"]  # never below its replicas


def test_a_move_waits_out_the_backoff_of_its_failed_start(tmp_path: Path) -> None:
    w = world_without_the_image_on(tmp_path, "host2", n=2)
    w.apply(svc("web", image="web:6", restart=RestartPolicy(delay=30.0, max_delay=30.0)))
    w.converge()
    w.state = set_drained(w.state, "host1", True)
    w.step()  # the move's start fails on host2
    for _ in range(5):
        plan = w.step()
        assert plan.run == ()
    assert any("restart backoff" in str(wait) for wait in plan.waiting)
    assert runs_on(w, "host2") == 1


def test_drain_ends_with_exit_1_and_the_reason_when_its_move_cannot_start(
    tmp_path: Path,
) -> None:
    setup = make_setup(tmp_path)
    setup.converged()
    names = ("host1", "host2", "host3")
    with_web = [h for h in names if any(n.startswith("web.") for n in setup.running(h))]
    busy, free = with_web[0], next(h for h in names if h not in with_web)
    setup.docker.images = {"db:1"}  # web:5 only where it already is; `free` cannot pull it
    setup.docker.host_images = {h: {"web:5"} for h in ("host1", "host2", "host3") if h != free}
    outcome = run(usecases.drain(busy, setup.state, setup.runtime(), setup.report, timeout=300.0))
    assert outcome.exit_code is ExitCode.FAILED, outcome  # its move's start failed
    assert "1 act failed" in outcome.convergence.why, outcome  # one act, in the singular
    codes = []
    for _ in range(40):  # cron's passes, a few seconds apart
        setup.clock.t += 5.0
        setup.docker.advance(5.0)
        passed = run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
        codes.append(passed.exit_code)
    assert set(codes) <= {ExitCode.FAILED, ExitCode.NOT_CONVERGED}
    assert codes[-1] is ExitCode.FAILED
    assert "Failed" in passed.why, passed
    pulls = [
        c.argv for e in setup.executors for c in e.calls if c.host == free and c.argv[1] == "pull"
    ]
    assert len(pulls) == RestartPolicy().max_attempts  # never past max_attempts
    with SQLiteStore.open(setup.state) as store:
        state = store.load()
    assert any(s.failed for s in state.services["web"].slots.values())
    assert any(n.startswith("web.") for n in setup.running(busy))  # still serving there
