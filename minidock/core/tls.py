"""Certificates from ACME as the controller keeps them, and when a pass orders one: the
pure side of `tls = "acme"` (the ACME client itself is `minidock.act.acme`).

One ACME account per state (its key sealed at rest) and one record per host name a route
asks a certificate for: the chain, its key (sealed), its end, and the order's bookkeeping.
A name is due when it has no certificate, when its certificate is in its renewal window
(the last third of its lifetime, as Caddy and certbot renew; or the last `renew_before`
when the spec sets it), or when its certificate no longer fits (the routes' names moved);
never while a failed order backs off: five minutes after the first failure, doubling to a
day (to a tenth of the certificate's lifetime when that is shorter, so a short-lived one
is tried several times before it ends), or the CA's `Retry-After` when that is later.
An order never holds a pass, and no act loads a proxy outside the pass's own load: one
pass starts it (the account, the order made: `PendingOrder` in the record, with its
HTTP-01 responses); the next pass's config serves the responses, and once that pass has
loaded it the CA is told they are up (`answering`, then `answered`); later passes collect
it (one look at the order each, finalized when ready, the certificate fetched when
valid: `pending`), as hooks are run, and the pass after serves the certificate. An order
not issued within ORDER_TIMEOUT of its start has failed. While it is pending its
responses stay in every proxy's config.
docs/ingress.md#acme.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "ORDER_TIMEOUT",
    "RENEW_FRACTION",
    "AcmeAccount",
    "CertRecord",
    "PendingOrder",
    "TlsState",
    "answered",
    "answering",
    "challenges",
    "due",
    "failed",
    "issued",
    "ordered",
    "overdue",
    "pending",
    "renews_at",
]

BACKOFF_FIRST = 300.0  # five minutes: Let's Encrypt allows 5 failed validations an hour
BACKOFF_MAX = 86400.0
ORDER_TIMEOUT = 600.0  # seconds from an order's start to its certificate, at most
RENEW_FRACTION = 1 / 3  # of a certificate's lifetime: its renewal window, at its end
FALLBACK_RENEW = 30 * 86400.0  # a record from before `not_before` was kept, of no known start


@dataclass(frozen=True)
class AcmeAccount:
    """The state's ACME account at one directory: its key (JWK JSON, sealed at rest) and
    the account's URL at the CA."""

    directory: str
    key: str = field(repr=False)
    uri: str = ""


@dataclass(frozen=True)
class PendingOrder:
    """An order a pass started, for later passes to answer and collect: its URL at the CA,
    the certificate's key (sealed at rest) and request (PEM), the HTTP-01 responses the
    proxies serve meanwhile (path, response), when it started, and whether the CA was told
    the responses are up (by a pass that had loaded them)."""

    url: str
    key: str = field(repr=False)
    csr: str = ""
    responses: tuple[tuple[str, str], ...] = ()
    started: float = 0.0
    answered: bool = False


@dataclass(frozen=True)
class CertRecord:
    """One host name's certificate and its orders. `chain`/`key` empty: none issued yet."""

    name: str
    chain: str = ""
    key: str = field(default="", repr=False)
    issuer: str = ""
    not_after: float = 0.0
    issued_at: float = 0.0
    directory: str = ""  # the ACME directory it came from
    failures: int = 0  # consecutive failed orders
    next_try: float = 0.0  # no order before this (backing off)
    error: str = ""  # the last failed order's reason, one line
    not_before: float = 0.0  # the leaf's start (0: a record from before it was kept)
    order: PendingOrder | None = None  # an order started and not collected yet

    @property
    def has_certificate(self) -> bool:
        return bool(self.chain and self.key)

    @property
    def lifetime(self) -> float:
        """Seconds from the leaf's start to its end (0: not known)."""
        known = self.not_before != 0 or self.issued_at != 0
        start = self.not_before if self.not_before != 0 else self.issued_at
        return self.not_after - start if known and start < self.not_after else 0.0


@dataclass(frozen=True)
class TlsState:
    """The ACME side of the controller's state: the account, and records by host name."""

    account: AcmeAccount | None = None
    certificates: dict[str, CertRecord] = field(default_factory=dict)

    def record(self, name: str) -> CertRecord:
        return self.certificates.get(name, CertRecord(name))


