"""`minidock move`'s and `minidock restore`'s decisions on the model-level fleet
(tests/sim.py's World): the phases pass by pass, and the property that a controller killed
at any pass of a move or a restore (its decision recorded and not acted on, or acted on
and its outcome lost) leaves at most one task of the slot running at any instant, never a
task started on a volume without the data (a restore's: the snapshot's), and converges to
the one task on the target with the data there."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock import core
from minidock.core import fold_outcomes
from minidock.core.failover import recovery_points, snapshot_taken
from minidock.core.moving import MoveFailed, SourceCleaned, VolumesCopied
from minidock.core.plan import WaitKind
from minidock.core.progress_rule import outlook
from minidock.core.volumes import MovePhase
from minidock.model import Event, Volume
from tests.sim import World, hosts, svc

DB = svc("db", volumes=(Volume("data", "/data"),))
DATA = "written by db.1"
SNAPSHOT = "db.1 as its backup holds it"
SNAP_ID = "4f2a9c1e" + "0" * 56


@dataclass
class Fleet:
    """A World plus each host's copy of db.1's volume, and the moves' acts done on it."""

    world: World = field(default_factory=lambda: World(hosts(3)))
    volumes: dict[str, str] = field(default_factory=dict)  # host -> what its volume holds
    most_live: int = 0
    fail_copy: bool = False
    before: set[str] | None = None  # a restore's: the tasks that ran before it (on DATA)
    events: list[Event] = field(default_factory=list)  # the decisions' and the folds'

    def start(self) -> str:
        self.world.apply(DB)
        self.world.converge()
        (task,) = self.world.live("db")
        self.volumes[task.host] = DATA
        return task.host

    def move(self, target: str, *, keep_source: bool = False) -> None:
        w = self.world
        w.state = core.begin_move(w.state, "db", 1, target, w.now, keep_source=keep_source)

    def restore(self, target: str) -> None:
        w = self.world
        w.state = core.begin_restore(w.state, "db", 1, target, (("data", SNAP_ID),), w.now)
        self.before = {c.id for c in w.live("db")}

    def step(self, kill: str = "") -> None:
        """One pass; `kill`: "before-acts" (the decision recorded, nothing done) or
        "before-fold" (done, what the acts learned never recorded)."""
        w = self.world
        plan = w.plan()
        w.record(plan)
        self.events += plan.events
        if kill != "before-acts":
            w.act(plan)
            for c in w.live("db"):  # a task started only on its data
                want = DATA if self.before is None or c.id in self.before else SNAPSHOT
                assert self.volumes.get(c.host) == want, (c.host, self.volumes)
            outcomes = [self._act(a) for a in plan.moves]
            if kill != "before-fold":
                w.state, folded = fold_outcomes(w.state, outcomes, w.now)
                self.events += folded
        self.most_live = max(self.most_live, len(w.live("db")))
        w.tick()

    def _act(self, act: core.volumes.MoveAct) -> object:
        move = act.move
        if not act.copy:
            self.volumes.pop(act.removes_on, None)
            return SourceCleaned("db", 1)
        self.volumes.pop(move.target, None)  # afresh, as minidock.act.relocate does
        if self.fail_copy:
            return MoveFailed("db", 1, "no space left on device", discarded=True)
        if move.restore:
            assert move.snapshot_of("data") == SNAP_ID
            self.volumes[move.target] = SNAPSHOT
            return VolumesCopied("db", 1, 1000, 1.0)
        self.volumes[move.target] = self.volumes[move.source]
        return VolumesCopied("db", 1, 1000, 1.0)

    def settle(self, limit: int = 30) -> None:
        for _ in range(limit):
            if not self.world.state.services["db"].moves and self.world.plan().converged:
                return
            self.step()
        raise AssertionError(f"no convergence: {self.world.state.services['db'].moves}")


def other(fleet: Fleet, source: str) -> str:
    return next(h.name for h in fleet.world.hosts if h.name != source)


