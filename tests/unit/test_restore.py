"""`minidock restore`: a restore act on the hosts (minidock.act.relocate, with the executor and
the snapshots faked: a volume is touched only once its snapshot's first chunk came and
looks like the mount; a stream that breaks later removes what it began), which snapshot
each volume takes (`choose_snapshots`), and the command's bad input (exit 2, one line, no
SSH, no state change). Its decisions pass by pass: tests/unit/test_volume_moves.py; the
real thing: tests/integration/test_backups.py."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path

import pytest

from minidock import restic
from minidock.act.acts import Acts
from minidock.act.relocate import carry_move
from minidock.core.hosts import HostPhase, HostState
from minidock.core.moving import MoveFailed, VolumesCopied
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.volumes import MoveAct, VolumeMove
from minidock.model import EngineKind, Host, Inventory, Service, Volume
from minidock.restic import ResticError, Snapshot
from minidock.spec import load
from minidock.ssh import Result
from minidock.store.sqlite import SQLiteStore
from minidock.usecases.outcomes import BadInput
from minidock.usecases.restores import choose_snapshots, parse_subject
from tests.fakes import FakeExecutor, fail, ok
from tests.unit.test_cli import (  # noqa: F401 (fixtures)
    applied,
    in_tmp,
    invoke,
    one_line_error,
    ssh_calls,
)

A = Host(name="a", address="10.0.0.1")
ID = "4f2a9c1e" + "7" * 56
VOLUME = "prod_db.1_data"
DB = Service(name="db", image="db:1", volumes=(Volume("data", "/var/lib/data"),))


def tar_of(top: str, size: int = 300_000) -> bytes:
    """A `docker cp` stream: the mount's directory as its one top entry, a file in it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        entry = tarfile.TarInfo(top)
        entry.type = tarfile.DIRTYPE
        tar.addfile(entry)
        blob = tarfile.TarInfo(f"{top}/blob")
        blob.size = size
        tar.addfile(blob, io.BytesIO(b"z" * size))
    return out.getvalue()


class Snapshots:
    """A repository as a restore reads it: each snapshot's tar in chunks; `broken` raises
    after that many chunks (0: before the first, as restic does on a wrong password)."""

    def __init__(self, data: bytes, broken: int | None = None) -> None:
        self.data, self.broken = data, broken
        self.asked: list[tuple[str, str]] = []

    async def stream(self, snapshot: str, volume: str) -> AsyncGenerator[bytes, None]:
        self.asked.append((snapshot, volume))
        for n, at in enumerate(range(0, len(self.data), 65536)):
            if n == self.broken:
                raise ResticError("restic dump failed (exit 1): wrong password or no key found")
            yield self.data[at : at + 65536]
        if self.broken is not None and self.broken * 65536 >= len(self.data):
            raise ResticError("restic dump failed (exit 1): unexpected end")


READ_BACK = ["docker", "cp", f"minidock-copy.{VOLUME}:/var/lib/data", "-"]


class Host1:
    """One host's docker as a restore reaches it: images, helpers, volumes, a stream in."""

    def __init__(self) -> None:
        self.volumes = {VOLUME: "the old data"}
        self.received = b""
        self.log: list[str] = []

    def __call__(self, host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:3] == ["docker", "volume", "rm"]:
            self.log.append("rm volume")
            self.volumes.pop(argv[3], None)
            return ok()
        if argv[:3] == ["docker", "volume", "inspect"]:
            return ok(f"{argv[-1]}\n") if argv[-1] in self.volumes else fail("no such volume")
        if argv[:2] == ["docker", "create"]:
            self.log.append("create helper")
            self.volumes.setdefault(VOLUME, "")
            return ok("id\n")
        if argv[:4] == ["docker", "cp", "-a", "-"]:
            self.log.append(f"cp into {argv[4]}")
            self.received = (input or "").encode("latin-1")
            self.volumes[VOLUME] = "restored"
            return ok()
        if argv in (READ_BACK, ["docker", "volume", "export", VOLUME]):
            self.log.append("read back")  # the volume holds what came
            return ok(self.received.decode("latin-1"))
        if argv[:3] == ["docker", "volume", "import"]:  # Podman's, into the volume itself
            self.log.append(f"import into {argv[3]} from {argv[4]}")
            self.received = (input or "").encode("latin-1")
            self.volumes[VOLUME] = "restored"
            return ok()
        return ok("[]\n")  # image inspect, rm -f of a helper: nothing to say


