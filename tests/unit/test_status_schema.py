"""`status --json` against the JSON Schema shipped in the package
(`minidock/schemas/status.schema.json`): the schema names exactly the typed records'
fields, and documents made in many shapes (by the CLI and from the in-memory world)
validate. The integration tests validate every document the lab fleet produces too."""

from __future__ import annotations

import copy
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from typer.testing import CliRunner

import minidock.cli
from minidock.documents.status import (
    AutoscaleSummary,
    CanarySummary,
    CpuUsage,
    FailedSlot,
    HookSummary,
    HostSummary,
    JobRunSummary,
    JobSummary,
    MemoryUsage,
    PendingSlot,
    ProxySummary,
    RecoverySummary,
    RolloutSummary,
    RouteSummary,
    ServiceSummary,
    ServingSummary,
    StatusDocument,
    TaskSummary,
    status_document,
    status_schema,
)
from minidock.model import HealthCheck, RestartPolicy, UpdatePolicy
from minidock.store.directory import ENV_STATE
from tests.fakes import FakeDocker
from tests.sim import World, host, svc

VALIDATOR = Draft202012Validator(status_schema())
NOT_IN_JSON = {RolloutSummary: {"active"}}  # for the table, not the document
HC = HealthCheck(("true",))


def json_fields(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} - NOT_IN_JSON.get(cls, set())


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(status_schema())


def test_the_schema_names_exactly_the_fields_of_the_typed_records() -> None:
    schema = status_schema()
    d = schema["$defs"]
    nodes = [
        (schema, StatusDocument),
        (d["service"], ServiceSummary),
        (d["rollout"], RolloutSummary),
        (d["rollout"]["properties"]["canary"]["oneOf"][1], CanarySummary),
        (d["service"]["properties"]["failed"]["items"], FailedSlot),
        (d["service"]["properties"]["pending"]["items"], PendingSlot),
        (d["task"], TaskSummary),
        (d["host"], HostSummary),
        (d["host"]["properties"]["cpus"], CpuUsage),
        (d["host"]["properties"]["memory"], MemoryUsage),
        (d["route"], RouteSummary),
        (d["proxy"], ProxySummary),
        (d["service"]["properties"]["job"]["oneOf"][1], JobSummary),
        (d["service"]["properties"]["hook"]["oneOf"][1], HookSummary),
        (d["service"]["properties"]["serving"]["oneOf"][1], ServingSummary),
        (d["service"]["properties"]["recovery"]["items"], RecoverySummary),
        (d["service"]["properties"]["autoscale"]["oneOf"][1], AutoscaleSummary),
        (d["job_run"], JobRunSummary),
    ]
    for node, cls in nodes:
        assert set(node["properties"]) == json_fields(cls), cls.__name__
        assert set(node["required"]) == json_fields(cls), cls.__name__
        assert node["additionalProperties"] is False, cls.__name__


def shapes() -> dict[str, World]:
    """Worlds in the states status must describe: converging, converged, a rollout under
    way, rolling back and paused, a host unreachable then down, Failed slots, tasks that
    fit nowhere, a service desired stopped, an exited task."""
    worlds: dict[str, World] = {}
    h2 = replace(host("h2", cpus=None, memory=None), down_after=3)
    w = World([host("h1", zone="a"), h2])
    w.apply(svc("db", image="db:1"), svc("web", replicas=3, health=HC, depends_on=("db",)))
    worlds["fresh"] = copy.deepcopy(w)
    w.converge()
    worlds["converged"] = copy.deepcopy(w)
    w.apply(svc("db", image="db:1"), svc("web", image="web:6", replicas=3, health=HC))
    worlds["updating"] = copy.deepcopy(w)
    w.converge()
    broken = svc("web", image="web:broken", replicas=3, health=HC)
    w.apply(
        svc("db", image="db:1"), replace(broken, update=UpdatePolicy(failure_action="rollback"))
    )
    w.step()
    worlds["rolling-back"] = copy.deepcopy(w)
    w.converge()
    w.apply(svc("db", image="db:1"), replace(broken, update=UpdatePolicy(failure_action="pause")))
    for _ in range(3):
        w.step()
    worlds["paused"] = copy.deepcopy(w)
    w.kill_host("h2")
    w.step()
    worlds["unreachable"] = copy.deepcopy(w)
    for _ in range(3):
        w.step()
    worlds["down"] = copy.deepcopy(w)
    crash = svc("crash", image="crash:1", replicas=2, restart=RestartPolicy(max_attempts=1))
    big = svc("big", replicas=2, cpus=64)
    w.apply(svc("db", image="db:1", desired="stopped"), crash, big)
    for _ in range(8):
        w.step()
    worlds["failed-pending-stopped"] = w
    job = World([host("h1")])
    job.apply(svc("job", image="once:1", replicas=2, restart=RestartPolicy(condition="none")))
    job.converge()
    done = job.live("job")[0]
    job.containers["h1"] = [
        replace(c, state="exited", exit_code=0, finished_at=job.now) if c is done else c
        for c in job.containers["h1"]
    ]
    worlds["exited"] = job
    return worlds


