"""The act path: a plan's verbs carried out on the hosts over SSH.

`carry_out` loads the pass's route table into the ingress proxies and its endpoints into
the name proxies (`minidock.names`), then stops (all hosts
at once) and starts tasks (hosts in parallel, each host's in plan order, due restarts
first). `Acts` does each verb: the image confirmed, pulled (after `docker login`) or
pushed; the task's configs placed; the cluster network ensured; `docker run` (or create,
connect, start), `docker stop` and `docker rm`. It decides nothing: a failed act is an
outcome for the core (`StartFailed`, `ExitNoted`), which makes the state and events of it
(`core.outcomes.fold`); the host ports a routed task publishes are the core's choice
(`core.task_ports`). Every remote command goes through `Acts.sh`, which first checks that
this controller still holds the writer lock (`fence`), and every line it records goes
through the command's masker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

from minidock.commands.docker import (
    created_argv,
    grace_seconds,
    image_present_argv,
    login_argv,
    logs_argv,
    network_connect_argv,
    network_create_argv,
    network_owner_argv,
    pull_argv,
    rm_argv,
    run_argv,
    secret_files_argv,
    secret_files_tar,
    start_argv,
    stop_argv,
)
from minidock.commands.errors import docker_error, name_conflict
from minidock.configs import ConfigPlaceError, ConfigPlacer
from minidock.core import (
    ActOutcome,
    ControllerState,
    ExitNoted,
    Plan,
    Run,
    StartFailed,
    Stop,
    task_ports,
)
from minidock.core.endpoints import endpoint_table
from minidock.core.hooks import awaited
from minidock.core.jobs import finished_oneoffs
from minidock.core.routes import route_table
from minidock.haproxy import NAMES_IMAGE
from minidock.ingress import configs_for, converge_proxies
from minidock.masking import Masker
from minidock.model import (
    Cluster,
    Container,
    Event,
    Ingress,
    Inventory,
    Observed,
    RegistryAuth,
    Service,
    cluster_network,
)
from minidock.names import converge_names
from minidock.push import ControllerEngine, LocalEngine, LocalImage, PushError, push_image
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = [
    "STOP_TIMEOUT",
    "ActFailed",
    "Acts",
    "PrepareFailed",
    "carry_out",
    "ensure_network",
    "first_line",
    "held_ports",
    "login",
    "prepare_host",
    "remove_finished_oneoffs",
    "stop_graces",
]

STOP_TIMEOUT = int(Service.stop_grace_period)  # seconds from the stop signal to SIGKILL, by default


_Where = tuple[str, int, str, str]  # service, slot, host, task of an event


class Acts:
    """Carries out a plan's verbs and keeps what they did: the lines and events of each
    act, and the outcomes the core must learn (`outcomes`). `graces` (`stop_graces`) gives
    each task's stop grace period by its spec; `engine` is the controller's Docker
    engine, for images the controller pushes."""

    def __init__(
        self,
        executor: Executor,
        inventory: Inventory,
        cluster: str,
        now: float,
        mask: Masker,
        controller: str = "",
        *,
        graces: Mapping[tuple[str, str], int] | None = None,
        engine: ControllerEngine | None = None,
        fence: Callable[[], None] = lambda: None,
        ingress: Ingress | None = None,
        held_ports: Mapping[str, set[int]] | None = None,
    ):
        self.executor = executor
        self.controller = controller  # labels every task this controller starts
        self.fence = fence  # raises LeaseLost once this controller no longer holds the lock
        self.mask = mask  # the pass's masker: every line it records goes through it
        self.hosts = {h.name: h for h in inventory.hosts}
        self.cluster = cluster
        self.now = now
        self.graces = graces or {}
        self.engine: ControllerEngine = engine if engine is not None else LocalEngine()
        self.events: list[Event] = []
        self.done: list[str] = []
        self.failures: list[str] = []
        self.outcomes: list[ActOutcome] = []  # what the core must learn: it makes the events
        self.networked: set[str] = set()  # hosts where the cluster network is confirmed
        self.ingress = ingress
        self.held_ports = {h: set(p) for h, p in (held_ports or {}).items()}
        self.local_images: dict[str, LocalImage | None] = {}
        self.configs = ConfigPlacer(lambda host, argv, stdin: self.sh(host, argv, stdin))

    async def sh(
        self,
        host: str,
        argv: Sequence[str],
        stdin: str | None = None,
        *,
        timeout: float | None = None,
    ) -> Result:
        """One remote command, only while this controller still holds the writer lock
        (`Store.fence` raises LeaseLost otherwise: a deposed controller acts no more)."""
        self.fence()
        return await self.executor.run(self.hosts[host], argv, input=stdin, timeout=timeout)

    def record(self, kind: str, line: str, where: _Where) -> None:
        line = self.mask(line)
        service, slot, host, task = where
        self.events.append(Event(self.now, kind, line, service, slot, host, task))
        (self.failures if kind == "act-failed" else self.done).append(line)

    async def stop(self, s: Stop) -> None:
        c = s.container
        where = (c.service, c.slot, c.host, c.task)
        try:
            if s.failure:
                logs = await self.sh(c.host, logs_argv(c.id))
                tail = " | ".join((logs.stdout + logs.stderr).strip().splitlines()[-3:])
                line = f"{s.reason}; log: {tail}" if tail else s.reason
                line = self.mask.line(line)
                self.outcomes.append(ExitNoted(c.service, c.slot, line, s.reason))
            await self._stop_and_remove(c)
            verb = "stopped" if c.live else "removed"  # an exited task was never stopped here
            self.record("stop", f"{verb} {c.name} on {c.host}: {s.reason}", where)
        except ActFailed as exc:
            self.record("act-failed", f"stop {c.name} on {c.host}: {exc}", where)
        except (Unreachable, CommandTimeout) as exc:
            self.record("act-failed", f"stop {c.name}: {exc}", where)

    async def run(self, r: Run) -> None:
        svc = r.service
        where = (svc.name, r.slot, r.host, r.task)
        try:
            await self._ensure_image(r.host, svc, where)
            mounts = await self.configs.place(r.host, svc.configs, r.task)
            if r.host not in self.networked:
                await ensure_network(self.sh, r.host, self.cluster)
                self.networked.add(r.host)
            if r.replaces is not None:
                old = r.replaces
                await self._stop_and_remove(old)
                self.record("stop", f"stopped {old.name} on {old.host}: {r.reason}", where)
            if await self._start(r, mounts):
                self.record("run", f"started {r.name} on {r.host} ({r.reason}, {svc.image})", where)
            else:
                self.record("adopt", f"{r.name} already exists on {r.host}: adopted", where)
        except (ActFailed, ConfigPlaceError, PushError, Unreachable, CommandTimeout) as exc:
            line = self.mask(f"{r.name} on {r.host}: {exc}")
            self.outcomes.append(StartFailed(svc.name, r.slot, r.task, line))
            self.record("act-failed", f"run {line}", where)

    async def _start(self, r: Run, configs: Sequence[tuple[str, str]]) -> bool:
        """Run the task (its configs, placed, mounted); False when it exists already (a
        crash between act and record). A task with extra networks is created, connected
        to them, then started."""
        svc = r.service
        network = cluster_network(self.cluster)
        held = self.held_ports.setdefault(r.host, set())
        ports = task_ports.choose(self.ingress, svc, held, self.hosts[r.host].reached_at)
        held.update(ports.taken)
        if ports.refused:
            raise ActFailed(ports.refused)
        argv, env = run_argv(
            svc,
            self.cluster,
            r.slot,
            r.task,
            svc.spec_hash(),
            self.controller,
            network=network,
            routed=list(ports.bound),
            configs=configs,
            exposed_at=self.hosts[r.host].reached_at if svc.expose else None,
        )
        verb, staged = "docker run", bool(svc.networks or svc.secret_files)
        if staged:
            argv, verb = created_argv(argv), "docker create"
        res = await self.sh(r.host, argv, env or None)
        if _replayed(res, r.name):
            return False
        if res.exit_status != 0:
            raise ActFailed(f"{verb} failed: {first_line(res)}")
        if staged:
            await self._connect_and_start(r)
        return True

    async def _connect_and_start(self, r: Run) -> None:
        """Copy the secret files into the created task, join it to its extra networks and
        start it; on a failure it is removed, so the next pass starts it afresh."""
        try:
            if r.service.secret_files:
                tar = secret_files_tar(r.service.secret_files)
                copied = await self.sh(r.host, secret_files_argv(r.name), tar)
                if copied.exit_status != 0:
                    raise ActFailed(f"copying its secret files failed: {first_line(copied)}")
            for net in r.service.networks:
                await self._check(
                    r.host, network_connect_argv(net, r.name, r.service.name), f"joining {net}"
                )
            await self._check(r.host, start_argv(r.name), "docker start")
        except ActFailed:
            await self.sh(r.host, rm_argv([r.name], force=True))
            raise

    async def _stop_and_remove(self, c: Container) -> None:
        """Stop a task (its stop signal, then SIGKILL after its grace period) and remove it."""
        if c.live:
            grace = self.graces.get((c.service, c.spec), self.graces.get((c.service, "")))
            grace = STOP_TIMEOUT if grace is None else grace
            limit = grace + self.hosts[c.host].command_timeout
            await self._check(c.host, stop_argv(c.id, grace), "docker stop", timeout=limit)
        await self._check(c.host, rm_argv([c.id], force=True), "docker rm")

    async def _ensure_image(self, host: str, svc: Service, where: _Where) -> None:
        """Confirm the image on the host, or pull it (logging in first where the spec has
        credentials for its registry), or push it from the controller, before anything
        is stopped for it."""
        image = svc.image
        if svc.image_source == "controller":
            await self._push(host, image, where)
            return
        if (await self.sh(host, image_present_argv(image))).exit_status == 0:
            return
        if svc.registry_auth is not None:
            await login(self.sh, host, svc.registry_auth)
        pulled = await self.sh(host, pull_argv(image))
        if pulled.exit_status != 0:
            raise ActFailed(
                f"image {image} is not on {host} and cannot be pulled: {first_line(pulled)}"
            )

    async def _push(self, host: str, image: str, where: _Where) -> None:
        """image_source = "controller": stream the image from the controller's engine to a
        host that lacks it (docker save | docker load over SSH)."""
        if image not in self.local_images:
            self.local_images[image] = await self.engine.inspect(image)
        local = self.local_images[image]
        if local is None:
            raise ActFailed(
                f"image {image} is not in the controller's Docker engine "
                "(image_source = controller): build or pull it there first"
            )
        pushed = await push_image(self.executor, self.engine, self.hosts[host], local)
        if not pushed.skipped:
            self.record("push", f"pushed {image} to {host} ({pushed.figure()})", where)

    async def _check(
        self, host: str, argv: Sequence[str], what: str, *, timeout: float | None = None
    ) -> None:
        res = await self.sh(host, argv, timeout=timeout)
        if res.exit_status != 0 and "No such container" not in res.stderr:
            raise ActFailed(f"{what} failed: {first_line(res)}")


def _replayed(res: Result, name: str) -> bool:
    """The start failed only because this very container exists already (a replayed
    decision, which is adopted): Docker's name conflict for `name`, never a taken port."""
    conflict = name_conflict(res.stderr) if res.exit_status != 0 else None
    return conflict is not None and conflict.name == name


