"""The `world` fixture: scenario tests run once on each fleet double (tests/sim.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from minidock.model import Host
from tests.sim import MakeWorld, RunnerWorld, World, hosts


@pytest.fixture(params=["model", "runner"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeWorld]:
    """A factory of fleets: `world(3)` (host1..host3) or `world([host(...), ...])`.

    "model": tests.sim.World, decisions applied in memory. "runner": tests.sim.RunnerWorld,
    each pass the real `run_pass` over FakeDocker with a real Store under tmp_path.
    """
    made: list[RunnerWorld] = []

    def make(fleet: int | Sequence[Host] = 3, **kw: object) -> World | RunnerWorld:
        listed = hosts(fleet) if isinstance(fleet, int) else list(fleet)
        if request.param == "model":
            return World(listed, **kw)  # type: ignore[arg-type]
        made.append(RunnerWorld(listed, tmp_path / f"state{len(made)}", **kw))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for w in made:
        w.close()
