"""Several clusters in one state store (issue 15, item 8), through the use cases with
in-memory Docker engines: each file goes to its cluster's store, `status`, `reconcile` and
`watch` cover every cluster (or `--cluster`), a service's command finds its cluster, a
host's intent acts in every cluster that knows it, and the events of all are one log."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock import store as stores
from minidock import usecases
from minidock.model import Cluster
from minidock.store.directory import StateLock
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import (
    BadInput,
    Busy,
    ConvergeOutcome,
    Ending,
    ExitCode,
    IntentRecorded,
    PassDone,
)
from minidock.usecases.clusters import combined, held, home
from minidock.usecases.desired import _same_cluster
from tests.fakes import FakeDocker
from tests.unit.test_usecases import INVENTORY, STACK, FakeClock, Setup, Stop, make_setup, run

OTHER = (
    STACK.replace('cluster = "uc"', 'cluster = "other"').replace("8080:8080", "9090:9090")
    + '\n[services.api]\nimage = "web:5"\n'
)


@pytest.fixture
def two(tmp_path: Path) -> Setup:
    """Clusters `uc` (db, web) and `other` (db, web, api) applied to one store, converged."""
    setup = make_setup(tmp_path)
    (tmp_path / "other.toml").write_text(OTHER)
    setup.converged()
    other = run(
        usecases.apply(
            tmp_path / "other.toml", setup.state, setup.runtime(), setup.report, wait=True,
            timeout=60.0,
        )
    )  # fmt: skip
    assert other.exit_code is ExitCode.OK, other
    setup.reports.clear()
    return setup


def remove_every(setup: Setup, service: str) -> None:
    """Every task of `service`, of every cluster, gone from its engine (docker rm -f)."""
    for engine in setup.docker.engines.values():
        for cid in [
            i for i, d in engine.items() if d["Config"]["Labels"]["minidock.service"] == service
        ]:
            del engine[cid]


def clusters_running(setup: Setup) -> set[str]:
    return {doc["Config"]["Labels"]["minidock.cluster"] for doc in setup.docker.containers()}


def test_a_second_clusters_file_goes_beside_the_first(two: Setup) -> None:
    assert (two.state / "clusters" / "other" / "state.db").exists()
    with SQLiteStore.open(two.state) as own:
        assert own.load().cluster == "uc"  # the store's own cluster is untouched
    with SQLiteStore.open(two.state / "clusters" / "other") as beside:
        assert beside.load().cluster == "other"
    assert [(h.name, h.location) for h in held(two.state)] == [
        ("uc", two.state),
        ("other", two.state / "clusters" / "other"),
    ]
    assert clusters_running(two) == {"uc", "other"}
    assert len(two.running()) == 3 + 4  # uc: db + 2 web; other: db + 2 web + api


def test_both_clusters_share_the_stores_controller_id(two: Setup) -> None:
    labels = {doc["Config"]["Labels"]["minidock.controller"] for doc in two.docker.containers()}
    assert labels == {stores.controller_id(two.state)}


def test_home_is_the_store_itself_when_empty_or_its_own_cluster(tmp_path: Path) -> None:
    assert home(tmp_path / "none", "a") == tmp_path / "none"
    setup_dir = tmp_path / "s"
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    (tmp_path / "cluster.toml").write_text(STACK)
    docker = FakeDocker()
    setup = Setup(tmp_path, docker, FakeClock())
    run(usecases.apply(setup.file, setup_dir, setup.runtime(), setup.report))
    assert home(setup_dir, "uc") == setup_dir
    assert home(setup_dir, "b") == setup_dir / "clusters" / "b"


def test_a_clusters_store_that_another_apply_took_meanwhile_is_refused() -> None:
    from minidock.core import ControllerState

    state = ControllerState(cluster="uc")
    cluster = Cluster(name="other", path="other.toml", inventory_path="i.toml", services=())
    with pytest.raises(BadInput, match="now holds cluster 'uc', applied meanwhile"):
        _same_cluster(state, Path("other.toml"), cluster, Path("/s"))


def test_status_covers_every_cluster_or_the_one_named(two: Setup) -> None:
    every = run(usecases.status(two.state, two.runtime()))
    assert [d.cluster for d in every.documents] == ["uc", "other"]
    assert {t.service for t in every.documents[1].tasks} == {"db", "web", "api"}
    one = run(usecases.status(two.state, two.runtime(), cluster="other"))
    assert [d.cluster for d in one.documents] == ["other"]
    with pytest.raises(
        BadInput, match=r"--cluster nope: .* holds no such cluster; it holds uc, other"
    ):
        run(usecases.status(two.state, two.runtime(), cluster="nope"))


def test_reconcile_covers_every_cluster_and_names_each_pass(two: Setup) -> None:
    remove_every(two, "db")
    outcome = run(usecases.reconcile(two.state, two.runtime(), two.report))
    started = {
        (p.cluster, line.split(" ")[1].split(".")[0])
        for p in two.passes()
        for line in p.result.done
    }
    assert started == {("uc", "db"), ("other", "db")}
    assert outcome.exit_code in (ExitCode.OK, ExitCode.NOT_CONVERGED)
    assert outcome.passes == 2


def test_reconcile_of_one_cluster_leaves_the_other_alone(two: Setup) -> None:
    remove_every(two, "db")
    with SQLiteStore.open(two.state) as own:
        before = own.events(limit=0)
    run(usecases.reconcile(two.state, two.runtime(), two.report, cluster="other"))
    assert {p.cluster for p in two.passes()} == {""}  # one cluster: passes are not named
    dbs = [d for d in two.docker.containers() if d["Config"]["Labels"]["minidock.service"] == "db"]
    assert [d["Config"]["Labels"]["minidock.cluster"] for d in dbs] == ["other"]
    with SQLiteStore.open(two.state) as own:
        assert own.events(limit=0) == before  # uc saw no pass


def test_a_cluster_whose_lock_is_taken_is_busy_when_the_rest_converged(two: Setup) -> None:
    with StateLock(two.state / "clusters" / "other"), pytest.raises(Busy, match="other: "):
        run(usecases.reconcile(two.state, two.runtime(), two.report))
    assert [p.cluster for p in two.passes()] == ["uc"]


def test_the_worst_exit_of_the_clusters_is_the_commands() -> None:
    ok = ConvergeOutcome(ExitCode.OK, Ending.NO_WAIT, 1, 0.0)
    slow = ConvergeOutcome(ExitCode.NOT_CONVERGED, Ending.NO_WAIT, 1, 0.0, ("web.2",), "why")
    failed = ConvergeOutcome(ExitCode.FAILED, Ending.NO_WAIT, 1, 0.0, (), "broke")
    both = combined([("a", ok), ("b", slow)])
    assert (both.exit_code, both.passes, both.waiting, both.why) == (
        ExitCode.NOT_CONVERGED,
        2,
        ("b: web.2",),
        "b: why",
    )
    assert combined([("a", slow), ("b", failed)]).exit_code is ExitCode.FAILED
    degraded = ConvergeOutcome(ExitCode.DEGRADED, Ending.NO_WAIT, 1, 0.0)
    assert combined([("a", degraded), ("b", slow)]).exit_code is ExitCode.NOT_CONVERGED
    assert combined([("a", ok), ("b", degraded)]).exit_code is ExitCode.DEGRADED


def test_watch_passes_every_cluster_each_round(two: Setup) -> None:
    def stop(n: int) -> None:
        raise Stop

    two.clock.on_sleep = stop
    with pytest.raises(Stop):
        run(usecases.watch(two.state, two.runtime(), two.report, interval=2.0))
    assert [p.cluster for p in two.reports if isinstance(p, PassDone)] == ["uc", "other"]


def test_a_service_command_finds_the_cluster_that_has_the_service(two: Setup) -> None:
    scaled = run(
        usecases.scale("api", 2, two.state, two.runtime(), two.report, wait=True, timeout=60)
    )
    assert scaled.exit_code is ExitCode.OK
    assert len([n for n in two.running() if n.startswith("api.")]) == 2
    with pytest.raises(
        BadInput, match="service web is in clusters uc, other: name one with --cluster"
    ):
        run(usecases.scale("web", 3, two.state, two.runtime(), two.report))
    with pytest.raises(BadInput, match=r"no cluster in .* has a service 'nope'"):
        run(usecases.reset("nope", two.state, two.runtime(), two.report))
    run(
        usecases.scale(
            "web", 1, two.state, two.runtime(), two.report, wait=True, timeout=60, cluster="uc"
        )
    )
    webs = [
        d for d in two.docker.containers() if d["Config"]["Labels"]["minidock.service"] == "web"
    ]
    per_cluster = sorted(
        d["Config"]["Labels"]["minidock.cluster"] for d in webs if d["State"]["Status"] == "running"
    )
    assert per_cluster == ["other", "other", "uc"]


def test_ps_lists_every_clusters_tasks_each_named(two: Setup) -> None:
    listed = run(usecases.ps(two.state, two.runtime()))
    assert {(t.cluster, t.service) for t in listed.tasks} == {
        ("uc", "db"), ("uc", "web"), ("other", "db"), ("other", "web"), ("other", "api"),
    }  # fmt: skip
    only = run(usecases.ps(two.state, two.runtime(), "api"))
    assert {t.cluster for t in only.tasks} == {"other"}


def test_a_drain_acts_in_every_cluster_that_knows_the_host(two: Setup) -> None:
    drained = run(usecases.drain("host1", two.state, two.runtime(), two.report, timeout=60))
    assert drained.message == "draining host1 in clusters uc, other"
    assert [p for p in two.reports if isinstance(p, IntentRecorded)] == [
        IntentRecorded("draining host1", cluster="uc"),
        IntentRecorded("draining host1", cluster="other"),
    ]  # each cluster's lines are named by it
    assert drained.exit_code is ExitCode.OK
    assert two.docker.names("host1", "running") == []
    assert len(two.running()) == 7  # every task moved, none lost
    with pytest.raises(BadInput, match="host1 is a host of clusters uc, other: plan one"):
        run(usecases.drain_plan("host1", two.state, two.runtime()))
    activated = run(usecases.activate("host1", two.state, two.runtime(), two.report))
    assert activated.message == "activated host1 in clusters uc, other"


def test_the_events_of_every_cluster_are_one_log_each_event_named(two: Setup) -> None:
    log = usecases.events(two.state, limit=0)
    assert log.several
    assert {e.cluster for e in log.events} == {"uc", "other"}
    times = [e.at for e in log.events]
    assert times == sorted(times)
    mine = usecases.events(two.state, limit=0, cluster="other")
    assert not mine.several
    assert {e.cluster for e in mine.events} == {"other"}
    assert any("api" in e.message for e in mine.events)


def test_migrate_moves_every_cluster(two: Setup, tmp_path: Path, etcd_url: str) -> None:
    clock = two.runtime().clock
    url = stores.parse_location(etcd_url)
    moved = run(usecases.migrate(two.state, url, clock))
    assert [h.name for h in held(url)] == ["uc", "other"]
    back = tmp_path / "back"
    run(usecases.migrate(url, back, clock))
    for name, here in (("uc", two.state), ("other", two.state / "clusters" / "other")):
        there = back if name == "uc" else back / "clusters" / name
        with SQLiteStore.open(here) as a, SQLiteStore.open(there) as b:
            assert (a.load(), a.events(limit=0)) == (b.load(), b.events(limit=0))
    assert moved.generations == 2
