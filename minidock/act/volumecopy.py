"""A volume's data as a tar stream over SSH: out of a container (`docker cp C:PATH -`,
running or stopped), into one (`docker cp -a - C:PARENT`), and host to host through the
controller (`pipe`), never held in memory: at most `PIPE_DEPTH` chunks of the executor's
(`ssh.POUR_CHUNK`, 1 MiB) are in flight between the two hosts.

A volume with no task on its host is reached through a helper (`open_volume`): a container
of the task's own image, created and never started, with the volume mounted where the task
mounts it (`commands.docker.volume_helper_argv`), so a host needs no other image; creating
it makes the volume when it is not there. The stream of `/var/lib/data` has `data` as its
one top entry and goes in under `/var/lib`: a stream taken from the running task (a
backup) and one taken from a helper (a move) are the same stream.

On a Podman host (`engine`) the stream goes through the volume itself, `volume export`
and `volume import` (commands.docker.volume_export_argv): Podman's `cp` into or out of a
container never started reaches the container's own root, not the volume mounted there
(a move arrived empty), and gives every file to root. The export's names are put under
the path's last name on the way out and taken out of it on the way in
(commands.tarnames), so the stream is the same on both engines: a volume moves between a
Docker and a Podman host, and a snapshot taken on either restores on the other. The
volume's own directory is not in an export: a stream out of Podman carries no owner or
mode for it (the target's volume keeps its own).

`minidock move` (usecases/volumes.py) and `minidock backup`/`restore` build on these.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass

from minidock.commands.docker import (
    copy_in_argv,
    copy_out_argv,
    rm_argv,
    volume_exists_argv,
    volume_export_argv,
    volume_helper_argv,
    volume_helper_name,
    volume_import_argv,
    volume_rm_argv,
)
from minidock.commands.tarnames import Renamer, TarError, out_of, under
from minidock.model import EngineKind, Host
from minidock.ssh import Executor, Result, Sink
from minidock.units import approx_size

__all__ = [
    "PIPE_DEPTH",
    "Copied",
    "CopyError",
    "OnBytes",
    "close_volume",
    "copy_volume",
    "holds",
    "open_volume",
    "parent_of",
    "pipe",
    "remove_volume",
    "stream_in",
    "stream_out",
    "top_of",
    "volume_exists",
]

PIPE_DEPTH = 8  # chunks queued between the source host's stream and the target's
OnBytes = Callable[[int], None]  # bytes streamed so far
_END = b""


class CopyError(Exception):
    """A stream out of or into a container failed (one line, naming host and command)."""


@dataclass(frozen=True)
class Copied:
    """One volume's copy: bytes streamed and seconds taken."""

    volume: str
    source: str
    target: str
    size: int
    seconds: float

    def figure(self) -> str:
        """Size, time and rate, as people read them: "2.0MiB in 0.3s, 6.6MiB/s"."""
        rate = f", {approx_size(int(self.size / self.seconds))}/s" if self.seconds > 0 else ""
        return f"{approx_size(self.size)} in {self.seconds:.1f}s{rate}"


def parent_of(path: str) -> str:
    """Where the stream of `path` goes in: its parent directory."""
    return posixpath.dirname(posixpath.normpath(path)) or "/"


def top_of(path: str) -> str:
    """The stream of `path`'s one top entry: the path's last name."""
    return posixpath.basename(posixpath.normpath(path))


def _failed(what: str, host: Host, result: Result) -> CopyError:
    text = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
    return CopyError(f"{what} failed on {host.name}: {text[0][:200]}")


async def open_volume(executor: Executor, host: Host, volume: str, target: str, image: str) -> str:
    """The helper holding `volume` at `target` on the host (made afresh: one left by an
    interrupted copy is removed first), its name returned; the volume made if absent."""
    await close_volume(executor, host, volume)
    made = await executor.run(host, volume_helper_argv(volume, target, image))
    if made.exit_status != 0:
        raise _failed(f"docker create of a helper for {volume}", host, made)
    return volume_helper_name(volume)