def test_a_move_stops_copies_starts_then_removes_the_source_pass_by_pass() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    phases = []
    for _ in range(8):
        moves = fleet.world.state.services["db"].moves
        phases.append(moves[1].phase if moves else None)
        fleet.step()
    # the phase each pass starts from: the stop; the stop seen done and the copy; the
    # start on the target; the task seen ready there and the source's volume removed
    assert phases[:5] == [
        MovePhase.STOPPING,
        MovePhase.STOPPING,
        MovePhase.STARTING,
        MovePhase.STARTING,
        None,
    ], phases
    (task,) = fleet.world.live("db")
    assert task.host == target
    assert fleet.volumes == {target: DATA}
    assert fleet.world.state.services["db"].slot(1).host == target
    assert fleet.most_live == 1


def test_keep_source_ends_the_move_once_the_target_is_ready_with_both_volumes() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target, keep_source=True)
    fleet.settle()
    assert fleet.volumes == {source: DATA, target: DATA}
    assert [c.host for c in fleet.world.live("db")] == [target]


def test_a_failed_copy_ends_the_move_and_the_task_starts_again_on_its_own_data() -> None:
    fleet = Fleet(fail_copy=True)
    source = fleet.start()
    fleet.move(other(fleet, source))
    fleet.settle()
    assert [c.host for c in fleet.world.live("db")] == [source]
    assert fleet.volumes == {source: DATA}
    assert fleet.world.state.services["db"].slot(1).host == source


@pytest.mark.parametrize(
    ("problem", "target"),
    [("already", "SOURCE"), ("no slot 2", "OTHER"), ("no named volume", "OTHER")],
)
def test_a_move_that_cannot_be_is_refused_in_one_line(problem: str, target: str) -> None:
    fleet = Fleet()
    source = fleet.start()
    to = source if target == "SOURCE" else other(fleet, source)
    state = fleet.world.state
    if problem == "no named volume":
        fleet.world.apply(DB, svc("web"))
        fleet.world.converge()
        state = fleet.world.state
    service = "web" if problem == "no named volume" else "db"
    slot = 2 if "2" in problem else 1
    with pytest.raises(ValueError, match=problem):
        core.begin_move(state, service, slot, to, 0.0)


def test_the_same_move_asked_again_changes_nothing_another_is_refused() -> None:
    fleet = Fleet()
    source = fleet.start()
    targets = [h.name for h in fleet.world.hosts if h.name != source]
    fleet.move(targets[0])
    state = fleet.world.state
    assert core.begin_move(state, "db", 1, targets[0], 5.0) is state
    with pytest.raises(ValueError, match="already moving to"):
        core.begin_move(state, "db", 1, targets[1], 5.0)


@settings(max_examples=60)
@given(
    kills=st.dictionaries(
        st.integers(min_value=0, max_value=7), st.sampled_from(["before-acts", "before-fold"])
    ),
    keep_source=st.booleans(),
)
def test_a_controller_killed_at_any_passes_of_a_move_leaves_one_copy_and_no_loss(
    kills: dict[int, str], keep_source: bool
) -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target, keep_source=keep_source)
    for n in range(8):
        fleet.step(kills.get(n, ""))
        assert DATA in fleet.volumes.values()  # some host always holds the data
    fleet.settle()
    assert fleet.most_live == 1
    (task,) = fleet.world.live("db")
    assert task.host == target
    assert fleet.volumes[target] == DATA
    assert fleet.world.state.services["db"].slot(1).host == target
    assert (source in fleet.volumes) == keep_source


# -- restores: a move whose source is a snapshot ------------------------------------------------
def test_a_restore_in_place_stops_the_task_streams_the_snapshot_and_starts_it_on_it() -> None:
    fleet = Fleet()
    host = fleet.start()
    fleet.restore(host)
    assert fleet.world.state.services["db"].moves[1].line() == (
        f"restoring snapshot 4f2a9c1e on {host}: stopping its task"
    )
    fleet.settle()
    (task,) = fleet.world.live("db")
    assert (task.host, fleet.volumes) == (host, {host: SNAPSHOT})
    assert task.id not in (fleet.before or set())
    assert fleet.most_live == 1
    kinds = [e.kind for e in fleet.events]
    assert kinds.index("restored") > kinds.index("volumes-copied")
    (said,) = [e.message for e in fleet.events if e.kind == "restored"]
    assert said == f"db.1: restored from snapshot 4f2a9c1e on {host}"