@pytest.mark.parametrize(("name", "world"), shapes().items(), ids=list(shapes()))
def test_every_shape_of_the_document_validates(name: str, world: World) -> None:
    plan = world.plan()
    doc = status_document(world.state, world.inventory, world.observe(), plan).to_json()
    VALIDATOR.validate(json.loads(json.dumps(doc)))


def test_the_shapes_cover_what_the_schema_describes() -> None:
    """The worlds above are not all alike: each optional shape appears somewhere."""
    docs = []
    for w in shapes().values():
        docs.append(status_document(w.state, w.inventory, w.observe(), w.plan()).to_json())
    services = [s for d in docs for s in d["services"]]
    states = {s["state"] for s in services}
    assert {"converged", "updating", "rolling_back", "paused", "failed", "stopped"} <= states
    assert any(s["pending"] for s in services)
    assert any(s["failed"] for s in services)
    assert {h["state"] for d in docs for h in d["hosts"]} == {"ready", "unreachable", "down"}
    assert any(t["exit_code"] is not None for d in docs for t in d["tasks"])
    assert any(h["cpus"]["total"] is None for d in docs for h in d["hosts"])


def test_status_json_printed_by_the_cli_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STATE, raising=False)
    (tmp_path / "inventory.toml").write_text(
        '[[hosts]]\nname = "host1"\naddress = "127.0.0.1"\nport = 1\ncpus = 2\n'
        '[[hosts]]\nname = "host2"\naddress = "127.0.0.1"\nport = 2\n'
    )
    (tmp_path / "cluster.toml").write_text(
        'cluster = "s"\ninventory = "inventory.toml"\n'
        '[services.web]\nimage = "web:5"\nreplicas = 3\nenv = { TOKEN = "s3cret-value" }\n'
        '[services.big]\nimage = "big:1"\ncpus = 8\n'
    )
    docker = FakeDocker()
    docker.down.add("host2")
    monkeypatch.setattr(minidock.cli, "SSHExecutor", docker.executor)
    cli = CliRunner()
    assert cli.invoke(minidock.cli.app, ["apply", "cluster.toml"]).exit_code == 3
    result = cli.invoke(minidock.cli.app, ["status", "--json", "--state", ".minidock"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    VALIDATOR.validate(doc)
    assert doc["hosts"][1]["error"] == "connection refused by 127.0.0.1:2"
    assert [s["pending"] != [] for s in doc["services"]] == [False, True]


DRIFTS = [
    pytest.param(lambda d: d.pop("waiting"), "'waiting' is a required property", id="missing"),
    pytest.param(lambda d: d["hosts"][0].update(zone="a"), "('zone' was unexpected)", id="extra"),
    pytest.param(
        lambda d: d["tasks"][0].update(slot="1"), "'1' is not of type 'integer'", id="type"
    ),
    pytest.param(
        lambda d: d["services"][0].update(state="fine"), "'fine' is not one of", id="word"
    ),
]


@pytest.mark.parametrize(("change", "where"), DRIFTS)
def test_a_document_that_drifts_from_the_schema_fails(change: Any, where: str) -> None:
    w = shapes()["converged"]
    doc = json.loads(
        json.dumps(status_document(w.state, w.inventory, w.observe(), w.plan()).to_json())
    )
    VALIDATOR.validate(doc)
    change(doc)
    errors = [e.message for e in VALIDATOR.iter_errors(doc)]
    assert any(where in message for message in errors), errors
