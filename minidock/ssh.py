"""The executor: runs a docker argv on a host over SSH. The only I/O adapter for hosts.

`Executor` is the seam: the runner and `observe` see only `run(host, argv)`. `SSHExecutor`
is the asyncssh implementation: one pooled connection per host, reused across calls and
passes; connect and command timeouts; a global concurrency bound; host keys verified
against known_hosts (with an opt-in accept-new for first contact). This module is the one
place where an argv becomes a command string (`shlex.join` in `SSHExecutor.run`), and
stdin (where env secrets travel) is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import asyncssh

from minidock.model import Host

__all__ = [
    "DEFAULT_KNOWN_HOSTS",
    "BatchExecutor",
    "CommandTimeout",
    "Executor",
    "Result",
    "SSHExecutor",
    "Step",
    "Unreachable",
    "connect_options",
    "known_hosts_line",
]

log = logging.getLogger(__name__)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# asyncssh's default ciphers, AES-GCM first: per packet, asyncssh's ChaCha20-Poly1305 costs
# the controller about a third more CPU than AES-GCM (one AEAD call), and sshd less too
ENCRYPTION = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)
_MAX_REASON = 300


@dataclass(frozen=True)
class Result:
    """What a remote command did. A non-zero exit status is a result, not an exception."""

    exit_status: int
    stdout: str
    stderr: str


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_MAX_REASON]


class Unreachable(Exception):
    """The host could not be reached or logged into: refused, timed out, reset, auth
    failed, host key unknown or changed. Counts as a failed probe of the host."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = _one_line(reason)
        super().__init__(f"{host}: {self.reason}")


class CommandTimeout(Exception):
    """The host was reached but the command did not finish in time (its session is closed).

    `argv0` names the command ("docker ps"), never its arguments.
    """

    def __init__(self, host: str, argv0: str, timeout: float | None = None) -> None:
        self.host = host
        self.argv0 = argv0
        self.timeout = timeout
        after = f" after {timeout:g}s" if timeout is not None else ""
        self.reason = f"{argv0} timed out{after}"
        super().__init__(f"{host}: {self.reason}")


class Executor(Protocol):
    """Runs an argv on a host. Raises Unreachable or CommandTimeout; otherwise a Result."""

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result: ...

    def disconnect(self, host: Host) -> None:
        """Drop any pooled connection to host: the next call connects afresh."""

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Step:
    """One command of a batch (`SSHExecutor.run_batch`). With `ids_from`, the command is
    given, as its last arguments, the container ids (the hex words) that step printed, and
    runs only when that step succeeded and printed some: else it is skipped (None)."""

    argv: tuple[str, ...]
    ids_from: int | None = None


@runtime_checkable
class BatchExecutor(Executor, Protocol):
    """An executor that can run several commands in one round trip to a host."""

    async def run_batch(
        self, host: Host, steps: Sequence[Step], *, timeout: float | None = None
    ) -> list[Result | None]: ...


_BATCH_PRELUDE = r"""set -f
b() { printf '
%s %s
' "$m" "$1"; printf '
%s %s
' "$m" "$1" >&2; }
e() { printf '
%s %s %s
' "$m" "$1" "$2"; }"""


def batch_script(steps: Sequence[Step], marker: str) -> str:
    """The POSIX sh script of a batch, each argv quoted once (`shlex.join`). Every step's
    output is framed by marker lines on stdout (begin, then end with the exit status or
    "-" when skipped) and on stderr (begin), so each step's stdout, stderr and status are
    told apart without temporary files."""
    captured = {s.ids_from for s in steps if s.ids_from is not None}
    lines = [f"m={marker}", _BATCH_PRELUDE]
    for i, step in enumerate(steps):
        command = shlex.join(step.argv)
        if step.ids_from is not None:
            k = step.ids_from
            lines.append(
                f'w=; if [ "$s{k}" = 0 ]; then for x in $o{k}; do case $x in *[!0-9a-f]*) ;;'
                f' *) w="$w $x" ;; esac; done; fi'
            )
            lines.append(f'b {i}; if [ -n "$w" ]; then {command} $w; e {i} $?; else e {i} -; fi')
        elif i in captured:  # its output is kept for a later step (and printed)
            lines.append(
                f'b {i}; o{i}=$({command}; r=$?; echo x; exit $r); s{i}=$?; o{i}=${{o{i}%x}};'
                f' printf %s "$o{i}"; e {i} $s{i}'
            )
        else:
            lines.append(f"b {i}; {command}; e {i} $?")
    return "\n".join(lines) + "\n"