def test_a_restore_on_another_host_moves_the_record_and_leaves_the_old_volume() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.restore(target)
    fleet.settle()
    assert [c.host for c in fleet.world.live("db")] == [target]
    assert fleet.volumes == {source: DATA, target: SNAPSHOT}  # nothing cleaned
    assert fleet.world.state.services["db"].slot(1).host == target
    assert fleet.most_live == 1
    (said,) = [e.message for e in fleet.events if e.kind == "restored"]
    assert said.endswith(f"on {target} (its old volumes stay on {source})")


def test_a_slot_whose_host_was_forgotten_starts_only_on_the_restored_data() -> None:
    fleet = Fleet()
    lost = fleet.start()
    w = fleet.world
    w.kill_host(lost)
    w.state, _ = core.forget(w.state, lost, w.now)
    del fleet.volumes[lost]  # gone with its host
    target = other(fleet, lost)
    fleet.restore(target)  # before any pass: the slot has no host, no task
    assert w.state.services["db"].moves[1].source == ""
    fleet.settle()
    assert [c.host for c in w.live("db")] == [target]
    assert fleet.volumes == {target: SNAPSHOT}


def test_a_failed_restore_leaves_the_slot_failed_until_restored_again_or_reset() -> None:
    fleet = Fleet(fail_copy=True)
    host = fleet.start()
    fleet.restore(host)
    for _ in range(6):
        fleet.step()
    w = fleet.world
    record = w.state.services["db"].slot(1)
    assert (w.live("db"), w.state.services["db"].moves, record.failed) == ([], {}, True)
    assert "restore of snapshot 4f2a9c1e" in record.last_exit
    assert "`minidock restore db.1` tries again" in record.last_exit
    assert "restore-failed" in [e.kind for e in fleet.events]
    assert w.plan().run == ()  # Failed: nothing starts on the emptied volume

    fleet.fail_copy = False
    fleet.restore(host)  # again: the Failed slot is cleared by the restore itself
    fleet.settle()
    assert [c.host for c in w.live("db")] == [host]
    assert fleet.volumes == {host: SNAPSHOT}

    failing = Fleet(fail_copy=True)
    host = failing.start()
    failing.restore(host)
    for _ in range(6):
        failing.step()
    failing.world.state = core.reset(failing.world.state, "db")
    failing.world.converge()
    assert [c.host for c in failing.world.live("db")] == [host]  # on what its volume holds


@pytest.mark.parametrize(
    ("problem", "change"),
    [
        ("no named volume", "web"),
        ("no slot 2", "slot"),
        ("one snapshot for each of ['data']", "volumes"),
        ("already restoring snapshot", "another"),
        ("desired stopped", "stopped"),
    ],
)
def test_a_restore_that_cannot_be_is_refused_in_one_line(problem: str, change: str) -> None:
    fleet = Fleet()
    host = fleet.start()
    w = fleet.world
    service, slot, picks = "db", 1, (("data", SNAP_ID),)
    if change == "web":
        w.apply(DB, svc("web"))
        w.converge()
        service = "web"
    elif change == "stopped":
        w.apply(svc("db", volumes=DB.volumes, desired="stopped"))
    elif change == "slot":
        slot = 2
    elif change == "volumes":
        picks = (("logs", SNAP_ID),)
    elif change == "another":
        fleet.restore(host)
        picks = (("data", "9" * 64),)
    with pytest.raises(ValueError, match=re.escape(problem)):
        core.begin_restore(w.state, service, slot, host, picks, 0.0)


def test_the_same_restore_asked_again_changes_nothing() -> None:
    fleet = Fleet()
    host = fleet.start()
    fleet.restore(host)
    state = fleet.world.state
    assert core.begin_restore(state, "db", 1, host, (("data", SNAP_ID),), 9.0) is state
    with pytest.raises(ValueError, match="already restoring"):
        core.begin_move(state, "db", 1, other(fleet, host), 9.0)


@settings(max_examples=60)
@given(
    kills=st.dictionaries(
        st.integers(min_value=0, max_value=7), st.sampled_from(["before-acts", "before-fold"])
    ),
    elsewhere=st.booleans(),
)
def test_a_controller_killed_at_any_passes_of_a_restore_starts_only_on_the_snapshot(
    kills: dict[int, str], elsewhere: bool
) -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source) if elsewhere else source
    fleet.restore(target)
    for n in range(8):
        fleet.step(kills.get(n, ""))  # asserts: no task started since on other than SNAPSHOT
    fleet.settle()
    assert fleet.most_live == 1
    (task,) = fleet.world.live("db")
    assert task.host == target
    assert fleet.volumes[target] == SNAPSHOT
    assert fleet.world.state.services["db"].slot(1).host == target
    assert (fleet.volumes.get(source) == DATA) == elsewhere  # the old volume stays elsewhere


