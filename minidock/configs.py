"""Configs onto a host before a task starts (docs/configs.md).

Each config is a file in the SSH user's `~/.minidock/configs/`, named by its content's
sha256: written to a temporary name, checked against its digest, made read-only and
renamed into place, so a file a task mounts is never rewritten. A file already there with
the right digest is used as it is; one whose digest is wrong is replaced the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from minidock.commands.docker import (
    config_check_argv,
    config_check_input,
    config_dir_argvs,
    config_finish_argvs,
    config_write_argv,
)
from minidock.model import ConfigFile
from minidock.ssh import Result

__all__ = ["ConfigPlaceError", "ConfigPlacer", "Shell"]

Shell = Callable[[str, Sequence[str], "str | None"], Awaitable[Result]]


class ConfigPlaceError(Exception):
    """A config could not be put on a host; the task is not started."""


class ConfigPlacer:
    """Puts configs on hosts for one pass, each (host, digest) once; remembers each host's
    config directory."""

    def __init__(self, sh: Shell) -> None:
        self.sh = sh
        self.dirs: dict[str, str] = {}
        self.placed: set[tuple[str, str]] = set()

    async def place(
        self, host: str, configs: Sequence[ConfigFile], task: str
    ) -> list[tuple[str, str]]:
        """(host path, path in the task) of each config, every file on the host."""
        mounts: list[tuple[str, str]] = []
        for config in configs:
            path = f"{await self._dir(host)}/{config.digest}"
            if (host, config.digest) not in self.placed:
                await self._put(host, config, path, f"{path}.{task}.tmp")
                self.placed.add((host, config.digest))
            mounts.append((path, config.target))
        return mounts

    async def _dir(self, host: str) -> str:
        if host not in self.dirs:
            make, show = config_dir_argvs()
            await self._must(host, make, None, "making the config directory")
            found = await self._must(host, show, None, "finding the config directory")
            self.dirs[host] = found.stdout.strip()
        return self.dirs[host]

    async def _put(self, host: str, config: ConfigFile, path: str, temporary: str) -> None:
        check = config_check_argv()
        if (await self.sh(host, check, config_check_input(config.digest, path))).exit_status == 0:
            return
        what = f"writing the config for {config.target}"
        await self._must(host, config_write_argv(temporary), config.content, what)
        written = await self.sh(host, check, config_check_input(config.digest, temporary))
        if written.exit_status != 0:
            raise ConfigPlaceError(f"{what}: the file on the host has another sha256")
        for argv in config_finish_argvs(temporary, path):
            await self._must(host, argv, None, what)

    async def _must(self, host: str, argv: Sequence[str], stdin: str | None, what: str) -> Result:
        res = await self.sh(host, argv, stdin)
        if res.exit_status != 0:
            said = " ".join((res.stderr.strip() or res.stdout.strip()).split())[:300]
            raise ConfigPlaceError(f"{what} failed: {said or f'exit {res.exit_status}'}")
        return res
