"""The ingress proxies over SSH: observe what each has loaded, and converge them on the
pass's route table as its rendered steps say (start a proxy that is missing, dead or of
another spec; load the config where the step says it differs). The config and each step's
load come from `minidock.commands.proxies` (rendered once a pass), the route table from
`minidock.core.routes`; an ingress host that does not answer is reported, never fatal.
docs/ingress.md.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from minidock.commands.caddy import (
    ProxyConfig,
    ProxyTraffic,
    load_argv,
    parse_proxy_probe,
    proxy_probe_argv,
    proxy_run_argv,
    proxy_traffic,
    remove_argv,
    request_metrics_argv,
    stop_argv,
)
from minidock.commands.proxies import ProxyLoad
from minidock.model import Event, Host, Ingress, ProxyObservation, RouteCounts
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = [
    "ProxyOutcome",
    "converge_proxies",
    "observe_proxies",
    "observe_traffic",
    "read_traffic",
    "route_counts",
]

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


async def observe_traffic(
    executor: Executor, hosts: Sequence[Host], cluster: str
) -> dict[str, tuple[RouteCounts, ...] | None]:
    """Each ingress host's proxy's route counters for the pass's observation (while a
    service autoscales: core/autoscaling.py), read as `minidock metrics` reads them
    (`read_traffic`); None for a proxy whose metrics could not be read: no data."""
    found = await read_traffic(executor, hosts, cluster)
    return {t.host: None if t.error else route_counts(t) for t in found}


def route_counts(traffic: ProxyTraffic) -> tuple[RouteCounts, ...]:
    """A proxy's request metrics as the model's counters: each route's requests and its
    cumulative finite buckets."""
    return tuple(RouteCounts(r.service, r.route, r.count, r.buckets) for r in traffic.routes)


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
    loads: Sequence[ProxyLoad],
    now: float,
) -> ProxyOutcome:
    """Each step's proxy (`minidock.core.routes.proxy_steps`: every answering ingress
    host's) (re)started where the step says, then `config` loaded where its load says
    (`minidock.commands.proxies`: the pass rendered it, and compared it with what the
    proxy holds); hosts with no step are left for a later pass."""
    outcome = ProxyOutcome([], [])

    async def one(load: ProxyLoad) -> None:
        try:
            await _converge_one(sh, cluster, ingress, config, load, now, outcome)
        except (_ProxyFailed, Unreachable, CommandTimeout) as exc:
            line = f"ingress proxy on {load.step.host}: {exc}"
            outcome.failures.append(line)
            outcome.events.append(Event(now, "act-failed", line, host=load.step.host))

    await asyncio.gather(*(one(x) for x in loads))
    return outcome


class _ProxyFailed(Exception):
    pass


async def _converge_one(
    sh: Shell,
    cluster: str,
    ingress: Ingress,
    config: ProxyConfig,
    load: ProxyLoad,
    now: float,
    outcome: ProxyOutcome,
) -> None:
    step, host = load.step, load.step.host
    if step.start:
        await sh(host, stop_argv(cluster))  # requests under way finish; fails if none runs
        await sh(host, remove_argv(cluster))
        res = await sh(host, proxy_run_argv(cluster, ingress))
        if res.exit_status != 0:
            raise _ProxyFailed(f"docker run failed: {_line(res)}")
        line = f"started the ingress proxy on {host} (it {step.why})"
        outcome.events.append(Event(now, "proxy-started", line, host=host))
    if load.load:
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
