"""The ACME acts of a pass, none of which waits for the CA and none of which loads a proxy:
each reads the Plan the core gave the pass (`Plan.answer`, `Plan.collect`,
`Plan.certificates`, and its state's TLS records) and the pass's clock, and reports an
outcome the core folds into the state (`CertAnswered`, `CertIssued`, `CertOrdered`,
`CertFailed`). They run after the pass's own route load, whose config serves every
pending order's HTTP-01 responses (`Plan.challenges`): the CA is told of the orders
started by an earlier pass once that load is done (`minidock.act.acme.answer`), each
answered order is looked at once (`minidock.act.acme.collect`: its certificate is served
from the next pass), and each certificate due is ordered (`minidock.act.acme.start`: its
responses go into the state, for the next pass's config). docs/ingress.md#acme.
"""

from __future__ import annotations

import time

from minidock.core.outcomes import CertAnswered, CertFailed, CertIssued, CertOrdered
from minidock.core.plan import Plan
from minidock.core.tls import AcmeAccount, PendingOrder, TlsState
from minidock.model import AcmeSettings

__all__ = ["CertOutcome", "order"]

CertOutcome = CertAnswered | CertIssued | CertOrdered | CertFailed


async def order(
    settings: AcmeSettings | None, plan: Plan, now: float, *, loaded: bool
) -> list[CertOutcome]:
    """The plan's ACME acts at `now`: its orders answered when the pass's config is
    `loaded` on every proxy it steps (else a later pass answers them), its answered orders
    collected, its due certificates ordered; an outcome each (none for an order the CA
    is still at)."""
    if settings is None or not (plan.answer or plan.collect or plan.certificates):
        return []
    tls = plan.state.tls
    done: list[CertOutcome] = []
    for name in plan.answer if loaded else ():
        done.extend(await _answer(settings, tls, name, now))
    for name in plan.collect:
        done.extend(await _collect(settings, tls, name, now))
    account = tls.account  # the first order makes it when there is none: the others use it
    for name in plan.certificates:
        ordered = await _start(settings, account, name, now)
        if isinstance(ordered, CertOrdered):
            account = ordered.account
        done.append(ordered)
    return done


async def _answer(
    settings: AcmeSettings, tls: TlsState, name: str, now: float
) -> list[CertOutcome]:
    """The CA told `name`'s responses are up (the pass has loaded them)."""
    # the ACME client (requests, acme, josepy) loads only when an order is due or pending:
    # every other pass, and every command, starts without it
    from minidock.act.acme import AcmeFailed, answer

    pending, account = tls.record(name).order, tls.account
    if pending is None or account is None:
        return []
    try:
        await answer(settings, account, pending.url, now)
    except AcmeFailed as exc:
        return [CertFailed(name, exc.reason, now, exc.retry_after)]
    return [CertAnswered(name, now)]


async def _collect(
    settings: AcmeSettings, tls: TlsState, name: str, now: float
) -> list[CertOutcome]:
    """One look at `name`'s answered order: issued, failed (backing off, its responses
    dropped by the fold), or still with the CA (nothing to say)."""
    from minidock.act.acme import AcmeFailed, collect

    pending, account = tls.record(name).order, tls.account
    if pending is None or account is None:
        return []
    try:
        got = await collect(settings, account, pending.url, pending.csr, pending.key, now)
    except AcmeFailed as exc:
        return [CertFailed(name, exc.reason, now, exc.retry_after)]
    if got is None:
        return []
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(got.not_after))
    return [
        CertIssued(
            name, got.chain, got.key, issuer=got.issuer, not_after=got.not_after,
            directory=settings.directory, account=account, at=now, until=until,
            not_before=got.not_before,
        )
    ]  # fmt: skip


async def _start(
    settings: AcmeSettings, account: AcmeAccount | None, name: str, now: float
) -> CertOrdered | CertFailed:
    """A new order for `name`: its responses for the state (the next pass loads them)."""
    from minidock.act.acme import AcmeFailed, start

    try:
        used, started = await start(settings, account, name, now)
    except AcmeFailed as exc:
        return CertFailed(name, exc.reason, now, exc.retry_after)
    pending = PendingOrder(started.url, started.key, started.csr, started.responses, now)
    return CertOrdered(name, pending, used, settings.directory, now)
