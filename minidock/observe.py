"""Observe the fleet: what runs on every host, read with `docker ps` + `docker inspect`.

Every host is probed concurrently. A probe fails (HostObservation.ok is False, with a
one-line error that does not repeat the host name) when SSH fails, when docker fails, or
when its output cannot be parsed: a failed probe is never read as "no containers". Each
probe command is bounded by `host.probe_timeout`; one that times out fails the probe and
drops the host's pooled connection, so the next pass reconnects (bounded by
`connect_timeout`) instead of waiting on a connection to a host that is cut off or hung.

Over SSH (an executor that can batch: `ssh.BatchExecutor`), a probe is one round trip:
its commands run in one session, in order, each read as if it had run alone, and
`probe_timeout` bounds them together. At fleet size that is what a probe costs: one
session per host, as a bare fan-out pays (docs/benchmarks.md). Other executors (the unit
tests' fakes) get the commands one at a time, ps and the port reads at once.

With `ports=True` the probe also reads which host ports are held outside the cluster
(`HostObservation.ports_in_use`): listening sockets from /proc/net and other containers'
published ports, read at the same time as `docker ps` on the same connection. That read
is best effort: when it fails the probe still stands on what docker said, with an empty
set, and the failure is logged (INFO).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import replace

from minidock.commands import (
    ParseError,
    inspect_argv,
    parse_ids,
    parse_inspect_all,
    parse_oneoffs,
    parse_proc_net,
    parse_published_ports,
    ports_held_outside,
    proc_net_argv,
    proc_net_missing_only,
    ps_argv,
    published_ports_argv,
)
from minidock.model import Host, HostObservation, Observed
from minidock.ssh import BatchExecutor, CommandTimeout, Executor, Result, Step, Unreachable

__all__ = ["observe", "observe_host", "ports_in_use"]

log = logging.getLogger(__name__)

_VANISHED = re.compile(r"Error(?: response from daemon)?: No such (?:container|object): \S+")
_MAX_ERROR = 200


def _failure(result: Result, what: str) -> str:
    detail = " ".join((result.stderr.strip() or result.stdout.strip()).split())
    return f"{what} failed (exit {result.exit_status}): {detail}"[:_MAX_ERROR]


def _only_vanished(result: Result) -> bool:
    """inspect failed only because containers were removed after `docker ps` listed them."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return bool(lines) and all(_VANISHED.fullmatch(line) for line in lines)


def _failed(host: Host, error: str, cause: str = "") -> HostObservation:
    """A failed probe; `cause` kept where it says it without naming the host (else the
    error is its own cause: HostObservation.why_not)."""
    error, cause = " ".join(error.split()), " ".join(cause.split())
    return HostObservation(host.name, False, error=error, cause="" if cause == error else cause)


def _seen(host: Host, cluster: str, ps: Result, inspect: Result | None) -> HostObservation:
    """What `docker ps` and `docker inspect` of its ids said, as the host's observation
    (raises ParseError on output that is not what the commands promise). `inspect` is None
    when ps listed nothing."""
    if ps.exit_status != 0:
        return _failed(host, _failure(ps, "docker ps"))
    if not parse_ids(ps.stdout):
        return HostObservation(host=host.name, ok=True)
    if inspect is None:
        raise ParseError("docker inspect did not run")
    if inspect.exit_status != 0 and not _only_vanished(inspect):
        return _failed(host, _failure(inspect, "docker inspect"))
    found = parse_inspect_all(host.name, inspect.stdout)
    mine = tuple(c for c in found if c.cluster == cluster)
    rest = tuple(c for c in found if c.cluster != cluster)
    oneoffs = parse_oneoffs(host.name, cluster, inspect.stdout)
    return HostObservation(host.name, True, mine, others=rest, oneoffs=oneoffs)


async def _containers(
    executor: Executor, host: Host, cluster: str, *, others: bool = True
) -> HostObservation:
    """docker ps + docker inspect: this cluster's containers (and, with `others`, those of
    every other MiniDock cluster, which count against the host's capacity and ports), or
    why they could not be read."""
    try:
        ps = await executor.run(
            host, ps_argv(None if others else cluster), timeout=host.probe_timeout
        )
        ids = parse_ids(ps.stdout) if ps.exit_status == 0 else []
        inspect = None
        if ids:
            inspect = await executor.run(host, inspect_argv(ids), timeout=host.probe_timeout)
        return _seen(host, cluster, ps, inspect)
    except (CommandTimeout, Unreachable, ParseError) as exc:
        return _failed_probe(executor, host, exc)


def _failed_probe(
    executor: Executor, host: Host, exc: CommandTimeout | Unreachable | ParseError
) -> HostObservation:
    """The failed probe an error makes; a timed-out command means a cut-off or hung host,
    whose connection is dropped so the next pass connects afresh."""
    if isinstance(exc, CommandTimeout):
        executor.disconnect(host)
    if isinstance(exc, Unreachable):
        return _failed(host, exc.reason, exc.cause)
    if isinstance(exc, CommandTimeout):
        return _failed(host, exc.reason)
    return _failed(host, str(exc)[:_MAX_ERROR])


