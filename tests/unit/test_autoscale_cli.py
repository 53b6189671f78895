"""Autoscaling through the commands, in process behind a fake Caddy: `scale` sets the count
within the policy's bounds (outside them: exit 2, one line, nothing stored), and `apply`
starts the count from the file's `replicas` (docs/autoscale.md#scale-and-apply)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

import minidock.cli
from minidock.commands.caddy import DURATION
from minidock.documents.plan import plan_schema
from minidock.documents.status import status_schema
from minidock.model import Host
from minidock.ssh import Result
from tests.unit.test_cli import (  # noqa: F401 (fixtures)
    FLEET,
    Fleet,
    QuickAsyncio,
    in_tmp,
    one_line_error,
    ssh_calls,
)
from tests.unit.test_serving_cli import ROUTED, CaddyDocker, edge_fleet

AUTOSCALED = ROUTED.replace(
    "replicas = 2\n",
    "replicas = 2\nautoscale = { min = 2, max = 4, target = { requests_per_task = 50 } }\n",
)


@pytest.fixture
def autoscaled(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str]) -> Fleet:  # noqa: F811
    return edge_fleet(in_tmp, monkeypatch, FLEET, AUTOSCALED)


def test_scale_sets_the_count_within_the_bounds_only(autoscaled: Fleet) -> None:
    db = (autoscaled.state / "state.db").read_bytes()
    refused = autoscaled.run("scale", "web=6")
    assert refused.exit_code == 2
    assert one_line_error(refused) == (
        "scale web=6: web is autoscaled within 2..4 (docs/autoscale.md): give a count within "
        "them, or change autoscale in the file"
    )
    assert (autoscaled.state / "state.db").read_bytes() == db
    scaled = autoscaled.run("scale", "web=3", "--wait")
    assert scaled.exit_code == 0, scaled.output
    assert "scaled web from 2 to 3\n" in scaled.stdout
    assert sorted(n.split(".")[0] for n in autoscaled.tasks()).count("web") == 3


class MeteredDocker(CaddyDocker):
    """A fake Caddy whose /metrics counts `requests` on web's route, each in 100 ms (or
    whose metrics read fails, `unread`)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0.0
        self.unread = False

    def handler(self, host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:2] == ["docker", "exec"] and argv[-1].startswith("set -u"):
            if self.unread:
                return Result(1, "", "the admin API did not answer\n")
            return Result(0, self.metrics(), "")
        return super().handler(host, argv, input)

    def metrics(self) -> str:
        labels = 'code="200",handler="subroute",method="GET",server="minidock-route:web:app.test/"'
        n = self.requests
        return (
            "process_start_time_seconds 1.7e+09\n"
            f'{DURATION}_bucket{{{labels},le="0.05"}} 0\n'
            f'{DURATION}_bucket{{{labels},le="0.25"}} {n}\n'
            f'{DURATION}_bucket{{{labels},le="+Inf"}} {n}\n'
            f"{DURATION}_count{{{labels}}} {n}\n"
            f"{DURATION}_sum{{{labels}}} {n * 0.1}\n"
        )


@pytest.fixture
def metered(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str]) -> Fleet:  # noqa: F811
    """An autoscaled web behind a fake Caddy whose counts the test sets, the controller on
    the engines' clock (so a window passes when the test moves it on)."""
    apart = FLEET  # each host its own address, so each task is an upstream of its own
    for n in (1, 2, 3):
        apart = apart.replace('address = "127.0.0.1"', f'address = "10.0.0.{n}"', 1)
    docker = MeteredDocker()
    clock = SimpleNamespace(
        **{k: getattr(time, k) for k in dir(time) if not k.startswith("_")},
    )
    clock.time = lambda: docker.clock.now
    monkeypatch.setattr(minidock.cli, "time", clock)
    policy = AUTOSCALED.replace("max = 4", 'max = 6, window = "1m", cooldown = "3m"')
    return edge_fleet(in_tmp, monkeypatch, apart, policy, docker)


