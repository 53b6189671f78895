"""The core's state machines: their tables are whole, their diagrams in the docs are the
tables, and no code outside a machine's module assigns its phase."""

from __future__ import annotations

import ast
import importlib
import re
from enum import StrEnum
from pathlib import Path

import pytest

from minidock.core import hosts, rollout, slots, traffic
from minidock.core.diagram import MACHINES, diagrams
from minidock.core.hosts import HostPhase, HostState, Probe
from minidock.core.rollout import RolloutInput
from minidock.core.slots import SlotInput, SlotPhase, SlotState
from minidock.core.state import Rollout, RolloutPhase
from minidock.model import Container, RestartPolicy
from tests.source import parsed

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "minidock"

# the only modules that may name a phase field when building or replacing a record
PHASE_OWNERS = {
    "phase": {
        "core/hosts.py",
        "core/slots.py",
        "core/rollout.py",
        "core/volumes.py",
        "core/backing.py",
        "store/codec.py",
    },
    "availability": {"core/hosts.py", "store/codec.py"},
}


def test_the_docs_diagrams_are_generated_from_the_tables() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"<!-- machines -->\n(.*)<!-- /machines -->", text, re.S)
    assert found is not None, "docs/architecture.md lost its <!-- machines --> markers"
    assert found[1] == diagrams(), "run `python -m minidock.core.diagram` into the docs"


def transition_tables() -> dict[str, object]:
    """Every transition table of the core, by `module.NAME`: a module-level dict named
    TABLE or *_TABLE keyed by (phase, input) enums."""
    found: dict[str, object] = {}
    for path in sorted((PACKAGE / "core").glob("*.py")):
        module = importlib.import_module(f"minidock.core.{path.stem}")
        for name, value in vars(module).items():
            if not (name == "TABLE" or name.endswith("_TABLE")) or not isinstance(value, dict):
                continue
            if all(isinstance(k, tuple) and all(isinstance(e, StrEnum) for e in k) for k in value):
                found[f"{path.stem}.{name}"] = value
    return found


def test_every_transition_table_is_drawn() -> None:
    drawn = {id(m.table) for m in MACHINES}
    missing = [name for name, table in transition_tables().items() if id(table) not in drawn]
    assert not missing, f"tables with no diagram (core/diagram.py's MACHINES): {missing}"
    assert len(transition_tables()) == len(MACHINES)  # and no machine drawn twice


def test_the_docs_machine_table_lists_each_machine_and_its_phases() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = {
        cells[0]: cells[2]
        for line in text.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line[2:-2].split(" | ")]) == 4
    }
    for machine in MACHINES:
        assert machine.name in rows, f"docs/architecture.md's machine table lacks {machine.name}"
        listed = rows[machine.name].split(", ")
        assert listed == [p.value for p in machine.phases], machine.name


def test_every_table_is_whole() -> None:
    assert set(hosts.PROBE_TABLE) == {(p, i) for p in HostPhase for i in Probe}
    assert set(hosts.AVAILABILITY_TABLE) == {
        (a, i) for a in hosts.Availability for i in hosts.Intent
    }
    assert set(slots.TABLE) == {(p, i) for p in SlotPhase for i in SlotInput}
    assert set(traffic.TABLE) == {
        (p, i) for p in traffic.TrafficPhase for i in traffic.TrafficInput
    }


def test_rollout_table_starts_anywhere_and_fails_only_while_active() -> None:
    for phase in RolloutPhase:
        assert rollout.TABLE[(phase, RolloutInput.BEGIN)] is RolloutPhase.UPDATING
        assert rollout.TABLE[(phase, RolloutInput.BEGIN_ROLLBACK)] is RolloutPhase.ROLLING_BACK
        assert rollout.TABLE[(phase, RolloutInput.BEGIN_CANARY)] is RolloutPhase.CANARY
    failures = {RolloutInput.FAILURE_PAUSE, RolloutInput.FAILURE_TOLERATED}
    assert {p for p, i in rollout.TABLE if i in failures} == {
        RolloutPhase.UPDATING,
        RolloutPhase.CANARY,  # paused only without a previous spec (else rolled back)
        RolloutPhase.ROLLING_BACK,
    }
    assert (RolloutPhase.CANARY, RolloutInput.FAILURE_TOLERATED) not in rollout.TABLE
    assert rollout.TABLE[(RolloutPhase.CANARY, RolloutInput.PROMOTE)] is RolloutPhase.UPDATING
    with pytest.raises(KeyError):  # a completed rollout cannot be paused
        rollout.step(Rollout(phase=RolloutPhase.COMPLETED), RolloutInput.FAILURE_PAUSE)


