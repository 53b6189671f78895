"""The domain model: frozen values shared by every part of MiniDock.

Desired state (Inventory, Cluster, Service) comes from the TOML files; observed state
(HostObservation, Container) comes from `docker inspect` over SSH; an Event is one line of
the controller's log. What the controller *decided* (ControllerState and its host, slot and
rollout machines) lives in `minidock.core`. Nothing here does I/O. Durations are float
seconds, sizes are int bytes, times are float epoch seconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

# -- labels every MiniDock container carries -------------------------------------------------
LABEL_CLUSTER = "minidock.cluster"
LABEL_SERVICE = "minidock.service"
LABEL_SLOT = "minidock.slot"
LABEL_TASK = "minidock.task"
LABEL_SPEC = "minidock.spec"
LABEL_CONTROLLER = "minidock.controller"  # which state store's controller started the task

Order = Literal["stop-first", "start-first"]
FailureAction = Literal["pause", "rollback", "continue"]
RestartCondition = Literal["any", "on-failure", "none"]
DesiredState = Literal["running", "stopped"]
OnHostLoss = Literal["replace", "wait"]
Mode = Literal["replicated", "global"]
HostKeyPolicy = Literal["strict", "accept-new"]


def task_name(service: str, slot: int, task: str) -> str:
    """The name of one task's container: SERVICE.SLOT.TASK (SwarmKit's naming)."""
    return f"{service}.{slot}.{task}"


# -- inventory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Host:
    """One machine the controller reaches over SSH. cpus/memory None means unlimited."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    known_hosts: str | None = None
    host_key_policy: HostKeyPolicy = "strict"
    connect_timeout: float = 5.0
    command_timeout: float = 60.0
    probe_timeout: float = 3.0  # bound of each probe command (docker ps, docker inspect)
    down_after: int = 2
    labels: tuple[tuple[str, str], ...] = ()
    cpus: float | None = None
    memory: int | None = None

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: tuple[Host, ...]
    # more than this share of hosts failing one pass's probes holds the pass: the
    # controller is more likely the one cut off than most of its fleet gone at once
    max_down_fraction: float = 0.5

    def host(self, name: str) -> Host | None:
        return next((h for h in self.hosts if h.name == name), None)


# -- cluster spec -----------------------------------------------------------------------------
@dataclass(frozen=True)
class HealthCheck:
    cmd: tuple[str, ...]
    interval: float = 2.0
    timeout: float = 1.0
    retries: int = 3
    start_period: float = 0.0

    def deadline(self) -> float:
        """Longest a new task may take to turn healthy before it counts as failed."""
        return self.start_period + self.retries * self.interval + self.timeout


@dataclass(frozen=True)
class UpdatePolicy:
    """SwarmKit's update defaults, with rollback-friendly naming."""

    parallelism: int = 1
    delay: float = 0.0
    order: Order = "stop-first"
    monitor: float = 5.0
    failure_action: FailureAction = "pause"
    max_failure_ratio: float = 0.0


@dataclass(frozen=True)
class RestartPolicy:
    """max_attempts 0 means unlimited; window 0 means attempts never expire."""

    condition: RestartCondition = "any"
    delay: float = 1.0
    max_delay: float = 60.0
    max_attempts: int = 5
    window: float = 300.0


@dataclass(frozen=True)
class PortMapping:
    host_port: int
    container_port: int
    protocol: Literal["tcp", "udp"] = "tcp"

    def __str__(self) -> str:
        return f"{self.host_port}:{self.container_port}/{self.protocol}"


