"""The cluster file into the model: services, their run options, secrets and registries.

Semantic checks the schema cannot express live here: unknown or cyclic dependencies,
port ranges and clashes, volume targets, backoff bounds.
"""

from __future__ import annotations

import contextlib
import heapq
import ipaddress
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any, Literal

from minidock import units
from minidock.model import (
    Build,
    Cluster,
    Constraint,
    HealthCheck,
    Hook,
    Inventory,
    LogConfig,
    PortMapping,
    RegistryAuth,
    RestartPolicy,
    Schedule,
    Service,
    Ulimit,
    UpdatePolicy,
    Volume,
    cluster_network,
    image_registry,
    looks_secret,
)
from minidock.schedules import cron_problem, timezone_problem
from minidock.spec.autoscale import autoscale_of, check_autoscale, starting_replicas
from minidock.spec.backup import backup_of, before_backup_of, with_backup_defaults
from minidock.spec.buildctx import build_of
from minidock.spec.compose import is_compose_file
from minidock.spec.configs import build_configs
from minidock.spec.errors import Fail, Part, SpecError, StrPath
from minidock.spec.ingress import (
    check_ingress_hosts,
    check_ingress_ports,
    check_routes,
    ingress_of,
    routes_of,
    service_ingress,
)
from minidock.spec.inventory import read_inventory
from minidock.spec.messages import did_you_mean, render, show
from minidock.spec.reading import check_schema, compile_pattern, read_toml, resolve, shipped_schema
from minidock.spec.secretfiles import (
    MAX_SECRET_BYTES,
    build_secret_files,
    secret_text,
    source_value,
)
from minidock.spec.sources import one_run, reread_failures

__all__ = ["cluster_document", "load", "load_cluster", "secret_env_warnings", "topo_order"]


INVENTORY_ENV = "MINIDOCK_INVENTORY"
DEFAULT_INVENTORY = "inventory.toml"  # beside the cluster file, when nothing else names one


def load_cluster(path: StrPath, inventory: StrPath | None = None) -> Cluster:
    """Read, validate and convert a cluster file (TOML, or Compose: `minidock.spec.compose`);
    the inventory it names (or `inventory`, `$MINIDOCK_INVENTORY`, `inventory.toml` beside
    it: `inventory_of`) is not read."""
    return _read_cluster(Path(path), os.fspath(path), with_inventory=False, given=inventory)[0]


def load(path: StrPath, inventory: StrPath | None = None) -> tuple[Cluster, Inventory]:
    """Load a cluster file and its inventory (`inventory_of`); errors name the file at
    fault (a Compose file's, its own keys)."""
    display = os.fspath(path)
    with one_run():  # the inventory's failing password command: the file's values masked
        cluster, _, inventory_display, locate = _read_cluster(
            Path(path), display, with_inventory=True, given=inventory
        )
        hosts = read_inventory(Path(cluster.inventory_path), inventory_display)
    try:
        check_ingress_hosts(cluster, hosts, display)
        check_ingress_ports(cluster, hosts, display)
        cluster = with_backup_defaults(cluster, hosts, display)
    except SpecError as exc:
        raise locate(exc) from None
    return cluster, hosts


def cluster_document(path: StrPath) -> dict[str, Any]:
    """The TOML document of a cluster file (a Compose file's translation), after every
    check `load_cluster` makes: what `minidock convert` prints."""
    return _read_cluster(Path(path), os.fspath(path), with_inventory=False, given=None)[1]


def secret_env_warnings(cluster: Cluster, display: str) -> tuple[str, ...]:
    """One line per `env` key that looks like a secret (`model.looks_secret`): it is
    masked and sealed like one, but belongs in `secrets` (what `validate` and `apply` say,
    once per command)."""
    return tuple(
        f"{display}: services.{s.name}.env.{key}: looks like a secret; it is masked and "
        f'sealed as one, but move it to secrets = {{ {key} = {{ file = "PATH" }} }} '
        "so the cluster file holds no secret"
        for s in cluster.services
        for key, _ in s.env
        if looks_secret(key)
    )


