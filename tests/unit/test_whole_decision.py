"""The whole decision, as properties (hypothesis, stateful, on the simulator).

A `Fleet` (tests.sim.World on 3 hosts, all up) whose every pass is the runner's decision
(`minidock.runner.decision`: the schedules' times, then `minidock.core.decide`), carried
out as the act path would (minidock.act.carry): the ingress proxy on host1 loads `plan.routes`
and each host's name proxies `plan.endpoints` before any stop; then the stops, the runs,
the hooks', the jobs' and the removals' acts; the outcomes folded (`fold_outcomes`) and
committed. `WholeDecision` draws applies of the cluster file through the real loader
(`minidock.spec.cluster.load` on a cluster.toml and inventory.toml: what it refuses is a
refused apply, skipped), changing any of: image, replicas (0 too), mode, constraints (moves),
health check on/off, host ports, the route and its container port, expose, a config, a
before_update hook and how many passes it runs, update order, parallelism and monitor, a
bind mount, a scheduled job, and `[ingress] request_metrics` and `http2` (the proxy's loaded routes
are read back from the real config, a server per route or not, as a probe reads them);
passes run between applies, some cut by a controller kill (after the commit: before any
act; after the proxy loads and stops; after every act, the outcomes lost). Every spec drawn
is loaded, so the loader's own refusals shape the draws (a route needs its port named by a
health check or `ports`); ~15 ms a load, cached.

Properties (docs/testing.md#the-whole-decision states them and the bound):
(a) every apply converges within `bound(...)` passes of it: every live task of the current
    spec, one per wanted slot (per eligible host, global), each where its constraints
    allow; the plan converged, no hook act; the loaded routes and names those of the tasks;
(b) after each pass's acts, a route of the effective spec whose tasks the pass saw has an
    upstream whenever one of them (of any generation, judged by the spec it runs) takes
    traffic and is not draining; from each host with a task, a name answers whenever a
    task it reaches takes traffic and is not draining, and no running name proxy is empty
    then (an empty one takes a share of the lookups);
(c) no task is stopped while a loaded ingress route or name proxy still sends to it;
(d) a hook one-off runs at most once per generation, never two of one service at once,
    and no task of a spec with a hook starts before a hook of that spec exited 0; once
    converged the current spec's hook has run;
(e) no pass raises on a spec that loads;
(f) while a canary runs with `canary_weight`, each route's weights give the new spec's
    tasks that percent (within canary.SHARE_TOLERANCE), and only then;
(p) a pass that starts a task taking a host port reads the port tables before its one
    decision (`core.watching.port_tables_wanted`: conservative, before deciding);
(r) each pass's proxy configs are rendered once from its plan (`commands.proxies.render`,
    as the runner does) and loaded as that render says; `plan` (`route_loads`) and
    `status` (`proxy_summaries`) agree on every ingress proxy, both reading it.

Each break, reintroduced by a minimal mutation of today's core, fails (shrunk examples in
the commit messages; Knobs left at their defaults unless named):
- break 1, drain-before-stop dropped for stop-first replacements (rollout._stop_first no
  longer asks Traffic.holds): (c) "web.1 stopped 0s after it left", a health check added to
  a 1-replica routed service;
- break 2, old tasks judged by the new spec (TaskSpecs.of gives the effective spec): (b)
  "route app.test/ -> :9090 empty while web.1 serves", a route's port 8080 -> 9090 while
  the hook holds the new spec and the previous one fills the slots;
- break 3, a name proxy run wherever the service is exposed, empty or not (name_steps):
  (b) "an empty name proxy on host1 while web.1 serves", expose turned off with a hook;
- break 4, the previous generation fills slots though its own hook never succeeded
  (slot_target): (d) "a task of e9944c6979ef before its hook succeeded", two applies of a
  hooked spec before a pass;
- break 5, a never-firing schedule loads and its times raise (cron_problem's firing check
  and job_times' catch removed): (e) CroniterBadDateError from the pass, job "0 0 31 2 *".
Found while the canary was built, and fixed: a slot refilled during a canary with a
previous spec whose hook never ran (d), "a task of 9cc6a3d86a58 before its hook
succeeded"; and with the previous spec of a service that had no task (a), "not converged
in 20", replicas 0 -> 3 with canary = 1 and a host port on all 3 hosts.
Found on main and fixed: a global service moved by its constraints never converged (a),
and tasks two applies behind were judged by the effective spec (b), (c), (a).

Left out: named volumes (a misplaced pinned task waits for an operator by design), host
loss (test_properties.py draws it), registry and build keys. test_operator_decision.py
draws the operator's commands, named volumes and host loss on this Fleet, which carries
the plan's volume moves (`move_act`) and judges each pinned start (`starting_pinned`).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from minidock.commands.caddy import parse_proxy_probe
from minidock.commands.proxies import Rendered, render
from minidock.core import ActOutcome, Plan, Run, Stop, admit, canary, fold_outcomes, promote
from minidock.core.autoscaling import labels
from minidock.core.backing import BackupAct, BackupStep, VerifyAct
from minidock.core.borrowing import (
    Handed,
    RoundSeen,
    ShardTable,
    Trust,
    Written,
    advancing,
    borrowable,
)
from minidock.core.endpoints import names_in_use
from minidock.core.handover import OwnerKey
from minidock.core.hooks import HOOK_KIND, HookAct, HookStep
from minidock.core.jobs import JobCollect, JobStart
from minidock.core.moving import MoveFailed, SourceCleaned, VolumesCopied
from minidock.core.outcomes import HookEnded, HookStarted, JobEnded, JobStarted, StartFailed
from minidock.core.plan import WaitKind
from minidock.core.routes import ingress_hosts, takes_traffic
from minidock.core.saving import BackupEnded, BackupKept, Copied, Hooked, VerifyEnded
from minidock.core.schedule import JOB_KIND, JobRun
from minidock.core.scheduler import service_ports
from minidock.core.serving import Serving
from minidock.core.volumes import MoveAct
from minidock.core.watching import port_tables_needed, port_tables_wanted
from minidock.documents.plan import route_loads
from minidock.documents.status import proxy_summaries
from minidock.model import (
    Cluster,
    Container,
    Event,
    HostObservation,
    Inventory,
    NameProxy,
    Observed,
    OneOff,
    ProxyObservation,
    RouteCounts,
    Service,
)
from minidock.runner import PassResult, decision
from minidock.spec.cluster import load
from minidock.spec.errors import SpecError
from minidock.usecases.passes import acted, acted_on
from tests.etcd_model import EtcdModel
from tests.sim import Snapshot, World

DT = 10.0  # seconds between passes: more than drain_timeout and a health check's settling
HOSTS = ("host1", "host2", "host3")
EXPOSED = 7070
_oneoff_ids = itertools.count(1)


# -- the cluster file drawn -------------------------------------------------------------------
@dataclass(frozen=True)
class Knobs:
    """What a user changes in the cluster file, one value per key."""

    image: str = "web:1"
    replicas: int = 2
    mode: str = "replicated"
    place: str = ""  # a constraint on the host ("" none)
    health: bool = True
    route: int | None = 8080  # the routed container port (None: no ingress route)
    host_port: bool = False  # ports = ["8081:PORT"] (a host port: one task per host)
    expose: bool = False
    config: str = ""  # a config file's content ("" none)
    hook: int = 0  # passes the before_update hook runs (0: no hook)
    order: str = "stop-first"
    parallelism: int = 1
    monitor: str = "0s"
    volume: bool = False  # a bind mount
    job: str = ""  # the scheduled job's cron expression ("": no job)
    canary: int = 0  # update.canary (0: none)
    canary_weight: int = 0  # its percent of the route's requests (0: its round-robin share)
    promote: str = "auto"  # "manual": the operator promotes (at once, or drawn earlier)
    canary_monitor: str = "0s"
    request_metrics: bool = True  # [ingress]: a server per route behind the front, or not
    http2: bool = False  # [ingress]: the HTTPS server's protocols (the loaded config's)
    autoscale: str = ""  # web's autoscale policy, an inline table ("": none)

    def render(self) -> str:
        port = self.route or 8080
        web = [f'image = "{self.image}"', 'drain_timeout = "1s"']
        if self.mode == "global":
            web.append('mode = "global"')
        else:
            web.append(f"replicas = {self.replicas}")
        if self.place:
            web.append(f'constraints = ["{self.place}"]')
        if self.health:
            cmd = f'["wget", "-qO-", "http://127.0.0.1:{port}/"]'
            web.append(f'health = {{ cmd = {cmd}, interval = "1s", timeout = "1s" }}')
        if self.route is not None:
            web.append(f'ingress = {{ host = "app.test", path = "/", port = {self.route} }}')
        if self.host_port:
            web.append(f'ports = ["8081:{port}"]')
        if self.expose:
            web.append(f"expose = [{EXPOSED}]")
        if self.config:
            web.append(f'configs = {{ "/etc/app.conf" = {{ content = "{self.config}" }} }}')
        if self.hook:
            web.append(f'hooks = {{ before_update = {{ command = ["migrate", "{self.hook}"] }} }}')
        policy = f'parallelism = {self.parallelism}, order = "{self.order}"'
        if self.canary:
            policy += f', canary = {self.canary}, promote = "{self.promote}"'
            policy += f', canary_monitor = "{self.canary_monitor}"'
            policy += f", canary_weight = {self.canary_weight}" if self.canary_weight else ""
        web.append(f'update = {{ {policy}, monitor = "{self.monitor}" }}')
        if self.volume:
            web.append('volumes = ["/srv/web:/data"]')
        if self.autoscale:
            web.append(f"autoscale = {self.autoscale}")
        parts = [
            'cluster = "fleet"',
            'inventory = "inventory.toml"',
            '[ingress]\nhosts = ["host1"]'
            + ("" if self.request_metrics else _OFF)
            + ("\nhttp2 = true" if self.http2 else ""),
            "[services.web]\n" + "\n".join(web),
        ]
        if self.job:
            parts.append(f'[services.job]\nimage = "tools:1"\nschedule = "{self.job}"')
        return "\n".join(parts) + "\n"


_OFF = "\nrequest_metrics = false"
knobs = st.builds(
    Knobs,
    image=st.sampled_from(["web:1", "web:2", "web:3"]),
    replicas=st.integers(0, 3),
    mode=st.sampled_from(["replicated", "global"]),
    place=st.sampled_from(["", *(f"host {op} {h}" for op in ("==", "!=") for h in HOSTS)]),
    health=st.booleans(),
    route=st.sampled_from([8080, 9090, None]),
    host_port=st.booleans(),
    expose=st.booleans(),
    config=st.sampled_from(["", "a", "b"]),
    hook=st.sampled_from([0, 1, 3]),
    order=st.sampled_from(["stop-first", "start-first"]),
    parallelism=st.integers(1, 2),
    monitor=st.sampled_from(["0s", "10s"]),
    volume=st.booleans(),
    job=st.sampled_from(["", "* * * * *", "*/2 * * * *", "0 0 31 2 *"]),
    canary=st.sampled_from([0, 0, 1, 2]),
    canary_weight=st.sampled_from([0, 20, 50]),
    promote=st.sampled_from(["auto", "manual"]),
    canary_monitor=st.sampled_from(["0s", "20s"]),
    request_metrics=st.booleans(),
    http2=st.booleans(),
)

INVENTORY = "\n".join(
    f'[[hosts]]\nname = "{h}"\naddress = "10.0.0.{i}"\ncpus = 4\nmemory = "8GiB"\ndown_after = 2'
    for i, h in enumerate(HOSTS, 1)
)
_FILES = Path(tempfile.mkdtemp(prefix="whole-decision-"))
(_FILES / "inventory.toml").write_text(INVENTORY + "\n")
_loaded: dict[str, tuple[Cluster, Inventory] | SpecError] = {}


def loaded(k: Knobs) -> tuple[Cluster, Inventory] | SpecError:
    """The cluster file `k` renders, through the loader (cached by its text)."""
    text = k.render()
    if text not in _loaded:
        (_FILES / "cluster.toml").write_text(text)
        try:
            _loaded[text] = load(_FILES / "cluster.toml")
        except SpecError as exc:
            _loaded[text] = exc
    return _loaded[text]


def placeable(k: Knobs) -> bool:
    """Whether every wanted task fits: a host port serves one task per host (a canary's
    too, beside the old ones: one that fits nowhere waits, pending, docs/rollouts.md)."""
    if not k.host_port or k.mode == "global":
        return True
    hosts = 1 if "==" in k.place else 2 if "!=" in k.place else 3
    beside = min(k.canary, k.replicas)  # a canary runs beside the old tasks: a host each
    return k.replicas + beside <= hosts


# -- the simulated fleet ----------------------------------------------------------------------
@dataclass
class Fleet(World):
    """A World whose passes are the whole decision, carried out as the act path would, and
    which keeps the truth the properties judge by: the spec each task was started with."""

    started_with: dict[str, Service] = field(default_factory=dict)  # container id -> spec
    routes: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # loaded
    digest: str = ""  # of the ingress proxy's loaded config ("": none loaded yet)
    loads: int = 0  # configs the ingress proxy loaded (each names its route sockets anew)
    names: dict[str, dict[str, NameProxy]] = field(default_factory=dict)  # host -> proxies
    oneoffs: dict[str, list[OneOff]] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)  # one-off id -> when it exits 0
    hook_ok: set[str] = field(default_factory=set)  # spec hashes whose hook exited 0
    hooks_of: Counter[tuple[str, int]] = field(default_factory=Counter)  # (service, gen)
    hook_specs: dict[str, str] = field(default_factory=dict)  # hook one-off id -> spec hash
    violations: list[str] = field(default_factory=list)
    ephemeral: Counter[str] = field(default_factory=Counter)
    ever_loaded: set[str] = field(default_factory=set)  # tasks a loaded table sent to
    out_since: dict[str, float] = field(default_factory=dict)  # task -> out of every table
    answers_promote: bool = True  # the operator promotes a manual canary as soon as asked
    gone: set[str] = field(default_factory=set)  # hosts forgotten (their tasks do not count)
    kill: str = ""  # where this pass's controller dies (one_pass)
    # (h): slots a restore left half written (once their record said so), until a restore
    # of them completes or the operator forgives them (`reset`, `restore --empty`: then
    # `forgiven`, their next start exempt from (h) and (i), on what they hold)
    marked: set[tuple[str, int]] = field(default_factory=set)
    forgiven: set[tuple[str, int]] = field(default_factory=set)
    # (h): (host, volume) half written when `forget HOST` said the host and what it holds
    # are gone for good: the controller knows nothing of them if the host answers again
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    copy_kill: str = ""  # the `kill` of the next pass that copies (a volume or a backup)
    kept: set[tuple[str, str]] = field(default_factory=set)  # (host, volume) a failover left
    fenced: set[str] = field(default_factory=set)  # containers a failover left (never again)
    seen: Observed | None = None  # what the last plan was decided on
    # how long before the decision each host's answer was had (its `seen_at`): an exit is
    # counted then, so a lag past the restart delay (1 s) restarts it in the same pass, and
    # one within CARRIED_BACKOFF of it (0.7 s) restarts it there with its start held
    lag: float = 0.0
    # the edge proxy's request counter of each autoscaled route (requests since it
    # started, `rate` a second as time passes), read by a pass while a service has a
    # policy (the runner's observe_traffic); `unread`: its metrics do not answer (no data)
    counted: float = 0.0
    rate: float = 0.0
    unread: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for h in self.hosts:
            self.names.setdefault(h.name, {})
            self.oneoffs.setdefault(h.name, [])

    def take(self, cluster: Cluster) -> None:
        """`minidock apply` of a loaded cluster file."""
        self.generation += 1
        self.cluster = cluster
        self.state = admit(self.state, cluster, self.generation, prune=True)

    # -- observe and decide
    def observe(self) -> Observed:
        seen = super().observe()
        at = self.now - self.lag
        hosts = {
            name: replace(o, oneoffs=tuple(self.oneoffs[name]), seen_at=at)
            for name, o in seen.hosts.items()
        }
        assert self.cluster is not None
        assert self.cluster.ingress is not None
        spec = self.cluster.ingress.proxy_spec()
        upstreams = frozenset(u for us in self.routes.values() for u in us)
        loaded = tuple((d, p, us) for (d, p), us in sorted(self.routes.items()))
        proxies = {
            h: ProxyObservation(h, True, True, spec, self.digest, upstreams, routes=loaded)
            for h in ingress_hosts(self.cluster, self.inventory)
        }
        names: dict[str, dict[str, NameProxy] | None] = {}
        if names_in_use(self.cluster, self.state):
            names = {h: dict(ps) for h, ps in self.names.items()}
        return Observed(hosts, proxies, names, traffic=self.traffic())

    def traffic(self) -> dict[str, tuple[RouteCounts, ...] | None]:
        """What the edge's metrics say while a service autoscales (runner.observe): each
        autoscaled service's routes counted `counted` requests, or no answer."""
        assert self.cluster is not None
        scaled = [ss.spec for ss in self.state.services.values() if ss.spec.autoscale]
        if not scaled:
            return {}
        counts = tuple(RouteCounts(s.name, r, self.counted) for s in scaled for r in labels(s))
        edges = ingress_hosts(self.cluster, self.inventory)
        return dict.fromkeys(edges, None if self.unread else counts)

    def plan(self, state: object = None) -> Plan:
        assert self.cluster is not None
        self.seen = self.observe()
        return decision(self.cluster, self.inventory, self.seen, self.state, self.now)

    def check_port_tables(self, plan: Plan) -> None:
        """(p): a pass that starts a task taking a host port read the port tables before
        its one decision (`port_tables_wanted` on what it decided from)."""
        assert self.seen is not None
        started = [r for r in plan.run if port_tables_needed([r.service])]
        if started and not port_tables_wanted(self.inventory, self.state, self.seen):
            self.violations.append(f"(p) {started[0].name} started, no port tables read")

    def render(self, plan: Plan) -> Rendered:
        """Every proxy's config of the pass, rendered once from its plan (as the runner
        does), and (r): `plan` and `status` agree on each ingress proxy, reading it."""
        assert self.cluster is not None
        assert self.seen is not None
        rendered = render(plan, self.cluster.ingress, self.seen)
        said = {x.host: x.state for x in proxy_summaries(self.seen.proxies, rendered.digest)}
        agree = {"unchanged": "loaded", "load": "stale", "unreachable": "unreachable"}
        for x in route_loads(plan.routes, rendered, self.seen.proxies):
            if x.action in agree and said[x.host] != agree[x.action]:
                self.violations.append(
                    f"(r) plan says {x.action} on {x.host}, status {said[x.host]}"
                )
        return rendered

    # -- one pass, perhaps cut by a controller kill
    def one_pass(self, kill: str = "") -> Plan:
        """observe -> decide -> commit -> act -> fold -> commit; `kill`: where the
        controller dies after its commit ("before acts", "after stops", "before fold")."""
        plan = self.plan()
        assert self.seen is not None  # what it decided from: (b) judges the tasks it saw
        seen = {c.id for o in self.seen.hosts.values() for c in o.containers}
        self.check_port_tables(plan)
        rendered = self.render(plan)
        self.record(plan)  # committed before any act
        self.note_marks()
        for e in plan.events:  # (g): a failover keeps the slot's volume on its old host
            ss = self.state.services.get(e.service or "")
            if e.kind == "failover" and ss is not None and e.slot is not None:
                old = ss.slot(e.slot).kept_on
                names = self.named_volumes(ss.spec, e.slot)
                self.kept |= {(old, n) for n in names if n in self.volumes.get(old, {})}
                left = self.containers.get(old, [])
                self.fenced |= {c.id for c in left if (c.service, c.slot) == (e.service, e.slot)}
        self.note_undone(plan.events)  # committed with the plan, whatever the acts do
        if self.copy_kill and self.copies(plan):
            kill, self.copy_kill = kill or self.copy_kill, ""
            if "lost" in kill and self.down:  # one host lost at a time: the mass-loss
                kill = "mid copy"  # guard holds no pass (drawn before a host was lost)
        self.kill = kill
        if kill == "mid stop":  # `docker stop` done (exit 0), not removed: the controller dies
            self.load_proxies(plan, rendered)
            for s in plan.stop:
                self.stopping(s.container)
                self.exited(s.container)
        elif kill != "before acts":
            self.load_proxies(plan, rendered)
            self.carry_stops(plan.stop)
            if kill != "after stops":
                outcomes = self.carry_rest(plan)
                if kill not in ("before fold", "mid copy"):
                    self.state, folded = fold_outcomes(plan.state, outcomes, self.now)
                    self.note_marks()
                    self.note_undone(folded)
            self.check_traffic(seen)  # what this pass loaded, against what it saw
            self.check_share(plan)
            self.check_pinned()
        waits = any(w.kind is WaitKind.PROMOTE for w in plan.waiting)
        if waits and self.answers_promote:
            self.state = promote(self.state, "web")  # the operator answers at once
        self.tick(DT)
        return plan

    def exited(self, c: Container) -> None:
        """`docker stop` of `c`: exited 0, still there."""
        if c.host not in self.down:
            self.containers[c.host] = [
                replace(x, state="exited", exit_code=0, finished_at=self.now) if x.id == c.id else x
                for x in self.containers[c.host]
            ]

    def copies(self, plan: Plan) -> bool:
        """Whether the pass streams a volume (a move's, a restore's or a backup's copy) or
        stops a task for its backup's copy."""
        held = {
            (name, n)
            for name, ss in plan.state.services.items()
            for n, b in ss.backups.slots.items()
            if b.holds
        }
        return (
            any(m.copy for m in plan.moves)
            or any(isinstance(b, BackupAct) and b.step is BackupStep.COPY for b in plan.backups)
            or any((s.container.service, s.container.slot) in held for s in plan.stop)
        )

    def note_undone(self, events: list[Event]) -> None:
        """(g): a failover whose restore failed is undone (core/moving.py): its old host's
        volume is the slot's data again, and its task there runs when it answers."""
        for e in events:
            ss = self.state.services.get(e.service or "")
            if e.kind != "restore-failed" or ss is None or e.slot is None:
                continue
            record = ss.slot(e.slot)
            if record.kept_on or not record.host:
                continue
            left = self.containers.get(record.host, [])
            self.fenced -= {c.id for c in left if (c.service, c.slot) == (e.service, e.slot)}
            self.kept -= {(record.host, n) for n in self.named_volumes(ss.spec, e.slot)}

    def note_marks(self) -> None:
        """(h): a slot whose record says a restore left it half written is marked, and
        stays so whatever later records say, until a restore of it completes or the
        operator forgives it."""
        for name, ss in self.state.services.items():
            for n, record in ss.slots.items():
                if record.half_written:
                    self.marked.add((name, n))
                    self.forgiven.discard((name, n))

    def check_share(self, plan: Plan) -> None:
        """(f): while a canary runs with `canary_weight`, each route sends its tasks that
        percent of the requests (within the weights' tolerance), and only then."""
        ss = self.state.services.get("web")
        running = canary.running_spec(ss)
        spec_of = {c.task: c.spec for c in self.live()}
        for e in plan.routes:
            if not e.canary:
                continue
            assert ss is not None
            if not running or e.canary != ss.spec.update.canary_weight:
                self.violations.append(f"(f) a canary share {e.canary}% outside a canary")
            weighed = dict(e.weighed())
            mine = sum(
                weighed[u]
                for u, t in zip(e.upstreams, e.tasks, strict=False)
                if spec_of.get(t) == running
            )
            got = 100 * mine / sum(weighed.values())
            if abs(got - e.canary) > canary.SHARE_TOLERANCE:
                self.violations.append(f"(f) the canary took {got:.1f}%, not {e.canary}%")

    def load_proxies(self, plan: Plan, rendered: Rendered) -> None:
        """The act path's loads: the ingress proxy's real config as the pass rendered it
        from `plan.routes` (`render`, route servers or not as `[ingress] request_metrics`
        says), loaded where its step says; what the proxy then has is what a probe reads
        back from that config (`parse_proxy_probe`); then each host's name proxies."""
        if plan.proxies:
            config = rendered.ingress
            assert config is not None
            if any(x.load for x in rendered.proxies):
                self.loads += 1
                text = config.loadable(f"load{self.loads}")
                seen = parse_proxy_probe("host1", "running spec\n" + text)
                self.routes = {(domain, path): ups for domain, path, ups in seen.routes}
                self.digest = seen.digest
        for step in plan.names:
            proxies = self.names[step.host]
            for service in step.remove:
                proxies.pop(service, None)
            for service in step.run:
                servers = tuple(
                    (e.port, task, address)
                    for e in plan.endpoints
                    if e.service == service
                    for address, task in zip(e.upstreams, e.tasks, strict=False)
                )
                proxies[service] = NameProxy(service, True, str(hash(servers)), servers)

        self.mark_loaded()

    def mark_loaded(self) -> None:
        """When each task left every loaded table (the first load without it), a task on a
        host that does not answer too: it leaves the tables then, and may stop once back."""
        loaded = self.sent_to()
        for c in (c for cs in self.containers.values() for c in cs if c.live):
            own = self.started_with[c.id]
            if {self.address(c, p) for p in (*own.routed_ports(), *own.expose)} & loaded:
                self.ever_loaded.add(c.id)
                self.out_since.pop(c.id, None)
            else:
                self.out_since.setdefault(c.id, self.now)

    def carry_stops(self, stops: Sequence[Stop]) -> None:
        """The pass's stops (act.carry.carry_tasks: every host's, before any start)."""
        for s in stops:
            self.stopping(s.container)
            self.remove(s.container)

    def carry_runs(self, runs: Sequence[Run]) -> None:
        """The pass's starts, each host's in plan order (a stop-first one's stop first)."""
        for r in runs:
            if r.host in self.down:
                continue
            if r.replaces is not None:
                self.stopping(r.replaces)
                self.remove(r.replaces)
            self.starting(r.service)
            self.launch(r.service, r.slot, r.host, r.task, r.ports.bound)

    def carry_rest(self, plan: Plan) -> list[ActOutcome]:
        self.carry_runs(plan.run)
        outcomes: list[ActOutcome] = []
        for move in plan.moves:
            outcomes += self.move_act(move)
            if self.kill == "mid copy" and move.copy:
                return outcomes  # the controller died half-way through the copy
        for backup in plan.backups:
            outcomes += self.backup_act(backup)
            if self.kill == "mid copy" and backup.step is BackupStep.COPY:
                return outcomes  # the controller died half-way through the backup's copy
        for hook in plan.hooks:
            outcomes += self.hook_act(hook)
        for job in plan.jobs:
            outcomes += self.job_act(job)
        for o in plan.removals:
            self.drop(o)
        return outcomes

    def launch(
        self, s: Service, slot: int, host: str, task: str, bound: tuple[tuple[str, int, int], ...]
    ) -> None:
        self.starting_pinned(s, slot, host)
        c = self.start(s, slot, host, task)
        published = [(cp, hp) for _, hp, cp in bound]
        for port in s.expose:  # docker picks the host port of an exposed one
            self.ephemeral[host] += 1
            published.append((port, 32767 + self.ephemeral[host]))
        held = (*service_ports(s), *(f"{hp}/tcp" for _, hp in published))
        c2 = replace(c, published=tuple(published), host_ports=held)
        self.containers[host] = [c2 if x.id == c.id else x for x in self.containers[host]]
        self.started_with[c.id] = s

    # -- a slot's named volumes: moved, restored, started on
    def move_act(self, act: MoveAct) -> list[ActOutcome]:
        """A move's act as minidock.act.relocate carries it: each named volume made afresh on
        the target from the source (a restore: from its snapshot), or the source's removed.
        A host that does not answer fails the act before any volume is touched. `kill`:
        "mid copy" cuts the stream half-way (the controller dies: no outcome); "target
        lost mid copy" and "source lost mid copy" lose that host half-way (MoveFailed; a
        move's target copy is then removed where the target still answers, as relocate's
        _discard does; a restore's removal of what it began fails on a lost target); "copy
        fails" breaks the stream half-way, both hosts answering (MoveFailed: a move's
        partial copy removed, a restore's volume left half written)."""
        move, subject = act.move, (act.service, act.slot)
        volumes = [v for v in act.spec.volumes if v.named]
        names = self.named_volumes(act.spec, act.slot)
        if not act.copy:  # the source's old volumes, or a failed copy's on the target
            if act.removes_on in self.down or act.removes_on not in self.volumes:
                return []  # act-failed: tried again by the next pass
            for name in names:
                self.remove_volume(act.removes_on, name)
            return [SourceCleaned(*subject)]
        source = "" if move.restore else move.source
        if move.target in self.down or source in self.down:
            discarded = not move.restore and move.target not in self.down
            return [MoveFailed(*subject, f"{move.target} does not answer", discarded)]
        lost = {"target lost mid copy": move.target, "source lost mid copy": source}
        cut = self.kill in ("mid copy", "copy fails") or bool(lost.get(self.kill))
        for v, name in zip(volumes, names, strict=True):
            if move.restore:
                self.restore_volume(move.target, name, move.snapshot_of(v.source), cut=cut)
            else:
                self.copy_volume(move.source, move.target, name, cut=cut)
            if cut:
                break
        gone = lost.get(self.kill)
        if gone:
            self.kill_host(gone)
            self.kill = ""  # one host lost a pass: the pass's other copies go on
            discarded = not move.restore and move.target not in self.down
            for name in names if discarded else ():
                self.remove_volume(move.target, name)
            return [MoveFailed(*subject, f"{gone} lost mid copy", discarded)]
        if self.kill == "copy fails":  # the stream broke, both hosts answering
            for name in names if not move.restore else ():
                self.remove_volume(move.target, name)
            return [MoveFailed(*subject, "restic dump: unexpected EOF", not move.restore)]
        if not cut and move.restore:  # whole again: what the operator restored
            self.marked.discard(subject)
            self.forgiven.discard(subject)
        return [] if cut else [VolumesCopied(*subject, 1, 1.0)]

    def backup_act(self, act: BackupAct | VerifyAct) -> list[ActOutcome]:
        """A backup's act as minidock.act.backups carries it: its hook (none drawn), its copy (a
        snapshot of each named volume the slot holds on its host, out of its running task or
        through a helper: a volume that is not there fails it), `keep` (forgets none), a
        drill (not drawn). `kill`: "mid copy" cuts the copy (the controller dies: no
        outcome, no snapshot); "copy fails" breaks restic's stream, and a host lost mid
        copy (the slot's) fails it too (BackupEnded)."""
        subject = (act.service, act.slot)
        if isinstance(act, VerifyAct):
            return [VerifyEnded(*subject, "", ok=True, line="")]
        if act.step is BackupStep.HOOK:
            return [Hooked(*subject)]
        if act.step is BackupStep.KEEP:
            return [BackupKept(*subject, 0)]
        if act.host in self.down:
            return [BackupEnded(*subject, f"{act.host} does not answer")]
        if self.kill == "mid copy":
            return []
        if self.kill in ("target lost mid copy", "source lost mid copy"):
            self.kill_host(act.host)
            self.kill = ""  # one host lost a pass: the pass's other copies go on
            return [BackupEnded(*subject, f"{act.host} lost mid copy")]
        if self.kill == "copy fails":
            return [BackupEnded(*subject, "restic backup: unexpected EOF")]
        saved: list[tuple[str, str]] = []
        for v, name in zip(
            [v for v in act.spec.volumes if v.named],
            self.named_volumes(act.spec, act.slot),
            strict=True,
        ):
            data = self.volume(act.host, name)
            if data is None:
                return [BackupEnded(*subject, f"volume {name} is not on {act.host}")]
            ident = f"{len(self.snapshots) + 1:08x}"
            self.snapshots.append(Snapshot(ident, act.service, act.slot, v.source, data.content))
            saved.append((v.source, ident))
        return [Copied(*subject, tuple(saved), 1, 1.0)]

    def starting_pinned(self, s: Service, slot: int, host: str) -> None:
        """(g)-(i): a pinned slot's task starts with no other copy of it running (on a
        host not forgotten), never on a half-written volume, nor on an empty one while a
        snapshot of it exists."""
        names = self.named_volumes(s, slot)
        if not names:
            return
        subject = f"{s.name}.{slot}"
        ss = self.state.services.get(s.name)
        fenced = ss.slot(slot).kept_on if ss is not None else ""  # a failover left it: down
        others = [
            c
            for h, cs in self.containers.items()
            if h not in self.gone and not (h == fenced and h in self.down)
            for c in cs
            if c.live and c.service == s.name and c.slot == slot
        ]
        if others:
            self.violations.append(f"(g) {subject} started on {host} while on {others[0].host}")
        if (s.name, slot) in self.marked:
            self.violations.append(
                f"(h) {subject} started on {host} while a restore left it half written"
            )
        if (s.name, slot) in self.forgiven:  # the operator's word: on what it holds (or empty)
            self.forgiven.discard((s.name, slot))
            for name in names:  # what it holds is its data from now on
                data = self.volume(host, name)
                if data is not None:
                    self.volumes[host][name] = replace(data, whole=True)
            return
        for v, name in zip([v for v in s.volumes if v.named], names, strict=True):
            data = self.volume(host, name)
            if data is not None and not data.whole and (host, name) not in self.forgotten:
                self.violations.append(f"(h) {subject} started on a half-written {v.source}")
            elif (data is None or data.empty) and self.snapshot_of(s.name, slot, v.source):
                self.violations.append(
                    f"(i) {subject} started on an empty {v.source} on {host} though a "
                    "snapshot of it exists"
                )

    def snapshot_of(self, service: str, slot: int, volume: str) -> bool:
        return any(
            (s.service, s.slot, s.volume) == (service, slot, volume) and s.content
            for s in self.snapshots
        )

    def check_pinned(self) -> None:
        """(g) after the pass's acts: a pinned slot runs one copy where it is seen, and the
        volume a failover left on its old host is kept."""
        for host, name in self.kept:
            if host not in self.gone and name not in self.volumes[host]:
                self.violations.append(f"(g) {name} on {host}, kept by a failover, removed")
        for c in self.live():  # the old host back: its task fenced, the restored one runs
            if c.id in self.fenced:
                self.violations.append(f"(g) {c.name} runs on {c.host}, which a failover left")
        seen: Counter[tuple[str, int]] = Counter()
        for c in self.live():
            if c.id in self.mounts:
                seen[(c.service, c.slot)] += 1
        for (service, slot), n in seen.items():
            if n > 1:
                self.violations.append(f"(g) {service}.{slot} runs {n} copies")

    # -- one-off tasks: hooks and jobs
    def hook_act(self, step: HookStep) -> list[ActOutcome]:
        service, run = step.service, step.record.run
        found = next((o for os in self.oneoffs.values() for o in os if o.run == run), None)
        if step.act is HookAct.START:
            if found is None:
                self.hook_created(step)
            return [HookStarted(service, run, step.host, found is None)]
        if step.act is HookAct.COLLECT and found is not None:
            return [HookEnded(service, run, found.exit_code, took=1.0)]
        if step.act is HookAct.TIME_OUT:
            if found is not None:
                self.drop(found)
            return [HookEnded(service, run, None)]
        if found is not None:  # remove, supersede
            self.drop(found)
        return []

    def hook_created(self, step: HookStep) -> None:
        """(d): one hook one-off per generation, never two of a service at once."""
        service, generation = step.service, step.record.generation
        self.hooks_of[(service, generation)] += 1
        if self.hooks_of[(service, generation)] > 1:
            self.violations.append(f"(d) a second hook of generation {generation}")
        running = [o for os in self.oneoffs.values() for o in os if o.kind == HOOK_KIND]
        if any(o.service == service and not o.finished for o in running):
            self.violations.append(f"(d) two hooks of {service} at once")
        assert step.spec is not None
        assert step.spec.command is not None
        passes = int(step.spec.command[-1])  # ["migrate", PASSES]: how long it runs
        o = self.oneoff(service, step.record.run, HOOK_KIND, step.host, passes)
        self.hook_specs[o.id] = step.record.spec

    def job_act(self, act: JobStart | JobCollect) -> list[ActOutcome]:
        if isinstance(act, JobStart):
            self.oneoff(act.job, act.run, JOB_KIND, act.host, 1)
            return [JobStarted(act.job, act.run, act.host)]
        o = act.oneoff
        started = o.started_at or self.now
        run = JobRun(o.run, act.due, started, o.finished_at or started, o.exit_code, "")
        return [JobEnded(act.job, run)]

    def oneoff(self, service: str, run: str, kind: str, host: str, passes: int) -> OneOff:
        o = OneOff(
            f"o{next(_oneoff_ids)}",
            f"{service}.{kind}.{run}",
            host,
            service,
            run,
            kind,
            "running",
            started_at=self.now,
        )
        self.oneoffs[host].append(o)
        self.ends[o.id] = self.now + passes * DT
        return o

    def drop(self, o: OneOff) -> None:
        self.oneoffs[o.host] = [x for x in self.oneoffs[o.host] if x.id != o.id]

    def tick(self, dt: float = DT) -> None:
        super().tick(dt)
        self.counted += self.rate * dt
        for host, os in self.oneoffs.items():
            ended = []
            for o in os:
                if not o.finished and self.now >= self.ends[o.id]:
                    o = replace(o, state="exited", exit_code=0, finished_at=self.now)
                    if o.kind == HOOK_KIND:
                        self.hook_ok.add(self.hook_specs[o.id])
                ended.append(o)
            self.oneoffs[host] = ended

    # -- the truth the properties judge by
    def address(self, c: Container, port: int) -> str | None:
        hp = next((hp for cp, hp in c.published if cp == port), None)
        host = self.inventory.host(c.host)
        return None if hp is None or host is None else f"{host.reached_at}:{hp}"

    def sent_to(self) -> set[str]:
        """Every address a loaded proxy table sends to."""
        found = {u for us in self.routes.values() for u in us}
        found |= {a for ps in self.names.values() for p in ps.values() for _, _, a in p.servers}
        return found

    def stopping(self, c: Container) -> None:
        """(c): a task a loaded table sent to stops only once none does, and its own
        drain_timeout has passed since the first load without it."""
        if c.id not in self.ever_loaded:
            return
        own = self.started_with[c.id]
        since = self.out_since.get(c.id)
        if since is None:
            self.violations.append(f"(c) {c.name} stopped while a proxy sends to it")
        elif self.now - since < own.drain_timeout:
            self.violations.append(f"(c) {c.name} stopped {self.now - since:.0f}s after it left")

    def starting(self, s: Service) -> None:
        """(d): no task of a spec with a hook before a hook of that spec exited 0."""
        if s.before_update is not None and s.spec_hash() not in self.hook_ok:
            self.violations.append(f"(d) a task of {s.spec_hash()} before its hook succeeded")

    def check_traffic(self, seen: set[str]) -> None:
        """(b), after the pass's acts, over the tasks it saw that still live."""
        ss = self.state.services.get("web")
        if ss is None or ss.removed:
            return
        live = [c for c in self.live("web") if c.id in seen]
        serving = [
            c
            for c in live
            if c.task not in self.state.draining
            and takes_traffic(c, self.started_with[c.id], self.now)
        ]
        upstreams = ss.serving.serving is not Serving.MAINTENANCE  # else each answers 503
        for route in ss.spec.ingress if upstreams else ():
            key = (route.domain, route.path)
            able = [c for c in serving if self.started_with[c.id].ingress]
            if able and not self.routes.get(key):
                self.violations.append(f"(b) route {route} empty while {able[0].name} serves")
        clients = {c.host for c in self.live()}
        for host in sorted(clients):
            self.check_name(host, serving)

    def check_name(self, host: str, serving: list[Container]) -> None:
        proxy = self.names[host].get("web")
        exposed = [c for c in serving if self.started_with[c.id].expose]
        here = [c for c in self.live("web") if c.host == host]
        aliased = [c for c in here if not self.started_with[c.id].expose]
        reached = exposed + [c for c in serving if c in aliased]
        if not reached:
            return
        why = f"on {host} while {reached[0].name} serves"
        if proxy is not None and proxy.running and not proxy.servers:
            self.violations.append(f"(b) an empty name proxy {why}")
        if (proxy is None or not proxy.running) and not aliased:
            self.violations.append(f"(b) the name answers nothing {why}")

    def settled(self, plan: Plan) -> str:
        """Why the fleet is not converged on the current spec ("" when it is)."""
        if not plan.converged or plan.hooks:
            return f"plan: {plan.run or plan.stop or plan.pending or plan.waiting or plan.hooks}"
        ss = self.state.services["web"]
        spec = ss.spec
        live = self.live("web")
        if any(c.spec != spec.spec_hash() for c in live):
            return "a task of another spec"
        hosts = [h for h in self.hosts if all(k.allows(h) for k in spec.constraints)]
        if spec.mode == "global":
            if sorted(c.host for c in live) != sorted(h.name for h in hosts):
                return f"global tasks on {sorted(c.host for c in live)}"
        elif sorted(c.slot for c in live) != list(range(1, ss.replicas() + 1)):
            return f"slots {sorted(c.slot for c in live)}"
        if any(c.host not in {h.name for h in hosts} for c in live):
            return "a task where its constraints forbid"
        for route in spec.ingress:
            want = sorted(a for c in live if (a := self.address(c, route.port)) is not None)
            if sorted(self.routes.get((route.domain, route.path), ())) != want:
                return f"route {route}: {self.routes.get((route.domain, route.path))} != {want}"
        if spec.before_update is not None and spec.spec_hash() not in self.hook_ok:
            return "the current spec's hook never ran"
        for host in {c.host for c in self.live()}:
            proxy = self.names[host].get("web")
            if spec.expose and live:
                want = sorted(a for c in live if (a := self.address(c, EXPOSED)) is not None)
                if proxy is None or sorted(a for _, _, a in proxy.servers) != want:
                    return f"name proxy on {host}: {proxy}"
            elif not spec.expose and proxy is not None:
                return f"a name proxy left on {host}"
        return ""


