"""A small synchronous etcd v3 client: aetcd's bindings of the etcd API (`aetcd.rpc`: the
protobuf messages and gRPC stubs generated from etcd's own .proto files) over grpcio
channels, one per endpoint, with TLS, user/password, a time budget for every request and
failover between endpoints.

When no endpoint can answer within the budget, the request fails with one line saying
why, after asking every endpoint for its status: no endpoint answers, or the members
that answer have no leader ("no quorum"). Nothing is retried past the budget. Only
minidock.store.etcd imports this module (docs/ha.md says why aetcd).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # grpc's own log lines are not ours to print

import grpc
from aetcd import rpc  # type: ignore[import-untyped]

from minidock.store.base import StoreError, StoreUnavailable, StoreUnusable
from minidock.store.location import Endpoint, EtcdURL

__all__ = [
    "EtcdClient",
    "RevisionCompacted",
    "compare_create",
    "compare_mod",
    "delete",
    "get",
    "put",
    "rpc",
]

STATUS_TIMEOUT = 1.0  # seconds each endpoint has to say how it is, when a request failed
MAX_MESSAGE = 64 << 20  # a snapshot of a long history can exceed grpc's 4 MiB default
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_LAST_ERROR = re.compile(
    r"last error: (?:[A-Z_]+: )?(?:ipv[46]:\S+: )?(?:Failed to connect to remote host: )?(.*)"
)
_NO_LEADER = ("no leader", "timed out", "leader changed", "not capable", "deadline exceeded")


class RevisionCompacted(StoreError):
    """A read at a revision etcd has compacted away (its history before it is gone)."""


Invoke = Callable[["_Member", float, Sequence[tuple[str, str]]], Any]


@dataclass
class _Member:
    """One endpoint: its channel and the etcd services on it."""

    endpoint: Endpoint
    channel: grpc.Channel
    kv: Any
    lease: Any
    auth: Any
    maintenance: Any


class EtcdClient:
    """Requests to one etcd cluster; thread-safe (the lease keeper uses it from its thread)."""

    def __init__(self, url: EtcdURL) -> None:
        self.url = url
        credentials = _credentials(url) if url.tls else None
        self._members = [_member(e, credentials) for e in url.endpoints]
        self._current = 0
        self._token: str | None = None
        self._mutex = threading.Lock()

    def close(self) -> None:
        for m in self._members:
            m.channel.close()

    # -- requests -----------------------------------------------------------------------------
    def range(self, request: Any) -> Any:
        return self._call("Range", lambda m, t, md: m.kv.Range(request, timeout=t, metadata=md))

    def txn(self, request: Any) -> Any:
        return self._call("Txn", lambda m, t, md: m.kv.Txn(request, timeout=t, metadata=md))

    def compact(self, revision: int) -> None:
        """Drop every key's history before `revision` (the whole etcd keyspace's, as etcd's
        own auto-compaction does), waiting until it is gone from the members' disks."""
        request = rpc.CompactionRequest(revision=revision, physical=True)
        self._call("Compact", lambda m, t, md: m.kv.Compact(request, timeout=t, metadata=md))

    def grant(self, ttl: int) -> Any:
        request = rpc.LeaseGrantRequest(TTL=ttl)
        return self._call(
            "LeaseGrant", lambda m, t, md: m.lease.LeaseGrant(request, timeout=t, metadata=md)
        )

    def keep_alive(self, lease_id: int, budget: float) -> int:
        """Renew the lease once; its new TTL (<= 0: it has expired)."""
        request = rpc.LeaseKeepAliveRequest(ID=lease_id)

        def once(m: _Member, t: float, md: Sequence[tuple[str, str]]) -> Any:
            return next(iter(m.lease.LeaseKeepAlive(iter([request]), timeout=t, metadata=md)))

        return int(self._call("LeaseKeepAlive", once, budget=budget).TTL)

    def time_to_live(self, lease_id: int) -> float | None:
        """Seconds left on the lease, as etcd counts them (None: it has expired)."""
        request = rpc.LeaseTimeToLiveRequest(ID=lease_id)
        reply = self._call(
            "LeaseTimeToLive",
            lambda m, t, md: m.lease.LeaseTimeToLive(request, timeout=t, metadata=md),
        )
        return float(reply.TTL) if int(reply.TTL) >= 0 else None

    def revoke(self, lease_id: int) -> None:
        request = rpc.LeaseRevokeRequest(ID=lease_id)
        self._call(
            "LeaseRevoke", lambda m, t, md: m.lease.LeaseRevoke(request, timeout=t, metadata=md)
        )

    def check_quorum(self) -> None:
        """Fail at once, saying why, when no member that answers knows a leader (Status is
        answered from the member's own memory, without quorum)."""
        for m in self._ordered():
            try:
                status = m.maintenance.Status(rpc.StatusRequest(), timeout=STATUS_TIMEOUT)
            except grpc.RpcError:
                continue
            if status.leader:
                return
        raise self._unanswered("Status", {})

    # -- the budget, failover, and the one line ----------------------------------------------
    def _call(self, what: str, invoke: Invoke, *, budget: float | None = None) -> Any:
        total = self.url.timeout if budget is None else budget
        deadline = time.monotonic() + total
        per_try = max(total / len(self._members), min(1.0, total))  # room to try the others
        failures: dict[str, str] = {}
        authenticated = False
        while (left := deadline - time.monotonic()) > 0:
            member = self._members[self._current]
            try:
                return invoke(member, min(per_try, left), self._metadata(member))
            except grpc.RpcError as exc:
                code = exc.code()
                details = str(exc.details() or code)
                if code is grpc.StatusCode.UNAUTHENTICATED and not authenticated:
                    self._token, authenticated = None, True  # expired token: log in again
                    continue
                if code not in _TRANSIENT and not _no_leader(details):
                    raise _refused(self.url, what, code, details) from None
                failures[str(member.endpoint)] = _reason(details)
                self._advance(member)
                if len(failures) == len(self._members):
                    time.sleep(min(0.1, max(left, 0.0)))
        raise self._unanswered(what, failures)

    def _metadata(self, member: _Member) -> Sequence[tuple[str, str]]:
        if self.url.user is None:
            return ()
        with self._mutex:
            if self._token is None:
                request = rpc.AuthenticateRequest(name=self.url.user, password=self.url.password)
                reply = member.auth.Authenticate(request, timeout=self.url.timeout)
                self._token = str(reply.token)
            return (("token", self._token),)

    def _advance(self, member: _Member) -> None:
        with self._mutex:
            if self._members[self._current] is member:
                self._current = (self._current + 1) % len(self._members)

    def _ordered(self) -> list[_Member]:
        n = len(self._members)
        return [self._members[(self._current + i) % n] for i in range(n)]

    def _unanswered(self, what: str, failures: dict[str, str]) -> StoreUnavailable:
        """Why nothing answered: ask each endpoint how it is (a local, quorum-free read)."""
        answering, leaders = 0, 0
        for m in self._members:
            try:
                status = m.maintenance.Status(rpc.StatusRequest(), timeout=STATUS_TIMEOUT)
            except grpc.RpcError as exc:
                failures.setdefault(str(m.endpoint), _reason(str(exc.details() or exc.code())))
                continue
            answering += 1
            leaders += 1 if status.leader else 0
        total = len(self._members)
        if answering == 0:
            seen = "; ".join(f"{e}: {why}" for e, why in failures.items())
            return StoreUnavailable(f"{self.url}: no etcd endpoint answers ({seen})")
        if leaders == 0:
            return StoreUnavailable(
                f"{self.url}: etcd has no quorum: {answering} of {total} endpoints answer "
                "and none has a leader"
            )
        seen = "; ".join(f"{e}: {why}" for e, why in failures.items()) or "no answer"
        return StoreUnavailable(
            f"{self.url}: etcd did not answer {what} within {self.url.timeout:g}s ({seen})"
        )


