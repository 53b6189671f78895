"""Facts, as pyinfra has them: each probe's argv beside the parser of what it prints.

Nothing here runs a command: each argv is a true argv, quoted once by the executor in
`minidock.ssh`. Each parser turns a recorded output into model values; the tests feed it
real captures (tests/data/docker/, tests/data/host/). Output that is not what the command
promises raises ParseError: unparseable output is never "no containers".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, cast, get_args

from minidock.commands.docker import operand
from minidock.model import (
    LABEL_CLUSTER,
    LABEL_CONTROLLER,
    LABEL_GPUS,
    LABEL_ONEOFF,
    LABEL_SERVICE,
    LABEL_SLOT,
    LABEL_SPEC,
    LABEL_TASK,
    Container,
    ContainerState,
    Engine,
    EngineKind,
    Health,
    OneOff,
)

__all__ = [
    "HEALTH_LOG_MAX",
    "PS_FORMAT",
    "WATCHED_EVENTS",
    "ParseError",
    "event_since",
    "events_argv",
    "health_word",
    "inspect_argv",
    "listing_key",
    "parse_event",
    "parse_ids",
    "parse_inspect",
    "parse_inspect_all",
    "parse_listing",
    "parse_oneoffs",
    "parse_proc_net",
    "parse_published_ports",
    "parse_time",
    "parse_version",
    "ports_held_outside",
    "proc_net_argv",
    "proc_net_missing_only",
    "ps_argv",
    "published_ports_argv",
    "version_argv",
]


# a health check's output as Docker keeps it (4096 bytes): whole, so the masker sees every
# secret in it before a line is cut (minidock.masking)
HEALTH_LOG_MAX = 4096

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


# -- observe: ps + inspect --------------------------------------------------------------------
PS_FORMAT = "{{.ID}} {{.State}} {{.Status}}"  # the listing a probe keys containers by


def ps_argv(cluster: str | None) -> list[str]:
    """List every container (any state) labelled with this cluster (None: with any
    cluster), a line each: its full id, its state and its status ("Up 3 minutes
    (healthy)"), from which a probe knows which containers changed (`parse_listing`)."""
    label = f"{LABEL_CLUSTER}={cluster}" if cluster is not None else LABEL_CLUSTER
    return ["docker", "ps", "-a", "--no-trunc", "--filter", f"label={label}", "--format", PS_FORMAT]


def version_argv() -> list[str]:
    """Print the engine's version report as JSON (`parse_version`): Docker's client and
    server, or Podman's (through `podman-docker`, whose `docker` is `podman`)."""
    return ["docker", "version", "--format", "{{json .}}"]


def parse_version(stdout: str) -> Engine:
    """The host's engine in `version_argv` output (tests/data/docker/version/).

    Docker prints {"Client": ..., "Server": {"Components": [{"Name": "Engine", ...}, ...],
    "Version": ...}}, with a "rootlesskit" component when the daemon runs rootless; Podman
    prints {"Client": {"APIVersion": ..., "Version": ...}} (and a "Server" alike when it is
    remote), spelling APIVersion as Docker never does. Anything else (no server: the
    daemon did not answer) is a ParseError.
    """
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"docker version printed invalid JSON: {exc}") from None
    report = _mapping(data)
    server, client = _mapping(report.get("Server")), _mapping(report.get("Client"))
    components = server.get("Components")
    names = (
        {str(_mapping(c).get("Name")) for c in components}
        if isinstance(components, list)
        else set()
    )
    version = server.get("Version")
    if "Engine" in names and isinstance(version, str) and version:
        return Engine("docker", version, rootless="rootlesskit" in names)
    podman = server if "APIVersion" in server else client
    version = podman.get("Version")
    if (
        ("Podman Engine" in names or "APIVersion" in podman)
        and isinstance(version, str)
        and version
    ):
        return Engine("podman", version)
    raise ParseError(f"docker version printed no engine: {stdout.strip()[:120]!r}")


WATCHED_EVENTS = ("die", "start", "health_status", "oom", "destroy")


def events_argv(cluster: str, since: str = "", engine: EngineKind = "docker") -> list[str]:
    """Follow the docker events of this cluster's containers that can change a decision
    (`WATCHED_EVENTS`), a line each: the action, the container id and the event's time in
    nanoseconds on the host's clock; with `since` (a time `event_since` made), replay
    those from then on first. Without, from the second the command started on the host
    (its own clock, read by `date` before docker runs): docker subscribes a stream a
    moment after it starts (seconds, on a loaded host), and an event meanwhile is
    replayed, not lost. Podman (`engine`) names the action `.Status` where Docker's
    template has `.Action` (its template fails on the first event otherwise: measured on
    5.4.2), and says `died` and `remove` for `die` and `destroy` (`parse_event` reads
    them as Docker's words)."""
    argv = ["docker", "events", "--filter", "type=container"]
    argv += ["--filter", f"label={LABEL_CLUSTER}={cluster}"]
    for name in WATCHED_EVENTS:
        argv += ["--filter", f"event={name}"]
    action = "{{.Status}}" if engine == "podman" else "{{.Action}}"
    argv += ["--format", f"{action} {{{{.ID}}}} {{{{.TimeNano}}}}"]
    if since:
        return [*argv, "--since", since]
    return ["sh", "-c", 'exec "$@" --since "$(date +%s)"', "sh", *argv]


# Podman's words for the events a watch follows, as Docker says them
_PODMAN_ACTIONS = {"died": "die", "remove": "destroy"}


def parse_event(line: str) -> tuple[str, str, int] | None:
    """(action, container id, time in ns) of a line `events_argv` printed; None for any
    other line (docker's own warnings)."""
    words = line.split()
    if len(words) < 3 or not _ID_RE.fullmatch(words[-2]) or not words[-1].isdigit():
        return None
    action = " ".join(words[:-2])
    return _PODMAN_ACTIONS.get(action, action), words[-2], int(words[-1])


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


_HEALTH = (
    ("(healthy)", "healthy"),
    ("(unhealthy)", "unhealthy"),
    ("(health: starting)", "starting"),
    ("(starting)", "starting"),  # Podman's ps says it so
)


def health_word(status: str) -> str:
    """The health `docker ps` shows in a container's Status column ("Up 3 minutes
    (healthy)"): healthy, unhealthy, starting, or none. The batch script reads it the same
    way (minidock.ssh.batch_script)."""
    return next((word for shown, word in _HEALTH if shown in status), "none")


def listing_key(container_id: str, state: str, status: str) -> str:
    """What a probe compares to know a container unchanged: its id, its state (running,
    exited, ...) and its health. Containers run with `--restart no`, so a container whose
    key is the same has the same inspect for every field a decision reads (its exit code,
    times, health and labels); only a health check's last output may be older."""
    return f"{container_id}/{state}/{health_word(status)}"


def parse_listing(stdout: str) -> dict[str, str]:
    """Each container `ps_argv` listed, by id: its key (`listing_key`: id, state,
    health), in listing order. A line that does not start with an id is an error."""
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
    return ["docker", "inspect", "--type", "container", *(operand(i, "id") for i in ids)]


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
        gpus=tuple(g for g in str(labels.get(LABEL_GPUS) or "").split(",") if g),
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