def parse_batch(stdout: str, stderr: str, marker: str, n: int) -> list[Result | None] | None:
    """Each step's Result (None: skipped) from a batch's framed output; None when the
    framing is not all there (the script did not run)."""
    found: list[Result | None] = []
    out_at = err_at = 0
    for i in range(n):
        begin = f"\n{marker} {i}\n"
        out_at, err_at = stdout.find(begin, out_at), stderr.find(begin, err_at)
        if out_at < 0 or err_at < 0:
            return None
        out_at, err_at = out_at + len(begin), err_at + len(begin)
        end = stdout.find(f"\n{marker} {i} ", out_at)
        status_end = stdout.find("\n", end + 1) if end >= 0 else -1
        status = stdout[end + len(marker) + len(str(i)) + 3 : status_end]
        if end < 0 or status_end < 0 or not (status == "-" or status.isdigit()):
            return None
        next_err = stderr.find(f"\n{marker} {i + 1}\n", err_at) if i + 1 < n else len(stderr)
        err = stderr[err_at : next_err if next_err >= 0 else len(stderr)]
        found.append(None if status == "-" else Result(int(status), stdout[out_at:end], err))
        out_at = status_end
    return found


def known_hosts_line(address: str, port: int, key: asyncssh.SSHKey) -> str:
    """The known_hosts line for a host key, in OpenSSH's form ("[addr]:port" off port 22)."""
    pattern = address if port == 22 else f"[{address}]:{port}"
    algorithm, blob = key.export_public_key("openssh").decode("ascii").split()[:2]
    return f"{pattern} {algorithm} {blob}\n"


class _HostKeyClient(asyncssh.SSHClient):
    """Sees the key a host presents when known_hosts does not trust it, so the error can
    name it; under accept-new, accepts it when known_hosts has no entry at all for the host.

    asyncssh calls `validate_host_public_key` only for a key that is not trusted already;
    a host with any entry (key, CA, certificate) and a different key is a changed key and
    is refused under either policy.
    """

    def __init__(self, known_hosts: Path, accept_new: bool) -> None:
        super().__init__()
        self._known_hosts = known_hosts
        self._accept_new = accept_new
        self.accepted: asyncssh.SSHKey | None = None
        self.refused: tuple[asyncssh.SSHKey, bool] | None = None  # (key, host was known)

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        known = asyncssh.read_known_hosts(str(self._known_hosts))
        keys, cas, _, certs, _, subjects, _ = known.match(host, addr, port if port != 22 else None)
        listed = bool(keys or cas or certs or subjects)
        if self._accept_new and not listed:
            self.accepted = key
            return True
        self.refused = (key, listed)
        return False

    def refusal(self, where: str) -> str | None:
        """Why the host key was refused, naming the presented key's SHA256 fingerprint as
        OpenSSH prints it; None when no key was refused."""
        if self.refused is None:
            return None
        key, listed = self.refused
        presented = f"{key.get_algorithm()} key {key.get_fingerprint('sha256')}"
        if listed:
            return (
                f"host key of {where} not verifiable (changed): presented {presented} "
                f"does not match {self._known_hosts}"
            )
        return (
            f"host key of {where} not verifiable (unknown): presented {presented} "
            f"is not in {self._known_hosts}"
        )


def _reason(exc: BaseException, host: Host, known_hosts: Path) -> str:
    """One line saying why the host could not be reached."""
    where = f"{host.address}:{host.port}"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"host key of {where} not verifiable (unknown or changed) in {known_hosts}"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed for user {host.user} at {where}"
    if isinstance(exc, asyncssh.ConnectionLost):
        return f"connection to {where} lost"
    if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
        return f"{where}: {exc.reason}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return f"connection to {where} reset"
    if isinstance(exc, TimeoutError):
        return f"connecting to {where} timed out after {host.connect_timeout:g}s"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {host.address}: {exc.strerror}"
    if isinstance(exc, OSError):
        return f"{where}: {exc.strerror or exc}"
    return f"{where}: {type(exc).__name__}: {exc}"


@dataclass
class _Session:
    """Where one command stands: the connection it uses, and whether its session opened."""

    conn: asyncssh.SSHClientConnection
    opened: bool = False


