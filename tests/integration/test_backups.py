"""`minidock backup` and `minidock restore` on the real lab with Debian's real restic on the
controller: data written into a volume-pinned service's volume is backed up on its
schedule by `watch` (after its before_backup hook), listed by `minidock backups`, and the
snapshot's file holds the volume as it was; a backup by hand then prunes the first by keep.
Its throughput (MB/s through the controller) is printed beside a plain `ssh HOST docker cp
... | restic backup --stdin` of the same volume (docs/benchmarks.md). Then host loss (issue
43): a backup, the host stopped and forgotten: the slot waits (exit 4, never started
empty) until `minidock restore db.1` puts the data back on a host the scheduler picks, with
no --force; with `on_host_loss = "restore"` the passes do that by themselves; the old host
back: one copy runs, its old volume kept and listed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import shlex
import signal
import subprocess
import tarfile
import threading
import time
import tomllib
from pathlib import Path
from typing import IO

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
schedule = "0 3 * * *" }}
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


def _scheduled_line(md: Minidock) -> str:
    """Run `minidock watch` until it says it made a scheduled backup: its line."""
    lines: queue.Queue[str] = queue.Queue()
    with md.popen("watch", "--interval", "2s") as watch:
        assert watch.stdout is not None
        assert watch.stderr is not None
        readers = [
            threading.Thread(target=_drain, args=(stream, lines), daemon=True)
            for stream in (watch.stdout, watch.stderr)
        ]
        for reader in readers:
            reader.start()
        try:
            while "scheduled backup of db" not in (line := lines.get(timeout=120)):
                continue
        finally:
            watch.send_signal(signal.SIGINT)
            watch.wait(timeout=60)
            for reader in readers:
                reader.join(timeout=10)
    return line


def _drain(stream: IO[str], into: queue.Queue[str]) -> None:
    for text in stream:
        into.put(text)


def test_a_pinned_volume_is_backed_up_on_schedule_and_by_hand_listed_and_pruned(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    password, repo = tmp_path / "restic.pass", tmp_path / "repo"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    spec = md.spec(DB.format(repo=repo, password=password))
    res = md("apply", str(spec), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    (task,) = md.tasks("db")
    host, name = task["host"], f"db.1.{task['id']}"
    fill = (
        f"head -c {MB}m /dev/urandom > /data/blob && echo kept > /data/note && sha256sum /data/blob"
    )
    written = fleet.docker(host, "exec", name, "sh", "-c", fill, check=True).stdout.split()[0]

    # no snapshot yet: the latest scheduled time (03:00) is caught up at watch's first round
    line = _scheduled_line(md)
    assert f"{name} dbdata: snapshot " in line, line
    listed = md("backups", "db", "--json")
    assert listed.returncode == 0, listed.stderr
    (snap,) = json.loads(listed.stdout)["snapshots"]
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
