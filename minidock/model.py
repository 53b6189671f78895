"""The domain model: frozen values shared by every part of MiniDock.

Desired state (Inventory, Cluster, Service) comes from the TOML files; observed state
(HostObservation, Container) comes from `docker inspect` over SSH; an Event is one line of
the controller's log. What the controller *decided* (ControllerState and its host, slot and
rollout machines) lives in `minidock.core`. Nothing here does I/O. Durations are float
seconds, sizes are int bytes, times are float epoch seconds.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

# -- labels every MiniDock container carries -------------------------------------------------
LABEL_CLUSTER = "minidock.cluster"
LABEL_SERVICE = "minidock.service"
LABEL_SLOT = "minidock.slot"
LABEL_TASK = "minidock.task"
LABEL_SPEC = "minidock.spec"
LABEL_CONTROLLER = "minidock.controller"  # which state store's controller started the task
# a one-off task's kind ("run": `minidock run`): never a slot's task (it has no slot label)
LABEL_ONEOFF = "minidock.oneoff"
# the GPU device ids a task was given ("0,1"): held while it lives, never given to another
LABEL_GPUS = "minidock.gpus"

Order = Literal["stop-first", "start-first"]
FailureAction = Literal["pause", "rollback", "continue"]
Promote = Literal["auto", "manual"]
RestartCondition = Literal["any", "on-failure", "none"]
DesiredState = Literal["running", "stopped"]
OnHostLoss = Literal["replace", "wait", "restore"]
Mode = Literal["replicated", "global"]
HostKeyPolicy = Literal["strict", "accept-new"]
ImageSource = Literal["registry", "controller"]
EngineKind = Literal["docker", "podman"]
DOCKER_HUB = "docker.io"


def task_name(service: str, slot: int, task: str) -> str:
    """The name of one task's container: SERVICE.SLOT.TASK (SwarmKit's naming)."""
    return f"{service}.{slot}.{task}"


def cluster_network(cluster: str) -> str:
    """The user-defined bridge network of a cluster on each host: every task joins it, with
    its service name as alias, so tasks on one host reach each other by service name."""
    return f"minidock-{cluster}"


def image_registry(image: str) -> str:
    """The registry an image reference pulls from, by Docker's rule: the first path part
    when it has a '.' or a ':' or is 'localhost' ("127.0.0.1:5000/web:5" -> "127.0.0.1:5000"),
    else Docker Hub ("web:5", "library/web" -> "docker.io")."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


@dataclass(frozen=True)
class Engine:
    """A host's container engine as its probe read it (`docker version`: Docker's own, or
    Podman's through `podman-docker`): its kind, its version as the engine prints it
    ("20.10.24+dfsg1", "5.4.2") and whether it runs rootless (Docker under rootlesskit).
    Which engines MiniDock drives is core.engines' rule; docs/hosts.md says why."""

    kind: EngineKind
    version: str
    rootless: bool = False

    @property
    def release(self) -> tuple[int, int]:
        """(major, minor) of the version; (0, 0) when it does not start with them."""
        found = re.match(r"v?(\d+)\.(\d+)", self.version)
        return (int(found[1]), int(found[2])) if found else (0, 0)

    @property
    def name(self) -> str:
        """How a line names the engine: "Docker", "Podman"."""
        return "Podman" if self.kind == "podman" else "Docker"

    def __str__(self) -> str:
        rootless = " (rootless)" if self.rootless else ""
        return f"{self.name} {self.version}{rootless}"


# -- inventory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Jump:
    """One jump host (an OpenSSH `ProxyJump` hop) on the way to a host, as resolved from the
    inventory and the SSH config: reached first, then the next hop or the host through it.

    `identity_files` are offered besides the agent's keys (OpenSSH's `IdentityFile`);
    `identities_only` limits the agent to them; `identity_agent` is the agent socket (None:
    $SSH_AUTH_SOCK; "none": no agent). Its host key is verified against `known_hosts`.
    """

    address: str
    port: int = 22
    user: str = "root"
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    identity_agent: str | None = None
    known_hosts: str | None = None
    host_key_policy: HostKeyPolicy = "strict"


