"""An ACME certificate across passes, level-based (docs/ingress.md#acme), in process behind
a fake Caddy and a fake CA: the pass that finds it due starts the order and loads
nothing for it; the next pass loads the order's HTTP-01 responses with its routes, once,
and only then tells the CA; the passes after collect it, each on the pass's clock."""

from __future__ import annotations

from pathlib import Path

import pytest

import minidock.act.acme
from minidock.act.acme import Issued, Started
from minidock.core.tls import AcmeAccount
from minidock.model import AcmeSettings
from tests.unit.test_cli import (  # noqa: F401 (fixtures)
    FLEET,
    Fleet,
    in_tmp,
    ssh_calls,
)
from tests.unit.test_serving_cli import ROUTED, CaddyDocker, edge_fleet

ACME = ROUTED.replace(
    "[services.web]",
    '[ingress.acme]\ndirectory = "https://acme.test/dir"\n\n[services.web]',
).replace(
    'ingress = { host = "app.test", port = 8080 }',
    'ingress = { host = "app.test", port = 8080, tls = "acme" }',
)
PATH = "/.well-known/acme-challenge/tok"
RESPONSE = "tok.thumbprint"


class FakeCa:
    """The CA's side of `minidock.act.acme`: what each call saw, and the proxy's loaded
    config when the CA was told the responses are up."""

    def __init__(self, docker: CaddyDocker) -> None:
        self.docker = docker
        self.calls: list[str] = []
        self.clocks: list[float] = []
        self.loaded_when_told: list[str] = []

    async def start(
        self, settings: AcmeSettings, account: AcmeAccount | None, name: str, now: float
    ) -> tuple[AcmeAccount, Started]:
        self.calls.append(f"start {name}")
        self.clocks.append(now)
        made = AcmeAccount(settings.directory, "JWK", "https://acme.test/acct/1")
        return made, Started("https://acme.test/order/1", "KEY", "CSR", ((PATH, RESPONSE),))

    async def answer(
        self, settings: AcmeSettings, account: AcmeAccount, url: str, now: float
    ) -> None:
        self.calls.append(f"answer {url}")
        self.clocks.append(now)
        self.loaded_when_told.append(self.docker.proxies["host1"][1])

    async def collect(
        self, settings: AcmeSettings, account: AcmeAccount, url: str, csr: str, key: str, now: float
    ) -> Issued | None:
        self.calls.append(f"collect {url}")
        self.clocks.append(now)
        return None  # the CA is still at it


def loads(fleet: Fleet) -> int:
    """The `caddy reload`s the latest command sent (each command connects anew)."""
    return sum(1 for argv in fleet.executors[-1].argvs() if argv[:2] == ["docker", "exec"]
               and "reload" in argv)  # fmt: skip


def test_an_order_under_way_is_loaded_once_by_the_pass_and_then_told_to_the_ca(
    in_tmp: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    ssh_calls: list[str],  # noqa: F811
) -> None:
    fleet = edge_fleet(in_tmp, monkeypatch, FLEET, ROUTED)
    docker = fleet.docker
    assert isinstance(docker, CaddyDocker)
    ca = FakeCa(docker)
    for name in ("start", "answer", "collect"):
        monkeypatch.setattr(minidock.act.acme, name, getattr(ca, name))
    fleet.cluster.write_text(ACME)
    fleet.run("apply", str(fleet.cluster))  # its pass finds app.test due: the order starts
    assert ca.calls == ["start app.test"]
    assert RESPONSE not in docker.proxies["host1"][1]  # nothing loaded for it this pass

    fleet.run("reconcile")  # the pass with the order under way
    assert loads(fleet) == 1  # its own load, no other
    assert ca.calls[1:] == ["answer https://acme.test/order/1"]
    assert len(ca.loaded_when_told) == 1
    assert RESPONSE in ca.loaded_when_told[0]
    assert PATH in ca.loaded_when_told[0]

    fleet.run("reconcile")  # answered: collected (still with the CA), nothing reloaded
    assert loads(fleet) == 0
    assert ca.calls[2:] == ["collect https://acme.test/order/1"]
    assert RESPONSE in docker.proxies["host1"][1]  # still served while pending
    assert ca.clocks == sorted(ca.clocks)  # each pass's own clock, passed in