async def close_volume(executor: Executor, host: Host, volume: str) -> None:
    """Remove the volume's helper, if any (the volume stays)."""
    await executor.run(host, rm_argv([volume_helper_name(volume)], force=True))


async def volume_exists(executor: Executor, host: Host, volume: str) -> bool:
    found = await executor.run(host, volume_exists_argv(volume))
    return found.exit_status == 0 and found.stdout.strip() == volume


async def remove_volume(executor: Executor, host: Host, volume: str) -> None:
    """Remove the volume (and its helper); a volume already gone is no failure."""
    await close_volume(executor, host, volume)
    gone = await executor.run(host, volume_rm_argv(volume))
    if gone.exit_status != 0 and await volume_exists(executor, host, volume):
        raise _failed(f"docker volume rm {volume}", host, gone)


async def stream_out(
    executor: Executor,
    host: Host,
    container: str,
    path: str,
    sink: Sink,
    *,
    on_bytes: OnBytes | None = None,
    engine: EngineKind = "docker",
    volume: str = "",
) -> int:
    """Hand the tar stream of `path` in `container` to `sink`, chunk by chunk (the next
    read once `sink` returns); the bytes streamed. On Podman (`engine`), `volume`'s export
    renamed into the same stream (module doc). Raises CopyError on a failed copy."""
    size = 0
    renamer = Renamer(under(top_of(path))) if engine == "podman" else None
    argv = volume_export_argv(volume) if renamer else copy_out_argv(container, path)
    what = f"podman volume export {volume}" if renamer else f"docker cp out of {container}:{path}"

    async def counted(chunk: bytes) -> None:
        nonlocal size
        if renamer is not None and not (chunk := renamer.feed(chunk)):
            return
        size += len(chunk)
        await sink(chunk)
        if on_bytes is not None:
            on_bytes(size)

    try:
        done = await executor.pour(host, argv, counted)
        if done.exit_status != 0:
            raise _failed(what, host, done)
        if renamer is not None:
            renamer.close()
    except TarError as exc:
        raise CopyError(f"{what} on {host.name}: {exc}") from None
    return size


async def stream_in(
    executor: Executor,
    host: Host,
    container: str,
    path: str,
    source: AsyncIterable[bytes],
    *,
    on_bytes: OnBytes | None = None,
    engine: EngineKind = "docker",
    volume: str = "",
) -> int:
    """Unpack the tar stream of `path` (from `source`) into `container`, under its parent;
    the bytes streamed. On Podman (`engine`), into `volume` by its import, the stream's
    names taken out of its top (module doc). Raises CopyError on a failed copy, and on
    one that left nothing: a stream that held a file or directory below its top, after
    which the volume holds none (`holds`: how a move once arrived empty on Podman)."""
    size = 0
    seen = _Seen(top_of(path))
    renamer = Renamer(out_of(top_of(path))) if engine == "podman" else None
    parent = parent_of(path)
    argv = volume_import_argv(volume) if renamer else copy_in_argv(container, parent)
    what = f"podman volume import {volume}" if renamer else f"docker cp into {container}:{parent}"

    async def counted() -> AsyncIterator[bytes]:
        nonlocal size
        async for chunk in source:
            size += len(chunk)
            seen.feed(chunk)
            if on_bytes is not None:
                on_bytes(size)
            if renamer is None:
                yield chunk
            elif renamed := renamer.feed(chunk):
                yield renamed
        if renamer is not None:
            renamer.close()

    try:
        done = await executor.feed(host, argv, counted())
    except TarError as exc:
        raise CopyError(f"{what} on {host.name}: {exc}") from None
    if done.exit_status != 0:
        raise _failed(what, host, done)
    if seen.found and not await holds(
        executor, host, container, path, engine=engine, volume=volume
    ):
        raise CopyError(
            f"{what} on {host.name} left the volume empty: the stream held files, "
            "the volume holds none"
        )
    return size


class _Seen:
    """Whether a stream (`docker cp`'s form) holds a member below its top, read from its
    first chunks only; a stream that is not a tar (or not of this top) is not judged."""

    def __init__(self, top: str) -> None:
        self._renamer: Renamer | None = Renamer(out_of(top))
        self.found = False

    def feed(self, chunk: bytes) -> None:
        if self._renamer is None:
            return
        try:
            self._renamer.feed(chunk)
        except TarError:
            self._renamer = None
            return
        if self._renamer.members:
            self.found, self._renamer = True, None


