"""The fleet as Prometheus metrics, built with `prometheus_client` from one `FleetReading`
(status documents, pass statistics, the lock): what `minidock metrics` prints for
node_exporter's textfile collector and `minidock serve` answers on /metrics. Pure (it reads
values and renders text), but for `write_textfile`. Every metric is in `METRICS`, with the
meaning that docs/observability.md lists (a unit test holds the two together).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from minidock.core import HostPhase, RolloutPhase
from minidock.core.autoscale import DECISIONS
from minidock.documents.status import AutoscaleSummary, ServiceWord, StatusDocument
from minidock.model import ContainerState
from minidock.usecases.fleetview import ClusterReading, FleetReading

__all__ = [
    "CONTENT_TYPE",
    "METRICS",
    "MetricInfo",
    "metric_families",
    "metrics_text",
    "write_textfile",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format


@dataclass(frozen=True)
class MetricInfo:
    """A metric's kind (gauge, counter, histogram), labels and meaning."""

    kind: str
    labels: tuple[str, ...]
    help: str


C, CS, CH = ("cluster",), ("cluster", "service"), ("cluster", "host")
CSL = ("cluster", "service", "slot")
METRICS: dict[str, MetricInfo] = {
    "minidock_store_up": MetricInfo(
        "gauge", (), "1 when the state store answered and every cluster in it was read"
    ),
    "minidock_observation_timestamp_seconds": MetricInfo(
        "gauge", (), "When this observation of the fleet was made (epoch seconds)"
    ),
    "minidock_cluster_up": MetricInfo(
        "gauge", C, "1 when the cluster's state was read and its hosts observed, else 0"
    ),
    "minidock_cluster_generation": MetricInfo("gauge", C, "The desired-state generation in force"),
    "minidock_cluster_converged": MetricInfo(
        "gauge", C, "1 when nothing is to do, waited for, paused, Failed, pending or down"
    ),
    "minidock_mass_loss_guard": MetricInfo(
        "gauge", C, "1 while the mass-loss guard holds the passes (too many hosts failed)"
    ),
    "minidock_service_desired_replicas": MetricInfo(
        "gauge", CS, "Slots the service wants filled (0 when desired stopped)"
    ),
    "minidock_autoscale_min_replicas": MetricInfo(
        "gauge", CS, "An autoscaled service's fewest tasks (docs/autoscale.md)"
    ),
    "minidock_autoscale_max_replicas": MetricInfo(
        "gauge", CS, "An autoscaled service's most tasks"
    ),
    "minidock_autoscale_requests_per_second": MetricInfo(
        "gauge",
        CS,
        "Requests a second over an autoscaled service's routes, as its count's "
        "latest decision read them (absent without data)",
    ),
    "minidock_autoscale_decision": MetricInfo(
        "gauge",
        (*CS, "decision"),
        "1 for the one word of an autoscaled service's latest "
        "decision (out, in, steady, max, cooldown, window, held, no-data, bounds)",
    ),
    "minidock_service_running": MetricInfo("gauge", CS, "Slots with a running task"),
    "minidock_service_healthy": MetricInfo(
        "gauge", CS, "Slots whose task is running and healthy (or has no health check)"
    ),
    "minidock_service_tasks": MetricInfo(
        "gauge", (*CS, "state"), "Tasks observed now, by container state (every state listed)"
    ),
    "minidock_service_state": MetricInfo(
        "gauge", (*CS, "state"), "1 for the service's one word (converged, degraded, ...)"
    ),
    "minidock_service_failed_slots": MetricInfo(
        "gauge", CS, "Slots that hit their crash-loop limit: Failed until reset or apply"
    ),
    "minidock_service_pending_slots": MetricInfo(
        "gauge", CS, "Slots no host can take now (the reason is in status)"
    ),
    "minidock_rollout_phase": MetricInfo(
        "gauge", (*CS, "state"), "1 for the rolling update's phase (none, updating, paused, ...)"
    ),
    "minidock_rollout_done_slots": MetricInfo(
        "gauge", CS, "Slots the rolling update has replaced so far"
    ),
    "minidock_rollout_total_slots": MetricInfo("gauge", CS, "Slots the rolling update replaces"),
    "minidock_rollout_failures": MetricInfo(
        "gauge", CS, "Tasks of the rolling update that failed their gate"
    ),
    "minidock_host_up": MetricInfo(
        "gauge", CH, "1 when the host answered this observation's probe (SSH and docker)"
    ),
    "minidock_host_state": MetricInfo(
        "gauge", (*CH, "state"), "1 for the host's phase: ready, unreachable or down"
    ),
    "minidock_host_drained": MetricInfo("gauge", CH, "1 when an operator drained the host"),
    "minidock_host_tasks": MetricInfo("gauge", CH, "Live tasks of the cluster on the host"),
    "minidock_host_cpus_reserved": MetricInfo(
        "gauge", CH, "CPUs reserved by the cluster's live tasks on the host"
    ),
    "minidock_host_cpus_capacity": MetricInfo(
        "gauge", CH, "CPUs the inventory gives the host (absent: unlimited)"
    ),
    "minidock_host_memory_reserved_bytes": MetricInfo(
        "gauge", CH, "Memory reserved by the cluster's live tasks on the host"
    ),
    "minidock_host_memory_capacity_bytes": MetricInfo(
        "gauge", CH, "Memory the inventory gives the host (absent: unlimited)"
    ),
    "minidock_host_last_seen_timestamp_seconds": MetricInfo(
        "gauge", CH, "When a pass last had an answer from the host (absent: never)"
    ),
    "minidock_backup_last_timestamp_seconds": MetricInfo(
        "gauge",
        CSL,
        "When the slot's last backup ended, with its snapshots (absent: none ended yet)",
    ),
    "minidock_backup_last_failed": MetricInfo(
        "gauge", CSL, "1 when the slot's last backup failed (its snapshots are not new)"
    ),
    "minidock_backup_verified_timestamp_seconds": MetricInfo(
        "gauge", CSL, "When the slot's last restore drill ended (absent: none ran yet)"
    ),
    "minidock_backup_verify_ok": MetricInfo(
        "gauge", CSL, "1 when the slot's last restore drill passed backup.verify, else 0"
    ),
    "minidock_backup_age_seconds": MetricInfo(
        "gauge",
        ("cluster", "service", "slot", "volume"),
        "A pinned slot's recovery point: the age of its volume's newest snapshot",
    ),
    "minidock_certificate_expiry_timestamp_seconds": MetricInfo(
        "gauge",
        CH,
        "When the ingress certificate for the route host `host` ends (absent: none issued)",
    ),
    "minidock_pass_duration_seconds": MetricInfo(
        "histogram", C, "How long reconcile passes took, every pass since the store was made"
    ),
    "minidock_passes": MetricInfo(
        "counter", (*C, "code"), "Reconcile passes by exit code (0, 1, 3, 4)"
    ),
    "minidock_acts": MetricInfo(
        "counter",
        (*C, "kind"),
        "Acts the passes made, by kind (run, stop, adopt, push, act-failed)",
    ),
    "minidock_last_pass_timestamp_seconds": MetricInfo(
        "gauge", C, "When the newest pass ended (epoch seconds; absent: none yet)"
    ),
    "minidock_last_pass_duration_seconds": MetricInfo("gauge", C, "How long the newest pass took"),
    "minidock_last_pass_exit_code": MetricInfo("gauge", C, "The newest pass's exit code"),
    "minidock_lock_held": MetricInfo(
        "gauge", C, "1 while a writer (a pass, apply, drain...) holds the cluster's lock"
    ),
    "minidock_lock_held_since_timestamp_seconds": MetricInfo(
        "gauge", C, "When the lock's holder took it (absent while nobody holds it)"
    ),
    "minidock_controller_up": MetricInfo(
        "gauge", ("controller", "holder"), "1 for each running watch's member key (etcd store)"
    ),
    "minidock_controller_last_pass_timestamp_seconds": MetricInfo(
        "gauge", ("controller",), "When the controller's last pass that held the lock ended"
    ),
    "minidock_controller_last_pass_duration_seconds": MetricInfo(
        "gauge", ("controller",), "How long the controller's last pass that held the lock took"
    ),
    "minidock_controller_passes": MetricInfo(
        "gauge", ("controller",), "Passes the controller made holding the lock, since it started"
    ),
    "minidock_controller_hosts_connected": MetricInfo(
        "gauge", ("controller",), "Hosts the controller holds a connection to (its own or warm)"
    ),
    "minidock_controller_hosts_owned": MetricInfo(
        "gauge", ("controller",), "Hosts whose owner key the controller holds: its share"
    ),
    "minidock_controller_round_seconds": MetricInfo(
        "gauge",
        ("controller", "cluster"),
        "Seconds the controller's last whole round over its share took (probes and write)",
    ),
    "minidock_controller_lease_seconds_left": MetricInfo(
        "gauge", ("controller",), "Seconds left on the controller's member lease"
    ),
    "minidock_ingress_up": MetricInfo(
        "gauge",
        CH,
        "1 when the ingress proxy on the host answered its metrics read (its only series "
        "with request_metrics = false)",
    ),
    "minidock_ingress_started_timestamp_seconds": MetricInfo(
        "gauge", CH, "When the host's ingress proxy started: its request counters begin at 0"
    ),
    "minidock_ingress_requests": MetricInfo(
        "counter",
        (*CH, "service", "route", "class"),
        "Requests the host's ingress proxy answered on the route, by status class (1xx..5xx)",
    ),
    "minidock_ingress_request_duration_seconds": MetricInfo(
        "histogram",
        (*CH, "service", "route"),
        "How long the host's ingress proxy took to answer the route's requests",
    ),
}
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")