def renews_at(record: CertRecord, renew_before: float | None = None) -> float:
    """When a pass renews this certificate (0 when there is none): `renew_before` its end
    when given, else when a third of its lifetime remains."""
    if not record.has_certificate:
        return 0.0
    if renew_before is not None:
        return record.not_after - renew_before
    lifetime = record.lifetime
    window = lifetime * RENEW_FRACTION if lifetime else FALLBACK_RENEW
    return record.not_after - window


def due(
    names: Iterable[str],
    tls: TlsState,
    directory: str,
    now: float,
    renew_before: float | None = None,
) -> tuple[str, ...]:
    """The names a pass orders a certificate for now, sorted: no certificate, one from
    another directory, or one in its renewal window (`renews_at`); none while backing
    off or while an order of it is pending."""
    found = []
    for name in sorted(set(names)):
        record = tls.record(name)
        if now < record.next_try or record.order is not None:
            continue
        stale = record.directory != directory or now >= renews_at(record, renew_before)
        if not record.has_certificate or stale:
            found.append(name)
    return tuple(found)


def issued(
    tls: TlsState,
    name: str,
    chain: str,
    key: str,
    *,
    issuer: str,
    not_after: float,
    directory: str,
    now: float,
    not_before: float = 0.0,
) -> TlsState:
    """The state after a certificate was issued for `name`: the failures forgotten."""
    record = CertRecord(name, chain, key, issuer, not_after, now, directory, not_before=not_before)
    return replace(tls, certificates={**tls.certificates, name: record})


def failed(tls: TlsState, name: str, error: str, now: float, retry_after: float = 0.0) -> TlsState:
    """The state after an order for `name` failed: backing off, doubling from five minutes
    to a day (or to a tenth of the certificate's lifetime, when it has one of a shorter
    lifetime), or until the CA's `Retry-After` (epoch seconds) when that is later. A
    certificate it still has is kept (and served)."""
    record = tls.record(name)
    failures = record.failures + 1
    cap = BACKOFF_MAX
    if record.has_certificate and record.lifetime:
        cap = max(BACKOFF_FIRST, min(cap, record.lifetime / 10))
    wait = min(BACKOFF_FIRST * 2 ** (failures - 1), cap)
    record = replace(
        record,
        failures=failures,
        next_try=max(now + wait, retry_after),
        error=error[:300],
        order=None,
    )
    return replace(tls, certificates={**tls.certificates, name: record})


def answering(names: Iterable[str], tls: TlsState) -> tuple[str, ...]:
    """The names, sorted, whose order's responses this pass loads and then tells the CA
    are up: started by an earlier pass, not answered yet."""
    return tuple(n for n in sorted(set(names)) if _order_of(tls, n, answered=False))


def pending(names: Iterable[str], tls: TlsState) -> tuple[str, ...]:
    """The names, sorted, whose order a pass collects: answered and not collected."""
    return tuple(n for n in sorted(set(names)) if _order_of(tls, n, answered=True))


def _order_of(tls: TlsState, name: str, *, answered: bool) -> bool:
    order = tls.record(name).order
    return order is not None and order.answered is answered


def overdue(tls: TlsState, now: float) -> tuple[str, ...]:
    """The names whose pending order is past ORDER_TIMEOUT: failed, not collected."""
    return tuple(
        name
        for name, record in sorted(tls.certificates.items())
        if record.order is not None and now - record.order.started >= ORDER_TIMEOUT
    )


def challenges(tls: TlsState) -> dict[str, str]:
    """The HTTP-01 responses of every pending order, by path: every proxy serves them."""
    return {
        path: response
        for record in tls.certificates.values()
        if record.order is not None
        for path, response in record.order.responses
    }


def ordered(tls: TlsState, name: str, order: PendingOrder, account: AcmeAccount) -> TlsState:
    """The state after a pass started an order for `name` (the account it used kept)."""
    record = replace(tls.record(name), order=order)
    return replace(tls, account=account, certificates={**tls.certificates, name: record})


def answered(tls: TlsState, name: str) -> TlsState:
    """The state after a pass told the CA `name`'s responses are up (its config loaded):
    later passes collect the order. Nothing changes without a pending order."""
    record = tls.record(name)
    if record.order is None:
        return tls
    record = replace(record, order=replace(record.order, answered=True))
    return replace(tls, certificates={**tls.certificates, name: record})