@dataclass(frozen=True)
class Host:
    """One machine the controller reaches over SSH. cpus/memory None means unlimited.

    `identity_file` (the inventory's key) is the only key offered when set, without the
    agent. Otherwise the keys of the SSH config's `IdentityFile` (`identity_files`), the
    agent (`identity_agent`, `identities_only` as on `Jump`) and the default keys are.
    `proxy_jump` are the hops connected through, first to last (empty: direct).
    """

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
    keepalive_interval: float = 15.0  # SSH keepalives of the pooled connection
    keepalive_count_max: int = 3  # unanswered keepalives before it is closed
    labels: tuple[tuple[str, str], ...] = ()
    cpus: float | None = None
    memory: int | None = None
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    identity_agent: str | None = None
    proxy_jump: tuple[Jump, ...] = ()
    private_address: str = ""  # where the other hosts reach it ("": its address)
    gpus: tuple[str, ...] = ()  # the GPU device ids tasks may be given, each to one task
    sudo: bool = False  # every docker command runs as `sudo -n docker ...` (minidock.ssh)

    @property
    def reached_at(self) -> str:
        """The address other hosts (and their ingress proxies) reach this host on."""
        return self.private_address or self.address

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: tuple[Host, ...]
    # more than this share of hosts failing one pass's probes holds the pass: the
    # controller is more likely the one cut off than most of its fleet gone at once
    max_down_fraction: float = 0.5
    # `[backup]`: the repository and password of services whose backup names neither
    backup: BackupPolicy | None = None

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
    # a canary (docs/rollouts.md#canary): `canary` tasks of the new spec beside the old
    # ones first, `canary_weight` percent of each route's requests to them (0: each is one
    # more upstream), promoted after `canary_monitor` healthy ("auto") or by `minidock
    # promote` ("manual", Nomad's default)
    canary: int = 0
    canary_weight: int = 0
    promote: Promote = "manual"
    canary_monitor: float = 300.0


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
    """A named volume (`source` a name: the task's data, kept on its host), a bind mount
    (`source` an absolute host path) or an anonymous volume (`source` empty: Docker makes
    one for each container) at `target` inside the container."""

    source: str
    target: str
    read_only: bool = False

    @property
    def named(self) -> bool:
        return bool(self.source) and not self.source.startswith("/")

    @property
    def anonymous(self) -> bool:
        return not self.source

    def __str__(self) -> str:
        if self.anonymous:
            return self.target
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ConfigFile:
    """A file from the controller at `target` inside each task, read-only (docs/configs.md):
    its text is kept in the desired state, and its digest names it on the hosts.

    `copy`, when set, is the path in the task of the writable copy the file is part of
    (docs/configs.md#writable-copies): `target` itself for a file, the directory's path for
    each file of a directory. A host holds one copy per service and content, mounted
    writable; its writes stay on that host."""

    target: str
    content: str = field(repr=False)
    copy: str = ""

    @property
    def digest(self) -> str:
        """The sha256 of the content (UTF-8): the file's name on every host."""
        return hashlib.sha256(self.content.encode()).hexdigest()


@dataclass(frozen=True)
class Build:
    """An image the controller builds with its own Docker engine (docs/compose.md#build):
    `docker build` of `context` (an absolute path on the controller) with `dockerfile`
    (absolute), `args`, `target` and `labels`, tagged `tag` (REPOSITORY:DIGEST12, the
    digest over the context's files as .dockerignore leaves them, the Dockerfile, args,
    target and labels) and `also` (the image name the file gave, when it gave one).
    `always`: `docker build` runs at every apply (Compose's `pull_policy: build`), not only
    when the controller's engine lacks the tag. The service's `image` is `tag`."""

    context: str
    dockerfile: str
    tag: str
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    also: str | None = None
    always: bool = False


