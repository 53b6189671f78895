"""Autoscaling through the commands, in process behind a fake Caddy: `scale` sets the count
within the policy's bounds (outside them: exit 2, one line, nothing stored), and `apply`
starts the count from the file's `replicas` (docs/autoscale.md#scale-and-apply)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli import FLEET, Fleet, in_tmp, one_line_error, ssh_calls  # noqa: F401
from tests.unit.test_serving_cli import ROUTED, edge_fleet

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
