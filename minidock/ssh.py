"""The executor: runs a docker argv on a host over SSH. The only I/O adapter for hosts.

`Executor` is the seam: the runner and `observe` see `run(host, argv)` (a command with its
whole output); pushing an image streams a command's stdin (`feed`), `logs` and `exec`
stream its output line by line (`follow`), and `exec -it` joins it to the local terminal
(`attach`). `SSHExecutor` is the asyncssh implementation: one pooled connection per host,
reused across calls and passes; connect and command timeouts; a global concurrency bound;
host keys verified against known_hosts (with an opt-in accept-new for first contact). This
module is the one place where an argv becomes a command string (`shlex.join` in
`quoted`), and stdin (where env secrets and registry passwords travel) is never logged.
On a host with `sudo = true` that is also where every docker command becomes `sudo -n
docker ...` (`as_user`), a batch's steps and the docker of a `sh -c` script included.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import shlex
import socket
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import asyncssh

from minidock.model import Host, Jump
from minidock.terminal import Terminal, pump, terminal_type

__all__ = [
    "DEFAULT_KNOWN_HOSTS",
    "SUDO",
    "BatchExecutor",
    "CommandTimeout",
    "Executor",
    "OnLine",
    "OutputLine",
    "Result",
    "SSHExecutor",
    "Sink",
    "Step",
    "Terminal",
    "Unreachable",
    "as_user",
    "batch_script",
    "connect_options",
    "known_hosts_line",
    "quoted",
]

log = logging.getLogger(__name__)
connects = logging.getLogger(f"{__name__}.connects")  # each connection opened (debug)

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


@dataclass(frozen=True)
class OutputLine:
    """One line a followed command printed (without its line break), and on which stream."""

    stream: Literal["stdout", "stderr"]
    text: str


OnLine = Callable[[OutputLine], None]
Sink = Callable[[bytes], Awaitable[None]]  # takes one chunk of a command's stdout
POUR_CHUNK = 1 << 20  # the most bytes of a poured command's stdout read at a time


SSHD = "the host's sshd"  # how a failure's cause names the host (Unreachable.cause)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_MAX_REASON]


class Unreachable(Exception):
    """The host could not be reached or logged into: refused, timed out, reset, auth
    failed, host key unknown or changed. Counts as a failed probe of the host. `cause` is
    the reason without what names this host (its address, its key), the same for every
    host it happens to, so that many hosts' failures group by it."""

    def __init__(self, host: str, reason: str, cause: str = "") -> None:
        self.host = host
        self.reason = _one_line(reason)
        self.cause = _one_line(cause) if cause else self.reason
        super().__init__(f"{host}: {self.reason}")


class CommandTimeout(Exception):
    """The host was reached but the command did not finish in time (its session is closed).

    `argv0` names the command ("docker ps"), never its arguments.
    """

    def __init__(
        self, host: str, argv0: str, timeout: float | None = None, *, opened: bool = False
    ) -> None:
        self.host = host
        self.argv0 = argv0
        self.timeout = timeout
        self.opened = opened  # the session opened (the host's sshd answered) before it
        after = f" after {timeout:g}s" if timeout is not None else ""
        self.reason = f"{argv0} timed out{after}"
        super().__init__(f"{host}: {self.reason}")