def _reason(details: str) -> str:
    """grpc's account of a failed call, as a few words: "connection refused", "Ssl
    handshake failed ...", "Deadline Exceeded"."""
    line = details.splitlines()[0] if details else "no answer"
    found = _LAST_ERROR.search(line)
    reason = found.group(1) if found else line
    return reason[:1].lower() + reason[1:160] if reason.startswith("Connection") else reason[:160]


def _no_leader(details: str) -> bool:
    return any(word in details for word in _NO_LEADER)


# etcd's words for a request past --max-request-bytes, and its gRPC server's for one past
# that limit plus gRPC's 0.5 MiB of room
TOO_LARGE = ("request is too large", "received message larger than max")


def _refused(url: EtcdURL, what: str, code: grpc.StatusCode, details: str) -> StoreError:
    denied = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
    if code in denied or "authentication failed" in details:
        return StoreUnusable(f"{url}: etcd refused {what}: {details} (check the user and its role)")
    if any(words in details for words in TOO_LARGE):
        return StoreError(
            f"{url}: etcd refused {what}: the request is larger than the members' "
            "--max-request-bytes (1.5 MiB by default; one service's spec or one host's "
            "record that large fills it): raise it on every member (docs/ha.md)"
        )
    if "required revision has been compacted" in details:
        return RevisionCompacted(f"{url}: etcd refused {what}: {details}")
    return StoreError(f"{url}: etcd refused {what}: {details}")


def _member(endpoint: Endpoint, credentials: grpc.ChannelCredentials | None) -> _Member:
    target = str(endpoint)
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    channel = (
        grpc.insecure_channel(target, options=options)
        if credentials is None
        else grpc.secure_channel(target, credentials, options=options)
    )
    return _Member(
        endpoint,
        channel,
        kv=rpc.KVStub(channel),
        lease=rpc.LeaseStub(channel),
        auth=rpc.AuthStub(channel),
        maintenance=rpc.MaintenanceStub(channel),
    )


def _credentials(url: EtcdURL) -> grpc.ChannelCredentials:
    def read(what: str, path: Path | None) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StoreUnusable(f"{url}: etcd {what} {path}: {exc.strerror}") from None

    return grpc.ssl_channel_credentials(
        root_certificates=read("cacert", url.cacert),
        private_key=read("key", url.key),
        certificate_chain=read("cert", url.cert),
    )


# -- building requests ------------------------------------------------------------------------
def put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def get(key: bytes, range_end: bytes = b"", **options: Any) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key, range_end=range_end, **options))


def delete(key: bytes, range_end: bytes = b"") -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def compare_create(key: bytes, revision: int) -> Any:
    """True when `key` was created at `revision` (0: the key does not exist)."""
    return rpc.Compare(
        key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=revision
    )


def compare_mod(key: bytes, revision: int) -> Any:
    """True when `key` was last changed at `revision` (0: the key does not exist)."""
    return rpc.Compare(
        key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision
    )
