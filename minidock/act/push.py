"""Images without a registry: `docker save` on the controller's own engine, streamed over a
host's SSH connection into `docker load` there (no registry, no open port, no temporary
file). `minidock push` and services with `image_source = "controller"` use it.

A host that already holds the image (the same image id, not only the same name) is left
alone, so a push is cheap to repeat. The controller's engine is reached through
`ControllerEngine`, so the runner and the use case can be tested without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from minidock.commands.docker import image_id_size_argv, image_present_argv, load_argv, save_argv
from minidock.model import Host
from minidock.ssh import Executor
from minidock.units import approx_size

__all__ = [
    "CHUNK",
    "ControllerEngine",
    "LocalEngine",
    "LocalImage",
    "PushError",
    "Pushed",
    "host_image_id",
    "push_image",
]

CHUNK = 1 << 20  # bytes read from `docker save` at a time
OnSent = Callable[[int], None]  # bytes sent so far


class PushError(Exception):
    """The image could not be read on the controller or loaded on the host (one line)."""


@dataclass(frozen=True)
class LocalImage:
    """An image in the controller's engine: its name as given, id and size in bytes."""

    name: str
    id: str
    size: int


@dataclass(frozen=True)
class Pushed:
    """One host's push: bytes streamed and seconds taken (0 and 0.0 when it was there)."""

    host: str
    image: str
    sent: int
    seconds: float

    @property
    def skipped(self) -> bool:
        return self.sent == 0

    def figure(self) -> str:
        """Size, time and rate, as people read them: "2.0MiB in 0.3s, 6.6MiB/s"."""
        rate = f", {approx_size(int(self.sent / self.seconds))}/s" if self.seconds > 0 else ""
        return f"{approx_size(self.sent)} in {self.seconds:.1f}s{rate}"


class ControllerEngine(Protocol):
    """The controller's own Docker engine, as a push needs it."""

    async def inspect(self, image: str) -> LocalImage | None:
        """The image's id and size, None when the engine does not have it."""
        ...

    def save(self, image: str) -> AsyncIterator[bytes]:
        """`docker save IMAGE` as chunks; raises PushError when it fails."""
        ...


class LocalEngine:
    """The `docker` command on the controller (whatever engine it talks to)."""

    async def inspect(self, image: str) -> LocalImage | None:
        proc = await asyncio.create_subprocess_exec(
            *image_id_size_argv(image),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        words = out.decode().split()
        if proc.returncode != 0 or len(words) != 2 or not words[1].isdigit():
            return None
        return LocalImage(image, words[0], int(words[1]))

    async def save(self, image: str) -> AsyncIterator[bytes]:
        proc = await asyncio.create_subprocess_exec(
            *save_argv(image), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            while chunk := await proc.stdout.read(CHUNK):
                yield chunk
            errors = await proc.stderr.read()
            if await proc.wait() != 0:
                line = (errors.decode(errors="replace").strip() or "no output").splitlines()[0]
                raise PushError(f"docker save {image} failed on the controller: {line[:200]}")
        finally:
            if proc.returncode is None:  # the host side stopped reading: stop saving
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def host_image_id(executor: Executor, host: Host, image: str) -> str | None:
    """The id of `image` on the host, None when the host does not have it."""
    res = await executor.run(host, image_present_argv(image))
    return res.stdout.strip() if res.exit_status == 0 and res.stdout.strip() else None


async def push_image(
    executor: Executor,
    engine: ControllerEngine,
    host: Host,
    image: LocalImage,
    *,
    on_sent: OnSent | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Pushed:
    """Stream the image into the host's engine unless it already holds that image id; then
    check the host reports the same id. Raises PushError, Unreachable or CommandTimeout."""
    if await host_image_id(executor, host, image.name) == image.id:
        return Pushed(host.name, image.name, 0, 0.0)
    started = clock()
    sent = 0

    async def counted() -> AsyncIterator[bytes]:
        nonlocal sent
        async for chunk in engine.save(image.name):
            sent += len(chunk)
            if on_sent is not None:
                on_sent(sent)
            yield chunk

    loaded = await executor.feed(host, load_argv(), counted())
    if loaded.exit_status != 0:
        text = (loaded.stderr.strip() or loaded.stdout.strip() or "no output").splitlines()
        raise PushError(f"docker load of {image.name} failed on {host.name}: {text[0][:200]}")
    found = await host_image_id(executor, host, image.name)
    if found != image.id:
        raise PushError(
            f"{host.name} holds {image.name} as {found or 'nothing'} after docker load, "
            f"not {image.id}"
        )
    return Pushed(host.name, image.name, sent, clock() - started)