class ActFailed(Exception):
    """An act the host refused, in words fit for its event (and for `minidock events`)."""


class PrepareFailed(Exception):
    """What a host lacked for a one-off task, in one line (masked by the caller)."""


async def prepare_host(
    executor: Executor,
    inventory: Inventory,
    cluster: str,
    host: str,
    service: Service,
    name: str,
    *,
    engine: ControllerEngine | None = None,
) -> tuple[tuple[str, str], ...]:
    """What a task's start needs on `host`, done for a one-off task (`minidock.jobs`): the
    image (confirmed, pulled or pushed, as for a task), the configs placed, the cluster's
    network. Returns the config mounts; raises PrepareFailed saying what failed."""
    acts = Acts(executor, inventory, cluster, 0.0, Masker(()), engine=engine)
    try:
        await acts._ensure_image(host, service, (service.name, 0, host, name))
        mounts = await acts.configs.place(host, service.configs, name)
        await ensure_network(acts.sh, host, cluster)
    except (ActFailed, ConfigPlaceError, PushError, Unreachable, CommandTimeout) as exc:
        raise PrepareFailed(f"{name} on {host}: {exc}") from None
    return tuple(mounts)


async def remove_finished_oneoffs(acts: Acts, observed: Observed, state: ControllerState) -> None:
    """Remove every one-off task that has finished (its runner was interrupted, or the
    controller killed), but the runs their scheduled job collects (minidock.jobpass): one
    event each; a failure to remove is an act failure."""
    jobs = {n for n, ss in state.services.items() if ss.spec.schedule is not None}
    for o in finished_oneoffs(observed, jobs, awaited(state)):
        where = (o.service, 0, o.host, o.run)
        try:
            res = await acts.sh(o.host, rm_argv([o.id], force=True))
        except (Unreachable, CommandTimeout) as exc:
            acts.record("act-failed", f"remove {o.name} on {o.host}: {exc}", where)
            continue
        if res.exit_status == 0 or "No such container" in res.stderr:
            acts.record("oneoff-removed", f"removed finished one-off {o.name} on {o.host}", where)
        else:
            acts.record("act-failed", f"remove {o.name} on {o.host}: {first_line(res)}", where)