@dataclass(frozen=True)
class Volume:
    """A named volume (`source` a name: the task's data, kept on its host) or a bind mount
    (`source` an absolute host path) at `target` inside the container."""

    source: str
    target: str
    read_only: bool = False

    @property
    def named(self) -> bool:
        return not self.source.startswith("/")

    def __str__(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class Constraint:
    key: str
    op: Literal["==", "!="]
    value: str

    def allows(self, host: Host) -> bool:
        actual = host.label(self.key)
        if self.key == "node.hostname" or self.key == "host":
            actual = host.name
        return (actual == self.value) if self.op == "==" else (actual != self.value)

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.value}"


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    replicas: int = 1
    command: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    ports: tuple[PortMapping, ...] = ()
    cpus: float = 0.0
    memory: int = 0
    constraints: tuple[Constraint, ...] = ()
    spread: str | None = None
    depends_on: tuple[str, ...] = ()
    desired: DesiredState = "running"
    on_host_loss: OnHostLoss = "replace"  # "wait": never two copies; only drain/forget move it
    health: HealthCheck | None = None
    update: UpdatePolicy = field(default_factory=UpdatePolicy)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    # env values given by `secrets` (read on the controller at apply): masked everywhere
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    volumes: tuple[Volume, ...] = ()
    mode: Mode = "replicated"  # "global": one task on every eligible host (replicas unused)

    @property
    def pinned(self) -> bool:
        """A service with a named volume: each slot stays on the host that holds its data
        (never replaced elsewhere on host loss; a drain refuses it unless told)."""
        return any(v.named for v in self.volumes)

    def spec_hash(self) -> str:
        """Hash of everything that changes what a task runs: a new value means outdated.
        Worked out once per value (a pass asks it for every slot)."""
        known = self.__dict__.get("_spec_hash")
        if known is None:
            known = self._hash_of_run()
            object.__setattr__(self, "_spec_hash", known)
        return str(known)

    def _hash_of_run(self) -> str:
        run = {
            "image": self.image,
            "command": self.command,
            "env": sorted(self.env),
            "ports": sorted(str(p) for p in self.ports),
            "cpus": self.cpus,
            "memory": self.memory,
            "health": asdict(self.health) if self.health else None,
        }
        if self.volumes:
            run["volumes"] = [str(v) for v in self.volumes]
        if self.secrets:  # a digest: a changed secret rolls out, and no hash reveals it
            values = json.dumps(sorted(self.secrets)).encode()
            run["secrets"] = hashlib.sha256(values).hexdigest()
        blob = json.dumps(run, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cluster:
    name: str
    path: str
    inventory_path: str
    services: tuple[Service, ...]

    def service(self, name: str) -> Service | None:
        return next((s for s in self.services if s.name == name), None)


# -- observed ---------------------------------------------------------------------------------
ContainerState = Literal["created", "running", "paused", "restarting", "removing", "exited", "dead"]
Health = Literal["none", "starting", "healthy", "unhealthy"]


@dataclass(frozen=True)
class Container:
    """One MiniDock container as `docker inspect` reports it."""

    id: str
    name: str
    host: str
    cluster: str
    service: str
    slot: int
    task: str
    spec: str
    image: str
    state: ContainerState
    health: Health = "none"
    exit_code: int | None = None
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    health_log: str = ""
    cpus: float = 0.0
    memory: int = 0
    host_ports: tuple[str, ...] = ()  # "8080/tcp"
    controller: str = ""  # the controller id it is labelled with ("" before labels had one)

    @property
    def live(self) -> bool:
        return self.state in ("created", "running", "paused", "restarting")


@dataclass(frozen=True)
class HostObservation:
    """One probe of a host: either its containers or why it could not be seen."""

    host: str
    ok: bool
    containers: tuple[Container, ...] = ()
    error: str | None = None
    others: tuple[Container, ...] = ()  # other MiniDock clusters' tasks: capacity and ports
    # host ports held by anything but this cluster's containers ("8080/tcp", "53/udp"):
    # listening processes and other containers' published ports; empty when not read
    ports_in_use: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Observed:
    hosts: dict[str, HostObservation]

    def containers(self) -> list[Container]:
        return [c for o in self.hosts.values() if o.ok for c in o.containers]

    def load(self) -> list[Container]:
        """Every MiniDock task seen on an answering host, of any cluster: what fills it."""
        return [c for o in self.hosts.values() if o.ok for c in (*o.containers, *o.others)]


# -- the event log ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """Something the controller did or saw. `slot` 0 and empty strings mean "not about one".

    The core builds events; the store appends them in the same transaction as the state
    they explain. Messages are stored as given: redacting secrets is the producer's job."""

    at: float  # epoch seconds
    kind: str  # short machine-readable word, e.g. "host-down", "rollout-paused"
    message: str  # one human-readable line, already redacted
    service: str = ""
    slot: int = 0
    host: str = ""
    task: str = ""
