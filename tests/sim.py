"""The fleet doubles for unit tests (never for integration), both driven the same way.

`World` is the model-level fleet: Containers per host, a Plan's verbs applied in memory,
the clock a number the test moves (`now`). It is what the decision-core tests use: fast,
and every container is there to edit by hand.

`RunnerWorld` is the same fleet one level down: each pass is the real
`minidock.runner.run_pass`, over `tests.fakes.FakeDocker` engines (argv level), with a real
`SQLiteStore` in a directory; the controller and the engines share one `Clock`. Scenario tests
run on both through the `world` fixture (tests/unit/conftest.py).

In both, images behave by tests/behaviour.py's table as the clock advances, and both offer
the same driving and viewing methods (`apply`, `step`, `converge`, `run_until`, `live`,
`slots`, `images`, `kill_host`, ...), so a scenario reads the same on either.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from minidock.commands.docker import volume_name
from minidock.commands.facts import parse_inspect
from minidock.core import ControllerState, Plan, Rollout, admit, reconcile
from minidock.core.scheduler import service_ports
from minidock.core.supervise import ready
from minidock.model import (
    Cluster,
    Container,
    Event,
    Host,
    HostObservation,
    Inventory,
    Observed,
    Service,
)
from minidock.observe import observe
from minidock.runner import PassResult, decide_pass, run_pass
from minidock.store.sqlite import SQLiteStore
from tests.behaviour import TICK, Clock, behave
from tests.fakes import FakeDocker

_ids = itertools.count(1)

# what the `world` fixture (tests/unit/conftest.py) gives: `world(3)` or `world([host(...)])`
MakeWorld = Callable[..., "World | RunnerWorld"]
# for a test that needs the runner's acts: the `world` fixture on RunnerWorld alone
ONLY_RUNNER = pytest.mark.parametrize("world", ["runner"], indirect=True)


def host(name: str, *, cpus: float | None = 4, memory: int | None = 8 << 30, **labels: str) -> Host:
    return Host(
        name=name,
        address="127.0.0.1",
        labels=tuple(sorted(labels.items())),
        cpus=cpus,
        memory=memory,
        down_after=2,
    )


def hosts(n: int) -> list[Host]:
    """host1..hostN, each with 4 cpus and 8 GiB."""
    return [host(f"host{i}") for i in range(1, n + 1)]


def svc(name: str = "web", image: str = "web:5", replicas: int = 1, **kw: object) -> Service:
    return Service(name=name, image=image, replicas=replicas, **kw)  # type: ignore[arg-type]


def assert_results(
    plan: Plan, *, run: int = 0, stop: int = 0, pending: int = 0, replaces: int | None = None
) -> None:
    """Nomad's assertResults: how many tasks a plan starts, stops and leaves pending (and,
    when given, how many of its runs replace a task in place, stop-first)."""
    got = (len(plan.run), len(plan.stop), len(plan.pending))
    assert got == (run, stop, pending), f"(run, stop, pending) = {got}: {plan}"
    if replaces is not None:
        assert sum(r.replaces is not None for r in plan.run) == replaces, plan


class FleetDouble:
    """What both doubles share: how tests drive a fleet and what they read of it."""

    hosts: list[Host]
    cluster_name: str
    log: list[Plan]  # every pass's plan, in order
    times: list[float]  # the clock at each of those passes
    state: ControllerState
    max_down_fraction: float = Inventory.max_down_fraction  # the mass-loss guard's share

    @property
    def inventory(self) -> Inventory:
        return Inventory("inventory.toml", tuple(self.hosts), self.max_down_fraction)

    def apply(self, *services: Service) -> None:
        """Store the services as the next desired-state generation (`minidock apply`)."""
        raise NotImplementedError

    def plan(self, state: ControllerState | None = None) -> Plan:
        raise NotImplementedError

    def step(self, dt: float = TICK) -> Plan:
        """One pass at the clock's time, acted on; then the clock moves on by `dt`."""
        raise NotImplementedError

    def reachable(self) -> dict[str, list[Container]]:
        """Every container on every host that answers, by host."""
        raise NotImplementedError

    def converge(self, limit: int = 60, dt: float = TICK) -> Plan:
        """Pass after pass until one has nothing left to do."""
        return self.run_until(lambda plan: plan.converged, limit, dt, what="convergence")

    def run_until(
        self,
        done: Callable[[Plan], bool],
        limit: int = 80,
        dt: float = TICK,
        what: str = "condition",
    ) -> Plan:
        """Pass after pass until `done(plan)`; the plan of the pass that made it."""
        for _ in range(limit):
            plan = self.step(dt)
            if done(plan):
                return plan
        raise AssertionError(f"no {what} in {limit} passes: {self.log[-1]}")

    def live(self, service: str | None = None) -> list[Container]:
        return [
            c
            for cs in self.reachable().values()
            for c in cs
            if c.live and (service is None or c.service == service)
        ]

    def slots(self, service: str) -> dict[int, list[str]]:
        """Slot -> the hosts of its live tasks."""
        out: dict[int, list[str]] = {}
        for c in sorted(self.live(service), key=lambda c: c.slot):
            out.setdefault(c.slot, []).append(c.host)
        return out

    def images(self, service: str = "web") -> list[str]:
        """The image of each live task, by slot."""
        return [c.image for c in sorted(self.live(service), key=lambda c: c.slot)]

    def healthy_slots(self, service: str = "web") -> int:
        return len({c.slot for c in self.live(service) if ready(c)})

    def rollout(self, service: str = "web") -> Rollout:
        return self.state.services[service].rollout

    def passes(self) -> list[tuple[float, Plan]]:
        """(the clock, the plan) of every pass so far."""
        return list(zip(self.times, self.log, strict=True))

    def kinds(self) -> list[str]:
        """The kind of every event the passes so far decided."""
        return [e.kind for p in self.log for e in p.events]


