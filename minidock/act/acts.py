"""The task verbs carried out on the hosts over SSH, and what every start needs first.

`Acts` does each verb of a plan's tasks: the image confirmed, pulled (after `docker login`)
or pushed; the task's configs placed; the cluster network ensured; `docker run` (or
create, connect, start) with the host ports the decision gave it, `docker stop` and
`docker rm`. It decides nothing: a failed act is an outcome for the core (`StartFailed`,
`ExitNoted`), which makes the state and events of it (`core.outcomes.fold`). Every remote
command goes through `Acts.sh`, which first checks that this controller still holds the
writer lock (`fence`). Its lines and events are as the hosts said them: the runner masks
them once, where they leave the pass (the report and the commit). The whole plan is
carried out by `minidock.act.carry`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from minidock.act.configs import ConfigPlaceError, ConfigPlacer
from minidock.act.push import ControllerEngine, LocalEngine, LocalImage, PushError, push_image
from minidock.commands.docker import (
    ConfigMount,
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
from minidock.core import (
    ActOutcome,
    ControllerState,
    ExitNoted,
    Run,
    StartFailed,
    Stop,
)
from minidock.model import (
    Container,
    EngineKind,
    Event,
    Inventory,
    RegistryAuth,
    Service,
    cluster_network,
)
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = [
    "STOP_TIMEOUT",
    "ActFailed",
    "Acts",
    "PrepareFailed",
    "ensure_image",
    "ensure_network",
    "first_line",
    "login",
    "prepare_host",
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
        controller: str = "",
        *,
        graces: Mapping[tuple[str, str], int] | None = None,
        engine: ControllerEngine | None = None,
        fence: Callable[[], None] = lambda: None,
    ):
        self.executor = executor
        self.inventory = inventory
        self.controller = controller  # labels every task this controller starts
        self.fence = fence  # raises LeaseLost once this controller no longer holds the lock
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
        self.local_images: dict[str, LocalImage | None] = {}
        self.configs = ConfigPlacer(lambda host, argv, stdin: self.sh(host, argv, stdin), cluster)
        self.engines: dict[str, EngineKind] = {}  # each host's engine, as the pass's probe read it
        self.begun = time.monotonic()  # after the decision: what a start's `after` runs from

    def engine_of(self, host: str) -> EngineKind:
        """The host's engine kind as the pass's probe read it (Docker when it was not):
        a volume's stream is made per engine (minidock.act.volumecopy)."""
        return self.engines.get(host, "docker")

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
        service, slot, host, task = where
        self.record_event(Event(self.now, kind, line, service, slot, host, task))

    def record_event(self, event: Event) -> None:
        """An act's event, and its line among the pass's acts (or its failures)."""
        self.events.append(event)
        (self.failures if event.kind == "act-failed" else self.done).append(event.message)

    async def stop(self, s: Stop) -> None:
        c = s.container
        where = (c.service, c.slot, c.host, c.task)
        try:
            if s.failure:
                logs = await self.sh(c.host, logs_argv(c.id))
                tail = " | ".join((logs.stdout + logs.stderr).strip().splitlines()[-3:])
                line = f"{s.reason}; log: {tail}" if tail else s.reason
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
            await ensure_image(self, r.host, svc, where)
            mounts = await self.configs.place(r.host, svc.configs, r.task, svc.name)
            if r.host not in self.networked:
                await ensure_network(self.sh, r.host, self.cluster)
                self.networked.add(r.host)
            await self._backoff(r)
            if r.replaces is not None:
                old = r.replaces
                await self._stop_and_remove(old)
                self.record("stop", f"stopped {old.name} on {old.host}: {r.reason}", where)
            if await self._start(r, mounts):
                self.record("run", f"started {r.name} on {r.host} ({r.reason}, {svc.image})", where)
            else:
                self.record("adopt", f"{r.name} already exists on {r.host}: adopted", where)
        except (ActFailed, ConfigPlaceError, PushError, Unreachable, CommandTimeout) as exc:
            line = f"{r.name} on {r.host}: {exc}"
            self.outcomes.append(StartFailed(svc.name, r.slot, r.task, line))
            self.record("act-failed", f"run {line}", where)

    async def _backoff(self, r: Run) -> None:
        """The rest of its slot's restart backoff (`Run.after`), counted from when these
        acts began, which is after the decision: never started sooner, whatever the
        deciding controller's clock says (an owner carrying an order counts from its own)."""
        left = self.begun + r.after - time.monotonic()
        if left > 0:
            await asyncio.sleep(left)

    async def _start(self, r: Run, configs: Sequence[ConfigMount]) -> bool:
        """Run the task (its configs, placed, mounted); False when it exists already (a
        crash between act and record). A task with extra networks is created, connected
        to them, then started."""
        svc, ports = r.service, r.ports
        network = cluster_network(self.cluster)
        if ports.refused:
            raise ActFailed(ports.refused)
        if r.gpus.refused:
            raise ActFailed(r.gpus.refused)
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
            gpus=r.gpus.ids,
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

    async def _check(
        self, host: str, argv: Sequence[str], what: str, *, timeout: float | None = None
    ) -> None:
        res = await self.sh(host, argv, timeout=timeout)
        if res.exit_status != 0 and "No such container" not in res.stderr:
            raise ActFailed(f"{what} failed: {first_line(res)}")


async def ensure_image(acts: Acts, host: str, svc: Service, where: _Where) -> None:
    """Confirm the image on the host, or pull it (logging in first where the spec has
    credentials for its registry), or push it from the controller, before anything
    is stopped for it."""
    image = svc.image
    if svc.image_source == "controller":
        await _push(acts, host, image, where, built=svc.build is not None)
        return
    if (await acts.sh(host, image_present_argv(image))).exit_status == 0:
        return
    if svc.registry_auth is not None:
        await login(acts.sh, host, svc.registry_auth)
    pulled = await acts.sh(host, pull_argv(image))
    if pulled.exit_status != 0:
        raise ActFailed(
            f"image {image} is not on {host} and cannot be pulled: {first_line(pulled)}"
        )


async def _push(acts: Acts, host: str, image: str, where: _Where, *, built: bool = False) -> None:
    """image_source = "controller" (and every `build`): stream the image from the
    controller's engine to a host that lacks it (docker save | docker load over SSH)."""
    if image not in acts.local_images:
        acts.local_images[image] = await acts.engine.inspect(image)
    local = acts.local_images[image]
    if local is None:
        how = (
            "(built by apply): apply the file again to build it"
            if built
            else "(image_source = controller): build or pull it there first"
        )
        raise ActFailed(f"image {image} is not in the controller's Docker engine {how}")
    pushed = await push_image(acts.executor, acts.engine, acts.hosts[host], local)
    if not pushed.skipped:
        acts.record("push", f"pushed {image} to {host} ({pushed.figure()})", where)


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
) -> tuple[ConfigMount, ...]:
    """What a task's start needs on `host`, done for a one-off task (`minidock.act.jobs`): the
    image (confirmed, pulled or pushed, as for a task), the configs placed, the cluster's
    network. Returns the config mounts; raises PrepareFailed saying what failed."""
    acts = Acts(executor, inventory, cluster, 0.0, engine=engine)
    try:
        await ensure_image(acts, host, service, (service.name, 0, host, name))
        mounts = await acts.configs.place(host, service.configs, name, service.name)
        await ensure_network(acts.sh, host, cluster)
    except (ActFailed, ConfigPlaceError, PushError, Unreachable, CommandTimeout) as exc:
        raise PrepareFailed(f"{name} on {host}: {exc}") from None
    return tuple(mounts)


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
