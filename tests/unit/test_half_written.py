"""A slot whose restore failed or was cut mid-stream (its volume may be empty or half
written) is held Failed by a durable mark in its record (`SlotState.half_written`): no
apply of a changed spec, `scale` or rollback starts its task; only `minidock reset SERVICE`
(the operator's "start it on what it holds") or a restore whose copy completes clears it
(issue 43, break 1). Decisions pass by pass on the model-level fleet of
tests/unit/test_volume_moves.py, whose every pass checks that a task runs only on its data."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from minidock import core, restic, usecases
from minidock.act.relocate import ResticSnapshots
from minidock.cli import print_plan
from minidock.core.slots import SlotPhase, SlotState, renewed
from minidock.core.volumes import MovePhase
from minidock.restic import ResticError
from minidock.store import codec
from minidock.usecases import ExitCode
from minidock.usecases.reads import status
from minidock.usecases.restores import restore
from tests.unit import test_host_loss as host_loss
from tests.unit.test_usecases import Setup, run
from tests.unit.test_volume_moves import (
    DATA,
    DB,
    NEWEST,
    SNAPSHOT,
    Fleet,
    other,
    passes_until_down,
)

GEN2 = replace(DB, env=(("GEN", "2"),))


def _apply(fleet: Fleet) -> None:
    fleet.world.apply(replace(DB, env=(("LOG", "debug"),)))  # one env value changed


def _scale(fleet: Fleet) -> None:
    w = fleet.world
    w.generation += 1
    w.state = core.scale(w.state, "db", 1, w.generation)


def _rollback(fleet: Fleet) -> None:
    w = fleet.world
    w.state = core.rollback(w.state, "db")  # GEN2 back to DB


COMMANDS: dict[str, Callable[[Fleet], None]] = {
    "apply": _apply,
    "scale": _scale,
    "rollback": _rollback,
}


def _failed_restore(fleet: Fleet) -> str:
    """db.1 (updated once: a rollback has a spec to go back to) restored in place, its
    stream failing: the volume it began is removed (minidock.act.relocate)."""
    host = fleet.start()
    fleet.world.apply(GEN2)
    for _ in range(8):
        fleet.step()
    fleet.fail_copy = True
    fleet.restore(host)
    for _ in range(6):
        fleet.step()
    assert host not in fleet.volumes
    return host


def _cut_restore(fleet: Fleet) -> str:
    """db.1 (updated once) restored in place, the stream cut half-way by its lost host
    (the controller killed before the copy's outcome); the host back afterwards."""
    host = fleet.start()
    fleet.world.apply(GEN2)
    for _ in range(8):
        fleet.step()
    fleet.restore(host)
    fleet.step()  # the stop
    fleet.step("before-fold")  # the stream begun, its outcome never recorded
    assert fleet.world.state.services["db"].moves[1].phase is MovePhase.COPYING
    fleet.volumes[host] = "half a snapshot"
    fleet.world.kill_host(host)
    passes_until_down(fleet, host)
    fleet.world.revive_host(host)
    return host


CAUSES: dict[str, Callable[[Fleet], str]] = {"failed": _failed_restore, "cut": _cut_restore}


@pytest.mark.parametrize("cause", CAUSES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_half_written_slot_starts_no_task_after_apply_scale_or_rollback(
    cause: str, command: str
) -> None:
    fleet = Fleet()
    CAUSES[cause](fleet)
    w = fleet.world
    assert w.state.services["db"].slot(1).half_written
    COMMANDS[command](fleet)
    for _ in range(6):
        fleet.step()  # would fail at once on a task started on the half-written volume
    assert w.live("db") == []
    record = w.state.services["db"].slot(1)
    assert record.failed
    plan = w.plan()
    assert plan.run == ()
    ((name, n, why),) = plan.half_written()
    assert (name, n) == ("db", 1)
    assert plan.failed_slots() == [("db", 1, why)]  # status's FAILED line
    assert why.startswith("restore of snapshot 4f2a9c1e on ")
    assert "`minidock restore db.1` tries again" in why
    assert "`minidock reset db` starts it on what its volume holds" in why


@pytest.mark.parametrize("cause", CAUSES)
def test_reset_starts_it_on_what_its_volume_holds(cause: str) -> None:
    fleet = Fleet()
    host = CAUSES[cause](fleet)
    _apply(fleet)
    w = fleet.world
    w.state = core.reset(w.state, "db")
    w.converge()
    assert [c.host for c in w.live("db")] == [host]
    assert w.state.services["db"].slot(1).half_written == ""


@pytest.mark.parametrize("cause", CAUSES)
def test_a_restore_whose_copy_completes_clears_it(cause: str) -> None:
    fleet = Fleet()
    host = CAUSES[cause](fleet)
    _scale(fleet)
    fleet.fail_copy = False
    fleet.restore(host)
    w = fleet.world
    record = w.state.services["db"].slot(1)
    assert (record.failed, bool(record.half_written)) == (True, True)  # until the copy
    fleet.settle()
    assert [c.host for c in w.live("db")] == [host]
    assert fleet.volumes[host] == SNAPSHOT
    record = w.state.services["db"].slot(1)
    assert (record.phase, record.half_written) == (SlotPhase.RUNNING, "")


def test_a_restore_that_fails_again_holds_it_again() -> None:
    fleet = Fleet()
    host = _failed_restore(fleet)
    fleet.restore(host)  # still failing
    for _ in range(6):
        fleet.step()
    _rollback(fleet)
    for _ in range(4):
        fleet.step()
    assert fleet.world.live("db") == []
    assert fleet.world.state.services["db"].slot(1).half_written


def test_a_half_written_slot_is_not_moved_with_its_volume() -> None:
    fleet = Fleet()
    host = _failed_restore(fleet)
    w = fleet.world
    target = other(fleet, host)
    with pytest.raises(ValueError, match=r"db\.1 is Failed by a restore that did not") as e:
        core.begin_move(w.state, "db", 1, target, w.now)
    assert f"`minidock restore db.1 --host {target}` puts a snapshot there" in str(e.value)


def test_restore_empty_starts_a_half_written_slot_whose_host_was_forgotten() -> None:
    fleet = Fleet()
    host = _failed_restore(fleet)
    w = fleet.world
    w.kill_host(host)
    passes_until_down(fleet, host)
    w.state, _ = core.forget(w.state, host, w.now, {("db", 1): NEWEST})
    w.state = core.start_empty(w.state, "db", 1)  # the operator's word: empty, on purpose
    w.converge()
    assert len(w.live("db")) == 1


def test_renewal_keeps_the_mark_and_forgets_the_rest() -> None:
    crashed = SlotState(SlotPhase.FAILED, "t1", "host1", attempts=(1.0,), next_start=9.0)
    held = replace(crashed, half_written="restore of snapshot 4f2a9c1e on host1 failed")
    assert renewed({1: crashed, 2: held}) == {
        1: SlotState(SlotPhase.EMPTY, "t1", "host1"),
        2: held,
    }


# -- a move interrupted mid-copy, then an apply -------------------------------------------------
def test_a_move_cut_mid_copy_by_the_controller_then_an_apply_copies_again_and_starts_on_it() -> (
    None
):
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    fleet.step()  # the stop
    fleet.step("before-fold")  # copied, the controller killed before it was recorded
    fleet.volumes[target] = "half a copy"
    _apply(fleet)
    for _ in range(4):
        fleet.step()  # checks no task runs on the half copy
    fleet.settle()
    w = fleet.world
    assert [c.host for c in w.live("db")] == [target]
    assert fleet.volumes == {target: DATA}


def test_a_move_cut_mid_copy_by_its_lost_target_then_an_apply_starts_on_the_whole_source() -> None:
    fleet = Fleet()
    source = fleet.start()
    target = other(fleet, source)
    fleet.move(target)
    fleet.step()
    fleet.step("before-fold")
    fleet.volumes[target] = "half a copy"
    fleet.world.kill_host(target)
    passes_until_down(fleet, target)
    _apply(fleet)
    fleet.world.revive_host(target)
    fleet.settle()
    w = fleet.world
    assert [c.host for c in w.live("db")] == [source]
    assert fleet.volumes == {source: DATA}  # the partial copy removed
    assert w.state.services["db"].slot(1).half_written == ""  # its own data: whole


# -- the store --------------------------------------------------------------------------------
def test_a_record_stored_without_the_mark_reads_as_whole_and_the_mark_round_trips() -> None:
    older = {"phase": "failed", "task": "t1", "host": "host1", "last_exit": "exit 1"}
    assert codec.loads(json.dumps(older), SlotState).half_written == ""
    held = SlotState(SlotPhase.FAILED, "t1", "host1", half_written="restore failed: cut")
    assert codec.loads(codec.dumps(held), SlotState) == held


# -- through the use cases, over in-memory Docker engines and a real restic repository ----------
NEEDS_RESTIC = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")


def _broken_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """`restic dump` breaks after its first chunk: the restore began, then failed."""
    whole = ResticSnapshots.stream

    async def broken(self: ResticSnapshots, snapshot: str, volume: str) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(whole(self, snapshot, volume)) as dump:  # restic ends
            async for chunk in dump:
                yield chunk
                raise ResticError("restic dump failed (exit 1): connection reset by peer")

    monkeypatch.setattr(ResticSnapshots, "stream", broken)


def _restored_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Setup, str]:
    setup, host = host_loss.fleet(tmp_path)
    with monkeypatch.context() as broken:
        _broken_stream(broken)
        done = run(restore("db.1", setup.state, setup.runtime(), setup.report, timeout=30.0))
    assert done.exit_code is not ExitCode.OK
    assert host_loss.data_on(setup, host) == ""  # the volume it began, removed
    return setup, host


@NEEDS_RESTIC
@pytest.mark.parametrize("command", ["apply", "scale", "rollback"])
def test_a_broken_restore_holds_db_across_a_command_until_reset(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    setup, host = _restored_broken(tmp_path, monkeypatch)
    if command == "apply":
        setup.file.write_text(setup.file.read_text() + 'env = { LOG = "debug" }\n')
        setup.apply()
    elif command == "scale":
        run(usecases.scale("db", 1, setup.state, setup.runtime(), setup.report))
    else:
        setup.file.write_text(setup.file.read_text() + 'env = { LOG = "debug" }\n')
        setup.apply()
        run(usecases.rollback("db", setup.state, setup.runtime(), setup.report))
    for _ in range(3):
        host_loss.reconcile(setup)
    assert host_loss.db_hosts(setup) == []  # never on the emptied volume
    doc = run(status(setup.state, setup.runtime())).documents[0]
    ((n, why),) = [(f.slot, f.last_exit) for f in doc.services[0].failed]
    assert n == 1
    assert "restore of snapshot" in why
    assert "connection reset by peer" in why
    assert "`minidock reset db` starts it on what its volume holds" in why
    print_plan(run(usecases.plan(setup.file, setup.state, setup.runtime())))
    assert f"FAILED db.1: {why}\n" in capsys.readouterr().out  # what apply would keep

    run(usecases.reset("db", setup.state, setup.runtime(), setup.report))
    host_loss.reconcile(setup)
    assert host_loss.db_hosts(setup) == [host]  # the operator's word: on what it holds


@NEEDS_RESTIC
def test_a_broken_restore_restored_again_brings_the_data_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup, host = _restored_broken(tmp_path, monkeypatch)
    run(usecases.scale("db", 1, setup.state, setup.runtime(), setup.report))
    done = run(restore("db.1", setup.state, setup.runtime(), setup.report, timeout=60.0))
    assert done.exit_code is ExitCode.OK, done
    assert host_loss.db_hosts(setup) == [host]
    assert host_loss.data_on(setup, host) == host_loss.PRECIOUS


# -- scaled away and back ------------------------------------------------------------------------
def test_a_half_written_slot_scaled_away_and_back_starts_nothing() -> None:
    fleet = Fleet()
    host = _failed_restore(fleet)
    w = fleet.world
    for count in (0, 1):
        w.generation += 1
        w.state = core.scale(w.state, "db", count, w.generation)
        for _ in range(4):
            fleet.step()
    assert w.live("db") == []
    record = w.state.services["db"].slot(1)
    assert (record.failed, record.host) == (True, host)
    assert record.half_written


def test_a_restore_in_place_cut_by_a_scale_down_holds_the_slot_scaled_back() -> None:
    fleet = Fleet()
    host = fleet.start()
    fleet.restore(host)
    fleet.step()  # the stop
    fleet.step("before-fold")  # the stream begun, the controller killed
    fleet.volumes[host] = "half a snapshot"
    w = fleet.world
    w.generation += 1
    w.state = core.scale(w.state, "db", 0, w.generation)
    fleet.step()
    assert w.state.services["db"].moves == {}
    assert w.state.services["db"].slot(1).half_written.startswith("restoring snapshot 4f2a9c1e")
    w.generation += 1
    w.state = core.scale(w.state, "db", 1, w.generation)
    for _ in range(4):
        fleet.step()
    assert w.live("db") == []
    assert w.state.services["db"].slot(1).host == host
    w.state = core.reset(w.state, "db")
    w.converge()
    assert [c.host for c in w.live("db")] == [host]