class SSHExecutor:
    """Runs commands over pooled asyncssh connections (one per host).

    A connection is opened on first use and kept for later calls and passes; a connection
    found closed is dropped and reopened on the next call (and a session that cannot open
    on a reused connection is retried once on a fresh one). At most `max_concurrency`
    commands (and the connections they open) run at once overall, and
    `max_sessions_per_host` per host (sshd's MaxSessions defaults to 10): 128 keeps a
    thousand-host pass busy on two cores while every connect still meets its
    `connect_timeout` (docs/benchmarks.md). Use one executor per event loop and `close()`
    it at the end.
    """

    def __init__(
        self,
        max_concurrency: int = 128,
        max_sessions_per_host: int = 8,
        keepalive_interval: float = 15.0,
    ) -> None:
        self._limit = asyncio.Semaphore(max_concurrency)
        self._max_sessions_per_host = max_sessions_per_host
        self._keepalive_interval = keepalive_interval
        self._pool: dict[str, tuple[Host, asyncssh.SSHClientConnection]] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._host_limits: dict[str, asyncio.Semaphore] = {}
        self._trust = _TrustStore()
        self.connections_opened = 0  # how many SSH connections were made: pooling shows here

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        """Run argv on the host; input (never logged) goes to the command's stdin.

        The timeout bounds opening the session and running the command (connecting has
        its own bound, `host.connect_timeout`). A session that does not even open in
        time means the connection is dead (a hung or cut-off host): it is dropped.
        """
        if not argv:
            raise ValueError("empty argv")
        command = shlex.join(argv)  # the one place an argv becomes a remote command line
        return await self._command(host, command, " ".join(argv[:2]), input, timeout)

    async def run_batch(
        self, host: Host, steps: Sequence[Step], *, timeout: float | None = None
    ) -> list[Result | None]:
        """Run the steps in order in one session (one round trip, one remote shell): each
        gets its own Result, None for a skipped step (see `Step`). The timeout bounds the
        whole batch; a timeout is a CommandTimeout naming the first step's command."""
        if not steps or not all(s.argv for s in steps):
            raise ValueError("empty batch or argv")
        marker = f"@@minidock-{secrets.token_hex(8)}"
        script = batch_script(steps, marker)
        ran = await self._command(host, script, " ".join(steps[0].argv[:2]), None, timeout)
        found = parse_batch(ran.stdout, ran.stderr, marker, len(steps))
        if found is None:  # the remote shell did not run the script: its own failure
            return [ran, *([None] * (len(steps) - 1))]
        return found

    async def _command(
        self, host: Host, command: str, argv0: str, input: str | None, timeout: float | None
    ) -> Result:
        limit = host.command_timeout if timeout is None else timeout
        host_limit = self._host_limits.setdefault(
            host.name, asyncio.Semaphore(self._max_sessions_per_host)
        )
        log.debug("%s: %s", host.name, command)
        async with host_limit, self._limit:
            conn, reused = await self._connection(host)
            session = _Session(conn)
            try:
                return await asyncio.wait_for(
                    self._session(host, reused, command, input, session), limit
                )
            except TimeoutError:
                if not session.opened:  # no session opened: the connection is dead
                    self._drop(host.name, session.conn)
                raise CommandTimeout(host.name, argv0, limit) from None

    async def _session(
        self, host: Host, reused: bool, command: str, input: str | None, session: _Session
    ) -> Result:
        conn = session.conn
        try:
            process = await conn.create_process(command, encoding="utf-8", errors="replace")
        except (asyncssh.Error, OSError) as exc:
            if not (reused and conn.is_closed()):
                raise self._unreachable(host, exc) from None
            self._drop(host.name, conn)  # stale pooled connection: one fresh try
            conn, _ = await self._connection(host)
            session.conn = conn
            try:
                process = await conn.create_process(command, encoding="utf-8", errors="replace")
            except (asyncssh.Error, OSError) as exc2:
                raise self._unreachable(host, exc2) from None
        session.opened = True
        return await self._finish(host, conn, process, input)

    async def _finish(
        self,
        host: Host,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[str],
        input: str | None,
    ) -> Result:
        try:
            if input:
                process.stdin.write(input)
            process.stdin.write_eof()
            stdout, stderr = await process.communicate()
        except (asyncssh.Error, OSError) as exc:
            process.close()
            raise self._unreachable(host, exc) from None
        except BaseException:  # cancelled by the timeout: close the session
            process.close()
            raise
        status = process.returncode
        if status is None:  # the channel closed without an exit status: connection lost
            self._drop(host.name, conn)
            raise Unreachable(host.name, f"connection to {host.address}:{host.port} lost")
        if status < 0:  # killed by a signal, as a shell reports it
            status = 128 - status
        return Result(status, str(stdout or ""), str(stderr or ""))

    def disconnect(self, host: Host) -> None:
        """Drop the pooled connection to host, if any: the next call connects afresh (with
        `host.connect_timeout`). Commands still running on it fail as Unreachable."""
        pooled = self._pool.get(host.name)
        if pooled is not None:
            self._drop(host.name, pooled[1])

    async def close(self) -> None:
        """Close every pooled connection."""
        pool, self._pool = self._pool, {}
        for _, conn in pool.values():
            conn.close()
        for _, conn in pool.values():
            with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(conn.wait_closed(), 5.0)

    # -- connections --------------------------------------------------------------------------
    def _unreachable(self, host: Host, exc: BaseException) -> Unreachable:
        pooled = self._pool.get(host.name)
        if pooled is not None and pooled[1].is_closed():
            self._drop(host.name, pooled[1])
        return Unreachable(host.name, _reason(exc, host, _known_hosts_path(host)))

    def _drop(self, name: str, conn: asyncssh.SSHClientConnection) -> None:
        pooled = self._pool.get(name)
        if pooled is not None and pooled[1] is conn:
            del self._pool[name]
        conn.close()

    async def _connection(self, host: Host) -> tuple[asyncssh.SSHClientConnection, bool]:
        """The pooled connection to host (reused: True), or a new one (False)."""
        lock = self._connect_locks.setdefault(host.name, asyncio.Lock())
        async with lock:
            pooled = self._pool.get(host.name)
            if pooled is not None:
                known, conn = pooled
                if known == host and not conn.is_closed():
                    return conn, True
                self._drop(host.name, conn)  # closed, or the inventory changed the host
            conn = await self._connect(host)
            self._pool[host.name] = (host, conn)
            return conn, False

    async def _connect(self, host: Host) -> asyncssh.SSHClientConnection:
        known_hosts = _known_hosts_path(host)
        accept_new = host.host_key_policy == "accept-new"
        if not known_hosts.is_file():
            if not accept_new:
                raise Unreachable(
                    host.name, f"known_hosts file {known_hosts} not found: host key unverifiable"
                )
            known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            known_hosts.touch(mode=0o600)
        client = _HostKeyClient(known_hosts, accept_new)
        identity = _identity_path(host)
        if identity and not os.path.isfile(identity):
            raise Unreachable(host.name, f"identity file {identity} not found")
        try:
            conn = await asyncssh.connect(
                host.address,
                **(connect_options(host) | {"known_hosts": self._trust.known(known_hosts)}),
                client_factory=lambda: client,
                keepalive_interval=self._keepalive_interval,
                keepalive_count_max=3,
            )
        except (asyncssh.Error, OSError, ValueError) as exc:
            refused = client.refusal(f"{host.address}:{host.port}")
            if refused is not None and isinstance(exc, asyncssh.HostKeyNotVerifiable):
                raise Unreachable(host.name, refused) from None
            raise Unreachable(host.name, _reason(exc, host, known_hosts)) from None
        self.connections_opened += 1
        if client.accepted is not None:
            await self._trust.remember(known_hosts, host, client.accepted)
        return conn


