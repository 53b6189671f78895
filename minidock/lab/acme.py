"""The lab's ACME server: Debian's `pebble`, with `pebble-challtestsrv` as its DNS, in one
container on the hosts' Docker network (the host image, the two binaries mounted from the
controller's machine), published on 127.0.0.1 like the hosts.

Its test DNS answers every name with the first host's private address (tests point a name
elsewhere through challtestsrv's management API, `/add-a`), and Pebble validates HTTP-01
on port 80 there: the ingress proxies answer. Pebble's own HTTPS is served with a leaf of
a lab root made here; its issuing root is made by Pebble at start and read from its
management interface. `.lab/acme/ca_root.pem` holds both, so one file is the spec's
`ca_root` (trust the directory) and what tests verify issued certificates against. See
docs/lab.md.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from minidock.lab.directory import LOOPBACK
from minidock.lab.errors import LabError
from minidock.lab.images import LAB_LABEL
from minidock.lab.local import write_atomic

__all__ = [
    "ACME",
    "LabAcme",
    "acme_service",
    "pebble_installed",
    "prepare_acme",
    "provision_acme",
]

ACME = "acme"  # its compose service
PEBBLE, CHALLTESTSRV = "/usr/bin/pebble", "/usr/bin/pebble-challtestsrv"
DIRECTORY_PORT, MANAGEMENT_PORT, DNS_MANAGEMENT_PORT = 14000, 15000, 8055
_INIT = (
    "set -e\n"
    "pebble-challtestsrv -management :8055 -dns01 127.0.0.1:8053 -http01 '' -https01 ''"
    " -tlsalpn01 '' -defaultIPv6 '' >/acme-log/challtestsrv.log 2>&1 &\n"
    "exec pebble -config /acme/pebble.json -dnsserver 127.0.0.1:8053"
)


def pebble_installed() -> bool:
    """Whether this machine has Debian's pebble (the binaries the container mounts)."""
    return Path(PEBBLE).is_file() and Path(CHALLTESTSRV).is_file()


@dataclass(frozen=True)
class LabAcme:
    """The lab's ACME server's loopback ports and files."""

    directory_port: int
    management_port: int
    dns_port: int
    folder: str  # .lab/acme

    @property
    def directory(self) -> str:
        return f"https://{LOOPBACK}:{self.directory_port}/dir"

    @property
    def ca_root(self) -> str:
        return str(Path(self.folder) / "ca_root.pem")

    def document(self) -> dict[str, str]:
        return {"directory": self.directory, "ca_root": self.ca_root}

    def save(self) -> None:
        write_atomic(Path(self.folder) / "acme.json", json.dumps(asdict(self)).encode())

    @classmethod
    def read(cls, folder: Path) -> LabAcme | None:
        try:
            return cls(**json.loads((folder / "acme.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


def prepare_acme(folder: Path, ports: tuple[int, int, int]) -> LabAcme:
    """The server's files (config, its HTTPS leaf under a lab root) and ports."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log").mkdir(exist_ok=True)
    root_key = ec.generate_private_key(ec.SECP256R1())
    root = _certificate("MiniDock lab ACME root", root_key, root_key, None, ca=True)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _certificate("localhost", leaf_key, root_key, root, ca=False)
    pem = serialization.Encoding.PEM
    write_atomic(folder / "tls-root.pem", root.public_bytes(pem))
    write_atomic(folder / "cert.pem", leaf.public_bytes(pem))
    key = leaf_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_atomic(folder / "key.pem", key)
    config = {
        "pebble": {
            "listenAddress": f"0.0.0.0:{DIRECTORY_PORT}",
            "managementListenAddress": f"0.0.0.0:{MANAGEMENT_PORT}",
            "certificate": "/acme/cert.pem",
            "privateKey": "/acme/key.pem",
            "httpPort": 80,
            "tlsPort": 443,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
        }
    }
    write_atomic(folder / "pebble.json", json.dumps(config, indent=2).encode())
    acme = LabAcme(*ports, str(folder))
    acme.save()
    return acme


def _certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    signer: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [
            x509.DNSName("localhost"),
            x509.DNSName(ACME),
            x509.IPAddress(ipaddress.ip_address(LOOPBACK)),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def acme_service(
    project: str, acme: LabAcme, image: str, extra_labels: dict[str, str]
) -> dict[str, Any]:
    """The compose service: pebble and challtestsrv in the host image."""
    return {
        "image": image,
        "container_name": f"{project}-{ACME}",
        "hostname": ACME,
        "entrypoint": ["/bin/sh", "-c", _INIT],
        "environment": {"PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0"},
        "ports": [
            f"{LOOPBACK}:{acme.directory_port}:{DIRECTORY_PORT}",
            f"{LOOPBACK}:{acme.management_port}:{MANAGEMENT_PORT}",
            f"{LOOPBACK}:{acme.dns_port}:{DNS_MANAGEMENT_PORT}",
        ],
        "volumes": [
            f"{PEBBLE}:{PEBBLE}:ro",
            f"{CHALLTESTSRV}:{CHALLTESTSRV}:ro",
            f"{acme.folder}:/acme:ro",
            f"{acme.folder}/log:/acme-log",
        ],
        "stop_grace_period": "2s",
        "labels": {LAB_LABEL: project, **extra_labels},
    }


def provision_acme(acme: LabAcme, default_address: str, deadline: float) -> None:
    """Once the containers run: every name resolves to `default_address`, and ca_root.pem
    holds the lab root and Pebble's issuing root."""
    folder = Path(acme.folder)
    context = ssl.create_default_context(cafile=str(folder / "tls-root.pem"))
    url = f"https://{LOOPBACK}:{acme.management_port}/roots/0"
    issuing = _until(deadline, lambda: _get(url, context))
    body = json.dumps({"ip": default_address}).encode()
    dns = f"http://{LOOPBACK}:{acme.dns_port}/set-default-ipv4"
    _until(deadline, lambda: _post(dns, body))
    write_atomic(folder / "ca_root.pem", (folder / "tls-root.pem").read_bytes() + issuing)


def _get(url: str, context: ssl.SSLContext) -> bytes:
    with urllib.request.urlopen(url, context=context, timeout=5) as answer:  # noqa: S310
        data: bytes = answer.read()
        return data


def _post(url: str, body: bytes) -> bytes:
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        data: bytes = answer.read()
        return data


def _until(deadline: float, attempt: Any) -> bytes:
    while True:
        try:
            result: bytes = attempt()
            return result
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LabError(f"the lab's ACME server does not answer: {exc}") from None
            time.sleep(0.2)
