"""A service's ports, volumes and networks, short and long syntax, as TOML spec strings."""

from __future__ import annotations

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


def volumes(s: Service) -> None:
    """`volumes`: declared named volumes and absolute bind mounts, short and long syntax."""
    if "volumes" not in s.body:
        return
    found: list[str] = []
    for i, item in items(s.list_of("volumes")):
        where = (*s.at, "volumes", i)
        if isinstance(item, YDict):
            source, target, read_only = _long_volume(s, item, where)
        else:
            source, target, read_only = _short_volume(s, text(s.ctx, item, where), where)
        _check_source(s, source, where)
        s.ctx.came_from(("services", s.name, "volumes", len(found)), where)
        found.append(f"{source}:{target}{':ro' if read_only else ''}")
    s.set("volumes", found, "volumes")


def _short_volume(s: Service, spec: str, where: tuple[Part, ...]) -> tuple[str, str, bool]:
    fields = spec.split(":")
    if len(fields) == 1:
        raise s.ctx.fail(where, _anonymous(spec))
    if len(fields) > 3:
        raise s.ctx.fail(where, f"invalid volume {spec!r}: use SOURCE:TARGET[:ro]")
    modes = fields[2].split(",") if len(fields) == 3 else []
    for mode in modes:
        if mode not in ("ro", *_NO_OP_MODES):
            raise s.ctx.fail(where, f"volume option {mode!r} is not supported: use ro or rw")
        if mode in _NO_OP_MODES[1:]:
            s.ctx.warn(where, f"{mode!r} is ignored (it changes nothing on Linux)")
    return fields[0], fields[1], "ro" in modes


def _anonymous(target: str) -> str:
    return (
        f"an anonymous volume ({target}) is not supported: name it (NAME:{target}, declared "
        "under the top-level volumes) or remove it"
    )


def _long_volume(s: Service, item: YDict, where: tuple[Part, ...]) -> tuple[str, str, bool]:
    s.known_keys(item, where, _VOLUME_KEYS)
    kind = item.get("type", "volume")
    if kind not in ("volume", "bind"):
        raise s.ctx.fail(
            (*where, "type"), f"volume type {kind!r} is not supported: use volume or bind"
        )
    target = text(s.ctx, item.get("target"), (*where, "target"))
    if item.get("source") in (None, ""):
        raise s.ctx.fail(where, _anonymous(target))
    source = text(s.ctx, item["source"], (*where, "source"))
    if "volume" in item and mapping(s.ctx, item["volume"], (*where, "volume")):
        raise s.ctx.fail((*where, "volume"), "volume options are not supported: remove them")
    bind = mapping(s.ctx, item.get("bind"), (*where, "bind"))
    for key, value in bind.items():
        if key != "create_host_path" or not boolean(s.ctx, value, (*where, "bind", key)):
            raise s.ctx.fail(
                (*where, "bind", key),
                "bind options are not supported (MiniDock's bind mounts create a missing host "
                "path, as docker run -v does): remove it",
            )
    if "consistency" in item:
        s.ctx.warn((*where, "consistency"), "ignored (it changes nothing on Linux)")
    read_only = boolean(s.ctx, item.get("read_only", False), (*where, "read_only"))
    return source, target, read_only


def _check_source(s: Service, source: str, where: tuple[Part, ...]) -> None:
    if source.startswith("/"):
        return
    if source.startswith((".", "~")):
        raise s.ctx.fail(
            where,
            f"a relative bind mount ({source}) names a path beside the Compose file, on the "
            "controller, not on the hosts: write the absolute path on the hosts",
        )
    if source not in s.top.volumes:
        raise s.ctx.fail(
            where, f"volume {source!r} is not declared: add it under the top-level volumes"
        )


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
