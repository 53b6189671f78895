"""The ACME acts of a pass, none of which waits for the CA: collect each order an earlier
pass started (`Plan.collect`: one look each, `minidock.act.acme.collect`), then start each
certificate the plan says is due (`Plan.certificates`, from `minidock.core.tls.due`),
with the controller as the ACME client (`minidock.act.acme.start`): the HTTP-01 responses
loaded into every answering ingress proxy first, then the CA told they are up. Each
result is an outcome for the core (`CertIssued`, `CertOrdered`, `CertFailed`), folded into
the state like every other act's; they run before the pass's routes are loaded, which
then serve the new certificates and keep every pending order's responses.
docs/ingress.md#acme.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from minidock.act.ingress import Shell, configs_for, converge_proxies
from minidock.commands.caddy import ProxyConfig
from minidock.commands.proxies import ingress_loads
from minidock.core.outcomes import CertFailed, CertIssued, CertOrdered
from minidock.core.routes import ProxyStep, RouteTable
from minidock.core.tls import CertRecord, PendingOrder, TlsState
from minidock.model import AcmeSettings, Cluster, Event, ProxyObservation

__all__ = ["Ordered", "order"]

Publish = Callable[[Mapping[str, str]], Awaitable[None]]  # {path: response} into the proxies


@dataclass
class Ordered:
    """What the ACME acts did: an outcome per order, the TLS state to serve the pass's
    routes with (the new certificates in it), the HTTP-01 responses the proxies keep
    serving (every pending order's, the ones started now too), the proxies as the acts
    left them (their loaded digests), and the events of loads that failed."""

    outcomes: list[CertIssued | CertOrdered | CertFailed] = field(default_factory=list)
    tls: TlsState = field(default_factory=TlsState)
    challenges: dict[str, str] = field(default_factory=dict)
    proxies: dict[str, ProxyObservation] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


async def order(
    sh: Shell,
    cluster: Cluster,
    names: Sequence[str],
    collect: Sequence[str],
    table: RouteTable,
    steps: Sequence[ProxyStep],
    tls: TlsState,
    challenges: Mapping[str, str],
    proxies: Mapping[str, ProxyObservation],
    now: float,
) -> Ordered:
    """Each of `collect` looked at once, then each of `names` started in turn, its
    responses served by every answering proxy (beside those of the orders pending)."""
    ingress = cluster.ingress
    done = Ordered(tls=tls, challenges=dict(challenges), proxies=dict(proxies))
    if ingress is None or ingress.acme is None or not (names or collect):
        return done
    settings = ingress.acme
    for name in collect:
        await _collect(settings, name, done)
    for name in names:

        async def publish(responses: Mapping[str, str]) -> None:
            config = configs_for(table, ingress, done.tls, {**done.challenges, **responses})
            await _load(sh, cluster, config, steps, done, now)

        await _start(settings, name, publish, done)
    return done


async def _start(settings: AcmeSettings, name: str, publish: Publish, done: Ordered) -> None:
    # the ACME client (requests, acme, josepy) loads only when an order is due or pending:
    # every other pass, and every command, starts without it
    from minidock.act.acme import AcmeFailed, start

    try:
        account, started = await start(settings, done.tls.account, name, publish)
    except AcmeFailed as exc:
        done.outcomes.append(CertFailed(name, exc.reason, time.time(), exc.retry_after))
        return
    at = time.time()
    pending = PendingOrder(started.url, started.key, started.csr, started.responses, at)
    done.outcomes.append(CertOrdered(name, pending, account, settings.directory, at))
    done.challenges.update(started.responses)
    done.tls = replace(done.tls, account=account)


async def _collect(settings: AcmeSettings, name: str, done: Ordered) -> None:
    """One look at `name`'s pending order: issued (served from this pass on), failed
    (backing off, its responses dropped), or still with the CA (nothing to say)."""
    from minidock.act.acme import AcmeFailed, collect

    record = done.tls.record(name)
    pending, account = record.order, done.tls.account
    if pending is None or account is None:
        return
    try:
        got = await collect(settings, account, pending.url, pending.csr, pending.key)
    except AcmeFailed as exc:
        done.outcomes.append(CertFailed(name, exc.reason, time.time(), exc.retry_after))
        for path, _ in pending.responses:
            done.challenges.pop(path, None)
        return
    if got is None:
        return
    at = time.time()
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(got.not_after))
    done.outcomes.append(
        CertIssued(
            name, got.chain, got.key, issuer=got.issuer, not_after=got.not_after,
            directory=settings.directory, account=account, at=at, until=until,
            not_before=got.not_before,
        )
    )  # fmt: skip
    for path, _ in pending.responses:
        done.challenges.pop(path, None)
    record = CertRecord(
        name, got.chain, got.key, got.issuer, got.not_after, at, not_before=got.not_before
    )
    done.tls = replace(done.tls, certificates={**done.tls.certificates, name: record})


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
    loads = ingress_loads(config.digest, steps, done.proxies)
    loaded = await converge_proxies(sh, cluster.name, cluster.ingress, config, loads, now)
    done.events.extend(e for e in loaded.events if e.kind == "act-failed")
    failed_hosts = {e.host for e in loaded.events if e.kind == "act-failed"}
    done.proxies = {
        host: p if host in failed_hosts or not p.ok else replace(p, digest=config.digest)
        for host, p in done.proxies.items()
    }