def first_line(res: Result, limit: int = 300) -> str:
    """What the command said, on one line and whole up to its cause: a cause that
    commands.errors.docker_error names, with Docker's words for it; else the message
    itself, whose end a long one keeps (Docker puts the cause last)."""
    known = docker_error(res.stderr)
    if known is not None:
        return f"{known.cause} ({known.said})"
    text = " ".join((res.stderr.strip() or res.stdout.strip()).split())
    if not text:
        return f"exit {res.exit_status}"
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


Shell = Callable[..., Awaitable[Result]]  # Acts.sh: (host, argv, stdin=None) -> Result


async def ensure_network(sh: Shell, host: str, cluster: str) -> None:
    """The cluster's network on the host: confirmed ours, or created. A network of that
    name that is not this cluster's is never touched: the act fails, naming it."""
    network = cluster_network(cluster)
    owner = await sh(host, network_owner_argv(network))
    if owner.exit_status != 0:
        created = await sh(host, network_create_argv(network, cluster))
        if created.exit_status != 0 and "already exists" not in created.stderr:
            raise ActFailed(f"creating network {network} failed: {first_line(created)}")
        owner = await sh(host, network_owner_argv(network))
    if owner.exit_status != 0 or owner.stdout.strip() != cluster:
        raise ActFailed(
            f"network {network} on {host} is not this cluster's (no label "
            f"minidock.cluster={cluster}): rename or remove it; MiniDock leaves it alone"
        )