@dataclass(frozen=True)
class SecretFile:
    """A secret given to each task as a file at `target` (Compose's service `secrets`;
    docs/secrets.md): its text is read on the controller at apply, sealed at rest, masked
    everywhere, and copied into the task's own filesystem before it starts, owned by
    `uid`:`gid` with `mode`; never written to a file of the host's."""

    target: str
    value: str = field(repr=False)
    uid: int = 0
    gid: int = 0
    mode: int = 0o444  # Compose's and Swarm's default: the task's users may read it

    def digest(self) -> str:
        """A sha256 over everything the task sees of it (changes roll out; shows nothing)."""
        seen = json.dumps([self.target, self.uid, self.gid, self.mode, self.value])
        return hashlib.sha256(seen.encode()).hexdigest()


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
class Ulimit:
    """One `docker run --ulimit NAME=SOFT:HARD` (-1: unlimited)."""

    name: str
    soft: int
    hard: int

    def __str__(self) -> str:
        return f"{self.name}={self.soft}:{self.hard}"


@dataclass(frozen=True)
class LogConfig:
    """The container's log driver and its options (`--log-driver`, `--log-opt`); no
    driver (""): the engine's default driver, with the options."""

    driver: str
    options: tuple[tuple[str, str], ...] = ()


TlsMode = Literal["off", "files", "acme"]
LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
# The ingress proxy's network: a namespace of its own (docker's default bridge), its ports
# published (minidock.commands.caddy: why not the host's network)
PROXY_NETWORK = "bridge"


@dataclass(frozen=True)
class RouteTls:
    """A route's TLS (docs/ingress.md#tls): `off` (plain HTTP); `files`: a certificate
    brought as files, read at apply (the PEM chain, leaf first, and its private key; the
    key is a secret: masked, sealed at rest, never shown; neither is shown in a plan);
    `acme`: a certificate the controller orders for the route's host."""

    mode: TlsMode = "off"
    cert: str = field(default="", repr=False)
    key: str = field(default="", repr=False)

    @property
    def on(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True)
class Route:
    """One ingress route of a service (docs/ingress.md): requests whose Host header is
    `domain` ("" for any) and whose path is `path` or under it go to the service's tasks
    that take traffic, on the container port `port`; with TLS on, over HTTPS (plain HTTP
    is redirected)."""

    domain: str
    path: str
    port: int
    tls: RouteTls = field(default=RouteTls(), metadata={"shown": "when-set"})

    def __str__(self) -> str:
        return f"{self.domain or '*'}{self.path} -> :{self.port}"


@dataclass(frozen=True)
class AcmeSettings:
    """`[ingress] acme`: the ACME directory the controller orders certificates from, the
    account's contact, the root that directory's HTTPS chains to when it is a private CA
    (PEM, read at apply; "" for the system's roots), and how long before its end a
    certificate is renewed (None, the default: when a third of its lifetime remains)."""

    email: str = ""
    directory: str = LETS_ENCRYPT
    ca_root: str = field(default="", repr=False)
    renew_before: float | None = None


