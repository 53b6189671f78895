"""Docker commands as pure argv lists, and parsers for what those commands print.

Nothing here runs a command. Each builder returns a true argv (one list element per
argument, never pre-quoted); the executor in `minidock.ssh` quotes it once for the remote
shell. Each parser turns a recorded output into model values; the tests feed it real
`docker inspect` captures (tests/data/docker/). Secrets never enter an argv: `run_argv`
returns the service env separately, as env-file text for the command's stdin.
"""

from __future__ import annotations

import io
import json
import math
import re
import shlex
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast, get_args

from minidock.core.watching import listing_key
from minidock.model import (
    LABEL_CLUSTER,
    LABEL_CONTROLLER,
    LABEL_ONEOFF,
    LABEL_SERVICE,
    LABEL_SLOT,
    LABEL_SPEC,
    LABEL_TASK,
    Container,
    ContainerState,
    Health,
    HealthCheck,
    OneOff,
    SecretFile,
    Service,
    Volume,
)

__all__ = [
    "CONFIG_DIR",
    "ENV_FILE_STDIN",
    "HEALTH_LOG_MAX",
    "PS_FORMAT",
    "REDACTED",
    "WATCHED_EVENTS",
    "DaemonDown",
    "DockerError",
    "ImageNotFound",
    "NameConflict",
    "NoSuchNetwork",
    "ParseError",
    "PortTaken",
    "config_check_argv",
    "config_check_input",
    "config_dir_argvs",
    "config_finish_argvs",
    "config_mount_args",
    "config_write_argv",
    "container_name",
    "created_argv",
    "daemon_down",
    "docker_duration",
    "docker_error",
    "env_file_text",
    "event_since",
    "events_argv",
    "exec_argv",
    "grace_seconds",
    "health_shell_command",
    "image_id_size_argv",
    "image_not_found",
    "image_present_argv",
    "inspect_argv",
    "load_argv",
    "login_argv",
    "logs_argv",
    "name_conflict",
    "network_connect_argv",
    "network_create_argv",
    "network_owner_argv",
    "no_such_network",
    "oneoff_create_argv",
    "oneoff_name",
    "oneoff_start_argv",
    "parse_event",
    "parse_ids",
    "parse_inspect",
    "parse_inspect_all",
    "parse_listing",
    "parse_oneoffs",
    "parse_proc_net",
    "parse_published_ports",
    "parse_time",
    "port_taken",
    "ports_held_outside",
    "proc_net_argv",
    "proc_net_missing_only",
    "ps_argv",
    "published_ports_argv",
    "pull_argv",
    "rm_argv",
    "run_argv",
    "run_options_args",
    "save_argv",
    "secret_files_argv",
    "secret_files_tar",
    "start_argv",
    "stop_argv",
    "task_logs_argv",
    "volume_name",
    "volume_spec",
]

ENV_FILE_STDIN = "/dev/stdin"
# a health check's output as Docker keeps it (4096 bytes): whole, so the masker sees every
# secret in it before a line is cut (minidock.masking)
HEALTH_LOG_MAX = 4096
REDACTED = "***"
# configs on a host, each named by its content's sha256; relative to the SSH user's home
# (where every session starts), made absolute once per host by `config_dir_argvs`
CONFIG_DIR = ".minidock/configs"

_CONTAINER_STATES: frozenset[str] = frozenset(get_args(ContainerState))
_HEALTH_STATES: frozenset[str] = frozenset(get_args(Health))
_ID_RE = re.compile(r"[0-9a-f]{12,64}")
_SLOT_RE = re.compile(r"[1-9][0-9]*")
_TIME_RE = re.compile(
    r"(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?(?P<tz>Z|[+-]\d\d:\d\d)"
)


class ParseError(ValueError):
    """Docker printed something that is not what the command promises.

    Callers treat it as a failed probe: unparseable output is never "no containers".
    """


# -- names ------------------------------------------------------------------------------------
def container_name(service: str, slot: int, task: str) -> str:
    """The container name of one task: SERVICE.SLOT.TASK (SwarmKit's naming)."""
    return f"{service}.{slot}.{task}"


def _operand(value: str, what: str) -> str:
    """A positional operand for docker: refuse what docker would read as an option."""
    if not value or value.startswith("-"):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


# -- observe: ps + inspect --------------------------------------------------------------------
PS_FORMAT = "{{.ID}} {{.State}} {{.Status}}"  # the listing a probe keys containers by


def ps_argv(cluster: str | None) -> list[str]:
    """List every container (any state) labelled with this cluster (None: with any
    cluster), a line each: its full id, its state and its status ("Up 3 minutes
    (healthy)"), from which a probe knows which containers changed (`parse_listing`)."""
    label = f"{LABEL_CLUSTER}={cluster}" if cluster is not None else LABEL_CLUSTER
    return ["docker", "ps", "-a", "--no-trunc", "--filter", f"label={label}", "--format", PS_FORMAT]


WATCHED_EVENTS = ("die", "start", "health_status", "oom", "destroy")