CONTAINER_STATES: tuple[str, ...] = get_args(ContainerState)
SERVICE_WORDS: tuple[str, ...] = get_args(ServiceWord)


class _Families:
    """The metric families being filled, made on first use from `METRICS`."""

    def __init__(self) -> None:
        self.made: dict[str, Metric] = {}

    def family(self, name: str) -> Metric:
        if name not in self.made:
            info = METRICS[name]
            make: Callable[..., Metric] = {
                "gauge": GaugeMetricFamily,
                "counter": CounterMetricFamily,
                "histogram": HistogramMetricFamily,
            }[info.kind]
            self.made[name] = make(name, info.help, labels=info.labels)
        return self.made[name]

    def add(self, name: str, labels: tuple[str, ...], value: float) -> None:
        family = self.family(name)
        assert isinstance(family, GaugeMetricFamily | CounterMetricFamily)
        family.add_metric(list(labels), value)

    def states(self, name: str, labels: tuple[str, ...], every: tuple[str, ...], on: str) -> None:
        """A state set: one series per state, 1 for `on`, 0 for the others."""
        for word in every:
            self.add(name, (*labels, word), float(word == on))


def metric_families(reading: FleetReading) -> list[Metric]:
    """Every metric of the reading (families with no series are left out)."""
    out = _Families()
    out.add("minidock_store_up", (), float(not reading.errors))
    out.add("minidock_observation_timestamp_seconds", (), reading.at)
    for cluster in reading.clusters:
        _cluster(out, cluster, reading.at)
    for m in reading.controllers:
        out.add("minidock_controller_up", (m.id, m.holder), 1.0)
        if m.last_pass is not None:
            out.add("minidock_controller_last_pass_timestamp_seconds", (m.id,), m.last_pass)
        if m.pass_seconds is not None:
            out.add("minidock_controller_last_pass_duration_seconds", (m.id,), m.pass_seconds)
        out.add("minidock_controller_passes", (m.id,), float(m.passes))
        out.add("minidock_controller_hosts_connected", (m.id,), float(m.warm))
        out.add("minidock_controller_hosts_owned", (m.id,), float(m.owned))
        for name, seconds in sorted(m.round_seconds.items()):
            out.add("minidock_controller_round_seconds", (m.id, name), seconds)
        if m.lease_left is not None:
            out.add("minidock_controller_lease_seconds_left", (m.id,), m.lease_left)
    return list(out.made.values())