# -- hosts lost during a move: every move ends ----------------------------------------------------
def passes_until_down(fleet: Fleet, host: str) -> None:
    """Passes until `host` (killed) is down (down_after = 2 in tests/sim.py)."""
    for _ in range(4):
        fleet.step()
    assert fleet.world.state.host(host).down


def test_a_move_whose_target_goes_down_before_its_copy_fails_and_starts_again_on_its_source() -> (
    None
):
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    fleet.world.kill_host(target)
    passes_until_down(fleet, target)
    fleet.settle()
    w = fleet.world
    assert w.state.services["db"].moves == {}
    assert [c.host for c in w.live("db")] == [source]
    assert fleet.volumes == {source: DATA}
    (failed,) = [e.message for e in fleet.events if e.kind == "move-failed"]
    assert failed == f"db.1: move to {target} failed, it stays on {source}: {target} is down"
    assert not outlook(w.plan()).progressing  # degraded (its target down), not exit 3


def test_a_task_stopped_for_a_move_that_fails_is_never_its_own_clean_exit() -> None:
    """Issue 43 (the operator property, seed 15): db (`restart = on-failure`) stopped for
    its move and left exited 0 (the controller died before removing it), then the move's
    target lost: the move ends, and the exit that `docker stop` gave is no clean exit of
    the task's own (the slot was Complete, never started again): it starts on its source."""
    fleet = Fleet()
    source = fleet.start()
    w = fleet.world
    w.apply(replace(DB, restart=replace(DB.restart, condition="on-failure")))
    w.converge()
    target = other(fleet, source)
    fleet.move(target)
    w.containers[source] = [  # its `docker stop` done, the controller dead before the rm
        replace(c, state="exited", exit_code=0, finished_at=w.now) for c in w.containers[source]
    ]
    w.kill_host(target)
    for _ in range(4):  # controllers that die before their acts, until the target is down
        fleet.step(kill="before-acts")
    assert w.state.services["db"].moves == {}  # ended: its target is down
    fleet.settle()
    assert not w.state.services["db"].slot(1).complete
    assert [c.host for c in w.live("db")] == [source]


def test_a_move_whose_source_goes_down_before_its_copy_fails_and_forget_then_ends_it() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    w = fleet.world
    w.kill_host(source)
    passes_until_down(fleet, source)
    assert w.state.services["db"].moves == {}
    assert any(e.kind == "move-failed" and f"{source} is down" in e.message for e in fleet.events)
    plan = w.plan()
    assert not outlook(plan).progressing  # held on its down host, pinned: exit 4
    w.state, _ = core.forget(w.state, source, w.now)
    assert w.state.services["db"].moves == {}
    w.converge()  # no snapshot known: started afresh (forget says so)
    assert len(w.live("db")) == 1


def test_a_move_cut_mid_copy_by_its_lost_target_keeps_its_source_and_drops_the_partial_copy() -> (
    None
):
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    w = fleet.world
    fleet.step()  # the stop
    fleet.step("before-fold")  # the copy begun, the controller killed before its outcome
    assert w.state.services["db"].moves[1].phase is MovePhase.COPYING
    fleet.volumes[target] = "half a copy"
    w.kill_host(target)
    passes_until_down(fleet, target)
    for _ in range(4):
        fleet.step()
    assert [c.host for c in w.live("db")] == [source]
    assert not outlook(w.plan()).progressing  # its target down: degraded, not exit 3
    assert w.state.services["db"].moves[1].phase is MovePhase.DISCARDING
    assert w.state.services["db"].moves[1].holds is False
    (failed,) = [e.message for e in fleet.events if e.kind == "move-failed"]
    assert failed.endswith(f"its partial copy on {target} is removed once {target} answers")
    w.revive_host(target)
    fleet.step()
    fleet.settle()
    assert w.state.services["db"].moves == {}
    assert fleet.volumes == {source: DATA}
    assert "partial-copy-removed" in [e.kind for e in fleet.events]
    assert fleet.most_live == 1


