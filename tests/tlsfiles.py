"""Certificates for tests: a private CA and leaves it signs, as PEM text (cryptography)."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["PrivateCA", "write_pair"]

PEM = serialization.Encoding.PEM


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@dataclass
class PrivateCA:
    """A self-signed root that signs leaf certificates for DNS names."""

    name: str = "MiniDock Test CA"
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    def __post_init__(self) -> None:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def root_pem(self) -> str:
        return self.cert.public_bytes(PEM).decode()

    def leaf(self, *names: str, days: float = 20, past: bool = False) -> tuple[str, str]:
        """(chain PEM: leaf then root, key PEM) for `names`; `past`: ended `days` ago."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        end = now - datetime.timedelta(days=days) if past else now + datetime.timedelta(days=days)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(min(now, end) - datetime.timedelta(days=1))
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(PEM).decode() + self.root_pem, _key_pem(key)


def write_pair(directory: Path, chain: str, key: str, stem: str = "app") -> tuple[Path, Path]:
    """The chain and key written as STEM.crt and STEM.key (0600) under `directory`."""
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_text(chain)
    key_path.write_text(key)
    os.chmod(key_path, 0o600)
    return cert_path, key_path