def restore_act(spec: Service = DB) -> MoveAct:
    move = VolumeMove("a", "a", snapshot=ID[:8], snapshots=(("data", ID),))
    return MoveAct("db", 1, spec, move)


def carried(
    host: Host1, snapshots: Snapshots | None, spec: Service = DB, engine: EngineKind = "docker"
) -> tuple[object, Acts]:
    acts = Acts(FakeExecutor(host), Inventory("inventory.toml", (A,)), "prod", 1000.0)
    acts.engines["a"] = engine  # as the pass's probe read it
    asyncio.run(carry_move(acts, restore_act(spec), snapshots, clock=iter([1.0, 3.0]).__next__))
    (outcome,) = acts.outcomes
    return outcome, acts


def test_a_snapshot_streams_into_a_fresh_volume_under_the_mounts_parent() -> None:
    data = tar_of("data")
    host, snapshots = Host1(), Snapshots(data)
    outcome, _ = carried(host, snapshots)
    assert outcome == VolumesCopied("db", 1, len(data), 2.0)
    assert snapshots.asked == [(ID, "data")]
    assert host.received == data
    assert host.log == [
        "rm volume",
        "create helper",
        f"cp into minidock-copy.{VOLUME}:/var/lib",
        "read back",  # the volume holds what came (never started on empty)
    ]
    assert host.volumes == {VOLUME: "restored"}


def test_on_a_podman_host_a_snapshot_is_imported_into_the_volume_its_top_taken_out() -> None:
    """Podman's cp into the never-started helper would miss the volume (it arrived empty):
    the stream goes into the volume itself, its names as the volume holds them."""
    data = tar_of("data")
    host, snapshots = Host1(), Snapshots(data)
    outcome, _ = carried(host, snapshots, engine="podman")
    assert outcome == VolumesCopied("db", 1, len(data), 2.0)  # the snapshot's bytes
    assert host.log == ["rm volume", "create helper", f"import into {VOLUME} from -", "read back"]
    with tarfile.open(fileobj=io.BytesIO(host.received)) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [("blob", 300_000)]
    assert host.volumes == {VOLUME: "restored"}


def test_a_snapshot_that_fails_before_its_first_byte_leaves_the_volume_as_it_was() -> None:
    host = Host1()
    outcome, _ = carried(host, Snapshots(tar_of("data"), broken=0))
    assert isinstance(outcome, MoveFailed)
    assert "wrong password" in outcome.line
    assert (host.log, host.volumes) == ([], {VOLUME: "the old data"})


def test_a_snapshot_of_another_mount_point_is_refused_before_the_volume_is_touched() -> None:
    host = Host1()
    outcome, _ = carried(host, Snapshots(tar_of("srv")))
    assert isinstance(outcome, MoveFailed)
    assert "holds srv/, but the task mounts data at /var/lib/data" in outcome.line
    assert (host.log, host.volumes) == ([], {VOLUME: "the old data"})


def test_a_stream_that_breaks_half_way_removes_the_volume_it_began() -> None:
    host = Host1()
    outcome, _ = carried(host, Snapshots(tar_of("data"), broken=2))
    assert isinstance(outcome, MoveFailed)
    assert host.log[0] == "rm volume"
    assert host.log[-1] == "rm volume"
    assert VOLUME not in host.volumes  # never half a restore to start on


def test_a_service_with_no_repository_fails_the_restore_saying_so() -> None:
    host = Host1()
    outcome, _ = carried(host, None)
    assert isinstance(outcome, MoveFailed)
    assert outcome.line == "db has no backup repository to restore from"
    assert host.volumes == {VOLUME: "the old data"}


