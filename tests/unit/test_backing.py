"""Backups inside the pass (core/backing.py, core/saving.py) on the model-level fleet
(tests/sim.py's World): the machine's table, the phases pass by pass, and the property
that a controller killed at any step of a backup (its decision recorded and not acted on,
a stop done halfway, or the acts done and their outcome lost) resumes or ends with the
slot's task running, never taken for a clean exit, and at most one task of it at once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock import core
from minidock.core import fold_outcomes
from minidock.core.backing import (
    TABLE,
    BackupAct,
    BackupInput,
    BackupPhase,
    BackupStep,
    SlotBackup,
    VerifyAct,
)
from minidock.core.saving import (
    BackupEnded,
    BackupKept,
    BackupOutcome,
    Copied,
    Hooked,
    VerifyEnded,
    backup_key,
    begin,
    begin_verify,
    schedule_all,
    verify_key,
)
from minidock.core.schedule import Times
from minidock.core.slots import SlotPhase
from minidock.model import BackupPolicy, Event, Hook, RestartPolicy, Service, Volume
from tests.sim import World, hosts, svc

SNAP = "5e1f00aa" + "0" * 56
ON_FAILURE = RestartPolicy(condition="on-failure")


def db(*, stop: bool = True, hook: bool = False, **policy: object) -> Service:
    return svc(
        "db",
        volumes=(Volume("data", "/data"),),
        restart=ON_FAILURE,
        backup=BackupPolicy("/srv/restic", "{}", stop=stop, **policy),  # type: ignore[arg-type]
        before_backup=Hook(("pg_dump",), 60.0) if hook else None,
    )


@dataclass
class Fleet:
    """A World whose backups' acts are done in memory: what each step did is kept."""

    world: World = field(default_factory=lambda: World(hosts(2)))
    spec: Service = field(default_factory=db)
    copies: list[tuple[str, bool]] = field(default_factory=list)  # (host, from a running task)
    most_live: int = 0
    fail: str = ""  # the step that fails: "hook", "copy" or "keep"
    events: list[Event] = field(default_factory=list)

    def start(self) -> str:
        self.world.apply(self.spec)
        self.world.converge()
        (task,) = self.world.live("db")
        return task.host

    def backup(self) -> None:
        w = self.world
        policy = self.spec.backup
        assert policy is not None
        hook = self.spec.before_backup is not None
        ss = begin(w.state.services["db"], 1, w.now, stop=policy.stop, hook=hook)
        w.state = replace(w.state, services={**w.state.services, "db": ss})

    @property
    def intent(self) -> SlotBackup | None:
        return self.world.state.services["db"].backups.slots.get(1)

    def step(self, kill: str = "") -> None:
        """One pass; `kill`: "before-acts" (the decision recorded, nothing done), "mid-stop"
        (its stops `docker stop`ped, not removed: the task seen exited 0), "before-fold"
        (done, what the acts learned never recorded)."""
        w = self.world
        plan = w.plan()
        w.record(plan)
        self.events += plan.events
        if kill == "mid-stop":
            for s in plan.stop:
                w.containers[s.container.host] = [
                    replace(c, state="exited", exit_code=0, finished_at=w.now)
                    if c.id == s.container.id
                    else c
                    for c in w.containers[s.container.host]
                ]
        elif kill != "before-acts":
            w.act(plan)
            outcomes = [self._act(a) for a in plan.backups]
            if kill != "before-fold":
                w.state, folded = fold_outcomes(w.state, outcomes, w.now)
                self.events += folded
        self.most_live = max(self.most_live, len(w.live("db")))
        w.tick()

    def _act(self, act: BackupAct | VerifyAct) -> BackupOutcome:
        if isinstance(act, VerifyAct):
            return VerifyEnded("db", 1, SNAP, True, "ok")
        running = [c for c in self.world.live("db") if c.state == "running"]
        if act.step is BackupStep.HOOK:
            assert act.container in {c.id for c in running}
            return BackupEnded("db", 1, "hook exited 1") if self.fail == "hook" else Hooked("db", 1)
        if act.step is BackupStep.COPY:
            if act.spec.backup is not None and act.spec.backup.stop:
                assert not running, "a stopped backup copies with no task running"
            self.copies.append((act.host, bool(act.container)))
            if self.fail == "copy":
                return BackupEnded("db", 1, "restic: repository is locked")
            return Copied("db", 1, (("data", SNAP),), 1 << 20, 0.5)
        if self.fail == "keep":
            return BackupEnded("db", 1, "restic forget: lock")
        return BackupKept("db", 1, 2)

    def settle(self, limit: int = 30) -> None:
        for _ in range(limit):
            if self.intent is None and self.world.plan().converged:
                return
            self.step()
        raise AssertionError(f"no convergence: {self.intent}")


