"""A pinned service's host lost, through the use cases over in-memory Docker engines
(`tests.fakes.FakeDocker`, its named volumes included) and a real restic repository: a
backup recorded as the slot's recovery point; `forget` leaving a slot with a snapshot
waiting (exit 4, never started empty) until `restore` puts its data back on a host the
scheduler picks, with no `--force`; `on_host_loss = "restore"` doing that by itself once
the host has been down for `restore_after`; the old host back: its task fenced, one copy
running, its volume kept and listed. Decisions pass by pass: tests/unit/test_volume_moves.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from minidock import restic, usecases
from minidock.cli import recovery_lines
from minidock.commands.docker import volume_name
from minidock.core.plan import WaitKind
from minidock.metrics import metrics_text
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode
from minidock.usecases.backups import backup
from minidock.usecases.fleetview import read_fleet
from minidock.usecases.reads import status
from minidock.usecases.restores import restore
from tests.unit.test_usecases import INVENTORY, Setup, make_setup, run

pytestmark = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")

DB = """\
cluster = "uc"
inventory = "inventory.toml"

[services.db]
image = "db:1"
volumes = ["data:/var/lib/data"]
backup = {{ repository = "{repo}", password = {{ file = "pass" }} }}
{extra}"""
PRECIOUS = "rows written before the backup"


def fleet(tmp_path: Path, extra: str = "") -> tuple[Setup, str]:
    """db.1 running with PRECIOUS in its volume, backed up; its host returned."""
    setup = make_setup(tmp_path)
    (tmp_path / "inventory.toml").write_text("[defaults]\ndown_after = 1\n" + INVENTORY)
    (tmp_path / "pass").write_text("host-loss-test-pass\n")
    (tmp_path / "pass").chmod(0o600)
    setup.file.write_text(DB.format(repo=tmp_path / "repo", extra=extra))
    setup.converged()
    (name,) = setup.running()
    host = next(h for h in ("host1", "host2", "host3") if name in setup.running(h))
    setup.docker.volumes[host][volume_name("uc", "db", 1, "data")]["rows"] = PRECIOUS
    saved = run(backup("db.1", setup.state, setup.runtime(), usecases.ignore))
    assert len(saved.saved) == 1, saved
    return setup, host


def reconcile(setup: Setup) -> ExitCode:
    outcome = run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    setup.clock.t += 5.0  # the next cron run
    setup.docker.advance(5.0)
    return outcome.exit_code


def data_on(setup: Setup, host: str) -> str:
    return (
        setup.docker.volumes.get(host, {})
        .get(volume_name("uc", "db", 1, "data"), {})
        .get("rows", "")
    )


def db_hosts(setup: Setup) -> list[str]:
    """The hosts that answer where a task of db runs."""
    up = [h for h in ("host1", "host2", "host3") if h not in setup.docker.down]
    return [h for h in up for n in setup.running(h) if n.startswith("db.")]


def test_a_backup_is_the_slots_recovery_point_in_status(tmp_path: Path) -> None:
    setup, _ = fleet(tmp_path)
    with SQLiteStore.open(setup.state) as store:
        ((volume, snapshot, taken),) = store.load().services["db"].slot(1).backups
    assert volume == "data"
    assert taken <= setup.clock.t
    doc = run(status(setup.state, setup.runtime())).documents[0]
    (point,) = doc.services[0].recovery
    assert (point.slot, point.volume, point.snapshot, point.kept_on) == (1, "data", snapshot, "")
    shown = recovery_lines(doc.services[0], taken + 120.0)
    assert shown == [f"db.1 data: recovery point: snapshot {snapshot[:8]}, 2m old"]
    reading = run(read_fleet(setup.state, setup.runtime()))
    found = {
        tuple(sorted(x.labels.items())): x.value
        for family in text_string_to_metric_families(metrics_text(reading).decode())
        for x in family.samples
        if x.name == "minidock_backup_age_seconds"
    }
    labels = (("cluster", "uc"), ("service", "db"), ("slot", "1"), ("volume", "data"))
    assert found == {labels: reading.at - taken}


def test_forget_leaves_the_slot_waiting_then_restore_puts_its_data_back_elsewhere(
    tmp_path: Path,
) -> None:
    setup, lost = fleet(tmp_path)
    setup.docker.down.add(lost)
    for _ in range(3):
        reconcile(setup)
    forgot = run(usecases.forget(lost, setup.state, setup.runtime(), setup.report))
    assert forgot.exit_code is ExitCode.DEGRADED
    with SQLiteStore.open(setup.state) as store:
        record = store.load().services["db"].slot(1)
    assert record.awaiting_restore.startswith(record.backups[0][1][:8] + " of ")
    assert reconcile(setup) is ExitCode.DEGRADED  # every pass, until the operator says
    assert db_hosts(setup) == []  # never started on an empty volume

    done = run(restore("db.1", setup.state, setup.runtime(), setup.report, timeout=60.0))
    assert done.exit_code is ExitCode.DEGRADED, done  # converged but for the lost host
    (there,) = db_hosts(setup)
    assert there != lost
    assert data_on(setup, there) == PRECIOUS

    setup.docker.down.discard(lost)  # it was only cut off: its task still runs there
    reconcile(setup)
    assert db_hosts(setup) == [there]  # fenced: one copy runs
    assert data_on(setup, lost) == PRECIOUS  # its old volume kept
    doc = run(status(setup.state, setup.runtime())).documents[0]
    assert {p.kept_on for p in doc.services[0].recovery} == {lost}  # and listed


def test_restore_empty_starts_a_waiting_slot_on_an_empty_volume(tmp_path: Path) -> None:
    setup, lost = fleet(tmp_path)
    setup.docker.down.add(lost)
    for _ in range(3):
        reconcile(setup)
    run(usecases.forget(lost, setup.state, setup.runtime(), setup.report))
    started = run(
        restore("db.1", setup.state, setup.runtime(), setup.report, empty=True, timeout=60.0)
    )
    assert started.message == "starting db.1 on empty volumes"
    (there,) = db_hosts(setup)
    assert data_on(setup, there) == ""


def test_on_host_loss_restore_fails_over_by_itself_and_fences_the_old_host(
    tmp_path: Path,
) -> None:
    setup, lost = fleet(tmp_path, 'on_host_loss = "restore"\nrestore_after = "20s"\n')
    setup.docker.down.add(lost)
    codes = [reconcile(setup) for _ in range(12)]
    assert ExitCode.NOT_CONVERGED in codes[:3]  # waiting out restore_after: it moves on
    (there,) = db_hosts(setup)
    assert there != lost
    assert data_on(setup, there) == PRECIOUS
    with SQLiteStore.open(setup.state) as store:
        kinds = [e.kind for _, e in store.events(0)]
    assert "failover" in kinds
    assert "restored" in kinds

    setup.docker.down.discard(lost)
    reconcile(setup)
    assert db_hosts(setup) == [there]
    assert data_on(setup, lost) == PRECIOUS
    with SQLiteStore.open(setup.state) as store:
        fenced = [e.message for _, e in store.events(0) if e.kind == "fenced"]
    assert fenced
    assert fenced[0].endswith(
        f"its volume on {lost} is kept (it may hold writes newer than the snapshot restored "
        "elsewhere)"
    )


def test_the_waiting_slot_is_a_restore_wait(tmp_path: Path) -> None:
    assert WaitKind.RESTORE.degraded
    assert not WaitKind.RESTORE.moves
