"""`minidock hosts check` and `minidock hosts prepare` (docs/cli.md#hosts-check).

`check_hosts` runs each host's checks (minidock.commands.hostcheck: SSH and the host key,
the engine, the user's right to run docker, the kernel, free disk under the engine's root,
the clock, the proxies' images, the task ports) and returns every verdict with its fix;
`prepare_hosts` installs and starts the engine where the user can become root
(minidock.commands.hostprep) and loads the proxies' images. Neither changes the state or
takes its lock. The hosts are those of `--inventory`, else `$MINIDOCK_INVENTORY`, else the
applied spec's inventory; what the applied specs say (which hosts run an ingress proxy,
its image and task-port range) is used when a state holds them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from minidock.act.push import ControllerEngine, PushError, push_image
from minidock.commands import hostcheck as hc
from minidock.commands import hostprep as hp
from minidock.commands.haproxy import NAMES_IMAGE
from minidock.model import Host, Ingress, Inventory
from minidock.spec import SpecError, load_inventory
from minidock.spec.cluster import INVENTORY_ENV
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable
from minidock.store import StateLocation
from minidock.usecases.access import has_state, reading
from minidock.usecases.clusters import chosen
from minidock.usecases.common import chosen_hosts, fleet_inventory
from minidock.usecases.outcomes import BadInput, ExitCode
from minidock.usecases.runtime import Runtime, connected

__all__ = [
    "Fleetwide",
    "HostReport",
    "HostsCheckOutcome",
    "HostsPrepareOutcome",
    "PrepareReport",
    "check_hosts",
    "prepare_hosts",
]

CHECKS_AT_ONCE = 8  # hosts checked at the same time
LISTENER_READY = 10.0  # seconds a task-port listener may take to answer on its own host


@dataclass(frozen=True)
class Fleetwide:
    """What the applied specs say of the hosts: the hosts that run an ingress proxy (None:
    not known, every host counts as one), the ingress's image and task-port range."""

    ingress_hosts: frozenset[str] | None = None
    proxy_image: str = Ingress.image
    task_ports: tuple[int, int] = Ingress.task_ports

    def ingress(self, host: str) -> bool:
        return self.ingress_hosts is None or host in self.ingress_hosts

    def images(self, host: str, fleet_size: int) -> tuple[str, ...]:
        """The proxies' images a host needs: the ingress proxy's where it runs one, the
        name proxies' on every host of a fleet of several."""
        wanted = [self.proxy_image] if self.ingress(host) else []
        return (*wanted, NAMES_IMAGE) if fleet_size > 1 else tuple(wanted)


@dataclass(frozen=True)
class HostReport:
    host: str
    checks: tuple[hc.Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)


@dataclass(frozen=True)
class HostsCheckOutcome:
    inventory: str
    hosts: tuple[HostReport, ...]

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if all(h.ok for h in self.hosts) else ExitCode.FAILED

    def document(self) -> dict[str, object]:
        """The `--json` document (docs/cli.md#hosts-check)."""
        return {
            "inventory": self.inventory,
            "ok": all(h.ok for h in self.hosts),
            "hosts": [
                {
                    "host": h.host,
                    "ok": h.ok,
                    "checks": [
                        {"check": c.name, "ok": c.ok, "found": c.found, "fix": c.fix}
                        for c in h.checks
                    ],
                }
                for h in self.hosts
            ],
        }


def _inventory(directory: StateLocation, given: Path | None) -> Inventory:
    """`--inventory`, else $MINIDOCK_INVENTORY, else the applied specs' inventories."""
    path = (
        given
        if given is not None
        else (Path(os.environ[INVENTORY_ENV]) if os.environ.get(INVENTORY_ENV) else None)
    )
    if path is not None:
        try:
            return load_inventory(path)
        except SpecError as exc:
            raise BadInput(str(exc)) from None
    return fleet_inventory(directory, None)