# -- the table -------------------------------------------------------------------------------
def test_every_phase_but_done_has_a_way_out_and_done_none() -> None:
    sources = {phase for phase, _ in TABLE}
    assert sources == set(BackupPhase) - {BackupPhase.DONE}
    assert all(nxt in BackupPhase for nxt in TABLE.values())


@pytest.mark.parametrize(
    ("stop", "phase", "given", "after"),
    [
        (True, BackupPhase.HOOKING, BackupInput.HOOKED, BackupPhase.STOPPING),
        (False, BackupPhase.HOOKING, BackupInput.HOOKED, BackupPhase.COPYING),
        (True, BackupPhase.HOOKING, BackupInput.FAILED, BackupPhase.DONE),
        (True, BackupPhase.STOPPING, BackupInput.STOPPED, BackupPhase.COPYING),
        (True, BackupPhase.STOPPING, BackupInput.FAILED, BackupPhase.STARTING),
        (True, BackupPhase.COPYING, BackupInput.COPIED, BackupPhase.STARTING),
        (False, BackupPhase.COPYING, BackupInput.COPIED, BackupPhase.KEEPING),
        (True, BackupPhase.COPYING, BackupInput.FAILED, BackupPhase.STARTING),
        (False, BackupPhase.COPYING, BackupInput.FAILED, BackupPhase.DONE),
        (True, BackupPhase.STARTING, BackupInput.READY, BackupPhase.KEEPING),
        (True, BackupPhase.KEEPING, BackupInput.KEPT, BackupPhase.DONE),
        (True, BackupPhase.KEEPING, BackupInput.FAILED, BackupPhase.DONE),
        (True, BackupPhase.STOPPING, BackupInput.COPIED, BackupPhase.STOPPING),  # not its input
    ],
)
def test_each_phase_steps_by_the_table(
    stop: bool, phase: BackupPhase, given: BackupInput, after: BackupPhase
) -> None:
    assert SlotBackup(phase, stop=stop).step(given).phase is after


def test_a_failed_copy_of_a_stopped_task_starts_it_and_then_keeps_nothing() -> None:
    failed = SlotBackup(BackupPhase.STARTING, stop=True, failed="locked")
    assert failed.step(BackupInput.READY).phase is BackupPhase.DONE
    assert failed.line() == "backup failed (locked): starting its task again"


def test_only_a_stopped_backup_holds_its_slot_and_only_while_it_stops_and_copies() -> None:
    held = {p for p in BackupPhase if SlotBackup(p, stop=True).holds}
    assert held == {BackupPhase.STOPPING, BackupPhase.COPYING}
    assert not any(SlotBackup(p, stop=False).holds for p in BackupPhase)


# -- the passes ------------------------------------------------------------------------------
def test_a_stopped_backup_hooks_stops_copies_starts_then_keeps_pass_by_pass() -> None:
    fleet = Fleet(spec=db(hook=True))
    host = fleet.start()
    (before,) = fleet.world.live("db")
    fleet.backup()
    phases = []
    for _ in range(8):
        intent = fleet.intent
        phases.append(intent.phase if intent else None)
        fleet.step()
    assert phases[:6] == [
        BackupPhase.HOOKING,
        BackupPhase.STOPPING,
        BackupPhase.STOPPING,  # the stop done; seen gone by the next pass: copied there
        BackupPhase.STARTING,
        BackupPhase.STARTING,  # started; ready at the next pass, whose keep ends it
        None,
    ]
    (after,) = fleet.world.live("db")
    assert after.host == host
    assert after.id != before.id
    assert after.state == "running"
    assert fleet.copies == [(host, False)]  # through a helper: the task was stopped
    assert fleet.most_live == 1
    ss = fleet.world.state.services["db"]
    assert ss.slot(1).phase is SlotPhase.RUNNING
    assert not ss.slot(1).attempts
    last = ss.backups.last[1]
    assert (last.snapshots, last.forgotten, last.failed) == ((("data", SNAP),), 2, "")
    assert "db.1: backed up (data 5e1f00aa; 1.0MiB, 2.0MiB/s)" in [e.message for e in fleet.events]