def events_argv(cluster: str, since: str = "") -> list[str]:
    """Follow the docker events of this cluster's containers that can change a decision
    (`WATCHED_EVENTS`), a line each: the action, the container id and the event's time in
    nanoseconds on the host's clock; with `since` (a time `event_since` made), replay
    those from then on first."""
    argv = ["docker", "events", "--filter", "type=container"]
    argv += ["--filter", f"label={LABEL_CLUSTER}={cluster}"]
    for name in WATCHED_EVENTS:
        argv += ["--filter", f"event={name}"]
    if since:
        argv += ["--since", since]
    return [*argv, "--format", "{{.Action}} {{.ID}} {{.TimeNano}}"]


def parse_event(line: str) -> tuple[str, str, int] | None:
    """(action, container id, time in ns) of a line `events_argv` printed; None for any
    other line (docker's own warnings)."""
    words = line.split()
    if len(words) < 3 or not _ID_RE.fullmatch(words[-2]) or not words[-1].isdigit():
        return None
    return " ".join(words[:-2]), words[-2], int(words[-1])


def event_since(nanoseconds: int) -> str:
    """`docker events --since` of an event's time: seconds.nanoseconds, on the host's
    clock (no skew with the controller's)."""
    return f"{nanoseconds // 10**9}.{nanoseconds % 10**9:09d}"


def running_ids_argv() -> list[str]:
    """List every running container on the host, whoever started it, one full id a line
    (for `parse_ids`): the lab's readiness probe, "docker answers and runs N containers"."""
    return ["docker", "ps", "-q", "--no-trunc"]


def parse_ids(stdout: str) -> list[str]:
    """The container ids printed by `ps_argv` (each line's first word) or by
    `running_ids_argv`; a line that does not start with an id is an error."""
    return list(parse_listing(stdout))


def parse_listing(stdout: str) -> dict[str, str]:
    """Each container `ps_argv` listed, by id: its key (core.watching.listing_key: id,
    state, health), in listing order. A line that does not start with an id is an error."""
    listed: dict[str, str] = {}
    for line in stdout.splitlines():
        words = line.split(maxsplit=2)
        if not words:
            continue
        if not _ID_RE.fullmatch(words[0]):
            raise ParseError(f"docker ps printed a line that is not a container id: {line!r}")
        state = words[1] if len(words) > 1 else ""
        listed[words[0]] = listing_key(words[0], state, words[2] if len(words) > 2 else "")
    return listed


def inspect_argv(ids: Sequence[str]) -> list[str]:
    """Inspect the given containers (never images of the same name)."""
    return ["docker", "inspect", "--type", "container", *(_operand(i, "id") for i in ids)]


def parse_time(value: object) -> float | None:
    """Docker's RFC 3339 time (nanoseconds allowed) as epoch seconds; zero time is None."""
    if not isinstance(value, str) or not value:
        return None
    m = _TIME_RE.fullmatch(value)
    if m is None:
        raise ParseError(f"not an RFC 3339 time: {value!r}")
    if m["base"].startswith("0001-01-01"):
        return None  # Go's zero time.Time: "never"
    base = datetime.fromisoformat(m["base"] + m["tz"])  # 3.11 reads "Z" and "+02:00"
    frac = float("0." + m["frac"]) if m["frac"] else 0.0
    return base.timestamp() + frac


def _mapping(value: object) -> Mapping[str, Any]:
    return cast(Mapping[str, Any], value) if isinstance(value, dict) else {}


def _labels_ok(labels: Mapping[str, Any], cluster: str) -> bool:
    if labels.get(LABEL_CLUSTER) != cluster:
        return False
    fields = (labels.get(k) for k in (LABEL_SERVICE, LABEL_TASK, LABEL_SPEC, LABEL_SLOT))
    if not all(isinstance(v, str) and v for v in fields):
        return False
    return bool(_SLOT_RE.fullmatch(str(labels[LABEL_SLOT])))


def _host_ports(bindings: Mapping[str, Any]) -> tuple[str, ...]:
    """Each published HOST port as "8080/tcp" (PortBindings keys are container ports)."""
    ports: set[tuple[int, str]] = set()
    for key, binds in bindings.items():
        proto = key.partition("/")[2] or "tcp"
        for bind in binds if isinstance(binds, list) else []:
            host_port = str(_mapping(bind).get("HostPort") or "")
            if host_port.isdigit():
                ports.add((int(host_port), proto))
    return tuple(f"{port}/{proto}" for port, proto in sorted(ports))


