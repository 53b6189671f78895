"""A service's ports, volumes and networks, short and long syntax, as TOML spec strings."""

from __future__ import annotations

import os
from dataclasses import dataclass

from minidock.spec.compose.context import describe
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import boolean, items, mapping, text
from minidock.spec.compose.yamldoc import Part, YDict

__all__ = ["networks", "ports", "volumes"]

_NO_HOST_PORT = (
    "MiniDock publishes fixed host ports: write HOST:CONTAINER, e.g. '8080:80' "
    "(tasks on one host reach each other on any port without publishing)"
)
_EVERY_ADDRESS = ("", "0.0.0.0")  # noqa: S104 -- what MiniDock publishes on, as written
_PORT_KEYS = ("target", "published", "protocol", "mode", "host_ip", "name", "app_protocol")


def ports(s: Service) -> None:
    """`ports`: short ('8080:80', '53:53/udp', '8000-8001:8000-8001') and long syntax."""
    if "ports" not in s.body:
        return
    found: list[str] = []
    for i, item in items(s.list_of("ports")):
        where = (*s.at, "ports", i)
        if isinstance(item, YDict):
            pairs = [_long_port(s, item, where)]
        elif isinstance(item, int) and not isinstance(item, bool):
            raise s.ctx.fail(where, _NO_HOST_PORT)
        else:
            pairs = _short_port(s, text(s.ctx, item, where), where)
        for mapped in pairs:
            s.ctx.came_from(("services", s.name, "ports", len(found)), where)
            found.append(mapped)
    s.set("ports", found, "ports")


def _short_port(s: Service, spec: str, where: tuple[Part, ...]) -> list[str]:
    body, _, protocol = spec.partition("/")
    if body.startswith("["):
        raise s.ctx.fail(where, _address_message(body))
    fields = body.split(":")
    if len(fields) > 3 or len(fields) == 1 or not fields[-2]:
        raise s.ctx.fail(where, _NO_HOST_PORT if len(fields) <= 3 else f"invalid port {spec!r}")
    if len(fields) == 3 and fields[0] not in _EVERY_ADDRESS:
        raise s.ctx.fail(where, _address_message(fields[0]))
    hosts, containers = _port_range(s, fields[-2], where), _port_range(s, fields[-1], where)
    if len(hosts) != len(containers):
        raise s.ctx.fail(where, f"{spec!r}: the host and container ranges differ in length")
    suffix = _protocol(s, protocol or "tcp", where)
    return [f"{h}:{c}{suffix}" for h, c in zip(hosts, containers, strict=True)]


def _port_range(s: Service, spec: str, where: tuple[Part, ...]) -> list[int]:
    first, dash, last = spec.partition("-")
    if not first.isdigit() or (dash and not last.isdigit()):
        raise s.ctx.fail(where, f"invalid port {spec!r}: use a number or a range like 8000-8010")
    low, high = int(first), int(last) if dash else int(first)
    if high < low:
        raise s.ctx.fail(where, f"invalid port range {spec!r}: the end is below the start")
    return list(range(low, high + 1))


def _protocol(s: Service, protocol: str, where: tuple[Part, ...]) -> str:
    if protocol not in ("tcp", "udp"):
        raise s.ctx.fail(where, f"protocol {protocol!r} is not supported: use tcp or udp")
    return "/udp" if protocol == "udp" else ""


def _address_message(address: str) -> str:
    return (
        f"publishing on one address ({address}) is not supported: MiniDock publishes on every "
        "address of the host; remove the address (and firewall the port if needed)"
    )


def _long_port(s: Service, item: YDict, where: tuple[Part, ...]) -> str:
    s.known_keys(item, where, _PORT_KEYS)
    if "target" not in item:
        raise s.ctx.fail(where, "missing target (the container's port)")
    if item.get("published") in (None, ""):
        raise s.ctx.fail(where, _NO_HOST_PORT)
    host_ip = item.get("host_ip")
    if host_ip not in (None, *_EVERY_ADDRESS):
        raise s.ctx.fail((*where, "host_ip"), _address_message(str(host_ip)))
    published = text(s.ctx, item["published"], (*where, "published"))
    target = text(s.ctx, item["target"], (*where, "target"))
    if not published.isdigit() or not target.isdigit():
        raise s.ctx.fail(where, "a port range is not supported in long syntax: list each port")
    mode = item.get("mode", "ingress")
    if mode not in ("host", "ingress"):
        raise s.ctx.fail((*where, "mode"), f"expected host or ingress, got {describe(mode)}")
    protocol = text(s.ctx, item.get("protocol", "tcp"), (*where, "protocol"))
    return f"{int(published)}:{int(target)}{_protocol(s, protocol, (*where, 'protocol'))}"