def web_tasks(fleet: Fleet) -> int:
    return [n.split(".")[0] for n in fleet.tasks()].count("web")


def web_status(fleet: Fleet) -> dict[str, Any]:
    doc = fleet.status()
    Draft202012Validator(status_schema()).validate(doc)
    found: dict[str, Any] = next(s for s in doc["services"] if s["name"] == "web")
    return found


def window(fleet: Fleet, rate: float, seconds: float = 60.0) -> None:
    """`seconds` of requests at `rate` a second through the proxy, then a pass."""
    docker = fleet.docker
    assert isinstance(docker, MeteredDocker)
    docker.requests += rate * seconds
    docker.advance(seconds)
    for _ in range(10):  # a scale-in's tasks drain (drain_timeout, 5s) before they stop
        if fleet.run("reconcile").exit_code != 3:
            break
        docker.advance(2.0)
    fleet.settle()


def test_the_count_follows_the_rate_holds_without_data_and_falls_after_the_cooldown(
    metered: Fleet,
) -> None:
    docker = metered.docker
    assert isinstance(docker, MeteredDocker)
    assert web_tasks(metered) == 2
    window(metered, 250.0)  # 125 a task: out at once, to ceil(250 / 50)
    assert web_tasks(metered) == 5
    web = web_status(metered)
    assert web["replicas"] == 5
    assert web["autoscale"]["rate"] == pytest.approx(250.0, rel=0.1)
    assert web["autoscale"]["target"] == "50 requests a second a task"
    assert web["autoscale"]["reason"].startswith("out: ")
    events = metered.run("events").stdout
    assert "autoscaled: web: 2 -> 5 tasks (out: " in events

    docker.unread = True  # no data: never zero traffic, the count holds
    window(metered, 0.0, 300.0)
    assert web_tasks(metered) == 5
    held = web_status(metered)["autoscale"]
    assert held["reason"] == (
        "held at 5: no data for app.test/ (the ingress proxy on host1 did not answer its metrics)"
    )
    assert held["rate"] is None

    docker.unread = False  # a quiet route: in, once the cooldown has passed, to min
    window(metered, 1.0)
    assert web_tasks(metered) == 2
    assert web_status(metered)["autoscale"]["reason"].startswith("in: ")
    events = metered.run("events").stdout
    assert "autoscaled: web: 5 -> 2 tasks (in: " in events
    assert events.count(" leaves every route before it stops") == 3  # the drain gate
    shown = metered.run("status").stdout
    assert "web: autoscaled 2..6, target 50 requests a second a task" in shown


def test_plan_says_the_count_the_target_and_why(metered: Fleet) -> None:
    window(metered, 250.0)
    planned = metered.run("plan", str(metered.cluster))
    assert planned.exit_code == 0, planned.output
    assert "service web: autoscaled 2..6, target 50 requests a second a task: " in planned.stdout
    doc = json.loads(metered.run("plan", str(metered.cluster), "--json").stdout)
    Draft202012Validator(plan_schema()).validate(doc)
    (note,) = doc["autoscale"]
    assert (note["service"], note["replicas"], note["min"], note["max"]) == ("web", 5, 2, 6)


def test_metrics_say_the_decided_count_its_bounds_the_rate_and_the_decision(
    metered: Fleet,
) -> None:
    window(metered, 250.0)
    shown = metered.run("metrics")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    web = 'cluster="e2e",service="web"'
    assert f"minidock_service_desired_replicas{{{web}}} 5.0" in lines
    assert f"minidock_autoscale_min_replicas{{{web}}} 2.0" in lines
    assert f"minidock_autoscale_max_replicas{{{web}}} 6.0" in lines
    assert any(
        line.startswith(f"minidock_autoscale_requests_per_second{{{web}}} ") for line in lines
    )
    decided = [
        line
        for line in lines
        if line.startswith("minidock_autoscale_decision{") and line.endswith(" 1.0")
    ]
    assert len(decided) == 1
