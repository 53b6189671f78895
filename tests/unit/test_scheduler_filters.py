"""Each scheduler filter is defined once (issue 19, Deliver 9): the test a filter's `check`
runs to explain a refusal is the very function the placement index runs to choose. Change
that one function and both the choice and the explanation follow; there is no second copy
in the index for them to disagree with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from minidock.core import ControllerState, admit, gpus, scheduler
from minidock.core.decide import decide
from minidock.core.scheduler import (
    FILTERS,
    ConstraintFilter,
    Fleet,
    GpuFilter,
    PortFilter,
    ReadyFilter,
    ResourceFilter,
    place,
)
from minidock.model import (
    Cluster,
    Constraint,
    Container,
    HostObservation,
    Inventory,
    Observed,
    PortMapping,
    Service,
)
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


def test_the_filters_are_the_five_and_each_test_is_a_plain_function() -> None:
    kinds = [ReadyFilter, ConstraintFilter, ResourceFilter, GpuFilter, PortFilter]
    assert [type(f) for f in FILTERS] == kinds
    tests = (ReadyFilter.passes, ConstraintFilter.passes, ResourceFilter.fits, GpuFilter.fits)
    for test in (*tests, PortFilter.free):
        assert callable(test)


@pytest.mark.parametrize(
    ("owner", "name", "reason"),
    [
        (ReadyFilter, "passes", "not eligible"),
        (ConstraintFilter, "passes", "constraint zone != x not met"),
        (ResourceFilter, "fits", "needs 1 cpus, 4 free; needs 1GiB memory, 8GiB free"),
        (GpuFilter, "fits", "needs 0 gpus, the host has none (inventory gpus)"),
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


# -- GPUs: counted like cpus, each task its own device ids (minidock.core.gpus) ---------------
ML = Service(name="ml", image="ml:1", gpus=2)
GPU_HOSTS = [
    replace(host("gpu1"), gpus=("0", "1", "2")),
    replace(host("gpu2"), gpus=("GPU-a", "GPU-b")),
    host("cpu1"),
]


def gpu_fleet(live: list[Container] = ()) -> Fleet:  # type: ignore[assignment]
    return Fleet.build(GPU_HOSTS, {h.name: None for h in GPU_HOSTS}, live)


def test_gpu_tasks_go_only_where_that_many_gpus_are_free_and_are_never_shared() -> None:
    fleet = gpu_fleet()
    first, second = place(ML, fleet), place(ML, fleet)
    assert {first.host, second.host} == {"gpu1", "gpu2"}  # 2 of gpu1's 3, both of gpu2's
    third = place(ML, fleet)
    assert third.host is None
    assert third.reasons == (
        "cpu1: needs 2 gpus, the host has none (inventory gpus)",
        "gpu1: needs 2 gpus, 1 free",
        "gpu2: needs 2 gpus, 0 free",
    )


def test_a_live_tasks_gpus_count_as_given() -> None:
    held = task("ml", 1, "gpu2", gpus=("GPU-a",))
    assert place(ML, gpu_fleet([held]), only="gpu2").reasons == ("gpu2: needs 2 gpus, 1 free",)


def test_a_run_is_given_free_ids_its_slots_previous_ones_first() -> None:
    assert gpus.choose("gpu1", ("0", "1", "2"), 2, {"0"}) == gpus.GpuIds(("1", "2"))
    assert gpus.choose("gpu1", ("0", "1", "2"), 2, set(), ("2", "0")) == gpus.GpuIds(("2", "0"))
    taken = gpus.choose("gpu1", ("0", "1", "2"), 2, {"2"}, ("2", "0"))
    assert taken == gpus.GpuIds(("0", "1"))  # its previous id is another task's now
    refused = gpus.choose("gpu1", ("0", "1", "2"), 2, {"0", "1"})
    assert refused == gpus.GpuIds(refused="gpu1 has 1 free GPUs of 3, 2 wanted")


def test_each_run_in_one_pass_gets_its_own_ids() -> None:
    """The whole decision: two GPU tasks placed on one host get disjoint ids, and the
    ids a live task holds are given to no run."""
    inventory = Inventory("i.toml", (replace(host("gpu1"), gpus=("0", "1", "2", "3", "4")),))
    cluster = Cluster("c", "c.toml", "i.toml", (replace(ML, replicas=2),))
    state = admit(ControllerState(), cluster, 1)
    plan = decide(cluster, inventory, observed(inventory), state, 0.0)
    assert sorted(r.gpus.ids for r in plan.run) == [("0", "1"), ("2", "3")]
    other = replace(task("other", 1, "gpu1", gpus=("0", "2")), cluster="other")
    seen = observed(inventory, [other])
    plan = decide(cluster, inventory, seen, state, 0.0)
    assert [r.gpus.ids for r in plan.run] == [("1", "3")]
    assert [p.reason for p in plan.pending] == ["gpu1: needs 2 gpus, 1 free"]


def test_a_slot_restarted_on_its_host_is_offered_the_ids_its_last_task_had() -> None:
    older = replace(task("ml", 2, "gpu1", gpus=("2",)), created_at=1.0, state="exited")
    last = replace(task("ml", 2, "gpu1", gpus=("3", "0")), created_at=2.0, state="exited")
    assert gpus.previous([older, last, task("ml", 1, "gpu1", gpus=("1",))], "ml", 2) == ("3", "0")
    assert gpus.previous([last], "ml", 1) == ()


def task(service: str, slot: int, on: str, *, gpus: tuple[str, ...] = ()) -> Container:
    return Container(
        id=f"{service}{slot}{on}".ljust(12, "0"), name=f"{service}.{slot}.t", host=on,
        cluster="c", service=service, slot=slot, task="t", spec="s", image="ml:1",
        state="running", gpus=gpus,
    )  # fmt: skip


def observed(inventory: Inventory, containers: Sequence[Container] = ()) -> Observed:
    return Observed(
        {
            h.name: HostObservation(
                h.name,
                True,
                tuple(c for c in containers if c.host == h.name and c.cluster == "c"),
                others=tuple(c for c in containers if c.host == h.name and c.cluster != "c"),
            )
            for h in inventory.hosts
        }
    )


def test_a_host_in_never_is_not_used_even_when_it_is_the_only_one_that_fits() -> None:
    """`place`'s `never` (a host keeping a slot's old volume) is hard where `avoid` is a
    preference: an avoided host is still used when the others are never-hosts, and a
    never-host alone that fits is none, said by its own line."""
    db = Service(name="db", image="db:1")
    never = {"host1": "keeps the slot's old volume"}
    assert place(db, fleet(), never=never).host in ("host2", "host3")
    assert place(db, fleet(), avoid=("host2", "host3"), never=never).host in ("host2", "host3")
    alone = Fleet.build(HOSTS, {"host1": None, "host2": "drained", "host3": "drained"}, [])
    where = place(db, alone, never=never)
    assert where.host is None
    assert "host1: keeps the slot's old volume" in where.why
    assert "host2: " in where.why