def test_a_rollout_step_returns_the_rollout_and_the_event_it_says() -> None:
    cue = rollout.cue("web", 5.0, "web.2 did not become healthy")
    updating = Rollout(phase=RolloutPhase.UPDATING, total=3)
    paused, said = rollout.step(updating, RolloutInput.FAILURE_PAUSE, said=cue, reason="x")
    assert (paused.phase, paused.reason) == (RolloutPhase.PAUSED, "x")
    assert [(e.at, e.kind, e.message, e.service) for e in said] == [
        (5.0, "rollout-paused", "web: paused: web.2 did not become healthy", "web")
    ]
    done, said = rollout.step(updating, RolloutInput.SETTLED, said=rollout.cue("web", 6.0))
    assert [(e.kind, e.message) for e in said] == [("rollout-completed", "web: rollout completed")]
    assert rollout.step(done, RolloutInput.BEGIN)[1] == ()  # unnamed: its command says it
    assert set(rollout.SAYS) == set(RolloutInput) - {RolloutInput.RESUME}


@pytest.mark.parametrize(
    ("before", "answered", "failures", "after", "event"),
    [
        (HostPhase.READY, True, 0, HostPhase.READY, None),
        (HostPhase.READY, False, 0, HostPhase.UNREACHABLE, None),
        (HostPhase.UNREACHABLE, False, 1, HostPhase.DOWN, "host-down"),
        (HostPhase.UNREACHABLE, True, 1, HostPhase.READY, None),
        (HostPhase.DOWN, False, 5, HostPhase.DOWN, None),
        (HostPhase.DOWN, True, 5, HostPhase.READY, "host-up"),
    ],
)
def test_host_probe_step(
    before: HostPhase, answered: bool, failures: int, after: HostPhase, event: str | None
) -> None:
    old = HostState(phase=before, failures=failures, last_seen=1.0)
    new, ev = hosts.probe_step(
        "h1", old, answered=() if answered else None, error="refused", down_after=2, now=9.0
    )
    assert new.phase is after
    assert (ev.kind if ev else None) == event
    assert new.failures == (0 if answered else failures + 1)
    assert new.last_seen == (9.0 if answered else 1.0)


def test_drain_is_orthogonal_to_reachability() -> None:
    down = HostState(phase=HostPhase.DOWN, failures=3)
    drained = hosts.availability_step(down, hosts.Intent.DRAIN)
    assert (drained.phase, drained.drained) == (HostPhase.DOWN, True)
    assert hosts.availability_step(drained, hosts.Intent.ACTIVATE).drained is False


def _exited(task: str, code: int) -> Container:
    return Container(
        "c", f"web.1.{task}", "h1", "t", "web", 1, task, "s", "web:5", "exited", exit_code=code
    )


def test_slot_lifecycle_through_the_table() -> None:
    policy = RestartPolicy(condition="on-failure", delay=1, max_delay=4, max_attempts=2)
    s = slots.assign(SlotState(), "t1", "h1")
    assert (s.phase, s.task, s.host) == (SlotPhase.STARTING, "t1", "h1")
    s = slots.account_exit(s, _exited("t1", 1), policy, now=10.0)
    assert s.phase is SlotPhase.BACKING_OFF
    assert s.next_start == 11.0
    assert slots.vanish(s).phase is SlotPhase.BACKING_OFF  # still waiting out its backoff
    s = slots.assign(s, "t2", "h1")
    s = slots.account_exit(s, _exited("t2", 1), policy, now=20.0)
    assert s.phase is SlotPhase.FAILED
    assert slots.assign(s, "t3", "h1").phase is SlotPhase.FAILED  # terminal until reset
    again = slots.reset(s)  # failures and backoff forgotten; the record (task, host) kept
    assert (again.phase, again.attempts, again.next_start) == (SlotPhase.EMPTY, (), 0.0)
    assert (again.task, again.host, again.counted) == ("t2", "h1", s.counted)
    done = slots.account_exit(SlotState(), _exited("t9", 0), policy, now=1.0)
    assert done.phase is SlotPhase.COMPLETE
    assert done.attempts == ()


def _phase_keywords(path: Path) -> list[tuple[str, int]]:
    """Calls in `path` that pass a phase field by keyword (replace(x, phase=...), ...)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in PHASE_OWNERS and _builds_record(node):
                    found.append((kw.arg, node.lineno))
    return found


def _builds_record(call: ast.Call) -> bool:
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    return name in {"replace", "HostState", "SlotState", "Rollout", "_step", "step"}


def test_no_code_outside_a_machine_assigns_a_phase() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for field, line in _phase_keywords(path):
            if rel not in PHASE_OWNERS[field]:
                offenders.append(f"minidock/{rel}:{line} sets {field}")
    assert offenders == []


def test_a_rollout_stored_with_its_old_field_name_reads_into_its_phase() -> None:
    from minidock.store.codec import from_data, to_data

    old = {**to_data(Rollout(phase=RolloutPhase.PAUSED, reason="x")), "status": "paused"}
    del old["phase"]
    assert from_data(old, Rollout) == Rollout(phase=RolloutPhase.PAUSED, reason="x")
