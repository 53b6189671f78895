"""The before_update hook (issue 25, docs/jobs.md#hooks): the pure decisions of
core/hooks.py, the fold's gate (core/rollout.py, core/reconcile.py), the spec key, and the
hook's steps (decided by core/decide.py, carried out by minidock.act.carry) through the
real passes over FakeDocker, with a hypothesis property: whatever the passes and wherever a
controller is killed, a generation's hook is created once, and the rollout goes on only
after it succeeded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from minidock.core.hooks import (
    HOOK_KIND,
    HookAct,
    failing_hooks,
    holds,
    hook_run_id,
    retried,
    step,
)
from minidock.core.intents import admit
from minidock.core.plan import WaitKind
from minidock.core.reconcile import reconcile
from minidock.core.simulate import simulate
from minidock.core.state import ControllerState, Rollout, RolloutPhase, ServiceState
from minidock.documents.status import status_document, status_schema
from minidock.model import Cluster, Hook, Host, OneOff, Service
from minidock.runner import PassResult
from minidock.spec import SpecError, load_cluster
from minidock.ssh import Result
from minidock.usecases import ExitCode, verdict, why
from minidock.usecases.passes import one_pass
from tests.fakes import FakeExecutor
from tests.sim import RunnerWorld, hosts

HOOK = Hook(("./migrate",), timeout=5.0)


def web(image: str = "web:1", hook: Hook | None = HOOK, **kw: object) -> Service:
    return Service("web", image, replicas=2, before_update=hook, **kw)  # type: ignore[arg-type]


def hook_of(ss: ServiceState, run: str, state: str = "running", code: int | None = None) -> OneOff:
    return OneOff(f"id-{run}", f"web.hook.{run}", "host1", "web", run, HOOK_KIND, state, code)  # type: ignore[arg-type]


def decided(ss: ServiceState) -> ServiceState:
    return replace(ss, hook=step("c", ss, (), 100.0).record)


# -- the decisions --------------------------------------------------------------------------
def test_a_new_generation_decides_its_hook_run_once_then_waits_reads_or_fails_it() -> None:
    ss = ServiceState(web(), generation=1)
    first = step("c", ss, (), 100.0)
    assert first.act is HookAct.START
    assert first.record.run == hook_run_id("c", "web", 1, 0)
    assert first.record.generation == 1
    ss = replace(ss, hook=first.record)
    assert step("c", ss, (), 101.0).act is HookAct.START  # decided, never seen: started again
    assert step("c", ss, (), 101.0, all_seen=False).act is HookAct.WAIT  # it may be there
    run = first.record.run
    created = step("c", ss, (hook_of(ss, run, "created"),), 101.0)
    assert (created.act, created.oneoff) == (HookAct.START, hook_of(ss, run, "created"))
    found = step("c", ss, (hook_of(ss, run),), 102.0)  # running after a crash: from now
    assert found.act is HookAct.WAIT
    assert found.record.started == 102.0
    ss = replace(ss, hook=found.record)
    assert step("c", ss, (hook_of(ss, run),), 106.9).act is HookAct.WAIT
    assert step("c", ss, (hook_of(ss, run),), 107.0).act is HookAct.TIME_OUT
    assert step("c", ss, (hook_of(ss, run, "exited", 0),), 103.0).act is HookAct.COLLECT
    assert step("c", ss, (), 103.0).act is HookAct.LOST  # started, on no host, all answered
    assert step("c", ss, (hook_of(ss, "other"),), 103.0).act is HookAct.LOST


def test_the_hook_holds_its_generation_until_it_succeeded_never_a_rollback_or_a_rescale() -> None:
    ss = decided(ServiceState(web(), generation=1))
    assert holds(ss)
    done = replace(ss, hook=ss.hook.ended(0, "", 110.0))
    assert not holds(done)
    assert step("c", done, (hook_of(ss, ss.hook.run, "exited", 0),), 111.0).act is HookAct.NONE
    rescaled = replace(done, spec=replace(done.spec, replicas=5), generation=2)
    assert not holds(rescaled)  # the same spec: nothing new to run it for
    updated = replace(done, spec=web("web:2"), generation=2)
    assert holds(updated)
    assert step("c", updated, (), 120.0).record.run == hook_run_id("c", "web", 2, 0)
    back = replace(updated, rollout=Rollout(RolloutPhase.ROLLING_BACK, rollback=True))
    assert not holds(back)  # the old generation's hook does not run again
    below = replace(updated, generation=1, hook=replace(updated.hook, generation=2))
    assert not holds(below)
    assert not holds(replace(updated, spec=web("web:2", hook=None)))
    assert not holds(replace(updated, spec=replace(web("web:2"), desired="stopped")))


def test_a_failed_hook_runs_again_only_when_applied_again_under_a_new_name() -> None:
    ss = decided(ServiceState(web(), generation=3))
    failed = replace(ss, hook=ss.hook.ended(3, "before_update hook x failed (exit 3)", 110.0))
    assert holds(failed)
    assert step("c", failed, (), 111.0).act is HookAct.NONE
    state = ControllerState(services={"web": failed})
    assert failing_hooks(state) == [("web", "web: before_update hook x failed (exit 3)")]
    again = retried(failed.hook, 3)
    assert (again.attempt, again.run, again.done) == (1, "", False)
    assert step("c", replace(failed, hook=again), (), 112.0).record.run == hook_run_id(
        "c", "web", 3, 1
    )
    assert retried(ss.hook, 3) is ss.hook  # not failed: kept as it is
    cluster = Cluster("c", "c.toml", "i.toml", (web(),))
    reapplied = admit(state, cluster, 4).services["web"]
    assert (reapplied.hook.attempt, reapplied.hook.failed) == (1, False)


# -- the fold's gate ------------------------------------------------------------------------
def passes(world: RunnerWorld, count: int, every: float = 1.0) -> list[PassResult]:
    """Passes as cron or `apply --wait` makes them: the real pass, its hooks' and jobs' part."""
    done = []
    for _ in range(count):
        assert world.cluster is not None
        run = one_pass(
            world.cluster, world.inventory, world.store, world.executor, clock=world.clock
        )
        done.append(asyncio.run(run))
        world.docker.advance(every)
    return done


def kinds(world: RunnerWorld, prefix: str = "") -> list[str]:
    return [e.kind for e in world.events() if e.kind.startswith(prefix)]


def test_the_rollout_waits_for_its_hook_which_runs_once_and_then_lets_it_go_on(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("app:done"))  # its hook exits 0 one tick after it starts
    results = passes(world, 8)
    assert kinds(world, "hook-") == ["hook-started", "hook-succeeded"]
    said = world.events()
    first_new = next(i for i, e in enumerate(said) if e.kind == "run" and "app:done" in e.message)
    assert [e.kind for e in said].index("hook-succeeded") < first_new
    waits = [w for w in results[0].plan.waiting if "before_update hook" in w]
    assert waits == ["web: before_update hook of generation 2: to run"]
    assert not [n for n in world.docker.names() if ".hook." in n]  # read, then removed
    assert verdict(results[0]) is ExitCode.NOT_CONVERGED


def test_a_hook_that_times_out_pauses_the_rollout_saying_so_and_no_new_task_starts(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("web:2"))  # runs until stopped: its hook times out after 5 s
    results = passes(world, 9)
    assert kinds(world, "hook-") == ["hook-started", "hook-failed"]
    (paused,) = [e for e in world.events() if e.kind == "rollout-paused"]
    assert "timed out after 5s" in paused.message
    assert {c["Config"]["Image"] for c in world.docker.containers()} == {"web:1"}
    assert verdict(results[-1]) is ExitCode.FAILED
    assert "web rollout paused" in why(results[-1], ExitCode.FAILED)


def test_a_first_apply_whose_hook_fails_starts_no_task_and_rollback_runs_no_hook(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("crash:1"))  # its hook exits 1
    results = passes(world, 4)
    assert kinds(world, "hook-") == ["hook-started", "hook-failed"]
    assert world.docker.names() == []
    assert verdict(results[-1]) is ExitCode.FAILED
    assert "web: before_update hook" in why(results[-1], ExitCode.FAILED)
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    roll = replace(web("web:2"), update=replace(web().update, failure_action="rollback"))
    world.apply(roll)
    passes(world, 9)
    assert kinds(world, "rollout-")[-2:] == ["rollout-rollback", "rollout-rolled_back"]
    assert kinds(world, "hook-").count("hook-started") == 2  # none for the rollback


def test_a_task_that_dies_while_the_hook_runs_comes_back_on_the_previous_spec(
    tmp_path: Path,
) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("web:2"))  # its hook runs until its timeout (5 s)
    passes(world, 1)
    (task, *_) = [d for d in world.docker.containers() if d["Config"]["Image"] == "web:1"]
    task["State"].update(Status="exited", Running=False, ExitCode=1)  # it dies meanwhile
    passes(world, 2)
    tasks = [d for d in world.docker.containers() if ".hook." not in d["Name"]]
    running = [d["Config"]["Image"] for d in tasks if d["State"]["Status"] == "running"]
    assert running == ["web:1", "web:1"]  # restarted, and not on the spec waiting for its hook
    world.close()


def test_a_hook_that_cannot_start_has_failed_saying_why(tmp_path: Path) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("app:nope"))  # no host has it and no registry serves it
    results = passes(world, 2)
    (failed,) = [e for e in world.events() if e.kind == "hook-failed"]
    assert "could not start" in failed.message
    assert "app:nope" in failed.message
    assert world.docker.names() == []
    assert verdict(results[-1]) is ExitCode.FAILED
    world.close()


def test_status_gives_the_hook_running_then_failed_as_its_schema_says(tmp_path: Path) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("web:2"))  # its hook runs until its timeout (5 s)
    seen: list[dict[str, object]] = []
    for _ in range(2):
        passes(world, 1 if not seen else 7)
        doc = status_document(world.state, world.inventory, world.observe(), world.plan())
        report = json.loads(json.dumps(doc.to_json()))
        Draft202012Validator(status_schema()).validate(report)
        seen.append(report["services"][0]["hook"])
    assert [(h["state"], h["generation"]) for h in seen] == [("running", 2), ("failed", 2)]
    assert "timed out after 5s" in str(seen[1]["why"])
    world.close()


def test_plan_says_the_hook_runs_first_and_simulates_it_succeeding(tmp_path: Path) -> None:
    world = RunnerWorld(hosts(2), tmp_path / "state")
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("web:2"))
    assert world.cluster is not None
    now, seen = world.now, world.observe()
    first = reconcile(world.cluster, world.inventory, seen, world.state, now)
    hook = [w for w in first.waiting if w.kind is WaitKind.HOOK]
    assert hook == ["web: before_update hook of generation 2: to run"]
    assert first.run == ()
    sim = simulate(world.cluster, world.inventory, seen, world.state, now)
    assert sim.converged
    assert {r.service.image for s in sim.steps for r in s.run} == {"web:2"}
    world.close()


# -- exactly once, whatever the passes and the kills ---------------------------------------
class Killed(BaseException):
    """A kill -9 of the controller: nothing after it runs (no except clause takes it)."""


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kills=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=6))
def test_a_generations_hook_is_created_once_wherever_the_controller_is_killed(
    tmp_path_factory: pytest.TempPathFactory, kills: Sequence[int]
) -> None:
    world = RunnerWorld(hosts(2), tmp_path_factory.mktemp("state"))
    world.apply(web("web:1", hook=None))
    passes(world, 3)
    world.apply(web("app:done"))
    real, created, left = world.docker.handler, [], [-1]
    commands: list[list[str]] = []  # every remote command that ran, in order

    def dying(host: Host, argv: list[str], input: str | None) -> Result:
        """The engines, with a kill -9 of the controller once `left` commands are done."""
        if left[0] == 0:
            raise Killed
        left[0] -= 1
        res = real(host, argv, input)
        commands.append(argv)
        if argv[:2] == ["docker", "create"] and ".hook." in argv[3] and res.exit_status == 0:
            created.append(argv[3])
        return res

    world.executor = FakeExecutor(dying)
    for budget in kills:  # passes until one is killed after `budget` remote commands
        left[0] = budget
        try:
            passes(world, 6)
        except Killed:
            world.docker.advance(1.0)
    left[0] = -1
    passes(world, 10)
    assert len(created) == 1  # one run of generation 2's hook
    ss = world.state.services["web"]
    assert (ss.hook.succeeded, ss.hook.generation) == (True, 2)
    started = commands.index(["docker", "start", created[0]])
    new = [i for i, c in enumerate(commands) if c[:2] == ["docker", "run"] and "app:done" in c]
    assert new, "the rollout never went on"
    assert started < new[0]  # no task of the new spec before its hook
    world.close()


# -- the spec key ---------------------------------------------------------------------------
INVENTORY = '[[hosts]]\nname = "host1"\naddress = "10.0.0.1"\n'
CLUSTER = 'cluster = "c"\ninventory = "inventory.toml"\n[services.web]\nimage = "web:1"\n'


@pytest.mark.parametrize(
    ("hooks", "said"),
    [
        ("{ before_update = { command = [] } }", "services.web.hooks.before_update.command"),
        ('{ before_update = { command = ["x"], timeout = "0s" } }', "must be greater than 0"),
        ('{ before_update = { cmd = ["x"] } }', "services.web.hooks.before_update"),
        ('{ after_update = { command = ["x"] } }', "services.web.hooks"),
    ],
)
def test_bad_hooks_are_one_line_naming_the_field(tmp_path: Path, hooks: str, said: str) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER + f"hooks = {hooks}\n")
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_hook_in_a_cluster_file_and_one_refused_on_a_job(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    path = tmp_path / "cluster.toml"
    body = CLUSTER
    path.write_text(body + 'hooks = { before_update = { command = ["./migrate"] } }\n')
    (service,) = load_cluster(path).services
    assert service.before_update == Hook(("./migrate",), 600.0)
    assert service.spec_hash() == replace(service, before_update=None).spec_hash()
    path.write_text(
        body + 'schedule = "* * * * *"\nhooks = { before_update = { command = ["x"] } }\n'
    )
    with pytest.raises(SpecError, match=r"services\.web\.hooks: a job has no rollout"):
        load_cluster(path)


def test_a_compose_service_gives_its_hook_in_its_own_x_minidock(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    (tmp_path / "compose.yaml").write_text(
        "name: c\nx-minidock: {inventory: inventory.toml}\nservices:\n  web:\n"
        "    image: web:5\n    x-pre_deploy: {command: ./ignored}\n"
        "    x-minidock:\n      hooks: {before_update: {command: [./migrate], timeout: 2m}}\n"
    )
    (service,) = load_cluster(tmp_path / "compose.yaml").services
    assert service.before_update == Hook(("./migrate",), 120.0)
