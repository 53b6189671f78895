"""minidock.act.volumecopy: the argvs of a volume's streams, and the pipe between two hosts
(the bytes arrive whole and in order, counted, with a bounded number in flight; a failure
on either side fails the copy). The lab's round trip is tests/integration/test_volume_moves.py."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterable, Sequence
from typing import cast

import pytest

from minidock.act import volumecopy
from minidock.commands.docker import (
    copy_in_argv,
    copy_out_argv,
    volume_exists_argv,
    volume_export_argv,
    volume_helper_argv,
    volume_helper_name,
    volume_import_argv,
    volume_rm_argv,
)
from minidock.model import EngineKind, Host
from minidock.ssh import Result, Sink
from tests.fakes import FakeExecutor, fail, ok

A = Host(name="a", address="10.0.0.1")
B = Host(name="b", address="10.0.0.2")
VOLUME = "shop_db.1_pgdata"
PATH = "/var/lib/postgresql/data"


def test_a_helper_mounts_the_volume_where_the_task_does_from_the_tasks_own_image() -> None:
    assert volume_helper_argv(VOLUME, PATH, "postgres:16") == [
        "docker",
        "create",
        "--name",
        "minidock-copy.shop_db.1_pgdata",
        "--label",
        "minidock.copy=shop_db.1_pgdata",
        "--network",
        "none",
        "--entrypoint",
        "true",
        "--volume",  # not --mount's volume-nocopy, which Podman refuses
        "shop_db.1_pgdata:/var/lib/postgresql/data:nocopy",
        "postgres:16",
    ]


@pytest.mark.parametrize("target", ["relative", "/", "/a,readonly", "/a:ro", ""])
def test_a_helper_refuses_a_target_the_mount_option_would_misread(target: str) -> None:
    with pytest.raises(ValueError, match="invalid volume target"):
        volume_helper_argv(VOLUME, target, "postgres:16")


def test_a_stream_goes_out_of_the_path_and_in_under_its_parent_owners_kept() -> None:
    assert copy_out_argv("db.1.abc", PATH) == ["docker", "cp", f"db.1.abc:{PATH}", "-"]
    assert copy_in_argv("db.1.abc", "/var/lib/postgresql") == [
        "docker",
        "cp",
        "-a",
        "-",
        "db.1.abc:/var/lib/postgresql",
    ]
    assert volumecopy.parent_of(PATH) == "/var/lib/postgresql"
    assert volumecopy.parent_of("/data/") == "/"


def test_volume_commands_refuse_an_operand_docker_would_read_as_an_option() -> None:
    assert volume_exists_argv(VOLUME)[-1] == VOLUME
    assert volume_rm_argv(VOLUME) == ["docker", "volume", "rm", VOLUME]
    for build in (volume_helper_name, volume_rm_argv, volume_exists_argv):
        with pytest.raises(ValueError, match="invalid"):
            build("--all")
    with pytest.raises(ValueError, match="invalid container"):
        copy_out_argv("-x", PATH)


class Hosts:
    """Two hosts' docker as far as a copy reaches it: helpers, volumes, streams."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.received: dict[str, bytes] = {}
        self.helpers: dict[str, set[str]] = {"a": set(), "b": set()}
        self.volumes: dict[str, set[str]] = {"a": {VOLUME}, "b": set()}
        self.out_fails = ""
        self.in_fails = ""

    def __call__(self, host: Host, argv: list[str], input: str | None) -> Result:
        where = host.name
        if argv[:2] == ["docker", "create"]:
            self.helpers[where].add(argv[argv.index("--name") + 1])
            self.volumes[where].add(VOLUME)
            return ok("id\n")
        if argv[:3] == ["docker", "rm", "-f"]:
            self.helpers[where].discard(argv[3])
            return ok()
        if argv[:2] == ["docker", "cp"] and argv[-1] == "-":
            assert argv[2].split(":")[0] in self.helpers[where]
            return fail(self.out_fails) if self.out_fails else ok(self.data.decode("latin-1"))
        if argv[:4] == ["docker", "cp", "-a", "-"]:
            assert argv[4].split(":")[0] in self.helpers[where]
            if self.in_fails:
                return fail(self.in_fails)
            self.received[where] = (input or "").encode("latin-1")
            return ok()
        raise AssertionError(argv)


