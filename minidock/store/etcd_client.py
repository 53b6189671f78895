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

import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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
    "Watching",
    "compare_create",
    "compare_mod",
    "delete",
    "get",
    "put",
    "range_end",
    "rpc",
]

STATUS_TIMEOUT = 1.0  # seconds each endpoint has to say how it is, when a request failed
MAX_MESSAGE = 64 << 20  # a snapshot of a long history can exceed grpc's 4 MiB default
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_LAST_ERROR = re.compile(
    r"last error: (?:[A-Z_]+: )?(?:ipv[46]:\S+: )?(?:Failed to connect to remote host: )?(.*)"
)
_NO_LEADER = ("no leader", "timed out", "leader changed", "not capable", "deadline exceeded")
WATCH_BACKOFF = (0.2, 1.0)  # seconds a broken watch waits before it reopens: first, most
WATCH_JOIN = 2.0  # seconds close() waits for a watch's thread to end
_END = object()  # the end of a watch stream's requests

log = logging.getLogger(__name__)


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
    watch: Any


class EtcdClient:
    """Requests to one etcd cluster; thread-safe (the lease keeper uses it from its thread)."""

    def __init__(self, url: EtcdURL) -> None:
        self.url = url
        credentials = _credentials(url) if url.tls else None
        self._members = [_member(e, credentials) for e in url.endpoints]
        self._current = 0
        self._token: str | None = None
        self._mutex = threading.Lock()
        self._watches: list[Watching] = []

    def close(self) -> None:
        """Stop every watch still open, then close the channels."""
        with self._mutex:
            watches = list(self._watches)
        for w in watches:
            w.close()
        for m in self._members:
            m.channel.close()

    def watch(
        self,
        prefix: bytes,
        on_events: Callable[[Sequence[Any] | None], None],
        *,
        start_revision: int = 0,
    ) -> Watching:
        """Call `on_events` with the changes (rpc.Event) to every key under `prefix`, in
        order, from `start_revision` on (0: from now), from a thread of the watch's own until
        close(). `on_events(None)`: some may have been lost, re-read what you watch."""
        watching = Watching(self, prefix, on_events, start_revision)
        with self._mutex:
            self._watches.append(watching)
        watching.thread.start()
        return watching

    def watch_from_now(
        self, watches: Sequence[tuple[bytes, Callable[[Sequence[Any] | None], None]]]
    ) -> list[Watching]:
        """`watch` each (prefix, on_events) from the revision read now on: no change made
        after this returns is missed, however long the watches take to start (etcd away:
        each from whenever it starts)."""
        try:
            start = self.revision() + 1
        except StoreError:
            start = 0
        return [self.watch(p, on_events, start_revision=start) for p, on_events in watches]

    # -- requests -----------------------------------------------------------------------------
    def revision(self) -> int:
        """etcd's revision now."""
        return int(self.range(rpc.RangeRequest(key=b"\0", count_only=True)).header.revision)

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


class _Canceled(Exception):
    """etcd ended a watch for a reason other than compaction (e.g. permission denied)."""


