"""A private registry for the lab: Debian's `docker-registry` (the distribution registry,
2.8) with htpasswd auth, serving TLS on the lab network's gateway address, for the
integration tests' private-image scenarios (scripts/engine.sh installs it and htpasswd).

Why this shape: the lab hosts' dockerds live in their own network namespaces, so the
controller's 127.0.0.1 is not theirs; the address they share with this machine is their
compose network's gateway. Docker talks plain HTTP only to registries on 127.0.0.0/8 (or
those a daemon lists in `insecure-registries`, which needs a daemon restart), so the
registry serves TLS with a throwaway CA, and each lab host trusts that CA for this one
registry the way production hosts trust a private CA: `/etc/docker/certs.d/ADDR/ca.crt`,
read by dockerd on every pull and login, no restart. Nothing listens on another address.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.conftest import Fleet

USERNAME = "ci-bot"


@dataclass
class Registry:
    """A running registry: its address (IP:PORT), the account, the CA the hosts trust."""

    address: str
    username: str
    password: str
    ca_pem: bytes
    log: Path

    def image(self, path: str) -> str:
        return f"{self.address}/{path}"


def gateway(fleet: Fleet) -> str:
    """This machine's address on the lab's compose network (what the hosts reach it by)."""
    out = subprocess.run(
        [
            "docker", "network", "inspect", f"{fleet.lab.project}_default",
            "--format", "{{(index .IPAM.Config 0).Gateway}}",
        ],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ipaddress.ip_address(out)  # the lab's network has an IPv4 gateway, or this fails
    return out


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def _certificates(ip: str, directory: Path) -> bytes:
    """A CA and a server certificate for `ip` (key files in `directory`); the CA's PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minidock test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    (directory / "server.crt").write_bytes(server.public_bytes(pem))
    (directory / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(directory / "server.key", 0o600)
    return ca.public_bytes(pem)


def _config(root: Path, address: str) -> Path:
    """The registry's config (JSON, which its YAML reader takes as it is)."""
    config = {
        "version": "0.1",
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
        "http": {
            "addr": address,
            "secret": secrets.token_hex(16),
            "tls": {"certificate": str(root / "server.crt"), "key": str(root / "server.key")},
        },
        "auth": {"htpasswd": {"realm": "minidock-test", "path": str(root / "htpasswd")}},
    }
    path = root / "config.yml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _wait_serving(address: str, ca_pem: bytes, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until /v2/ answers over TLS (401 without credentials), or the registry is gone."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cadata=ca_pem.decode())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"docker-registry exited {proc.returncode}: {log.read_text()[-500:]}"
            )
        with (
            contextlib.suppress(OSError),
            socket.create_connection((host, int(port)), timeout=1) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(f"GET /v2/ HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
            if b" 401 " in tls.recv(200):
                return
        time.sleep(0.2)
    raise RuntimeError(f"docker-registry did not serve {address}: {log.read_text()[-500:]}")


@contextlib.contextmanager
def running_registry(root: Path, ip: str) -> Iterator[Registry]:
    """Start a registry on IP (a free port) with a fresh account; stop it (by its pid)."""
    missing = [tool for tool in ("docker-registry", "htpasswd") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/engine.sh", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    htpasswd = subprocess.run(
        ["htpasswd", "-Bbn", USERNAME, password], capture_output=True, text=True, check=True
    ).stdout  # bcrypt: the registry takes no other hash
    (root / "htpasswd").write_text(htpasswd)
    ca_pem = _certificates(ip, root)
    address = f"{ip}:{_free_port(ip)}"
    log = root / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(_config(root, address))],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_serving(address, ca_pem, proc, log)
        yield Registry(address, USERNAME, password, ca_pem, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def trust(fleet: Fleet, registry: Registry) -> None:
    """Every lab host trusts the registry's CA for its address (dockerd reads it per pull)."""
    where = f"/etc/docker/certs.d/{registry.address}"
    for host in fleet.hosts:
        fleet.lab.exec(
            host, "sh", "-c", f"mkdir -p {where} && cat > {where}/ca.crt", input=registry.ca_pem
        )


def seed(fleet: Fleet, registry: Registry, source: str, target: str) -> None:
    """Put `source` (a lab image) into the registry as `target`, pushed from host1, then
    leave host1 without `target` and logged out: a later pull needs the credentials."""
    host = fleet.hosts[0]
    name = registry.image(target)
    fleet.docker(host, "tag", source, name, check=True)
    # the host's own docker CLI: the credentials are the client's, kept in the host's
    # ~/.docker (fleet.docker may be this machine's CLI, through the engine's socket)
    login = ["login", "--username", registry.username, "--password-stdin", registry.address]
    fleet.lab.exec(host, "docker", *login, input=registry.password.encode(), check=True)
    fleet.lab.exec(host, "docker", "push", name, check=True)
    fleet.docker(host, "rmi", name, check=True)
    fleet.lab.exec(host, "docker", "logout", registry.address, check=True)
