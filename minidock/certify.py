"""The ACME act of a pass: order each certificate the plan says is due
(`Plan.certificates`, from `minidock.core.tls.due`) with the controller as the ACME client
(`minidock.acme`), the HTTP-01 responses loaded into every answering ingress proxy first.
Each order's result is an outcome for the core (`CertIssued`, `CertFailed`), folded into
the state like every other act's; it runs before the pass's routes are loaded, which then
serve the new certificates. docs/ingress.md#acme.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from minidock.caddy import ProxyConfig
from minidock.core.outcomes import CertFailed, CertIssued
from minidock.core.routes import ProxyStep, RouteTable
from minidock.core.tls import CertRecord, TlsState
from minidock.ingress import Shell, configs_for, converge_proxies
from minidock.model import Cluster, Event, ProxyObservation

__all__ = ["Ordered", "order"]


@dataclass
class Ordered:
    """What the ACME act did: an outcome per order, the TLS state to serve the pass's
    routes with (the new certificates in it), the proxies as it left them (their loaded
    digests), and the events of loads that failed."""

    outcomes: list[CertIssued | CertFailed] = field(default_factory=list)
    tls: TlsState = field(default_factory=TlsState)
    proxies: dict[str, ProxyObservation] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


async def order(
    sh: Shell,
    cluster: Cluster,
    names: Sequence[str],
    table: RouteTable,
    steps: Sequence[ProxyStep],
    tls: TlsState,
    proxies: Mapping[str, ProxyObservation],
    now: float,
) -> Ordered:
    """Each of `names` ordered in turn, its challenge answered by every answering proxy."""
    ingress = cluster.ingress
    done = Ordered(tls=tls, proxies=dict(proxies))
    if ingress is None or ingress.acme is None or not names:
        return done
    settings = ingress.acme
    # the ACME client (requests, acme, josepy) loads only when an order is due: every
    # other pass, and every command, starts without it
    from minidock.acme import AcmeFailed, obtain

    for name in names:

        async def publish(responses: Mapping[str, str]) -> None:
            config = configs_for(table, ingress, done.tls, responses)
            await _load(sh, cluster, config, steps, done, now)

        try:
            account, got = await obtain(settings, done.tls.account, name, publish)
        except AcmeFailed as exc:
            done.outcomes.append(CertFailed(name, exc.reason, time.time(), exc.retry_after))
            continue
        at = time.time()
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(got.not_after))
        done.outcomes.append(
            CertIssued(
                name,
                got.chain,
                got.key,
                issuer=got.issuer,
                not_after=got.not_after,
                directory=settings.directory,
                account=account,
                at=at,
                until=until,
            )
        )
        record = CertRecord(name, got.chain, got.key, got.issuer, got.not_after, at)
        served = {**done.tls.certificates, name: record}
        done.tls = replace(done.tls, account=account, certificates=served)
    return done


async def _load(
    sh: Shell,
    cluster: Cluster,
    config: ProxyConfig,
    steps: Sequence[ProxyStep],
    done: Ordered,
    now: float,
) -> None:
    """`config` into every answering proxy; the observations then say it is loaded."""
    assert cluster.ingress is not None
    loaded = await converge_proxies(
        sh, cluster.name, cluster.ingress, config, steps, done.proxies, now
    )
    done.events.extend(e for e in loaded.events if e.kind == "act-failed")
    failed_hosts = {e.host for e in loaded.events if e.kind == "act-failed"}
    done.proxies = {
        host: p if host in failed_hosts or not p.ok else replace(p, digest=config.digest)
        for host, p in done.proxies.items()
    }