def topo_order(services: Sequence[Service]) -> list[str]:
    """Service names with every dependency before its dependents, else in the given order.

    Names in `depends_on` that are not among `services` are ignored; a cycle raises
    graphlib.CycleError (load_cluster never returns one).
    """
    index = {s.name: i for i, s in enumerate(services)}
    sorter = TopologicalSorter({s.name: [d for d in s.depends_on if d in index] for s in services})
    sorter.prepare()
    ready = [(index[n], n) for n in sorter.get_ready()]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        sorter.done(name)
        for n in sorter.get_ready():
            heapq.heappush(ready, (index[n], n))
    return order


def inventory_of(
    doc: Mapping[str, Any], display: str, given: StrPath | None
) -> tuple[str, str, str]:
    """(absolute path, as messages name it, where it was named) of a cluster file's
    inventory: its `inventory` key (relative to the file), else `given` (`--inventory`),
    else `$MINIDOCK_INVENTORY` (both relative to the working directory), else
    `inventory.toml` beside the file."""
    base = os.path.dirname(os.path.abspath(display))
    if isinstance(doc.get("inventory"), str):
        named = doc["inventory"]
        shown = os.path.normpath(os.path.join(os.path.dirname(display), os.path.expanduser(named)))
        return resolve(base, named), shown, "inventory"
    if given is not None or os.environ.get(INVENTORY_ENV):
        named = os.fspath(given) if given is not None else os.environ[INVENTORY_ENV]
        source = "--inventory" if given is not None else f"${INVENTORY_ENV}"
        return resolve(os.getcwd(), named), os.path.expanduser(named), source
    shown = os.path.join(os.path.dirname(display), DEFAULT_INVENTORY)
    return os.path.join(base, DEFAULT_INVENTORY), shown, "the default"


def _read_cluster(
    path: Path, display: str, *, with_inventory: bool, given: StrPath | None
) -> tuple[Cluster, dict[str, Any], str, Callable[[SpecError], SpecError]]:
    """The cluster, its TOML document, how to name its inventory file in messages, and
    what tells a later problem of the file (about a TOML key path) where it is; a Compose
    file's problems name its own keys and lines."""
    with one_run():  # each secret command runs once, however many keys name it
        return _read_cluster_once(path, display, with_inventory=with_inventory, given=given)


def _read_cluster_once(
    path: Path, display: str, *, with_inventory: bool, given: StrPath | None
) -> tuple[Cluster, dict[str, Any], str, Callable[[SpecError], SpecError]]:
    base = os.path.dirname(os.path.abspath(path))
    if not is_compose_file(path):
        doc = read_toml(path, display)
        try:
            found = _load_cluster(doc, path, display, with_inventory=with_inventory, given=given)
        except SpecError:
            reread_failures(lambda: _read_every_secret(doc, base))
            raise
        return (*_with_document(found, doc), _as_it_is)
    from minidock.spec.compose.translation import translate_file  # PyYAML only when needed

    translation = translate_file(path, display)
    try:
        found = _load_cluster(
            translation.document, path, display, with_inventory=with_inventory, given=given
        )
    except SpecError as exc:
        reread_failures(lambda: _read_every_secret(translation.document, base))
        raise translation.locate(exc) from None
    return (*_with_document(found, translation.document), translation.locate)


def _read_every_secret(doc: Mapping[str, Any], base: str) -> None:
    """Read every secret source of a cluster document that a failed program stopped the
    load before (each value remembered, to mask that program's standard error): those of
    the registries, and each service's secrets, secret files and backup password. Their
    own problems are not told, nor a file's mode."""
    sources: list[Any] = [r.get("password") for r in _tables(doc.get("registries"))]
    for body in _tables(doc.get("services")):
        for key in ("secrets", "secret_files"):
            sources += _tables(body.get(key))
        backup = body.get("backup")
        sources.append(backup.get("password") if isinstance(backup, dict) else None)
    quiet = logging.getLogger("minidock.spec")
    with _silenced(quiet):
        for source in sources:
            if isinstance(source, dict):
                with contextlib.suppress(SpecError):
                    source_value(source, (), _no_fail, base, read_file=_read_quietly, exact=True)


def _tables(table: Any) -> list[dict[str, Any]]:
    """The values of `table` that are tables (none when it is not one)."""
    return [v for v in table.values() if isinstance(v, dict)] if isinstance(table, dict) else []


def _no_fail(parts: Sequence[Part], message: str) -> SpecError:
    return SpecError("", render(parts), message)


