"""Docker's errors on real lab hosts, as the act path reads them (issue 19 item 5).

A host port taken by a container that is not MiniDock's, after the probe looked and before
the `docker run`: Docker refuses the start ("port is already allocated"), and the pass must
record that cause as the start's failure, avoid that host next, and never read it as the
name conflict of a replayed start (an adoption).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from minidock.core import admit
from minidock.model import Cluster, Event, Host, Inventory
from minidock.runner import PassResult, run_pass
from minidock.spec import load
from minidock.ssh import Result, SSHExecutor
from minidock.store.sqlite import SQLiteStore
from tests.integration.conftest import Fleet

PORT = 18095
BYSTANDER = "bystander-port"
LISTENER = (
    "setsid perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalPort => "
    f"{PORT}, Listen => 1, ReuseAddr => 1) or die $!; sleep 300' </dev/null >/dev/null 2>&1 &"
    " echo $!"
)


class TakesThePortFirst(SSHExecutor):
    """The real executor, except that just before the first `docker run` of a task the
    task's host port is taken on that host, by a container that is not MiniDock's or by a
    process outside Docker: the race between a probe and a start, made certain."""

    def __init__(self, fleet: Fleet, holder: str) -> None:
        super().__init__()
        self.fleet = fleet
        self.holder = holder
        self.taken_on = ""
        self.pid = ""

    def release(self) -> None:
        if self.taken_on and self.holder == "container":
            self.fleet.docker(self.taken_on, "rm", "-f", BYSTANDER)
        elif self.taken_on:
            self.fleet.exec(self.taken_on, "kill", self.pid)

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        if list(argv[:2]) == ["docker", "run"] and not self.taken_on:
            self.taken_on = host.name
            if self.holder == "container":
                bystander = ["run", "-d", "--name", BYSTANDER, "-p", f"{PORT}:8080"]
                self.fleet.docker(host.name, *bystander, "minidock-lab/web:5", check=True)
            else:
                held = self.fleet.exec(host.name, "sh", "-c", LISTENER, check=True)
                self.pid = held.stdout.strip()
        return await super().run(host, argv, input=input, timeout=timeout)


CAUSES = {
    "container": f"host port 0.0.0.0:{PORT} is taken by another container "
    f"(Bind for 0.0.0.0:{PORT} failed: port is already allocated)",
    "process": f"host port 0.0.0.0:{PORT} is taken by a process outside Docker "
    f"(listen tcp4 0.0.0.0:{PORT}: bind: address already in use)",
}


@pytest.mark.parametrize("holder", sorted(CAUSES))
def test_a_host_port_taken_outside_minidock_fails_the_start_with_that_cause(
    fleet: Fleet, tmp_path: Path, holder: str
) -> None:
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f'cluster = "itest"\ninventory = "{fleet.inventory}"\n\n'
        f'[services.web]\nimage = "minidock-lab/web:5"\nports = ["{PORT}:8080"]\n'
    )
    cluster, inventory = load(spec)
    store = SQLiteStore.open(tmp_path / "state")
    racing = TakesThePortFirst(fleet, holder)
    try:
        store.commit(
            admit(store.load(), cluster, store.next_generation_id()),
            [Event(0.0, "apply", "applied")],
            generation=cluster,
            source_path=str(spec),
        )
        result = asyncio.run(_pass(cluster, inventory, store, racing))
        host = racing.taken_on
        assert host
        cause = CAUSES[holder]
        (failure,) = result.failures
        assert f"on {host}: docker run failed: {cause}" in failure
        assert result.done == []
        kinds = [e.kind for _, e in store.events(limit=0)]
        assert "adopt" not in kinds
        assert "act-failed" in kinds
        slot = store.load().services["web"].slot(1)
        assert slot.avoid == host
        assert slot.last_exit.endswith(cause), slot

        for _ in range(6):
            asyncio.run(_pass(cluster, inventory, store, SSHExecutor()))
        where = {
            h: fleet.docker(h, "ps", "--filter", "label=minidock.service=web", "-q").stdout.split()
            for h in fleet.hosts
        }
        assert [h for h, ids in where.items() if ids] not in ([], [host]), where
        assert sum(len(ids) for ids in where.values()) == 1, where
        if holder == "container":
            still = fleet.docker(host, "inspect", "-f", "{{.State.Status}}", BYSTANDER)
            assert still.stdout.strip() == "running"  # not MiniDock's: never touched
    finally:
        store.close()
        racing.release()


async def _pass(
    cluster: Cluster, inventory: Inventory, store: SQLiteStore, executor: SSHExecutor
) -> PassResult:
    try:
        return await run_pass(cluster, inventory, store, executor)
    finally:
        await executor.close()