TAKEN: list[tuple[int, int]] = []  # (passes an apply took, its bound), for measuring
KILLS = ("before acts", "after stops", "before fold")


def bound(tasks: int, wanted: int, parallelism: int, hook: int, kills: int) -> int:
    """Passes an apply takes to converge at most: 4 a batch of `parallelism` tasks to
    replace, start or stop (every task live at the apply and every one wanted), the hook's
    own passes, 2 a controller kill, and 4 to settle (docs/testing.md)."""
    batches = -(-(tasks + wanted) // parallelism)
    return 4 * batches + hook + 2 * kills + 4


class WholeDecision(RuleBasedStateMachine):
    """Applies, passes (some cut by a kill) and settling, in any order; (b)-(e) hold after
    every step, (a) at every settle: the fleet converges within the bound of the last
    apply and, once converged, every pass after stays converged."""

    def __init__(self) -> None:
        super().__init__()
        self.fleet: Fleet | None = None
        self.since = 0  # passes since the last apply taken
        self.limit = 0  # the bound of those, a kill adding 2
        self.steady = False  # converged since the last apply

    def new_fleet(self, inventory: Inventory, name: str) -> Fleet:
        return Fleet(list(inventory.hosts), cluster_name=name)

    @initialize(k=knobs)
    def first(self, k: Knobs) -> None:
        self.apply(k)

    @rule(k=knobs)
    def apply(self, k: Knobs) -> None:
        got = loaded(k)
        if isinstance(got, SpecError) or not placeable(k):
            return  # refused by validate (or more tasks than hosts for a host port)
        cluster, inventory = got
        if self.fleet is None:
            self.fleet = self.new_fleet(inventory, cluster.name)
        web = cluster.service("web")
        assert web is not None
        wanted = len(HOSTS) if web.mode == "global" else web.replicas
        tasks = len(self.fleet.live("web"))
        self.fleet.take(cluster)
        self.since, self.steady = 0, False
        self.limit = bound(tasks, wanted, web.update.parallelism, k.hook, 0)
        if web.update.canary:  # its tasks, its monitor, the promotion (docs/testing.md)
            self.limit += 4 + math.ceil(web.update.canary_monitor / DT)

    @precondition(lambda self: self.fleet is not None)
    @rule(
        kills=st.lists(st.sampled_from(("", "", *KILLS)), min_size=1, max_size=4),
        lag=st.sampled_from((0.0, 0.7, 2.0)),
    )
    def passes(self, kills: list[str], lag: float) -> None:
        assert self.fleet is not None
        self.fleet.lag = lag
        for kill in kills:
            self.limit += 2 if kill else 0
            self.judge(self.fleet.settled(self.fleet.one_pass(kill)))

    @precondition(lambda self: self.fleet is not None)
    @rule()
    def promote_early(self) -> None:
        """`minidock promote web` whenever a canary runs, ready or not."""
        f = self.fleet
        assert f is not None
        ss = f.state.services.get("web")
        if ss is not None and ss.rollout.in_canary:
            f.state = promote(f.state, "web")

    @precondition(lambda self: self.fleet is not None)
    @rule()
    def settle(self) -> None:
        f = self.fleet
        assert f is not None
        while self.judge(f.settled(f.one_pass())):
            pass

    def judge(self, why: str) -> str:
        """(a) after one more pass: `why` it is not converged ("" when it is)."""
        assert not (self.steady and why), f"converged, then not: {why}"
        self.since += 1
        assert self.since <= self.limit or not why, f"not converged in {self.limit}: {why}"
        if not why and not self.steady:
            assert self.since <= self.limit, f"converged in {self.since} > {self.limit}"
            TAKEN.append((self.since, self.limit))
            self.steady = True
        return why

    @invariant()
    def nothing_bad(self) -> None:
        if self.fleet is not None:
            assert not self.fleet.violations, self.fleet.violations

    def teardown(self) -> None:
        if self.fleet is not None:
            self.settle()


WholeDecision.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HypothesisHealth.too_slow],
)
test_whole_decision = WholeDecision.TestCase


