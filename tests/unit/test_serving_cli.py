"""`minidock maintenance`, `pause` and `resume` in process: bad words are exit 2 with one
line and change nothing; good ones are recorded, loaded into the ingress proxy by one pass,
and shown by `status` (and `status --json`, valid against its schema) and `plan`. The
proxy is a fake Caddy beside FakeDocker: it keeps the config a pass loads, as Caddy's
autosave does, and the probe reads it back (docs/ingress.md#maintenance-and-pause)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

import minidock.cli
from minidock.commands.caddy import HELD, LABEL_INGRESS
from minidock.documents.status import status_schema
from minidock.model import Host
from minidock.ssh import Result
from tests.caddyview import front
from tests.fakes import FakeDocker, FakeExecutor
from tests.unit.test_cli import (  # noqa: F401 (fixtures)
    FLEET,
    Fleet,
    QuickAsyncio,
    in_tmp,
    one_line_error,
    ssh_calls,
)

ROUTED = """\
cluster = "e2e"
inventory = "inventory.toml"

[ingress]
hosts = ["host1"]

[services.web]
image = "web:5"
replicas = 2
ingress = { host = "app.test", port = 8080 }
health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }
update = { monitor = "0s" }

[services.db]
image = "db:1"
"""


class CaddyDocker(FakeDocker):
    """FakeDocker and, on each ingress host, a fake Caddy: `docker run` of the proxy runs
    it, `caddy reload` keeps the config given, the probe prints its state and that
    config (as `minidock.commands.caddy`'s probe reads a real one's autosave)."""

    def __init__(self) -> None:
        super().__init__()
        self.proxies: dict[str, tuple[str, str]] = {}  # host -> (spec label, loaded config)

    def handler(self, host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:2] == ["sh", "-c"] and argv[-1].startswith("minidock-ingress-"):
            found = self.proxies.get(host.name)
            if found is None:
                return Result(0, "missing\n", "")
            return Result(0, f"running {found[0]}\n{found[1]}", "")
        if argv[:2] == ["docker", "run"] and any(a.startswith(LABEL_INGRESS + "=") for a in argv):
            spec = next(a.split("=", 1)[1] for a in argv if a.startswith(LABEL_INGRESS + ".spec="))
            self.proxies[host.name] = (spec, "")
            return Result(0, "proxy\n", "")
        if argv[:2] == ["docker", "exec"] and "reload" in argv:
            spec, _ = self.proxies[host.name]
            self.proxies[host.name] = (spec, input or "")
            return Result(0, "", "")
        if argv[:2] in (["docker", "stop"], ["docker", "rm"]) and argv[-1].startswith(
            "minidock-ingress-"
        ):
            return Result(0, "", "")
        return super().handler(host, argv, input)

    def loaded(self, host: str = "host1") -> dict[str, Any]:
        config: dict[str, Any] = json.loads(self.proxies[host][1])
        return config


@pytest.fixture
def edge(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str]) -> Fleet:  # noqa: F811
    return edge_fleet(in_tmp, monkeypatch, FLEET, ROUTED)


def edge_fleet(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    inventory: str,
    cluster: str,
    docker: CaddyDocker | None = None,
) -> Fleet:
    """A fleet behind a fake Caddy (inventory and cluster text; `docker`, a CaddyDocker
    of the test's own), applied and settled."""
    (root / "inventory.toml").write_text(inventory)
    (root / "cluster.toml").write_text(cluster)
    docker = CaddyDocker() if docker is None else docker
    executors: list[FakeExecutor] = []

    def make() -> FakeExecutor:
        docker.advance()
        executors.append(docker.executor())
        return executors[-1]

    monkeypatch.setattr(minidock.cli, "SSHExecutor", make)
    monkeypatch.setattr(minidock.cli, "asyncio", QuickAsyncio(docker))
    fleet = Fleet(root, docker, executors, QuickAsyncio(docker))
    applied = fleet.run("apply", str(fleet.cluster))
    assert applied.exit_code in (0, 3), applied.output  # converged, or tasks starting
    fleet.settle()
    return fleet


def route(fleet: Fleet) -> dict[str, Any]:
    """The loaded route of app.test on the edge's proxy."""
    assert isinstance(fleet.docker, CaddyDocker)
    routes = front(fleet.docker.loaded())["routes"]
    found: dict[str, Any] = next(r for r in routes if r.get("match", [{}])[0].get("host"))
    return found


def status(fleet: Fleet) -> dict[str, Any]:
    doc = fleet.status()
    Draft202012Validator(status_schema()).validate(doc)
    return doc


def test_maintenance_on_and_off_load_the_page_and_the_upstreams_again(edge: Fleet) -> None:
    assert route(edge)["handle"][0]["handler"] == "reverse_proxy"
    on = edge.run("maintenance", "web", "on", "--message", "Back at 14:00 UTC")
    assert on.exit_code == 0, on.output
    assert on.stdout.splitlines()[0] == "web in maintenance"
    (page,) = route(edge)["handle"]
    assert (page["status_code"], page["headers"]["Retry-After"]) == (503, ["60"])
    assert "Back at 14:00 UTC" in page["body"]
    doc = status(edge)
    (web,) = [s for s in doc["services"] if s["name"] == "web"]
    assert web["serving"]["mode"] == "maintenance"
    assert web["serving"]["message"] == "Back at 14:00 UTC"
    assert [s["serving"] for s in doc["services"] if s["name"] == "db"] == [None]  # no route
    assert [r["mode"] for r in doc["routes"]] == ["maintenance"]
    shown = edge.run("status")
    assert "web: in maintenance since" in shown.stdout
    assert "its routes answer 503 (Back at 14:00 UTC)" in shown.stdout
    planned = edge.run("plan", str(edge.cluster))
    assert "service web: in maintenance: its routes answer 503 (Back at 14:00 UTC)" in (
        planned.stdout.splitlines()
    )
    assert edge.run("reconcile").exit_code == 0  # the desired state: converged, quiet
    again = edge.run("maintenance", "web", "off")
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[0] == "web serves again"
    assert route(edge)["handle"][0]["handler"] == "reverse_proxy"
    assert status(edge)["routes"][0]["mode"] == "serving"
    twice = edge.run("maintenance", "web", "off")
    assert twice.stdout.splitlines()[0] == "web was not in maintenance: nothing to end"


def test_pause_holds_until_resume_and_each_ends_only_its_own_mode(edge: Fleet) -> None:
    paused = edge.run("pause", "web", "--timeout", "5s")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.splitlines()[0] == (
        "web paused: its routes hold each new request up to 5s"
    )
    mark, hold = route(edge)["handle"]
    assert mark == {"handler": "vars", HELD: "app.test/"}
    assert hold["load_balancing"]["try_duration"] == "5000ms"
    assert status(edge)["services"][0]["serving"]["timeout"] == 5.0
    assert "web: paused since" in edge.run("status").stdout
    off = edge.run("maintenance", "web", "off")
    assert off.stdout.splitlines()[0] == (
        "web was not in maintenance: nothing to end (it is paused)"
    )
    assert route(edge)["handle"][0] == mark  # still paused
    resumed = edge.run("resume", "web")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.splitlines()[0] == (
        "web resumed: the requests its routes held go to its tasks"
    )
    assert route(edge)["handle"][0]["handler"] == "reverse_proxy"
    assert edge.run("resume", "web").stdout.splitlines()[0] == "web was not paused: nothing to end"


BAD_WORDS = [
    (["maintenance", "db", "on"], "service db has no ingress route"),
    (["pause", "db"], "service db has no ingress route"),
    (["resume", "db"], "service db has no ingress route"),
    (["maintenance", "wbe", "on"], "unknown service 'wbe' (did you mean 'web'?)"),
    (["pause", "wbe"], "unknown service 'wbe' (did you mean 'web'?)"),
    (["maintenance", "web", "off", "--message", "x"], "--message goes with `on`"),
    (["maintenance", "web", "on", "--message", " "], "--message: give the page's text"),
    (["pause", "web", "--timeout", "0s"], "--timeout: 0s is too short"),
    (["pause", "web", "--timeout", "soon"], "--timeout: "),
]


def test_bad_words_are_exit_2_with_one_line_and_change_nothing(edge: Fleet) -> None:
    assert isinstance(edge.docker, CaddyDocker)
    db = (edge.state / "state.db").read_bytes()
    loaded = edge.docker.proxies["host1"]
    for args, expected in BAD_WORDS:
        error = one_line_error(edge.run(*args))
        assert error.startswith(expected), (args, error)
        assert (edge.state / "state.db").read_bytes() == db, args
        assert edge.docker.proxies["host1"] == loaded, args
    result = edge.run("maintenance", "web", "maybe")
    assert result.exit_code == 2
    assert "'maybe' is not one of 'on', 'off'" in result.output