def test_a_backup_of_a_running_task_copies_from_it_and_never_stops_it() -> None:
    fleet = Fleet(spec=db(stop=False, hook=True))
    host = fleet.start()
    (before,) = fleet.world.live("db")
    fleet.backup()
    fleet.settle()
    assert [c.id for c in fleet.world.live("db")] == [before.id]
    assert fleet.copies == [(host, True)]
    assert fleet.world.state.services["db"].backups.last[1].snapshots == (("data", SNAP),)


@pytest.mark.parametrize("stop", [True, False])
@pytest.mark.parametrize("fail", ["hook", "copy", "keep"])
def test_a_failed_step_ends_the_backup_with_its_task_running(stop: bool, fail: str) -> None:
    fleet = Fleet(spec=db(stop=stop, hook=True), fail=fail)
    fleet.start()
    fleet.backup()
    fleet.settle()
    (task,) = fleet.world.live("db")
    assert task.state == "running"
    last = fleet.world.state.services["db"].backups.last[1]
    assert last.failed
    assert fleet.world.state.services["db"].slot(1).phase is SlotPhase.RUNNING


def test_break_5_a_stop_interrupted_before_the_start_is_never_a_clean_exit() -> None:
    """Issue 43, break 5: `backup = { stop = true }` interrupted between the stop and the
    start: the task is seen exited 0; with restart = on-failure it was taken for the
    task's own clean exit (Complete) and the database never ran again."""
    fleet = Fleet()
    fleet.start()
    fleet.backup()
    fleet.step(kill="mid-stop")  # docker stop done (exit 0), the controller killed
    (stopped,) = [c for cs in fleet.world.containers.values() for c in cs if c.state == "exited"]
    assert stopped.exit_code == 0
    fleet.settle()
    ss = fleet.world.state.services["db"]
    assert ss.slot(1).phase is SlotPhase.RUNNING
    assert [c.state for c in fleet.world.live("db")] == ["running"]
    assert ss.backups.last[1].snapshots == (("data", SNAP),)


KILLS = st.dictionaries(
    st.integers(min_value=0, max_value=8),
    st.sampled_from(["before-acts", "mid-stop", "before-fold"]),
)


@settings(max_examples=60, deadline=None)
@given(
    kills=KILLS,
    stop=st.booleans(),
    hook=st.booleans(),
    fail=st.sampled_from(["", "hook", "copy", "keep"]),
)
def test_a_controller_killed_at_any_step_resumes_or_ends_with_the_task_running(
    kills: dict[int, str], stop: bool, hook: bool, fail: str
) -> None:
    fleet = Fleet(spec=db(stop=stop, hook=hook), fail=fail)
    fleet.start()
    fleet.backup()
    for n in range(9):
        fleet.step(kills.get(n, ""))
        assert fleet.most_live <= 1
    fleet.settle()
    ss = fleet.world.state.services["db"]
    assert [c.state for c in fleet.world.live("db")] == ["running"]
    assert ss.slot(1).phase is SlotPhase.RUNNING
    assert not ss.backups.slots
    assert ss.backups.last[1].failed or ss.backups.last[1].snapshots == (("data", SNAP),)


def test_an_apply_keeps_a_backup_under_way() -> None:
    fleet = Fleet()
    fleet.start()
    fleet.backup()
    fleet.step()  # stopping
    fleet.world.apply(replace(fleet.spec, env=(("A", "1"),)))
    assert fleet.intent is not None
    fleet.settle()
    assert fleet.world.state.services["db"].backups.last[1].snapshots