class Executor(Protocol):
    """Runs an argv on a host. Raises Unreachable or CommandTimeout; otherwise a Result
    (or, for the streaming calls, the exit status)."""

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result: ...

    async def feed(
        self,
        host: Host,
        argv: Sequence[str],
        source: AsyncIterable[bytes],
        *,
        timeout: float | None = None,
    ) -> Result:
        """Run argv with `source` streamed to its stdin; `timeout` bounds each chunk's
        delivery and the wait for the exit after the last one, not the whole stream."""
        ...

    async def pour(
        self,
        host: Host,
        argv: Sequence[str],
        sink: Sink,
        *,
        timeout: float | None = None,
    ) -> Result:
        """Run argv with its stdout handed to `sink` chunk by chunk as it comes (the Result's
        stdout is empty, its stderr whole); the next chunk is read once `sink` returns, so
        a slow sink slows the command, never fills memory. `timeout` bounds each chunk's
        wait and the wait for the exit after the last one, not the whole stream."""
        ...

    async def follow(self, host: Host, argv: Sequence[str], on_line: OnLine) -> int:
        """Run argv with no time limit, handing each line of its stdout and stderr to
        `on_line` as it comes; the exit status once it ends (cancel to stop it)."""
        ...

    async def attach(self, host: Host, argv: Sequence[str], terminal: Terminal) -> int:
        """Run argv joined to a local terminal (a PTY on the host when `terminal.tty`)."""
        ...

    def disconnect(self, host: Host) -> None:
        """Drop any pooled connection to host: the next call connects afresh."""
        ...

    async def warm(self, hosts: Sequence[Host]) -> int:
        """Keep a connection open to each host, running nothing on it: a standby
        controller's, so that its first pass after a takeover needs no handshake. The
        connections missing are opened in the background (the caller never waits for a
        host that does not answer); how many hosts are connected now."""
        ...

    def release(self, keep: Set[str], idle: float) -> int:
        """Close the connections to hosts not in `keep` that ran nothing for `idle`
        seconds (none running now); how many connections stay open."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Step:
    """One command of a batch (`SSHExecutor.run_batch`). With `ids_from`, the command is
    given, as its last arguments, the container ids that step printed (each line's first
    word, when it is hex), and runs only when that step succeeded and printed some: else
    it is skipped (None). With `skip`, a line `ID STATE STATUS` (commands.facts.ps_argv)
    whose key (commands.facts.listing_key) is in `skip` gives no id: a container unchanged
    since the last observation is not inspected again."""

    argv: tuple[str, ...]
    ids_from: int | None = None
    skip: tuple[str, ...] = ()


@runtime_checkable
class BatchExecutor(Executor, Protocol):
    """An executor that can run several commands in one round trip to a host."""

    async def run_batch(
        self,
        host: Host,
        steps: Sequence[Step],
        *,
        timeout: float | None = None,
        answer_timeout: float | None = None,
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
# a listing line's health, as commands.facts.health_word reads it
_HEALTH_CASE = (
    "case $r in *'(healthy)'*) h=healthy ;; *'(unhealthy)'*) h=unhealthy ;;"
    " *'(health: starting)'*|*'(starting)'*) h=starting ;; *) h=none ;; esac"
)


def _ids_line(i: int, step: Step) -> str:
    """The script lines that gather, into $w, the ids step `ids_from` printed (minus those
    whose listing key is in `step.skip`)."""
    head = skip = ""
    if step.skip:
        head = f"k{i}={shlex.quote(' '.join(step.skip))}; "
        skip = f'{_HEALTH_CASE}; case " $k{i} " in *" $x/$t/$h "*) continue ;; esac; '
    k = step.ids_from
    return (
        f'{head}w=; if [ "$s{k}" = 0 ]; then while read -r x t r; do case $x in'
        f" ''|*[!0-9a-f]*) continue ;; esac; {skip}w=\"$w $x\"; done <<MINIDOCK_IDS\n"
        f"$o{k}\nMINIDOCK_IDS\nfi"
    )


def batch_script(steps: Sequence[Step], marker: str, *, sudo: bool = False) -> str:
    """The POSIX sh script of a batch, each argv quoted once (`quoted`; with `sudo`, as
    `as_user` makes it). Every step's output is framed by marker lines on stdout (begin,
    then end with the exit status or "-" when skipped) and on stderr (begin), so each
    step's stdout, stderr and status are told apart without temporary files."""
    captured = {s.ids_from for s in steps if s.ids_from is not None}
    lines = [f"m={marker}", _BATCH_PRELUDE]
    for i, step in enumerate(steps):
        command = quoted(as_user(step.argv, sudo=sudo))
        if step.ids_from is not None:
            lines.append(_ids_line(i, step))
            lines.append(f'b {i}; if [ -n "$w" ]; then {command} $w; e {i} $?; else e {i} -; fi')
        elif i in captured:  # its output is kept for a later step (and printed)
            lines.append(
                f"b {i}; o{i}=$({command}; r=$?; echo x; exit $r); s{i}=$?; o{i}=${{o{i}%x}};"
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

    def refusal(self, where: str, *, key: bool = True) -> str | None:
        """Why the host key was refused, naming the presented key's SHA256 fingerprint as
        OpenSSH prints it (not with `key=False`); None when no key was refused."""
        if self.refused is None:
            return None
        shown, listed = self.refused
        if not key:
            verb = "does not match" if listed else "is not in"
            return f"host key {'changed' if listed else 'unknown'}: {verb} {self._known_hosts}"
        presented = f"{shown.get_algorithm()} key {shown.get_fingerprint('sha256')}"
        if listed:
            return (
                f"host key of {where} not verifiable (changed): presented {presented} "
                f"does not match {self._known_hosts}"
            )
        return (
            f"host key of {where} not verifiable (unknown): presented {presented} "
            f"is not in {self._known_hosts}"
        )


class _Endpoint(Protocol):
    """What connecting needs of a host or a jump host (`Host` and `Jump` both are one)."""

    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def identity_files(self) -> tuple[str, ...]: ...
    @property
    def identities_only(self) -> bool: ...
    @property
    def identity_agent(self) -> str | None: ...
    @property
    def known_hosts(self) -> str | None: ...
    @property
    def host_key_policy(self) -> str: ...


def _reason(
    exc: BaseException, end: _Endpoint, timeout: float, known_hosts: Path, where: str
) -> str:
    """One line saying why `end` (named `where` in it) could not be reached."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"host key of {where} not verifiable (unknown or changed) in {known_hosts}"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed for user {end.user} at {where}"
    if isinstance(exc, asyncssh.ConnectionLost):
        return f"connection to {where} lost"
    if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
        return f"{where}: {exc.reason}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return f"connection to {where} reset"
    if isinstance(exc, TimeoutError):
        return f"connecting to {where} timed out after {timeout:g}s"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {end.address}: {exc.strerror}"
    if isinstance(exc, OSError):
        return f"{where}: {exc.strerror or exc}"
    return f"{where}: {type(exc).__name__}: {exc}"


def _where(host: Host) -> str:
    """How messages name the host's sshd: `addr:port`, plus the last jump host if any."""
    where = f"{host.address}:{host.port}"
    if host.proxy_jump:
        last = host.proxy_jump[-1]
        where += f" via jump host {last.address}:{last.port}"
    return where


def _jump_where(jump: Jump) -> str:
    return f"jump host {jump.address}:{jump.port}"


class _GatheredWrites(asyncio.Transport):
    """A TCP transport whose writes in one turn of the event loop leave in one send, at
    the end of the turn, in order (closing or aborting sends what is waiting first).

    asyncssh writes each packet on its own, and before each data packet an empty ignore
    packet: a stream into a host was two sends and two TCP segments per 32 KiB, each
    waking the receiving sshd (and, on the lab, the port proxy). Gathered, a 1 MiB chunk
    is one send: a sixth less of a restore stream's CPU on the controller and on the host
    (docs/benchmarks.md, "Volumes")."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._waiting: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._send)
        self._waiting.append(bytes(data))

    def _send(self) -> None:
        waiting, self._waiting = self._waiting, []
        if waiting and not self._transport.is_closing():
            self._transport.writelines(waiting)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._waiting))

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._send()
        self._transport.close()

    def abort(self) -> None:
        self._send()
        self._transport.abort()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()


class _Gathering(asyncio.Protocol):
    """asyncssh's connection over a TCP transport, handed the transport with its writes
    gathered (`_GatheredWrites`); everything else passed through."""

    def __init__(self, connection: asyncio.Protocol) -> None:
        self.connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.connection.connection_made(_GatheredWrites(transport))

    def data_received(self, data: bytes) -> None:
        self.connection.data_received(data)

    def eof_received(self) -> bool | None:
        return self.connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.connection_lost(exc)

    def pause_writing(self) -> None:
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        self.connection.resume_writing()


class _Direct:
    """How asyncssh reaches a host or first jump directly (its `tunnel` argument: anything
    with `create_connection`): a TCP connection, as asyncssh makes one, its writes
    gathered."""

    async def create_connection(
        self, session_factory: Callable[[], Any], remote_host: str, remote_port: int
    ) -> tuple[Any, Any]:
        loop = asyncio.get_running_loop()
        transport, gathering = await loop.create_connection(
            lambda: _Gathering(session_factory()), remote_host, remote_port
        )
        return transport, gathering.connection

    def close(self) -> None:
        """Nothing to close: the connection is asyncssh's."""

    async def wait_closed(self) -> None:
        """Nothing to wait for (see `close`)."""


class _Connector:
    """Opens one SSH connection to a host or a jump host (through `tunnel`, the connection
    to the previous hop, when given): host key verified against its known_hosts (accept-new
    appends a first-contact key), its user and keys, errors as Unreachable of the host."""

    def __init__(self) -> None:
        self._known_hosts_lock = asyncio.Lock()
        self._parsed: dict[Path, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}
        self.opened = 0  # how many SSH connections were made (jump hosts included)

    def _trusted(self, path: Path) -> asyncssh.SSHKnownHosts:
        """known_hosts, parsed once per version of the file (its mtime and size), not once
        per connection: with a line per host, parsing it for each of N connections costs
        O(N^2) (at 100 hosts, half of a cold pass's CPU). An accept-new append changes the
        file, so the next connection reads it again."""
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        found = self._parsed.get(path)
        if found is None or found[0] != version:
            found = self._parsed[path] = (version, asyncssh.read_known_hosts(str(path)))
        return found[1]

    async def connect(
        self,
        host: Host,
        end: _Endpoint,
        where: str,
        tunnel: asyncssh.SSHClientConnection | None = None,
    ) -> asyncssh.SSHClientConnection:
        known_hosts = _known_hosts_path(end)
        accept_new = end.host_key_policy == "accept-new"
        _check_known_hosts(host.name, known_hosts, accept_new)
        client = _HostKeyClient(known_hosts, accept_new)
        identity = _identity_path(host) if end is host else None
        if identity and not os.path.isfile(identity):
            raise Unreachable(host.name, f"identity file {identity} not found")
        began = time.monotonic()
        try:
            conn = await asyncssh.connect(
                end.address,
                **(
                    _endpoint_options(end, identity, host.connect_timeout)
                    | {"known_hosts": self._trusted(known_hosts)}
                ),
                tunnel=tunnel if tunnel is not None else _Direct(),
                client_factory=lambda: client,
                keepalive_interval=host.keepalive_interval,
                keepalive_count_max=host.keepalive_count_max,
            )
        except (asyncssh.Error, OSError, ValueError) as exc:
            refused = client.refusal(where)
            if refused is not None and isinstance(exc, asyncssh.HostKeyNotVerifiable):
                raise Unreachable(
                    host.name, refused, client.refusal(SSHD, key=False) or refused
                ) from None
            reason = _reason(exc, end, host.connect_timeout, known_hosts, where)
            cause = _reason(exc, end, host.connect_timeout, known_hosts, SSHD)
            raise Unreachable(host.name, reason, cause) from None
        self.opened += 1
        connects.debug(
            "%s: %s connected in %.2f s", host.name, end.address, time.monotonic() - began
        )
        if client.accepted is not None:
            await self._remember(known_hosts, host.name, end, client.accepted)
        return conn

    async def _remember(
        self, known_hosts: Path, name: str, end: _Endpoint, key: asyncssh.SSHKey
    ) -> None:
        """accept-new: append the first-contact key to known_hosts."""
        line = known_hosts_line(end.address, end.port, key)
        async with self._known_hosts_lock:
            text = known_hosts.read_text() if known_hosts.exists() else ""
            with known_hosts.open("a") as f:
                f.write(("\n" if text and not text.endswith("\n") else "") + line)
        log.warning("%s: accepted new host key %s", name, line.strip())


def _check_known_hosts(name: str, known_hosts: Path, accept_new: bool) -> None:
    """A known_hosts file to verify against: a regular file (never /dev/null, which would
    make every key unknown and, under accept-new, every key accepted); missing only under
    accept-new, which creates it."""
    if known_hosts.exists() and not known_hosts.is_file():
        raise Unreachable(
            name, f"known_hosts {known_hosts} is not a regular file: host keys unverifiable"
        )
    if known_hosts.is_file():
        return
    if not accept_new:
        raise Unreachable(name, f"known_hosts file {known_hosts} not found: host key unverifiable")
    known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    known_hosts.touch(mode=0o600)


_Route = tuple[Jump, ...]


class _Uses:
    """What `_Pool.release` asks of each host's connection: the sessions open on it now
    (one of them, an event stream's, may last for days) and when it last ran something
    (the event loop's clock)."""

    def __init__(self) -> None:
        self._open: dict[str, set[object]] = {}
        self._last: dict[str, float] = {}

    def used(self, name: str) -> None:
        self._last[name] = asyncio.get_running_loop().time()

    def opened(
        self, name: str, process: asyncssh.SSHClientProcess[Any]
    ) -> asyncssh.SSHClientProcess[Any]:
        self._open.setdefault(name, set()).add(process)
        return process

    def ended(self, name: str, process: object) -> None:
        self._open.get(name, set()).discard(process)
        self.used(name)

    def idle(self, name: str, seconds: float) -> bool:
        """No session open, and nothing run for `seconds`."""
        now = asyncio.get_running_loop().time()
        return not self._open.get(name) and now - self._last.get(name, now) >= seconds


class _Background:
    """Tasks run in the background, one at a time for each name (a host's warm
    connection), each forgotten once done."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[bool]] = {}

    def start(self, name: str, work: Callable[[], Awaitable[bool]]) -> None:
        """Run `work()` for `name` unless a task for it runs already."""
        if name not in self._tasks:
            task = asyncio.ensure_future(work())
            self._tasks[name] = task
            task.add_done_callback(functools.partial(self._done, name))

    def _done(self, name: str, _: asyncio.Task[bool]) -> None:
        self._tasks.pop(name, None)

    async def cancel(self) -> None:
        """Cancel every task, and return once each has ended."""
        tasks, self._tasks = self._tasks, {}
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


class _Pool:
    """One asyncssh connection per host, opened on first use and kept; a connection found
    closed, or whose host changed in the inventory, is dropped and reopened. Jump hosts
    have one connection per route (the hops up to them), shared by every host behind them:
    one login to a bastion carries the sessions to all the hosts it leads to. Sessions are
    opened on these connections here too (`session`, with one fresh try on a connection
    found closed), and a finished one's exit read (`finish`, `status`)."""

    def __init__(self) -> None:
        self._connector = _Connector()
        self._pool: dict[str, tuple[Host, asyncssh.SSHClientConnection]] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._jumps: dict[_Route, asyncssh.SSHClientConnection] = {}
        self._jump_locks: dict[_Route, asyncio.Lock] = {}
        self._warming = _Background()  # connections `warm` opens
        self._uses = _Uses()  # each host's sessions open now, and its last use
        self._closing: set[asyncio.Future[None]] = set()  # dropped connections' ends
        self._closed = False

    @property
    def opened(self) -> int:
        """How many SSH connections were made: pooling shows here."""
        return self._connector.opened

    async def close(self) -> None:
        """Close every connection, the hosts' first, then the jump hosts', and return once
        each is closed, those dropped before included: a caller whose event loop ends
        next leaves no socket open behind it. A closed pool opens no more."""
        self._closed = True
        await self._warming.cancel()
        pool, self._pool = self._pool, {}
        jumps, self._jumps = self._jumps, {}
        conns = [conn for _, conn in pool.values()]
        conns += [jumps[route] for route in sorted(jumps, key=len, reverse=True)]
        for conn in conns:
            conn.close()
        ends: list[asyncio.Future[None]] = [asyncio.ensure_future(c.wait_closed()) for c in conns]
        ends += self._closing
        if ends:
            await asyncio.wait(ends, timeout=5.0)

    def unreachable(self, host: Host, exc: BaseException) -> Unreachable:
        pooled = self._pool.get(host.name)
        if pooled is not None and pooled[1].is_closed():
            self.drop(host.name, pooled[1])
        known_hosts = _known_hosts_path(host)
        reason = _reason(exc, host, host.connect_timeout, known_hosts, _where(host))
        cause = _reason(exc, host, host.connect_timeout, known_hosts, SSHD)
        return Unreachable(host.name, reason, cause)

    def disconnect(self, name: str) -> None:
        pooled = self._pool.get(name)
        if pooled is not None:
            self.drop(name, pooled[1])

    def release(self, keep: Set[str], idle: float) -> int:
        """See `Executor.release`."""
        for name, (_, conn) in list(self._pool.items()):
            if name not in keep and self._uses.idle(name, idle):
                self.drop(name, conn)
        return sum(1 for _, conn in self._pool.values() if not conn.is_closed())

    def ended(self, host: Host, process: object) -> None:
        """A session `session` opened is closed: its host's connection ran something now."""
        self._uses.ended(host.name, process)

    def drop(self, name: str, conn: asyncssh.SSHClientConnection) -> None:
        """Take the connection out of the pool and close it (`close` waits for the end)."""
        pooled = self._pool.get(name)
        if pooled is not None and pooled[1] is conn:
            del self._pool[name]
        conn.close()
        end = asyncio.ensure_future(conn.wait_closed())
        self._closing.add(end)
        end.add_done_callback(self._closing.discard)

    async def connection(self, host: Host) -> tuple[asyncssh.SSHClientConnection, bool]:
        """The pooled connection to host (reused: True), or a new one (False)."""
        if self._closed:
            raise Unreachable(host.name, "the executor is closed")
        lock = self._connect_locks.setdefault(host.name, asyncio.Lock())
        async with lock:
            self._uses.used(host.name)
            pooled = self._pool.get(host.name)
            if pooled is not None:
                known, conn = pooled
                if known == host and not conn.is_closed():
                    return conn, True
                self.drop(host.name, conn)  # closed, or the inventory changed the host
            tunnel = None
            for hop in range(1, len(host.proxy_jump) + 1):
                tunnel = await self._jump(host, host.proxy_jump[:hop], tunnel)
            conn = await self._connector.connect(host, host, _where(host), tunnel)
            if self._closed:  # opened by a task that outlived `close`: nobody would close it
                self.drop(host.name, conn)
                raise Unreachable(host.name, "the executor is closed")
            self._pool[host.name] = (host, conn)
            return conn, False

    @contextlib.contextmanager
    def running(self, host: Host, process: asyncssh.SSHClientProcess[Any]) -> Iterator[None]:
        """Around a session's use: a connection error is the host's `Unreachable`, and the
        process is closed after, however it ended."""
        try:
            yield
        except (asyncssh.Error, OSError) as exc:
            raise self.unreachable(host, exc) from None
        finally:
            process.close()
            self.ended(host, process)

    def warm(self, hosts: Sequence[Host], limit: asyncio.Semaphore) -> int:
        """Start opening, in the background, the connection to each host that has none
        open nor being opened; how many of `hosts` have one open now."""
        for host in hosts:
            if not self.open_to(host):
                self._warming.start(host.name, functools.partial(self.reach, host, limit))
        return sum(1 for h in hosts if self.open_to(h))

    def open_to(self, host: Host) -> bool:
        pooled = self._pool.get(host.name)
        return pooled is not None and pooled[0] == host and not pooled[1].is_closed()

    async def reach(self, host: Host, limit: asyncio.Semaphore) -> bool:
        """Whether the host's connection is open (opened now, within `limit`, if need be)."""
        async with limit:
            try:
                await self.connection(host)
            except Unreachable:
                return False
            return True

    async def session(
        self, host: Host, command: str, **options: Any
    ) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientProcess[Any]]:
        """A session running `command` on the pooled connection; a stale pooled connection
        (closed under us) gets one fresh try. Its caller says when it is closed (`ended`):
        till then its connection is never released."""
        conn, reused = await self.connection(host)
        try:
            return conn, self._uses.opened(host.name, await conn.create_process(command, **options))
        except (asyncssh.Error, OSError) as exc:
            if not (reused and conn.is_closed()):
                raise self.unreachable(host, exc) from None
        self.drop(host.name, conn)
        conn, _ = await self.connection(host)
        try:
            return conn, self._uses.opened(host.name, await conn.create_process(command, **options))
        except (asyncssh.Error, OSError) as exc:
            raise self.unreachable(host, exc) from None

    async def finish(
        self,
        host: Host,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[Any],
        argv0: str,
        limit: float | None,
        shown: float | None = None,
    ) -> Result:
        """Close the command's stdin, wait (up to `limit`) for its output and exit; a
        timeout names `shown` (the command's whole bound), else `limit`."""
        try:
            process.stdin.write_eof()
            stdout, stderr = await asyncio.wait_for(process.communicate(), limit)
        except TimeoutError:
            bound = limit if shown is None else shown
            raise CommandTimeout(host.name, argv0, bound, opened=True) from None
        except (asyncssh.Error, OSError) as exc:
            raise self.unreachable(host, exc) from None
        return Result(self.status(host, conn, process), _text(stdout), _text(stderr))

    def status(
        self,
        host: Host,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[Any],
    ) -> int:
        status = process.returncode
        if status is None:  # the channel closed without an exit status: connection lost
            self.drop(host.name, conn)
            where = f"{host.address}:{host.port}"
            raise Unreachable(
                host.name, f"connection to {where} lost", f"connection to {SSHD} lost"
            )
        return 128 - status if status < 0 else status  # killed by a signal, as a shell says

    async def _jump(
        self, host: Host, route: _Route, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        """The pooled connection to the last hop of `route` (opened through `tunnel`)."""
        lock = self._jump_locks.setdefault(route, asyncio.Lock())
        async with lock:
            conn = self._jumps.get(route)
            if conn is not None and not conn.is_closed():
                return conn
            jump = route[-1]
            conn = await self._connector.connect(host, jump, _jump_where(jump), tunnel)
            self._jumps[route] = conn
            return conn


async def _stream_in(process: Any, source: AsyncIterable[bytes], limit: float) -> None:
    """`source` to the process's stdin, a chunk sent when the last one is taken."""
    async for chunk in source:
        process.stdin.write(chunk)
        await asyncio.wait_for(process.stdin.drain(), limit)


async def _stream_out(process: Any, sink: Sink, limit: float) -> bytes:
    """The process's stdout to `sink` chunk by chunk until it ends; its stderr, whole."""
    errors = asyncio.ensure_future(process.stderr.read())
    try:
        process.stdin.write_eof()
        while chunk := await asyncio.wait_for(process.stdout.read(POUR_CHUNK), limit):
            await sink(chunk)
        stderr: bytes = await asyncio.wait_for(errors, limit)
        await asyncio.wait_for(process.wait_closed(), limit)
        return stderr
    finally:
        errors.cancel()


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
    ) -> None:
        self._limit = asyncio.Semaphore(max_concurrency)
        self._max_sessions_per_host = max_sessions_per_host
        self._host_limits: dict[str, asyncio.Semaphore] = {}
        self._pool = _Pool()

    @property
    def connections_opened(self) -> int:
        """How many SSH connections were made: pooling shows here."""
        return self._pool.opened

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
        return await self._command(host, _command(host, argv), _argv0(argv), input, timeout)

    async def run_batch(
        self,
        host: Host,
        steps: Sequence[Step],
        *,
        timeout: float | None = None,
        answer_timeout: float | None = None,
    ) -> list[Result | None]:
        """Run the steps in order in one session (one round trip, one remote shell): each
        gets its own Result, None for a skipped step (see `Step`). The timeout bounds the
        whole batch, or, with `answer_timeout`, opening the session only, the batch's
        answer then having `answer_timeout` of its own (a probe: a host whose sshd answers
        is given longer for its docker); a timeout is a CommandTimeout naming the first
        step's command (`opened` when the session had opened)."""
        if not steps or not all(s.argv for s in steps):
            raise ValueError("empty batch or argv")
        marker = f"@@minidock-{secrets.token_hex(8)}"
        script = batch_script(steps, marker, sudo=host.sudo)
        log.debug("%s: batch of %d: %s", host.name, len(steps), _argv0(steps[0].argv))
        argv0 = _argv0(steps[0].argv)
        ran = await self._command(host, script, argv0, None, timeout, answer_timeout)
        found = parse_batch(ran.stdout, ran.stderr, marker, len(steps))
        if found is None:  # the remote shell did not run the script: its own failure
            return [ran, *([None] * (len(steps) - 1))]
        return found

    async def _command(
        self,
        host: Host,
        command: str,
        argv0: str,
        input: str | None,
        timeout: float | None,
        answer: float | None = None,
    ) -> Result:
        """Run a command line; see `run` (and `run_batch` for `answer`)."""
        limit = host.command_timeout if timeout is None else timeout
        async with self._host_limit(host), self._limit:
            await self._pool.connection(host)  # bounded by host.connect_timeout: Unreachable
            loop = asyncio.get_running_loop()
            start = loop.time()
            opening = self._pool.session(host, command, encoding="utf-8", errors="replace")
            try:
                conn, process = await asyncio.wait_for(opening, limit)
            except TimeoutError:
                self.disconnect(host)  # no session opened: the connection is dead
                raise CommandTimeout(host.name, argv0, limit) from None
            left = None if limit is None else max(0.0, limit - (loop.time() - start))
            try:
                if input:
                    process.stdin.write(input)
                if answer is not None:
                    return await self._pool.finish(host, conn, process, argv0, answer)
                return await self._pool.finish(host, conn, process, argv0, left, limit)
            finally:
                process.close()
                self._pool.ended(host, process)

    async def feed(
        self,
        host: Host,
        argv: Sequence[str],
        source: AsyncIterable[bytes],
        *,
        timeout: float | None = None,
    ) -> Result:
        """Run argv with `source` streamed to its stdin (flow-controlled: a chunk is sent
        when the last one is taken); `timeout` bounds each chunk and the final wait."""
        command = _command(host, argv)
        limit = host.command_timeout if timeout is None else timeout
        async with self._host_limit(host), self._limit:
            conn, process = await self._pool.session(host, command, encoding=None)
            with self._pool.running(host, process):
                try:
                    await _stream_in(process, source, limit)
                    return await self._pool.finish(host, conn, process, _argv0(argv), limit)
                except TimeoutError:
                    raise CommandTimeout(host.name, _argv0(argv), limit) from None

    async def pour(
        self,
        host: Host,
        argv: Sequence[str],
        sink: Sink,
        *,
        timeout: float | None = None,
    ) -> Result:
        """Run argv with its stdout handed to `sink` chunk by chunk (flow-controlled: the
        channel's window stays shut while `sink` works); see `Executor.pour`."""
        command = _command(host, argv)
        limit = host.command_timeout if timeout is None else timeout
        async with self._host_limit(host), self._limit:
            conn, process = await self._pool.session(host, command, encoding=None)
            with self._pool.running(host, process):
                try:
                    stderr = await _stream_out(process, sink, limit)
                except TimeoutError:
                    raise CommandTimeout(host.name, _argv0(argv), limit, opened=True) from None
            return Result(self._pool.status(host, conn, process), "", _text(stderr))

    async def follow(self, host: Host, argv: Sequence[str], on_line: OnLine) -> int:
        """Run argv with no time limit, each output line to `on_line` as it comes. A
        long-lived session: it counts against the host's sessions, not the global bound."""
        async with self._host_limit(host):
            conn, process = await self._pool.session(
                host, _command(host, argv), encoding="utf-8", errors="replace"
            )
            with self._pool.running(host, process):
                process.stdin.write_eof()
                await asyncio.gather(
                    _lines(process.stdout, "stdout", on_line),
                    _lines(process.stderr, "stderr", on_line),
                )
                await process.wait_closed()
            return self._pool.status(host, conn, process)

    async def attach(self, host: Host, argv: Sequence[str], terminal: Terminal) -> int:
        """Run argv joined to a local terminal: with `terminal.tty`, on a PTY the size of
        the local window (following its changes), the local side in raw mode meanwhile."""
        pty: dict[str, Any] = {}
        if terminal.tty:
            pty = {"term_type": terminal_type(), "term_size": terminal.size()}
        async with self._host_limit(host):
            conn, process = await self._pool.session(
                host, _command(host, argv), encoding=None, **pty
            )
            with self._pool.running(host, process):
                await pump(process, terminal)
            return self._pool.status(host, conn, process)

    def _host_limit(self, host: Host) -> asyncio.Semaphore:
        return self._host_limits.setdefault(
            host.name, asyncio.Semaphore(self._max_sessions_per_host)
        )

    def disconnect(self, host: Host) -> None:
        """Drop the pooled connection to host, if any: the next call connects afresh (with
        `host.connect_timeout`). Commands still running on it fail as Unreachable."""
        self._pool.disconnect(host.name)

    async def warm(self, hosts: Sequence[Host]) -> int:
        """See `Executor.warm`: the connections a pass would open, within the same overall
        limit; kept alive by their keepalives (a dead one is reopened by a later call)."""
        return self._pool.warm(hosts, self._limit)

    def release(self, keep: Set[str], idle: float) -> int:
        """See `Executor.release`: a connection with a session open (an event stream's) is
        kept, whatever its host."""
        return self._pool.release(keep, idle)

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._pool.close()


