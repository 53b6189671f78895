"""What `minidock status` reports, as typed records. Pure.

`StatusDocument` is the stable `status --json` contract (docs/cli.md, and the JSON Schema
shipped as `minidock/schemas/status.schema.json`): services, tasks and hosts, from the
controller state, a fresh observation and the plan a pass would make. `to_json()` gives
the document; fields marked `omit` in `_converter` are for people (the table), not JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Literal, cast

import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from minidock.core import ControllerState, HostPhase, Plan, RolloutPhase, ServiceState
from minidock.core.autoscale import target
from minidock.core.failover import recovery_points
from minidock.core.jobs import failing_jobs
from minidock.core.routes import RouteEntry, RouteTable
from minidock.core.saving import backup_key, verify_key
from minidock.core.schedule import JOB_KIND, Times
from minidock.core.supervise import ready
from minidock.core.tls import TlsState, renews_at
from minidock.model import (
    Container,
    ContainerState,
    DesiredState,
    Engine,
    Health,
    Host,
    Inventory,
    Observed,
    ProxyObservation,
)
from minidock.schedules import backup_times, job_times
from minidock.spec.certs import certificate_info

__all__ = [
    "AutoscaleSummary",
    "BackupSlotSummary",
    "BackupSummary",
    "CanarySummary",
    "CpuUsage",
    "FailedSlot",
    "HostSummary",
    "JobRunSummary",
    "JobSummary",
    "MemoryUsage",
    "PendingSlot",
    "ProxySummary",
    "RolloutSummary",
    "RouteSummary",
    "ServiceSummary",
    "ServingSummary",
    "StatusDocument",
    "TaskSummary",
    "VerifiedSummary",
    "proxy_summaries",
    "status_document",
    "status_schema",
    "summarize",
]

ServiceWord = Literal[
    "stopped",
    "failed",
    "paused",
    "rolling_back",
    "updating",
    "canary",
    "converged",
    "degraded",
    "starting",
]


@dataclass(frozen=True)
class CanarySummary:
    """A canary under way (docs/rollouts.md#canary)."""

    tasks: int
    wanted: int
    weight: int
    promote: str
    promoted: bool

    def line(self) -> str:
        """`canary 1/1, 20% of requests, promote manual`."""
        share = f"{self.weight}% of requests" if self.weight else "round-robin share"
        how = "promoted" if self.promoted else f"promote {self.promote}"
        return f"canary {self.tasks}/{self.wanted}, {share}, {how}"


@dataclass(frozen=True)
class RolloutSummary:
    """A service's rolling update: `active` (updating or rolling back) is not in the JSON."""

    status: RolloutPhase
    done: int
    total: int
    failures: int
    reason: str
    active: bool
    canary: CanarySummary | None = None


@dataclass(frozen=True)
class FailedSlot:
    slot: int
    last_exit: str


@dataclass(frozen=True)
class PendingSlot:
    slot: int
    reason: str


@dataclass(frozen=True)
class JobRunSummary:
    """One finished run of a scheduled job (`exit_code` None: it never started)."""

    run: str
    due: float
    started: float
    finished: float
    duration: float
    exit_code: int | None
    tail: str


HookWord = Literal["to run", "running", "succeeded", "failed"]


@dataclass(frozen=True)
class HookSummary:
    """A service's before_update hook as far as its latest generation went: `generation`
    0 and `state` "to run" until a pass decides it (docs/jobs.md#hooks)."""

    generation: int
    run: str
    state: HookWord
    host: str
    started: float | None
    finished: float | None
    exit_code: int | None
    why: str  # a failure's line, with the end of its output (masked)


@dataclass(frozen=True)
class JobSummary:
    """A scheduled job: its schedule, its next time (None until a pass arms it), its runs
    going now, the last finished ones (newest last) and whether the latest failed."""

    schedule: str
    timezone: str
    concurrency: str
    next: float | None
    running: int
    skipped: int
    failing: bool
    last: JobRunSummary | None
    runs: tuple[JobRunSummary, ...]


@dataclass(frozen=True)
class VerifiedSummary:
    """A slot's latest restore drill: the snapshot it restored, when, and its outcome."""

    snapshot: str
    at: float
    ok: bool
    line: str


@dataclass(frozen=True)
class BackupSlotSummary:
    """One slot's backups: the one under way (`phase`, "" if none, its status line), the
    last that ended (when, its snapshots by volume, why it failed) and the last drill."""

    slot: int
    phase: str
    line: str
    last: float | None
    snapshots: dict[str, str]
    failed: str
    verified: VerifiedSummary | None


@dataclass(frozen=True)
class BackupSummary:
    """A backed-up service's schedules and their next times (None: none, or not armed yet)
    and each slot's backups (docs/backups.md)."""

    schedule: str | None
    next: float | None
    verify_schedule: str | None
    next_verify: float | None
    slots: tuple[BackupSlotSummary, ...]

    def lines(self, service: str) -> list[str]:
        """The service's lines in `status`: each slot's backup under way, last backup (its
        snapshots, or why it failed) and last restore drill, and the next scheduled times."""

        def at(t: float) -> str:
            return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

        lines = []
        for slot in self.slots:
            subject = f"{service}.{slot.slot}"
            if slot.line:
                lines.append(f"{subject}: {slot.line}")
            if slot.last is not None and slot.failed:
                lines.append(f"{subject}: last backup {at(slot.last)} FAILED: {slot.failed}")
            elif slot.last is not None:
                ids = ", ".join(f"{v} {i[:8]}" for v, i in sorted(slot.snapshots.items()))
                lines.append(f"{subject}: last backup {at(slot.last)} ({ids})")
            v = slot.verified
            if v is not None:
                what = f"snapshot {v.snapshot[:8]}" if v.snapshot else "drill"
                said = "verified" if v.ok else "FAILED its verify"
                tail = f": {v.line}" if v.line else ""
                lines.append(f"{subject}: {what} {said} {at(v.at)}{tail}")
        if self.next is not None:
            lines.append(f"{service}: next backup {at(self.next)}")
        if self.next_verify is not None:
            lines.append(f"{service}: next restore drill {at(self.next_verify)}")
        return lines


ServingWord = Literal["serving", "maintenance", "paused"]


@dataclass(frozen=True)
class ServingSummary:
    """How a routed service's routes answer (docs/ingress.md#maintenance-and-pause): to its
    tasks, with the maintenance page of `message`, or holding each request up to
    `timeout` seconds; `since` when the operator set it (None: never)."""

    mode: ServingWord
    message: str
    timeout: float
    since: float | None


@dataclass(frozen=True)
class AutoscaleSummary:
    """An autoscaled service's policy and its count's latest decision (docs/autoscale.md):
    its bounds, its target in words, the readings it was decided from (`rate`: requests a
    second over its routes, `p95`: seconds; None: no data) and why the count is what it
    is ("" before a pass decided), since when (`changed`, None: not yet)."""

    min: int
    max: int
    target: str
    rate: float | None
    p95: float | None
    reason: str
    changed: float | None
    decision: str  # the reason in one word (core.autoscale.DECISIONS; "" before a pass)

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ": no decision yet"
        return f"autoscaled {self.min}..{self.max}, target {self.target}{why}"


@dataclass(frozen=True)
class RecoverySummary:
    """A pinned slot's recovery point for one named volume (core/failover.py)."""

    slot: int
    volume: str
    snapshot: str  # "": none known
    taken: float | None  # when its copy began (epoch seconds)
    kept_on: str  # a host a failover left the slot's old volume on ("": none)


@dataclass(frozen=True)
class ServiceSummary:
    name: str
    desired: DesiredState
    replicas: int
    running: int
    healthy: int
    state: ServiceWord
    completed: int
    image: str
    generation: int
    rollout: RolloutSummary
    failed: tuple[FailedSlot, ...]
    pending: tuple[PendingSlot, ...]
    last_failure: str
    job: JobSummary | None = None  # a scheduled job's runs (docs/jobs.md)
    hook: HookSummary | None = None  # its before_update hook (docs/jobs.md#hooks)
    serving: ServingSummary | None = None  # its routes' mode (None: it has no route)
    backups: BackupSummary | None = None  # its backups (None: it has no backup policy)
    recovery: tuple[RecoverySummary, ...] = ()  # a pinned service's, per slot and volume
    autoscale: AutoscaleSummary | None = None  # its policy and decision (None: it has none)


@dataclass(frozen=True)
class TaskSummary:
    id: str
    name: str
    service: str
    slot: int
    host: str
    image: str
    state: ContainerState
    health: Health
    exit_code: int | None
    generation: int | None
    traffic: TrafficWord


TrafficWord = Literal["routed", "draining", "none"]


@dataclass(frozen=True)
class RouteSummary:
    """One ingress route and the tasks that take its traffic (docs/ingress.md)."""

    service: str
    host: str  # the request Host it takes ("" for any)
    path: str
    port: int
    tasks: tuple[str, ...]  # ids of the observed tasks that take its traffic
    upstreams: tuple[str, ...]  # theirs in order, then those kept for silent hosts
    mode: ServingWord = "serving"  # its service's: to the tasks, maintenance, or paused


@dataclass(frozen=True)
class ProxySummary:
    """One ingress host's proxy: `loaded` (the routes a pass would load), `stale` (another
    config), `stopped`, `missing` or `unreachable`."""

    host: str
    state: Literal["loaded", "stale", "stopped", "missing", "unreachable"]
    digest: str
    error: str


@dataclass(frozen=True)
class CertificateSummary:
    """One TLS host name's certificate: brought as `files` or from `acme`; its names,
    issuer and end (0 and "" while none is issued), when a pass renews it, and the last
    failed order's reason and the time of the next try (ACME only)."""

    name: str
    source: Literal["files", "acme"]
    names: tuple[str, ...]
    issuer: str
    not_after: float
    renews_at: float
    error: str
    failures: int
    next_try: float


@dataclass(frozen=True)
class CpuUsage:
    """The cpus reserved by a host's live tasks, of its capacity (None: unlimited)."""

    used: float
    total: float | None


@dataclass(frozen=True)
class MemoryUsage:
    """The bytes reserved by a host's live tasks, of its capacity (None: unlimited)."""

    used: int
    total: int | None


@dataclass(frozen=True)
class HostSummary:
    name: str
    address: str
    state: HostPhase
    drained: bool
    last_seen: float | None
    error: str | None
    tasks: int
    cpus: CpuUsage
    memory: MemoryUsage
    overcommitted: bool  # its tasks reserve more than its declared cpus or memory
    slow: bool = False  # its docker answered slowly, or not in time while its sshd did
    answer_seconds: float | None = None  # how long this status's probe took to answer
    engine: Engine | None = None  # its engine and version, as this probe read them
    refused: bool = False  # its engine answered and is one MiniDock does not drive (`error`)
    controller: str = ""  # the watch whose owner key holds it (etcd, docs/scale.md), or ""


@dataclass(frozen=True)
class StatusDocument:
    cluster: str
    generation: int
    converged: bool
    guard: str  # the mass-loss guard's line while it holds, else ""
    rebuilt: str  # set when the state was rebuilt from running tasks (what it cannot know)
    waiting: tuple[str, ...]
    services: tuple[ServiceSummary, ...]
    tasks: tuple[TaskSummary, ...]
    hosts: tuple[HostSummary, ...]
    routes: tuple[RouteSummary, ...]
    proxies: tuple[ProxySummary, ...]
    certificates: tuple[CertificateSummary, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `status --json` document (dicts, lists and scalars)."""
        doc: dict[str, Any] = _converter.unstructure(self)
        return doc


_converter = cattrs.Converter()
_converter.register_unstructure_hook(
    RolloutSummary,
    make_dict_unstructure_fn(RolloutSummary, _converter, active=override(omit=True)),
)


def status_schema() -> dict[str, Any]:
    """The JSON Schema of `StatusDocument.to_json()`, shipped in the package."""
    text = (resources.files("minidock") / "schemas" / "status.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def service_state(ss: ServiceState, running: int, healthy: int, failed: int) -> ServiceWord:
    """One word for a service: stopped, failed, paused, updating, rolling_back, converged,
    degraded (fewer healthy tasks than replicas) or starting."""
    if ss.spec.desired == "stopped":
        return "stopped"
    if failed or (ss.spec.schedule is not None and ss.job.failing):
        return "failed"
    r = ss.rollout
    if r.paused or r.active:
        return cast(ServiceWord, r.phase.value)
    wanted = ss.wanted()
    if healthy >= wanted and running == wanted:
        return "converged"
    return "degraded" if healthy < running or running < wanted else "starting"


def _canary(ss: ServiceState) -> CanarySummary | None:
    r, policy = ss.rollout, ss.spec.update
    if not r.in_canary:
        return None
    wanted = min(policy.canary, ss.wanted())
    return CanarySummary(len(r.canary), wanted, policy.canary_weight, policy.promote, r.promoted)


def generation_of(ss: ServiceState, spec_hash: str) -> int | None:
    if ss.spec.spec_hash() == spec_hash:
        return ss.generation
    if ss.previous is not None and ss.previous.spec_hash() == spec_hash:
        return ss.previous_generation
    return None


def _service(
    name: str, ss: ServiceState, mine: list[Container], plan: Plan, observed: Observed
) -> ServiceSummary:
    tasks = [c for c in mine if c.service == name and c.live]
    failed = tuple(
        FailedSlot(n, s.half_written or s.last_exit)  # a restore's why outlives any exit
        for n, s in sorted(ss.slots.items())
        if s.failed and n in ss.slot_numbers()
    )
    done = {n for n, s in ss.slots.items() if s.complete}  # exited, not to restart
    running = len({c.slot for c in tasks if c.state == "running"} - done)
    healthy = len({c.slot for c in tasks if ready(c)} - done)
    r = ss.rollout
    last_failure = r.reason or next(
        (s.last_exit for _, s in sorted(ss.slots.items(), reverse=True) if s.last_exit), ""
    )
    return ServiceSummary(
        name=name,
        desired=ss.spec.desired,
        replicas=ss.wanted(),
        running=running,
        healthy=healthy,
        state=service_state(ss, running + len(done), healthy + len(done), len(failed)),
        completed=len(done),
        image=ss.spec.image,
        generation=ss.generation,
        rollout=RolloutSummary(
            r.phase, len(r.done), r.total, r.failures, r.reason, r.active, _canary(ss)
        ),
        failed=failed,
        pending=tuple(PendingSlot(p.slot, p.reason) for p in plan.pending if p.service == name),
        last_failure=last_failure,
        job=_job(ss, observed),
        hook=_hook(ss),
        serving=_serving(ss),
        backups=_backups(ss),
        recovery=_recovery(ss),
        autoscale=_autoscale(ss),
    )


def _autoscale(ss: ServiceState) -> AutoscaleSummary | None:
    policy, scaling = ss.spec.autoscale, ss.scaling
    if policy is None:
        return None
    changed = scaling.changed if scaling.count is not None else None
    return AutoscaleSummary(
        policy.min,
        policy.max,
        target(policy),
        scaling.rate,
        scaling.p95,
        scaling.reason,
        changed,
        scaling.kind,
    )


def _backups(ss: ServiceState) -> BackupSummary | None:
    """A backed-up service's schedules and slots (None: no `backup` of its own)."""
    policy, book = ss.spec.backup, ss.backups
    if policy is None:
        return None
    upcoming = backup_times([ss.spec], book.due).get(backup_key(ss.spec.name)) if book.due else None
    drill = (
        backup_times([ss.spec], book.verify_due).get(verify_key(ss.spec.name))
        if book.verify_due
        else None
    )
    numbers = sorted({*ss.slot_numbers(), *book.slots, *book.last, *book.verified})
    slots = []
    for n in numbers:
        under_way, last, v = book.slots.get(n), book.last.get(n), book.verified.get(n)
        slots.append(
            BackupSlotSummary(
                n,
                under_way.phase.value if under_way else "",
                under_way.line() if under_way else "",
                last.at if last else None,
                dict(last.snapshots) if last else {},
                last.failed if last else "",
                VerifiedSummary(v.snapshot, v.at, v.ok, v.line) if v else None,
            )
        )
    return BackupSummary(
        policy.schedule,
        upcoming.next if isinstance(upcoming, Times) else None,
        policy.verify_schedule,
        drill.next if isinstance(drill, Times) else None,
        tuple(slots),
    )


def _recovery(ss: ServiceState) -> tuple[RecoverySummary, ...]:
    """Every slot's recovery point per named volume of a pinned service (none else)."""
    return tuple(
        RecoverySummary(p.slot, p.volume, p.snapshot, p.taken, p.kept_on)
        for p in recovery_points(ss)
    )


def _serving(ss: ServiceState) -> ServingSummary | None:
    """A routed service's routes' mode (None: it has no route)."""
    if not ss.spec.ingress:
        return None
    m = ss.serving
    word: ServingWord = m.serving.value
    return ServingSummary(word, m.message, m.timeout, m.since or None)


def _hook(ss: ServiceState) -> HookSummary | None:
    """The before_update hook's summary (None: the service has none)."""
    if ss.spec.before_update is None:
        return None
    h = ss.hook
    word: HookWord = "to run"
    if h.done:
        word = "succeeded" if h.succeeded else "failed"
    elif h.started:
        word = "running"
    return HookSummary(
        h.generation, h.run, word, h.host, h.started or None, h.finished or None,
        h.exit_code, h.why,
    )  # fmt: skip


def _job(ss: ServiceState, observed: Observed) -> JobSummary | None:
    schedule, record = ss.spec.schedule, ss.job
    if schedule is None:
        return None
    runs = tuple(
        JobRunSummary(r.run, r.due, r.started, r.finished, r.duration, r.exit_code, r.tail)
        for r in record.runs
    )
    going = [
        o
        for seen in observed.hosts.values()
        for o in seen.oneoffs
        if o.service == ss.spec.name and o.kind == JOB_KIND and not o.finished
    ]
    after = max(record.due, record.runs[-1].due if record.runs else 0.0)
    computed = job_times([ss.spec], after).get(ss.spec.name) if record.due else None
    upcoming = computed.next if isinstance(computed, Times) else None  # a str: none computed
    return JobSummary(
        schedule.cron, schedule.timezone, schedule.concurrency, upcoming, len(going),
        record.skipped, record.failing, runs[-1] if runs else None, runs,
    )  # fmt: skip


def _task(
    c: Container, state: ControllerState, routed: set[str], draining: Mapping[str, float]
) -> TaskSummary:
    ss = state.services.get(c.service)
    traffic: TrafficWord = "draining" if c.task in draining else "none"
    return TaskSummary(
        id=c.task,
        name=c.name,
        service=c.service,
        slot=c.slot,
        host=c.host,
        image=c.image,
        state=c.state,
        health=c.health,
        exit_code=c.exit_code,
        generation=generation_of(ss, c.spec) if ss else None,
        traffic="routed" if c.task in routed else traffic,
    )


def proxy_summaries(
    proxies: Mapping[str, ProxyObservation], digest: str
) -> tuple[ProxySummary, ...]:
    """Each observed ingress proxy, by host, against the config of `digest` that the pass
    rendered (`minidock.commands.proxies`): `loaded` when it holds that config."""
    return tuple(_proxy(p, digest) for _, p in sorted(proxies.items()))


def _proxy(seen: ProxyObservation, digest: str) -> ProxySummary:
    if not seen.ok:
        return ProxySummary(seen.host, "unreachable", "", seen.error)
    if not seen.running:
        return ProxySummary(seen.host, "stopped" if seen.spec else "missing", "", "")
    state: Literal["loaded", "stale"] = "loaded" if seen.digest == digest else "stale"
    return ProxySummary(seen.host, state, seen.digest, "")


def _host(h: Host, mine: list[Container], observed: Observed, plan: Plan) -> HostSummary:
    hs = plan.state.host(h.name)
    obs = observed.hosts.get(h.name)
    live = [c for c in mine if c.host == h.name and c.live]
    cpus, memory = sum((c.cpus for c in live), 0.0), sum(c.memory for c in live)
    over = (h.cpus is not None and cpus > h.cpus + 1e-9) or (
        h.memory is not None and memory > h.memory
    )
    return HostSummary(
        name=h.name,
        address=h.address,
        state=hs.phase,
        drained=hs.drained,
        last_seen=hs.last_seen,
        error=None if obs is None or obs.ok else obs.error,
        tasks=len(live),
        cpus=CpuUsage(cpus, h.cpus),
        memory=MemoryUsage(memory, h.memory),
        overcommitted=over,
        slow=obs is not None and obs.slow,
        answer_seconds=None if obs is None else obs.seconds,
        engine=None if obs is None else obs.engine,
        refused=obs is not None and obs.refused,
    )


def status_document(
    state: ControllerState,
    inventory: Inventory,
    observed: Observed,
    plan: Plan,
    routes: RouteTable = (),
    digest: str = "",
    renew_before: float | None = None,
) -> StatusDocument:
    """The status document. `plan` is the dry-run decision for this observation (pending
    reasons and what the next pass would wait for); `routes` the route table a pass would
    load into the ingress proxies, whose config (as the pass rendered it) has `digest`; its
    TLS names' certificates
    renew `renew_before` their end."""
    mine = [c for c in observed.containers() if c.cluster == state.cluster]
    routed = {t for entry in routes for t in entry.tasks}
    services = []
    for name in state.order:
        ss = plan.state.services.get(name) or state.services.get(name)
        if ss is not None:
            services.append(_service(name, ss, mine, plan, observed))
    return StatusDocument(
        cluster=state.cluster,
        generation=state.generation,
        # converged only when nothing is to do, waited for, paused, Failed, pending or down
        converged=plan.converged
        and not (
            plan.paused() or plan.failed_slots() or plan.degraded() or failing_jobs(plan.state)
        ),
        guard=plan.guard,
        rebuilt=plan.state.rebuilt or state.rebuilt,
        waiting=tuple(plan.waiting),
        services=tuple(services),
        tasks=tuple(
            _task(c, state, routed, plan.state.draining)
            for c in sorted(mine, key=lambda c: (c.service, c.slot, c.host))
        ),
        hosts=tuple(_host(h, mine, observed, plan) for h in inventory.hosts),
        routes=tuple(_route(e) for e in routes),
        proxies=proxy_summaries(observed.proxies, digest),
        certificates=certificates(routes, state.tls, renew_before),
    )


def _route(e: RouteEntry) -> RouteSummary:
    mode: ServingWord = e.mode.serving.value
    r = e.route
    return RouteSummary(e.service, r.domain, r.path, r.port, e.tasks, e.upstreams, mode)


def certificates(
    routes: RouteTable, tls: TlsState, renew_before: float | None = None
) -> tuple[CertificateSummary, ...]:
    """Each TLS host name of the route table and its certificate, by name."""
    found: dict[str, CertificateSummary] = {}
    for entry in routes:
        route = entry.route
        if route.tls.mode == "files" and route.domain not in found:
            info = certificate_info(route.tls.cert)
            found[route.domain] = CertificateSummary(
                route.domain, "files", info.names, info.issuer, info.not_after, 0.0, "", 0, 0.0
            )
        elif route.tls.mode == "acme" and route.domain not in found:
            r = tls.record(route.domain)
            names = certificate_info(r.chain).names if r.has_certificate else ()
            found[route.domain] = CertificateSummary(
                route.domain, "acme", names, r.issuer, r.not_after,
                renews_at(r, renew_before), r.error, r.failures, r.next_try,
            )  # fmt: skip
    return tuple(found[name] for name in sorted(found))


def summarize(
    state: ControllerState, inventory: Inventory, observed: Observed, plan: Plan
) -> dict[str, Any]:
    """The status document as JSON-ready dicts (`status_document(...).to_json()`)."""
    return status_document(state, inventory, observed, plan).to_json()
