"""The metrics, built purely from a fleet reading (status documents, pass statistics, the
lock), and the pass statistics the use cases keep for them; checked through
prometheus_client's own text parser."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from minidock import usecases
from minidock.cli import app
from minidock.commands.caddy import ProxyTraffic, proxy_traffic
from minidock.core.passes import PASS_BUCKETS, PassStats
from minidock.metrics import METRICS, metrics_text, write_textfile
from minidock.store.directory import StateLock
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode
from minidock.usecases.fleetview import (
    ClusterReading,
    FleetReading,
    LockState,
    flock_held,
    lock_state,
    read_fleet,
)
from tests.unit.test_usecases import Setup, make_setup, run

DOCS = Path(__file__).parents[2] / "docs" / "observability.md"
PLANNED: set[str] = set()  # metrics the docs name before they are built
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def reading_of(setup: Setup) -> FleetReading:
    return run(read_fleet(setup.state, setup.runtime()))


def test_a_converged_fleet_in_metrics(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    setup.converged()
    found = samples(metrics_text(reading_of(setup)))
    web = (("cluster", "uc"), ("service", "web"))
    assert found[("minidock_store_up", ())] == 1
    assert found[("minidock_cluster_up", (("cluster", "uc"),))] == 1
    assert found[("minidock_service_desired_replicas", web)] == 2
    assert found[("minidock_service_running", web)] == 2
    assert found[("minidock_service_tasks", (*web, ("state", "running")))] == 2
    assert found[("minidock_service_tasks", (*web, ("state", "exited")))] == 0
    assert found[("minidock_service_state", (*web, ("state", "converged")))] == 1
    assert found[("minidock_rollout_phase", (*web, ("state", "none")))] == 1
    for n in (1, 2, 3):
        labels = (("cluster", "uc"), ("host", f"host{n}"))
        assert found[("minidock_host_up", labels)] == 1
        assert found[("minidock_host_state", (*labels, ("state", "ready")))] == 1
        assert found[("minidock_host_cpus_capacity", labels)] == 4
    assert sum(v for (name, _), v in found.items() if name == "minidock_host_tasks") == 3


def test_each_state_set_has_exactly_one_state_on(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    setup.converged()
    found = samples(metrics_text(reading_of(setup)))
    for name in ("minidock_service_state", "minidock_rollout_phase", "minidock_host_state"):
        owners: dict[tuple[tuple[str, str], ...], float] = {}
        for (n, labels), v in found.items():
            if n == name:
                key = tuple(kv for kv in labels if kv[0] != "state")
                owners[key] = owners.get(key, 0) + v
        assert owners
        assert set(owners.values()) == {1}, name


def test_a_host_that_does_not_answer_is_down_in_metrics_not_missing(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    setup.converged()
    setup.docker.down.add("host2")
    found = samples(metrics_text(reading_of(setup)))
    labels = (("cluster", "uc"), ("host", "host2"))
    assert found[("minidock_host_up", labels)] == 0
    assert found[("minidock_host_up", (("cluster", "uc"), ("host", "host1")))] == 1
    assert found[("minidock_store_up", ())] == 1  # the store answered: only a host is lost


def test_a_store_that_cannot_be_read_is_store_up_0_and_no_fleet(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)  # nothing applied
    reading = reading_of(setup)
    assert reading.error.startswith("nothing applied yet")
    found = samples(metrics_text(reading))
    assert found[("minidock_store_up", ())] == 0
    assert not [name for name, _ in found if name.startswith(("minidock_service", "minidock_host"))]


def test_passes_are_counted_by_the_use_cases(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    setup.converged()
    with SQLiteStore.open(setup.state) as store:
        before = store.load().passes
    outcome = run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    assert outcome.exit_code is ExitCode.OK
    with SQLiteStore.open(setup.state) as store:
        after = store.load().passes
    assert after.count == before.count + 1
    assert after.codes["0"] == before.codes.get("0", 0) + 1
    assert before.acts["run"] == 3  # db and two web tasks started while converging
    assert after.last_code == 0
    assert after.last_at == setup.clock.t
    found = samples(metrics_text(reading_of(setup)))
    key = (("cluster", "uc"),)
    assert found[("minidock_pass_duration_seconds_count", key)] == after.count
    assert found[("minidock_passes_total", (*key, ("code", "0")))] == after.codes["0"]
    assert found[("minidock_acts_total", (*key, ("kind", "run")))] == 3


@given(st.lists(st.tuples(st.floats(0, 1000), st.sampled_from([0, 1, 3, 4])), max_size=30))
def test_pass_stats_buckets_are_cumulative_and_add_up(passes: list[tuple[float, int]]) -> None:
    stats = PassStats()
    for seconds, code in passes:
        stats = stats.after(seconds, code, {"run": 1}, 1.0)
    assert stats.count == len(passes) == sum(stats.codes.values())
    assert list(stats.buckets) == sorted(stats.buckets)  # cumulative: never falls
    assert stats.buckets[-1] <= stats.count
    for bound, n in zip(PASS_BUCKETS, stats.buckets, strict=True):
        assert n == sum(1 for s, _ in passes if s <= bound)
    assert stats.acts.get("run", 0) == len(passes)


def test_the_histogram_parses_with_its_inf_bucket() -> None:
    stats = PassStats().after(0.3, 0, {}, 5.0).after(70.0, 3, {"stop": 2}, 9.0)
    reading = FleetReading(9.0, (ClusterReading("c", None, stats),))
    found = samples(metrics_text(reading))
    bucket = "minidock_pass_duration_seconds_bucket"
    assert found[(bucket, (("cluster", "c"), ("le", "0.5")))] == 1
    assert found[(bucket, (("cluster", "c"), ("le", "+Inf")))] == 2
    assert found[("minidock_pass_duration_seconds_sum", (("cluster", "c"),))] == 70.3
    assert found[("minidock_last_pass_exit_code", (("cluster", "c"),))] == 3
    assert found[("minidock_cluster_up", (("cluster", "c"),))] == 0


def test_the_lock_is_read_from_the_kernel_without_taking_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert lock_state(state) == LockState(False)  # never taken: no lock file
    held = StateLock(state)
    held.acquire()
    try:
        now = lock_state(state)
        assert now.held is True
        assert now.since is not None
        assert held.held  # the reader took nothing from the holder
    finally:
        held.release()
    assert lock_state(state) == LockState(False)
    metrics = samples(metrics_text(FleetReading(1.0, (ClusterReading("c", None, lock=now),))))
    assert metrics[("minidock_lock_held", (("cluster", "c"),))] == 1


def test_proc_locks_lines() -> None:
    table = (
        "1: OFDLCK ADVISORY  WRITE -1 fe:00:2146450 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 29491 fe:01:77 0 EOF\n"
        "3: -> FLOCK  ADVISORY  WRITE 29492 fe:00:88 0 EOF\n"
    )
    assert flock_held(table, 0xFE, 1, 77)
    assert not flock_held(table, 0xFE, 0, 77)
    assert not flock_held(table, 0xFE, 0, 88)  # only waiting for it
    assert not flock_held(table, 0xFE, 0, 2146450)  # an OFD lock is not the state's flock


def test_every_metric_is_documented_with_its_labels() -> None:
    docs = DOCS.read_text()
    for name, info in METRICS.items():
        shown = name + ("_total" if info.kind == "counter" else "")
        row = re.search(rf"^\| `{shown}(\{{[^`]*\}})?` \| {info.kind} \|", docs, re.M)
        assert row is not None, f"docs/observability.md lacks a row for {shown}"
        labels = row[1].strip("{}").split(",") if row[1] else []
        assert tuple(labels) == info.labels, shown
    for mentioned in set(re.findall(r"`(minidock_[a-z_]+)", docs)):
        base = mentioned.removesuffix("_total")
        known = base in METRICS or base.rsplit("_", 1)[0] in METRICS  # _bucket, _count, _sum
        assert known or mentioned in PLANNED, mentioned


def test_the_textfile_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "minidock.prom"
    path.write_text("old\n")
    write_textfile(path, b"new\n")
    assert path.read_text() == "new\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minidock.prom"]  # no temporary left


def documented(marker: str) -> str:
    found = re.search(
        rf"<!-- {marker} -->\n```\w+\n(.*?)```\n<!-- /{marker} -->", DOCS.read_text(), re.S
    )
    assert found is not None, f"docs/observability.md lost its {marker} block"
    return found[1].strip()


def test_the_documented_cron_line_writes_the_textfile(tmp_path: Path) -> None:
    """Run as documented, against a state with nothing applied: the file is written all the
    same (minidock_store_up 0, what the alert reads) and the exit is 1 with one line."""
    words = documented("metrics-cron-line").split()[5:]  # after the schedule
    assert words[0] == "MINIDOCK_STATE=/var/lib/minidock"
    assert words[1].endswith("/minidock")
    assert words[2:4] == ["metrics", "--output"]
    out = tmp_path / "minidock.prom"
    result = CliRunner().invoke(
        app, ["metrics", "--output", str(out), "--state", str(tmp_path / "s")]
    )
    assert result.exit_code == 1
    assert result.output.strip().startswith("minidock: nothing applied yet")
    assert len(result.output.strip().splitlines()) == 1
    assert "minidock_store_up 0.0" in out.read_text()
    unit = documented("serve-systemd-unit")
    assert "ExecStart=/opt/minidock/bin/minidock serve --listen 0.0.0.0:9440 --token-file" in unit
    assert "Environment=MINIDOCK_STATE=/var/lib/minidock" in unit


def test_request_metrics_per_route_and_class_and_an_unread_proxy_is_up_0() -> None:
    text = (Path(__file__).parent.parent / "data" / "caddy" / "metrics-2.6.2.txt").read_text()
    read, lost = proxy_traffic("host1", text), ProxyTraffic("host2", error="timed out")
    reading = FleetReading(1.0, (ClusterReading("uc", None, traffic=(read, lost)),))
    found = samples(metrics_text(reading))
    one = (("cluster", "uc"), ("host", "host1"))
    web = (*one, ("route", "*/"), ("service", "web"))
    assert found[("minidock_ingress_up", one)] == 1
    assert found[("minidock_ingress_up", (("cluster", "uc"), ("host", "host2")))] == 0
    assert found[("minidock_ingress_started_timestamp_seconds", one)] == read.started > 0
    by_class = {
        dict(labels)["class"]: v
        for (name, labels), v in found.items()
        if name == "minidock_ingress_requests_total" and dict(labels)["service"] == "web"
    }
    assert by_class == {"1xx": 0, "2xx": 7, "3xx": 0, "4xx": 0, "5xx": 2}
    count = found[("minidock_ingress_request_duration_seconds_count", tuple(sorted(web)))]
    assert count == 9
    inf = tuple(sorted((*web, ("le", "+Inf"))))
    assert found[("minidock_ingress_request_duration_seconds_bucket", inf)] == 9
    assert not [
        labels
        for (name, labels) in found
        if ("host", "host2") in labels and name.startswith("minidock_ingress_request")
    ]  # unread: no series, no zeros


def test_with_request_metrics_off_only_ingress_up_is_exposed() -> None:
    """`[ingress] request_metrics = false`: the proxy is read (up 1), and even a /metrics
    that has route series (a proxy not yet loaded with the new config) gives none."""
    text = (Path(__file__).parent.parent / "data" / "caddy" / "metrics-2.6.2.txt").read_text()
    read = proxy_traffic("host1", text, counted=False)
    reading = FleetReading(1.0, (ClusterReading("uc", None, traffic=(read,)),))
    found = samples(metrics_text(reading))
    ingress = sorted({name for name, _ in found if name.startswith("minidock_ingress")})
    assert ingress == ["minidock_ingress_up"]
    assert found[("minidock_ingress_up", (("cluster", "uc"), ("host", "host1")))] == 1