class Watching:
    """One watch of an EtcdClient: a Watch stream on the current member, read by a daemon
    thread (`thread`) that reopens it on the next member from the last revision delivered
    when it breaks, until close()."""

    def __init__(
        self,
        client: EtcdClient,
        prefix: bytes,
        on_events: Callable[[Sequence[Any] | None], None],
        start_revision: int,
    ) -> None:
        self._client = client
        self._key, self._end = prefix, range_end(prefix)
        self._on_events = on_events
        self._next = start_revision  # where a (re)opened stream starts (0: now)
        self._lost = False  # on_events(None) said so since the last stream was created
        self._resync = False  # say None once the next stream is created (it starts at now)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the open stream, against close()
        self._open: tuple[Any, queue.Queue[Any]] | None = None
        self.thread = threading.Thread(target=self._run, name="etcd-watch", daemon=True)

    def close(self) -> None:
        """End the stream and the thread (waiting WATCH_JOIN seconds at most); no on_events
        call starts after this returns. Idempotent."""
        self._stop.set()
        with self._lock:
            opened, self._open = self._open, None
        if opened is not None:
            _end_stream(*opened)
        if self.thread is not threading.current_thread() and self.thread.ident is not None:
            self.thread.join(WATCH_JOIN)
        with self._client._mutex:
            if self in self._client._watches:
                self._client._watches.remove(self)

    def _run(self) -> None:
        delay = WATCH_BACKOFF[0]
        while not self._stop.is_set():
            member = self._client._members[self._client._current]
            try:
                if self._follow(member):
                    delay = WATCH_BACKOFF[0]
                    continue  # compacted: reopen from now at once
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return  # close() canceled it
                if exc.code() is grpc.StatusCode.UNAUTHENTICATED:
                    with self._client._mutex:
                        self._client._token = None  # expired: log in again
                else:
                    self._client._advance(member)
                log.debug("etcd watch on %s broke: %s", member.endpoint, exc.code())
            except _Canceled as exc:
                log.warning("etcd canceled the watch on %s: %s", member.endpoint, exc)
            except ValueError:  # the client's channels are closed
                return
            if self._stop.is_set():
                return
            if self._next == 0:
                self._resync = True  # reopened from now: say None once it is
            elif not self._lost:
                self._lost = True
                self._deliver(None)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, WATCH_BACKOFF[1])

    def _follow(self, member: _Member) -> bool:
        """Read one stream until it breaks (an exception) or etcd says the revision it
        starts from is compacted (True); False when it just ended."""
        requests: queue.Queue[Any] = queue.Queue()
        create = rpc.WatchCreateRequest(
            key=self._key, range_end=self._end, start_revision=self._next, prev_kv=False
        )
        requests.put(rpc.WatchRequest(create_request=create))
        # hasleader: the member ends the stream when it has no leader (it would go quiet)
        metadata = (*self._client._metadata(member), ("hasleader", "true"))
        call = member.watch.Watch(_requests(requests), metadata=metadata)
        with self._lock:
            if self._stop.is_set():
                _end_stream(call, requests)
                return False
            self._open = (call, requests)
        try:
            return any(self._take(response) for response in call)
        finally:
            with self._lock:
                self._open = None
            _end_stream(call, requests)

    def _take(self, response: Any) -> bool:
        """Deliver one response's events; True when the watch's revision is compacted."""
        if response.compact_revision > 0 or (
            response.canceled and "compacted" in response.cancel_reason
        ):
            log.debug("etcd watch from revision %d: compacted", self._next)
            self._next, self._resync = 0, True
            return True
        if response.canceled:
            raise _Canceled(response.cancel_reason or "no reason given")
        if response.created:
            if self._next == 0:
                self._next = int(response.header.revision) + 1
            if self._resync:
                self._deliver(None)  # a read from now on misses nothing the watch will not tell
            self._lost = self._resync = False
        if response.events:
            # the last event's revision, not the header's: a catching-up watch may send its
            # events in several responses, each with the newest revision in its header
            self._next = max(int(e.kv.mod_revision) for e in response.events) + 1
            self._deliver(list(response.events))
        return False

    def _deliver(self, events: Sequence[Any] | None) -> None:
        if self._stop.is_set():
            return  # close() has begun: it waits for a delivery under way, none starts
        try:
            self._on_events(events)
        except Exception:
            log.exception("etcd watch of %r: on_events failed", self._key)


def _requests(requests: queue.Queue[Any]) -> Iterator[Any]:
    """A watch stream's requests: those put on the queue, until _END."""
    while (request := requests.get()) is not _END:
        yield request


def _end_stream(call: Any, requests: queue.Queue[Any]) -> None:
    """Cancel a watch stream and end its requests (grpc reads them from a thread)."""
    call.cancel()
    requests.put(_END)


def range_end(prefix: bytes) -> bytes:
    """The end of the key range of every key that starts with `prefix`."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


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
        watch=rpc.WatchStub(channel),
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