@pytest.mark.parametrize("lost", ["source", "target"])
def test_forget_of_either_host_ends_a_move_not_yet_copied(lost: str) -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    fleet.step()  # stopping
    w = fleet.world
    gone = source if lost == "source" else target
    w.kill_host(gone)
    w.state, events = core.forget(w.state, gone, w.now)
    assert w.state.services["db"].moves == {}
    assert "move-failed" in [e.kind for e in events]
    if lost == "source":
        w.converge()  # no snapshot known: started afresh (forget says so)
        assert len(w.live("db")) == 1
    else:
        fleet.settle()
        assert [c.host for c in w.live("db")] == [source]


def test_forget_of_the_target_of_a_starting_move_sends_the_slot_back_to_its_whole_source() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    w = fleet.world
    while w.state.services["db"].moves[1].phase is not MovePhase.STARTING:
        fleet.step()
    w.kill_host(target)
    w.state, events = core.forget(w.state, target, w.now)
    assert w.state.services["db"].moves == {}
    assert w.state.services["db"].slot(1).host == source
    assert any(
        f"before its task was ready; it starts again on {source}" in e.message for e in events
    )
    fleet.settle()
    assert [c.host for c in w.live("db")] == [source]
    assert fleet.volumes[source] == DATA


def test_a_restore_whose_target_goes_down_before_its_stream_ends_and_the_slot_keeps_its_data() -> (
    None
):
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.restore(target)
    fleet.before = None  # never restored: every task of the slot runs on its own data
    fleet.world.kill_host(target)
    passes_until_down(fleet, target)
    fleet.settle()
    w = fleet.world
    assert w.state.services["db"].moves == {}
    assert [c.host for c in w.live("db")] == [source]
    assert fleet.volumes[source] == DATA
    assert any(e.kind == "restore-failed" for e in fleet.events)


def test_a_restore_in_place_cut_mid_stream_by_its_lost_host_leaves_the_slot_failed() -> None:
    fleet = Fleet()
    host = fleet.start()
    fleet.restore(host)
    w = fleet.world
    fleet.step()  # the stop
    fleet.step("before-fold")  # the stream begun, the controller killed before its outcome
    assert w.state.services["db"].moves[1].phase is MovePhase.COPYING
    fleet.volumes[host] = "half a snapshot"
    w.kill_host(host)
    passes_until_down(fleet, host)
    assert w.state.services["db"].moves == {}
    assert w.state.services["db"].slot(1).failed
    w.revive_host(host)
    for _ in range(4):
        fleet.step()
    assert w.live("db") == []  # never started on the half-written volume


# -- never empty by surprise: a forgotten host's pinned slot waits for its restore --------------
NEWEST = "4f2a9c1e of 2026-12-05 03:00:00 UTC"


def forgotten(fleet: Fleet, snapshot: str) -> tuple[str, list[Event]]:
    """db.1's host killed, passes until it is down, then forgotten (`snapshot`: the newest
    snapshot of db.1 the use case found, "" for none)."""
    lost = fleet.start()
    w = fleet.world
    w.kill_host(lost)
    passes_until_down(fleet, lost)
    known = {("db", 1): snapshot} if snapshot else {}
    w.state, events = core.forget(w.state, lost, w.now, known)
    del fleet.volumes[lost]  # gone with its host
    return lost, events


def test_a_forgotten_pinned_slot_with_a_snapshot_waits_for_its_restore_degraded() -> None:
    fleet = Fleet()
    _, events = forgotten(fleet, NEWEST)
    (said,) = [e.message for e in events if e.kind == "task-lost" and e.service == "db"]
    assert said.endswith(
        f"; snapshot {NEWEST} can restore it, so it waits: `minidock restore db.1` restores "
        "it, `--empty` starts it empty"
    )
    w = fleet.world
    for _ in range(3):
        fleet.step()
    plan = w.plan()
    assert (w.live("db"), plan.run) == ([], ())  # never started on an empty volume
    (wait,) = [x for x in plan.waiting if x.subject == "db.1"]
    assert wait.kind is WaitKind.RESTORE
    assert "`minidock restore db.1`" in wait.reason
    assert "--empty" in wait.reason
    assert not outlook(plan).progressing  # exit 4: degraded, and says what to run
    assert str(wait) in outlook(plan).stuck