_VOLUME_KEYS = ("type", "source", "target", "read_only", "consistency", "bind", "volume")
_NO_OP_MODES = ("rw", "cached", "delegated", "consistent")


@dataclass(frozen=True)
class _Mount:
    """One entry of a service's `volumes`: `kind` is "bind" (a host path, or a path of the
    controller's when relative), "volume" (a named volume) or "anonymous"."""

    kind: str
    source: str
    target: str
    read_only: bool


def volumes(s: Service) -> None:
    """`volumes`: declared named volumes, absolute bind mounts and anonymous volumes as the
    TOML `volumes`; a bind mount of a path beside the Compose file (relative, or `~`) as a
    config of the service (its file, or every file of its directory), read-write as a
    writable one."""
    if "volumes" not in s.body:
        return
    found: list[str] = []
    shipped: dict[str, dict[str, str | bool]] = {}
    for i, item in items(s.list_of("volumes")):
        where = (*s.at, "volumes", i)
        if isinstance(item, YDict):
            mount = _long_volume(s, item, where)
        else:
            mount = _short_volume(s, text(s.ctx, item, where), where)
        if mount.kind == "bind" and not mount.source.startswith("/"):
            target = _plain_target(mount.target)
            shipped[target] = _shipped(s, mount, where)
            s.ctx.came_from(("services", s.name, "configs", target), where)
            continue
        if mount.kind == "volume" and mount.source not in s.top.volumes:
            raise s.ctx.fail(
                where,
                f"volume {mount.source!r} is not declared: add it under the top-level volumes",
            )
        s.ctx.came_from(("services", s.name, "volumes", len(found)), where)
        if mount.kind == "anonymous":
            found.append(mount.target)
        else:
            found.append(f"{mount.source}:{mount.target}{':ro' if mount.read_only else ''}")
    if found:
        s.set("volumes", found, "volumes")
    if shipped:
        s.out["configs"] = shipped


def _plain_target(target: str) -> str:
    """A shipped mount's path in the task without a trailing slash (`/var/www/html/` is the
    directory `/var/www/html`, as Docker mounts it)."""
    return target.rstrip("/") or target


def _is_path(source: str) -> bool:
    """Whether a short-syntax source is a path (Compose's rule: it starts with `.`, `/` or
    `~`), not a volume's name."""
    return source.startswith((".", "/", "~"))


def _short_volume(s: Service, spec: str, where: tuple[Part, ...]) -> _Mount:
    fields = spec.split(":")
    if len(fields) == 1:
        return _Mount("anonymous", "", spec, read_only=False)
    if len(fields) > 3:
        raise s.ctx.fail(where, f"invalid volume {spec!r}: use SOURCE:TARGET[:ro]")
    modes = fields[2].split(",") if len(fields) == 3 else []
    for mode in modes:
        if mode not in ("ro", *_NO_OP_MODES):
            raise s.ctx.fail(where, f"volume option {mode!r} is not supported: use ro or rw")
        if mode in _NO_OP_MODES[1:]:
            s.ctx.warn(where, f"{mode!r} is ignored (it changes nothing on Linux)")
    kind = "bind" if _is_path(fields[0]) else "volume"
    return _Mount(kind, fields[0], fields[1], read_only="ro" in modes)