# -- schedules -------------------------------------------------------------------------------
def test_a_schedule_is_armed_first_then_backs_up_every_slot_once_per_later_time() -> None:
    fleet = Fleet(spec=db(schedule="0 3 * * *"))
    fleet.start()
    w = fleet.world
    key = backup_key("db")
    armed, said = schedule_all(w.state, {key: Times(100.0, 200.0)}, w.now)
    assert armed.services["db"].backups.due == 100.0
    assert not armed.services["db"].backups.slots
    assert said == ()
    again, _ = schedule_all(armed, {key: Times(100.0, 200.0)}, w.now)
    assert again is armed
    due, said = schedule_all(armed, {key: Times(200.0, 300.0)}, w.now)
    intent = due.services["db"].backups.slots[1]
    assert (intent.scheduled, intent.stop) == (200.0, True)
    assert [e.kind for e in said] == ["backup-scheduled"]
    twice, _ = schedule_all(due, {key: Times(200.0, 300.0)}, w.now)
    assert twice.services["db"].backups.slots == due.services["db"].backups.slots


def test_a_schedule_that_gives_no_time_is_said_once() -> None:
    fleet = Fleet(spec=db(schedule="0 3 * * *"))
    fleet.start()
    w = fleet.world
    times = {backup_key("db"): "schedule '0 3 * * *' (Mars/Base) cannot be read"}
    once, said = schedule_all(w.state, times, w.now)
    assert [e.kind for e in said] == ["backup-schedule-failed"]
    _, more = schedule_all(once, times, w.now)
    assert more == ()


def test_a_verify_schedule_asks_a_drill_of_each_slot_and_its_outcome_is_kept() -> None:
    fleet = Fleet(spec=db(verify=("test", "-s", "/data/x"), verify_schedule="0 4 * * 0"))
    fleet.start()
    w = fleet.world
    key = verify_key("db")
    armed, _ = schedule_all(w.state, {key: Times(100.0, 200.0)}, w.now)
    due, _ = schedule_all(armed, {key: Times(200.0, 300.0)}, w.now)
    assert due.services["db"].backups.verifying == (1,)
    w.state = due
    fleet.settle()
    verified = w.state.services["db"].backups.verified[1]
    assert (verified.snapshot, verified.ok, verified.line) == (SNAP, True, "ok")
    assert "backup-verified" in [e.kind for e in fleet.events]


def test_a_drill_asked_twice_is_one_drill() -> None:
    fleet = Fleet()
    fleet.start()
    ss = fleet.world.state.services["db"]
    assert begin_verify(begin_verify(ss, 1), 1).backups.verifying == (1,)


@pytest.mark.parametrize("stop", [True, False])
def test_a_backup_whose_host_is_lost_ends_failed_and_leaves_the_slot_to_its_machine(
    stop: bool,
) -> None:
    fleet = Fleet(spec=db(stop=stop, hook=True))
    host = fleet.start()
    fleet.backup()
    if stop:
        fleet.step()  # hooked: stopping next
    fleet.world.kill_host(host)
    for _ in range(4):  # its probes fail until the host is down
        fleet.step()
    if stop:  # a pinned slot held by a host that is down: its task may still run there
        assert fleet.intent is not None
        assert fleet.intent.phase is BackupPhase.STOPPING
        fleet.world.state, _ = core.forget(fleet.world.state, host, fleet.world.now)
        for _ in range(3):
            fleet.step()
    ss = fleet.world.state.services["db"]
    assert not ss.backups.slots
    assert ss.backups.last[1].failed == (
        "its host was forgotten" if stop else f"its host {host} is down"
    )


def test_a_backup_under_way_survives_the_store() -> None:
    from minidock.core.backing import Backups, LastBackup, Verified
    from minidock.store.codec import dumps, loads

    book = Backups(
        slots={1: SlotBackup.begun(5.0, stop=True, hook=True, scheduled=3.0)},
        last={2: LastBackup(1.0, 0.0, (("data", SNAP),), 5, 1.0, 2, "")},
        due=7.0,
        verifying=(1,),
        verified={1: Verified(SNAP, 2.0, True, "ok")},
    )
    assert loads(dumps(book), Backups) == book