def _read_quietly(path: str, where: tuple[Part, ...], fail: Fail) -> str:
    """A secret file's text, or "" when it cannot be read (no mode check)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(MAX_SECRET_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return ""


@contextlib.contextmanager
def _silenced(logger: logging.Logger) -> Iterator[None]:
    """`logger` says nothing meanwhile (a file's mode was told when it was first read)."""
    before = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = before


def _as_it_is(error: SpecError) -> SpecError:
    return error


def _with_document(
    found: tuple[Cluster, str], doc: dict[str, Any]
) -> tuple[Cluster, dict[str, Any], str]:
    return found[0], doc, found[1]


def _load_cluster(
    doc: dict[str, Any], path: Path, display: str, *, with_inventory: bool, given: StrPath | None
) -> tuple[Cluster, str]:
    """The cluster, and how to name its inventory file in messages (which, with
    `with_inventory`, must be a file)."""
    check_schema("cluster", doc, display)
    abs_path = os.path.abspath(path)
    inventory_path, inventory_display, source = inventory_of(doc, display, given)
    base = os.path.dirname(abs_path)
    registries = _registries(doc.get("registries", {}), display, base)
    services = _build_services(doc.get("services", {}), display, base, doc["cluster"])
    cluster = Cluster(
        name=doc["cluster"],
        path=abs_path,
        inventory_path=inventory_path,
        services=tuple(_with_registry_auth(s, registries) for s in services),
        ingress=ingress_of(doc, display, base),
    )
    check_routes(cluster, display)
    check_autoscale(cluster, display)
    if with_inventory:
        target = Path(cluster.inventory_path)
        how = {"inventory": "", "the default": f" ({_UNNAMED})"}.get(source, f" (from {source})")
        if not target.exists():
            raise SpecError(
                display, "inventory", f"inventory file not found: {inventory_display}{how}"
            )
        if not target.is_file():
            raise SpecError(
                display, "inventory", f"inventory is not a file: {inventory_display}{how}"
            )
    return cluster, inventory_display


_UNNAMED = (
    "the default, as the file names no inventory: name one with inventory "
    "(x-minidock.inventory in a Compose file), --inventory FILE or $MINIDOCK_INVENTORY"
)


def _service_pattern(*keys: str) -> re.Pattern[str]:
    node: Any = shipped_schema("cluster")["$defs"]["service"]["properties"]
    for key in keys:
        node = node[key]
    return compile_pattern(node["pattern"])


def _build_services(
    table: dict[str, Any], display: str, base: str, cluster: str
) -> tuple[Service, ...]:
    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, render(parts), message)

    services = tuple(
        _build_service(name, body, fail, base, (cluster, display)) for name, body in table.items()
    )
    names = list(table)
    for s in services:
        for i, dep in enumerate(s.depends_on):
            where = ("services", s.name, "depends_on", i)
            if dep == s.name:
                raise fail(where, f"service {dep!r} depends on itself")
            if dep not in table:
                raise fail(where, f"unknown service {dep!r}{did_you_mean(dep, names)}")
    try:
        TopologicalSorter({s.name: s.depends_on for s in services}).prepare()
    except CycleError as exc:
        # graphlib walks from a service to its dependents; reverse to read "depends on".
        ring: list[str] = list(reversed(exc.args[1]))[:-1]
        start = min(range(len(ring)), key=lambda k: names.index(ring[k]))
        ring = ring[start:] + ring[:start]
        raise fail(
            ("services", ring[0], "depends_on"),
            f"dependency cycle: {' -> '.join([*ring, ring[0]])}",
        ) from None
    return services