def test_the_repositorys_password_is_read_at_the_act_and_a_missing_file_fails_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "a"\n')
    (tmp_path / "pass").write_text("act-pass\n")
    (tmp_path / "pass").chmod(0o600)
    (tmp_path / "cluster.toml").write_text(
        'cluster = "prod"\ninventory = "inventory.toml"\n[services.db]\nimage = "db:1"\n'
        'volumes = ["data:/var/lib/data"]\n'
        'backup = { repository = "repo", password = { file = "pass" } }\n'
    )
    cluster, _ = load(tmp_path / "cluster.toml")
    (tmp_path / "pass").unlink()  # rotated away since the apply
    host = Host1()
    outcome, _ = carried(host, None, cluster.services[0])
    assert isinstance(outcome, MoveFailed)
    assert f"{tmp_path / 'pass'}" in outcome.line
    assert host.volumes == {VOLUME: "the old data"}


# -- which snapshot each volume takes -----------------------------------------------------------
def snap(
    ident: str, time: str, slot: int = 1, volume: str = "data", cluster: str = "prod"
) -> Snapshot:
    tags = (("cluster", cluster), ("service", "db"), ("slot", str(slot)), ("volume", volume))
    full = ident.ljust(64, "0")
    return Snapshot(full, ident[:8], time, "host1", (f"/{volume}.tar",), tags)


FOUND = [
    snap("aaaa0001", "2026-12-01T03:00:00Z"),
    snap("bbbb0001", "2026-12-01T03:00:09Z", volume="logs"),
    snap("aaaa0002", "2026-12-02T03:00:00Z"),
    snap("bbbb0002", "2026-12-02T03:00:07Z", volume="logs"),
    snap("cccc0001", "2026-12-03T03:00:00Z", slot=2),
    snap("dddd0001", "2026-12-03T04:00:00Z", cluster="staging"),
]
WHERE = ("prod", "db", 1)


def test_without_a_snapshot_each_volume_takes_the_slots_newest() -> None:
    picks = choose_snapshots(FOUND, WHERE, ["data", "logs"], [], "/repo")
    assert [(v, i[:8]) for v, i in picks] == [("data", "aaaa0002"), ("logs", "bbbb0002")]


def test_a_named_snapshot_brings_the_other_volumes_of_the_same_backup() -> None:
    picks = choose_snapshots(FOUND, WHERE, ["data", "logs"], ["aaaa0001"], "/repo")
    assert [(v, i[:8]) for v, i in picks] == [("data", "aaaa0001"), ("logs", "bbbb0001")]
    picks = choose_snapshots(FOUND, WHERE, ["data", "logs"], ["bbbb0002", "aaaa0001"], "/r")
    assert [(v, i[:8]) for v, i in picks] == [("logs", "bbbb0002"), ("data", "aaaa0001")]


def test_another_slots_or_clusters_snapshot_may_be_named_a_clone() -> None:
    assert choose_snapshots(FOUND, WHERE, ["data"], ["cccc"], "/r")[0][1][:8] == "cccc0001"
    assert choose_snapshots(FOUND, WHERE, ["data"], ["dddd0001"], "/r")[0][1][:8] == "dddd0001"


@pytest.mark.parametrize(
    ("volumes", "given", "said"),
    [
        (["data"], ["ffff"], "no snapshot 'ffff' in /repo: `minidock backups db` lists them"),
        (["data"], ["aaaa"], "'aaaa' begins 2 snapshots' ids: give more"),
        (["data"], ["bbbb0001"], "snapshot bbbb0001 is of volume logs, not one of db's named"),
        (["data"], ["aaaa0001", "aaaa0002"], "aaaa0001 and aaaa0002 are both of data"),
        (["data", "conf"], [], "no snapshot of db.1 conf in /repo (cluster prod)"),
        (["data", "logs"], ["cccc0001"], "no snapshot of db.2 logs in /repo"),
    ],
)
def test_a_snapshot_that_cannot_be_chosen_is_one_line(
    volumes: list[str], given: list[str], said: str
) -> None:
    with pytest.raises(BadInput, match=said.replace("(", r"\(").replace(")", r"\)")):
        choose_snapshots(FOUND, WHERE, volumes, given, "/repo")


def test_a_subject_is_a_service_or_one_of_its_slots() -> None:
    assert parse_subject("db") == ("db", None)
    assert parse_subject("db.2") == ("db", 2)
    for bad in ("db.0", "db.x", ".1"):
        with pytest.raises(BadInput, match=r"is not SERVICE or SERVICE\.SLOT"):
            parse_subject(bad)