def test_a_waiting_slot_restored_elsewhere_starts_only_on_the_snapshot() -> None:
    fleet = Fleet()
    lost, _ = forgotten(fleet, NEWEST)
    target = other(fleet, lost)
    fleet.restore(target)  # no recorded host: nothing forks, no --force
    fleet.settle()
    w = fleet.world
    assert [c.host for c in w.live("db")] == [target]
    assert fleet.volumes == {target: SNAPSHOT}
    assert w.state.services["db"].slot(1).awaiting_restore == ""


def test_a_waiting_slot_started_empty_on_purpose_starts_anywhere() -> None:
    fleet = Fleet()
    forgotten(fleet, NEWEST)
    w = fleet.world
    w.state = core.start_empty(w.state, "db", 1)
    w.converge()
    assert len(w.live("db")) == 1
    with pytest.raises(ValueError, match=r"db\.1 is not waiting for a restore"):
        core.start_empty(w.state, "db", 1)


def test_a_forgotten_pinned_slot_without_a_snapshot_starts_afresh_saying_so() -> None:
    fleet = Fleet()
    _, events = forgotten(fleet, "")
    (said,) = [e.message for e in events if e.kind == "task-lost" and e.service == "db"]
    assert said.endswith("; no snapshot of it is known: it starts afresh with empty volumes")
    fleet.world.converge()
    assert len(fleet.world.live("db")) == 1


def test_a_failed_restore_of_a_waiting_slot_keeps_it_waiting_after_a_reset() -> None:
    fleet = Fleet(fail_copy=True)
    lost, _ = forgotten(fleet, NEWEST)
    fleet.restore(other(fleet, lost))
    for _ in range(6):
        fleet.step()
    w = fleet.world
    w.state = core.reset(w.state, "db")
    for _ in range(3):
        fleet.step()
    assert w.live("db") == []
    assert w.state.services["db"].slot(1).awaiting_restore == NEWEST


# -- failover from backups: on_host_loss = "restore" ---------------------------------------------
def failing_over(restore_after: float = 10.0, restart: str = "any") -> tuple[Fleet, str]:
    """db (on_host_loss = "restore") backed up, then its host killed."""
    fleet = Fleet()
    db = svc("db", volumes=(Volume("data", "/data"),), on_host_loss="restore")
    policy = replace(db.restart, condition=restart)
    fleet.world.apply(replace(db, restore_after=restore_after, restart=policy))
    fleet.world.converge()
    (task,) = fleet.world.live("db")
    fleet.volumes[task.host] = DATA
    w = fleet.world
    w.state = snapshot_taken(w.state, "db", 1, "data", SNAP_ID, w.now)
    fleet.before = {task.id}  # a task started since runs on the snapshot
    w.kill_host(task.host)
    return fleet, task.host


def until_restored(fleet: Fleet, limit: int = 40) -> None:
    """Passes until a failover's restore is over: its move gone, one task running."""
    for _ in range(limit):
        fleet.step()
        db = fleet.world.state.services["db"]
        running = [c for c in fleet.world.live("db") if c.task == db.slot(1).task]
        if "failover" in [e.kind for e in fleet.events] and not db.moves and running:
            return
    raise AssertionError(f"no failover: {fleet.world.state.services['db'].moves}")


def test_a_down_hosts_pinned_slot_is_restored_elsewhere_after_restore_after_by_itself() -> None:
    fleet, lost = failing_over()
    w = fleet.world
    passes_until_down(fleet, lost)
    plan = w.plan()
    (wait,) = [x for x in plan.waiting if x.subject == "db.1"]
    assert wait.kind is WaitKind.FAILOVER
    assert "restored on another host in" in wait.reason
    assert outlook(plan).progressing  # time alone moves it on: exit 3
    until_restored(fleet)
    (task,) = w.live("db")
    assert task.host != lost
    assert fleet.volumes[task.host] == SNAPSHOT
    assert fleet.volumes[lost] == DATA  # the old volume kept
    (said,) = [e.message for e in fleet.events if e.kind == "failover"]
    assert said.startswith(f"db.1: {lost} down for ")
    assert said.endswith(
        f"restoring snapshot 4f2a9c1e on {task.host}; its volume on {lost} is kept"
    )
    record = w.state.services["db"].slot(1)
    assert (record.host, record.kept_on) == (task.host, lost)
    # not before restore_after: the event comes at least 10 s after the last answer
    (failed_over,) = [e for e in fleet.events if e.kind == "failover"]
    assert failed_over.at - w.state.host(lost).last_seen >= 10.0  # type: ignore[operator]


