"""SSHExecutor over real SSH: against the lab fleet, and against a throwaway asyncssh server.

The lab tests use the `lab_inventory` fixture (the lab's loaded Inventory). The local
tests start an in-process asyncssh server on a loopback port that runs each command with
/bin/sh, so the client side (pooling, timeouts, host keys, quoting, stdin) is exercised
over a real SSH connection without sshd.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import asyncssh
import pytest

from minidock.model import Host, Inventory
from minidock.ssh import CommandTimeout, Result, SSHExecutor, Step, Unreachable, known_hosts_line

pytestmark = pytest.mark.integration


def go(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def wrong_key_file(path: Path, host: Host) -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_text(known_hosts_line(host.address, host.port, key))
    return str(path)


# -- the lab fleet ------------------------------------------------------------------------------
def test_lab_docker_ps_on_every_host(lab_inventory: Inventory) -> None:
    async def main() -> None:
        executor = SSHExecutor()
        try:
            results = await asyncio.gather(
                *(executor.run(h, ["docker", "ps", "-q"]) for h in lab_inventory.hosts)
            )
        finally:
            await executor.close()
        assert [r.exit_status for r in results] == [0] * len(lab_inventory.hosts)

    go(main())


def test_lab_warm_connects_each_host_once_and_the_commands_after_it_open_none(
    lab_inventory: Inventory,
) -> None:
    """A standby controller's warm connections (`Executor.warm`): opened in the background
    (the call returns at once), one to each host it can reach, nothing run on them;
    warming again opens none; the commands after it (its first pass once it takes over)
    reuse them. A host that refuses is not counted, and is tried again by each call."""
    hosts = list(lab_inventory.hosts)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens here once the socket is closed
    refusing = replace(hosts[0], name="refusing", port=closed, connect_timeout=2.0)

    async def main() -> None:
        executor = SSHExecutor()
        try:
            assert await executor.warm([*hosts, refusing]) == 0  # opened in the background
            deadline = time.monotonic() + 30  # generous: connects, not a timing claim
            while await executor.warm([*hosts, refusing]) < len(hosts):
                assert time.monotonic() < deadline, "the warm connections never opened"
                await asyncio.sleep(0.05)
            assert await executor.warm([*hosts, refusing]) == len(hosts)  # never the refusing
            assert executor.connections_opened == len(hosts)
            results = await asyncio.gather(
                *(executor.run(h, ["docker", "ps", "-q"]) for h in hosts)
            )
            assert [r.exit_status for r in results] == [0] * len(hosts)
            assert executor.connections_opened == len(hosts)
        finally:
            await executor.close()

    go(main())


def test_lab_release_closes_only_the_idle_connections_outside_the_kept_hosts(
    lab_inventory: Inventory,
) -> None:
    """Connections by share over the lab's sshd: of three hosts connected, the kept one
    stays, the one running a command (a `sleep 2` on its host) stays while it runs,
    the idle one closes and its next command connects afresh."""
    kept, idle, busy = lab_inventory.hosts[:3]

    async def main() -> None:
        executor = SSHExecutor()
        try:
            for host in (kept, idle):
                assert (await executor.run(host, ["docker", "ps", "-q"])).exit_status == 0
            marker = f"/tmp/minidock-busy-{os.getpid()}"
            script = f"touch {marker}; sleep 2; rm -f {marker}"
            running = asyncio.create_task(executor.run(busy, ["sh", "-c", script]))
            looker = SSHExecutor()  # sees the command running: its session is open
            try:
                while (await looker.run(busy, ["test", "-e", marker])).exit_status != 0:
                    await asyncio.sleep(0.05)
            finally:
                await looker.close()
            assert executor.release({kept.name}, 0.0) == 2
            assert (await running).exit_status == 0
            assert executor.release({kept.name}, 0.0) == 1
            assert (await executor.run(idle, ["true"])).exit_status == 0
            assert executor.connections_opened == 4
        finally:
            await executor.close()

    go(main())


def test_lab_connection_is_pooled(lab_inventory: Inventory) -> None:
    host = lab_inventory.hosts[0]

    async def main() -> None:
        executor = SSHExecutor()
        try:
            await executor.run(host, ["docker", "ps", "-q"])
            await executor.run(host, ["docker", "ps", "-q"])
            assert executor.connections_opened == 1
        finally:
            await executor.close()

    go(main())


def test_lab_unknown_host_key_names_the_host(lab_inventory: Inventory, tmp_path: Path) -> None:
    host = lab_inventory.hosts[0]
    host = replace(host, known_hosts=wrong_key_file(tmp_path / "kh", host))

    async def main() -> None:
        executor = SSHExecutor()
        try:
            with pytest.raises(Unreachable, match=host.name) as info:
                await executor.run(host, ["true"])
            assert "host key" in info.value.reason
        finally:
            await executor.close()

    go(main())


def test_lab_accept_new_writes_the_key(lab_inventory: Inventory, tmp_path: Path) -> None:
    kh = tmp_path / "ssh" / "known_hosts"
    first = replace(lab_inventory.hosts[0], known_hosts=str(kh), host_key_policy="accept-new")

    async def main() -> None:
        executor = SSHExecutor()
        try:
            assert (await executor.run(first, ["true"])).exit_status == 0
        finally:
            await executor.close()
        strict = replace(first, host_key_policy="strict")
        executor = SSHExecutor()
        try:
            assert (await executor.run(strict, ["true"])).exit_status == 0
        finally:
            await executor.close()

    go(main())
    pattern = first.address if first.port == 22 else f"[{first.address}]:{first.port}"
    assert kh.read_text().startswith(pattern + " ")


def test_lab_command_timeout(lab_inventory: Inventory) -> None:
    host = lab_inventory.hosts[0]

    async def main() -> None:
        executor = SSHExecutor()
        try:
            with pytest.raises(CommandTimeout, match=host.name):
                await executor.run(host, ["sleep", "5"], timeout=0.5)
            assert (await executor.run(host, ["true"])).exit_status == 0  # still usable
        finally:
            await executor.close()

    go(main())


def test_lab_a_probe_batch_is_one_session_with_a_result_per_step(lab_inventory: Inventory) -> None:
    host = lab_inventory.hosts[0]

    async def main() -> None:
        executor = SSHExecutor()
        try:
            steps = [
                Step(("docker", "ps", "-aq", "--no-trunc")),
                Step(("sh", "-c", "echo no >&2; exit 7")),
                Step(("docker", "inspect", "--format", "{{.Id}}"), ids_from=0),
            ]
            ps, failed, inspected = await executor.run_batch(host, steps)
            listed = await executor.run(host, ["docker", "ps", "-aq", "--no-trunc"])
        finally:
            await executor.close()
        assert executor.connections_opened == 1
        assert ps == listed  # the same command, the same result, inside the batch
        assert failed == Result(7, "", "no\n")
        ids = ps.stdout.split() if ps else []
        assert (inspected.stdout.split() if inspected else []) == ids  # None when no ids

    go(main())


# -- a throwaway local SSH server ---------------------------------------------------------------
@dataclass
class LocalServer:
    """An asyncssh server on 127.0.0.1 that runs each command with /bin/sh -c."""

    tmp: Path
    host_key: asyncssh.SSHKey = field(default_factory=lambda: _key())
    client_key: asyncssh.SSHKey = field(default_factory=lambda: _key())
    port: int = 0
    connections: list[asyncssh.SSHServerConnection] = field(default_factory=list)
    children: set[asyncio.subprocess.Process] = field(default_factory=set)

    def host(self, **changes: object) -> Host:
        identity = self.tmp / "id_ed25519"
        if not identity.exists():
            self.client_key.write_private_key(str(identity))
        known = self.tmp / "known_hosts"
        if not known.exists():
            known.write_text(known_hosts_line("127.0.0.1", self.port, self.host_key))
        base = Host(
            name="local1",
            address="127.0.0.1",
            port=self.port,
            user="deploy",
            identity_file=str(identity),
            known_hosts=str(known),
            connect_timeout=2.0,
            command_timeout=5.0,
        )
        return replace(base, **changes)  # type: ignore[arg-type]

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        data = await process.stdin.read()
        child = await asyncio.create_subprocess_shell(
            str(process.command),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so teardown can kill the whole command
        )
        self.children.add(child)
        try:
            out, err = await child.communicate(data)
            process.stdout.write(out)
            process.stderr.write(err)
            process.exit(child.returncode or 0)
        except (asyncssh.Error, OSError):  # the client went away
            process.close()
        finally:
            self.children.discard(child)


def _key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@contextlib.asynccontextmanager
async def local_server(tmp: Path) -> AsyncIterator[LocalServer]:
    box = LocalServer(tmp)
    allowed = asyncssh.import_authorized_keys(box.client_key.export_public_key().decode())

    class Server(asyncssh.SSHServer):
        def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
            box.connections.append(conn)

    server = await asyncssh.create_server(
        Server,
        "127.0.0.1",
        0,
        server_host_keys=[box.host_key],
        authorized_client_keys=allowed,
        process_factory=box.handle,
        encoding=None,
    )
    box.port = server.sockets[0].getsockname()[1]
    try:
        yield box
    finally:
        for child in list(box.children):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
        server.close()
        for conn in box.connections:
            conn.close()
        await server.wait_closed()


def with_server(tmp: Path, body: Callable[[LocalServer, SSHExecutor], Awaitable[None]]) -> None:
    async def main() -> None:
        async with local_server(tmp) as box:
            executor = SSHExecutor()
            try:
                await body(box, executor)
            finally:
                await executor.close()

    go(main())


def test_local_argv_is_quoted_once_and_stdin_carries_the_input(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        tricky = ["it's", "$(id)", "a b", '"q"', "`x`", "; rm -rf /", "*", ""]
        result = await ex.run(box.host(), ["printf", r"[%s]\n", *tricky])
        assert result.exit_status == 0
        assert result.stdout.splitlines() == [f"[{t}]" for t in tricky]
        echoed = await ex.run(box.host(), ["cat"], input="TOKEN=s3cr3t $(id)\n")
        assert echoed.stdout == "TOKEN=s3cr3t $(id)\n"
        failed = await ex.run(box.host(), ["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.exit_status, failed.stderr) == (3, "oops\n")

    with_server(tmp_path, body)


def test_local_connection_is_pooled_and_reopened_after_a_break(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        host = box.host()
        await asyncio.gather(*(ex.run(host, ["true"]) for _ in range(5)))
        await ex.run(host, ["true"])
        assert ex.connections_opened == 1
        for conn in box.connections:  # the server drops the connection
            conn.close()
        await asyncio.sleep(0.2)
        assert (await ex.run(host, ["echo", "back"])).stdout == "back\n"
        assert ex.connections_opened == 2

    with_server(tmp_path, body)


def test_local_command_timeout(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        with pytest.raises(CommandTimeout, match=r"local1: sleep 3 timed out after 0.3s"):
            await ex.run(box.host(), ["sleep", "3"], timeout=0.3)
        assert (await ex.run(box.host(), ["true"])).exit_status == 0
        assert ex.connections_opened == 1  # a timeout does not cost the connection

    with_server(tmp_path, body)


def test_local_unknown_host_key_is_an_error_naming_the_host(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        host = box.host()
        host = replace(host, known_hosts=wrong_key_file(tmp_path / "wrong", host))
        with pytest.raises(Unreachable, match=r"^local1: host key of 127\.0\.0\.1:\d+ not ver"):
            await ex.run(host, ["true"])
        # accept-new never accepts a changed key either
        with pytest.raises(Unreachable, match="host key"):
            await ex.run(replace(host, host_key_policy="accept-new"), ["true"])
        # and a host missing from known_hosts is refused in strict mode
        empty = tmp_path / "empty"
        empty.write_text("")
        with pytest.raises(Unreachable, match="host key"):
            await ex.run(replace(host, known_hosts=str(empty)), ["true"])
        missing = replace(host, known_hosts=str(tmp_path / "nope"))
        with pytest.raises(Unreachable, match="not found"):
            await ex.run(missing, ["true"])

    with_server(tmp_path, body)


def test_local_accept_new_writes_the_key_once(tmp_path: Path) -> None:
    kh = tmp_path / "new" / "known_hosts"

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        host = box.host(known_hosts=str(kh), host_key_policy="accept-new")
        assert (await ex.run(host, ["true"])).exit_status == 0
        assert kh.read_text() == known_hosts_line("127.0.0.1", box.port, box.host_key)
        strict = replace(host, host_key_policy="strict")
        fresh = SSHExecutor()
        try:
            assert (await fresh.run(strict, ["true"])).exit_status == 0
        finally:
            await fresh.close()
        assert kh.read_text().count("\n") == 1

    with_server(tmp_path, body)


def sockets_to(port: int) -> int:
    """How many of this process's TCP sockets are connected to port `port` (IPv4)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed since the listing
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(1 for r in rows if int(r[2].split(":")[1], 16) == port and r[9] in inodes)