# -- the fleet split among controllers (issue 47) ---------------------------------------------
MEMBERS = ("m1", "m2", "m3")  # the `watch`es of the cluster: one decides, the others own hosts
RESYNC = DT  # each owner's resync (`ShardTable.intervals`): `advancing`'s patience is 3 of them
LENT: list[tuple[int, int]] = []  # (hosts borrowed, hosts others own) of each decider pass


@dataclass
class Round:
    """An owner's round over its share, made and perhaps not written yet: the revision it
    read before its probes, the hosts it owned then (host -> its owner key's create
    revision), and what each probe found (None: it failed) with the moment it was made."""

    member: str
    revision: int
    owned: dict[str, int]
    found: dict[str, tuple[HostObservation | None, int]] = field(default_factory=dict)


@dataclass
class Etcd(EtcdModel):
    """What observing by share keeps in etcd (every write moves `revision`): the writer
    lock's last tenure, the owner keys, the observations the owners wrote (with the moment
    each was made: `made`) and each owner's last whole round."""

    made: dict[str, int] = field(default_factory=dict)

    def publish(self, r: Round) -> None:
        """A round written, each host compared on its owner key (one that changed hands
        since is the new owner's to write); a failed probe deletes what was written."""
        for host, created in sorted(r.owned.items()):
            if self.owners.get(host) != OwnerKey(r.member, created):
                continue
            seen, made = r.found[host]
            if seen is None:
                self.written.pop(host, None)
            else:
                self.written[host] = Written(r.member, created, r.revision, seen)
                self.made[host] = made
            self.write()
        self.rounds[r.member] = r.revision
        self.write()

    def table(self) -> ShardTable:
        intervals = dict.fromkeys(self.rounds, RESYNC)
        return ShardTable(dict(self.owners), dict(self.rounds), dict(self.written), intervals)


