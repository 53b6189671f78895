"""Certificates from ACME as the controller keeps them, and when a pass orders one: the
pure side of `tls = "acme"` (the ACME client itself is `minidock.acme`).

One ACME account per state (its key sealed at rest) and one record per host name a route
asks a certificate for: the chain, its key (sealed), its end, and the order's bookkeeping.
A name is due when it has no certificate, when its certificate ends within the renewal
window, or when its certificate no longer fits (the routes' names moved); never while a
failed order backs off: five minutes after the first failure, doubling to a day, or the
CA's `Retry-After` when that is later. docs/ingress.md#acme.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "AcmeAccount",
    "CertRecord",
    "TlsState",
    "due",
    "failed",
    "issued",
    "renews_at",
]

BACKOFF_FIRST = 300.0  # five minutes: Let's Encrypt allows 5 failed validations an hour
BACKOFF_MAX = 86400.0


@dataclass(frozen=True)
class AcmeAccount:
    """The state's ACME account at one directory: its key (JWK JSON, sealed at rest) and
    the account's URL at the CA."""

    directory: str
    key: str = field(repr=False)
    uri: str = ""


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

    @property
    def has_certificate(self) -> bool:
        return bool(self.chain and self.key)


@dataclass(frozen=True)
class TlsState:
    """The ACME side of the controller's state: the account, and records by host name."""

    account: AcmeAccount | None = None
    certificates: dict[str, CertRecord] = field(default_factory=dict)

    def record(self, name: str) -> CertRecord:
        return self.certificates.get(name, CertRecord(name))


def renews_at(record: CertRecord, renew_before: float) -> float:
    """When a pass renews this certificate (0 when there is none)."""
    return record.not_after - renew_before if record.has_certificate else 0.0


def due(
    names: Iterable[str], tls: TlsState, directory: str, now: float, renew_before: float
) -> tuple[str, ...]:
    """The names a pass orders a certificate for now, sorted: no certificate, one from
    another directory, or one within `renew_before` of its end; none while backing off."""
    found = []
    for name in sorted(set(names)):
        record = tls.record(name)
        if now < record.next_try:
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
) -> TlsState:
    """The state after a certificate was issued for `name`: the failures forgotten."""
    record = CertRecord(name, chain, key, issuer, not_after, now, directory)
    return replace(tls, certificates={**tls.certificates, name: record})


def failed(tls: TlsState, name: str, error: str, now: float, retry_after: float = 0.0) -> TlsState:
    """The state after an order for `name` failed: backing off, doubling from a minute to
    a day, or until the CA's `Retry-After` (epoch seconds) when that is later. A
    certificate it still has is kept (and served)."""
    record = tls.record(name)
    failures = record.failures + 1
    wait = min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX)
    record = replace(
        record, failures=failures, next_try=max(now + wait, retry_after), error=error[:300]
    )
    return replace(tls, certificates={**tls.certificates, name: record})