@dataclass(frozen=True)
class VolumeData:
    """A named volume on a host: what it holds ("" when empty: a task never ran on it, or
    it was made afresh) and whether the copy or restore that wrote it completed (`whole`:
    a copy cut off by a kill or a lost host leaves it half-written)."""

    content: str = ""
    whole: bool = True

    @property
    def empty(self) -> bool:
        return not self.content


@dataclass(frozen=True)
class Snapshot:
    """A backup of one slot's named volume (the spec's name of it), as restic keeps it."""

    id: str
    service: str
    slot: int
    volume: str
    content: str


@dataclass
class World(FleetDouble):
    """The model-level fleet: a Plan's verbs applied in memory, the way the runner would."""

    hosts: list[Host]
    cluster_name: str = "test"
    now: float = 1000.0
    containers: dict[str, list[Container]] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)  # hosts that do not answer probes
    state: ControllerState = field(default_factory=ControllerState)
    cluster: Cluster | None = None
    generation: int = 0
    log: list[Plan] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    max_down_fraction: float = Inventory.max_down_fraction
    held_ports: dict[str, frozenset[str]] = field(default_factory=dict)  # outside MiniDock
    # host -> Docker volume name -> what it holds; a task's named volumes are made empty
    # where it starts without them, and each live task writes to them as time passes
    volumes: dict[str, dict[str, VolumeData]] = field(default_factory=dict)
    mounts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # container id -> volumes
    snapshots: list[Snapshot] = field(default_factory=list)  # oldest first

    def __post_init__(self) -> None:
        for h in self.hosts:
            self.containers.setdefault(h.name, [])
            self.volumes.setdefault(h.name, {})

    def apply(self, *services: Service) -> None:
        self.generation += 1
        self.cluster = Cluster(self.cluster_name, "cluster.toml", "inventory.toml", services)
        self.state = admit(self.state, self.cluster, self.generation, prune=True)

    def observe(self) -> Observed:
        return Observed(
            {
                h.name: HostObservation(h.name, False, error="timed out")
                if h.name in self.down
                else HostObservation(
                    h.name,
                    True,
                    tuple(c for c in self.containers[h.name] if c.cluster == self.cluster_name),
                    others=tuple(
                        c for c in self.containers[h.name] if c.cluster != self.cluster_name
                    ),
                    ports_in_use=self.held_ports.get(h.name, frozenset()),
                )
                for h in self.hosts
            }
        )

    def plan(self, state: ControllerState | None = None) -> Plan:
        """What a pass would decide now (from `state`, else the world's), changing nothing."""
        assert self.cluster is not None
        now_state = self.state if state is None else state
        return reconcile(self.cluster, self.inventory, self.observe(), now_state, self.now)

    def step(self, dt: float = TICK) -> Plan:
        """One pass: decide, act on reachable hosts, record, advance the clock."""
        plan = self.plan()
        self.act(plan)
        self.record(plan)
        self.tick(dt)
        return plan

    def record(self, plan: Plan) -> None:
        """Keep the pass's decision as the runner's commit would (and log it)."""
        self.state = plan.state
        self.log.append(plan)
        self.times.append(self.now)

    def act(self, plan: Plan) -> None:
        for stop in plan.stop:
            self.remove(stop.container)
        for run in plan.run:
            if run.host in self.down:
                continue
            if run.replaces is not None:
                self.remove(run.replaces)
            self.start(run.service, run.slot, run.host, run.task)

    def remove(self, c: Container) -> None:
        if c.host not in self.down:
            self.containers[c.host] = [x for x in self.containers[c.host] if x.id != c.id]

    def start(self, s: Service, slot: int, host_name: str, task: str) -> Container:
        c = Container(
            id=f"c{next(_ids)}",
            name=f"{s.name}.{slot}.{task}",
            host=host_name,
            cluster=self.cluster_name,
            service=s.name,
            slot=slot,
            task=task,
            spec=s.spec_hash(),
            image=s.image,
            state="running",
            health="none" if s.health is None else "starting",
            created_at=self.now,
            started_at=self.now,
            cpus=s.cpus,
            memory=s.memory,
            host_ports=service_ports(s),
        )
        self.containers[host_name].append(c)
        named = self.named_volumes(s, slot)
        for name in named:  # `docker run` makes a missing named volume, empty
            self.volumes[host_name].setdefault(name, VolumeData())
        if named:
            self.mounts[c.id] = named
        return c

    def tick(self, dt: float = TICK) -> None:
        """Advance time: every container on a reachable host acts by the behaviour table;
        each live one writes to its named volumes."""
        self.now += dt
        for name, cs in self.containers.items():
            if name not in self.down:
                self.containers[name] = [behave(c, self.now) for c in cs]
                for c in self.containers[name]:
                    if c.live:
                        for volume in self.mounts.get(c.id, ()):
                            self.write(name, volume, c)

    # -- named volumes: what each holds, copied, restored, backed up
    def named_volumes(self, s: Service, slot: int) -> tuple[str, ...]:
        """The Docker volumes of the slot's named volumes (minidock's names for them)."""
        return tuple(
            volume_name(self.cluster_name, s.name, slot, v.source) for v in s.volumes if v.named
        )

    def write(self, host_name: str, volume: str, c: Container) -> None:
        """A task's write: a volume it began empty holds its own data from then on."""
        old = self.volumes[host_name].get(volume, VolumeData())
        lineage = old.content.partition("#")[0] or f"{c.name}@{self.now:g}"
        count = int(old.content.partition("#")[2] or 0) + 1
        self.volumes[host_name][volume] = VolumeData(f"{lineage}#{count}", old.whole)

    def volume(self, host_name: str, volume: str) -> VolumeData | None:
        return self.volumes.get(host_name, {}).get(volume)

    def copy_volume(self, source: str, target: str, volume: str, *, cut: bool = False) -> None:
        """A volume streamed from `source` to `target` afresh (the target's removed first);
        `cut`: the stream stops half-way, the target's copy half-written."""
        data = self.volumes[source].get(volume, VolumeData())
        self.volumes[target][volume] = VolumeData(data.content, whole=not cut)

    def restore_volume(self, target: str, volume: str, snapshot: str, *, cut: bool = False) -> None:
        """A snapshot streamed into a fresh volume on `target`; `cut`: half-written."""
        found = next(s for s in self.snapshots if s.id == snapshot)
        self.volumes[target][volume] = VolumeData(found.content, whole=not cut)

    def remove_volume(self, host_name: str, volume: str) -> None:
        self.volumes[host_name].pop(volume, None)

    def backup(self, s: Service, slot: int) -> list[Snapshot]:
        """`minidock backup SERVICE.SLOT`: a snapshot of each named volume of the slot's
        live task on a reachable host (none when it runs nowhere reachable)."""
        live = [c for c in self.live(s.name) if c.slot == slot]
        if not live:
            return []
        taken = []
        for v in s.volumes:
            if v.named:
                name = volume_name(self.cluster_name, s.name, slot, v.source)
                data = self.volumes[live[0].host].get(name, VolumeData())
                ident = f"{len(self.snapshots) + 1:08x}"
                taken.append(Snapshot(ident, s.name, slot, v.source, data.content))
                self.snapshots.append(taken[-1])
        return taken

    def reachable(self) -> dict[str, list[Container]]:
        return {h: cs for h, cs in self.containers.items() if h not in self.down}

    def kill_host(self, name: str) -> None:
        self.down.add(name)

    def revive_host(self, name: str) -> None:
        self.down.discard(name)