def _held(cluster: str, tcp: Result, udp: Result, published: Result) -> frozenset[str]:
    """The host ports held outside the cluster, from the three reads (ParseError when one
    failed or printed what it should not)."""
    for result, what in ((tcp, "cat /proc/net/tcp"), (udp, "cat /proc/net/udp")):
        if result.exit_status != 0 and not proc_net_missing_only(result.stderr):
            raise ParseError(_failure(result, what))
    if published.exit_status != 0:
        raise ParseError(_failure(published, "docker ps"))
    listening = parse_proc_net(tcp.stdout, "tcp") | parse_proc_net(udp.stdout, "udp")
    return ports_held_outside(cluster, listening, parse_published_ports(published.stdout))


async def ports_in_use(executor: Executor, host: Host, cluster: str) -> frozenset[str]:
    """Host ports held by anything but this cluster's containers ("8080/tcp", "53/udp").

    Three reads at once: /proc/net/tcp[6] and /proc/net/udp[6] (every listening or bound
    socket on the host, docker-proxy's included) and `docker ps` of every running
    container's cluster label and published ports. Raises Unreachable, CommandTimeout or
    ParseError (a failed command is a ParseError naming it).
    """
    reads = await asyncio.gather(
        executor.run(host, proc_net_argv("tcp"), timeout=host.probe_timeout),
        executor.run(host, proc_net_argv("udp"), timeout=host.probe_timeout),
        executor.run(host, published_ports_argv(), timeout=host.probe_timeout),
        return_exceptions=True,  # all three finish before any failure is raised
    )
    for read in reads:
        if isinstance(read, BaseException):
            raise read
    tcp, udp, published = (r for r in reads if isinstance(r, Result))
    return _held(cluster, tcp, udp, published)


async def _ports_or_none(executor: Executor, host: Host, cluster: str) -> frozenset[str]:
    """`ports_in_use`, or an empty set (logged) when it cannot be read: the probe does not
    fail for it."""
    try:
        return await ports_in_use(executor, host, cluster)
    except (Unreachable, CommandTimeout, ParseError) as exc:
        reason = exc.reason if isinstance(exc, Unreachable | CommandTimeout) else str(exc)
        log.info("%s: host ports in use not read: %s", host.name, reason)
        return frozenset()


async def observe_host(
    executor: Executor, host: Host, cluster: str, *, ports: bool = True, others: bool = True
) -> HostObservation:
    """One probe of one host: this cluster's containers (with `others`, the other MiniDock
    clusters' too; with `ports`, the host ports held outside MiniDock), or why the
    containers could not be read."""
    if isinstance(executor, BatchExecutor):
        return await _in_one_session(executor, host, cluster, ports=ports, others=others)
    if not ports:
        return await _containers(executor, host, cluster, others=others)
    seen, held = await asyncio.gather(
        _containers(executor, host, cluster, others=others),
        _ports_or_none(executor, host, cluster),
    )
    return replace(seen, ports_in_use=held) if seen.ok else seen


def probe_steps(cluster: str, *, ports: bool = True, others: bool = True) -> list[Step]:
    """A probe as one batch: ps, the port reads (with `ports`), then inspect of what ps
    listed."""
    steps = [Step(tuple(ps_argv(None if others else cluster)))]
    if ports:
        reads = (proc_net_argv("tcp"), proc_net_argv("udp"), published_ports_argv())
        steps += [Step(tuple(argv)) for argv in reads]
    steps.append(Step(tuple(inspect_argv([])), ids_from=0))
    return steps


async def _in_one_session(
    executor: BatchExecutor, host: Host, cluster: str, *, ports: bool, others: bool
) -> HostObservation:
    """`observe_host` in one round trip: ps, the port reads, then inspect of what ps
    listed, as one batch bounded by `probe_timeout` (the same commands and the same reading
    of their results as one command at a time)."""
    steps = probe_steps(cluster, ports=ports, others=others)
    try:
        results = await executor.run_batch(host, steps, timeout=host.probe_timeout)
        ps = results[0]
        assert ps is not None  # the first step always runs
        seen = _seen(host, cluster, ps, results[-1])
    except (CommandTimeout, Unreachable, ParseError) as exc:
        return _failed_probe(executor, host, exc)
    if not (ports and seen.ok):
        return seen
    tcp, udp, published = results[1:4]
    try:
        if tcp is None or udp is None or published is None:
            raise ParseError("the port reads did not run")
        held = _held(cluster, tcp, udp, published)
    except ParseError as exc:
        log.info("%s: host ports in use not read: %s", host.name, exc)
        held = frozenset()
    return replace(seen, ports_in_use=held)


async def observe(
    executor: Executor,
    hosts: Sequence[Host],
    cluster: str,
    *,
    ports: bool = True,
    others: bool = True,
) -> Observed:
    """Probe every host at once; each gets a HostObservation, failed or not."""
    found = await asyncio.gather(
        *(observe_host(executor, h, cluster, ports=ports, others=others) for h in hosts)
    )
    return Observed(hosts={o.host: o for o in found})
