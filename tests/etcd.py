"""Real etcd clusters for tests: Debian's `etcd` (etcd-server 3.4) started on free
127.0.0.1 ports, members stopped and started again by the PIDs this module started (never
by name), checked with Debian's `etcdctl`. A cluster can serve TLS with client
certificates (a CA and certificates made here with `cryptography`) and password auth.

The session's clusters come from tests/conftest.py: `etcd_cluster` (three members, shared
by every test, each test under its own key prefix) and `etcd_secure` (one member, TLS and
auth). Without the `etcd` binary those fixtures fail, never skip: run scripts/engine.sh.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

START_TIMEOUT = 30.0  # seconds a cluster has to elect a leader and answer
STOP_TIMEOUT = 15.0  # seconds a member has to stop on SIGTERM before SIGKILL


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 now (the kernel picks them)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class TLSFiles:
    """A CA, a server certificate for 127.0.0.1, and a client certificate (CN "client")."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls(directory: Path) -> TLSFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minidock test CA")])
    ca = _certificate(ca_name, ca_name, ca_key, ca_key, ca=True)
    files = TLSFiles(*(directory / n for n in ("ca.pem", "s.pem", "s.key", "c.pem", "c.key")))
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for who, cert_path, key_path in (
        ("127.0.0.1", files.server_cert, files.server_key),
        ("client", files.client_cert, files.client_key),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, who)])
        cert = _certificate(name, ca_name, key, ca_key, ca=False)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)
    return files


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    import ipaddress

    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage(
                [x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class EtcdCluster:
    """`size` etcd members on loopback under `root`; `start()` brings them up."""

    root: Path
    size: int = 3
    tls: TLSFiles | None = None
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = free_ports(2 * self.size)
        for i in range(self.size):
            name = f"m{i + 1}"
            self.members.append(
                Member(
                    name,
                    ports[2 * i],
                    ports[2 * i + 1],
                    self.root / name,
                    self.root / f"{name}.log",
                )
            )

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def url(self, prefix: str | None = None, **query: str) -> str:
        """An etcd:// state URL for this cluster (a fresh unique prefix if none is named)."""
        prefix = prefix or f"/test/{uuid.uuid4().hex[:12]}"
        tail = f"?{urlencode(query)}" if query else ""
        return f"etcd://{','.join(self.endpoints)}{prefix}{tail}"

    # -- members, by the PIDs started here --------------------------------------------------------
    def start(self) -> None:
        if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
            raise RuntimeError("etcd-server/etcd-client are not installed: run scripts/engine.sh")
        self.root.mkdir(parents=True, exist_ok=True)
        for i in range(self.size):
            self.start_member(i, wait=False)
        self.wait_healthy()

    def start_member(self, i: int, *, wait: bool = True) -> None:
        m = self.members[i]
        if m.running:
            return
        peers = ",".join(f"{o.name}={self.scheme}://127.0.0.1:{o.peer_port}" for o in self.members)
        argv = [
            "etcd",
            "--name", m.name,
            "--data-dir", str(m.data),
            "--listen-client-urls", f"{self.scheme}://{m.endpoint}",
            "--advertise-client-urls", f"{self.scheme}://{m.endpoint}",
            "--listen-peer-urls", f"{self.scheme}://127.0.0.1:{m.peer_port}",
            "--initial-advertise-peer-urls", f"{self.scheme}://127.0.0.1:{m.peer_port}",
            "--initial-cluster", peers,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"minidock-test-{os.getpid()}-{self.root.name}",
            *self._tls_flags(),
        ]  # fmt: skip
        log = m.log.open("ab")
        m.process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_healthy()

    def stop_member(self, i: int) -> None:
        """SIGTERM the member we started (SIGKILL after STOP_TIMEOUT) and wait for it."""
        m = self.members[i]
        if m.process is None:
            return
        if m.process.poll() is None:
            m.process.send_signal(signal.SIGTERM)
            try:
                m.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                m.process.kill()
                m.process.wait(timeout=STOP_TIMEOUT)
        m.process = None

    def signal_member(self, i: int, sig: signal.Signals) -> None:
        process = self.members[i].process
        assert process is not None
        assert process.poll() is None
        process.send_signal(sig)

    def ensure_all(self) -> None:
        """Every member running and the cluster healthy (a test may have stopped some)."""
        if all(m.running for m in self.members):
            return
        for i, m in enumerate(self.members):
            if not m.running:
                self.start_member(i, wait=False)
        self.wait_healthy()

    def close(self) -> None:
        for i in range(self.size):
            self.stop_member(i)

    # -- etcdctl ----------------------------------------------------------------------------------
    def etcdctl(
        self, *args: str, endpoints: Iterable[str] | None = None, timeout: float = 10.0
    ) -> subprocess.CompletedProcess[str]:
        listed = ",".join(endpoints or [m.endpoint for m in self.members if m.running])
        argv = [
            "etcdctl",
            f"--endpoints={listed}",
            "--command-timeout=3s",
            *self._ctl_flags(),
            *args,
        ]
        env = {**os.environ, "ETCDCTL_API": "3"}
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        running = [m.endpoint for m in self.members if m.running]
        while True:
            done = self.etcdctl("endpoint", "health", endpoints=running)
            healthy = sum("is healthy" in line for line in (done.stdout + done.stderr).splitlines())
            if healthy == len(running):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(m.log.read_text()[-2000:] for m in self.members if m.log.exists())
                raise RuntimeError(f"etcd did not become healthy: {done.stderr}\n{logs}")
            time.sleep(0.2)

    def _tls_flags(self) -> list[str]:
        if self.tls is None:
            return []
        t = self.tls
        return [
            f"--cert-file={t.server_cert}", f"--key-file={t.server_key}",
            f"--trusted-ca-file={t.ca}", "--client-cert-auth",
            f"--peer-cert-file={t.server_cert}", f"--peer-key-file={t.server_key}",
            f"--peer-trusted-ca-file={t.ca}", "--peer-client-cert-auth",
        ]  # fmt: skip

    def _ctl_flags(self) -> list[str]:
        if self.tls is None:
            return []
        t = self.tls
        return [f"--cacert={t.ca}", f"--cert={t.client_cert}", f"--key={t.client_key}"]


def history(endpoint: str, key: bytes, since: int = 0) -> list[tuple[int, bytes]]:
    """Every value `key` had from revision `since` on, oldest first: (mod revision, value),
    read back through etcd's MVCC history (only the test of sealing an older state
    compacts, below its own revisions, which no other test reads)."""
    import grpc
    from aetcd import rpc  # type: ignore[import-untyped]

    channel = grpc.insecure_channel(endpoint)
    try:
        kv = rpc.KVStub(channel)
        found: list[tuple[int, bytes]] = []
        revision = 0  # 0: the newest
        while True:
            reply = kv.Range(rpc.RangeRequest(key=key, revision=revision), timeout=5)
            if not reply.kvs or reply.kvs[0].mod_revision < max(since, 1):
                break
            found.append((int(reply.kvs[0].mod_revision), bytes(reply.kvs[0].value)))
            revision = int(reply.kvs[0].mod_revision) - 1
            if revision <= 0:
                break
        return found[::-1]
    finally:
        channel.close()


def revision(endpoint: str) -> int:
    """The cluster's current revision."""
    import grpc
    from aetcd import rpc

    channel = grpc.insecure_channel(endpoint)
    try:
        return int(
            rpc.KVStub(channel).Range(rpc.RangeRequest(key=b"\0"), timeout=5).header.revision
        )
    finally:
        channel.close()