@dataclass(frozen=True)
class Turn:
    """How one pass goes beside its kill: the owners whose rounds are written just before
    it, made by another writer (`minidock reconcile`: it probes every host, and the
    decider is not told) or not, its end told to the decider's `Trust` or not (etcd did
    not answer), and the owner who reads the revision after the pass's commit and probes
    its share before the pass's acts, written after them (owners: indices into the
    members that do not decide)."""

    rounds: tuple[int, ...] = ()
    other: bool = False
    told: bool = True
    during: int | None = None
    fates: tuple[str, ...] = ()  # each host's order, if the pass orders one (HOSTS' order)
    lands: str = ""  # where in it the late orders' verbs land (LANDS; "": not in it)


FATES = ("reported", "lost", "late")  # an order: as if the decider acted, or not
LANDS = ("", "", "before", "decided", "acted")
ORDERS: Counter[str] = Counter()  # orders placed by fate, passes with one unkept, landings
turns = st.builds(
    Turn,
    rounds=st.sampled_from([(), (0,), (1,), (0, 1)]),
    other=st.sampled_from([False, False, False, True]),
    told=st.sampled_from([True, True, True, False]),
    during=st.sampled_from([None, None, 0, 1]),
    fates=st.sampled_from(list(itertools.product(FATES, repeat=len(HOSTS)))),
    lands=st.sampled_from(LANDS),
)


