"""Where a state store lives: a directory (the embedded SQLite store) or an etcd URL.

`etcd://host:2379[,host:2379,...]/prefix[?option=value&...]` names an etcd v3 cluster and
the key prefix under which this state lives (one prefix per state: several clusters can
share one etcd). `etcds://` is the same over TLS with the system's trust roots. Options,
each from the URL's query, else `MINIDOCK_ETCD_<NAME>`, else etcdctl's own variable:

| option | environment | etcdctl's | meaning |
| --- | --- | --- | --- |
| cacert | MINIDOCK_ETCD_CACERT | ETCDCTL_CACERT | the CA that signed the servers' certificates |
| cert, key | MINIDOCK_ETCD_CERT, _KEY | ETCDCTL_CERT, _KEY | a client certificate and its key |
| user | MINIDOCK_ETCD_USER | ETCDCTL_USER | etcd user (`name` or `name:password`) |
| - | MINIDOCK_ETCD_PASSWORD | ETCDCTL_PASSWORD | that user's password (never in the URL's query) |
| ttl | MINIDOCK_ETCD_TTL | - | the writer lease's TTL, default 10s |
| timeout | MINIDOCK_ETCD_TIMEOUT | - | how long one request may take, default 5s |

Parsing imports no etcd client. A URL is shown (`str`) without its password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from minidock.store.base import StoreUnusable
from minidock.units import format_duration, parse_duration

__all__ = [
    "CLUSTERS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "SCHEMES",
    "Endpoint",
    "EtcdURL",
    "StateLocation",
    "parse_etcd_url",
]

SCHEMES = ("etcd://", "etcds://")
DEFAULT_PORT = 2379
DEFAULT_TTL = 10.0  # seconds: the writer lease; a dead leader's lock is free after this
DEFAULT_TIMEOUT = 5.0  # seconds one etcd request may take before it counts as no answer
MIN_TTL = 2.0  # etcd rounds shorter leases up to its own minimum (about 1.5s by default)

_QUERY = ("cacert", "cert", "key", "user", "ttl", "timeout")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d+))?$")
_USAGE = "use etcd://host:2379[,host:2379]/prefix"


@dataclass(frozen=True)
class Endpoint:
    host: str  # a name, an IPv4 address, or an IPv6 address in brackets
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class EtcdURL:
    """An etcd state location: endpoints, key prefix, TLS files, user, lease TTL."""

    endpoints: tuple[Endpoint, ...]
    prefix: str  # "/minidock/prod": every key of this state starts with prefix + "/"
    tls: bool = False
    cacert: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False, compare=False)
    ttl: float = DEFAULT_TTL
    timeout: float = DEFAULT_TIMEOUT

    def __str__(self) -> str:
        scheme = "etcds" if self.tls else "etcd"
        user = f"{self.user}@" if self.user else ""
        hosts = ",".join(str(e) for e in self.endpoints)
        return f"{scheme}://{user}{hosts}{self.prefix}"

    def describe(self) -> str:
        """The URL and its lease TTL, for the docs' and the tests' messages."""
        return f"{self} (lease ttl {format_duration(self.ttl)})"


StateLocation = Path | EtcdURL  # where a state is: a directory, or a prefix in etcd
CLUSTERS = "clusters"  # under a store: one sub-store per further cluster it holds


def parse_etcd_url(text: str, environ: Mapping[str, str] | None = None) -> EtcdURL:
    """Parse an etcd URL (with options from `environ`, default os.environ); a bad one is
    `StoreUnusable` naming the part to fix."""
    env = os.environ if environ is None else environ
    parts = urlsplit(text)
    if f"{parts.scheme}://" not in SCHEMES:
        raise StoreUnusable(f"{text}: not an etcd URL; {_USAGE}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    endpoints = tuple(_endpoint(text, h) for h in hosts.split(",") if h.strip())
    if not endpoints:
        raise StoreUnusable(f"{_safe(text)}: no etcd endpoint; {_USAGE}")
    prefix = "/" + parts.path.strip("/")
    if prefix == "/":
        raise StoreUnusable(
            f"{_safe(text)}: name a key prefix for this state, e.g. etcd://{hosts}/minidock/prod"
        )
    query = _query(text, parts.query)
    user, password = _credentials(text, userinfo, query, env)
    files = {name: _option(name, query, env) for name in ("cacert", "cert", "key")}
    if bool(files["cert"]) != bool(files["key"]):
        raise StoreUnusable(f"{_safe(text)}: a client certificate needs both cert and key")
    return EtcdURL(
        endpoints=endpoints,
        prefix=prefix,
        tls=parts.scheme == "etcds" or any(files.values()),
        cacert=_path(files["cacert"]),
        cert=_path(files["cert"]),
        key=_path(files["key"]),
        user=user,
        password=password,
        ttl=_seconds(text, "ttl", _option("ttl", query, env), DEFAULT_TTL, MIN_TTL),
        timeout=_seconds(text, "timeout", _option("timeout", query, env), DEFAULT_TIMEOUT, 0.1),
    )


def _endpoint(text: str, host: str) -> Endpoint:
    match = _HOST.match(host.strip())
    if match is None:
        raise StoreUnusable(f"{_safe(text)}: bad endpoint {host!r}; {_USAGE}")
    port = int(match.group(2)) if match.group(2) else DEFAULT_PORT
    if not 0 < port < 65536:
        raise StoreUnusable(f"{_safe(text)}: bad port in {host!r}; {_USAGE}")
    return Endpoint(match.group(1), port)


def _query(text: str, query: str) -> dict[str, str]:
    found = dict(parse_qsl(query, keep_blank_values=True))
    if "password" in found:
        raise StoreUnusable(
            f"{_safe(text)}: no password in the URL's query; set MINIDOCK_ETCD_PASSWORD"
        )
    unknown = sorted(set(found) - set(_QUERY))
    if unknown:
        raise StoreUnusable(
            f"{_safe(text)}: unknown option {unknown[0]!r}; known: {', '.join(_QUERY)}"
        )
    return found


def _option(name: str, query: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    for value in (
        query.get(name),
        env.get(f"MINIDOCK_ETCD_{name.upper()}"),
        env.get(f"ETCDCTL_{name.upper()}"),
    ):
        if value:
            return value
    return None


def _credentials(
    text: str, userinfo: str, query: Mapping[str, str], env: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """(user, password) from the URL's user part, else the query, else the environment."""
    named = unquote(userinfo) if userinfo else _option("user", query, env)
    if not named:
        return None, None
    user, colon, inline = named.partition(":")
    password = inline if colon else None
    password = password or env.get("MINIDOCK_ETCD_PASSWORD") or env.get("ETCDCTL_PASSWORD")
    if not password:
        raise StoreUnusable(f"{_safe(text)}: etcd user {user!r} needs MINIDOCK_ETCD_PASSWORD")
    return user, password


def _seconds(text: str, name: str, value: str | None, default: float, least: float) -> float:
    if value is None:
        return default
    try:
        seconds = parse_duration(value if value[-1].isalpha() else f"{value}s")
    except ValueError as exc:
        raise StoreUnusable(f"{_safe(text)}: {name}: {exc}") from None
    if seconds < least:
        raise StoreUnusable(f"{_safe(text)}: {name} {value} is too short; use at least {least:g}s")
    return seconds


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value).expanduser()


def _safe(text: str) -> str:
    """The URL for a message: a password in its user part is masked."""
    parts = urlsplit(text)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return text
    masked = userinfo.split(":", 1)[0] + ":***@" + hosts
    return parts._replace(netloc=masked).geturl()
