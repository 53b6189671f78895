"""The `world` fixture: scenario tests run once on each fleet double (tests/sim.py); and
`url` and `client`, an etcd state of the test's own and a client of it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from minidock.model import Host
from minidock.store import parse_location
from minidock.store.etcd_client import EtcdClient
from minidock.store.location import EtcdURL
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


@pytest.fixture
def url(etcd_url: str) -> EtcdURL:
    """The test's etcd state (its own prefix on the session's cluster), parsed."""
    location = parse_location(etcd_url)
    assert isinstance(location, EtcdURL)
    return location


@pytest.fixture
def client(url: EtcdURL) -> Iterator[EtcdClient]:
    """A client of the test's etcd state, closed after it."""
    client = EtcdClient(url)
    try:
        yield client
    finally:
        client.close()
