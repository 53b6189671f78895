"""Each scheduler filter is defined once (issue 19, Deliver 9): the test a filter's `check`
runs to explain a refusal is the very function the placement index runs to choose. Change
that one function and both the choice and the explanation follow; there is no second copy
in the index for them to disagree with."""

from __future__ import annotations

from typing import Any

import pytest

from minidock.core import scheduler
from minidock.core.scheduler import (
    FILTERS,
    ConstraintFilter,
    Fleet,
    PortFilter,
    ReadyFilter,
    ResourceFilter,
    place,
)
from minidock.model import Constraint, PortMapping, Service
from tests.sim import host

HOSTS = [host("host1"), host("host2"), host("host3")]
WEB = Service(
    name="web",
    image="web:5",
    cpus=1.0,
    memory=1 << 30,
    ports=(PortMapping(80, 80),),
    constraints=(Constraint("zone", "!=", "x"),),
)


def fleet() -> Fleet:
    return Fleet.build(HOSTS, {h.name: None for h in HOSTS}, [])


def test_the_filters_are_the_four_and_each_test_is_a_plain_function() -> None:
    assert [type(f) for f in FILTERS] == [ReadyFilter, ConstraintFilter, ResourceFilter, PortFilter]
    for test in (ReadyFilter.passes, ConstraintFilter.passes, ResourceFilter.fits, PortFilter.free):
        assert callable(test)


@pytest.mark.parametrize(
    ("owner", "name", "reason"),
    [
        (ReadyFilter, "passes", "not eligible"),
        (ConstraintFilter, "passes", "constraint zone != x not met"),
        (ResourceFilter, "fits", "needs 1 cpus, 4 free; needs 1GiB memory, 8GiB free"),
        (PortFilter, "free", "host port 80/tcp in use"),
    ],
)
def test_one_definition_decides_both_the_choice_and_the_explanation(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, reason: str
) -> None:
    """Patch only the filter's one test to refuse every host: `place` chooses none, and
    every host's reason is that filter's explanation."""
    assert place(WEB, fleet()).host is not None
    monkeypatch.setattr(owner, name, staticmethod(refuse))
    placement = place(WEB, fleet())
    assert placement.host is None
    assert placement.reasons == tuple(f"{h.name}: {reason}" for h in HOSTS)
    assert place(WEB, fleet(), only="host2").reasons == (f"host2: {reason}",)


def refuse(*_: Any) -> bool:
    return False


def test_the_index_and_the_filters_agree_host_by_host() -> None:
    """Without patching: on a fleet with a full host, a held port and a drained host,
    every host the index may choose is one every filter's `check` passes, and the
    others are explained by the first filter that refuses them."""
    f = Fleet.build(HOSTS, {"host1": None, "host2": None, "host3": "drained"}, [])
    f.load["host2"].foreign = frozenset({"80/tcp"})
    big = Service(name="db", image="db:1", cpus=3.0, ports=(PortMapping(80, 80),))
    seen: dict[str, Any] = {}
    for svc_ in (WEB, big):
        index = f.candidates(svc_)
        for h in HOSTS:
            passes = all(flt.check(h, svc_, f) for flt in FILTERS)
            if h.name in index.group:
                seen[(svc_.name, h.name)] = index.fits(h.name) == passes
    assert len(seen) == 4  # two services on the two hosts the index holds
    assert all(seen.values()), seen
    assert place(WEB, f).host == "host1"
    assert scheduler.place(big, f).reasons == (
        "host1: host port 80/tcp in use",
        "host2: host port 80/tcp (held outside MiniDock) in use",
        "host3: drained",
    )
