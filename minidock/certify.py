"""The ACME step of a pass: order the certificates that are due (`minidock.core.tls.due`)
with the controller as the ACME client (`minidock.acme`), the HTTP-01 responses loaded
into every answering ingress proxy first, and record what came of each order. Runs after
the decision is committed and before the pass's routes are loaded, which then serve the
new certificates. An order that fails backs off and leaves everything else as it was.
docs/ingress.md#acme.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from minidock.caddy import ProxyConfig, proxy_spec
from minidock.core.routes import RouteTable
from minidock.core.tls import TlsState, due, failed, issued
from minidock.ingress import Shell, configs_for, converge_proxies
from minidock.model import Cluster, Event, ProxyObservation
from minidock.units import format_duration

__all__ = ["Certified", "acme_names", "certify"]


@dataclass
class Certified:
    """What the step did: the TLS state after it, the proxies as it left them (their
    loaded digests), and its events."""

    tls: TlsState
    proxies: dict[str, ProxyObservation]
    events: list[Event]


def acme_names(table: RouteTable) -> tuple[str, ...]:
    """The host names the route table asks ACME certificates for, sorted."""
    return tuple(sorted({e.route.domain for e in table if e.route.tls.mode == "acme"}))


async def certify(
    sh: Shell,
    cluster: Cluster,
    table: RouteTable,
    tls: TlsState,
    proxies: Mapping[str, ProxyObservation],
    now: float,
) -> Certified:
    """Each due name ordered in turn, while every answering proxy runs this ingress's
    spec (a proxy this pass starts is ordered for by the next)."""
    ingress = cluster.ingress
    outcome = Certified(tls, dict(proxies), [])
    if ingress is None or ingress.acme is None:
        return outcome
    settings = ingress.acme
    names = due(acme_names(table), tls, settings.directory, now, settings.renew_before)
    answering = [p for p in proxies.values() if p.ok]
    ready = all(p.running and p.spec == proxy_spec(ingress) for p in answering)
    if not names or not answering or not ready:
        return outcome
    # the ACME client (requests, acme, josepy) loads only when an order is due: every
    # other pass, and every command, starts without it
    from minidock.acme import AcmeFailed, obtain

    for name in names:

        async def publish(responses: Mapping[str, str]) -> None:
            config = configs_for(table, ingress, outcome.tls, responses)
            await _load(sh, cluster, config, outcome, now)

        try:
            account, got = await obtain(settings, outcome.tls.account, name, publish)
        except AcmeFailed as exc:
            outcome.tls = failed(outcome.tls, name, exc.reason, time.time(), exc.retry_after)
            wait = outcome.tls.record(name).next_try - time.time()
            line = (
                f"certificate for {name} not issued: {exc.reason}; "
                f"next try in {format_duration(wait)}"
            )
            outcome.events.append(Event(now, "certificate-failed", line))
            continue
        outcome.tls = issued(
            replace(outcome.tls, account=account),
            name,
            got.chain,
            got.key,
            issuer=got.issuer,
            not_after=got.not_after,
            directory=settings.directory,
            now=time.time(),
        )
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(got.not_after))
        line = f"certificate for {name} issued by {got.issuer}, valid until {until}"
        outcome.events.append(Event(now, "certificate-issued", line))
    return outcome


async def _load(
    sh: Shell, cluster: Cluster, config: ProxyConfig, outcome: Certified, now: float
) -> None:
    """`config` into every answering proxy; the observations then say it is loaded."""
    assert cluster.ingress is not None
    done = await converge_proxies(sh, cluster.name, cluster.ingress, config, outcome.proxies, now)
    outcome.events.extend(e for e in done.events if e.kind == "act-failed")
    failed_hosts = {e.host for e in done.events if e.kind == "act-failed"}
    outcome.proxies = {
        host: p if host in failed_hosts or not p.ok else replace(p, digest=config.digest)
        for host, p in outcome.proxies.items()
    }
