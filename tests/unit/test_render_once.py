"""Every proxy's config is rendered once a pass (issue 46, "Render once"): right after the
decision, from its Plan (`minidock.commands.proxies.render`), and the act path, `plan` and
`status` read that render. One pass of the real runner over FakeDocker, with an ingress
route whose certificate ACME issued (in the state), an exposed service (name proxies),
and proxies that answer as Caddy and HAProxy would."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from minidock.commands import proxies
from minidock.commands.caddy import load_argv, proxy_name, proxy_probe_argv
from minidock.commands.haproxy import name_proxy_name, names_probe_argv
from minidock.core import Plan, admit
from minidock.core.tls import issued
from minidock.model import (
    AcmeSettings,
    Cluster,
    Event,
    Host,
    Ingress,
    Inventory,
    Observed,
    Route,
    RouteTls,
    Service,
)
from minidock.runner import run_pass
from minidock.ssh import Result
from minidock.store.sqlite import SQLiteStore
from tests.behaviour import Clock
from tests.fakes import FakeDocker, FakeExecutor, ok
from tests.sim import hosts

CHAIN, KEY = "CHAIN-OF-app.test", "KEY-OF-app.test"
WEB = Service("web", "web:5", replicas=1, ingress=(Route("app.test", "/", 8080, RouteTls("acme")),))
API = Service("api", "api:1", replicas=1, expose=(8080,))
ACME = AcmeSettings(directory="https://acme.test/dir")
CLUSTER = Cluster(
    "test", "cluster.toml", "inventory.toml", (WEB, API), Ingress(hosts=("host1",), acme=ACME)
)


class Proxies:
    """FakeDocker's engines, with each host's ingress proxy and name proxies answering their
    probes with the config last loaded into them (the probe reads it back)."""

    def __init__(self, docker: FakeDocker) -> None:
        self.docker = docker
        self.ingress: dict[str, str] = {}  # host -> the probe's answer
        self.loads: list[tuple[str, str]] = []  # (host, what was loaded)

    def handler(self, host: Host, argv: list[str], input: str | None) -> Result:
        if argv == proxy_probe_argv("test"):
            return ok(self.ingress.get(host.name, "missing\n"))
        if argv == names_probe_argv("test"):
            return ok("")
        if argv == load_argv("test"):
            spec = CLUSTER.ingress.proxy_spec() if CLUSTER.ingress else ""
            self.ingress[host.name] = f"running {spec}\n{input}"
            self.loads.append((host.name, "routes"))
            return ok()
        names = name_proxy_name("test", "")
        if any(a.startswith((proxy_name("test"), names)) for a in argv):
            self.loads.append((host.name, " ".join(argv[:2])))
            return ok()
        # docker picks an exposed port's host port (`-p ADDRESS::PORT`); FakeDocker is told one
        argv = [a.replace("::", ":31000:") if a.endswith("::8080") else a for a in argv]
        return self.docker.handler(host, argv, input)


INVENTORY = Inventory("inventory.toml", tuple(hosts(2)))


def test_a_pass_renders_every_proxy_config_once_and_acts_on_that_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(1000.0)
    docker = FakeDocker(clock=clock)
    fleet = Proxies(docker)
    executor = FakeExecutor(fleet.handler)
    store = SQLiteStore.open(tmp_path)
    state = admit(store.load(), CLUSTER, 1, prune=True)
    tls = issued(state.tls, "app.test", CHAIN, KEY, issuer="CA", not_after=9e9,
                 directory=ACME.directory, now=0)  # fmt: skip
    event = Event(clock.now, "apply", "applied cluster.toml as generation 1")
    store.commit(replace(state, tls=tls), [event], generation=CLUSTER, source_path="c.toml")
    rendered: list[Plan] = []
    real = proxies.render

    def counted(plan: Plan, ingress: Ingress | None, observed: Observed) -> proxies.Rendered:
        rendered.append(plan)
        return real(plan, ingress, observed)

    for module in [m for name, m in sys.modules.items() if name.startswith("minidock")]:
        if getattr(module, "render", None) is real:
            monkeypatch.setattr(module, "render", counted)
    acts: Counter[str] = Counter()
    try:
        for _ in range(4):  # the tasks start and take traffic, the proxies follow them
            rendered.clear()
            last = asyncio.run(run_pass(CLUSTER, INVENTORY, store, executor, clock=clock))
            assert len(rendered) == 1, "one render a pass"
            acts.update(last.acts)
            docker.advance(30.0)
    finally:
        store.close()
    assert (acts["proxy-started"], acts["routes-loaded"]) == (1, 2)  # started; its tasks came
    assert acts["endpoints-loaded"] >= 1
    config = last.rendered.ingress
    assert config is not None
    assert CHAIN in config.text  # the certificate of the plan's next state
    assert fleet.ingress["host1"].endswith(config.text[-100:])  # what the act path loaded
    assert [(x.step.host, x.digest, x.load) for x in last.rendered.proxies] == [
        ("host1", config.digest, False)  # an earlier pass loaded it: status says "loaded"
    ]
    assert {n.config.service for x in last.rendered.names for n in x.loads} == {"api"}


ROUTED = """\
cluster = "test"
inventory = "inventory.toml"

[ingress]
hosts = ["host1"]

[services.web]
image = "web:5"
ingress = { host = "app.test", port = 8080 }
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }
"""


def test_serve_reads_a_cluster_as_status_does_its_routes_and_proxies_included(
    tmp_path: Path,
) -> None:
    """`serve`'s fleet view (metrics, the dashboard) builds each cluster's status document
    as `status` does, from the pass's render: it passed neither the route table nor the
    rendered digest, so it showed no route and every ingress proxy "stale"."""
    from minidock import usecases
    from tests.unit.test_usecases import make_setup, run

    setup = make_setup(tmp_path)
    setup.file.write_text(ROUTED)
    fleet = Proxies(setup.docker)
    clock = usecases.Clock(setup.clock.now, setup.clock.monotonic, setup.clock.sleep)
    runtime = usecases.Runtime(lambda: FakeExecutor(fleet.handler), clock)
    apply = usecases.apply(setup.file, setup.state, runtime, setup.report, wait=True, timeout=60.0)
    applied = run(apply)
    assert applied.exit_code is usecases.ExitCode.OK, applied
    (status,) = run(usecases.status(setup.state, runtime)).documents
    (reading,) = run(usecases.read_fleet(setup.state, runtime)).clusters
    assert reading.document is not None
    assert [(p.host, p.state) for p in status.proxies] == [("host1", "loaded")]
    assert reading.document.proxies == status.proxies
    assert [r.host for r in reading.document.routes] == ["app.test"]
    assert reading.document.routes == status.routes
