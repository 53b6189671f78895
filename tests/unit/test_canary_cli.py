"""A canary through the command line, in process (docs/rollouts.md#canary): `apply` of a
canary spec starts it beside the old tasks and exits 4 once it waits for the operator;
the fake Caddy of test_serving_cli is loaded with the canary's turns of the round robin;
`status`, `status --json` (valid against its schema), `plan` and `events` show it;
`minidock promote` rolls the update on; `promote` without a canary is exit 2 with one
line and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli import (  # noqa: F401 (fixtures)
    Fleet,
    QuickAsyncio,
    in_tmp,
    one_line_error,
    ssh_calls,
)
from tests.unit.test_serving_cli import ROUTED, edge_fleet, route, status

# each host reached at an address of its own (test_cli's share 127.0.0.1), so a task
# that drains is told apart from the others in the proxy's loaded routes
INVENTORY = '[defaults]\nuser = "deploy"\n' + "".join(
    f'[[hosts]]\nname = "host{n}"\naddress = "127.0.0.1"\nport = 1\n'
    f'private_address = "10.0.0.{n}"\ncpus = 4\nmemory = "8GiB"\n'
    for n in (1, 2, 3)
)


CANARY = ROUTED.replace('image = "web:5"', 'image = "web:6"').replace(
    'update = { monitor = "0s" }',
    'update = { monitor = "0s", canary = 1, canary_weight = 20, promote = "manual", '
    'canary_monitor = "0s" }',
)


@pytest.fixture
def edge(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, ssh_calls: list[str]) -> Fleet:  # noqa: F811
    """test_serving_cli's fleet behind a fake Caddy, on INVENTORY."""
    return edge_fleet(in_tmp, monkeypatch, INVENTORY, ROUTED)


def canary_file(fleet: Fleet) -> Path:
    path = fleet.cluster.with_name("canary.toml")
    path.write_text(CANARY)
    return path


def test_a_canary_waits_for_promote_with_its_share_then_rolls_on(edge: Fleet) -> None:
    applied = edge.run("apply", str(canary_file(edge)), "--wait")
    assert applied.exit_code == 4, applied.output  # it waits on the operator
    assert "canary passed; `minidock promote web` promotes it" in applied.output
    edge.settle(settled=4)
    turns = [u["dial"] for u in route(edge)["handle"][0]["upstreams"]]
    assert len(turns) == 5  # the canary 1 turn in 5 (20%), each old task 2
    doc = status(edge)
    (web,) = [s for s in doc["services"] if s["name"] == "web"]
    assert (web["state"], web["rollout"]["status"]) == ("canary", "canary")
    assert web["rollout"]["canary"] == {
        "tasks": 1, "wanted": 1, "weight": 20, "promote": "manual", "promoted": False
    }  # fmt: skip
    assert len(edge.tasks()) == 4  # db, 2 old web tasks and the canary beside them
    assert "canary 1/1, 20% of requests, promote manual" in edge.run("status").stdout
    promoted = edge.run("promote", "web", "--wait")
    assert promoted.exit_code == 0, promoted.output
    assert promoted.stdout.splitlines()[0] == "promoting the canary of web"
    turns = [u["dial"] for u in route(edge)["handle"][0]["upstreams"]]
    assert len(turns) == 2  # two web:6 tasks, a turn each
    (web,) = [s for s in status(edge)["services"] if s["name"] == "web"]
    assert (web["rollout"]["status"], web["rollout"]["canary"]) == ("completed", None)
    kinds = edge.run("events", "--json", "--limit", "200").stdout
    assert '"rollout-promoted"' in kinds


def test_plan_says_a_canary_waits_for_the_operator(edge: Fleet) -> None:
    first = edge.run("apply", str(canary_file(edge)))
    assert first.exit_code in (3, 4), first.output
    for _ in range(4):
        edge.run("reconcile")
    planned = edge.run("plan", str(canary_file(edge)))
    assert "waits: web.1: canary passed; `minidock promote web` promotes it" in planned.stdout


def test_promote_without_a_canary_is_exit_2_with_one_line(edge: Fleet) -> None:
    db = (edge.state / "state.db").read_bytes()
    error = one_line_error(edge.run("promote", "web"))
    assert error.startswith("service web has no canary to promote (its rollout: no rollout yet)")
    assert one_line_error(edge.run("promote", "wbe")).startswith("unknown service 'wbe'")
    assert (edge.state / "state.db").read_bytes() == db
