"""A route's TLS from the cluster file, and `[ingress] acme`. Certificates brought as
files (`tls = { cert = { file }, key = { file } }`) are read and checked at apply: the
chain parses (PEM, leaf first), the key parses and is the leaf's, the leaf names the
route's host and has not expired, and the key file is private (0600, like a secret file).
What is kept is the PEM text: the key sealed at rest, like a secret. `ca_root` is read
as PEM certificates. docs/ingress.md#tls.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from minidock import units
from minidock.model import AcmeSettings, RouteTls
from minidock.spec.errors import Fail, Part
from minidock.spec.reading import resolve

__all__ = ["CertificateInfo", "acme_settings", "certificate_info", "name_covers", "route_tls"]


@dataclass(frozen=True)
class CertificateInfo:
    """What a PEM chain's leaf says: the names it is for, who issued it, when it ends and
    when it began."""

    names: tuple[str, ...]
    issuer: str
    not_after: float  # epoch seconds
    not_before: float = 0.0


def certificate_info(chain: str) -> CertificateInfo:
    """The leaf of a PEM chain (ValueError when it holds no certificate)."""
    leaf = x509.load_pem_x509_certificates(chain.encode())[0]
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = tuple(san.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = ()
    if not names:
        names = tuple(
            str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        )
    issuer = leaf.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    shown = str(issuer[0].value) if issuer else leaf.issuer.rfc4514_string()
    after, before = leaf.not_valid_after_utc.timestamp(), leaf.not_valid_before_utc.timestamp()
    return CertificateInfo(names, shown, after, before)


def name_covers(name: str, domain: str) -> bool:
    """Whether a certificate name covers a route host: equal (case aside), or a wildcard
    `*.example.com` for one label under it (a route host `*.example.com` needs the
    wildcard itself)."""
    name, domain = name.lower(), domain.lower()
    if name == domain:
        return True
    if name.startswith("*.") and not domain.startswith("*."):
        head, _, rest = domain.partition(".")
        return bool(head) and rest == name[2:]
    return False


def route_tls(
    given: Any,
    domain: str,
    where: tuple[Part, ...],
    fail: Fail,
    base: str,
    now: float | None = None,
) -> RouteTls:
    """A route's `tls` as the model has it: "off", or the certificate files read and
    checked for the route's host."""
    if given == "off":
        return RouteTls()
    if not domain:
        raise fail(where, 'a TLS route needs a host: give the route host = "app.example.com"')
    if given == "acme":
        if domain.startswith("*."):
            raise fail(
                where,
                f"ACME's HTTP-01 challenge cannot issue the wildcard {domain}: name the "
                "hosts, or bring a wildcard certificate as files",
            )
        return RouteTls("acme")
    cert = _read(resolve(base, given["cert"]["file"]), (*where, "cert", "file"), fail, False)
    key = _read(resolve(base, given["key"]["file"]), (*where, "key", "file"), fail, True)
    _check(cert, key, domain, where, fail, time.time() if now is None else now)
    return RouteTls("files", cert, key)


def _read(path: str, where: tuple[Part, ...], fail: Fail, private: bool) -> str:
    try:
        mode = os.stat(path).st_mode
        if private and mode & 0o077:
            raise fail(where, f"{path} is readable or writable by others: chmod 600 {path}")
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except FileNotFoundError:
        raise fail(where, f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(where, f"cannot read {path}: {type(exc).__name__} (want PEM text)") from None


def _check(
    cert: str, key: str, domain: str, where: tuple[Part, ...], fail: Fail, now: float
) -> None:
    try:
        leaf = x509.load_pem_x509_certificates(cert.encode())[0]
    except ValueError:
        raise fail((*where, "cert"), "holds no PEM certificate (BEGIN CERTIFICATE)") from None
    try:
        private = serialization.load_pem_private_key(key.encode(), password=None)
    except (ValueError, TypeError):
        raise fail(
            (*where, "key"), "holds no unencrypted PEM private key (BEGIN PRIVATE KEY)"
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if private.public_key().public_bytes(der, public) != leaf.public_key().public_bytes(
        der, public
    ):
        raise fail((*where, "key"), "is not the key of the certificate (its first one, the leaf)")
    info = certificate_info(cert)
    if not any(name_covers(n, domain) for n in info.names):
        raise fail(
            (*where, "cert"),
            f"is for {', '.join(info.names) or 'no name'}, not {domain}: "
            "bring a certificate for the route's host",
        )
    if info.not_after <= now:
        ended = time.strftime("%Y-%m-%d", time.gmtime(info.not_after))
        raise fail((*where, "cert"), f"expired on {ended}: renew it")


def acme_settings(body: dict[str, Any], fail: Fail, base: str) -> AcmeSettings:
    """`[ingress] acme`: its `ca_root` file read and checked (PEM certificates)."""
    options: dict[str, Any] = {k: body[k] for k in ("email", "directory") if k in body}
    if "renew_before" in body:
        options["renew_before"] = units.parse_duration(body["renew_before"])
    if "ca_root" in body:
        where: tuple[Part, ...] = ("ingress", "acme", "ca_root", "file")
        text = _read(resolve(base, body["ca_root"]["file"]), where, fail, False)
        try:
            x509.load_pem_x509_certificates(text.encode())
        except ValueError:
            raise fail(where, "holds no PEM certificate (BEGIN CERTIFICATE)") from None
        options["ca_root"] = text
    return AcmeSettings(**options)