class RunnerWorld(FleetDouble):
    """The runner-level fleet: each pass is `run_pass` over FakeDocker and a real Store.

    The store lives in `directory` (the controller's state, generations and event log, as
    the CLI keeps them); setting `state` commits it there, as an operator command does.
    """

    def __init__(
        self,
        hosts: Sequence[Host],
        directory: Path,
        *,
        cluster_name: str = "test",
        now: float = 1000.0,
        images: Iterable[str] | None = None,
    ) -> None:
        self.hosts = list(hosts)
        self.cluster_name = cluster_name
        self.clock = Clock(now)
        self.docker = FakeDocker(clock=self.clock, images=images)
        self.executor = self.docker.executor()
        self.store = SQLiteStore.open(directory)
        self.log: list[Plan] = []
        self.times: list[float] = []
        self.results: list[PassResult] = []

    def close(self) -> None:
        self.store.close()

    @property
    def now(self) -> float:
        return self.clock.now

    @property
    def state(self) -> ControllerState:  # type: ignore[override]
        return self.store.load()

    @state.setter
    def state(self, state: ControllerState) -> None:
        self.store.commit(state, [])

    @property
    def cluster(self) -> Cluster | None:
        """The latest generation, as the store gives it back (what `reconcile` runs)."""
        latest = self.store.latest_generation()
        return None if latest is None else latest[1]

    def apply(self, *services: Service) -> None:
        cluster = Cluster(self.cluster_name, "cluster.toml", "inventory.toml", services)
        gen = self.store.next_generation_id()
        event = Event(self.now, "apply", f"applied cluster.toml as generation {gen}")
        state = admit(self.store.load(), cluster, gen, prune=True)
        self.store.commit(state, [event], generation=cluster, source_path="cluster.toml")

    def observe(self) -> Observed:
        return asyncio.run(observe(self.executor, self.hosts, self.cluster_name))

    def plan(self, state: ControllerState | None = None) -> Plan:
        """What a pass would decide now (`minidock plan`), recording and doing nothing."""
        assert self.cluster is not None
        now_state = self.state if state is None else state
        run = decide_pass(self.cluster, self.inventory, now_state, self.executor, clock=self.clock)
        return asyncio.run(run).plan

    def step(self, dt: float = TICK) -> Plan:
        """One pass of the real runner at the clock's time, then the clock moves on."""
        assert self.cluster is not None
        run = run_pass(self.cluster, self.inventory, self.store, self.executor, clock=self.clock)
        result = asyncio.run(run)
        self.results.append(result)
        self.log.append(result.plan)
        self.times.append(self.now)
        self.docker.advance(dt)
        return result.plan

    def reachable(self) -> dict[str, list[Container]]:
        return {
            h.name: list(parse_inspect(h.name, self.cluster_name, _dump(self.docker, h.name)))
            for h in self.hosts
            if h.name not in self.docker.down
        }

    def events(self) -> list[Event]:
        """The store's event log, oldest first."""
        return [e for _, e in self.store.events(limit=0)]

    def kill_host(self, name: str) -> None:
        self.docker.down.add(name)

    def revive_host(self, name: str) -> None:
        self.docker.down.discard(name)


def _dump(docker: FakeDocker, host_name: str) -> str:
    docs: list[dict[str, Any]] = docker.containers(host_name)
    return json.dumps(docs)