def _build_service(
    name: str, body: dict[str, Any], fail: Fail, base: str, names: tuple[str, str]
) -> Service:
    """One service; `names` are its cluster's and how its file is named in messages."""
    cluster, display = names
    at: tuple[Part, ...] = ("services", name)
    ports = _ports(body.get("ports", []), at, fail)
    constraint_re = _service_pattern("constraints", "items")
    constraints = []
    for text in body.get("constraints", []):
        found = constraint_re.match(text)
        assert found is not None  # the schema checked the pattern
        op: Literal["==", "!="] = "==" if found[2] == "==" else "!="
        constraints.append(Constraint(key=found[1], op=op, value=found[3]))
    command = body.get("command")
    env: dict[str, str] = body.get("env", {})
    volumes = _volumes(body.get("volumes", []), (*at, "volumes"), fail)
    configs = build_configs(body.get("configs", {}), volumes, (*at, "configs"), fail, base)
    build = _build(body, at, fail, base, cluster)
    policy = autoscale_of(body, at, fail, volumes)
    return Service(
        name=name,
        image=build.tag if build is not None else body["image"],
        replicas=0 if "schedule" in body else starting_replicas(body, policy, at, fail),
        command=tuple(command) if command is not None else None,
        env=tuple(sorted(env.items())),
        ports=ports,
        cpus=float(body.get("cpus", 0.0)),
        memory=units.parse_size(body.get("memory", 0)),
        constraints=tuple(constraints),
        spread=body.get("spread"),
        depends_on=tuple(body.get("depends_on", ())),
        desired=body.get("desired", "running"),
        on_host_loss=body.get("on_host_loss", "replace"),
        restore_after=_restore_after(body, at, fail, volumes),
        health=_health(body["health"], (*at, "health"), fail) if "health" in body else None,
        update=_update(body.get("update", {}), (*at, "update"), fail, body, volumes),
        restart=_restart(body.get("restart", {}), (*at, "restart"), fail),
        secrets=_secrets(body.get("secrets", {}), env, (*at, "secrets"), fail, base),
        volumes=volumes,
        configs=configs,
        secret_files=build_secret_files(body, volumes, configs, at, fail, base),
        mode=_mode(body, at, fail),
        image_source="controller" if build else body.get("image_source", "registry"),
        build=build,
        schedule=_schedule(body, at, fail),
        before_update=_before_update(body.get("hooks", {}), (*at, "hooks"), fail),
        backup=backup_of(body, at, fail, base, display),
        before_backup=before_backup_of(body, at, fail),
        autoscale=policy,
        **_run_options(body, at, fail, cluster),
        **service_ingress(body, routes_of(body, at, fail, ports, base)),
        expose=tuple(sorted(body.get("expose", ()))),
    )


def _restore_after(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, volumes: tuple[Volume, ...]
) -> float:
    """`restore_after` (default 5m), and `on_host_loss = "restore"` only where it can be:
    a pinned service (a named volume) with its own `backup` (docs/backups.md)."""
    if body.get("on_host_loss") == "restore":
        if not any(v.named for v in volumes):
            raise fail(
                (*at, "on_host_loss"),
                'restore is for a service with a named volume (its data): use "replace"',
            )
        if "backup" not in body:
            raise fail(
                (*at, "on_host_loss"),
                "restore needs a backup to restore from: give backup = { repository = ..., "
                "schedule = ... }",
            )
    elif "restore_after" in body:
        raise fail((*at, "restore_after"), 'restore_after is for on_host_loss = "restore"')
    after = units.parse_duration(body.get("restore_after", "5m"))
    if after <= 0:
        raise fail(
            (*at, "restore_after"), f"must be greater than 0, got {show(body['restore_after'])}"
        )
    return after


def _build(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, base: str, cluster: str
) -> Build | None:
    """A service's `build` (docs/compose.md#build), its content tag worked out, or None."""
    if "build" not in body:
        return None
    if body.get("image_source", "controller") != "controller":
        raise fail(
            (*at, "image_source"),
            "a built image is pushed from the controller: remove image_source, or build",
        )
    if "@" in body.get("image", ""):
        raise fail(
            (*at, "image"),
            "a built image is tagged by its content: give image without a digest, or no build",
        )
    return build_of(body, at, fail, base, cluster)


_NOT_FOR_JOBS = {
    "replicas": "a job has no replicas: each scheduled time starts one run",
    "mode": "a job has no mode: each scheduled time starts one run",
    "ports": "a job's runs publish no ports: remove ports",
    "health": "a job's runs have no health check: its exit status is its outcome",
    "ingress": "a job's runs take no traffic: remove ingress",
    "update": "a job has no rolling update: each run starts with the current spec",
    "restart": "a job's failed run is not restarted: the next scheduled time runs again",
    "depends_on": "a job's runs wait on no dependency: remove depends_on",
    "on_host_loss": "a job's run is not moved on host loss: the next scheduled time runs again",
    "restore_after": "a job's run is not moved on host loss: the next scheduled time runs again",
    "drain_timeout": "a job's runs take no traffic: remove drain_timeout",
    "hooks": "a job has no rollout to run hooks before: run the command in the job itself",
    "expose": "a job's runs take no traffic: remove expose",
    "backup": "a job's runs keep no volume: back up the service whose task holds it",
}