class _Enough(Exception):
    """A read that has seen what it looked for (the command's stream is cut there)."""


async def holds(
    executor: Executor,
    host: Host,
    container: str,
    path: str,
    *,
    engine: EngineKind = "docker",
    volume: str = "",
) -> bool:
    """Whether the volume (at `path` in `container`; on Podman, `volume` itself) holds a
    file or directory, read from the start of its stream only: the read stops at the
    first member (a chunk or two over SSH, whatever the volume's size). A stream that
    cannot be read or judged is taken to hold something (the copy's own exit said)."""
    top = top_of(path)
    podman = engine == "podman"
    renamer = Renamer(under(top) if podman else out_of(top))
    argv = volume_export_argv(volume) if podman else copy_out_argv(container, path)

    async def look(chunk: bytes) -> None:
        renamer.feed(chunk)
        if renamer.members:
            raise _Enough

    try:
        done = await executor.pour(host, argv, look)
    except _Enough:
        return True
    except TarError:
        return True
    return done.exit_status != 0


async def pipe(
    executor: Executor,
    source: tuple[Host, str],
    target: tuple[Host, str],
    path: str,
    *,
    on_bytes: OnBytes | None = None,
    volume: str = "",
    engines: tuple[EngineKind, EngineKind] = ("docker", "docker"),
) -> int:
    """Stream `path` out of a container on one host into a container on another (each a
    (host, container) pair) through the controller; the bytes streamed. The two commands
    run at once, `PIPE_DEPTH` chunks at most between them; either failing fails both.
    `engines`: the source's and the target's, `volume` the one they hold (Podman's
    streams go through it)."""
    queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(PIPE_DEPTH)

    async def produce() -> int:
        try:
            size = await stream_out(
                executor,
                *source,
                path,
                queue.put,
                on_bytes=on_bytes,
                engine=engines[0],
                volume=volume,
            )
        except Exception as exc:  # the consumer is told; a cancel (it is gone) is not
            await queue.put(exc)
            raise
        await queue.put(_END)
        return size

    async def chunks() -> AsyncIterator[bytes]:
        while (chunk := await queue.get()) != _END:
            if isinstance(chunk, BaseException):
                raise CopyError(f"the stream out of {source[0].name} ended: {chunk}")
            yield chunk

    producer = asyncio.ensure_future(produce())
    try:
        await stream_in(executor, *target, path, chunks(), engine=engines[1], volume=volume)
    except BaseException:
        failed = producer.exception() if producer.done() and not producer.cancelled() else None
        if failed is not None:
            raise failed from None  # the source's failure: the cause
        raise
    finally:
        if not producer.done():
            producer.cancel()
            with contextlib.suppress(BaseException):
                await producer
    return await producer


async def copy_volume(
    executor: Executor,
    source: Host,
    target: Host,
    volume: str,
    mount: tuple[str, str],
    *,
    on_bytes: OnBytes | None = None,
    clock: Callable[[], float] = time.monotonic,
    engines: tuple[EngineKind, EngineKind] = ("docker", "docker"),
) -> Copied:
    """Copy a volume from one host to the same-named volume on another, through helpers
    of the task's image on both (`mount`: the path the task mounts it at, and the image);
    the target's volume is made when absent. The helpers are removed, the volumes stay.
    `engines`: the source's and the target's."""
    path, image = mount
    started = clock()
    try:
        out = await open_volume(executor, source, volume, path, image)
        into = await open_volume(executor, target, volume, path, image)
        size = await pipe(
            executor,
            (source, out),
            (target, into),
            path,
            on_bytes=on_bytes,
            volume=volume,
            engines=engines,
        )
    finally:
        with contextlib.suppress(Exception):
            await close_volume(executor, source, volume)
        with contextlib.suppress(Exception):
            await close_volume(executor, target, volume)
    return Copied(volume, source.name, target.name, size, clock() - started)