def _published(*bindings: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """(container port, host port) of each published TCP port (routed and exposed tasks'
    upstreams) in any of `bindings` (PortBindings, NetworkSettings.Ports)."""
    pairs: set[tuple[int, int]] = set()
    for key, binds in (item for found in bindings for item in found.items()):
        port, _, proto = key.partition("/")
        if (proto or "tcp") != "tcp" or not port.isdigit():
            continue
        for bind in binds if isinstance(binds, list) else []:
            host_port = str(_mapping(bind).get("HostPort") or "")
            if host_port.isdigit():
                pairs.add((int(port), int(host_port)))
    return tuple(sorted(pairs))


def _health_log(health: Mapping[str, Any]) -> str:
    log = health.get("Log")
    if not isinstance(log, list) or not log:
        return ""
    output = _mapping(log[-1]).get("Output")
    return output.strip()[:HEALTH_LOG_MAX] if isinstance(output, str) else ""


def _container(host_name: str, cluster: str, raw: Mapping[str, Any]) -> Container | None:
    config = _mapping(raw.get("Config"))
    labels = _mapping(config.get("Labels"))
    if not _labels_ok(labels, cluster):
        return None  # not ours: never counted, never touched
    state = _mapping(raw.get("State"))
    status = state.get("Status")
    cid = raw.get("Id")
    if status not in _CONTAINER_STATES or not isinstance(cid, str) or not cid:
        raise ParseError(f"container without a usable Id/State.Status: {cid!r} {status!r}")
    health = _mapping(state.get("Health"))
    health_status = health.get("Status")
    host_config = _mapping(raw.get("HostConfig"))
    exit_code = state.get("ExitCode")
    return Container(
        id=cid,
        name=str(raw.get("Name") or "").lstrip("/"),
        host=host_name,
        cluster=cluster,
        service=labels[LABEL_SERVICE],
        slot=int(labels[LABEL_SLOT]),
        task=labels[LABEL_TASK],
        controller=str(labels.get(LABEL_CONTROLLER) or ""),
        spec=labels[LABEL_SPEC],
        image=str(config.get("Image") or ""),
        state=cast(ContainerState, status),
        health=cast(Health, health_status if health_status in _HEALTH_STATES else "none"),
        exit_code=(
            int(exit_code) if status in ("exited", "dead") and isinstance(exit_code, int) else None
        ),
        created_at=parse_time(raw.get("Created")) or 0.0,
        started_at=parse_time(state.get("StartedAt")),
        finished_at=parse_time(state.get("FinishedAt")),
        health_log=_health_log(health),
        cpus=int(host_config.get("NanoCpus") or 0) / 1e9,
        memory=int(host_config.get("Memory") or 0),
        host_ports=_host_ports(_mapping(host_config.get("PortBindings"))),
        published=_published(
            _mapping(host_config.get("PortBindings")),
            # the ports docker picked for an exposed port published on no given host port
            _mapping(_mapping(raw.get("NetworkSettings")).get("Ports")),
        ),
    )


def parse_inspect_all(host_name: str, stdout: str) -> tuple[Container, ...]:
    """Every MiniDock container of any cluster in `docker inspect` output (what other
    clusters run on a host counts against its capacity and ports)."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"docker inspect printed invalid JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ParseError("docker inspect did not print a JSON array of objects")
    clusters = {_mapping(_mapping(d.get("Config")).get("Labels")).get(LABEL_CLUSTER) for d in data}
    found = (
        c
        for name in sorted(x for x in clusters if isinstance(x, str) and x)
        for c in parse_inspect(host_name, name, stdout)
    )
    return tuple(found)


def parse_oneoffs(host_name: str, cluster: str, stdout: str) -> tuple[OneOff, ...]:
    """This cluster's one-off tasks in `docker inspect` output (labelled minidock.oneoff,
    with no slot): what a pass removes once finished. Raises ParseError as parse_inspect."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"docker inspect printed invalid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ParseError("docker inspect did not print a JSON array of objects")
    found = (_oneoff(host_name, cluster, _mapping(d)) for d in data)
    return tuple(o for o in found if o is not None)


def _oneoff(host_name: str, cluster: str, raw: Mapping[str, Any]) -> OneOff | None:
    labels = _mapping(_mapping(raw.get("Config")).get("Labels"))
    kind, service, run = (labels.get(k) for k in (LABEL_ONEOFF, LABEL_SERVICE, LABEL_TASK))
    if labels.get(LABEL_CLUSTER) != cluster or LABEL_SLOT in labels:
        return None
    if not all(isinstance(v, str) and v for v in (kind, service, run)):
        return None
    state = _mapping(raw.get("State"))
    status, cid = state.get("Status"), raw.get("Id")
    if status not in _CONTAINER_STATES or not isinstance(cid, str) or not cid:
        raise ParseError(f"container without a usable Id/State.Status: {cid!r} {status!r}")
    code = state.get("ExitCode")
    return OneOff(
        id=cid,
        name=str(raw.get("Name") or "").lstrip("/"),
        host=host_name,
        service=str(service),
        run=str(run),
        kind=str(kind),
        state=cast(ContainerState, status),
        exit_code=int(code) if status in ("exited", "dead") and isinstance(code, int) else None,
        started_at=parse_time(state.get("StartedAt")),
        finished_at=parse_time(state.get("FinishedAt")),
    )


def parse_inspect(host_name: str, cluster: str, stdout: str) -> tuple[Container, ...]:
    """This cluster's containers in `docker inspect` output; foreign ones are skipped.

    Raises ParseError when the output is not a JSON array of objects, or when one of
    this cluster's containers lacks an id or a known state.
    """
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"docker inspect printed invalid JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ParseError("docker inspect did not print a JSON array of objects")
    found = (_container(host_name, cluster, d) for d in data)
    return tuple(c for c in found if c is not None)


# -- observe: host ports held outside the cluster ----------------------------------------------
Protocol = Literal["tcp", "udp"]
PROC_NET_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
_PROC_NET_ROW = re.compile(
    r"\s*\d+:\s+(?P<addr>[0-9A-Fa-f]+):(?P<port>[0-9A-Fa-f]{4})\s+[0-9A-Fa-f]+:[0-9A-Fa-f]{4}"
    r"\s+(?P<state>[0-9A-Fa-f]{2})\s"
)
_PROC_NET_MISSING = re.compile(r"cat: /proc/net/(?:tcp6|udp6): No such file or directory")
_PUBLISHED = re.compile(
    r"(?:\[[0-9A-Fa-f:.]*\]|[0-9A-Fa-f:.]*):(?P<lo>\d+)(?:-(?P<hi>\d+))?"
    r"->\d+(?:-\d+)?/(?P<proto>tcp|udp|sctp)"
)
_EXPOSED = re.compile(r"\d+(?:-\d+)?/(?:tcp|udp|sctp)")