@dataclass(frozen=True)
class Ingress:
    """The cluster's ingress (`[ingress]`): which hosts run a proxy (named in `hosts`, or
    those meeting `constraints`; neither: every host), its HTTP port and image, and the
    range of host ports MiniDock publishes routed tasks on. Its HTTPS port serves the
    routes with TLS on. With `request_metrics` each route is a server of its own in the
    proxy, which counts its requests (docs/observability.md#request-metrics); without,
    the front servers proxy directly and nothing is counted per route. `http2` lets the
    HTTPS server speak HTTP/2 (off by default: with it on, a config load refuses a
    request that crosses it on a new connection, which only some clients send again:
    docs/ingress.md#http2-and-config-loads)."""

    hosts: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    http_port: int = 80
    https_port: int = 443
    image: str = "caddy:2"
    task_ports: tuple[int, int] = (30000, 30999)  # first, last (inclusive)
    acme: AcmeSettings | None = None  # given when a route has tls = "acme"
    request_metrics: bool = True
    http2: bool = False

    def serves(self, host: Host) -> bool:
        """Whether `host` runs one of this ingress's proxies."""
        if self.hosts:
            return host.name in self.hosts
        return all(c.allows(host) for c in self.constraints)

    def owns_port(self, port: int) -> bool:
        """Whether a host port lies in the range MiniDock publishes routed tasks on."""
        return self.task_ports[0] <= port <= self.task_ports[1]

    def proxy_spec(self) -> str:
        """Hash of what each proxy container runs (its `minidock.ingress.spec` label): a
        new value means the proxies are replaced."""
        run = {
            "image": self.image,
            "http_port": self.http_port,
            "https_port": self.https_port,
            "network": PROXY_NETWORK,
        }
        blob = json.dumps(run, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


Concurrency = Literal["forbid", "allow"]


@dataclass(frozen=True)
class Schedule:
    """A scheduled job's schedule: a cron expression read in `timezone` (IANA name), and
    whether a run may start while the previous one still runs (docs/jobs.md)."""

    cron: str
    timezone: str = "UTC"
    concurrency: Concurrency = "forbid"


@dataclass(frozen=True)
class Hook:
    """A service's `hooks.before_update`: a command run once per new generation as a
    one-off task of the new spec, before the first task of it starts (docs/jobs.md)."""

    command: tuple[str, ...]
    timeout: float = 600.0  # seconds it may run; past it, it is removed and has failed


KEEP_RULES = ("last", "hourly", "daily", "weekly", "monthly", "yearly")  # restic's --keep-*


@dataclass(frozen=True)
class Keep:
    """How many snapshots `restic forget --prune` keeps by each of its rules (0: that rule
    keeps none); all 0: no retention, every snapshot is kept."""

    last: int = 0
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0

    def rules(self) -> tuple[tuple[str, int], ...]:
        """The rules given, in restic's order: (rule, count)."""
        return tuple((r, getattr(self, r)) for r in KEEP_RULES if getattr(self, r))


@dataclass(frozen=True)
class BackupPolicy:
    """A pinned service's `backup` (docs/backups.md): the restic repository its volumes'
    snapshots go to (a path on the controller or a restic backend URL), where the
    repository's password is read (a secret source as JSON, its paths absolute, with the
    directory a command runs in: never the value, which is read when a backup runs), when
    backups run on their own (a cron expression in `timezone`, or None), what is kept
    after each backup, and whether each task is stopped while its volumes are copied.
    The inventory's `[backup]` gives a repository and password a service leaves out.
    Not in the spec hash: changing it changes no task."""

    repository: str = ""
    password_source: str = field(default="", repr=False)
    schedule: str | None = None
    timezone: str = "UTC"
    keep: Keep = field(default_factory=Keep)
    stop: bool = False
    # a restore drill (`minidock backup verify`): the command run in a throwaway container
    # of the newest snapshot (argv; () runs none), and when drills run on their own
    verify: tuple[str, ...] = ()
    verify_schedule: str | None = None


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for the registry a service's image is pulled from: the runner logs a
    host in with them (password on stdin) before a pull. The password is masked everywhere
    and never part of a spec hash."""

    registry: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Autoscale:
    """A service's `autoscale` (docs/autoscale.md): its count follows the ingress's own
    request metrics within `min`..`max`, towards one target: `requests_per_task` (requests
    a second each task takes, over every route) or `p95` (seconds: the 95th percentile of
    the routes' request durations). Readings are taken over `window` seconds; the count
    goes down only `cooldown` seconds after its last change. Not in the spec hash: it
    changes no task."""

    min: int
    max: int
    requests_per_task: float | None = None
    p95: float | None = None
    window: float = 60.0
    cooldown: float = 180.0

    def bounded(self, count: int) -> int:
        """`count` brought within min..max."""
        return max(self.min, min(self.max, count))


# The most slots one service may have (docs/formats.md#at-most-1000-replicas): every pass
# builds a service's slot range whole, keeps a record per slot in the state and places
# each empty slot over every host, so the count is held in memory, never streamed. 1000 is
# past what one service of a fleet driven over SSH runs, and a pass builds it at once.
MAX_REPLICAS = 1000


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    replicas: int = 1  # 0 .. MAX_REPLICAS
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
    # "restore": a pinned slot's newest snapshot restored elsewhere once its host has been
    # down this long (seconds; docs/backups.md#failover-from-backups)
    restore_after: float = 300.0
    health: HealthCheck | None = None
    update: UpdatePolicy = field(default_factory=UpdatePolicy)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    # env values given by `secrets` (read on the controller at apply): masked everywhere
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    volumes: tuple[Volume, ...] = ()
    configs: tuple[ConfigFile, ...] = ()  # sorted by target; read-only unless `copy`
    # secrets as files in the task (sorted by target), copied in before it starts
    secret_files: tuple[SecretFile, ...] = field(default=(), repr=False)
    mode: Mode = "replicated"  # "global": one task on every eligible host (replicas unused)

    @property
    def pinned(self) -> bool:
        """A service with a named volume: each slot stays on the host that holds its data
        (never replaced elsewhere on host loss; a drain refuses it unless told)."""
        return any(v.named for v in self.volumes)

    # -- the docker run surface (docs/formats.md); each one is in the spec hash when set
    labels: tuple[tuple[str, str], ...] = ()  # never a minidock.* key (the spec refuses it)
    user: str | None = None
    workdir: str | None = None
    entrypoint: tuple[str, ...] | None = None  # () clears the image's entrypoint
    stop_signal: str | None = None
    stop_grace_period: float = 10.0  # seconds from the stop signal to SIGKILL, on every stop
    init: bool = False
    read_only: bool = False
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    ulimits: tuple[Ulimit, ...] = ()
    log: LogConfig | None = None
    # (name, address), sorted by name, a name's addresses in the order given
    extra_hosts: tuple[tuple[str, str], ...] = ()
    dns: tuple[str, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()  # (key, value), sorted by key
    networks: tuple[str, ...] = ()  # existing networks joined besides the cluster's own
    devices: tuple[str, ...] = ()  # HOST[:CONTAINER[:PERMISSIONS]] (docker run --device)
    privileged: bool = False
    shm_size: int = 0  # bytes of /dev/shm (0: the engine's default, 64 MiB)
    tmpfs: tuple[str, ...] = ()  # PATH[:OPTIONS] (docker run --tmpfs)
    pids_limit: int = 0  # most processes in the task (0: no limit set)
    # GPUs each task is given, its own device ids of its host's inventory `gpus` (never
    # shared; scheduled like cpus and memory: minidock.core.scheduler.GpuFilter)
    gpus: int = 0
    # where hosts get the image: its registry (pulled), or this controller (pushed over SSH)
    image_source: ImageSource = "registry"
    # built by the controller at apply (`image` is its content tag); not in the hash: the
    # tag is (a changed context is a changed tag)
    build: Build | None = None
    ingress: tuple[Route, ...] = ()  # routes from the cluster's ingress to its tasks
    drain_timeout: float = 5.0  # out of every route this long before a routed task stops
    # container ports reached as SERVICE:PORT from any task, through the name proxies
    expose: tuple[int, ...] = ()
    # credentials for the image's registry (from the spec's [registries]), not in the hash
    registry_auth: RegistryAuth | None = field(default=None, repr=False)
    # a scheduled job: no slots (replicas 0), one run per scheduled time; not in the hash
    schedule: Schedule | None = None
    # hooks.before_update: run once per new generation before its first task; not in the hash
    before_update: Hook | None = None
    # `backup` (docs/backups.md), and hooks.before_backup, run in each task before its
    # volumes are copied; neither is in the hash
    backup: BackupPolicy | None = None
    before_backup: Hook | None = None
    # `autoscale`: the count follows the routes' request metrics within bounds (core/autoscale.py);
    # `replicas` is its starting count; not in the hash
    autoscale: Autoscale | None = None
    # HMAC-SHA256 of the secret values under the state's digest key (`keyed`, done by the
    # store at apply); the spec hash takes it instead of the values. "" while unkeyed: a
    # service an older MiniDock stored, whose hash keeps the older, unkeyed form
    secret_digest: str = field(default="", repr=False)

    def spec_hash(self) -> str:
        """Hash of everything that changes what a task runs: a new value means outdated.
        Options left at their defaults are not hashed, so adding an option to MiniDock
        leaves the hashes of running tasks as they were (no rollout on upgrade). Worked
        out once per value (a pass asks it for every slot)."""
        known = self.__dict__.get("_spec_hash")
        if known is None:
            known = self._hash_of_run()
            object.__setattr__(self, "_spec_hash", known)
        return str(known)

    def keyed(self, key: bytes) -> Service:
        """This service with its `secret_digest` made under `key` (nothing to digest: as
        it is). The digest covers every value `spec_hash` would otherwise take in clear:
        `secrets`, secret files (with path, owner and mode), env values under
        secret-looking keys."""
        seen = _secret_seen(self)
        if seen is None:
            return self if not self.secret_digest else replace(self, secret_digest="")
        digest = hmac.new(key, seen.encode(), hashlib.sha256).hexdigest()
        return self if digest == self.secret_digest else replace(self, secret_digest=digest)

    def routed_ports(self) -> list[int]:
        """The container ports the service's routes send requests to, each once."""
        return sorted({r.port for r in self.ingress})

    def _hash_of_run(self) -> str:
        keyed = bool(self.secret_digest)
        run: dict[str, Any] = {
            "image": self.image,
            "command": self.command,
            "env": sorted((k, "" if keyed and looks_secret(k) else v) for k, v in self.env),
            "ports": sorted(str(p) for p in self.ports),
            "cpus": self.cpus,
            "memory": self.memory,
            "health": asdict(self.health) if self.health else None,
        }
        if self.volumes:
            run["volumes"] = [str(v) for v in self.volumes]
        if self.ingress:  # each routed container port is published (route names are not run)
            run["ingress_ports"] = self.routed_ports()
        if self.expose:  # each exposed port is published, and the task has no name alias
            run["expose"] = sorted(self.expose)
        if self.configs:  # by digest: a changed content rolls out, an unchanged one does not
            run["configs"] = [f"{c.target}:{c.digest}" + _copy_mark(c) for c in self.configs]
        if keyed:  # a keyed digest: a changed secret rolls out, and no hash reveals it
            run["secret_digest"] = self.secret_digest
            run["secrets"] = [k for k, _ in sorted(self.secrets)]
            run["secret_files"] = [f.target for f in self.secret_files]
        else:  # an older MiniDock's unkeyed form, kept so its tasks stay current until the
            run |= _unkeyed_digests(self)  # next apply keys the spec (docs/secrets.md)
        defaults = _service_defaults()
        for name in RUN_OPTIONS:
            value = getattr(self, name)
            if value != defaults[name]:
                run[name] = _plain(value)
        blob = json.dumps(run, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _copy_mark(config: ConfigFile) -> str:
    """How a config's entry in the spec hash says it is part of a writable copy (nothing
    for a read-only one, so that its hash is the one it always had)."""
    return f":copy={config.copy}" if config.copy else ""


def _secret_seen(service: Service) -> str | None:
    """The secret values the spec hash covers, as one JSON text (None: the service has
    none)."""
    env = sorted((k, v) for k, v in service.env if looks_secret(k))
    files = [[f.target, f.uid, f.gid, f.mode, f.value] for f in service.secret_files]
    if not (env or service.secrets or files):
        return None
    return json.dumps({"env": env, "secrets": sorted(service.secrets), "files": files})


def _unkeyed_digests(service: Service) -> dict[str, str]:
    """The spec hash's secret part as MiniDock wrote it before keyed digests: a plain
    sha256 of the values (an oracle for short ones: only the hash of a service stored by an
    older MiniDock, or built without a state, takes it)."""
    run: dict[str, str] = {}
    if service.secrets:
        values = json.dumps(sorted(service.secrets)).encode()
        run["secrets"] = hashlib.sha256(values).hexdigest()
    if service.secret_files:
        digests = json.dumps([f.digest() for f in service.secret_files]).encode()
        run["secret_files"] = hashlib.sha256(digests).hexdigest()
    return run


def keyed_cluster(cluster: Cluster, key: bytes) -> Cluster:
    """`cluster` with each service's secret digest made under `key` (`Service.keyed`)."""
    services = tuple(s.keyed(key) for s in cluster.services)
    return cluster if services == cluster.services else replace(cluster, services=services)


# Service fields that change what a task runs, besides those spec_hash names one by one
RUN_OPTIONS = (
    "labels",
    "user",
    "workdir",
    "entrypoint",
    "stop_signal",
    "stop_grace_period",
    "init",
    "read_only",
    "cap_add",
    "cap_drop",
    "ulimits",
    "log",
    "extra_hosts",
    "dns",
    "sysctls",
    "networks",
    "devices",
    "privileged",
    "shm_size",
    "tmpfs",
    "pids_limit",
    "gpus",
)


@functools.cache
def _service_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in fields(Service)}


def _plain(value: Any) -> Any:
    """A model value as JSON-ready lists and dicts (for hashing)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# env keys whose values are secrets whatever they say (PRODUCT.md): masked like `secrets`,
# sealed at rest, and `validate`/`apply` say to move them to `secrets`
SECRET_LOOKING = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$", re.IGNORECASE)


def looks_secret(key: str) -> bool:
    """Whether an env key looks like it names a secret (`*PASSWORD*`, `*SECRET*`,
    `*TOKEN*`, `*_KEY`, `*CREDENTIAL*`, `*PRIVATE*`, in any case)."""
    return SECRET_LOOKING.search(key) is not None


def secret_values(service: Service) -> tuple[str, ...]:
    """A service's values that are secrets, whatever their length: every `secrets` value,
    every secret file's text (whole, and each of its lines, as output shows it line by
    line), its registry password, its env values under secret-looking keys, and the
    private keys of its routes' certificates (whole and line by line too). Other env
    values are configuration, shown as they are."""
    env = (value for key, value in service.env if looks_secret(key))
    auth = service.registry_auth
    registry = (auth.password,) if auth is not None else ()
    texts = (*(f.value for f in service.secret_files), *(r.tls.key for r in service.ingress))
    lines = (p.strip() for text in texts for p in (text, *text.splitlines()))
    found = (*env, *(value for _, value in service.secrets), *lines, *registry)
    return tuple(dict.fromkeys(v for v in found if v))


@dataclass(frozen=True)
class Cluster:
    name: str
    path: str
    inventory_path: str
    services: tuple[Service, ...]
    ingress: Ingress | None = None  # `[ingress]`, or its defaults when a service has routes

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
    # (container port, host port) of each TCP port docker published: routed tasks' upstreams
    published: tuple[tuple[int, int], ...] = ()
    controller: str = ""  # the controller id it is labelled with ("" before labels had one)
    gpus: tuple[str, ...] = ()  # the GPU device ids it was given (its `minidock.gpus` label)

    @property
    def live(self) -> bool:
        return self.state in ("created", "running", "paused", "restarting")


@dataclass(frozen=True)
class OneOff:
    """One one-off task's container (`minidock run`) as `docker inspect` reports it: labelled
    with its cluster, service, kind and run id but no slot, so it is never a slot's task,
    never counted, never placed around; a pass removes it once it has finished."""

    id: str
    name: str
    host: str
    service: str
    run: str  # its run id (the minidock.task label)
    kind: str  # the minidock.oneoff label: "run" (`minidock run`), "job" (a scheduled run)
    state: ContainerState
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        """Whether it will never run again (docker removes nothing by itself: we do)."""
        return self.state in ("exited", "dead")


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
    # why it could not be seen, without what names this host (its address, its key): the
    # same words for every host it happens to, so failures group by it; "" when ok
    cause: str = ""
    oneoffs: tuple[OneOff, ...] = ()  # this cluster's one-off tasks: never counted as tasks
    # its docker answered slowly (ok: after probe_timeout and twice its usual), or (not
    # ok) not within the probe's answer deadline while its sshd answered: never a failure
    slow: bool = False
    seconds: float | None = None  # how long the probe took to answer (None: no answer)
    engine: Engine | None = None  # its engine and version, as read (None: not read)
    engine_read: bool = False  # `engine` was read by this probe (not remembered)
    # when this controller had it, on its pass's clock: the probe's answer, or the read of
    # its owner's written observation (None: not stamped; the decision's time stands)
    seen_at: float | None = None
    # its engine answered but MiniDock does not drive it (core.engines.refusal): not ok,
    # `error` names the engine and the feature; never counted towards down_after
    refused: bool = False

    @property
    def why_not(self) -> str:
        """The failure's host-independent cause, else its own line ("" when it answered)."""
        return "" if self.ok else (self.cause or self.error or "no answer")


@dataclass(frozen=True)
class ProxyObservation:
    """One ingress host's proxy as a probe found it: whether it runs (and of which proxy
    spec), and what its loaded config routes to: the config's digest and every upstream
    address it dials. `ok` False: the host or its docker did not answer (`error` says)."""

    host: str
    ok: bool
    running: bool = False
    spec: str = ""  # the proxy container's spec label ("" when there is none)
    digest: str = ""  # of the config it has loaded ("" when none is loaded)
    upstreams: frozenset[str] = frozenset()  # "ADDRESS:PORT" its loaded routes send to
    error: str = ""
    # its loaded routes: (Host, path, upstreams) each, as in the config (a paused route's
    # upstreams: those its held requests go to)
    routes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # its loaded routes that do not serve: (Host, path, "maintenance" or "paused") each
    modes: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class NameProxy:
    """One service's name proxy on a host as a probe found it (docs/discovery.md): whether
    it runs, the digest of its loaded config, and the servers it sends to as (exposed port,
    task id, "ADDRESS:HOSTPORT")."""

    service: str
    running: bool
    digest: str = ""
    servers: tuple[tuple[int, str, str], ...] = ()

    @property
    def upstreams(self) -> frozenset[str]:
        return frozenset(address for _, _, address in self.servers)


@dataclass(frozen=True)
class RouteCounts:
    """One ingress proxy's cumulative counters of one route, as its metrics read them
    (docs/autoscale.md): requests answered since the proxy started, and the duration
    histogram's cumulative buckets as (upper bound, count), the finite ones (+Inf is
    `requests`). A route the proxy has not counted a request of yet has none."""

    service: str
    route: str  # its label: Host (`*` for any) and path
    requests: float
    buckets: tuple[tuple[float, float], ...] = ()


HostNames = dict[str, NameProxy] | None  # a host's name proxies by service; None: no answer


@dataclass(frozen=True)
class Observed:
    hosts: dict[str, HostObservation]
    proxies: dict[str, ProxyObservation] = field(default_factory=dict)  # by ingress host
    names: dict[str, HostNames] = field(default_factory=dict)  # by host (probed when exposing)
    # each ingress host's proxy's route counters (read while a service autoscales; None: its
    # metrics could not be read, which is no data, never zero traffic)
    traffic: dict[str, tuple[RouteCounts, ...] | None] = field(default_factory=dict)

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
    cluster: str = ""  # whose log it is in: set when read from a store, never stored