@dataclass
class SplitFleet(Fleet):
    """A Fleet whose hosts are split among controllers: the decider (`decider`) borrows
    the observations the hosts' owners wrote (core.borrowing, as usecases.borrowing's
    `lend` and `ended`) instead of probing those hosts, and (o): every borrowed
    observation was made after the last act on its host (`last_act`, in `moment`s: a
    serial of every act and probe)."""

    etcd: Etcd = field(default_factory=Etcd)
    decider: str = MEMBERS[0]
    trust: Trust = field(default_factory=Trust)
    handed: tuple[Handed, int] | None = None  # the last told tenure's bound, its revision
    rounds_seen: dict[str, RoundSeen] = field(default_factory=dict)
    moment: int = 0
    acts: int = 0  # acts made on hosts, every pass's
    last_act: dict[str, int] = field(default_factory=dict)
    lent: dict[str, HostObservation] = field(default_factory=dict)  # this pass's borrowed
    late: dict[str, Round] = field(default_factory=dict)  # member -> its round not written
    during: str = ""  # the owner whose round this pass's acts overtake
    done: list[str] = field(default_factory=list)  # the pass's act lines (PassResult.done)
    started: int = 0  # one-offs started (hooks', jobs'), every pass's
    told_starts: bool = True  # a one-off's start counts as an act (see `acted`)
    # acting by share: the hosts this pass may order (another member's, rounds advancing),
    # each order's fate as drawn (`Turn.fates`), the verbs claimed and not reported yet
    # (member -> host -> stops, runs: they land before that member's next round), whether
    # this pass left an order unkept (lost or late), and every task name ever started
    orderable: dict[str, str] = field(default_factory=dict)  # host -> its owner
    fates: dict[str, str] = field(default_factory=dict)
    pending: dict[str, dict[str, tuple[list[Stop], list[Run]]]] = field(default_factory=dict)
    unkept: bool = False
    claimed: set[str] = field(default_factory=set)  # members whose claim round this pass saw
    names_started: set[str] = field(default_factory=set)
    ordered: set[str] = field(default_factory=set)  # this pass's ordered hosts
    placing: Plan | None = None  # this pass's plan, committed
    lands: str = ""  # this pass's `Turn.lands`
    start_failed: list[StartFailed] = field(default_factory=list)  # this pass's, as outcomes
    landing: bool = False  # a late order's verbs being carried out
    landed_ids: set[str] = field(default_factory=set)  # the tasks late orders started

    def owners(self) -> list[str]:
        return [m for m in MEMBERS if m != self.decider]

    def others_own(self) -> set[str]:
        return {h for h, k in self.etcd.owners.items() if k.controller != self.decider}

    # -- acts on hosts, each a moment
    def acted_on(self, host: str, line: str) -> None:
        self.acts += 1
        self.moment += 1
        self.last_act[host] = self.moment
        if line:  # what the act path records among the pass's acts (hooks, jobs: none)
            self.done.append(line)

    def remove(self, c: Container) -> None:
        self.acted_on(c.host, f"stopped {c.name}")
        super().remove(c)

    def exited(self, c: Container) -> None:
        self.acted_on(c.host, f"stopped {c.name}")
        super().exited(c)

    def start(self, s: Service, slot: int, host_name: str, task: str) -> Container:
        self.acted_on(host_name, f"started {s.name}.{slot}")
        return super().start(s, slot, host_name, task)

    def oneoff(self, service: str, run: str, kind: str, host: str, passes: int) -> OneOff:
        self.acted_on(host, "")  # act.carry's _start: an outcome, no line
        self.started += 1
        return super().oneoff(service, run, kind, host, passes)

    def drop(self, o: OneOff) -> None:
        self.acted_on(o.host, f"removed {o.name}")
        super().drop(o)

    def load_proxies(self, plan: Plan, rendered: Rendered) -> None:
        if any(x.load for x in rendered.proxies) or plan.names:
            self.done.append("proxies loaded")
        super().load_proxies(plan, rendered)

    # -- acting by share (usecases.delegating): each host's verbs another member carries out
    def carry_stops(self, stops: Sequence[Stop]) -> None:
        """The orders placed (Delegation._place: the hosts the pass's stops and starts
        touch that another member owns whose rounds advance), the unordered hosts' stops
        carried out; each order as its fate says: carried out now by its owner, whose
        claim round then probes and writes (reported), never (lost: the pass ends with a
        failure line, its verbs die with the tenure), or claimed and carried out later,
        before that owner's next round (late: `pending`)."""
        plan = self.placing
        assert plan is not None
        hosts = {s.container.host for s in plan.stop} | {r.host for r in plan.run}
        ordered = {h: self.fates.get(h, "reported") for h in sorted(hosts & set(self.orderable))}
        ORDERS["acting passes"] += bool(hosts)
        ORDERS["others' verbs"] += bool(hosts & self.others_own())
        self.unkept = any(fate != "reported" for fate in ordered.values())
        for fate in ordered.values():
            ORDERS[fate] += 1
        super().carry_stops([s for s in stops if s.container.host not in ordered])
        claims: set[str] = set()
        for host, fate in ordered.items():
            owner = self.orderable[host]
            verbs = (
                [s for s in plan.stop if s.container.host == host],
                [r for r in plan.run if r.host == host],
            )
            if fate == "lost":
                continue
            self.land(owner)  # its rounds one at a time: the claim follows the last one's acts
            if fate == "late":
                self.pending.setdefault(owner, {})[host] = verbs
                continue
            Fleet.carry_stops(self, verbs[0])
            Fleet.carry_runs(self, verbs[1])
            claims.add(owner)
        for owner in sorted(claims):  # the claim round goes on: probes, writes
            self.etcd.publish(self.round_of(owner))
        self.ordered = set(ordered)

    def carry_runs(self, runs: Sequence[Run]) -> None:
        super().carry_runs([r for r in runs if r.host not in self.ordered])

    def land(self, member: str | None = None) -> None:
        """The verbs of orders claimed and not reported in time (`member`'s, or every
        member's) carried out now: stopping a task already gone is no act (docker says
        so); neither their lines nor a start's failure are the pass's going on."""
        done, failed = self.done, self.start_failed
        self.done, self.start_failed, self.landing = [], [], True
        for m in [member] if member else sorted(self.pending):
            for _, (stops, runs) in sorted(self.pending.pop(m, {}).items()):
                ORDERS["landed"] += 1
                Fleet.carry_stops(self, [s for s in stops if self.exists(s.container)])
                Fleet.carry_runs(
                    self,
                    [
                        r
                        if r.replaces is None or self.exists(r.replaces)
                        else replace(r, replaces=None)
                        for r in runs
                    ],
                )
        self.done, self.start_failed, self.landing = done, failed, False

    def landed(self) -> None:
        """Every late order's verbs carried out, each claim round then probing and writing."""
        for member in sorted(self.pending):
            self.etcd.publish(self.round_of(member))

    def exists(self, c: Container) -> bool:
        return any(x.id == c.id for x in self.containers.get(c.host, []))

    def launch(
        self, s: Service, slot: int, host: str, task: str, bound: tuple[tuple[str, int, int], ...]
    ) -> None:
        """A start of a task name that exists on the host is adopted (Docker's name
        conflict, act.acts `_start`); one started before elsewhere, or removed since, is a
        task started twice."""
        name = f"{s.name}.{slot}.{task}"
        if any(c.name == name for c in self.containers[host]):
            ORDERS["adopted"] += 1
            return
        late = self.landing or any(c.id in self.landed_ids for c in self.containers[host])
        held = {p for c in self.containers[host] if c.live for p in c.host_ports}
        wants = {*service_ports(s), *(f"{hp}/tcp" for _, hp, _ in bound)}  # a route's too
        taken = sorted(held & wants) if late else []
        if taken:  # Docker refuses it (modelled only where a late start is one of the two:
            # the decision itself places one so, test_a_start_never_takes_a_held_host_port)
            self.acted_on(host, "")
            line = f"{name} on {host}: port {taken[0]} is already allocated"
            self.start_failed.append(StartFailed(s.name, slot, task, line))
            ORDERS["port taken"] += 1
            return
        if name in self.names_started:
            self.violations.append(f"(o) {name} started twice (on {host})")
        self.names_started.add(name)
        super().launch(s, slot, host, task, bound)
        if self.landing:
            self.landed_ids |= {c.id for c in self.containers[host] if c.name == name}

    def carry_rest(self, plan: Plan) -> list[ActOutcome]:
        outcomes = super().carry_rest(plan)
        return [*self.start_failed, *outcomes]  # a late start's failure is never reported

    # -- the owners' rounds
    def round_of(self, member: str, fails: str = "") -> Round:
        """`member` reads the revision, then probes each host it owns (the very
        observation the decider's probe would make; `fails`: that host's probe fails)."""
        self.land(member)  # a round's revision is read after the acts its last claim took
        if member in self.late:  # one round at a time: the last one is written first
            self.etcd.publish(self.late.pop(member))
        owned = {h: k.created for h, k in self.etcd.owners.items() if k.controller == member}
        r = Round(member, self.etcd.revision, owned)
        seen = Fleet.observe(self).hosts
        for host in sorted(owned):
            self.moment += 1
            r.found[host] = (None if host == fails else seen[host], self.moment)
        return r

    def rounds(self) -> None:
        """Every owner's round, written at once."""
        for member in self.owners():
            self.etcd.publish(self.round_of(member))

    # -- the decider's pass
    def plan(self, state: object = None) -> Plan:
        """The decision from the decider's probes and what it borrowed (observe(borrowed=))."""
        assert self.cluster is not None
        seen = self.observe()
        self.seen = replace(seen, hosts={**seen.hosts, **self.lent})
        return decision(self.cluster, self.inventory, self.seen, self.state, self.now)

    def record(self, plan: Plan) -> None:
        """The plan committed before any act; `during`'s round reads the revision after
        it and probes before the acts (written after the pass)."""
        super().record(plan)
        self.placing, self.start_failed = plan, []
        self.etcd.write()
        if self.lands == "decided":
            self.landed()
        if self.during:
            self.late[self.during] = self.round_of(self.during)

    def lend(self) -> None:
        """The pass's start (usecases.borrowing `lend`): the lock taken, a bound handed
        down by the tenure before taken over (a new process, or another member deciding
        next), what it borrows."""
        tenure, before = self.etcd.lock()
        if before and not self.trust.continues(before):
            self.trust.inherit(*(self.handed or (None, 0)), before=before)
        self.trust.took(tenure, before)
        table = self.etcd.table()
        self.rounds_seen, fresh = advancing(self.rounds_seen, table, self.now)
        self.lent = borrowable(replace(table, rounds=fresh), self.decider, self.trust)
        self.orderable = {  # usecases.borrowing's `_orderable`: owners whose rounds advance
            h: k.controller
            for h, k in table.owners.items()
            if k.controller != self.decider and k.controller in fresh
        }
        LENT.append((len(self.lent), len(self.others_own())))
        for host in sorted(self.lent):
            if self.etcd.made[host] < self.last_act.get(host, 0):
                self.violations.append(f"(o) {host} borrowed as seen before its last act")

    def acted(self, plan: Plan, started: bool) -> bool:
        """What the pass tells its Trust it did: usecases.passes.acted (which once missed a
        hook's or a job's start alone, act.carry recording no line for it: an owner's
        observation made before the start was then borrowed and said the one-off was
        gone; test_a_started_oneoff_is_an_act). `started`: a one-off started, which
        (`told_starts`) the property also counts, as acted did not."""
        assert self.seen is not None
        told = acted(PassResult(plan, self.seen, done=self.done))
        return told or (started and self.told_starts)

    def split_pass(self, kill: str = "", turn: Turn = Turn()) -> Plan:
        """One pass by the decider (or `turn.other`'s), its end told to its `Trust` as
        usecases.borrowing's `ended` tells it: `acted` (usecases.passes) moves the bound
        to a revision written after its last act; a killed decider's successor is a new
        process, which knows no tenure."""
        self.fates = {} if turn.other else dict(zip(HOSTS, turn.fates, strict=False))
        self.lands, self.unkept, self.ordered = turn.lands, False, set()
        if turn.lands == "before":
            self.landed()
        for i in turn.rounds:
            self.etcd.publish(self.round_of(self.owners()[i]))
        self.during = "" if turn.during is None else self.owners()[turn.during]
        if turn.other:  # minidock reconcile: no share, no orders
            self.etcd.lock()
            self.lent, self.orderable = {}, {}
            plan = self.one_pass(kill)
        else:
            self.lend()
            self.done, started = [], self.started
            plan = self.one_pass(kill)
            if turn.lands == "acted":
                self.landed()
            if kill:
                self.trust, self.rounds_seen = Trust(), {}
            elif turn.told:  # its last commit hands the bound down, after the acts
                did = self.acted(plan, self.started > started)
                hosts = acted_on(PassResult(plan, self.seen, done=self.done)) if did else None
                self.handed = (self.trust.handing(did, hosts), self.etcd.write())
                self.trust.left(did, self.handed[1] if did else 0, hosts)
        self.etcd.write()  # the lock key deleted
        if self.during in self.late:  # (a claim round of its wrote it already)
            self.etcd.publish(self.late.pop(self.during))
        self.during = ""
        ORDERS["passes"] += 1
        ORDERS["unkept passes"] += self.unkept
        return plan


