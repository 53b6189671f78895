"""The status document and the runner's pure helpers."""

from __future__ import annotations

from dataclasses import replace

from minidock.core import SlotPhase
from minidock.core.outcomes import StartFailed, fold
from minidock.documents.status import summarize
from minidock.model import RestartPolicy
from tests.sim import World, host, svc


def test_a_completed_slot_counts_as_converged_not_degraded() -> None:
    w = World([host("h1")])
    w.apply(svc("job", image="once:1", replicas=2, restart=RestartPolicy(condition="none")))
    w.converge()
    done = w.live("job")[0]
    w.containers["h1"] = [
        replace(c, state="exited", exit_code=0, finished_at=w.now) if c is done else c
        for c in w.containers["h1"]
    ]
    w.converge()
    plan = w.plan()
    doc = summarize(w.state, w.inventory, w.observe(), plan)
    (job,) = doc["services"]
    assert job["completed"] == 1
    assert job["running"] == 1
    assert job["state"] == "converged"


def test_a_slot_failed_by_an_act_gets_its_failed_event_from_the_core() -> None:
    w = World([host("h1")])
    w.apply(svc(replicas=2, restart=RestartPolicy(max_attempts=2)))
    once = StartFailed("web", 2, "t1", "docker run failed: x")
    state, events = fold(w.state, [once], 5.0)
    assert events == []  # one failed start: backing off, not Failed
    state, events = fold(state, [StartFailed("web", 2, "t2", "docker run failed: x")], 6.0)
    (event,) = events
    assert (event.kind, event.service, event.slot) == ("failed", "web", 2)
    assert event.message == "web.2 failed: docker run failed: x"
    assert state.services["web"].slot(2).phase is SlotPhase.FAILED
    assert fold(state, [StartFailed("web", 2, "t2", "again")], 7.0)[1] == []  # counted once
