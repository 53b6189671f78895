"""A backup's read on a Podman host (minidock.act.backups): the volume's own export, out of
the running task too, renamed into the stream a Docker host gives (`data/...`), so a
snapshot restores on either engine; a Docker host's read is the task's `docker cp` as
it was. The restic repository is real (Debian's restic), the hosts faked."""

from __future__ import annotations

import asyncio
import io
import tarfile

import pytest

from minidock import restic
from minidock.act import backups as saving
from minidock.act.acts import Acts
from minidock.act.carry import carry_out
from minidock.commands.proxies import NOTHING_RENDERED
from minidock.core import ControllerState
from minidock.core.backing import BackupAct, BackupStep
from minidock.core.plan import Plan
from minidock.core.saving import Copied
from minidock.model import (
    BackupPolicy,
    Cluster,
    Engine,
    EngineKind,
    Host,
    HostObservation,
    Inventory,
    Observed,
    Service,
    Volume,
)
from minidock.ssh import Result
from tests.fakes import FakeExecutor, ok
from tests.unit.test_volumecopy import tar_of

pytestmark = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")

A = Host(name="a", address="10.0.0.1")
VOLUME = "prod_db.1_data"
CONTENT = [("PG_VERSION", b"16\n"), ("base/1", b"x" * 70_000)]


class Host1:
    """One host's engine as a backup's read reaches it."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def __call__(self, host: Host, argv: list[str], input: str | None) -> Result:
        self.argvs.append(argv)
        if argv == ["docker", "volume", "export", VOLUME]:  # Podman's: no top entry
            return ok(tar_of(CONTENT).decode("latin-1"))
        if argv == ["docker", "cp", "db.1.abc:/var/lib/data", "-"]:
            return ok(tar_of([(f"data/{n}", d) for n, d in CONTENT]).decode("latin-1"))
        raise AssertionError(argv)


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_backup_on_either_engine_holds_the_same_stream(
    engine: EngineKind, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = f"{tmp_path}/repo"
    monkeypatch.setattr(saving, "password_value", lambda policy: "pw")
    spec = Service(
        name="db",
        image="db:1",
        volumes=(Volume("data", "/var/lib/data"),),
        backup=BackupPolicy(repository=repo),
    )
    host = Host1()
    acts = Acts(FakeExecutor(host), Inventory("inventory.toml", (A,)), "prod", 1000.0)
    acts.engines["a"] = engine
    act = BackupAct("db", 1, BackupStep.COPY, spec, "a", container="db.1.abc")
    asyncio.run(saving.carry_backup(acts, act))
    (copied,) = acts.outcomes
    assert isinstance(copied, Copied), copied
    podman = engine == "podman"
    assert host.argvs == [
        ["docker", "volume", "export", VOLUME]
        if podman
        else ["docker", "cp", "db.1.abc:/var/lib/data", "-"]
    ]

    async def dumped() -> bytes:
        (snapshot,) = await restic.snapshots(restic.Repository(repo, "pw"), {"service": "db"})
        stream = restic.dump(
            restic.Repository(repo, "pw"), snapshot.id, "/" + restic.stdin_name("data")
        )
        return b"".join([chunk async for chunk in stream])

    with tarfile.open(fileobj=io.BytesIO(asyncio.run(dumped()))) as tar:
        held = [(m.name, m.uid, (tar.extractfile(m) or io.BytesIO()).read()) for m in tar]
    assert held == [(f"data/{n}", 999, d) for n, d in CONTENT]


def test_the_acts_take_each_hosts_engine_from_the_passs_probe() -> None:
    """A pass's acts stream per engine as the probe read it; a host whose engine was not
    read is taken for Docker (its argv as before)."""
    observed = Observed(
        {
            "a": HostObservation("a", True, engine=Engine("podman", "5.4.2")),
            "b": HostObservation("b", True, engine=Engine("docker", "26.1.5")),
            "c": HostObservation("c", False, error="unreachable"),
        }
    )
    acts = Acts(FakeExecutor(Host1()), Inventory("inventory.toml", (A,)), "prod", 1000.0)
    asyncio.run(
        carry_out(
            acts,
            Plan(ControllerState()),
            Cluster("prod", "cluster.toml", "inventory.toml", ()),
            observed,
            NOTHING_RENDERED,
        )
    )
    assert [acts.engine_of(h) for h in "abc"] == ["podman", "docker", "docker"]
