"""Test doubles for the executor seam (httpx MockTransport style): unit tests only."""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import json
import os
import posixpath
import tarfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minidock.act.push import LocalImage
from minidock.commands.facts import PS_FORMAT, version_argv
from minidock.model import Host, image_registry
from minidock.ssh import OnLine, OutputLine, Result, Sink, Terminal, Unreachable
from tests.behaviour import TICK, Clock, Life, act_of, advance

Handler = Callable[[Host, list[str], str | None], Result]
VERSIONS = Path(__file__).parent / "data" / "docker" / "version"
# what `docker version --format {{json .}}` prints on Debian 12's engine (recorded)
DOCKER_20_10 = (VERSIONS / "docker-20.10.24.json").read_text()
VERSION_ARGV = version_argv()


@dataclass(frozen=True)
class Call:
    host: str
    argv: list[str]
    input: str | None
    timeout: float | None


class FakeExecutor:
    """An Executor whose hosts are one function: handler(host, argv, input) -> Result.

    The handler may raise Unreachable or CommandTimeout like the real executor. Every call
    is recorded in `calls`; `max_in_flight` shows how many ran at once (each call yields to
    the event loop before answering, so concurrent callers really overlap). The probe's
    engine read (`docker version`) is answered with `engine` (Debian 12's engine, recorded)
    and neither recorded nor handed to the handler, unless `engine` is None: the tests of
    everything else see the probe they were written for.
    """

    def __init__(self, handler: Handler, *, engine: str | None = DOCKER_20_10) -> None:
        self.handler = handler
        self.engine = engine
        self.calls: list[Call] = []
        self.closed = False
        self.disconnected: list[str] = []  # hosts whose connection a caller dropped
        self.warmed: list[list[str]] = []  # the hosts of each `warm` call
        self.connected: set[str] = set()  # hosts it has run something on or warmed
        self.released: list[tuple[frozenset[str], float]] = []  # each `release` call
        self.in_flight = 0
        self.max_in_flight = 0
        self.pour_chunk = 1 << 20

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        if self.engine is not None and list(argv) == VERSION_ARGV:
            await asyncio.sleep(0)
            return ok(self.engine)
        self.calls.append(Call(host.name, list(argv), input, timeout))
        self.connected.add(host.name)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            return self.handler(host, list(argv), input)
        finally:
            self.in_flight -= 1

    def disconnect(self, host: Host) -> None:
        self.disconnected.append(host.name)

    async def warm(self, hosts: Sequence[Host]) -> int:
        """Recorded in `warmed`; every host counts as connected (nothing is run)."""
        self.warmed.append([h.name for h in hosts])
        self.connected.update(h.name for h in hosts)
        await asyncio.sleep(0)
        return len(hosts)

    def release(self, keep: Set[str], idle: float) -> int:
        """Recorded in `released`; the hosts outside `keep` are no longer `connected`
        (idle or not: a fake's connections run nothing between calls)."""
        self.released.append((frozenset(keep), idle))
        self.connected &= set(keep)
        return len(self.connected)

    async def feed(
        self,
        host: Host,
        argv: Sequence[str],
        source: AsyncIterable[bytes],
        *,
        timeout: float | None = None,
    ) -> Result:
        """The handler sees the streamed bytes as text (latin-1, so any bytes pass)."""
        data = b"".join([chunk async for chunk in source])
        return await self.run(host, argv, input=data.decode("latin-1"), timeout=timeout)

    async def pour(
        self,
        host: Host,
        argv: Sequence[str],
        sink: Sink,
        *,
        timeout: float | None = None,
    ) -> Result:
        """The handler's stdout (latin-1 text, so any bytes pass) to `sink` in chunks of
        `pour_chunk` bytes; the Result without its stdout."""
        result = await self.run(host, argv, timeout=timeout)
        data = result.stdout.encode("latin-1")
        for at in range(0, len(data), self.pour_chunk):
            await sink(data[at : at + self.pour_chunk])
        return Result(result.exit_status, "", result.stderr)

    async def follow(self, host: Host, argv: Sequence[str], on_line: OnLine) -> int:
        """The handler's whole output, line by line: stdout's lines, then stderr's."""
        result = await self.run(host, argv)
        for line in result.stdout.splitlines():
            on_line(OutputLine("stdout", line))
        for line in result.stderr.splitlines():
            on_line(OutputLine("stderr", line))
        return result.exit_status

    async def attach(self, host: Host, argv: Sequence[str], terminal: Terminal) -> int:
        """The handler's output written to the terminal's descriptors."""
        result = await self.run(host, argv)
        os.write(terminal.stdout, result.stdout.encode())
        os.write(terminal.stderr, result.stderr.encode())
        return result.exit_status

    async def close(self) -> None:
        self.closed = True

    def argvs(self, host: str | None = None) -> list[list[str]]:
        """The argvs run so far, on one host or all."""
        return [c.argv for c in self.calls if host is None or c.host == host]