async def login(sh: Shell, host: str, auth: RegistryAuth) -> None:
    """`docker login` on the host, the password on stdin (never in argv or a log)."""
    res = await sh(host, login_argv(auth.registry, auth.username), auth.password)
    if res.exit_status != 0:
        raise ActFailed(
            f"docker login to registry {auth.registry} as {auth.username} failed: {first_line(res)}"
        )


async def carry_out(
    acts: Acts,
    plan: Plan,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    now: float,
) -> None:
    """Every act of a recorded plan: the ingress proxies loaded with the pass's route
    table and the name proxies with its endpoints first (a draining task leaves them in
    the pass that decides it), then the stops, then the starts, then finished one-off
    tasks removed (not while the mass-loss guard holds the whole pass)."""
    await _route(acts, cluster, inventory, observed, plan.state, now)
    await _names(acts, plan, cluster, inventory, observed, now)
    await asyncio.gather(*(acts.stop(s) for s in plan.stop))
    await _by_host(plan.run, acts.run)
    if not plan.state.guard:
        await remove_finished_oneoffs(acts, observed, plan.state)


async def _route(
    acts: Acts,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
) -> None:
    """Load this pass's route table into every answering ingress proxy (before any stop:
    a draining task leaves the routes in the pass that decides it)."""
    if cluster.ingress is None or not observed.proxies:
        return
    table = route_table(cluster, inventory, observed, state, now)
    config = configs_for(table, cluster.ingress, state.tls)
    acts.fence()
    outcome = await converge_proxies(
        acts.sh, cluster.name, cluster.ingress, config, observed.proxies, now
    )
    for event in outcome.events:
        acts.events.append(event)
        (acts.failures if event.kind == "act-failed" else acts.done).append(event.message)