def test_a_volume_is_piped_host_to_host_whole_counted_and_its_helpers_removed() -> None:
    data = bytes(range(256)) * 5000  # 1.28 MB, in chunks of 100 kB
    hosts = Hosts(data)
    executor = FakeExecutor(hosts)
    executor.pour_chunk = 100_000
    seen: list[int] = []
    clock = iter([10.0, 12.0]).__next__
    copied = asyncio.run(
        volumecopy.copy_volume(
            executor, A, B, VOLUME, (PATH, "postgres:16"), on_bytes=seen.append, clock=clock
        )
    )
    assert hosts.received["b"] == data
    assert (copied.size, copied.seconds, copied.source, copied.target) == (len(data), 2.0, "a", "b")
    assert seen[-1] == len(data)
    assert seen == sorted(seen)
    assert len(seen) == 13
    assert hosts.helpers == {"a": set(), "b": set()}
    assert VOLUME in hosts.volumes["b"]
    assert copied.figure() == "1.2MiB in 2.0s, 625.0KiB/s"


@pytest.mark.parametrize("side", ["out", "in"])
def test_a_failed_stream_on_either_side_fails_the_copy_naming_the_host(side: str) -> None:
    hosts = Hosts(b"x" * 1000)
    if side == "out":
        hosts.out_fails = "Error: No such container:path: minidock-copy.x:/var/lib"
    else:
        hosts.in_fails = "Error response from daemon: no space left on device"
    executor = FakeExecutor(hosts)
    with pytest.raises(volumecopy.CopyError) as failed:
        asyncio.run(volumecopy.copy_volume(executor, A, B, VOLUME, (PATH, "postgres:16")))
    host = "a" if side == "out" else "b"
    assert f"failed on {host}: " in str(failed.value)
    assert ("No such container" if side == "out" else "no space left") in str(failed.value)
    assert hosts.helpers == {"a": set(), "b": set()}


class SlowTarget(FakeExecutor):
    """The source pours 100 chunks as fast as it is let; the target takes one at a time,
    yielding between them: how far ahead the source gets is what the pipe holds."""

    def __init__(self) -> None:
        super().__init__(lambda host, argv, input: ok())
        self.poured = 0
        self.taken = 0
        self.ahead = 0

    async def pour(
        self, host: Host, argv: Sequence[str], sink: Sink, *, timeout: float | None = None
    ) -> Result:
        for _ in range(100):
            self.poured += 1
            self.ahead = max(self.ahead, self.poured - self.taken)
            await sink(b"c" * 10)
        return ok()

    async def feed(
        self,
        host: Host,
        argv: Sequence[str],
        source: AsyncIterable[bytes],
        *,
        timeout: float | None = None,
    ) -> Result:
        async for _ in source:
            self.taken += 1
            for _ in range(5):
                await asyncio.sleep(0)
        return ok()


def test_the_pipe_holds_a_bounded_number_of_chunks_never_the_volume() -> None:
    executor = SlowTarget()
    size = asyncio.run(volumecopy.pipe(executor, (A, "x"), (B, "y"), PATH))
    assert (size, executor.taken) == (1000, 100)
    assert executor.ahead <= volumecopy.PIPE_DEPTH + 2


def test_a_volume_gone_already_is_removed_without_failure() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:3] == ["docker", "volume", "rm"]:
            return fail(f"Error response from daemon: get {VOLUME}: no such volume")
        if argv[:3] == ["docker", "volume", "inspect"]:
            return fail("no such volume")
        return ok()

    asyncio.run(volumecopy.remove_volume(FakeExecutor(handler), A, VOLUME))

    def in_use(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:3] == ["docker", "volume", "rm"]:
            return fail("Error response from daemon: remove x: volume is in use - [abc]")
        return ok(f"{VOLUME}\n") if argv[:3] == ["docker", "volume", "inspect"] else ok()

    with pytest.raises(volumecopy.CopyError, match="volume is in use"):
        asyncio.run(volumecopy.remove_volume(FakeExecutor(in_use), A, VOLUME))


