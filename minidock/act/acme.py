"""The controller as an ACME client (RFC 8555, certbot's `acme` and `josepy`): one account
per state, and a certificate per host name ordered with the HTTP-01 challenge, whose
responses every ingress proxy serves before the CA is told to validate, so whichever
ingress host the name points at answers. An order never waits in a pass and never loads
a proxy: `start` makes it (its responses for the state); `answer`, in the next pass, once
that pass has loaded the responses with its routes, tells the CA they are up; `collect`,
in a later pass, looks at it once (finalizing it when ready, fetching the certificate when
valid). Each takes the pass's clock (`now`). The library is synchronous: each call runs
in a worker thread.
docs/ingress.md#acme."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import requests
from acme import challenges, client, crypto_util, errors, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from josepy.jwa import ES256
from josepy.jwk import JWK, JWKEC

from minidock.core.tls import AcmeAccount
from minidock.model import AcmeSettings
from minidock.spec.certs import certificate_info

__all__ = ["AcmeFailed", "Issued", "Started", "answer", "collect", "retry_after", "start"]

NETWORK_SECONDS = 20  # one request to the CA
RATE_LIMITED = 3600.0  # a CA that says rateLimited is not asked again for an hour
USER_AGENT = "minidock"


@dataclass(frozen=True)
class Issued:
    """A certificate the CA issued: the PEM chain (leaf first), its key, and the leaf's
    issuer, end and start."""

    chain: str
    key: str = field(repr=False)
    issuer: str = ""
    not_after: float = 0.0
    not_before: float = 0.0


@dataclass(frozen=True)
class Started:
    """An order made: its URL, the certificate's key and request (PEM), and the HTTP-01
    responses by path (the proxies serve them from the next pass until it is done)."""

    url: str
    key: str = field(repr=False)
    csr: str = ""
    responses: tuple[tuple[str, str], ...] = ()


class AcmeFailed(Exception):
    """An order that failed: `reason` in one line, and no new order before `retry_after`
    (epoch seconds, 0: the usual back-off)."""

    def __init__(self, reason: str, retry_after: float = 0.0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


async def start(
    settings: AcmeSettings, account: AcmeAccount | None, name: str, now: float
) -> tuple[AcmeAccount, Started]:
    """A new order for `name` (the account made first when there is none at this
    directory) and its HTTP-01 responses; the CA is not told yet. AcmeFailed says why
    not."""
    told = _Told(now)
    with _failures(told), _trust(settings.ca_root) as verify:
        session = await asyncio.to_thread(_Session, settings, account, verify, told)
        pending = await asyncio.to_thread(session.order, name)
        started = Started(
            pending.order.uri,
            pending.key,
            pending.order.csr_pem.decode(),
            tuple(sorted(pending.responses.items())),
        )
        return session.account, started


async def answer(settings: AcmeSettings, account: AcmeAccount, url: str, now: float) -> None:
    """Tell the CA the responses of the order at `url` are up (every proxy has loaded
    them): it validates them in its own time. AcmeFailed says why not."""
    told = _Told(now)
    with _failures(told), _trust(settings.ca_root) as verify:
        session = await asyncio.to_thread(_Session, settings, account, verify, told)
        await asyncio.to_thread(session.answer, url)


async def collect(
    settings: AcmeSettings, account: AcmeAccount, url: str, csr: str, key: str, now: float
) -> Issued | None:
    """One look at an answered order: its certificate once the CA has issued it (the
    order finalized first when it is ready), None while the CA is still at it. AcmeFailed
    when the order failed."""
    told = _Told(now)
    with _failures(told), _trust(settings.ca_root) as verify:
        session = await asyncio.to_thread(_Session, settings, account, verify, told)
        return await asyncio.to_thread(session.look, url, csr, key)


@contextlib.contextmanager
def _failures(told: _Told) -> Iterator[None]:
    """The library's and the network's errors as AcmeFailed, in one line each."""
    try:
        yield
    except AcmeFailed:
        raise
    except messages.Error as exc:
        limited = told.now + RATE_LIMITED if exc.code == "rateLimited" else 0.0
        wait = max(limited, told.retry_after)  # the CA's own Retry-After, when it gave one
        raise AcmeFailed(_line(f"the CA refused: {exc.detail or exc.typ}"), wait) from None
    except errors.ValidationError as exc:
        raise AcmeFailed(_line(f"validation failed: {_validation(exc)}")) from None
    except requests.RequestException as exc:
        raise AcmeFailed(_line(f"the ACME directory does not answer: {exc}")) from None
    except errors.Error as exc:
        raise AcmeFailed(_line(f"ACME failed: {exc}")) from None


@contextlib.contextmanager
def _trust(ca_root: str) -> Iterator[str | bool]:
    """What `requests` verifies the CA's HTTPS with: the private root as a file, or the
    system's roots."""
    if not ca_root:
        yield True
        return
    fd, path = tempfile.mkstemp(prefix="minidock-ca-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(ca_root)
        yield path
    finally:
        os.unlink(path)


@dataclass
class _Told:
    """The pass's clock, and the Retry-After (epoch seconds) of the CA's latest refusal:
    the library raises its error without the response, so the network keeps it here."""

    now: float
    retry_after: float = 0.0


def retry_after(header: str, now: float) -> float:
    """A Retry-After header (seconds, or an HTTP date) as epoch seconds (0: none)."""
    value = header.strip()
    if value.isdigit():
        return now + int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


class _Network(client.ClientNetwork):
    """The library's network, keeping the Retry-After of each refusal in `told`."""

    def __init__(self, told: _Told, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.told = told

    def _send_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
        response = super()._send_request(method, url, *args, **kwargs)
        if response.status_code >= 400 and "Retry-After" in response.headers:
            self.told.retry_after = retry_after(response.headers["Retry-After"], self.told.now)
        return response


@dataclass
class _Pending:
    order: messages.OrderResource
    key: str = field(repr=False)
    responses: dict[str, str]


class _Session:
    """One directory's client, logged in with the state's account (made when missing)."""

    def __init__(
        self, settings: AcmeSettings, account: AcmeAccount | None, verify: str | bool, told: _Told
    ):
        known = account if account is not None and account.directory == settings.directory else None
        key = JWK.json_loads(known.key) if known else _new_account_key()
        regr = (
            messages.RegistrationResource(uri=known.uri, body=messages.Registration())
            if known
            else None
        )
        self.net = _Network(
            told,
            key,
            account=regr,
            alg=ES256,
            verify_ssl=cast(bool, verify),  # requests takes a CA bundle's path here too
            user_agent=USER_AGENT,
            timeout=NETWORK_SECONDS,
        )
        directory = client.ClientV2.get_directory(settings.directory, self.net)
        self.client = client.ClientV2(directory, self.net)
        if known is None:
            new = messages.NewRegistration.from_data(
                email=settings.email or None, terms_of_service_agreed=True
            )
            regr = self.client.new_account(new)
        assert regr is not None
        self.account = AcmeAccount(settings.directory, json.dumps(key.to_json()), regr.uri)
        self.key = key

    def order(self, name: str) -> _Pending:
        """A new order for `name`, and its HTTP-01 responses by path."""
        private = ec.generate_private_key(ec.SECP256R1())
        key_pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        order = self.client.new_order(crypto_util.make_csr(key_pem, [name]))
        responses = {}
        for authz in order.authorizations:
            if authz.body.status == messages.STATUS_VALID:
                continue  # the CA reuses a valid authorization (Let's Encrypt, Pebble)
            found = _http01(authz.body, name)
            _, validation = found.response_and_validation(self.key)
            responses[found.chall.path] = validation
        return _Pending(order, key_pem.decode(), responses)

    def answer(self, url: str) -> None:
        """Tell the CA the responses of the order at `url` are up: each pending
        authorization's HTTP-01 challenge, unless the CA is at it already."""
        body = messages.Order.from_json(self.client._post_as_get(url).json())
        for authz_url in body.authorizations:
            authz = messages.Authorization.from_json(self.client._post_as_get(authz_url).json())
            if authz.status != messages.STATUS_PENDING:
                continue  # valid (reused), or the CA gave it up (the collect says why)
            found = _http01(authz, authz.identifier.value)
            if found.status == messages.STATUS_PENDING:
                self.client.answer_challenge(found, found.response(self.key))

    def look(self, url: str, csr: str, key: str) -> Issued | None:
        """One step of a started order: finalize it when ready, the certificate when valid
        (None until then); AcmeFailed when the CA gave it up, with its reason."""
        response = self.client._post_as_get(url)
        body = messages.Order.from_json(response.json())
        order = messages.OrderResource(uri=url, body=body, csr_pem=csr.encode())
        if body.status == messages.STATUS_READY:
            order = self.client.begin_finalization(order)
            body = order.body
        if body.status == messages.STATUS_INVALID:
            raise AcmeFailed(_line(f"the order failed: {self._why(body)}"))
        if body.status != messages.STATUS_VALID or body.certificate is None:
            return None  # pending (validating) or processing: a later pass looks again
        chain = self.client._post_as_get(body.certificate).text
        info = certificate_info(chain)
        return Issued(chain, key, info.issuer, info.not_after, info.not_before)

    def _why(self, body: messages.Order) -> str:
        """Why an order is invalid: its own error, else its failed challenges'."""
        error: Any = body.error
        if error is not None:
            return str(error.detail or error.typ)
        details = []
        for url in body.authorizations:
            authz = messages.Authorization.from_json(self.client._post_as_get(url).json())
            for chall in authz.challenges:
                failure: Any = chall.error
                if failure is not None:
                    details.append(f"{authz.identifier.value}: {failure.detail or failure.typ}")
        return "validation failed: " + ("; ".join(details) or "the CA gave no detail")


def _http01(authz: messages.Authorization, name: str) -> messages.ChallengeBody:
    """The authorization's HTTP-01 challenge; AcmeFailed when the CA offers none."""
    for c in authz.challenges:
        if isinstance(c.chall, challenges.HTTP01):
            return c
    raise AcmeFailed(f"the CA offers no HTTP-01 challenge for {name}")


def _new_account_key() -> JWK:
    return JWKEC(key=ec.generate_private_key(ec.SECP256R1()))


def _validation(exc: errors.ValidationError) -> str:
    details: list[str] = []
    for authz in exc.failed_authzrs:
        for chall in authz.body.challenges:
            error: Any = chall.error
            if error is not None:
                details.append(f"{authz.body.identifier.value}: {error.detail or error.typ}")
    return "; ".join(details) or "the CA gave no detail"


def _line(text: str) -> str:
    return " ".join(text.split())[:300]