def fleetwide(directory: StateLocation, inventory: Inventory) -> Fleetwide:
    """What the applied specs say of `inventory`'s hosts (nothing applied: every host
    counts as an ingress host, with the default image and range)."""
    if not has_state(directory):
        return Fleetwide()
    serving: set[str] = set()
    found: Ingress | None = None
    for held in chosen(directory, None):
        with reading(held.location) as store:
            latest = store.latest_generation()
        if latest is None:
            continue
        cluster = latest[1]
        if cluster.ingress is not None:
            found = found or cluster.ingress
            serving |= {h.name for h in inventory.hosts if cluster.ingress.serves(h)}
    if found is None:
        return Fleetwide(ingress_hosts=frozenset())
    return Fleetwide(frozenset(serving), found.image, found.task_ports)


# -- check ------------------------------------------------------------------------------------
Now = Callable[[], float]


async def _run(executor: Executor, host: Host, argv: Sequence[str]) -> Result:
    return await executor.run(host, argv, timeout=max(host.command_timeout, 10.0))


async def _local(
    executor: Executor, host: Host, fleet: Fleetwide, size: int, now: Now
) -> tuple[list[hc.Check], bool]:
    """Every check of one host but the task ports; and whether the host can run the
    task-port listener (its engine answered and holds the ingress proxy's image, which
    is looked for even where no proxy runs)."""
    try:
        kernel = await _run(executor, host, hc.kernel_argv())
    except (Unreachable, CommandTimeout) as exc:
        reason = exc.reason
        skipped = [hc.Check(n, None, "not checked: no SSH") for n in _AFTER_SSH]
        return [hc.ssh_check(host, reason), *skipped], False
    checks = [hc.ssh_check(host, None)]
    ident, sudo, version = await asyncio.gather(
        _run(executor, host, hc.id_argv()),
        _run(executor, host, hc.sudo_argv()),
        _run(executor, host, hc.engine_argv()),
    )
    check, engine = hc.engine_check(host, version.exit_status, version.stdout, version.stderr)
    checks.append(check)
    checks.append(hc.user_check(host, ident.stdout, sudo.exit_status == 0))
    checks.append(hc.kernel_check(kernel.stdout, fleet.ingress(host.name)))
    root = ""
    if check.ok and engine is not None:
        info = await _run(executor, host, hc.root_argv(engine.kind))
        root = hc.parse_root(info.stdout) or ""
    if root:
        df = await _run(executor, host, hc.disk_argv(root))
        checks.append(hc.disk_check(root, df.stdout))
    else:
        checks.append(hc.Check("disk", None, "not checked: the engine did not answer"))
    before = now()
    clock = await _run(executor, host, hc.clock_argv())
    checks.append(hc.clock_check(clock.stdout, before, now()))
    if not root:
        checks.append(hc.Check("images", None, "not checked: the engine did not answer"))
        return checks, False
    needed = fleet.images(host.name, size)
    looked = (*needed, *([] if fleet.proxy_image in needed else [fleet.proxy_image]))
    found = await asyncio.gather(*(_run(executor, host, hc.image_argv(i)) for i in looked))
    present = {
        i: r.exit_status == 0 and bool(r.stdout.strip()) for i, r in zip(looked, found, strict=True)
    }
    checks.append(hc.images_check(host.name, {i: present[i] for i in needed}))
    return checks, present[fleet.proxy_image]


_AFTER_SSH = ("engine", "user", "kernel", "disk", "clock", "images", "task ports")
_NO_INGRESS = hc.Check("task ports", True, "not needed: the applied specs route nothing")


