"""Observe the fleet: what runs on every host, read with `docker ps` + `docker inspect`.

Every host is probed concurrently. A probe fails (HostObservation.ok is False, with a
one-line error that does not repeat the host name) when SSH fails, when docker fails, or
when its output cannot be parsed: a failed probe is never read as "no containers".
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from minidock.commands import ParseError, inspect_argv, parse_ids, parse_inspect, ps_argv
from minidock.model import Host, HostObservation, Observed
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = ["observe", "observe_host"]

_VANISHED = re.compile(r"Error(?: response from daemon)?: No such (?:container|object): \S+")
_MAX_ERROR = 200


def _failure(result: Result, what: str) -> str:
    detail = " ".join((result.stderr.strip() or result.stdout.strip()).split())
    return f"{what} failed (exit {result.exit_status}): {detail}"[:_MAX_ERROR]


def _only_vanished(result: Result) -> bool:
    """inspect failed only because containers were removed after `docker ps` listed them."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return bool(lines) and all(_VANISHED.fullmatch(line) for line in lines)


async def observe_host(executor: Executor, host: Host, cluster: str) -> HostObservation:
    """One probe of one host: this cluster's containers, or why they could not be read."""

    def failed(error: str) -> HostObservation:
        return HostObservation(host=host.name, ok=False, error=" ".join(error.split()))

    try:
        ps = await executor.run(host, ps_argv(cluster))
        if ps.exit_status != 0:
            return failed(_failure(ps, "docker ps"))
        ids = parse_ids(ps.stdout)
        if not ids:
            return HostObservation(host=host.name, ok=True)
        inspect = await executor.run(host, inspect_argv(ids))
        if inspect.exit_status != 0 and not _only_vanished(inspect):
            return failed(_failure(inspect, "docker inspect"))
        containers = parse_inspect(host.name, cluster, inspect.stdout)
    except (Unreachable, CommandTimeout) as exc:
        return failed(exc.reason)
    except ParseError as exc:
        return failed(str(exc)[:_MAX_ERROR])
    return HostObservation(host=host.name, ok=True, containers=containers)


async def observe(executor: Executor, hosts: Sequence[Host], cluster: str) -> Observed:
    """Probe every host at once; each gets a HostObservation, failed or not."""
    found = await asyncio.gather(*(observe_host(executor, h, cluster) for h in hosts))
    return Observed(hosts={o.host: o for o in found})
