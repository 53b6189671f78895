"""The ingress proxies over SSH: observe what each has loaded, and converge them on the
pass's route table (start a proxy that is missing, dead or of another spec; load a config
only where its digest differs). The configs come from `minidock.commands.caddy`, the route table
from `minidock.core.routes`; an ingress host that does not answer is reported, never
fatal. docs/ingress.md.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from minidock.commands.caddy import (
    Certificate,
    ProxyConfig,
    ProxyTraffic,
    RouteSpec,
    load_argv,
    parse_proxy_probe,
    proxy_config,
    proxy_probe_argv,
    proxy_run_argv,
    proxy_traffic,
    remove_argv,
    request_metrics_argv,
    stop_argv,
)
from minidock.core.routes import ProxyStep, RouteTable, route_changes
from minidock.core.serving import Serving
from minidock.core.tls import TlsState
from minidock.documents.plan import RouteLoad
from minidock.model import Event, Host, Ingress, ProxyObservation
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = [
    "ProxyOutcome",
    "configs_for",
    "converge_proxies",
    "observe_proxies",
    "read_traffic",
    "route_loads",
]

NO_TLS = TlsState()
LOAD_TRIES = 20  # a proxy just started answers its admin API within a second or so
LOAD_PAUSE = 0.1

Shell = Callable[..., Awaitable[Result]]  # (host, argv, stdin=None) -> Result


async def observe_proxies(
    executor: Executor, hosts: Sequence[Host], cluster: str
) -> dict[str, ProxyObservation]:
    """Each ingress host's proxy, probed concurrently (one command per host)."""

    async def one(host: Host) -> ProxyObservation:
        try:
            res = await executor.run(host, proxy_probe_argv(cluster), timeout=host.probe_timeout)
        except (Unreachable, CommandTimeout) as exc:
            return ProxyObservation(host.name, ok=False, error=exc.reason)
        if res.exit_status != 0:
            detail = " ".join((res.stderr or res.stdout).split())[:200]
            return ProxyObservation(host.name, ok=False, error=f"proxy probe failed: {detail}")
        return parse_proxy_probe(host.name, res.stdout)

    found = await asyncio.gather(*(one(h) for h in hosts))
    return {p.host: p for p in found}


async def read_traffic(
    executor: Executor, hosts: Sequence[Host], cluster: str, counted: bool = True
) -> tuple[ProxyTraffic, ...]:
    """Each ingress host's proxy's request metrics, read concurrently (one `docker exec`
    per host); a host or proxy that does not answer is said, never read as no traffic.
    `counted` False (`[ingress] request_metrics = false`): whether each answered, only."""

    async def one(host: Host) -> ProxyTraffic:
        argv = request_metrics_argv(cluster)
        try:
            res = await executor.run(host, argv, timeout=host.probe_timeout)
        except (Unreachable, CommandTimeout) as exc:
            return ProxyTraffic(host.name, error=exc.reason)
        if res.exit_status != 0:
            detail = " ".join((res.stderr or res.stdout).split())[:200]
            return ProxyTraffic(host.name, error=f"reading its metrics failed: {detail}")
        return proxy_traffic(host.name, res.stdout, counted)

    return tuple(await asyncio.gather(*(one(h) for h in hosts)))


def configs_for(
    table: RouteTable,
    ingress: Ingress,
    tls: TlsState = NO_TLS,
    challenges: Mapping[str, str] = MappingProxyType({}),
) -> ProxyConfig:
    """The config every ingress proxy of the cluster loads for this route table: the
    certificates its TLS routes were given or got from ACME (`tls`; an ACME route whose
    certificate is not issued yet is served on plain HTTP), and any ACME `challenges`."""
    certificates: dict[str, Certificate] = {}
    for e in table:
        route = e.route
        if route.tls.mode == "files":
            certificates[route.domain] = Certificate(route.tls.cert, route.tls.key)
        elif route.tls.mode == "acme" and tls.record(route.domain).has_certificate:
            record = tls.record(route.domain)
            certificates[route.domain] = Certificate(record.chain, record.key)
    routes = [
        RouteSpec(
            e.route.domain,
            e.route.path,
            e.upstreams,
            e.route.domain in certificates,
            e.mode.message if e.mode.serving is Serving.MAINTENANCE else "",
            e.mode.timeout if e.mode.serving is Serving.PAUSED else 0.0,
            e.weights,
            e.service,
        )
        for e in table
    ]
    return proxy_config(routes, ingress, list(certificates.values()), challenges)