def _long_volume(s: Service, item: YDict, where: tuple[Part, ...]) -> _Mount:
    s.known_keys(item, where, _VOLUME_KEYS)
    kind = item.get("type", "volume")
    if kind not in ("volume", "bind"):
        raise s.ctx.fail(
            (*where, "type"), f"volume type {kind!r} is not supported: use volume or bind"
        )
    target = text(s.ctx, item.get("target"), (*where, "target"))
    if "volume" in item and mapping(s.ctx, item["volume"], (*where, "volume")):
        raise s.ctx.fail((*where, "volume"), "volume options are not supported: remove them")
    _bind_options(s, item, where)
    if "consistency" in item:
        s.ctx.warn((*where, "consistency"), "ignored (it changes nothing on Linux)")
    read_only = boolean(s.ctx, item.get("read_only", False), (*where, "read_only"))
    if item.get("source") in (None, ""):
        if kind == "bind":
            raise s.ctx.fail(where, "a bind mount needs a source: the path to mount")
        if read_only:
            raise s.ctx.fail(
                (*where, "read_only"),
                "an anonymous volume starts empty, so a read-only one holds nothing: remove "
                "read_only, or mount a named volume",
            )
        return _Mount("anonymous", "", target, read_only=False)
    source = text(s.ctx, item["source"], (*where, "source"))
    if kind == "volume" and (_is_path(source) or "/" in source):
        raise s.ctx.fail(
            (*where, "source"),
            f"a volume's source is the name of a volume declared under the top-level "
            f"volumes, not a path ({source}): for a path of the host, give type: bind",
        )
    return _Mount(kind, source, target, read_only)


def _bind_options(s: Service, item: YDict, where: tuple[Part, ...]) -> None:
    bind = mapping(s.ctx, item.get("bind"), (*where, "bind"))
    for key, value in bind.items():
        if key != "create_host_path" or not boolean(s.ctx, value, (*where, "bind", key)):
            raise s.ctx.fail(
                (*where, "bind", key),
                "bind options are not supported (MiniDock's bind mounts create a missing host "
                "path, as docker run -v does): remove it",
            )


def _shipped(s: Service, mount: _Mount, where: tuple[Part, ...]) -> dict[str, str | bool]:
    """A bind mount of a path of the controller's (relative to the Compose file, or `~`):
    the TOML config source of its file or directory, put on each host that runs the
    service as every config is; read-write, a writable copy on each host, said in a
    warning (docs/compose.md#files-beside-the-compose-file)."""
    path = s.ctx.path(mount.source)
    if os.path.isdir(path):
        source: dict[str, str | bool] = {"dir": mount.source}
    elif os.path.isfile(path):
        source = {"file": mount.source}
    else:
        raise s.ctx.fail(
            where,
            f"{mount.source} is not on the controller ({path}): a bind mount of a path beside "
            "the Compose file ships that file or directory; create it, or fix the path",
        )
    if not mount.read_only:
        s.ctx.warn(
            where,
            f"{mount.source} is shipped to each host that runs {s.name} and mounted writable "
            f"at {mount.target}: each host's copy keeps its own writes, never synced back, "
            "and is replaced when the files change; use a named volume for data that must "
            "persist",
        )
        source["writable"] = True
    return source


def networks(s: Service) -> None:
    """`networks`: external networks are joined by name; every other Compose network is
    the cluster's own network (minidock-CLUSTER), which every task is on already."""
    if "networks" not in s.body:
        return
    value = s.body["networks"]
    where = (*s.at, "networks")
    names: list[tuple[str, Part]] = []
    if isinstance(value, list):
        names = [(text(s.ctx, v, (*where, i)), i) for i, v in enumerate(value)]
    else:
        for key, options in mapping(s.ctx, value, where).items():
            if options is not None and mapping(s.ctx, options, (*where, key)):
                raise s.ctx.fail(
                    (*where, key, next(iter(options))),
                    "network options (aliases, addresses) are not supported: tasks are "
                    "reached by their service name; remove it",
                )
            names.append((key, key))
    joined = [(name, part) for name, part in names if _network(s, name, (*where, part))]
    for i, (_, part) in enumerate(joined):
        s.ctx.came_from(("services", s.name, "networks", i), (*where, part))
    if joined:
        s.set("networks", [s.top.networks[name] for name, _ in joined], "networks")


def _network(s: Service, name: str, where: tuple[Part, ...]) -> bool:
    """True when the service joins `name` besides its cluster's network."""
    if name == "default" and name not in s.top.networks:
        return False
    if name not in s.top.networks:
        raise s.ctx.fail(
            where, f"network {name!r} is not declared: add it under the top-level networks"
        )
    return bool(s.top.networks[name])