def _cluster(out: _Families, c: ClusterReading, at: float) -> None:
    key = (c.name,)
    out.add("minidock_cluster_up", key, float(c.document is not None))
    _passes(out, c)
    if c.lock.held is not None:
        out.add("minidock_lock_held", key, float(c.lock.held))
    if c.lock.since is not None:
        out.add("minidock_lock_held_since_timestamp_seconds", key, c.lock.since)
    if c.document is not None:
        _document(out, c.name, c.document)
        _recovery(out, c.name, c.document, at)
    _traffic(out, c)


def _recovery(out: _Families, cluster: str, doc: StatusDocument, at: float) -> None:
    """Each pinned slot's recovery point per volume: its newest snapshot's age at the
    reading (no series for a volume with no snapshot known)."""
    for s in doc.services:
        for p in s.recovery:
            if p.taken is not None:
                labels = (cluster, s.name, str(p.slot), p.volume)
                out.add("minidock_backup_age_seconds", labels, max(0.0, at - p.taken))


def _traffic(out: _Families, c: ClusterReading) -> None:
    """Each ingress proxy's request metrics, as Caddy counted them (nothing when unread)."""
    for proxy in c.traffic:
        key = (c.name, proxy.host)
        out.add("minidock_ingress_up", key, float(not proxy.error))
        if proxy.error or not proxy.counted:
            continue  # unread, or `request_metrics = false`: up is all there is
        if proxy.started:
            out.add("minidock_ingress_started_timestamp_seconds", key, proxy.started)
        histogram = out.family("minidock_ingress_request_duration_seconds")
        assert isinstance(histogram, HistogramMetricFamily)
        for r in proxy.routes:
            labels = (*key, r.service, r.route)
            counted = dict(r.classes)
            for word in (*STATUS_CLASSES, *sorted(set(counted) - set(STATUS_CLASSES))):
                out.add("minidock_ingress_requests", (*labels, word), counted.get(word, 0.0))
            buckets = [(_bound(b), n) for b, n in r.buckets]
            histogram.add_metric(list(labels), [*buckets, ("+Inf", r.count)], r.seconds)