@dataclass
class ProxyOutcome:
    """What converging the proxies did: events to record, and lines for acts that failed."""

    events: list[Event]
    failures: list[str]


async def converge_proxies(
    sh: Shell,
    cluster: str,
    ingress: Ingress,
    config: ProxyConfig,
    steps: Sequence[ProxyStep],
    seen: Mapping[str, ProxyObservation],
    now: float,
) -> ProxyOutcome:
    """Each step's proxy (`minidock.core.routes.proxy_steps`: every answering ingress
    host's) (re)started where the step says, then `config` loaded where the proxy's loaded
    digest differs; hosts with no step are left for a later pass."""
    outcome = ProxyOutcome([], [])

    async def one(step: ProxyStep) -> None:
        try:
            await _converge_one(sh, cluster, ingress, config, step, seen[step.host], now, outcome)
        except (_ProxyFailed, Unreachable, CommandTimeout) as exc:
            line = f"ingress proxy on {step.host}: {exc}"
            outcome.failures.append(line)
            outcome.events.append(Event(now, "act-failed", line, host=step.host))

    await asyncio.gather(*(one(s) for s in steps if s.host in seen))
    return outcome


class _ProxyFailed(Exception):
    pass


def route_loads(
    table: RouteTable,
    ingress: Ingress,
    steps: Sequence[ProxyStep],
    seen: Mapping[str, ProxyObservation],
    tls: TlsState = NO_TLS,
    challenges: Mapping[str, str] = MappingProxyType({}),
) -> tuple[RouteLoad, ...]:
    """What `converge_proxies` would do to each ingress host's proxy for this route table
    (with the state's ACME certificates, `tls`), with the route changes a load makes (for
    `plan`)."""
    config = configs_for(table, ingress, tls, challenges)
    by_host = {s.host: s for s in steps}
    loads = []
    for host, proxy in sorted(seen.items()):
        step = by_host.get(host)
        if step is None:
            loads.append(RouteLoad(host, "unreachable"))
        elif step.start:
            loads.append(RouteLoad(host, "start", route_changes(table, ())))  # every route new
        elif step.waits:
            same = proxy.digest == config.digest
            changes = () if same else route_changes(table, proxy.routes, proxy.modes)
            loads.append(RouteLoad(host, "waits", (step.waits, *changes)))
        elif proxy.digest == config.digest:
            loads.append(RouteLoad(host, "unchanged"))
        else:
            loads.append(RouteLoad(host, "load", route_changes(table, proxy.routes, proxy.modes)))
    return tuple(loads)


async def _converge_one(
    sh: Shell,
    cluster: str,
    ingress: Ingress,
    config: ProxyConfig,
    step: ProxyStep,
    proxy: ProxyObservation,
    now: float,
    outcome: ProxyOutcome,
) -> None:
    host = step.host
    if step.start:
        await sh(host, stop_argv(cluster))  # requests under way finish; fails if none runs
        await sh(host, remove_argv(cluster))
        res = await sh(host, proxy_run_argv(cluster, ingress))
        if res.exit_status != 0:
            raise _ProxyFailed(f"docker run failed: {_line(res)}")
        line = f"started the ingress proxy on {host} (it {step.why})"
        outcome.events.append(Event(now, "proxy-started", line, host=host))
    if step.start or proxy.digest != config.digest:
        await _load(sh, host, cluster, config)
        line = f"routes loaded on {host} ({config.digest})"
        outcome.events.append(Event(now, "routes-loaded", line, host=host))


async def _load(sh: Shell, host: str, cluster: str, config: ProxyConfig) -> None:
    """`caddy reload` of the config, retried while a fresh proxy's admin API comes up;
    each load's route servers on sockets of their own (`ProxyConfig.loadable`)."""
    text = config.loadable(secrets.token_hex(6))
    for attempt in range(LOAD_TRIES):
        res = await sh(host, load_argv(cluster), text)
        if res.exit_status == 0:
            return
        if attempt + 1 < LOAD_TRIES:
            await asyncio.sleep(LOAD_PAUSE)
    raise _ProxyFailed(f"loading the routes failed: {_line(res)}")


def _line(res: Result) -> str:
    text = " ".join((res.stderr.strip() or res.stdout.strip()).split())
    return (text[-300:] if len(text) > 300 else text) or f"exit {res.exit_status}"