def ok(stdout: str = "") -> Result:
    return Result(0, stdout, "")


def fail(stderr: str, exit_status: int = 1) -> Result:
    return Result(exit_status, "", stderr)


# -- a docker engine per host, for end-to-end tests of the CLI without SSH or Docker ----------
_RUN_OPTIONS = frozenset(
    {
        "--name",
        "--label",
        "--env-file",
        "-p",
        "--cpus",
        "--memory",
        "--health-cmd",
        "--health-interval",
        "--health-timeout",
        "--health-retries",
        "--health-start-period",
        "--restart",
        "--network",
        "--network-alias",
        "--user",
        "--workdir",
        "--entrypoint",
        "--stop-signal",
        "--stop-timeout",
        "--cap-add",
        "--cap-drop",
        "--ulimit",
        "--log-driver",
        "--log-opt",
        "--add-host",
        "--dns",
        "-v",  # a named volume (a pinned service's), as docker takes it; not kept
        "--volume",  # the same, long (the volume helper's, with :nocopy)
        "--mount",
    }
)
_RUN_SWITCHES = frozenset({"-d", "--init", "--read-only"})
_ZERO_TIME = "0001-01-01T00:00:00Z"


def _docker_time(at: float) -> str:
    """Epoch seconds in Docker's RFC 3339 form with nanoseconds ("...T11:42:05.325336108Z")."""
    whole = int(at)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((at - whole) * 1e9):09d}Z"
    )


