"""The name proxies over SSH (docs/discovery.md): observe each host's, and converge them on
the pass's endpoint table, as the decision's steps say (`minidock.core.endpoints`), each
with the config the pass rendered (`minidock.commands.proxies`): on each host, start a
missing or stopped one, load its config where the step says it differs (copied in,
checked by HAProxy, then a seamless reload), stop (the connections under way served
to their end) and remove those the step removes. A host that does not answer is left for
a later pass, never fatal."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from minidock.commands.haproxy import (
    check_argv,
    config_tar,
    copy_argv,
    names_probe_argv,
    parse_names_probe,
    reload_argv,
    remove_argv,
    run_argv,
    stop_argv,
)
from minidock.commands.proxies import NameLoad, NamesLoad
from minidock.model import Event, Host, HostNames
from minidock.ssh import CommandTimeout, Executor, Result, Unreachable

__all__ = ["NamesOutcome", "converge_names", "loaded_name_upstreams", "observe_names"]

Shell = Callable[..., Awaitable[Result]]  # (host, argv, stdin=None) -> Result
Prepare = Callable[[str], Awaitable[str]]  # the cluster network on a host: "" or why not


async def observe_names(
    executor: Executor, hosts: Sequence[Host], cluster: str
) -> dict[str, HostNames]:
    """Each host's name proxies of the cluster, probed concurrently (one command a host)."""

    async def one(host: Host) -> tuple[str, HostNames]:
        try:
            res = await executor.run(host, names_probe_argv(cluster), timeout=host.probe_timeout)
        except (Unreachable, CommandTimeout):
            return host.name, None
        if res.exit_status != 0:
            return host.name, None
        return host.name, parse_names_probe(cluster, res.stdout)

    return dict(await asyncio.gather(*(one(h) for h in hosts)))


def loaded_name_upstreams(seen: Mapping[str, HostNames]) -> frozenset[str]:
    """Every upstream an answering host's name proxy sends to (the traffic gate waits for
    a stopping task to leave them all)."""
    return frozenset(
        u for proxies in seen.values() if proxies for p in proxies.values() for u in p.upstreams
    )


@dataclass
class NamesOutcome:
    """What converging the name proxies did: events to record, lines for failed acts."""

    events: list[Event] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def converge_names(
    sh: Shell,
    cluster: str,
    image: str,
    steps: Sequence[NamesLoad],
    now: float,
    prepare: Prepare | None = None,
) -> NamesOutcome:
    """Each step's host (`minidock.core.endpoints.name_steps`, rendered by
    `minidock.commands.proxies`): after `prepare` (the cluster network), one running name
    proxy per service the step runs, started where its load says, its config loaded where
    its load says; the proxies the step removes, stopped gracefully and removed."""
    outcome = NamesOutcome()

    async def one(rendered: NamesLoad) -> None:
        step = rendered.step
        host = step.host
        try:
            refused = await prepare(host) if step.run and prepare is not None else ""
            if refused:
                raise _NamesFailed(refused)
            for load in rendered.loads:
                await _converge_one(sh, host, cluster, image, load, now, outcome)
        except (_NamesFailed, Unreachable, CommandTimeout) as exc:
            line = f"name proxies on {host}: {exc}"
            outcome.failures.append(line)
            outcome.events.append(Event(now, "act-failed", line, host=host))
        await asyncio.gather(*(remove(host, gone) for gone in step.remove))

    async def remove(host: str, service: str) -> None:
        """Stopped first: HAProxy closes its listeners and serves the connections under way
        to their end (a client that looked the name up before and connects while it stops
        is refused: the name's hand-over race, docs/discovery.md); then removed."""
        await sh(host, stop_argv(cluster, service))
        await sh(host, remove_argv(cluster, service))
        line = f"removed the name proxy of {service} on {host}"
        outcome.events.append(Event(now, "names-removed", line, service=service, host=host))

    await asyncio.gather(*(one(x) for x in steps))
    return outcome


class _NamesFailed(Exception):
    pass


async def _converge_one(
    sh: Shell,
    host: str,
    cluster: str,
    image: str,
    load: NameLoad,
    now: float,
    outcome: NamesOutcome,
) -> None:
    config = load.config
    service = config.service
    if load.start:
        await sh(host, remove_argv(cluster, service))
        await _must(sh, host, run_argv(cluster, service, image), None, "docker run")
        line = f"started the name proxy of {service} on {host}"
        outcome.events.append(Event(now, "names-started", line, service=service, host=host))
    if not load.load:
        return
    await _must(sh, host, copy_argv(cluster, service), config_tar(config), "copying the config")
    await _must(sh, host, check_argv(cluster, service), None, "checking the config")
    await _must(sh, host, reload_argv(cluster, service), None, "reloading")
    line = f"endpoints of {service} loaded on {host} ({config.digest})"
    outcome.events.append(Event(now, "endpoints-loaded", line, service=service, host=host))


async def _must(sh: Shell, host: str, argv: list[str], stdin: str | None, what: str) -> None:
    res = await sh(host, argv, stdin)
    if res.exit_status != 0:
        said = " ".join((res.stderr.strip() or res.stdout.strip()).split())[-300:]
        raise _NamesFailed(f"{what} failed: {said or f'exit {res.exit_status}'}")