async def _listen(
    executor: Executor, host: Host, image: str, span: tuple[int, int]
) -> tuple[int | None, str]:
    """Start the task-port listener on the highest free port of the range (three tries);
    the port, or None and why not."""
    await _run(executor, host, hc.listener_rm_argv())  # one left by an interrupted check
    why = ""
    for port in range(span[1], max(span[0], span[1] - 3) - 1, -1):
        started = await _run(executor, host, hc.listener_argv(image, host.reached_at, port))
        if started.exit_status == 0:
            ready = await _run(executor, host, hc.listener_ready_argv(port, LISTENER_READY))
            if ready.exit_status == 0:
                return port, ""
            why = f"the listener did not answer on the host itself: {ready.stderr.strip()[:120]}"
            await _run(executor, host, hc.listener_rm_argv())
            return None, why
        why = " ".join(started.stderr.split())[:160] or "docker run failed"
        await _run(executor, host, hc.listener_rm_argv())
    return None, why


async def _task_ports(
    executor: Executor, hosts: Sequence[Host], fleet: Fleetwide, able: dict[str, bool]
) -> dict[str, hc.Check]:
    """The task-port check of every host whose engine answered and holds the ingress
    image (`able`): a listener on each, reached from a container on every other."""
    image, span = fleet.proxy_image, fleet.task_ports
    usable = [h for h in hosts if able.get(h.name)]
    listening = await asyncio.gather(*(_listen(executor, h, image, span) for h in usable))
    ports = {h.name: p for h, p in zip(usable, listening, strict=True)}
    targets = {
        h.name: (h.reached_at, p[0])
        for h, p in zip(usable, listening, strict=True)
        if p[0] is not None
    }

    async def reach(source: Host) -> dict[str, bool]:
        others = [(name, t) for name, t in targets.items() if name != source.name]
        if not others:
            return {}
        res = await _run(executor, source, hc.reach_argv(image, [t for _, t in others]))
        seen = hc.parse_reached(res.stdout)
        return {name: seen.get(f"{a}:{p}", False) for name, (a, p) in others}

    try:
        reached = dict(
            zip(
                [h.name for h in usable],
                await asyncio.gather(*(reach(h) for h in usable)),
                strict=True,
            )
        )
    finally:
        await asyncio.gather(*(_run(executor, h, hc.listener_rm_argv()) for h in usable))
    checks: dict[str, hc.Check] = {}
    for h in hosts:
        if h.name not in ports:
            checks[h.name] = hc.Check(
                "task ports", None, f"not checked: needs the engine and {image}"
            )
            continue
        port, why = ports[h.name]
        sources: list[tuple[str, bool | None]] = []
        for other in hosts:
            if other.name == h.name:
                continue
            tried = reached.get(other.name)
            sources.append(
                (other.name, None if tried is None or h.name not in tried else tried[h.name])
            )
        checks[h.name] = hc.task_ports_check(h, span, port, why, sources)
    return checks


async def check_hosts(
    directory: StateLocation,
    runtime: Runtime,
    *,
    hosts: Sequence[str] = (),
    inventory: Path | None = None,
) -> HostsCheckOutcome:
    """Every check of each host (or those named); a host that fails does not stop the
    others. The task ports are tried between the hosts checked."""
    found = _inventory(directory, inventory)
    targets = chosen_hosts(found, hosts)
    fleet = fleetwide(directory, found)
    bound = asyncio.Semaphore(CHECKS_AT_ONCE)
    async with connected(runtime) as executor:

        async def one(host: Host) -> tuple[list[hc.Check], bool]:
            async with bound:
                return await _local(executor, host, fleet, len(found.hosts), runtime.clock.now)

        local = await asyncio.gather(*(one(h) for h in targets))
        if fleet.ingress_hosts == frozenset():
            ports = {h.name: _NO_INGRESS for h in targets}
        else:
            able = {h.name: ok for h, (_, ok) in zip(targets, local, strict=True)}
            ports = await _task_ports(executor, targets, fleet, able)
    reports = []
    for h, (checks, _) in zip(targets, local, strict=True):
        if checks[0].ok:
            checks.append(ports[h.name])
        reports.append(HostReport(h.name, tuple(checks)))
    return HostsCheckOutcome(found.path, tuple(reports))