def _passes(out: _Families, c: ClusterReading) -> None:
    key, p = (c.name,), c.passes
    histogram = out.family("minidock_pass_duration_seconds")
    assert isinstance(histogram, HistogramMetricFamily)
    buckets = [(_bound(b), float(n)) for b, n in zip(p.bounds, p.buckets, strict=False)]
    histogram.add_metric(list(key), [*buckets, ("+Inf", float(p.count))], p.seconds)
    for code, n in sorted(p.codes.items()):
        out.add("minidock_passes", (*key, code), n)
    for kind, n in sorted(p.acts.items()):
        out.add("minidock_acts", (*key, kind), n)
    if p.last_at:
        out.add("minidock_last_pass_timestamp_seconds", key, p.last_at)
        out.add("minidock_last_pass_duration_seconds", key, p.last_seconds)
        out.add("minidock_last_pass_exit_code", key, p.last_code)


def _bound(b: float) -> str:
    return f"{b:g}" if b != int(b) else f"{b:.1f}"


def _autoscale(out: _Families, labels: tuple[str, ...], a: AutoscaleSummary) -> None:
    out.add("minidock_autoscale_min_replicas", labels, a.min)
    out.add("minidock_autoscale_max_replicas", labels, a.max)
    if a.rate is not None:
        out.add("minidock_autoscale_requests_per_second", labels, a.rate)
    if a.decision:
        out.states("minidock_autoscale_decision", labels, DECISIONS, a.decision)


def _document(out: _Families, cluster: str, doc: StatusDocument) -> None:
    key = (cluster,)
    out.add("minidock_cluster_generation", key, doc.generation)
    out.add("minidock_cluster_converged", key, float(doc.converged))
    out.add("minidock_mass_loss_guard", key, float(bool(doc.guard)))
    for s in doc.services:
        labels = (cluster, s.name)
        out.add("minidock_service_desired_replicas", labels, s.replicas)
        if s.autoscale is not None:
            _autoscale(out, labels, s.autoscale)
        out.add("minidock_service_running", labels, s.running)
        out.add("minidock_service_healthy", labels, s.healthy)
        for state in CONTAINER_STATES:
            n = sum(1 for t in doc.tasks if t.service == s.name and t.state == state)
            out.add("minidock_service_tasks", (*labels, state), n)
        out.states("minidock_service_state", labels, SERVICE_WORDS, s.state)
        out.add("minidock_service_failed_slots", labels, len(s.failed))
        out.add("minidock_service_pending_slots", labels, len(s.pending))
        r = s.rollout
        out.states("minidock_rollout_phase", labels, tuple(RolloutPhase), r.status)
        out.add("minidock_rollout_done_slots", labels, r.done)
        out.add("minidock_rollout_total_slots", labels, r.total)
        out.add("minidock_rollout_failures", labels, r.failures)
        for b in s.backups.slots if s.backups is not None else ():
            slot = (*labels, str(b.slot))
            if b.last is not None:
                out.add("minidock_backup_last_timestamp_seconds", slot, b.last)
                out.add("minidock_backup_last_failed", slot, float(bool(b.failed)))
            if b.verified is not None:
                out.add("minidock_backup_verified_timestamp_seconds", slot, b.verified.at)
                out.add("minidock_backup_verify_ok", slot, float(b.verified.ok))
    for h in doc.hosts:
        labels = (cluster, h.name)
        out.add("minidock_host_up", labels, float(h.error is None))
        out.states("minidock_host_state", labels, tuple(HostPhase), h.state)
        out.add("minidock_host_drained", labels, float(h.drained))
        out.add("minidock_host_tasks", labels, h.tasks)
        out.add("minidock_host_cpus_reserved", labels, h.cpus.used)
        out.add("minidock_host_memory_reserved_bytes", labels, h.memory.used)
        if h.cpus.total is not None:
            out.add("minidock_host_cpus_capacity", labels, h.cpus.total)
        if h.memory.total is not None:
            out.add("minidock_host_memory_capacity_bytes", labels, h.memory.total)
        if h.last_seen is not None:
            out.add("minidock_host_last_seen_timestamp_seconds", labels, h.last_seen)
    for c in doc.certificates:
        if c.not_after:
            out.add("minidock_certificate_expiry_timestamp_seconds", (cluster, c.name), c.not_after)


class _Snapshot:
    """A prometheus_client collector that yields the families it was made with."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def metrics_text(reading: FleetReading) -> bytes:
    """The reading in Prometheus' text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(metric_families(reading)))
    return generate_latest(registry)


def write_textfile(path: Path, text: bytes) -> None:
    """Write `text` to `path` atomically (a temporary file beside it, then a rename), as
    node_exporter's textfile collector wants: it never reads half a file. Mode 0644."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
