"""Configs onto a host before a task starts (docs/configs.md).

Each config is a file in the SSH user's `~/.minidock/configs/`, named by its content's
sha256: written to a temporary name, checked against its digest, made read-only and
renamed into place, so a file a task mounts is never rewritten. A file already there with
the right digest is used as it is; one whose digest is wrong is replaced the same way.

A writable copy (docs/configs.md#writable-copies: a file or directory the task may write,
the files' `copy`) is a directory in `~/.minidock/configs/copies/`, named by a sha256 over
the cluster, the service, its path in the task and its files: unpacked from a tar stream
into a temporary name, checked file by file, opened to every user and renamed into place.
A copy already there is used as it is, with whatever its tasks wrote into it: the host's
copy, replaced (a new name) when the files change.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Awaitable, Callable, Sequence

from minidock.commands.docker import (
    ConfigMount,
    config_check_argv,
    config_check_input,
    config_dir_argvs,
    config_finish_argvs,
    config_write_argv,
    writable_dir_argv,
    writable_exists_argv,
    writable_finish_argvs,
    writable_tar,
    writable_unpack_argvs,
)
from minidock.model import ConfigFile
from minidock.ssh import Result

__all__ = ["ConfigPlaceError", "ConfigPlacer", "Shell", "copy_files"]

Shell = Callable[[str, Sequence[str], "str | None"], Awaitable[Result]]


class ConfigPlaceError(Exception):
    """A config could not be put on a host; the task is not started."""


def copy_files(configs: Sequence[ConfigFile], copy: str) -> list[tuple[str, str]]:
    """(path under the copy's directory, text) of each file of the writable copy at
    `copy`: a file copy holds its one file under its own name."""
    files = [c for c in configs if c.copy == copy]
    if any(c.target == copy for c in files):
        return [(posixpath.basename(copy), c.content) for c in files]
    return [(c.target.removeprefix(copy.rstrip("/") + "/"), c.content) for c in files]


class ConfigPlacer:
    """Puts configs on hosts for one pass, each (host, digest) once; remembers each host's
    config directory. `cluster` names the writable copies with their service."""

    def __init__(self, sh: Shell, cluster: str = "") -> None:
        self.sh = sh
        self.cluster = cluster
        self.dirs: dict[str, str] = {}
        self.placed: set[tuple[str, str]] = set()

    async def place(
        self, host: str, configs: Sequence[ConfigFile], task: str, service: str = ""
    ) -> list[ConfigMount]:
        """The bind mount of each config, every file (and writable copy) on the host."""
        mounts: list[ConfigMount] = []
        for config in configs:
            if config.copy:
                continue
            path = f"{await self._dir(host)}/{config.digest}"
            if (host, config.digest) not in self.placed:
                await self._put(host, config, path, f"{path}.{task}.tmp")
                self.placed.add((host, config.digest))
            mounts.append(ConfigMount(path, config.target))
        for copy in sorted({c.copy for c in configs if c.copy}):
            files = copy_files(configs, copy)
            path = await self._copy(host, service, copy, files, task)
            is_file = any(c.copy == copy and c.target == copy for c in configs)
            mounts.append(ConfigMount(f"{path}/{files[0][0]}" if is_file else path, copy, True))
        return sorted(mounts, key=lambda m: m.target)

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

    async def _copy(
        self, host: str, service: str, copy: str, files: Sequence[tuple[str, str]], task: str
    ) -> str:
        """The host's path of the writable copy at `copy`, made there if it is not."""
        seen = json.dumps([self.cluster, service, copy, sorted(files)])
        name = hashlib.sha256(seen.encode()).hexdigest()
        root = f"{await self._dir(host)}/copies"
        path = f"{root}/{name}"
        if (host, path) in self.placed:
            return path
        what = f"writing the writable copy for {copy}"
        await self._must(host, writable_dir_argv(root), None, what)
        if (await self.sh(host, writable_exists_argv(path), None)).exit_status != 0:
            temporary = f"{path}.{task}.tmp"
            make, unpack = writable_unpack_argvs(temporary)
            await self._must(host, make, None, what)
            await self._must(host, unpack, writable_tar(files), what)
            listing = "".join(
                config_check_input(hashlib.sha256(text.encode()).hexdigest(), f"{temporary}/{n}")
                for n, text in files
            )
            if (await self.sh(host, config_check_argv(), listing)).exit_status != 0:
                raise ConfigPlaceError(f"{what}: a file on the host has another sha256")
            for argv in writable_finish_argvs(temporary, path):
                await self._must(host, argv, None, what)
        self.placed.add((host, path))
        return path

    async def _must(self, host: str, argv: Sequence[str], stdin: str | None, what: str) -> Result:
        res = await self.sh(host, argv, stdin)
        if res.exit_status != 0:
            said = " ".join((res.stderr.strip() or res.stdout.strip()).split())[:300]
            raise ConfigPlaceError(f"{what} failed: {said or f'exit {res.exit_status}'}")
        return res
