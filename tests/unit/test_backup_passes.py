"""`minidock backup`, `minidock backup verify` and scheduled backups through the CLI over
the fake engines (tests/fakes.py's FakeDocker, its `docker cp` out, `exec` and drill runs
answered here) into a real restic repository: the backup is an intent carried out by the
passes, so a command cut short leaves it to `reconcile`, which starts the stopped task
again; a `backup.schedule` runs from `reconcile` alone; a drill's outcome is kept.
The pure machine: tests/unit/test_backing.py; the lab: tests/integration/test_backups.py."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

import minidock.cli
from minidock import restic
from minidock.commands.docker import volume_helper_name
from minidock.model import Host
from minidock.ssh import Result
from minidock.usecases import Runtime
from tests.fakes import FakeDocker, FakeExecutor, fail, ok
from tests.unit.test_cli import QuickAsyncio, in_tmp, invoke, ssh_calls  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")

PASSWORD = "backup-test-pass"
INVENTORY = "".join(
    f'[[hosts]]\nname = "host{n}"\naddress = "127.0.0.1"\nport = 1\n' for n in (1, 2)
)
CLUSTER = """\
cluster = "prod"
inventory = "inventory.toml"

[services.db]
image = "web:5"
volumes = ["data:/var/lib/data"]
restart = {{ condition = "on-failure" }}
backup = {{ repository = "{repo}", password = {{ file = "pass" }}, stop = true, {more} }}
hooks = {{ before_backup = {{ command = ["sh", "-c", "dump"] }} }}
"""


def tar_of(top: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        entry = tarfile.TarInfo(top)
        entry.type = tarfile.DIRTYPE
        tar.addfile(entry)
        blob = tarfile.TarInfo(f"{top}/blob")
        blob.size = 1000
        tar.addfile(blob, io.BytesIO(b"z" * 1000))
    return out.getvalue()


class Engines:
    """FakeDocker, with what a backup and a drill ask of a host answered: `docker cp` out
    (the volume's tar), `volume inspect`, the hook's `exec`, the drill's `run --rm`."""

    def __init__(self, docker: FakeDocker) -> None:
        self.docker = docker
        self.hooks = 0
        self.copied: list[str] = []  # the container each copy streamed out of
        self.drills: list[list[str]] = []
        self.drill_exit = 0

    def __call__(self, host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:2] == ["docker", "cp"] and argv[-1] == "-":
            self.copied.append(argv[2].split(":")[0])
            return ok(tar_of("data").decode("latin-1"))
        if argv[:3] == ["docker", "volume", "inspect"]:
            return ok(f"{argv[-1]}\n")
        if argv[:3] == ["docker", "volume", "rm"]:
            return ok()
        if argv[:2] == ["docker", "exec"] and "dump" in argv:
            self.hooks += 1
            return ok()
        if argv[:3] == ["docker", "run", "--rm"]:
            self.drills.append(argv)
            if self.drill_exit:
                return fail("PG_VERSION: no such file", self.drill_exit)
            return ok("17\n")
        if argv[:2] == ["docker", "cp"]:  # a drill's stream into its throwaway volume
            return ok()
        if argv[:2] == ["docker", "create"] and argv[3].startswith("minidock-copy."):
            return ok("helper\n")  # a helper holding a volume
        return self.docker.handler(host, argv, input)


@pytest.fixture
def engines(
    in_tmp: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    ssh_calls: list[str],  # noqa: F811
) -> Engines:
    docker = FakeDocker()
    hosts = Engines(docker)

    def make() -> FakeExecutor:
        docker.advance()
        return FakeExecutor(hosts)

    monkeypatch.setattr(minidock.cli, "SSHExecutor", make)
    monkeypatch.setattr(minidock.cli, "asyncio", QuickAsyncio(docker))
    (in_tmp / "inventory.toml").write_text(INVENTORY)
    (in_tmp / "pass").write_text(PASSWORD + "\n")
    (in_tmp / "pass").chmod(0o600)
    return hosts


def applied(root: Path, more: str = "keep = { last = 1 }") -> Path:
    (root / "cluster.toml").write_text(CLUSTER.format(repo=root / "repo", more=more))
    state = root / "state"
    res = invoke("apply", str(root / "cluster.toml"), "--state", str(state), "--wait")
    assert res.exit_code == 0, res.output
    return state


def snapshots(root: Path) -> list[restic.Snapshot]:
    repo = restic.Repository(str(root / "repo"), PASSWORD)
    return asyncio.run(restic.snapshots(repo))


def running(engines: Engines) -> list[str]:
    return [n for n in engines.docker.names(status="running") if n.startswith("db.")]


def status(state: Path) -> dict[str, object]:
    res = invoke("status", "--json", "--state", str(state))
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_a_backup_stops_copies_starts_and_prints_its_snapshot(
    engines: Engines,
    in_tmp: Path,  # noqa: F811
) -> None:
    state = applied(in_tmp)
    (before,) = running(engines)
    res = invoke("backup", "db", "--state", str(state))
    assert res.exit_code == 0, res.output
    (snap,) = snapshots(in_tmp)
    (after,) = running(engines)
    assert after != before  # stopped for the copy, started again
    assert f"{after} data: snapshot {snap.short_id} (" in res.stdout, res.stdout
    assert engines.hooks == 1
    assert engines.copied == [volume_helper_name("prod_db.1_data")]  # the task was stopped
    assert {k: snap.tag(k) for k in ("cluster", "service", "slot", "volume")} == {
        "cluster": "prod",
        "service": "db",
        "slot": "1",
        "volume": "data",
    }
    assert PASSWORD not in res.output


def test_a_backup_cut_short_after_its_stop_is_finished_by_reconcile(
    engines: Engines,
    in_tmp: Path,  # noqa: F811
) -> None:
    """Issue 43, break 5, through the CLI: the command's one pass stops the task (its
    timeout spent); the next `reconcile`s copy it and start it again, never Complete."""
    state = applied(in_tmp)
    res = invoke("backup", "db", "--timeout", "0s", "--state", str(state))
    assert res.exit_code == 1, res.output  # not backed up before the timeout
    assert "not backed up before the timeout" in res.stderr
    assert len(running(engines)) == 1  # its one pass ran the hook
    invoke("reconcile", "--state", str(state))  # this one stops it, then the controller dies
    assert running(engines) == []
    doc = status(state)
    assert "stopping its task for the copy" in json.dumps(doc) or "copying" in json.dumps(doc)
    for _ in range(6):
        res = invoke("reconcile", "--state", str(state))
        if res.exit_code != 3:
            break
    assert res.exit_code == 0, res.output
    assert len(running(engines)) == 1
    assert len(snapshots(in_tmp)) == 1
    kinds = [
        e["kind"] for e in json.loads(invoke("events", "--json", "--state", str(state)).stdout)
    ]
    assert "backed-up" in kinds


def test_a_scheduled_backup_runs_from_reconcile_alone(
    engines: Engines,
    in_tmp: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = minidock.cli.runtime

    def on_the_engines_clock() -> Runtime:  # the test moves time past a scheduled minute
        made = real()
        return replace(made, clock=replace(made.clock, now=engines.docker.clock))

    monkeypatch.setattr(minidock.cli, "runtime", on_the_engines_clock)
    # The engines' clock starts at the wall time: an apply begun late in a minute crossed
    # into the next one on its passes (a few clock seconds), and the schedule, armed at its
    # first pass, rightly ran from the apply (CI, one run in ~15). Start it one second into
    # a minute, so the apply stays inside the minute it armed the schedule in.
    engines.docker.clock.advance(61.0 - engines.docker.clock.now % 60)
    state = applied(in_tmp, 'schedule = "* * * * *"')
    said = invoke("validate", str(in_tmp / "cluster.toml")).stdout
    assert "db: backed up on '* * * * *' (UTC), next " in said, said
    assert snapshots_or_none(in_tmp) is None  # armed at the apply: nothing yet
    engines.docker.advance(61.0)
    seen = 0
    for _ in range(8):
        engines.docker.advance(1.0)
        res = invoke("reconcile", "--state", str(state))
        seen = len(snapshots_or_none(in_tmp) or [])
        if seen and res.exit_code == 0:
            break
    assert seen >= 1, res.output  # (a minute's schedule: the engines' clock may pass two)
    assert len(running(engines)) == 1
    events = json.loads(invoke("events", "--json", "--state", str(state)).stdout)
    assert "backup-scheduled" in [e["kind"] for e in events]


def snapshots_or_none(root: Path) -> list[restic.Snapshot] | None:
    if not (root / "repo").exists():
        return None
    return snapshots(root)


@pytest.mark.parametrize("passes", [True, False])
def test_a_drill_restores_the_newest_snapshot_runs_verify_and_keeps_its_outcome(
    engines: Engines,
    in_tmp: Path,  # noqa: F811
    passes: bool,
) -> None:
    state = applied(in_tmp, 'verify = ["test", "-s", "/var/lib/data/blob"]')
    assert invoke("backup", "db", "--state", str(state)).exit_code == 0
    (snap,) = snapshots(in_tmp)
    engines.drill_exit = 0 if passes else 1
    res = invoke("backup", "verify", "db.1", "--state", str(state))
    assert res.exit_code == (0 if passes else 1), res.output
    (drill,) = engines.drills
    assert drill[drill.index("--entrypoint") :] == [
        "--entrypoint",
        "test",
        "web:5",
        "-s",
        "/var/lib/data/blob",
    ]
    assert drill[5:7] == ["--network", "none"]
    said = f"db.1: snapshot {snap.id[:8]} verified: 17" if passes else "failed its verify"
    assert said in res.output
    doc = status(state)
    (svc,) = [s for s in doc["services"] if s["name"] == "db"]  # type: ignore[attr-defined]
    verified = svc["backups"]["slots"][0]["verified"]
    assert (verified["snapshot"], verified["ok"]) == (snap.id, passes)
    text = invoke("status", "--state", str(state)).stdout
    assert f"db.1: snapshot {snap.id[:8]} {'verified' if passes else 'FAILED its verify'}" in text
    out = in_tmp / "minidock.prom"
    assert invoke("metrics", "--output", str(out), "--state", str(state)).exit_code == 0
    series = 'minidock_backup_verify_ok{cluster="prod",service="db",slot="1"}'
    assert f"{series} {1.0 if passes else 0.0}" in out.read_text()
    kinds = [
        e["kind"] for e in json.loads(invoke("events", "--json", "--state", str(state)).stdout)
    ]
    assert ("backup-verified" if passes else "backup-verify-failed") in kinds