def _before_update(body: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> Hook | None:
    """`hooks.before_update` (docs/jobs.md#hooks), or None."""
    if "before_update" not in body:
        return None
    hook = body["before_update"]
    timeout = units.parse_duration(hook.get("timeout", "10m"))
    if timeout <= 0:
        where = (*at, "before_update", "timeout")
        raise fail(where, f"must be greater than 0, got {show(hook['timeout'])}")
    return Hook(tuple(hook["command"]), timeout)


def _schedule(body: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> Schedule | None:
    """A scheduled job's schedule (docs/jobs.md), or None; the keys a job cannot honour,
    and `timezone`/`concurrency` without a schedule, are refused, naming the key."""
    if "schedule" not in body:
        for key in ("timezone", "concurrency"):
            if key in body:
                raise fail((*at, key), f"{key} is for scheduled jobs: add schedule or remove it")
        return None
    for key, why in _NOT_FOR_JOBS.items():
        if key in body:
            raise fail((*at, key), why)
    zone = body.get("timezone", "UTC")
    problem = cron_problem(body["schedule"], zone)  # and its times, in the zone
    if problem:
        raise fail((*at, "schedule"), problem)
    if timezone_problem(zone):
        raise fail((*at, "timezone"), timezone_problem(zone))
    return Schedule(body["schedule"], zone, body.get("concurrency", "forbid"))


def _mode(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail
) -> Literal["replicated", "global"]:
    mode: Literal["replicated", "global"] = body.get("mode", "replicated")
    if mode == "global" and "replicas" in body:
        raise fail((*at, "replicas"), "a global service runs one task per host: remove replicas")
    return mode


_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _volumes(items: list[str], at: tuple[Part, ...], fail: Fail) -> tuple[Volume, ...]:
    """Named volumes, bind mounts and anonymous volumes (a container path alone): absolute
    paths without '..', one mount per target."""
    volumes: list[Volume] = []
    targets: dict[str, int] = {}
    for i, text in enumerate(items):
        source, target, *mode = text.split(":") if ":" in text else ("", text)
        where = (*at, i)
        if source and not source.startswith("/") and not _VOLUME_NAME.fullmatch(source):
            raise fail(
                where,
                f"invalid volume {text!r}: a host path must be absolute "
                f"(/srv/...), a volume name must match {_VOLUME_NAME.pattern}",
            )
        for path in [target, *([source] if source.startswith("/") else [])]:
            if not path.startswith("/") or ".." in path.split("/"):
                raise fail(
                    where,
                    f"invalid volume {text!r}: {path!r} must be an absolute path without '..'",
                )
        if target in targets:
            raise fail(where, f"{target} is already mounted by volumes[{targets[target]}]")
        targets[target] = i
        volumes.append(Volume(source, target, read_only=mode == ["ro"]))
    return tuple(volumes)


def _secrets(
    table: dict[str, dict[str, Any]],
    env: dict[str, str],
    at: tuple[Part, ...],
    fail: Fail,
    base: str,
) -> tuple[tuple[str, str], ...]:
    """Read every secret on the controller now (apply time); errors never show a value."""
    values: list[tuple[str, str]] = []
    for key, source in table.items():
        where = (*at, key)
        if key in env:
            raise fail(where, f"{key} is also set in env: give it in one of env or secrets")
        values.append((key, _secret_value(source, where, fail, base)))
    return tuple(sorted(values))


def _secret_value(source: dict[str, Any], where: tuple[Part, ...], fail: Fail, base: str) -> str:
    """The value of one secret source, read now (`source_value`); one trailing newline of
    a file or a command's output dropped, and no line break or NUL left in it."""
    value = source_value(source, where, fail, base, read_file=secret_text, exact=False)
    if any(c in value for c in "\n\r\0"):
        raise fail(where, "the secret's value must not contain a line break or NUL")
    return value


def _registries(table: dict[str, Any], display: str, base: str) -> dict[str, RegistryAuth]:
    """Credentials per registry, each password read now from its file or environment."""

    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, render(parts), message)

    found: dict[str, RegistryAuth] = {}
    for registry, body in table.items():
        where = ("registries", registry, "password")
        password = _secret_value(body["password"], where, fail, base)
        if not password:
            raise fail(where, "the password is empty")
        found[registry] = RegistryAuth(registry, body["username"], password)
    return found


def _with_registry_auth(service: Service, registries: Mapping[str, RegistryAuth]) -> Service:
    """The service with the credentials of the registry its image is pulled from, if any."""
    auth = registries.get(image_registry(service.image))
    if auth is None or service.image_source != "registry":
        return service
    return replace(service, registry_auth=auth)


# Networks a task cannot join beside its cluster's user-defined bridge network.
_UNJOINABLE_NETWORKS = ("host", "none")


def _run_options(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, cluster: str
) -> dict[str, Any]:
    """The keyword arguments of Service for the docker run surface (labels ... networks)."""
    labels: dict[str, str] = body.get("labels", {})
    for key in labels:
        if key.startswith("minidock."):
            raise fail(
                (*at, "labels", key),
                "the 'minidock.' label prefix is MiniDock's own: use another prefix, e.g. 'app.'",
            )
    options: dict[str, Any] = {"labels": tuple(sorted(labels.items()))}
    options |= {
        k: body[k] for k in ("user", "workdir", "stop_signal", "init", "read_only") if k in body
    }
    options |= {k: tuple(body[k]) for k in ("entrypoint", "cap_add", "cap_drop") if k in body}
    if "stop_grace_period" in body:
        options["stop_grace_period"] = float(
            math.ceil(units.parse_duration(body["stop_grace_period"]))
        )
    options["ulimits"] = _ulimits(body.get("ulimits", {}), (*at, "ulimits"), fail)
    if "log" in body:
        log_options: dict[str, str] = body["log"].get("options", {})
        options["log"] = LogConfig(
            body["log"].get("driver", ""), tuple(sorted(log_options.items()))
        )
    hosts: dict[str, str | list[str]] = body.get("extra_hosts", {})
    pairs: list[tuple[str, str]] = []
    for name in sorted(hosts):
        given = hosts[name]
        for address in [given] if isinstance(given, str) else given:
            if address != "host-gateway":
                _ip((*at, "extra_hosts", name), address, fail, ", or 'host-gateway'")
            pairs.append((name, address))
    options["extra_hosts"] = tuple(pairs)
    options["sysctls"] = tuple(sorted(body.get("sysctls", {}).items()))
    for i, address in enumerate(body.get("dns", [])):
        _ip((*at, "dns", i), address, fail, "")
    options["dns"] = tuple(body.get("dns", ()))
    options["networks"] = _networks(body.get("networks", []), (*at, "networks"), fail, cluster)
    options |= {k: tuple(body[k]) for k in ("devices", "tmpfs") if k in body}
    options |= {k: body[k] for k in ("privileged", "pids_limit", "gpus") if k in body}
    if "shm_size" in body:
        options["shm_size"] = units.parse_size(body["shm_size"])
    return options


def _ip(where: tuple[Part, ...], address: str, fail: Fail, alternative: str) -> None:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise fail(
            where, f"invalid IP address {show(address)}: use an IPv4 or IPv6 address{alternative}"
        ) from None


def _ulimits(table: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> tuple[Ulimit, ...]:
    limits: list[Ulimit] = []
    for name, value in table.items():
        soft, hard = (value, value) if isinstance(value, int) else (value["soft"], value["hard"])
        if hard != -1 and (soft == -1 or soft > hard):
            shown = "unlimited" if soft == -1 else str(soft)
            raise fail((*at, name), f"soft limit {shown} is above the hard limit {hard}")
        limits.append(Ulimit(name, soft, hard))
    return tuple(sorted(limits, key=lambda u: u.name))


def _networks(names: list[str], at: tuple[Part, ...], fail: Fail, cluster: str) -> tuple[str, ...]:
    own = cluster_network(cluster)
    for i, name in enumerate(names):
        if name in _UNJOINABLE_NETWORKS:
            raise fail(
                (*at, i),
                f"network {name!r} cannot be joined beside the cluster's network {own}: "
                "list user-defined or bridge networks",
            )
        if name == own:
            raise fail((*at, i), f"every task is on its cluster's network {own} already: remove it")
    return tuple(names)


def _ports(items: list[str], at: tuple[Part, ...], fail: Fail) -> tuple[PortMapping, ...]:
    port_re = _service_pattern("ports", "items")
    ports: list[PortMapping] = []
    taken: dict[tuple[int, str], int] = {}
    for i, text in enumerate(items):
        found = port_re.match(text)
        assert found is not None  # the schema checked the pattern
        host_port, container_port = int(found[1]), int(found[2])
        for port in (host_port, container_port):
            if not 1 <= port <= 65535:
                raise fail((*at, "ports", i), f"port {port} out of range 1..65535 in {text!r}")
        protocol: Literal["tcp", "udp"] = "udp" if found[3] == "udp" else "tcp"
        if (host_port, protocol) in taken:
            first = taken[(host_port, protocol)]
            raise fail(
                (*at, "ports", i),
                f"host port {host_port}/{protocol} is already published by ports[{first}]",
            )
        taken[(host_port, protocol)] = i
        ports.append(PortMapping(host_port, container_port, protocol))
    return tuple(ports)


def _durations(body: dict[str, Any], keys: Iterable[str]) -> dict[str, float]:
    return {k: units.parse_duration(body[k]) for k in keys if k in body}


def _health(body: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> HealthCheck:
    times: dict[str, Any] = _durations(body, ("interval", "timeout", "start_period"))
    for key in ("interval", "timeout"):
        if key in times and times[key] <= 0:
            raise fail((*at, key), f"must be greater than 0, got {show(body[key])}")
    extra = {"retries": body["retries"]} if "retries" in body else {}
    return HealthCheck(cmd=tuple(body["cmd"]), **times, **extra)


def _update(
    body: dict[str, Any],
    at: tuple[Part, ...],
    fail: Fail,
    service: dict[str, Any],
    volumes: tuple[Volume, ...],
) -> UpdatePolicy:
    kwargs: dict[str, Any] = _durations(body, ("delay", "monitor", "canary_monitor"))
    keys = ("parallelism", "order", "failure_action", "canary", "canary_weight", "promote")
    kwargs |= {k: body[k] for k in keys if k in body}
    if "max_failure_ratio" in body:
        kwargs["max_failure_ratio"] = float(body["max_failure_ratio"])
    policy = UpdatePolicy(**kwargs)
    _check_canary(policy, body, at, fail, service, volumes)
    return policy


def _check_canary(
    policy: UpdatePolicy,
    body: dict[str, Any],
    at: tuple[Part, ...],
    fail: Fail,
    service: dict[str, Any],
    volumes: tuple[Volume, ...],
) -> None:
    """A canary runs beside the old tasks: not for a global service (one task per host)
    nor beside a task on its named volume; its other keys only with `canary`."""
    if not policy.canary:
        extra = next((k for k in ("canary_weight", "promote", "canary_monitor") if k in body), "")
        if extra:
            raise fail((*at, extra), "applies to a canary only: add canary = N, or remove it")
        return
    if service.get("mode") == "global":
        why = "a global service runs one task per host, none beside it: remove canary"
        raise fail((*at, "canary"), why)
    named = next((v for v in volumes if v.named), None)
    if named is not None:
        raise fail(
            (*at, "canary"),
            f"a canary would share the named volume {named.source} with the task it runs "
            "beside: remove canary (or the named volume)",
        )


def _restart(body: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> RestartPolicy:
    kwargs: dict[str, Any] = _durations(body, ("delay", "max_delay", "window"))
    kwargs |= {k: body[k] for k in ("condition", "max_attempts") if k in body}
    policy = RestartPolicy(**kwargs)
    if policy.max_delay < policy.delay:
        delay, max_delay = (units.format_duration(t) for t in (policy.delay, policy.max_delay))
        if "max_delay" in body:
            raise fail((*at, "max_delay"), f"must be at least delay ({delay}), got {max_delay}")
        raise fail(
            (*at, "delay"), f"must be at most max_delay ({max_delay}, the default), got {delay}"
        )
    return policy