splits = st.tuples(
    st.sampled_from(MEMBERS),  # the decider
    st.lists(st.sampled_from((*MEMBERS, None)), min_size=len(HOSTS), max_size=len(HOSTS)),
)


class SplitDecision(WholeDecision):
    """WholeDecision with the fleet split among controllers: (a)-(f), (p) and (r) hold
    while the decision is made over the decider's probes and the observations it
    borrowed, and (o) every borrowed observation was made after the last act on its host.
    The owners' rounds are rules of their own (written at once, or after later rules), as
    are a host changing hands and the decider's role; each pass may be another writer's,
    its end untold, or overtake an owner's probes with its acts. At `settle` every owner
    makes a round before each pass, and once converged and a pass did not act, the
    decider borrows every host others own. Acting by share: the verbs on a host another
    member owns whose rounds advance are that owner's order, reported, lost or late as
    `Turn.fates` draws (SplitFleet.carry_stops); a lost or late order counts as a kill in
    the bound (the next pass decides the verbs again from what it observes)."""

    def __init__(self) -> None:
        super().__init__()
        self.split: tuple[str, list[str | None]] = (MEMBERS[0], [])

    def new_fleet(self, inventory: Inventory, name: str) -> Fleet:
        decider, owners = self.split
        fleet = SplitFleet(list(inventory.hosts), cluster_name=name, decider=decider)
        for host, member in zip(HOSTS, owners, strict=False):
            fleet.etcd.hand(host, member)
        return fleet

    @property
    def shared(self) -> SplitFleet:
        assert isinstance(self.fleet, SplitFleet)
        return self.fleet

    @initialize(k=knobs, split=splits)
    def first(self, k: Knobs, split: tuple[str, list[str | None]]) -> None:
        self.split = split
        self.apply(k)

    @rule(k=knobs)
    def apply(self, k: Knobs) -> None:
        """`minidock apply`: another writer's tenure."""
        super().apply(k)
        if self.fleet is not None:
            self.shared.etcd.lock()
            self.shared.etcd.write()

    @precondition(lambda self: self.fleet is not None)
    @rule(
        kills=st.lists(st.tuples(st.sampled_from(("", "", *KILLS)), turns), min_size=1, max_size=4)
    )
    def passes(self, kills: list[tuple[str, Turn]]) -> None:
        for kill, turn in kills:
            self.limit += 2 if kill else 0
            plan = self.shared.split_pass(kill, turn)
            self.limit += 2 if self.shared.unkept else 0  # an order lost or late: as a kill
            self.judge(self.shared.settled(plan))

    @precondition(lambda self: self.fleet is not None)
    @rule(i=st.integers(0, 1), late=st.booleans(), fails=st.sampled_from(("", "", *HOSTS)))
    def owner_round(self, i: int, late: bool, fails: str) -> None:
        """An owner's round over its share: written at once, or (`late`) at a later rule."""
        f = self.shared
        r = f.round_of(f.owners()[i], fails)
        if late:
            f.late[r.member] = r
        else:
            f.etcd.publish(r)

    @precondition(lambda self: self.fleet is not None and bool(self.shared.pending))
    @rule()
    def reported_late(self) -> None:
        """The orders claimed and not reported in time: their verbs carried out, then the
        claim round's probes, written."""
        self.shared.landed()

    @invariant()
    def one_task_a_name(self) -> None:
        """No two live tasks of one name (a start replayed is adopted, never doubled)."""
        if self.fleet is not None:
            names = Counter(c.name for c in self.fleet.live())
            assert all(n == 1 for n in names.values()), f"twice: {names.most_common(1)}"

    @precondition(lambda self: self.fleet is not None and bool(self.shared.late))
    @rule()
    def written_late(self) -> None:
        f = self.shared
        f.etcd.publish(f.late.pop(min(f.late)))

    @precondition(lambda self: self.fleet is not None)
    @rule(host=st.sampled_from(HOSTS), to=st.sampled_from((*MEMBERS, None)))
    def hand(self, host: str, to: str | None) -> None:
        """A host changes hands (or is left with no owner for a while): its owner
        acknowledges its key once nothing is in flight on it (core.handover), so the verbs
        it claimed for the host landed before."""
        f = self.shared
        for member in [m for m, hosts in f.pending.items() if host in hosts]:
            f.land(member)
        f.etcd.hand(host, to)

    @precondition(lambda self: self.fleet is not None)
    @rule(to=st.sampled_from(MEMBERS))
    def handover(self, to: str) -> None:
        """Another member makes the passes from now: a process that knows no tenure but
        the one handed down (`lend`)."""
        f = self.shared
        f.decider, f.trust, f.rounds_seen = to, Trust(), {}

    @precondition(lambda self: self.fleet is not None)
    @rule(turn=turns)
    def settle(self, turn: Turn = Turn()) -> None:
        """The still world: each pass after every owner's round, but `turn.during`'s,
        whose rounds the passes' acts overtake; every other pass is `turn.other`'s, or
        its end told as `turn.told` says. Once converged, a pass that did not act, every
        owner's round, and the next pass borrows every host others own."""
        f = self.shared
        rounds = tuple(i for i in range(len(MEMBERS) - 1) if i != turn.during)
        odd = replace(turn, rounds=rounds, fates=())  # the late orders land in it
        even = Turn(rounds, during=turn.during, fates=turn.fates)
        for n in itertools.count():
            plan = f.split_pass(turn=odd if n % 2 else even)
            self.limit += 2 if f.unkept else 0  # an order lost or late: as a kill
            if not self.judge(f.settled(plan)):
                break
        for _ in range(8):  # a scheduled job's run may start at any pass: one without acts
            acts = f.acts
            f.rounds()
            self.judge(f.settled(f.split_pass()))
            if f.acts == acts:
                break
        else:
            return
        f.rounds()
        self.judge(f.settled(f.split_pass()))
        missed = f.others_own() - set(f.lent)
        assert not missed, f"at rest, {sorted(missed)} not borrowed"