def quoted(argv: Sequence[str]) -> str:
    """The one place an argv becomes a remote command line (a batch's steps too)."""
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(argv)


SUDO = ("sudo", "-n")  # never a password prompt: a sudo that wants one fails the command
# a `sh -c` script's docker, through sudo (a function: the script's own `docker` words)
_SUDO_DOCKER = 'docker() { sudo -n docker "$@"; }\n'


def as_user(argv: Sequence[str], *, sudo: bool) -> list[str]:
    """The argv a host's user runs: itself, or with `sudo` (the inventory's `sudo = true`)
    every docker in it through `sudo -n`: a docker argv is prefixed; a `sh -c SCRIPT NAME
    ARGS...` gets a `docker` function first in its script, and ARGS that are themselves a
    docker argv (run by `exec "$@"`) are prefixed too. Other commands (`cat /proc/net/tcp`)
    run as the user."""
    argv = list(argv)
    if not sudo:
        return argv
    if argv[:1] == ["docker"]:
        return [*SUDO, *argv]
    if argv[:2] == ["sh", "-c"] and len(argv) > 2:
        rest = argv[3:]
        if rest[1:2] == ["docker"]:
            rest = [rest[0], *SUDO, *rest[1:]]
        return ["sh", "-c", _SUDO_DOCKER + argv[2], *rest]
    return argv


