"""A pure, in-memory fleet for unit tests of the decision core (never for integration).

`World` holds containers per host and applies a Plan's verbs the way the runner would,
with images that behave by name: `*:broken` never turns healthy, `crash:*` exits 1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from minidock.core import ControllerState, Plan, admit, reconcile
from minidock.core.scheduler import service_ports
from minidock.model import Cluster, Container, Host, HostObservation, Inventory, Observed, Service

_ids = itertools.count(1)


def host(name: str, *, cpus: float | None = 4, memory: int | None = 8 << 30, **labels: str) -> Host:
    return Host(
        name=name,
        address="127.0.0.1",
        labels=tuple(sorted(labels.items())),
        cpus=cpus,
        memory=memory,
        down_after=2,
    )


def svc(name: str = "web", image: str = "web:5", replicas: int = 1, **kw: object) -> Service:
    return Service(name=name, image=image, replicas=replicas, **kw)  # type: ignore[arg-type]


@dataclass
class World:
    hosts: list[Host]
    cluster_name: str = "test"
    now: float = 1000.0
    containers: dict[str, list[Container]] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)  # hosts that do not answer probes
    state: ControllerState = field(default_factory=ControllerState)
    cluster: Cluster | None = None
    generation: int = 0
    log: list[Plan] = field(default_factory=list)

    def __post_init__(self) -> None:
        for h in self.hosts:
            self.containers.setdefault(h.name, [])

    @property
    def inventory(self) -> Inventory:
        return Inventory("inventory.toml", tuple(self.hosts))

    def apply(self, *services: Service) -> None:
        self.generation += 1
        self.cluster = Cluster(self.cluster_name, "cluster.toml", "inventory.toml", services)
        self.state = admit(self.state, self.cluster, self.generation)

    def observe(self) -> Observed:
        return Observed(
            {
                h.name: HostObservation(h.name, False, error="timed out")
                if h.name in self.down
                else HostObservation(h.name, True, tuple(self.containers[h.name]))
                for h in self.hosts
            }
        )

    def plan(self) -> Plan:
        assert self.cluster is not None
        return reconcile(self.cluster, self.inventory, self.observe(), self.state, self.now)

    def step(self, dt: float = 1.0) -> Plan:
        """One pass: decide, act on reachable hosts, record, advance the clock."""
        plan = self.plan()
        self.act(plan)
        self.state = plan.state
        self.log.append(plan)
        self.tick(dt)
        return plan

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
        health = "none" if s.health is None else "starting"
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
            health=health,
            created_at=self.now,
            started_at=self.now,
            cpus=s.cpus,
            memory=s.memory,
            host_ports=service_ports(s),
        )
        self.containers[host_name].append(c)
        return c

    def tick(self, dt: float = 1.0) -> None:
        """Advance time: every container on a reachable host behaves for a moment."""
        self.now += dt
        for name, cs in self.containers.items():
            if name not in self.down:
                self.containers[name] = [self.behave(c) for c in cs]

    def behave(self, c: Container) -> Container:
        """How an image acts as time passes: health checks settle, crashing images exit."""
        if c.state == "running" and c.image.startswith("crash"):
            return replace(c, state="exited", exit_code=1, finished_at=self.now)
        if c.state == "running" and c.health == "starting":
            broken = c.image.endswith(":broken")
            return replace(c, health="unhealthy" if broken else "healthy")
        return c

    def converge(self, limit: int = 60, dt: float = 1.0) -> Plan:
        for _ in range(limit):
            plan = self.step(dt)
            if plan.converged:
                return plan
        raise AssertionError(f"no convergence in {limit} passes: {self.log[-1]}")

    # views --------------------------------------------------------------------------------
    def live(self, service: str | None = None) -> list[Container]:
        return [
            c
            for h, cs in self.containers.items()
            if h not in self.down
            for c in cs
            if c.live and (service is None or c.service == service)
        ]

    def slots(self, service: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for c in sorted(self.live(service), key=lambda c: c.slot):
            out.setdefault(c.slot, []).append(c.host)
        return out

    def kill_host(self, name: str) -> None:
        self.down.add(name)

    def revive_host(self, name: str) -> None:
        self.down.discard(name)