def proc_net_argv(protocol: Protocol) -> list[str]:
    """Print the host's IPv4 and IPv6 socket tables of one protocol (the kernel's own
    view: every process and docker-proxy on the host, in or out of any container)."""
    return ["cat", f"/proc/net/{protocol}", f"/proc/net/{protocol}6"]


def proc_net_missing_only(stderr: str) -> bool:
    """`cat` failed only because a kernel without IPv6 has no tcp6/udp6 table."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return bool(lines) and all(_PROC_NET_MISSING.fullmatch(line) for line in lines)


def parse_proc_net(stdout: str, protocol: Protocol) -> frozenset[str]:
    """Host ports in use in /proc/net/{tcp,udp}[6] output, as "22/tcp": TCP sockets in
    LISTEN, UDP sockets bound to a port (any state: a bound UDP socket holds its port)."""
    ports: set[str] = set()
    for line in stdout.splitlines():
        if not line.strip() or line.split()[0] == "sl":
            continue
        row = _PROC_NET_ROW.match(line)
        if row is None:
            raise ParseError(f"/proc/net/{protocol} printed an unexpected line: {line.strip()!r}")
        port = int(row["port"], 16)
        if port and (protocol == "udp" or row["state"].upper() == PROC_NET_LISTEN):
            ports.add(f"{port}/{protocol}")
    return frozenset(ports)


def published_ports_argv() -> list[str]:
    """Every running container's `minidock.cluster` label (empty when it has none) and its
    published ports, one container a line: "CLUSTER<TAB>PORTS"."""
    return [
        "docker",
        "ps",
        "--no-trunc",
        "--format",
        f'{{{{.Label "{LABEL_CLUSTER}"}}}}\t{{{{.Ports}}}}',
    ]


def parse_published_ports(stdout: str) -> list[tuple[str, frozenset[str]]]:
    """(cluster label, published host ports) per container in `published_ports_argv` output.

    Docker prints ports like "0.0.0.0:8080->80/tcp, :::8080->80/tcp" (ranges as
    "8000-8001->8000-8001/tcp"); an exposed but unpublished port ("80/tcp") holds nothing.
    """
    found: list[tuple[str, frozenset[str]]] = []
    for line in stdout.splitlines():
        if not line:
            continue
        cluster, tab, shown = line.partition("\t")
        if not tab:
            raise ParseError(f"docker ps printed a line without a tab: {line.strip()!r}")
        ports: set[str] = set()
        for item in (i.strip() for i in shown.split(",")):
            published = _PUBLISHED.fullmatch(item)
            if published is not None:
                lo = int(published["lo"])
                hi = int(published["hi"] or lo)
                ports.update(f"{p}/{published['proto']}" for p in range(lo, hi + 1))
            elif item and not _EXPOSED.fullmatch(item):
                raise ParseError(f"docker ps printed an unknown port: {item!r}")
        found.append((cluster.strip(), frozenset(ports)))
    return found


def ports_held_outside(
    cluster: str, listening: Iterable[str], published: Iterable[tuple[str, frozenset[str]]]
) -> frozenset[str]:
    """Host ports in use by anything but this cluster's containers: every listening socket
    and every other container's published port, minus what this cluster's own containers
    publish (docker-proxy listens for those too; they are counted per Container)."""
    published = list(published)
    own = {p for label, ports in published if label == cluster for p in ports}
    other = {p for label, ports in published if label != cluster for p in ports}
    return frozenset((set(listening) | other) - (own - other))


# -- act --------------------------------------------------------------------------------------
def docker_duration(seconds: float) -> str:
    """A duration for docker flags: whole seconds as "2s", anything finer as "500ms"."""
    ms = round(seconds * 1000)
    if ms < 0:
        raise ValueError(f"negative duration: {seconds}")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def health_shell_command(cmd: Sequence[str]) -> str:
    """The health command as one string for the *container's* /bin/sh (CMD-SHELL).

    The docker CLI can only express CMD-SHELL, so each word is quoted for the container's
    shell. This is a value handed to docker, not the remote command line: that one is
    quoted, once, by the SSH executor.
    """
    return " ".join(shlex.quote(word) for word in cmd)


def env_file_text(env: Iterable[tuple[str, str]]) -> str:
    """KEY=VALUE lines in docker's --env-file format (values are taken verbatim).

    Docker reads env files line by line and keeps the value after the first "=" as is,
    so a value must not hold a line break or NUL; a key must be a plain word.
    """
    lines: list[str] = []
    for key, value in env:
        if not key or key[0] == "#" or any(c.isspace() or c in "=\0" for c in key):
            raise ValueError(f"invalid env name: {key!r}")
        if any(c in value for c in "\n\r\0"):
            raise ValueError(f"env {key}: value must not contain a line break or NUL")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def _health_args(health: HealthCheck) -> list[str]:
    return [
        "--health-cmd",
        health_shell_command(health.cmd),
        "--health-interval",
        docker_duration(health.interval),
        "--health-timeout",
        docker_duration(health.timeout),
        "--health-retries",
        str(health.retries),
        "--health-start-period",
        docker_duration(health.start_period),
    ]


def run_argv(
    service: Service,
    cluster: str,
    slot: int,
    task: str,
    spec_hash: str,
    controller: str = "",
    *,
    network: str | None = None,
    routed: Sequence[tuple[str, int, int]] = (),
    configs: Sequence[tuple[str, str]] = (),
    exposed_at: str | None = None,
) -> tuple[list[str], str]:
    """`docker run -d` for one task, and the env-file text to send on its stdin.

    The env values travel only in the returned text (read by docker from /dev/stdin),
    never in the argv, so they cannot show in `ps` on the host or in any logged command.
    Docker's own restart policy is off: restarts are the controller's decision. With
    `network` (the cluster's, `model.cluster_network`) the task joins it under its service
    name; the service's extra `networks` are joined after (`network_connect_argv`).
    `routed` publishes each routed container port as (bind address, host port, container
    port): where the ingress proxies reach the task (docs/ingress.md). With `exposed_at`
    (the host's private address) each exposed port is published on it, on a host port
    docker picks, and the task has no alias: its service's name is its name proxies'
    (docs/discovery.md).
    `configs` are (host path, path in the task) pairs, placed by `minidock.configs`.
    """
    argv = ["docker", "run", "-d", "--name", container_name(service.name, slot, task)]
    argv += _task_labels(cluster, service.name, slot, task, spec_hash, controller)
    env_text = env_file_text((*service.env, *service.secrets))
    if env_text:
        argv += ["--env-file", ENV_FILE_STDIN]
    for port in service.ports:
        argv += ["-p", str(port)]
    for address, host_port, container_port in routed:
        argv += ["-p", f"{_operand(address, 'address')}:{host_port}:{container_port}"]
    if exposed_at is not None:
        address = _operand(exposed_at, "address")
        argv += [a for port in service.expose for a in ("-p", f"{address}::{port}")]
    for volume in service.volumes:
        argv += ["-v", volume_spec(volume, cluster, service.name, slot)]
    argv += config_mount_args(configs)
    if service.cpus > 0:
        argv += ["--cpus", f"{service.cpus:g}"]
    if service.memory > 0:
        argv += ["--memory", str(service.memory)]
    if service.health is not None:
        argv += _health_args(service.health)
    if network is not None:
        argv += ["--network", network]
        argv += [] if service.expose else ["--network-alias", service.name]
    argv += run_options_args(service)
    argv += ["--restart", "no", _operand(service.image, "image")]
    argv += [*_entrypoint_args(service), *(service.command or ())]
    return argv, env_text


def oneoff_name(service: str, kind: str, run: str) -> str:
    """A one-off task's container name: SERVICE.KIND.RUN (`web.run.3f9a0c21b7`)."""
    return f"{service}.{kind}.{run}"


def oneoff_create_argv(
    service: Service,
    cluster: str,
    kind: str,
    run: str,
    controller: str = "",
    *,
    slot: int = 1,
    network: str | None = None,
    configs: Sequence[tuple[str, str]] = (),
    interactive: bool = False,
    tty: bool = False,
) -> tuple[list[str], str]:
    """`docker create` of a one-off task of `service` (the spec as `core.jobs.oneoff_spec`
    made it), and the env-file text for its stdin, as `run_argv` sends a task's. It is
    labelled as the cluster's and the service's, with its kind and run id and the spec
    hash, but no slot: never a slot's task. Named volumes are those of `slot` (the pinned
    slot's data). `interactive`/`tty` keep stdin open and give it a PTY (`-i`, `-t`)."""
    argv = ["docker", "create", "--name", oneoff_name(service.name, kind, run)]
    labels = [
        (LABEL_CLUSTER, cluster),
        (LABEL_SERVICE, service.name),
        (LABEL_ONEOFF, kind),
        (LABEL_TASK, run),
        (LABEL_SPEC, service.spec_hash()),
        *([(LABEL_CONTROLLER, controller)] if controller else []),
    ]
    argv += [arg for key, value in labels for arg in ("--label", f"{key}={value}")]
    env_text = env_file_text((*service.env, *service.secrets))
    if env_text:
        argv += ["--env-file", ENV_FILE_STDIN]
    for volume in service.volumes:
        argv += ["-v", volume_spec(volume, cluster, service.name, slot)]
    argv += config_mount_args(configs)
    if service.cpus > 0:
        argv += ["--cpus", f"{service.cpus:g}"]
    if service.memory > 0:
        argv += ["--memory", str(service.memory)]
    if network is not None:
        argv += ["--network", network]
    argv += run_options_args(service)
    argv += ["-i"] if interactive else []
    argv += ["-t"] if tty else []
    argv += ["--restart", "no", _operand(service.image, "image")]
    argv += [*_entrypoint_args(service), *(service.command or ())]
    return argv, env_text


def oneoff_start_argv(name: str, *, interactive: bool = False) -> list[str]:
    """Start a created one-off attached to its output (and, `interactive`, its stdin); the
    command's exit status is the one-off's."""
    return ["docker", "start", "-a", *(["-i"] if interactive else []), _operand(name, "container")]


def _task_labels(
    cluster: str, service: str, slot: int, task: str, spec_hash: str, controller: str
) -> list[str]:
    """The labels that say whose task a container is: cluster, service, slot, task, the
    spec hash, and the controller that started it (when it has an id)."""
    labels = [
        (LABEL_CLUSTER, cluster),
        (LABEL_SERVICE, service),
        (LABEL_SLOT, str(slot)),
        (LABEL_TASK, task),
        (LABEL_SPEC, spec_hash),
        *([(LABEL_CONTROLLER, controller)] if controller else []),
    ]
    return [arg for key, value in labels for arg in ("--label", f"{key}={value}")]


def volume_name(cluster: str, service: str, slot: int, name: str) -> str:
    """The Docker volume of one slot's named volume: each slot has its own data, kept on
    the host it is pinned to (`prod_db.1_pgdata`).

    Unambiguous across clusters and services: a `_` inside the cluster or service name is
    written `U` (names are lowercase, so `U` stands for nothing else), so the first `_`
    ends the cluster, the next one the `SERVICE.SLOT` part, and the volume's own name is
    the rest (`shop_eu` + `db` -> `shopUeu_db.1_data`, `shop` + `eu_db` -> `shop_euUdb.1_data`).
    Names without `_` keep the name they always had (docs/formats.md: the migration)."""
    return f"{_unscored(cluster)}_{_unscored(service)}.{slot}_{name}"


def _unscored(name: str) -> str:
    return name.replace("_", "U")


def volume_spec(volume: Volume, cluster: str, service: str, slot: int) -> str:
    """`docker run -v` for a volume: a slot's own named volume, or the bind mount as is."""
    source = volume_name(cluster, service, slot, volume.source) if volume.named else volume.source
    return f"{source}:{volume.target}" + (":ro" if volume.read_only else "")


def config_mount_args(configs: Sequence[tuple[str, str]]) -> list[str]:
    """A read-only bind mount per config: `--mount` (not `-v`) so that a file missing on
    the host fails the start instead of becoming an empty directory."""
    argv: list[str] = []
    for source, target in configs:
        argv += ["--mount", f"type=bind,source={source},target={target},readonly"]
    return argv


def config_dir_argvs() -> list[list[str]]:
    """Make the host's config directory, then print its absolute path (one line)."""
    return [["mkdir", "-p", "--", CONFIG_DIR], ["realpath", "-e", "--", CONFIG_DIR]]


def config_check_argv() -> list[str]:
    """Exit 0 when the file named on stdin (`config_check_input`) has that sha256."""
    return ["sha256sum", "--check", "--status", "-"]


def config_check_input(digest: str, path: str) -> str:
    return f"{digest}  {path}\n"


def config_write_argv(path: str) -> list[str]:
    """Write stdin to `path` (a temporary name next to the config: made whole, then
    renamed over, so a config is never rewritten in place)."""
    return ["dd", f"of={path}", "status=none"]


def config_finish_argvs(temporary: str, path: str) -> list[list[str]]:
    """Make the written file read-only for everyone and give it its name, atomically."""
    return [["chmod", "0444", "--", temporary], ["mv", "-f", "--", temporary, path]]


def secret_files_argv(container: str) -> list[str]:
    """Copy the tar stream on stdin (`secret_files_tar`) into a created task, at its root,
    keeping each file's owner and mode (`-a`): the secrets go into the task's own
    filesystem, never into a file of the host's."""
    return ["docker", "cp", "-a", "-", f"{_operand(container, 'container')}:/"]


def secret_files_tar(files: Sequence[SecretFile]) -> str:
    """A tar stream of the files alone (no directory entries: Docker makes a missing
    parent 0755 and leaves an existing one as it is), as text for a command's stdin:
    headers are ASCII and the contents UTF-8, so the text is the stream byte for byte."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            data = f.value.encode()
            info = tarfile.TarInfo(f.target.lstrip("/"))
            info.size, info.mode, info.uid, info.gid = len(data), f.mode, f.uid, f.gid
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue().decode("utf-8")


def run_options_args(service: Service) -> list[str]:
    """The flags of the docker run surface a service sets (labels ... dns), in one order;
    nothing for options left at their defaults. The entrypoint goes separately."""
    argv: list[str] = []
    for key, value in service.labels:
        argv += ["--label", f"{key}={value}"]
    for flag, given in (("--user", service.user), ("--workdir", service.workdir)):
        if given is not None:
            argv += [flag, given]
    if service.entrypoint is not None:
        argv += ["--entrypoint", service.entrypoint[0] if service.entrypoint else ""]
    if service.stop_signal is not None:
        argv += ["--stop-signal", service.stop_signal]
    if service.stop_grace_period != Service.stop_grace_period:
        argv += ["--stop-timeout", str(grace_seconds(service))]
    argv += ["--init"] if service.init else []
    argv += ["--read-only"] if service.read_only else []
    argv += [arg for cap in service.cap_add for arg in ("--cap-add", cap)]
    argv += [arg for cap in service.cap_drop for arg in ("--cap-drop", cap)]
    argv += [arg for limit in service.ulimits for arg in ("--ulimit", str(limit))]
    if service.log is not None:
        argv += ["--log-driver", service.log.driver]
        argv += [arg for k, v in service.log.options for arg in ("--log-opt", f"{k}={v}")]
    argv += [arg for name, ip in service.extra_hosts for arg in ("--add-host", f"{name}:{ip}")]
    argv += [arg for server in service.dns for arg in ("--dns", server)]
    return argv


def _entrypoint_args(service: Service) -> list[str]:
    """The entrypoint's arguments after its first word: docker's --entrypoint takes one
    executable, so the rest lead the command (as the exec form would run them)."""
    return list(service.entrypoint[1:]) if service.entrypoint else []


def grace_seconds(service: Service) -> int:
    """The service's stop grace period in whole seconds (docker stop -t counts in seconds)."""
    return math.ceil(service.stop_grace_period)


def start_argv(id: str) -> list[str]:
    """Start a created or stopped container (by id or name)."""
    return ["docker", "start", _operand(id, "container")]


def stop_argv(name_or_id: str, timeout_s: int = 10) -> list[str]:
    """Stop gracefully: SIGTERM, then SIGKILL after timeout_s seconds."""
    return ["docker", "stop", "-t", str(int(timeout_s)), _operand(name_or_id, "container")]


def rm_argv(ids: Sequence[str], force: bool = False) -> list[str]:
    """Remove containers (by id or name); force also kills a running one."""
    flags = ["-f"] if force else []
    return ["docker", "rm", *flags, *(_operand(c, "container") for c in ids)]


def logs_argv(id: str, tail: int = 20) -> list[str]:
    """The last `tail` lines of a container's output (stdout and stderr); redact them."""
    return ["docker", "logs", "--tail", str(int(tail)), _operand(id, "container")]


def image_present_argv(image: str) -> list[str]:
    """Exit 0 (printing the image id) when the image is on the host, non-zero when not."""
    return ["docker", "image", "inspect", "--format", "{{.Id}}", _operand(image, "image")]


def pull_argv(image: str) -> list[str]:
    """Pull an image from its registry onto the host."""
    return ["docker", "pull", _operand(image, "image")]


def login_argv(registry: str, username: str) -> list[str]:
    """Log the host's docker in to a registry; the password goes on stdin, never in argv."""
    user = _operand(username, "registry user")
    return [
        "docker",
        "login",
        "--username",
        user,
        "--password-stdin",
        _operand(registry, "registry"),
    ]


def created_argv(run: Sequence[str]) -> list[str]:
    """A `run_argv` as `docker create`: the same task, made but not started, so that its
    extra networks are connected before its command starts."""
    if list(run[:3]) != ["docker", "run", "-d"]:
        raise ValueError(f"not a run_argv: {list(run[:3])}")
    return ["docker", "create", *run[3:]]


# -- networks ---------------------------------------------------------------------------------
def network_owner_argv(network: str) -> list[str]:
    """Print the network's minidock.cluster label (empty when it has none); fails when the
    network does not exist on the host."""
    fmt = f'{{{{index .Labels "{LABEL_CLUSTER}"}}}}'
    return ["docker", "network", "inspect", "--format", fmt, _operand(network, "network")]


def network_create_argv(network: str, cluster: str) -> list[str]:
    """Create the cluster's user-defined bridge network, labelled as the cluster's."""
    return [
        "docker",
        "network",
        "create",
        "--driver",
        "bridge",
        "--label",
        f"{LABEL_CLUSTER}={cluster}",
        _operand(network, "network"),
    ]


def network_connect_argv(network: str, container: str, alias: str) -> list[str]:
    """Join a container to one more network, reachable there as `alias` too."""
    return [
        "docker",
        "network",
        "connect",
        "--alias",
        alias,
        _operand(network, "network"),
        _operand(container, "container"),
    ]


# -- images without a registry: docker save on the controller, docker load on a host -----------
def image_id_size_argv(image: str) -> list[str]:
    """Print "ID SIZE" of a local image (exit non-zero when it is missing)."""
    return ["docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", _operand(image, "image")]


def save_argv(image: str) -> list[str]:
    """Write an image as a tar stream on stdout (run on the controller)."""
    return ["docker", "save", _operand(image, "image")]


def load_argv() -> list[str]:
    """Read an image tar stream from stdin into the host's engine."""
    return ["docker", "load", "--quiet"]


# -- docker's errors --------------------------------------------------------------------------
# Docker says why a command failed only in words on stderr; each parser below reads one
# cause from them (tests/data/docker/errors/ holds the real outputs they are tested on).
# Docker puts the cause last ("...: Bind for 0.0.0.0:8080 failed: port is already
# allocated"); each value keeps Docker's own words for that cause in `said`.
@dataclass(frozen=True)
class NameConflict:
    """A container of that name exists already (`docker run`/`create`): for a task, the
    replay of a start whose record was lost, which the act path adopts."""

    name: str
    said: str

    @property
    def cause(self) -> str:
        return f"a container named {self.name} exists already"


@dataclass(frozen=True)
class PortTaken:
    """The host port is taken: published by another container ("port is already
    allocated") or held by a process outside Docker ("address already in use")."""

    address: str  # as Docker gives it: "0.0.0.0:8080", "127.0.0.1:8080"
    by_container: bool
    said: str

    @property
    def cause(self) -> str:
        holder = "another container" if self.by_container else "a process outside Docker"
        return f"host port {self.address} is taken by {holder}"


@dataclass(frozen=True)
class ImageNotFound:
    """The image is not on the host (`docker image inspect`, `run --pull never`) or its
    registry has no such image or tag (`docker pull`)."""

    image: str
    in_registry: bool
    said: str

    @property
    def cause(self) -> str:
        if self.in_registry:
            return f"image {self.image} is not in its registry (check the name and tag)"
        return f"image {self.image} is not on the host"


@dataclass(frozen=True)
class NoSuchNetwork:
    """A network the command names does not exist on the host."""

    network: str
    said: str

    @property
    def cause(self) -> str:
        return f"network {self.network} does not exist on the host"


@dataclass(frozen=True)
class DaemonDown:
    """The docker client found no daemon behind its socket (dockerd is not running)."""

    socket: str
    said: str

    @property
    def cause(self) -> str:
        return f"the Docker daemon is not running (nothing answers at {self.socket})"


DockerError = NameConflict | PortTaken | ImageNotFound | NoSuchNetwork | DaemonDown

_NAME_CONFLICT = re.compile(
    r'Conflict\. The container name "/?(?P<name>[^"]+)" is already in use by container'
    r' "[0-9a-f]+"'
)
_PORT_ALLOCATED = re.compile(r"Bind for (?P<address>\S+) failed: port is already allocated")
_ADDRESS_IN_USE = re.compile(
    r"listen (?:tcp|udp|sctp)[46]? (?P<address>\S+): bind: address already in use"
)
_NO_SUCH_IMAGE = re.compile(r"No such image: (?P<image>\S+)")
_NO_MANIFEST = re.compile(r"manifest for (?P<image>\S+) not found(?:: manifest unknown)*")
_PULL_DENIED = re.compile(
    r"pull access denied for (?P<image>[^\s,]+), repository does not exist or may require"
    r" 'docker login'"
)
_NO_SUCH_NETWORK = re.compile(r"network (?P<network>\S+) not found")
_DAEMON_DOWN = re.compile(
    r"Cannot connect to the Docker daemon at (?P<socket>\S+?)\.? Is the docker daemon running\?"
)


def name_conflict(stderr: str) -> NameConflict | None:
    """`Conflict. The container name "/NAME" is already in use by container "ID"`."""
    found = _NAME_CONFLICT.search(stderr)
    return NameConflict(found["name"], found[0]) if found else None


def port_taken(stderr: str) -> PortTaken | None:
    """`Bind for ADDRESS failed: port is already allocated` (another container), or the
    userland proxy's `listen tcp4 ADDRESS: bind: address already in use` (a process)."""
    found = _PORT_ALLOCATED.search(stderr)
    if found:
        return PortTaken(found["address"], True, found[0])
    found = _ADDRESS_IN_USE.search(stderr)
    return PortTaken(found["address"], False, found[0]) if found else None


def image_not_found(stderr: str) -> ImageNotFound | None:
    """`No such image: IMAGE` (not on the host), `manifest for IMAGE not found` or `pull
    access denied for IMAGE, repository does not exist ...` (not in the registry)."""
    found = _NO_SUCH_IMAGE.search(stderr)
    if found:
        return ImageNotFound(found["image"], False, found[0])
    found = _NO_MANIFEST.search(stderr) or _PULL_DENIED.search(stderr)
    return ImageNotFound(found["image"], True, found[0]) if found else None


def no_such_network(stderr: str) -> NoSuchNetwork | None:
    """`network NAME not found` (`docker run --network`, `docker network connect`)."""
    found = _NO_SUCH_NETWORK.search(stderr)
    return NoSuchNetwork(found["network"], found[0]) if found else None


def daemon_down(stderr: str) -> DaemonDown | None:
    """`Cannot connect to the Docker daemon at SOCKET. Is the docker daemon running?`"""
    found = _DAEMON_DOWN.search(stderr)
    return DaemonDown(found["socket"], found[0]) if found else None


def docker_error(stderr: str) -> DockerError | None:
    """The cause a failed docker command gives, when it is one of the named ones.

    Read in this order: no daemon (nothing else can be true), a taken port (whose text
    says "already in use" too, and is never a name conflict), the name conflict, a
    missing network, a missing image."""
    for parser in (daemon_down, port_taken, name_conflict, no_such_network, image_not_found):
        found = parser(stderr)
        if found is not None:
            return found
    return None


# -- operator commands ------------------------------------------------------------------------
def task_logs_argv(
    id: str, *, tail: int | None = None, since: float | None = None, follow: bool = False
) -> list[str]:
    """A task's output (stdout and stderr as the task wrote them), optionally only the last
    `tail` lines or those of the last `since` seconds, and with `follow` as it comes."""
    argv = ["docker", "logs"]
    argv += ["--follow"] if follow else []
    argv += ["--tail", str(int(tail))] if tail is not None else []
    argv += ["--since", docker_duration(since)] if since is not None else []
    return [*argv, _operand(id, "container")]


def exec_argv(
    id: str, command: Sequence[str], *, interactive: bool = False, tty: bool = False
) -> list[str]:
    """Run a command in a running task; `interactive` keeps stdin open, `tty` gives a PTY."""
    if not command:
        raise ValueError("exec needs a command")
    flags = ["-i"] if interactive else []
    flags += ["-t"] if tty else []
    return ["docker", "exec", *flags, _operand(id, "container"), *command]
