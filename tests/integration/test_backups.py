"""`minidock backup` and `minidock restore` on the real lab with Debian's real restic on the
controller: data written into a volume-pinned service's volume is backed up on its
schedule by `reconcile` alone (after its before_backup hook: cron's set-up, no `watch`),
listed by `minidock backups`, and the snapshot's file holds the volume as it was; a backup
by hand then prunes the first by keep. Its throughput (MB/s through the controller) is
printed beside a plain `ssh HOST docker cp ... | restic backup --stdin` of the same volume
(docs/benchmarks.md). Then host loss (issue 43): a backup, the host stopped and forgotten:
the slot waits (exit 4, never started empty) until `minidock restore db.1` puts the data
back on a host the scheduler picks, with no --force; with `on_host_loss = "restore"` the
passes do that by themselves; the old host back: one copy runs, its old volume kept and
listed. A backup with `stop = true` whose controller is killed between the stop and the
start: the next `reconcile` runs the task again (issue 43, break 5). A restore drill
(`backup verify`) passing and failing, its throwaway container and volume gone after.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import signal
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from minidock import restic
from tests.integration.conftest import Fleet, Minidock, patient_inventory

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic"),
]

PASSWORD = "lab-restic-pass"
DB = """
[services.db]
image = "minidock-lab/web:5"
command = ["sh", "-c", "exec httpd -f -p 8080 -h /www"]
volumes = ["dbdata:/data"]
backup = {{ repository = "{repo}", password = {{ file = "{password}" }}, keep = {{ last = 1 }}, \
schedule = "{schedule}" }}
hooks = {{ before_backup = {{ command = ["sh", "-c", "date > /data/dumped"] }} }}
"""
MB = 48  # a volume big enough to measure a rate, small enough for the suite


def _dump(repo: Path, snapshot: str, path: str) -> bytes:
    env = {**os.environ, "RESTIC_REPOSITORY": str(repo), "RESTIC_PASSWORD": PASSWORD}
    done = subprocess.run(
        ["restic", "dump", snapshot, path], env=env, capture_output=True, check=True
    )
    return done.stdout


def _plain_pipeline(fleet: Fleet, host: str, container: str, repo: Path) -> float:
    """Seconds of `ssh HOST docker cp C:/data - | restic backup --stdin` (the baseline)."""
    lab = tomllib.loads(fleet.inventory.read_text())
    entry = next(h for h in lab["hosts"] if h["name"] == host)
    defaults, base = lab["defaults"], fleet.inventory.parent
    ssh = [
        "ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={base / defaults['known_hosts']}",
        "-i", str(base / defaults["identity_file"]), "-p", str(entry.get("port", 22)),
        f"{defaults.get('user', 'root')}@{entry.get('address', host)}",
        f"docker cp {shlex.quote(container)}:/data -",
    ]  # fmt: skip
    env = {**os.environ, "RESTIC_REPOSITORY": str(repo), "RESTIC_PASSWORD": PASSWORD}
    started = time.monotonic()
    with subprocess.Popen(ssh, stdout=subprocess.PIPE) as source:
        subprocess.run(
            ["restic", "backup", "-q", "--stdin", "--stdin-filename", "plain.tar"],
            stdin=source.stdout, env=env, check=True,
        )  # fmt: skip
    assert source.returncode == 0
    return time.monotonic() - started


def _minute_ahead() -> tuple[str, float]:
    """A daily schedule at the first minute at least 40 s from now (UTC: the apply's first
    pass arms it, a few seconds in, before it comes), and that minute's epoch seconds."""
    at = -(-(int(time.time()) + 40) // 60) * 60
    return time.strftime("%M %H * * *", time.gmtime(at)), float(at)


def _reconcile_until(md: Minidock, done: Callable[[], bool], passes: int = 20) -> str:
    """`minidock reconcile` (one pass, as cron runs it) until `done`; their output."""
    said = ""
    for _ in range(passes):
        res = md("reconcile")
        said += res.stdout + res.stderr
        if done() and res.returncode == 0:
            return said
        time.sleep(1)
    raise AssertionError(f"not done after {passes} passes:\n{said}")


def _snapshots(md: Minidock) -> list[dict[str, Any]]:
    listed = md("backups", "db", "--json")
    if listed.returncode != 0:
        return []
    found: list[dict[str, Any]] = json.loads(listed.stdout)["snapshots"]
    return found


def test_a_pinned_volume_is_backed_up_on_schedule_and_by_hand_listed_and_pruned(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    password, repo = tmp_path / "restic.pass", tmp_path / "repo"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    schedule, due = _minute_ahead()
    spec = md.spec(DB.format(repo=repo, password=password, schedule=schedule))
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    (task,) = md.tasks("db")
    host, name = task["host"], f"db.1.{task['id']}"
    fill = (
        f"head -c {MB}m /dev/urandom > /data/blob && echo kept > /data/note && sha256sum /data/blob"
    )
    written = fleet.docker(host, "exec", name, "sh", "-c", fill, check=True).stdout.split()[0]

    # armed by the apply's pass; at its time, cron's `reconcile` alone backs it up
    assert "db: backed up on" in md("validate", str(spec)).stdout
    time.sleep(max(0.0, due - time.time()) + 1)
    line = _reconcile_until(md, lambda: bool(_snapshots(md)))
    (snap,) = _snapshots(md)
    events = json.loads(md("events", "--json", "-n", "200").stdout)
    kinds = [e["kind"] for e in events]
    assert kinds.index("backed-up") > kinds.index("backup-scheduled"), kinds
    assert snap["short_id"] in next(e["message"] for e in events if e["kind"] == "backed-up")
    assert snap["hostname"] == host
    assert snap["paths"] == ["/dbdata.tar"]
    assert {k: snap["tags"][k] for k in ("cluster", "service", "slot", "volume")} == {
        "cluster": md.cluster, "service": "db", "slot": "1", "volume": "dbdata",
    }  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(_dump(repo, snap["id"], "/dbdata.tar"))) as tar:
        names = set(tar.getnames())
        blob = tar.extractfile("data/blob")
        assert blob is not None
        assert hashlib.sha256(blob.read()).hexdigest() == written
        assert {"data/note", "data/dumped"} <= names  # the hook ran before the copy

    started = time.monotonic()
    res = md("backup", "db")  # keep = { last = 1 }: the scheduled snapshot goes
    took = time.monotonic() - started
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{name} dbdata: snapshot " in res.stdout, res.stdout
    assert "forgot 1 snapshot(s) by keep" in res.stdout
    assert PASSWORD not in res.stdout + res.stderr + line
    left = json.loads(md("backups", "db", "--json").stdout)["snapshots"]
    assert len(left) == 1
    assert left[0]["id"] != snap["id"]

    plain = _plain_pipeline(fleet, host, name, repo)
    size = MB * 1e6 * 1.048576
    print(
        f"backup of {MB} MiB: minidock backup {size / took / 1e6:.1f} MB/s ({took:.2f}s, "
        f"the whole command); ssh | restic backup --stdin {size / plain / 1e6:.1f} MB/s "
        f"({plain:.2f}s); {res.stdout.strip()}"
    )


RESTORED = """
[services.db]
image = "minidock-lab/web:5"
command = ["sh", "-c", "exec httpd -f -p 8080 -h /www"]
volumes = ["dbdata:/data"]
backup = {{ repository = "{repo}", password = {{ file = "{password}" }} }}
"""


def _backed_up(fleet: Fleet, tmp_path: Path, extra: str = "") -> tuple[Minidock, str, str]:
    """db applied and running, 4 MiB and a note written into its volume, backed up: the
    cluster's `md`, db.1's host and the blob's sha256."""
    inventory = patient_inventory(fleet, tmp_path / "lab.toml")
    md = Minidock(fleet, tmp_path, inventory=inventory)
    password, repo = tmp_path / "restic.pass", tmp_path / "repo"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    spec = md.spec(RESTORED.format(repo=repo, password=password) + extra)
    res = md("apply", str(spec), "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    (task,) = md.tasks("db")
    fill = "head -c 4m /dev/urandom > /data/blob && echo kept > /data/note && sha256sum /data/blob"
    name = f"db.1.{task['id']}"
    written = fleet.docker(task["host"], "exec", name, "sh", "-c", fill, check=True).stdout
    res = md("backup", "db.1")
    assert res.returncode == 0, res.stdout + res.stderr
    return md, task["host"], written.split()[0]


def _read_back(fleet: Fleet, md: Minidock, written: str) -> str:
    """db.1's one task reads the backed-up blob and note: its host."""
    (back,) = md.tasks("db")
    name = f"db.1.{back['id']}"
    read = fleet.docker(back["host"], "exec", name, "sh", "-c", "sha256sum /data/blob")
    assert read.stdout.split()[0] == written
    assert fleet.docker(back["host"], "exec", name, "cat", "/data/note").stdout == "kept\n"
    return str(back["host"])


def _old_host_back(fleet: Fleet, md: Minidock, lost: str, there: str) -> None:
    """The old host back: one copy of db.1 runs (there), its old volume kept and listed."""
    fleet.revive(lost)
    for _ in range(8):
        md("reconcile")
        doc = md.status()
        answers = [h["state"] for h in doc["hosts"] if h["name"] == lost] == ["ready"]
        live = [t["host"] for t in doc["tasks"] if t["service"] == "db" and t["state"] == "running"]
        if answers and lost not in live:
            break
        time.sleep(2)
    assert [t["host"] for t in md.tasks("db")] == [there]
    volume = f"{md.cluster}_db.1_dbdata"
    assert fleet.docker(lost, "volume", "inspect", volume).returncode == 0  # kept
    (db,) = [s for s in md.status()["services"] if s["name"] == "db"]
    assert {p["kept_on"] for p in db["recovery"]} == {lost}  # and listed
    res = md("move", "db.1", "--to", lost)  # never written over by a routine command
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"db.1: {lost} keeps its old volume" in res.stderr, res.stderr
    assert "--replace-kept" in res.stderr
    assert [t["host"] for t in md.tasks("db")] == [there]


def test_a_forgotten_hosts_slot_waits_and_restore_puts_its_data_back_with_no_force(
    fleet: Fleet, tmp_path: Path
) -> None:
    md, lost, written = _backed_up(fleet, tmp_path)
    (snap,) = json.loads(md("backups", "db", "--json").stdout)["snapshots"]
    fleet.kill(lost, "stop")
    res = md("forget", lost)  # 3 while its failed probes still count, then 4
    assert res.returncode in (3, 4), res.stdout + res.stderr
    said = f"snapshot {snap['short_id']} of "
    assert said in res.stdout, res.stdout + res.stderr
    assert "can restore it, so it waits: minidock restore db.1" in res.stdout
    for _ in range(10):
        res = md("reconcile")
        if res.returncode == 4:
            break
        time.sleep(2)
    assert res.returncode == 4, res.stdout + res.stderr  # every pass: the operator's word
    assert "`minidock restore db.1`" in res.stdout + res.stderr
    assert md.tasks("db") == []  # never started on an empty volume

    started = time.monotonic()
    res = md("restore", "db.1")  # no --host, no --force: the scheduler picks, lost is forgotten
    took = time.monotonic() - started
    assert res.returncode in (0, 4), res.stdout + res.stderr  # 4: its old host is down
    there = _read_back(fleet, md, written)
    assert there != lost
    kinds = [e["kind"] for e in json.loads(md("events", "--json", "-n", "200").stdout)]
    assert kinds.index("restored") > kinds.index("volumes-copied") > kinds.index("intent")
    assert PASSWORD not in res.stdout + res.stderr
    print(f"restore of 4 MiB on {there} after {lost} was forgotten: {took:.1f}s\n{res.stdout}")
    _old_host_back(fleet, md, lost, there)


def test_on_host_loss_restore_reads_the_data_back_elsewhere_without_an_operator(
    fleet: Fleet, tmp_path: Path
) -> None:
    extra = 'on_host_loss = "restore"\nrestore_after = "10s"\n'
    md, lost, written = _backed_up(fleet, tmp_path, extra)
    fleet.kill(lost, "stop")
    started = time.monotonic()
    while time.monotonic() - started < 240:  # reconcile as cron would, nothing else
        md("reconcile")
        if [t for t in md.tasks("db") if t["host"] != lost and t["health"] != "starting"]:
            break
        time.sleep(3)
    there = _read_back(fleet, md, written)
    assert there != lost
    md("reconcile")  # the pass that sees its task ready ends the restore
    kinds = [e["kind"] for e in json.loads(md("events", "--json", "-n", "200").stdout)]
    assert kinds.index("restored") > kinds.index("volumes-copied") > kinds.index("failover")
    print(f"failover of 4 MiB to {there} after {lost} stopped: {time.monotonic() - started:.1f}s")
    _old_host_back(fleet, md, lost, there)


STOPPED = """
[services.db]
image = "minidock-lab/web:5"
command = ["sh", "-c", "exec httpd -f -p 8080 -h /www"]
volumes = ["dbdata:/data"]
restart = {{ condition = "on-failure" }}
backup = {{ repository = "{repo}", password = {{ file = "{password}" }}, stop = true, \
verify = {verify} }}
"""


def _with_repository(md: Minidock, tmp_path: Path, verify: str = '["true"]') -> Path:
    password, repo = tmp_path / "restic.pass", tmp_path / "repo"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    spec = md.spec(STOPPED.format(repo=repo, password=password, verify=verify))
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    return spec


def test_a_controller_killed_between_a_backups_stop_and_start_runs_the_task_again(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    """Issue 43, break 5: with `stop = true` and restart = on-failure, a backup cut off by
    a kill after its stop left the task stopped for good (its stop taken for a clean exit);
    the backup is an intent now, and the next `reconcile` copies and starts it again."""
    _with_repository(md, tmp_path)
    (task,) = md.tasks("db")
    host = task["host"]
    fill = f"head -c {MB}m /dev/urandom > /data/blob && sha256sum /data/blob"
    name = f"db.1.{task['id']}"
    written = fleet.docker(host, "exec", name, "sh", "-c", fill, check=True).stdout.split()[0]

    backup = md.popen("backup", "db")
    try:
        deadline = time.monotonic() + 60
        while name in " ".join(md.containers(host)):  # until its pass stopped the task
            assert time.monotonic() < deadline, md.containers(host)
            assert backup.poll() is None, backup.communicate()
            time.sleep(0.05)
        backup.send_signal(signal.SIGKILL)  # the controller dies before it starts it again
    finally:
        backup.kill()
        backup.communicate(timeout=30)  # reaped, its pipes closed
    assert not [c for c in md.containers(host) if c.startswith("db.1.")]

    said = _reconcile_until(md, lambda: len(md.tasks("db")) == 1)
    (again,) = md.tasks("db")
    assert again["host"] == host
    assert again["state"] == "running"
    (svc,) = [s for s in md.status()["services"] if s["name"] == "db"]
    assert svc["completed"] == 0
    assert svc["backups"]["slots"][0]["snapshots"], svc["backups"]
    (snap,) = _snapshots(md)
    with tarfile.open(
        fileobj=io.BytesIO(_dump(tmp_path / "repo", snap["id"], "/dbdata.tar"))
    ) as tar:
        blob = tar.extractfile("data/blob")
        assert blob is not None
        assert hashlib.sha256(blob.read()).hexdigest() == written
    read = fleet.docker(host, "exec", f"db.1.{again['id']}", "sh", "-c", "sha256sum /data/blob")
    assert read.stdout.split()[0] == written, said


def test_a_restore_drill_passes_or_fails_and_leaves_nothing_behind(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    spec = _with_repository(md, tmp_path, '["test", "-s", "/data/note"]')
    (task,) = md.tasks("db")
    host = task["host"]
    fleet.docker(host, "exec", f"db.1.{task['id']}", "sh", "-c", "echo kept > /data/note")
    res = md("backup", "db")
    assert res.returncode == 0, res.stdout + res.stderr
    (snap,) = _snapshots(md)

    res = md("backup", "verify", "db.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"db.1: snapshot {snap['short_id']} verified" in res.stdout, res.stdout
    (svc,) = [s for s in md.status()["services"] if s["name"] == "db"]
    verified = svc["backups"]["slots"][0]["verified"]
    assert (verified["snapshot"], verified["ok"]) == (snap["id"], True)

    spec.write_text(spec.read_text().replace("/data/note", "/data/absent"))
    assert md("apply", str(spec), "--wait").returncode == 0
    res = md("backup", "verify", "db")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "db.1: snapshot" in res.stderr, res.stderr
    assert "failed its verify: exit 1" in res.stderr
    metrics = md("metrics").stdout
    assert f'minidock_backup_verify_ok{{cluster="{md.cluster}",service="db",slot="1"}} 0.0' in (
        metrics
    )
    kinds = [e["kind"] for e in json.loads(md("events", "--json", "-n", "200").stdout)]
    assert kinds.index("backup-verify-failed") > kinds.index("backup-verified")
    for h in {host, *(t["host"] for t in md.tasks())}:
        left = fleet.docker(h, "ps", "-a", "--format", "{{.Names}}").stdout
        volumes = fleet.docker(h, "volume", "ls", "--format", "{{.Name}}").stdout
        assert ".verify" not in left + volumes, (left, volumes)
    assert len(md.tasks("db")) == 1  # the drill touched no task