async def _names(
    acts: Acts,
    plan: Plan,
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    now: float,
) -> None:
    """Load this pass's endpoints into the name proxies of every host the cluster uses
    (it has a task there or starts one), before any stop; remove the others."""
    if not observed.names:
        return
    table = endpoint_table(cluster, inventory, observed, plan.state, now)
    used = {c.host for c in observed.containers()} | {r.host for r in plan.run}

    async def prepare(host: str) -> str:
        if host not in acts.networked:
            try:
                await ensure_network(acts.sh, host, cluster.name)
            except ActFailed as exc:
                return str(exc)
            acts.networked.add(host)
        return ""

    outcome = await converge_names(
        acts.sh, cluster.name, NAMES_IMAGE, table, observed.names, used, now, prepare
    )
    for event in outcome.events:
        acts.events.append(event)
        (acts.failures if event.kind == "act-failed" else acts.done).append(event.message)


def held_ports(observed: Observed) -> dict[str, set[int]]:
    """Host ports held on each answering host: every MiniDock task's and anything else's."""
    held: dict[str, set[int]] = {}
    for name, seen in observed.hosts.items():
        if seen.ok:
            ports = {p for c in (*seen.containers, *seen.others) for p in c.host_ports}
            ports |= seen.ports_in_use
            held[name] = {int(p.partition("/")[0]) for p in ports if p.partition("/")[0].isdigit()}
    return held


def stop_graces(state: ControllerState) -> dict[tuple[str, str], int]:
    """Each service's stop grace period in whole seconds, by (service, spec hash) for the
    specs the controller keeps (a task stops with the grace of the spec it runs), and by
    (service, "") for the current spec (a task of a spec no longer kept)."""
    graces: dict[tuple[str, str], int] = {}
    for name, ss in state.services.items():
        for spec in (ss.previous, ss.spec):
            if spec is not None:
                graces[(name, spec.spec_hash())] = grace_seconds(spec)
        graces[(name, "")] = grace_seconds(ss.spec)
    return graces


async def _by_host(runs: Sequence[Run], act: Callable[[Run], Awaitable[None]]) -> None:
    """Hosts in parallel; on one host, in plan order (due restarts first)."""
    per_host: dict[str, list[Run]] = {}
    for r in runs:
        per_host.setdefault(r.host, []).append(r)

    async def one(batch: list[Run]) -> None:
        for r in batch:
            await act(r)

    await asyncio.gather(*(one(b) for b in per_host.values()))