def test_the_old_host_back_has_its_task_fenced_and_its_volume_kept_and_listed() -> None:
    fleet, lost = failing_over()
    w = fleet.world
    passes_until_down(fleet, lost)
    until_restored(fleet)
    w.revive_host(lost)  # it never stopped its task: it was cut off
    assert len(w.live("db")) == 2
    fleet.step()
    (task,) = w.live("db")
    assert task.host != lost
    assert fleet.volumes[lost] == DATA
    (fenced,) = [e.message for e in fleet.events if e.kind == "fenced"]
    assert fenced.endswith(
        f"its volume on {lost} is kept (it may hold writes newer than the snapshot restored "
        "elsewhere)"
    )
    fleet.settle()
    assert len(w.live("db")) == 1


def test_the_old_host_back_during_the_failover_restore_is_fenced_at_once() -> None:
    fleet, lost = failing_over()
    w = fleet.world
    passes_until_down(fleet, lost)
    for _ in range(20):
        if "failover" in [e.kind for e in fleet.events]:
            break
        fleet.step()
    assert w.state.services["db"].moves[1].failover
    w.revive_host(lost)
    fleet.settle(limit=40)
    (task,) = w.live("db")
    assert task.host != lost
    assert fleet.volumes[task.host] == SNAPSHOT
    assert fleet.most_live <= 2  # the instant it answers; one pass later, one
    assert len(w.live("db")) == 1


def test_the_old_hosts_task_exited_during_the_failover_restore_is_removed_not_counted() -> None:
    """Issue 43 (the operator property, seed 131): a failover's copy made, its task not
    yet started, and the old host answers with its task of the slot exited 0 (a fence
    the controller did not live to remove, a clean shutdown): removed as left by the
    failover, never the slot's own clean exit (which made the restored slot Complete, so
    nothing ever started on the snapshot: `on-failure` restarts no exit 0)."""
    fleet, lost = failing_over(restart="on-failure")
    w = fleet.world
    passes_until_down(fleet, lost)
    for _ in range(20):
        move = w.state.services["db"].moves.get(1)
        if move is not None and move.phase is MovePhase.STARTING:
            break
        fleet.step()
    assert move is not None
    assert move.phase is MovePhase.STARTING
    w.revive_host(lost)
    w.containers[lost] = [
        replace(c, state="exited", exit_code=0, finished_at=w.now) for c in w.containers[lost]
    ]
    fleet.step()
    assert not w.state.services["db"].slot(1).complete
    until_restored(fleet)
    (task,) = w.live("db")
    assert task.host != lost
    assert fleet.volumes[task.host] == SNAPSHOT
    assert fleet.volumes[lost] == DATA  # its volume kept


def test_the_volume_a_failover_kept_is_never_written_over_unless_the_operator_says_so() -> None:
    """Issue 43 (the operator property, seed 141): a move or restore onto the host that
    keeps the slot's old volume would write over it (it may hold writes newer than the
    snapshot): refused unless `--replace-kept`; a later failover never places it there."""
    fleet, lost = failing_over()
    w = fleet.world
    passes_until_down(fleet, lost)
    until_restored(fleet)
    w.revive_host(lost)
    fleet.settle()
    with pytest.raises(ValueError, match=f"db.1: {lost} keeps its old volume .*--replace-kept"):
        core.begin_move(w.state, "db", 1, lost, w.now)
    with pytest.raises(ValueError, match=f"db.1: {lost} keeps its old volume"):
        core.begin_restore(w.state, "db", 1, lost, (("data", SNAP_ID),), w.now)
    assert core.begin_move(w.state, "db", 1, lost, w.now, replace_kept=True).services["db"].moves
    (task,) = w.live("db")
    (third,) = [h for h in ("host1", "host2", "host3") if h not in (lost, task.host)]
    w.state = core.set_drained(w.state, third, True)
    w.kill_host(task.host)  # the restored slot's host lost too: only the kept host is left
    for _ in range(12):
        fleet.step()
    assert fleet.volumes[lost] == DATA  # never written over
    assert w.live("db") == []
    (pending,) = [p for p in w.plan().pending if p.service == "db"]
    assert f"{lost}: keeps the slot's old volume" in pending.reason


