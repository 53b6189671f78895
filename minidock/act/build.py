"""Images the controller builds (a service's `build`, docs/compose.md#build): `docker build`
on the controller's own engine at apply, tagged by content (minidock.spec.buildctx); the
hosts get the image over SSH as for `image_source = "controller"` (minidock.act.push).

The engine is reached through `ImageBuilder`, so the use case can be tested without one.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Protocol

from minidock.commands.docker import build_argv, engine_version_argv, image_id_size_argv
from minidock.model import Build

__all__ = ["BuildFailed", "ImageBuilder", "LocalBuilder", "NoEngine"]

TAIL = 200  # characters of a failed build's last line kept in its error


class BuildFailed(Exception):
    """`docker build` failed: its last line of output, one line."""


class NoEngine(Exception):
    """No Docker engine answers on the controller: why, one line."""


class ImageBuilder(Protocol):
    """The controller's Docker engine, as a build needs it."""

    async def check(self) -> None:
        """Raise NoEngine when no Docker engine answers here."""
        ...

    async def has(self, image: str) -> bool:
        """Whether the engine holds `image` (by name)."""
        ...

    async def build(self, build: Build) -> None:
        """`docker build` it; raise BuildFailed saying why."""
        ...


class LocalBuilder:
    """The `docker` command on the controller (whatever engine it talks to)."""

    async def check(self) -> None:
        if shutil.which("docker") is None:
            raise NoEngine("there is no docker command on this controller")
        status, output = await _run(engine_version_argv())
        if status != 0:
            raise NoEngine(_last_line(output) or "docker version failed")

    async def has(self, image: str) -> bool:
        status, _ = await _run(image_id_size_argv(image))
        return status == 0

    async def build(self, build: Build) -> None:
        status, output = await _run(build_argv(build))
        if status != 0:
            raise BuildFailed(_last_line(output) or f"docker build exited {status}")


async def _run(argv: list[str]) -> tuple[int, str]:
    """Run argv on the controller: its exit status and its output (stdout and stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:TAIL] if lines else ""