# -- the command's bad input --------------------------------------------------------------------
CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n'
PINNED = (
    CLUSTER
    + '[services.db]\nimage = "db:1"\nreplicas = 2\nvolumes = ["data:/var/lib/data"]\n'
    + 'backup = {{ repository = "{repo}", password = {{ file = "pass" }} }}\n'
    + '[services.web]\nimage = "web:5"\n'
)
HOSTS = "".join(
    f'[[hosts]]\nname = "{h}"\naddress = "127.0.0.1"\nport = 1\n' for h in ("host1", "host2")
)


@pytest.fixture
def pinned(in_tmp: Path) -> Path:  # noqa: F811
    """Generation 1 of a pinned db (2 slots, no task yet) and a web, in a state directory,
    with an empty restic repository."""
    (in_tmp / "inventory.toml").write_text(HOSTS)
    (in_tmp / "pass").write_text("restore-test-pass\n")
    (in_tmp / "pass").chmod(0o600)
    (in_tmp / "cluster.toml").write_text(PINNED.format(repo=in_tmp / "repo"))
    directory = in_tmp / "state"
    applied(directory, in_tmp / "cluster.toml")
    return directory


NEEDS_RESTIC = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nope.1"], "unknown service 'nope'"),
        (["db.x"], "'db.x' is not SERVICE or SERVICE.SLOT (e.g. db or db.1)"),
        (["web.1"], "restore: web has no named volume: there is nothing to restore"),
        (["db.3"], "restore: db has no slot 3 (slots 1..2)"),
        (["db.1", "--host", "host9"], "unknown host 'host9'"),
        (["db", "--host", "host1"], "restore: --host needs one slot: `minidock restore db.1"),
        (["db.1"], "restore: db.1 has no recorded host (its host was forgotten, or it never"),
    ],
)
def test_bad_input_is_one_line_exit_2_with_no_ssh_and_no_change(
    pinned: Path,
    ssh_calls: list[str],  # noqa: F811
    args: list[str],
    said: str,
) -> None:
    before = (pinned / "state.db").read_bytes()
    line = one_line_error(invoke("restore", *args, "--state", str(pinned)))
    assert said in line
    assert (pinned / "state.db").read_bytes() == before


@NEEDS_RESTIC
def test_a_repository_without_the_snapshot_refuses_before_any_ssh(
    pinned: Path,
    ssh_calls: list[str],  # noqa: F811
    in_tmp: Path,  # noqa: F811
) -> None:
    before, repo = (pinned / "state.db").read_bytes(), in_tmp / "repo"
    args = ("restore", "db.1", "--host", "host2", "--state", str(pinned))
    line = one_line_error(invoke(*args), code=1)  # none there yet: restic says so
    assert line.startswith(f"{repo}: restic snapshots failed (exit 1): "), line
    asyncio.run(restic.ensure(restic.Repository(str(repo), "restore-test-pass")))
    line = one_line_error(invoke(*args))
    assert line.startswith(f"restore: no snapshot of db.1 data in {repo} (cluster prod)"), line
    assert (pinned / "state.db").read_bytes() == before


@pytest.mark.parametrize(
    ("phase", "said"),
    [
        (HostPhase.DOWN, "move: host2 is not ready (down (timed out)): a move streams into it"),
        (
            HostPhase.UNREACHABLE,
            "move: host2 is not ready (unreachable (timed out)): a move streams into it",
        ),
    ],
)
def test_a_move_to_a_host_that_is_not_ready_is_refused_in_one_line(
    pinned: Path,
    ssh_calls: list[str],  # noqa: F811
    phase: HostPhase,
    said: str,
) -> None:
    with SQLiteStore.open(pinned) as store:
        state = store.load()
        db = state.services["db"]
        db = replace(db, slots={1: SlotState(SlotPhase.RUNNING, "t1", "host1")})
        host2 = HostState(phase=phase, failures=2, last_error="timed out")
        state = replace(
            state, services={**state.services, "db": db}, hosts={**state.hosts, "host2": host2}
        )
        store.commit(state)
    before = (pinned / "state.db").read_bytes()
    assert one_line_error(invoke("move", "db.1", "--to", "host2", "--state", str(pinned))) == said
    assert (pinned / "state.db").read_bytes() == before