class FakeDocker:
    """In-memory Docker engines, one per host, answering through a FakeExecutor.

    It understands the commands `minidock.commands` builds: `ps`, `inspect`, `run`, `stop`,
    `rm`, `logs`, `image inspect` and `pull`, and keeps each container as a `docker inspect`
    document (the shape of tests/data/docker/*.json, trimmed to the fields the parser reads).
    A new container runs at once, its health "starting" if it has a health check; from then
    on it acts as tests/behaviour.py's table says for its image, each time `advance` moves
    the engines' clock (the `Clock` the test shares with the controller, or one of its own
    starting now). Hosts in `down` raise Unreachable, and their containers stand still.
    `images` (None: every image the table lets be pulled) is what `image inspect` finds;
    anything else fails to pull.
    """

    def __init__(self, *, clock: Clock | None = None, images: Iterable[str] | None = None) -> None:
        self.engines: dict[str, dict[str, dict[str, Any]]] = {}
        # per host: a named volume's files (path under the mount -> text)
        self.volumes: dict[str, dict[str, dict[str, str]]] = {}
        self.down: set[str] = set()
        self.clock = clock if clock is not None else Clock(time.time())
        self.images = None if images is None else set(images)
        self._ids = itertools.count(1)
        self._started: dict[str, float] = {}  # container id -> when it started, by the clock
        # per host: network name -> its labels; each container's networks in `networks`
        self.nets: dict[str, dict[str, dict[str, str]]] = {}
        self.networks: dict[str, list[str]] = {}
        self.logins: list[tuple[str, str, str]] = []  # (host, registry, username)
        self.passwords: dict[tuple[str, str], str] = {}  # (registry, user) -> what login takes
        self.registry: set[str] = set()  # images a registry serves (pulled onto one host)
        self.logs: dict[str, str] = {}  # what `docker logs` prints, by service (else by image)
        self.host_images: dict[str, set[str]] = {}  # pulled or loaded onto one host
        # per host: host ports ("8080/tcp") a process outside Docker listens on, unseen by
        # the probe (taken after it looked): `docker run` publishing one fails as Docker's
        # userland proxy does
        self.held: dict[str, set[str]] = {}
        # per host: what `docker version --format {{json .}}` prints (else DOCKER_20_10)
        self.versions: dict[str, str] = {}

    def advance(self, dt: float = TICK) -> None:
        """Move the clock on; every container on a reachable host acts by the table."""
        now = self.clock.advance(dt)
        for host, engine in self.engines.items():
            if host in self.down:
                continue
            for cid, doc in engine.items():
                if cid in self._started:
                    was = _life(doc)
                    _show(doc, was, advance(was, _image(doc), self._started[cid], now), now)

    def executor(self) -> FakeExecutor:
        """Its executor; with `versions` set first, each host's engine read is its own."""
        return FakeExecutor(self.handler, engine=None if self.versions else DOCKER_20_10)

    # -- looking at the engines -----------------------------------------------------------
    def containers(self, host: str | None = None) -> list[dict[str, Any]]:
        """Inspect documents, on one host or all (in creation order per host)."""
        return [
            doc
            for name, engine in sorted(self.engines.items())
            if host is None or name == host
            for doc in engine.values()
        ]

    def names(self, host: str | None = None, status: str | None = None) -> list[str]:
        """Container names, on one host or all, optionally only those in one State.Status."""
        return sorted(
            doc["Name"].lstrip("/")
            for doc in self.containers(host)
            if status is None or doc["State"]["Status"] == status
        )

    def add(
        self,
        host: str,
        name: str,
        labels: dict[str, str] | None = None,
        image: str = "busybox:1",
        status: str = "running",
    ) -> str:
        """Put a container on a host directly (e.g. a foreign one MiniDock must not touch)."""
        return str(self._create(host, name, dict(labels or {}), image, {}, None, status)["Id"])

    # -- the handler ----------------------------------------------------------------------
    def handler(self, host: Host, argv: list[str], input: str | None) -> Result:
        if host.name in self.down:
            raise Unreachable(host.name, f"connection refused by {host.address}:{host.port}")
        engine = self.engines.setdefault(host.name, {})
        if argv[:1] != ["docker"] or len(argv) < 2:
            return fail(f"fake docker: not a docker command: {argv}", 127)
        verb, args = argv[1], argv[2:]
        if verb == "ps":
            return self._ps(engine, args)
        if verb == "inspect":
            return self._inspect(engine, args)
        if verb == "run":
            return self._run(host.name, args, env=input)
        if verb == "create":
            return self._run(host.name, args, start=False, env=input)
        if verb == "exec":
            return self._exec(engine, args)
        if verb == "load":
            return self._load(host.name, input or "")
        if verb == "start":
            return self._start(engine, args[-1])
        if verb == "cp" and args[-1] == "-":
            return self._copy_out(host.name, engine, args)
        if verb == "cp":
            return self._copy_in(host.name, engine, args, input or "")
        if verb == "volume":
            return self._volume(host.name, args)
        if verb == "network":
            return self._network(host.name, engine, args)
        if verb == "login":
            return self._login(host.name, args, input or "")
        if verb == "stop":
            return self._stop(engine, args[-1])
        if verb == "rm":
            return self._rm(engine, args)
        if verb == "logs":
            doc = self._find(engine, args[-1])
            if doc is None:
                return self._missing(args[-1])
            service = doc["Config"]["Labels"].get("minidock.service", "")
            return ok(self.logs.get(service, act_of(_image(doc)).log))
        if verb == "image" and args[:1] == ["inspect"]:
            image = args[-1]
            if self.present(host.name, image):
                return ok(f"{fake_image_id(image)}\n")
            return fail(f"Error: No such image: {image}")
        if verb == "pull":
            return self._pull(host.name, args[-1])
        if verb == "version":
            return ok(self.versions.get(host.name, DOCKER_20_10))
        return fail(f"fake docker: unknown command: {argv}", 125)

    def has(self, image: str) -> bool:
        """Whether a host finds (or can pull) the image."""
        return act_of(image).pullable and (self.images is None or image in self.images)

    def present(self, host: str, image: str) -> bool:
        """Whether this host has the image: every host's, or pulled or loaded here."""
        return self.has(image) or image in self.host_images.get(host, set())

    def _pull(self, host: str, image: str) -> Result:
        """A pull: from the table's images, or from `registry` (logged in where
        `passwords` names the image's registry)."""
        registry = image_registry(image)
        guarded = any(r == registry for r, _ in self.passwords)
        if guarded and not any(h == host and r == registry for h, r, _ in self.logins):
            return fail(f"Error response from daemon: Head https://{registry}/v2/: no basic auth")
        if self.has(image):
            return ok(f"pulled {image}\n")
        if image in self.registry:
            self.host_images.setdefault(host, set()).add(image)
            return ok(f"pulled {image}\n")
        return fail(f"Error response from daemon: pull access denied for {image}")

    def _load(self, host: str, stream: str) -> Result:
        """`docker load` of a FakeEngine save stream: lines "fake-image NAME"."""
        names = [line.split()[1] for line in stream.splitlines() if line.startswith("fake-image ")]
        if not names:
            return fail("Error: open /var/lib/docker/tmp/docker-import: unexpected EOF")
        self.host_images.setdefault(host, set()).update(names)
        return ok("".join(f"Loaded image: {n}\n" for n in names))

    def _exec(self, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        """`exec [-i] [-t] ID CMD...`: `env` prints the task's env-file, `echo` its words."""
        rest = [a for a in args if a not in ("-i", "-t")]
        doc = self._find(engine, rest[0])
        if doc is None:
            return self._missing(rest[0])
        if doc["State"]["Status"] != "running":
            return fail(f"Error response from daemon: Container {rest[0]} is not running")
        command = rest[1:]
        if command[:1] == ["env"]:
            return ok(doc["Config"].get("Env", ""))
        if command[:1] == ["echo"]:
            return ok(" ".join(command[1:]) + "\n")
        return fail(f"OCI runtime exec failed: {command[0]}: executable file not found", 126)

    def _ps(self, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        wanted: dict[str, str | None] = {}  # a label's value, or None: any value
        for flag, value in itertools.pairwise(args):
            if flag == "--filter" and value.startswith("label="):
                key, eq, val = value.removeprefix("label=").partition("=")
                wanted[key] = val if eq else None
        ids = [
            cid
            for cid, doc in engine.items()
            if all(
                k in doc["Config"]["Labels"] if v is None else doc["Config"]["Labels"].get(k) == v
                for k, v in wanted.items()
            )
        ]
        if args[-2:] == ["--format", PS_FORMAT]:  # as docker prints it: id, state, status
            return ok("".join(f"{cid} {_status(engine[cid]['State'])}\n" for cid in ids))
        return ok("".join(f"{cid}\n" for cid in ids))

    def _inspect(self, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        refs = args[2:] if args[:2] == ["--type", "container"] else args
        found = [doc for ref in refs if (doc := self._find(engine, ref)) is not None]
        errors = [
            f"Error: No such container: {ref}\n" for ref in refs if not self._find(engine, ref)
        ]
        return Result(1 if errors else 0, json.dumps(found, indent=4), "".join(errors))

    def _run(
        self, host: str, args: list[str], *, start: bool = True, env: str | None = None
    ) -> Result:
        options: list[tuple[str, str]] = []
        rest = list(args)
        while rest and rest[0].startswith("-"):
            flag = rest.pop(0)
            if flag in _RUN_OPTIONS:
                options.append((flag, rest.pop(0)))
            elif flag not in _RUN_SWITCHES:
                return fail(f"fake docker: unknown run flag {flag}", 125)
        network = next((v for f, v in options if f == "--network"), None)
        if network is not None and network != "none" and network not in self.nets.get(host, {}):
            return fail(f"docker: Error response from daemon: network {network} not found.", 125)
        if not rest:
            return fail('"docker run" requires at least 1 argument.', 125)
        image, command = rest[0], rest[1:]
        name = next((v for f, v in options if f == "--name"), "")
        engine = self.engines.setdefault(host, {})
        if name and (other := self._find(engine, name)) is not None:
            return fail(
                f'docker: Error response from daemon: Conflict. The container name "/{name}" '
                f'is already in use by container "{other["Id"]}".',
                125,
            )
        if not self.present(host, image):
            return fail(f"Unable to find image '{image}' locally", 125)
        labels = dict(v.partition("=")[::2] for f, v in options if f == "--label")
        bindings: dict[str, list[dict[str, str]]] = {}
        for f, v in options:
            if f == "-p":  # HOST:CONTAINER, or IP:HOST:CONTAINER (a routed task's)
                parts = v.split(":")
                host_ip = parts[0] if len(parts) == 3 else ""
                host_port, container = parts[-2], parts[-1]
                port, _, proto = container.partition("/")
                key = f"{port}/{proto or 'tcp'}"
                if f"{host_port}/{proto or 'tcp'}" in self.held.get(host, set()):
                    return fail(
                        "docker: Error response from daemon: driver failed programming external "
                        f"connectivity on endpoint {name} (0123abcd): Error starting userland "
                        f"proxy: listen {proto or 'tcp'}4 0.0.0.0:{host_port}: bind: address "
                        "already in use\n\nRun 'docker run --help' for more information\n",
                        125,
                    )
                if any(
                    b["HostPort"] == host_port and k.endswith("/" + (proto or "tcp"))
                    for doc in engine.values()
                    if doc["State"]["Status"] == "running"
                    for k, binds in doc["HostConfig"]["PortBindings"].items()
                    for b in binds
                ):
                    return fail(
                        "docker: Error response from daemon: driver failed programming external "
                        f"connectivity: Bind for 0.0.0.0:{host_port} failed: port is already "
                        "allocated.",
                        125,
                    )
                bindings.setdefault(key, []).append({"HostIp": host_ip, "HostPort": host_port})
        health = "starting" if any(f == "--health-cmd" for f, _ in options) else None
        doc = self._create(
            host, name, labels, image, bindings, health, "running" if start else "created"
        )
        self.networks[doc["Id"]] = [network] if network not in (None, "none") else []
        doc["Mounts"] = self._mounts(host, options)
        doc["Config"]["Env"] = env or ""
        doc["Config"]["Cmd"] = command or None
        cpus = next((v for f, v in options if f == "--cpus"), "0")
        doc["HostConfig"]["NanoCpus"] = int(float(cpus) * 1e9)
        doc["HostConfig"]["Memory"] = int(next((v for f, v in options if f == "--memory"), "0"))
        return ok(doc["Id"] + "\n")

    def _create(
        self,
        host: str,
        name: str,
        labels: dict[str, str],
        image: str,
        bindings: dict[str, list[dict[str, str]]],
        health: str | None,
        status: str,
    ) -> dict[str, Any]:
        cid = hashlib.sha256(f"fake-container-{next(self._ids)}".encode()).hexdigest()
        if status != "created":
            self._started[cid] = self.clock.now
        now = _docker_time(self.clock.now)
        state: dict[str, Any] = {
            "Status": status,
            "Running": status == "running",
            "ExitCode": 0,
            "StartedAt": now if status != "created" else _ZERO_TIME,
            "FinishedAt": _ZERO_TIME,
        }
        if health is not None:
            state["Health"] = {"Status": health, "FailingStreak": 0, "Log": []}
        doc: dict[str, Any] = {
            "Id": cid,
            "Created": now,
            "Name": f"/{name or cid[:12]}",
            "State": state,
            "Config": {"Image": image, "Labels": labels, "Cmd": None},
            "HostConfig": {"NanoCpus": 0, "Memory": 0, "PortBindings": bindings},
        }
        self.engines.setdefault(host, {})[cid] = doc
        return doc

    def _mounts(self, host: str, options: list[tuple[str, str]]) -> dict[str, str]:
        """A container's named volumes, target -> volume (`-v NAME:/path[:opts]`, `--mount
        type=volume,...`), each made on the host when absent, as Docker does."""
        found: dict[str, str] = {}
        for flag, value in options:
            if flag in ("-v", "--volume") and ":" in value and not value.startswith("/"):
                name, target = value.split(":")[:2]
                found[target] = name
            elif flag == "--mount" and "type=volume" in value:
                keys = dict(part.partition("=")[::2] for part in value.split(","))
                found[keys["target"]] = keys["source"]
        for name in found.values():
            self.volumes.setdefault(host, {}).setdefault(name, {})
        return found

    def _volume(self, host: str, args: list[str]) -> Result:
        """`volume inspect --format {{.Name}} NAME` and `volume rm NAME` (refused while a
        container mounts it)."""
        held = self.volumes.setdefault(host, {})
        name = args[-1]
        if args[0] == "inspect":
            return ok(f"{name}\n") if name in held else fail(f"Error: No such volume: {name}")
        users = [
            d for d in self.engines.get(host, {}).values() if name in d.get("Mounts", {}).values()
        ]
        if users:
            return fail(f"Error response from daemon: remove {name}: volume is in use")
        held.pop(name, None)
        return ok(f"{name}\n")

    def _copy_out(self, host: str, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        """`docker cp NAME:/path -`: a tar of a mounted volume, its mount's last name as the
        one top entry."""
        ref, _, path = args[0].partition(":")
        doc = self._find(engine, ref)
        if doc is None:
            return self._missing(ref)
        volume = doc.get("Mounts", {}).get(path)
        if volume is None:
            return fail(f"fake docker: {path} is no volume of {ref}")
        top = posixpath.basename(path)
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            entry = tarfile.TarInfo(top)
            entry.type = tarfile.DIRTYPE
            tar.addfile(entry)
            for name, text in sorted(self.volumes.get(host, {}).get(volume, {}).items()):
                data = text.encode()
                member = tarfile.TarInfo(f"{top}/{name}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        return ok(out.getvalue().decode("latin-1"))

    def _start(self, engine: dict[str, dict[str, Any]], ref: str) -> Result:
        doc = self._find(engine, ref)
        if doc is None:
            return self._missing(ref)
        if doc["State"]["Status"] == "created":
            doc["State"].update(
                Status="running", Running=True, StartedAt=_docker_time(self.clock.now)
            )
            self._started[doc["Id"]] = self.clock.now
        return ok(f"{ref}\n")

    def _copy_in(
        self, host: str, engine: dict[str, dict[str, Any]], args: list[str], stream: str
    ) -> Result:
        """`docker cp -a - NAME:/` of a tar stream into a created container: its files are
        kept as "Files" (path -> (text, uid, gid, mode)); a running one is refused here, as
        MiniDock never copies into one. Into a volume's helper (`NAME:/parent` of a mount),
        the files under the mount's name go into the volume."""
        ref, _, root = args[-1].partition(":")
        doc = self._find(engine, ref)
        if doc is None:
            return self._missing(ref)
        mounts = {t: v for t, v in doc.get("Mounts", {}).items() if posixpath.dirname(t) == root}
        if mounts and root != "/":
            (target, volume), *_ = mounts.items()
            top = posixpath.basename(target)
            held = self.volumes.setdefault(host, {}).setdefault(volume, {})
            with tarfile.open(fileobj=io.BytesIO(stream.encode("latin-1"))) as tar:
                for member in tar:
                    extracted = tar.extractfile(member)
                    if extracted is not None and member.name.startswith(top + "/"):
                        held[member.name[len(top) + 1 :]] = extracted.read().decode()
            return ok()
        if args[:2] != ["-a", "-"] or root != "/" or doc["State"]["Status"] != "created":
            return fail(f"fake docker: unexpected cp: {args} into {doc['State']['Status']}")
        files = doc.setdefault("Files", {})
        with tarfile.open(fileobj=io.BytesIO(stream.encode())) as tar:
            for member in tar:
                extracted = tar.extractfile(member)
                text = extracted.read().decode() if extracted is not None else ""
                files["/" + member.name] = (text, member.uid, member.gid, member.mode)
        return ok()

    def _network(self, host: str, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        """`network inspect --format ... NAME`, `network create ... --label K=V NAME` and
        `network connect --alias A NAME CONTAINER`."""
        nets = self.nets.setdefault(host, {})
        sub, name = args[0], args[-1]
        if sub == "inspect":
            if name not in nets:
                return fail(f"Error: No such network: {name}")
            return ok(nets[name].get("minidock.cluster", "") + "\n")
        if sub == "create":
            if name in nets:
                return fail(f"Error response from daemon: network with name {name} already exists")
            labels = [v for f, v in itertools.pairwise(args) if f == "--label"]
            nets[name] = dict(label.partition("=")[::2] for label in labels)
            return ok(hashlib.sha256(name.encode()).hexdigest() + "\n")
        if sub == "connect":
            network, ref = args[-2], args[-1]
            doc = self._find(engine, ref)
            if network not in nets or doc is None:
                return fail(f"Error response from daemon: No such network: {network}")
            self.networks[doc["Id"]].append(network)
            return ok()
        return fail(f"fake docker: unknown network command: {args}", 125)

    def _login(self, host: str, args: list[str], password: str) -> Result:
        registry, user = args[-1], args[args.index("--username") + 1]
        if self.passwords.get((registry, user)) != password:
            return fail(
                f"Error response from daemon: login attempt to http://{registry}/v2/ failed"
            )
        self.logins.append((host, registry, user))
        return ok("Login Succeeded\n")

    def _stop(self, engine: dict[str, dict[str, Any]], ref: str) -> Result:
        doc = self._find(engine, ref)
        if doc is None:
            return self._missing(ref)
        state = doc["State"]
        if state["Status"] == "running":
            finished = _docker_time(self.clock.now)
            state.update(Status="exited", Running=False, ExitCode=143, FinishedAt=finished)
        return ok(f"{ref}\n")

    def _rm(self, engine: dict[str, dict[str, Any]], args: list[str]) -> Result:
        force = "-f" in args
        errors: list[str] = []
        out: list[str] = []
        for ref in (a for a in args if not a.startswith("-")):
            doc = self._find(engine, ref)
            if doc is None:
                errors.append(f"Error: No such container: {ref}\n")
            elif doc["State"]["Status"] == "running" and not force:
                errors.append(
                    f"Error response from daemon: cannot remove running container {ref}\n"
                )
            else:
                del engine[doc["Id"]]
                self._started.pop(doc["Id"], None)
                out.append(f"{ref}\n")
        return Result(1 if errors else 0, "".join(out), "".join(errors))

    @staticmethod
    def _find(engine: dict[str, dict[str, Any]], ref: str) -> dict[str, Any] | None:
        """A container by full id, id prefix (12+ characters) or name, like docker."""
        if ref in engine:
            return engine[ref]
        for cid, doc in engine.items():
            if doc["Name"] == f"/{ref}" or (len(ref) >= 12 and cid.startswith(ref)):
                return doc
        return None

    @staticmethod
    def _missing(ref: str) -> Result:
        return fail(f"Error response from daemon: No such container: {ref}")


_HEALTH_SHOWN = {"healthy": " (healthy)", "unhealthy": " (unhealthy)"}


def _status(state: dict[str, Any]) -> str:
    """A container's State and Status columns as `docker ps` shows them ("running Up 2
    seconds (healthy)", "exited Exited (137) 1 second ago"): what a probe keys it by."""
    status = state["Status"]
    if status == "running":
        health = (state.get("Health") or {}).get("Status")
        shown = _HEALTH_SHOWN.get(health, " (health: starting)") if health else ""
        return f"running Up 2 seconds{shown}"
    if status == "exited":
        return f"exited Exited ({state.get('ExitCode', 0)}) 1 second ago"
    return f"{status} {status.capitalize()}"


def fake_image_id(image: str) -> str:
    """The id FakeDocker (and FakeEngine) give an image: a hash of its name."""
    return f"sha256:{hashlib.sha256(image.encode()).hexdigest()}"


class FakeEngine:
    """The controller's Docker engine for unit tests: `images` by name; a save stream is
    "fake-image NAME" padded to `size` bytes, in two chunks (what FakeDocker loads)."""

    def __init__(self, *images: str, size: int = 4096) -> None:
        self.images = set(images)
        self.size = size
        self.saves: list[str] = []

    async def inspect(self, image: str) -> LocalImage | None:
        return LocalImage(image, fake_image_id(image), self.size) if image in self.images else None

    async def save(self, image: str) -> AsyncIterator[bytes]:
        self.saves.append(image)
        blob = f"fake-image {image}\n".encode().ljust(self.size, b"\0")
        yield blob[: self.size // 2]
        yield blob[self.size // 2 :]


def _image(doc: dict[str, Any]) -> str:
    return str(doc["Config"]["Image"])


def _life(doc: dict[str, Any]) -> Life:
    """The part of an inspect document that the behaviour table moves on."""
    state, health = doc["State"], doc["State"].get("Health")
    log = health["Log"] if health else []
    return Life(
        state=state["Status"],
        health=health["Status"] if health else "none",
        health_log=log[-1]["Output"] if log else "",
    )


def _show(doc: dict[str, Any], was: Life, life: Life, now: float) -> None:
    """Write what changed from `was` to `life` into the inspect document, as Docker shows it."""
    state = doc["State"]
    if life.state != was.state:
        state.update(Status=life.state, Running=life.state == "running")
        state.update(ExitCode=life.exit_code or 0, FinishedAt=_docker_time(life.finished_at or now))
    health = state.get("Health")
    if health is not None and life.health != was.health:
        health["Status"] = life.health
        at = _docker_time(now)
        check = {"Start": at, "End": at, "ExitCode": int(life.health != "healthy")}
        health["Log"] = [{**check, "Output": life.health_log}]
        health["FailingStreak"] = 0 if life.health == "healthy" else 3