def test_close_returns_with_every_connection_closed_a_dropped_one_too(tmp_path: Path) -> None:
    """A connection dropped (a hung host's) and the executor closed at once: when `close`
    returns, no socket to the host is left, though the event loop may end next (the
    socket of a transport never closed is an unclosed-resource error at collection, in
    whatever test runs then); and a closed executor opens no new connection."""

    async def main() -> None:
        async with local_server(tmp_path) as box:
            executor = SSHExecutor()
            assert (await executor.run(box.host(), ["true"])).exit_status == 0
            assert sockets_to(box.port) == 1
            executor.disconnect(box.host())
            await executor.close()
            assert sockets_to(box.port) == 0
            with pytest.raises(Unreachable, match="closed"):
                await executor.run(box.host(), ["true"])
            assert executor.connections_opened == 1

    go(main())


def test_local_auth_failure(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        other = tmp_path / "other_key"
        _key().write_private_key(str(other))
        with pytest.raises(Unreachable, match="local1: authentication failed for user deploy"):
            await ex.run(box.host(identity_file=str(other)), ["true"])

    with_server(tmp_path, body)


def test_local_refused_and_connect_timeout(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            free_port = closed.getsockname()[1]
        with pytest.raises(Unreachable, match=r"local1: connection refused by 127\.0\.0\.1:"):
            await ex.run(box.host(port=free_port), ["true"])
        # A listener that never speaks SSH: the connect timeout applies.
        writers: list[asyncio.StreamWriter] = []
        silent = await asyncio.start_server(lambda r, w: writers.append(w), "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        try:
            with pytest.raises(Unreachable, match=r"timed out after 0\.3s"):
                await ex.run(box.host(port=port, connect_timeout=0.3), ["true"])
        finally:
            for w in writers:
                w.close()
            silent.close()
            await silent.wait_closed()

    with_server(tmp_path, body)


# -- host keys: the error names the presented key -----------------------------------------------
def openssh_fingerprint(key: asyncssh.SSHKey, tmp: Path) -> str:
    """The key's fingerprint as OpenSSH's own `ssh-keygen -l` prints it."""
    pub = tmp / "presented.pub"
    key.write_public_key(str(pub))
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[1]


def test_local_changed_key_names_host_fingerprint_and_file_and_runs_nothing(
    tmp_path: Path,
) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        kh = wrong_key_file(tmp_path / "changed", box.host())
        fingerprint = openssh_fingerprint(box.host_key, tmp_path)
        assert fingerprint.startswith("SHA256:")
        marker = tmp_path / "ran"
        for policy in ("strict", "accept-new"):  # accept-new never takes a changed key
            host = box.host(known_hosts=kh, host_key_policy=policy)
            with pytest.raises(Unreachable) as info:
                await ex.run(host, ["touch", str(marker)])
            assert str(info.value) == (
                f"local1: host key of 127.0.0.1:{box.port} not verifiable (changed): "
                f"presented ssh-ed25519 key {fingerprint} does not match {kh}"
            )
        assert not marker.exists()  # no command reached the host
        assert ex.connections_opened == 0

    with_server(tmp_path, body)


def test_local_unknown_key_under_strict_names_the_fingerprint(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        with pytest.raises(Unreachable) as info:
            await ex.run(box.host(known_hosts=str(empty)), ["true"])
        assert info.value.reason == (
            f"host key of 127.0.0.1:{box.port} not verifiable (unknown): presented "
            f"ssh-ed25519 key {openssh_fingerprint(box.host_key, tmp_path)} is not in {empty}"
        )

    with_server(tmp_path, body)


# -- a partition: a relay that stops relaying ---------------------------------------------------
@dataclass
class Relay:
    """A TCP relay to the local server that can be cut: while cut, both ends stay open and
    nothing gets through (like a firewall dropping packets), until it heals."""

    target: int
    cut: bool = False
    port: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self.writers += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            while self.cut:
                await asyncio.sleep(0.05)
            writer.write(data)
            await writer.drain()
        writer.close()


def with_relay(
    tmp: Path, body: Callable[[LocalServer, Relay, SSHExecutor], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with local_server(tmp) as box:
            relay = Relay(box.port)
            server = await relay.start()
            (tmp / "relay_known_hosts").write_text(
                known_hosts_line("127.0.0.1", relay.port, box.host_key)
            )
            executor = SSHExecutor()
            try:
                await body(box, relay, executor)
            finally:
                await executor.close()
                for w in relay.writers:
                    w.close()
                server.close()

    go(main())


def test_local_partition_times_out_fast_drops_the_connection_and_heals_at_once(
    tmp_path: Path,
) -> None:
    async def body(box: LocalServer, relay: Relay, ex: SSHExecutor) -> None:
        host = box.host(
            port=relay.port, known_hosts=str(tmp_path / "relay_known_hosts"), connect_timeout=0.5
        )
        assert (await ex.run(host, ["true"])).exit_status == 0  # pooled
        relay.cut = True
        start = time.monotonic()
        with pytest.raises(CommandTimeout, match=r"local1: docker ps timed out after 0\.4s"):
            await ex.run(host, ["docker", "ps"], timeout=0.4)
        assert time.monotonic() - start < 10  # the 0.4 s timeout, not keepalives' 45 s
        # the session never opened: the connection was dropped, so the next call connects
        # afresh and meets the connect timeout, not a dead pooled connection
        with pytest.raises(Unreachable, match=r"timed out after 0\.5s"):
            await ex.run(host, ["true"], timeout=0.4)
        relay.cut = False
        assert (await ex.run(host, ["echo", "back"], timeout=2)).stdout == "back\n"
        assert ex.connections_opened == 2

    with_relay(tmp_path, body)


def test_local_a_slow_command_keeps_the_connection_disconnect_drops_it(tmp_path: Path) -> None:
    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        host = box.host()
        with pytest.raises(CommandTimeout):
            await ex.run(host, ["sleep", "3"], timeout=0.3)  # the session had opened
        assert (await ex.run(host, ["true"])).exit_status == 0
        assert ex.connections_opened == 1
        ex.disconnect(host)
        ex.disconnect(host)  # nothing pooled any more: nothing to do
        assert (await ex.run(host, ["true"])).exit_status == 0
        assert ex.connections_opened == 2

    with_server(tmp_path, body)


def test_local_release_closes_idle_connections_outside_the_kept_hosts_never_a_busy_one(
    tmp_path: Path,
) -> None:
    """Connections by share (`Executor.release`): a connection to a host not kept, that
    ran nothing for the idle time, closes; a kept one stays, and so does one with a
    session open (a long command's, an event stream's); a released host's next command
    connects afresh."""

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        kept, idle, busy = (box.host(name=n) for n in ("kept", "idle", "busy"))
        for host in (kept, idle):
            assert (await ex.run(host, ["true"])).exit_status == 0
        running = asyncio.create_task(ex.run(busy, ["sleep", "2"]))
        while not box.children:  # the server runs it: its session is open
            await asyncio.sleep(0.02)
        assert ex.release({"kept"}, 3600.0) == 3  # none idle that long
        assert ex.release({"kept"}, 0.0) == 2  # the idle one closed; the busy one kept
        assert ex.connections_opened == 3
        assert (await ex.run(idle, ["true"])).exit_status == 0
        assert ex.connections_opened == 4  # its next command connected afresh
        assert (await running).exit_status == 0
        assert ex.release({"kept"}, 0.0) == 1  # nothing runs now: only the kept one stays
        assert (await ex.run(kept, ["true"])).exit_status == 0
        assert ex.connections_opened == 4

    with_server(tmp_path, body)


# -- streaming: stdin from a source, output line by line, a session joined to local fds -------
def test_local_feed_streams_stdin_in_chunks_with_flow_control(tmp_path: Path) -> None:
    chunk = os.urandom(256 * 1024)
    count = 24  # 6 MiB, far more than one SSH window

    async def source() -> AsyncIterator[bytes]:
        for _ in range(count):
            yield chunk

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        result = await ex.feed(box.host(), ["sh", "-c", "wc -c; echo done >&2"], source())
        assert (result.exit_status, result.stdout.strip(), result.stderr) == (
            0,
            str(len(chunk) * count),
            "done\n",
        )
        failed = await ex.feed(box.host(), ["sh", "-c", "cat >/dev/null; exit 4"], source())
        assert failed.exit_status == 4
        assert ex.connections_opened == 1

    with_server(tmp_path, body)


def test_local_feed_of_a_failing_source_closes_the_session(tmp_path: Path) -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"part"
        raise RuntimeError("docker save failed")

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        with pytest.raises(RuntimeError, match="docker save failed"):
            await ex.feed(box.host(), ["cat"], source())
        assert (await ex.run(box.host(), ["echo", "still"])).stdout == "still\n"

    with_server(tmp_path, body)


def test_local_pour_hands_stdout_to_the_sink_and_keeps_stderr_and_the_status(
    tmp_path: Path,
) -> None:
    from minidock.ssh import POUR_CHUNK

    got: list[bytes] = []
    size = 6 * 1024 * 1024  # far more than one SSH window

    async def sink(chunk: bytes) -> None:
        assert len(chunk) <= POUR_CHUNK
        got.append(chunk)

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        script = f"head -c {size} /dev/zero; echo done >&2; exit 3"
        result = await ex.pour(box.host(), ["sh", "-c", script], sink)
        assert (result.exit_status, result.stdout, result.stderr) == (3, "", "done\n")
        assert sum(map(len, got)) == size
        assert len(got) > 1
        assert (await ex.run(box.host(), ["echo", "still"])).stdout == "still\n"

    with_server(tmp_path, body)


def test_local_follow_hands_over_each_line_of_both_streams(tmp_path: Path) -> None:
    from minidock.ssh import OutputLine

    seen: list[OutputLine] = []

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        script = "printf 'a\\nb\\n'; echo oops >&2; printf 'no newline'; exit 3"
        status = await ex.follow(box.host(), ["sh", "-c", script], seen.append)
        assert status == 3

    with_server(tmp_path, body)
    assert [line for line in seen if line.stream == "stdout"] == [
        OutputLine("stdout", "a"),
        OutputLine("stdout", "b"),
        OutputLine("stdout", "no newline"),
    ]
    assert [line for line in seen if line.stream == "stderr"] == [OutputLine("stderr", "oops")]


def test_local_attach_joins_the_session_to_local_descriptors(tmp_path: Path) -> None:
    from minidock.ssh import Terminal

    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.write(stdin_w, b"typed line\n")
    os.close(stdin_w)

    async def body(box: LocalServer, ex: SSHExecutor) -> None:
        terminal = Terminal(stdin_r, out_w, err_w, interactive=True, tty=False)
        script = "cat; echo warn >&2; exit 5"
        assert await ex.attach(box.host(), ["sh", "-c", script], terminal) == 5

    with_server(tmp_path, body)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    assert os.read(out_r, 1000) == b"typed line\n"
    assert os.read(err_r, 1000) == b"warn\n"