# -- prepare ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrepareReport:
    """One host's prepare: each step said (done, already so, or why it failed)."""

    host: str
    steps: tuple[hp.Step, ...]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)


@dataclass(frozen=True)
class HostsPrepareOutcome:
    hosts: tuple[PrepareReport, ...]

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if all(h.ok for h in self.hosts) else ExitCode.FAILED


OnStep = Callable[[str, hp.Step], None]


async def prepare_hosts(
    directory: StateLocation,
    runtime: Runtime,
    hosts: Sequence[str],
    on_step: OnStep,
    *,
    inventory: Path | None = None,
) -> HostsPrepareOutcome:
    """Install and start the engine on each named host where the user can become root,
    add the user to the docker group, and load the proxies' images from the controller's
    engine (those it holds). Idempotent: a step already done is said so."""
    found = _inventory(directory, inventory)
    targets = chosen_hosts(found, hosts)
    fleet = fleetwide(directory, found)
    engine = runtime.engine()
    async with connected(runtime) as executor:

        async def one(host: Host) -> PrepareReport:
            steps: list[hp.Step] = []

            def said(step: hp.Step) -> None:
                steps.append(step)
                on_step(host.name, step)

            await _prepare_one(executor, host, said)
            if all(s.ok for s in steps):
                for image in fleet.images(host.name, len(found.hosts)):
                    said(await _load_image(executor, engine, host, image))
            return PrepareReport(host.name, tuple(steps))

        reports = await asyncio.gather(*(one(h) for h in targets))
    return HostsPrepareOutcome(tuple(reports))


async def _prepare_one(executor: Executor, host: Host, said: Callable[[hp.Step], None]) -> None:
    """The engine steps, in order; the first that fails ends them."""
    try:
        facts = await _run(executor, host, hp.facts_argv())
    except (Unreachable, CommandTimeout) as exc:
        said(hp.Step("connect", False, exc.reason))
        return
    known = hp.parse_facts(facts.stdout)
    for step in hp.plan(host.user, known):
        if step.argv is None:
            said(step)
            if not step.ok:
                return
            continue
        try:
            res = await executor.run(host, step.argv, timeout=hp.STEP_TIMEOUT)
        except (Unreachable, CommandTimeout) as exc:
            said(hp.Step(step.name, False, exc.reason))
            return
        if res.exit_status != 0:
            lines = (res.stderr.strip() or res.stdout.strip() or "no output").splitlines()
            said(hp.Step(step.name, False, f"exit {res.exit_status}: {lines[-1][:200]}"))
            return
        said(hp.Step(step.name, True, _done(step, res.stdout)))


def _done(step: hp.Step, stdout: str) -> str:
    """What a step did: the install's own last line names the packages the archive had."""
    last = stdout.strip().splitlines()[-1:]
    if step.name == "install" and last and last[0].startswith("installed "):
        return last[0]
    return step.what


async def _load_image(
    executor: Executor, engine: ControllerEngine, host: Host, image: str
) -> hp.Step:
    """Put a proxy image on the host from the controller's engine (as `minidock push`)."""
    name = f"image {image}"
    local = await engine.inspect(image)
    if local is None:
        held = await executor.run(host, hc.image_argv(image))
        if held.exit_status == 0:
            return hp.Step(name, True, f"{image} is on the host already")
        return hp.Step(
            name,
            False,
            f"{image} is neither on the host nor in the controller's engine: pull it "
            f"there, then minidock push {image} --hosts {host.name}",
        )
    try:
        pushed = await push_image(executor, engine, host, local)
    except (PushError, Unreachable, CommandTimeout) as exc:
        return hp.Step(name, False, str(exc))
    if pushed.sent == 0:
        return hp.Step(name, True, f"{image} is on the host already")
    return hp.Step(name, True, f"loaded {image} ({pushed.figure()})")