class _TrustStore:
    """The known_hosts files the executor verifies host keys against: each parsed once per
    version of the file (its mtime and size), not once per connection, since with a line
    per host, parsing it for each of N connections costs O(N^2) (at 100 hosts, half of a
    cold pass's CPU); and the first-contact keys accept-new appends (which change the
    file, so the next connection reads it again)."""

    def __init__(self) -> None:
        self._parsed: dict[Path, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}
        self._lock = asyncio.Lock()

    def known(self, path: Path) -> asyncssh.SSHKnownHosts:
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        found = self._parsed.get(path)
        if found is None or found[0] != version:
            found = self._parsed[path] = (version, asyncssh.read_known_hosts(str(path)))
        return found[1]

    async def remember(self, known_hosts: Path, host: Host, key: asyncssh.SSHKey) -> None:
        """accept-new: append the first-contact key to known_hosts."""
        line = known_hosts_line(host.address, host.port, key)
        async with self._lock:
            text = known_hosts.read_text() if known_hosts.exists() else ""
            with known_hosts.open("a") as f:
                f.write(("\n" if text and not text.endswith("\n") else "") + line)
        log.warning("%s: accepted new host key %s", host.name, line.strip())


def _known_hosts_path(host: Host) -> Path:
    return Path(os.path.expanduser(host.known_hosts or DEFAULT_KNOWN_HOSTS))


def _identity_path(host: Host) -> str | None:
    return os.path.expanduser(host.identity_file) if host.identity_file else None


def connect_options(host: Host) -> dict[str, Any]:
    """The `asyncssh.connect` keyword arguments (all but the address) with which the
    executor reaches a host: its port, user, identity file (no agent then), known_hosts,
    timeouts and ciphers, and nothing from ~/.ssh/config (the inventory is the whole truth).
    Tools that need a raw asyncssh session to a host (the lab's tests) start from these."""
    identity = _identity_path(host)
    return {
        "port": host.port,
        "username": host.user,
        "known_hosts": str(_known_hosts_path(host)),
        "client_keys": [identity] if identity else (),
        "agent_path": None if identity else (),
        "config": [],
        "connect_timeout": host.connect_timeout,
        "login_timeout": host.connect_timeout,
        "encryption_algs": list(ENCRYPTION),
    }