SplitDecision.TestCase.settings = WholeDecision.TestCase.settings
test_split_decision = SplitDecision.TestCase


def test_a_started_oneoff_is_an_act() -> None:
    """A pass that only starts the hook (nothing run, stopped or loaded: the pass before
    loaded the proxy, and its controller was killed before its hook) tells `Trust`
    it did nothing (usecases.passes.acted); an owner read the revision after the pass's
    tenure began and probed host1 before the hook's start, and wrote it after the pass:
    the next pass borrows it, sees no hook, and fails it (o). Counted as an act (the
    property's `told_starts`), it holds."""
    hooked = Knobs(replicas=0, health=False, route=None, hook=1)
    machine = SplitDecision()
    machine.first(k=hooked, split=("m2", ["m1", "m1", "m1"]))
    fleet = machine.shared
    fleet.told_starts = False
    fleet.split_pass("after stops")  # the proxy loaded; killed before the hook's start
    fleet.split_pass(turn=Turn(during=0))  # the hook starts on host1, m1 probing meanwhile
    fleet.split_pass()
    assert not fleet.violations, fleet.violations


def test_a_start_never_takes_a_held_host_port() -> None:
    """Docker refuses a start whose host port a live container holds ("port is already
    allocated"); the Fleet does not, so the decision is checked here: a rolling update
    start-first of 2 routed replicas with a host port on 3 hosts. Slot 1's new task goes
    to host3, its old one on host1 drains (its stop held by core.traffic's gate); slot 2's
    new task is placed on host1 in a pass while that old task still runs there and holds
    8081/tcp: the placement counted the held stop's port as freed (core.reconcile's
    `_fleet` freed every stop's host ports; it keeps them now). Found by the split
    whole decision once a start into a held port failed (as Docker's does): the slot's
    start failed, and with a late order's start a stray drained for ever (the fake's two
    tasks on one host:port)."""
    clashes: list[str] = []

    class Ports(Fleet):
        def launch(
            self,
            s: Service,
            slot: int,
            host: str,
            task: str,
            bound: tuple[tuple[str, int, int], ...],
        ) -> None:
            held = {p for c in self.containers[host] if c.live for p in c.host_ports}
            if held & set(service_ports(s)):
                live = [c.name for c in self.containers[host] if c.live]
                clashes.append(f"{s.name}.{slot}.{task} on {host} beside {live}")
            super().launch(s, slot, host, task, bound)

    machine = WholeDecision()
    machine.new_fleet = lambda inventory, name: Ports(list(inventory.hosts), cluster_name=name)  # type: ignore[method-assign]
    machine.first(k=Knobs(replicas=2, host_port=True))
    machine.settle()
    machine.apply(k=Knobs(replicas=2, host_port=True, order="start-first", image="web:2"))
    machine.settle()
    assert not clashes, clashes
