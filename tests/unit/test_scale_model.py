"""The sharding model (benchmarks/scale_model.py, docs/scale.md): the properties its tables
rest on. Each check here fails when the property breaks: the handover's checker is shown
finding overlaps in the design broken on purpose (acts not fenced, no drain)."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from minidock.core.hosts import HostState, SeenTask
from minidock.core.slots import SlotPhase, SlotState
from minidock.model import Engine, Host
from minidock.store import codec


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_model.py"
    spec = importlib.util.spec_from_file_location("scale_model", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_model"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sm = _load()
FLEET = sm.numbered(2000)


@pytest.mark.parametrize("count", [2, 3, 5, 10])
def test_every_controller_computes_one_owner_for_each_host(count: int) -> None:
    """Each controller computes the map alone, from the member list in its own order, at
    one revision: every host has exactly one controller that believes it owns it."""
    members = sm.members_named(count)
    believed = sm.owners_seen(FLEET, members, random.Random(count))
    assert sorted(believed) == sorted(h for _, h in FLEET.order)
    assert all(len(owners) == 1 for owners in believed.values())


@pytest.mark.parametrize("c", [1.02, 1.1, 1.25])
@pytest.mark.parametrize("count", [2, 3, 7, 10])
def test_no_controller_holds_more_than_its_bound(c: float, count: int) -> None:
    members = sm.members_named(count)
    load = [len(held) for held in sm.shares(FLEET, members, c=c).values()]
    assert sum(load) == len(FLEET)
    assert max(load) <= math.ceil(c * len(FLEET) / count)


@pytest.mark.parametrize("count", [1, 2, 4, 9])
def test_a_join_moves_about_the_newcomers_fair_share(count: int) -> None:
    """At most 1.5 times N/(C+1) hosts change hands when a controller joins (the model's
    tables measure 0.86-1.14 at c = 1.25), and the newcomer gets a share."""
    members = sm.members_named(count)
    before = sm.assign(FLEET, members)
    after = sm.assign(FLEET, [*members, "ctl-new"])
    moved = [h for h in before if before[h] != after[h]]
    fair = len(FLEET) / (count + 1)
    assert 0.5 * fair <= len(moved) <= 1.5 * fair
    assert sum(1 for h in moved if after[h] == "ctl-new") >= 0.9 * len(moved)


def test_a_death_moves_only_the_dead_controllers_hosts_at_the_chosen_bound() -> None:
    """At c = 1.25 the survivors keep every host they had: a death needs no drain."""
    moves = sm.leave(FLEET, sm.members_named(5))
    assert moves.between_live == 0
    assert moves.moved == moves.minimal


def test_the_standby_set_is_about_one_share() -> None:
    """The hosts a controller would take on any one death: about N/C, its warm spares."""
    members = sm.members_named(5)
    standby = sm.standby_sizes(FLEET, members)
    share = len(FLEET) / 5
    assert all(0.5 * share <= n <= 1.5 * share for n in standby.values())


@pytest.mark.parametrize("scenario", ["kill", "pause", "join"])
def test_no_two_controllers_may_act_on_one_host_across_a_handover(scenario: str) -> None:
    timing = sm.Timing(ttl=2.0)
    rng = random.Random(f"handover/{scenario}")
    handed = 0
    for _ in range(25):
        trial = sm.trial(scenario, timing, rng)
        assert trial.overlaps == 0
        if scenario == "join":  # a drain lets the command in flight end before the ack
            assert trial.late_commands == 0
        assert all(math.isfinite(g) and g >= 0 for g in trial.gaps), "a host left unowned"
        handed += len(trial.gaps)
    assert handed > 0


def test_a_dead_controllers_hosts_have_a_new_owner_within_its_ttl_and_one_expiry_check() -> None:
    timing = sm.Timing(ttl=2.0)
    rng = random.Random("kill")
    worst = 0.0
    for _ in range(6):
        worst = max(worst, *sm.trial("kill", timing, rng).gaps)
    assert worst <= timing.ttl + timing.expiry_check + 4 * timing.hop[1]
    assert worst >= timing.ttl * 2 / 3 - timing.hop[1]  # renewed every ttl/3: at least that


def test_the_checker_finds_two_owners_when_acts_are_not_fenced_by_the_lease() -> None:
    """A controller paused past its lease resumes and acts before it learns the lease is
    gone: without the fence that is an overlap with the new owner."""
    rng = random.Random("unfenced")
    trials = [sm.trial("pause", sm.Timing(ttl=2.0, fence=False), rng) for _ in range(3)]
    assert sum(t.overlaps for t in trials) > 0


def test_etcd_refuses_a_deposed_owners_writes_when_its_own_fence_is_off() -> None:
    """The second line of the fence (docs/ha.md): a paused owner that resumes and commits
    what it observed has every write refused by the compare on the host's owner key."""
    rng = random.Random("unfenced writes")
    trials = [sm.trial("pause", sm.Timing(ttl=2.0, fence=False), rng) for _ in range(6)]
    assert sum(t.refused_commits for t in trials) > 0


def test_the_checker_finds_two_owners_when_a_host_changes_hands_without_a_drain() -> None:
    """The ring view alone (no owner key, no acknowledgement): the newcomer acts before the
    old owner has seen the new membership."""
    rng = random.Random("undrained")
    trials = [sm.trial("join", sm.Timing(ttl=2.0, drain=False), rng) for _ in range(3)]
    assert sum(t.overlaps for t in trials) > 0


def test_a_join_waits_only_for_the_command_in_flight() -> None:
    timing = sm.Timing(ttl=10.0)
    trial = sm.trial("join", timing, random.Random("join"))
    assert trial.gaps
    assert max(trial.gaps) <= timing.inflight + 4 * timing.hop[1]


def test_the_models_records_are_the_state_codecs_bytes() -> None:
    """etcd's load in the model uses records of the real encoding's size."""
    host = Host(
        name="host-000042",
        address="10.1.0.42",
        labels=(("zone", "z3"),),
        cpus=4.0,
        memory=8 * 2**30,
    )
    tasks = tuple(SeenTask("web", i, f"web.{i}.3f9a2c1b7d4e", "9c1e2f3a4b5d6e7f") for i in range(2))
    engine = Engine("docker", "26.1.5+dfsg1")
    state = HostState(
        last_seen=1796490217.5279202,
        tasks=tasks,
        last_known=host,
        engine=engine,
        engine_read=1796490017.5279202,
    )
    assert codec.dumps(state) == _compact(sm.host_record("host-000042", 2))
    slot = SlotState(phase=SlotPhase.RUNNING, task="web.42.3f9a2c1b7d4e", host="host-000042")
    assert codec.dumps(slot) == _compact(sm.slot_record("host-000042", 42))


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def test_at_rest_etcd_takes_under_one_write_per_host_a_minute() -> None:
    for hosts in (1_000, 10_000, 100_000):
        load = sm.at_rest(hosts, 10, sm.Rates(churn=1.0))
        assert load.per_host_per_min < 1.0


def test_per_shard_placement_places_every_replacement_within_capacity() -> None:
    rng = random.Random("placement")
    for policy in ("ranked", "sampled"):
        found = sm.per_shard_placement(1000, 5, rng, policy)
        assert found.placements == 200  # 100 lost hosts of 2 tasks
        assert found.txns - found.refused <= found.placements
    ranked = sm.per_shard_placement(1000, 5, random.Random(1), "ranked")
    sampled = sm.per_shard_placement(1000, 5, random.Random(1), "sampled")
    assert ranked.rate > sampled.rate  # shards that rank alike collide on the same hosts