# -- Podman: the stream goes through the volume itself ---------------------------------------
def test_on_podman_a_volume_is_exported_and_imported_not_copied_through_the_helper() -> None:
    """Podman's cp into or out of a never-started helper reaches the helper's own root,
    not the volume (a move arrived empty): its volume's own export and import instead."""
    assert volume_export_argv(VOLUME) == ["docker", "volume", "export", VOLUME]
    assert volume_import_argv(VOLUME) == ["docker", "volume", "import", VOLUME, "-"]
    with pytest.raises(ValueError, match="invalid volume"):
        volume_export_argv("-q")


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.uid, info.size = 999, len(data)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def names_in(stream: bytes) -> list[tuple[str, int, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        return [
            (m.name, m.uid, (tar.extractfile(m) or io.BytesIO()).read() if m.isfile() else b"")
            for m in tar.getmembers()
        ]


CONTENT = [("PG_VERSION", b"16\n"), ("base/", b""), ("base/1", b"x" * 70_000)]
CP_FORM = tar_of([("data/", b"")] + [(f"data/{n}", d) for n, d in CONTENT])  # docker cp's
EXPORT_FORM = tar_of(CONTENT)  # podman volume export's: no top entry


class Engines:
    """Two hosts, each Docker or Podman, as far as a copy reaches them: Docker streams the
    helper's path (`cp`), Podman the volume itself (`volume export/import`)."""

    def __init__(self, engines: dict[str, str], *, lost: bool = False) -> None:
        self.engines = engines
        self.lost = lost  # a target that unpacks the stream where its volume is not
        self.received: dict[str, bytes] = {}
        self.streams: list[tuple[str, str]] = []  # (host, how)

    def __call__(self, host: Host, argv: list[str], input: str | None) -> Result:
        podman = self.engines[host.name] == "podman"
        helper = f"minidock-copy.{VOLUME}"
        streams = {
            ("docker", "cp", f"{helper}:{PATH}", "-"): ("docker", "out"),
            ("docker", "cp", "-a", "-", f"{helper}:/var/lib/postgresql"): ("docker", "in"),
            ("docker", "volume", "export", VOLUME): ("podman", "out"),
            ("docker", "volume", "import", VOLUME, "-"): ("podman", "in"),
        }
        if tuple(argv) not in streams:
            return ok("id\n")  # create and rm -f of a helper
        engine, way = streams[tuple(argv)]
        assert engine == self.engines[host.name], (host.name, argv)
        self.streams.append((host.name, f"{engine} {way}"))
        if way == "in":
            self.received[host.name] = (input or "").encode("latin-1")
            return ok()
        if host.name in self.received:  # the target read back: what it unpacked
            held = bytes(1024) if self.lost else self.received[host.name]
            return ok(held.decode("latin-1"))
        return ok((EXPORT_FORM if podman else CP_FORM).decode("latin-1"))


@pytest.mark.parametrize(
    ("source", "target"),
    [("docker", "podman"), ("podman", "docker"), ("podman", "podman"), ("docker", "docker")],
)
def test_a_volume_moves_between_engines_with_its_files_and_owners(source: str, target: str) -> None:
    hosts = Engines({"a": source, "b": target})
    engines = (cast(EngineKind, source), cast(EngineKind, target))
    copied = asyncio.run(
        volumecopy.copy_volume(
            FakeExecutor(hosts), A, B, VOLUME, (PATH, "postgres:16"), engines=engines
        )
    )
    # the target read back from its start: it holds what came (never an empty volume)
    assert hosts.streams == [("a", f"{source} out"), ("b", f"{target} in"), ("b", f"{target} out")]
    arrived = names_in(hosts.received["b"])
    files = [(f"data/{n}".rstrip("/"), 999, d) for n, d in CONTENT]
    if target == "podman":  # the volume's own names, as its export gives them
        assert arrived == [(n.removeprefix("data/"), u, d) for n, u, d in files]
    else:  # under the path's last name, as docker cp gives them (Podman's: no top entry)
        assert arrived == ([] if source == "podman" else [("data", 999, b"")]) + files
    # the size: the bytes between the hosts, in docker cp's form whatever the engines
    if source == "docker":
        assert copied.size == len(CP_FORM)
    if target == "docker":
        assert copied.size == len(hosts.received["b"])


@pytest.mark.parametrize("target", ["docker", "podman"])
def test_a_copy_that_leaves_the_target_empty_fails_saying_so(target: str) -> None:
    """A stream of files that the target's engine unpacked elsewhere (Podman's cp into
    the never-started helper did): the volume holds nothing, and the copy fails."""
    hosts = Engines({"a": "docker", "b": target}, lost=True)
    with pytest.raises(volumecopy.CopyError, match="left the volume empty"):
        asyncio.run(
            volumecopy.copy_volume(
                FakeExecutor(hosts),
                A,
                B,
                VOLUME,
                (PATH, "postgres:16"),
                engines=("docker", cast(EngineKind, target)),
            )
        )


def test_an_empty_volume_copies_with_no_read_back() -> None:
    """Nothing below the top in the stream: nothing to look for on the target."""
    hosts = Hosts(b"")
    hosts.data = CP_FORM[:512] + bytes(1024)  # the top entry alone, then the end
    asyncio.run(volumecopy.copy_volume(FakeExecutor(hosts), A, B, VOLUME, (PATH, "postgres:16")))
    assert hosts.received["b"] == hosts.data
