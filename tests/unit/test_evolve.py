"""`core.evolve` is `dataclasses.replace` for the fold's records, and the controller's
`runner.decision` is `reconcile` with the collector's view restored afterwards."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import pytest

from minidock.core import reconcile
from minidock.core.evolve import evolve
from minidock.core.hosts import HostPhase, HostState, SeenTask
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.state import ServiceState
from minidock.runner import decision
from tests.sim import World, host, svc


def test_evolve_makes_what_replace_makes() -> None:
    slot = SlotState(task="t1", host="h1", attempts=(1.0,))
    seen = (SeenTask("web", 1, "t1", "abc"),)
    cases: list[tuple[Any, dict[str, Any]]] = [
        (slot, {"phase": SlotPhase.RUNNING, "host": "h2"}),
        (HostState(tasks=seen), {"phase": HostPhase.DOWN, "failures": 2, "last_error": "x"}),
        (ServiceState(svc("web"), 1, slots={1: slot}), {"slots": {}}),
    ]
    for record, changes in cases:
        made = evolve(record, **changes)
        assert made == replace(record, **changes)
        assert made is not record
        assert type(made) is type(record)
        assert record == replace(made, **{k: getattr(record, k) for k in changes})


def test_evolve_refuses_a_field_the_record_does_not_have() -> None:
    with pytest.raises(AssertionError):
        evolve(SlotState(), taks="t1")


def test_decision_is_reconcile_and_leaves_nothing_frozen() -> None:
    w = World([host("h1"), host("h2")])
    w.apply(svc("web", replicas=3))
    assert w.cluster is not None
    args = (w.cluster, w.inventory, w.observe(), w.state, w.now)
    assert decision(*args) == reconcile(*args)
    assert gc.get_freeze_count() == 0