def test_without_a_recorded_snapshot_a_failover_waits_degraded_saying_why() -> None:
    fleet = Fleet()
    fleet.world.apply(svc("db", volumes=(Volume("data", "/data"),), on_host_loss="restore"))
    fleet.world.converge()
    (task,) = fleet.world.live("db")
    fleet.world.kill_host(task.host)
    passes_until_down(fleet, task.host)
    for _ in range(30):
        fleet.step()
    plan = fleet.world.plan()
    assert plan.run == ()
    (wait,) = [x for x in plan.waiting if x.subject == "db.1"]
    assert "no snapshot of it is known" in wait.reason
    assert not outlook(plan).progressing


def test_a_backup_records_the_newest_snapshot_per_volume_and_its_recovery_point() -> None:
    fleet = Fleet()
    fleet.start()
    w = fleet.world
    w.state = snapshot_taken(w.state, "db", 1, "data", "a" * 64, 100.0)
    w.state = snapshot_taken(w.state, "db", 1, "data", "b" * 64, 50.0)  # older: ignored
    (point,) = recovery_points(w.state.services["db"])
    assert (point.service, point.slot, point.volume, point.snapshot, point.taken) == (
        "db",
        1,
        "data",
        "a" * 64,
        100.0,
    )


def test_forget_of_the_old_host_during_a_failover_restore_lets_it_go_on() -> None:
    fleet, lost = failing_over()
    w = fleet.world
    passes_until_down(fleet, lost)
    for _ in range(20):
        if w.state.services["db"].moves:
            break
        fleet.step()
    w.state, _ = core.forget(w.state, lost, w.now, {("db", 1): NEWEST})
    assert w.state.services["db"].moves[1].failover
    del fleet.volumes[lost]
    until_restored(fleet)
    (task,) = w.live("db")
    assert fleet.volumes[task.host] == SNAPSHOT
    assert w.state.services["db"].slot(1).awaiting_restore == ""


def test_a_failover_restore_that_fails_backs_off_then_is_failed_and_its_old_host_runs_it() -> None:
    """Issue 43: a failover's restore whose copy fails is undone (the partial copy is on
    the target; the old host's volume is the slot's data again, no longer kept): tried
    again after the restart backoff, never every pass, Failed at `max_attempts`; the old
    host back, its task runs there on its own data, not fenced."""
    fleet, lost = failing_over()
    fleet.fail_copy = True
    passes_until_down(fleet, lost)
    for _ in range(60):
        fleet.step()
    w = fleet.world
    tries = [e for e in fleet.events if e.kind == "failover"]
    failed = [e for e in fleet.events if e.kind == "restore-failed"]
    policy = w.state.services["db"].spec.restart
    assert len(tries) == len(failed) == policy.max_attempts
    gaps = [b.at - a.at for a, b in zip(failed, tries[1:], strict=False)]
    assert all(gap >= policy.delay * 2**k for k, gap in enumerate(gaps)), gaps  # backed off
    assert "the failover tries again in" in failed[0].message
    assert "the slot is Failed after 5 failed restores" in failed[-1].message
    record = w.state.services["db"].slot(1)
    assert (record.failed, record.host, record.kept_on, record.half_written) == (
        True,
        lost,
        "",
        "",
    )
    w.revive_host(lost)  # it never stopped its task: it was cut off
    for _ in range(3):
        fleet.step()
    (task,) = w.live("db")
    assert task.host == lost
    assert fleet.volumes[lost] == DATA
    assert "fenced" not in [e.kind for e in fleet.events]


def test_forget_knows_a_snapshot_the_slots_backups_recorded_without_a_listing() -> None:
    fleet = Fleet()
    lost = fleet.start()
    w = fleet.world
    w.state = snapshot_taken(w.state, "db", 1, "data", SNAP_ID, w.now)
    w.kill_host(lost)
    passes_until_down(fleet, lost)
    w.state, _ = core.forget(w.state, lost, w.now)  # the repository could not be listed
    assert w.state.services["db"].slot(1).awaiting_restore == "4f2a9c1e"
    for _ in range(3):
        fleet.step()
    assert w.live("db") == []