def _command(host: Host, argv: Sequence[str]) -> str:
    command = quoted(as_user(argv, sudo=host.sudo))
    log.debug("%s: %s", host.name, command)
    return command


def _argv0(argv: Sequence[str]) -> str:
    """How a command is named in errors: its first two words ("docker ps"), no arguments."""
    return " ".join(argv[:2])


def _text(output: object) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return str(output or "")


async def _lines(
    stream: asyncssh.SSHReader[str], name: Literal["stdout", "stderr"], on_line: OnLine
) -> None:
    while line := await stream.readline():  # "" only at the end of the stream
        on_line(OutputLine(name, line.rstrip("\r\n")))


def _known_hosts_path(end: _Endpoint) -> Path:
    return Path(os.path.expanduser(end.known_hosts or DEFAULT_KNOWN_HOSTS))


def _identity_path(host: Host) -> str | None:
    return os.path.expanduser(host.identity_file) if host.identity_file else None


def _endpoint_options(end: _Endpoint, identity: str | None, timeout: float) -> dict[str, Any]:
    """asyncssh.connect keyword arguments for a host or a jump host: everything resolved
    already (minidock.sshconfig), so asyncssh reads no config file itself.

    Keys, as OpenSSH offers them: `identity` (the inventory's key) alone, without the
    agent; else the agent's keys (all, or with IdentitiesOnly those of the files that have
    a .pub beside them) and the config's IdentityFile keys that exist (a missing one is
    skipped, as OpenSSH skips it), or the default keys (~/.ssh/id_*) when none does.
    """
    options: dict[str, Any] = {
        "port": end.port,
        "username": end.user,
        "known_hosts": str(_known_hosts_path(end)),
        "config": [],
        "connect_timeout": timeout,
        "login_timeout": timeout,
        "encryption_algs": list(ENCRYPTION),
    }
    if identity:
        return options | {"client_keys": [identity], "agent_path": None}
    keys = [key for key in end.identity_files if os.path.isfile(key)]
    agent: str | tuple[()] | None = ()  # (): $SSH_AUTH_SOCK, as asyncssh reads it
    if end.identity_agent == "none":
        agent = None
    elif end.identity_agent is not None:
        agent = end.identity_agent
    options |= {"client_keys": keys or (), "agent_path": agent}
    if end.identities_only:
        public = [f"{key}.pub" for key in keys if os.path.isfile(f"{key}.pub")]
        options |= {"agent_identities": public} if public else {"agent_path": None}
    return options


def connect_options(host: Host) -> dict[str, Any]:
    """The `asyncssh.connect` keyword arguments (all but the address) with which the
    executor reaches a host directly: its port, user, keys and agent, known_hosts and
    timeouts, as resolved from the inventory and the SSH config when it was loaded
    (asyncssh reads no config file itself). Jump hosts are not in them: the executor opens
    those itself. Tools that need a raw asyncssh session to a host (the lab's tests) start
    from these."""
    return _endpoint_options(host, _identity_path(host), host.connect_timeout)
