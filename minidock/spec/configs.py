"""A service's `configs` into ConfigFiles: files from the controller, read at apply, put
read-only into each task (docs/configs.md).

The checks the schema cannot express: an absolute, normal path in the task; no path that
another config or a volume already mounts, or that lies inside another config (a file has
no inside); a file that exists and is UTF-8 text; at most `MAX_CONFIG_BYTES`. A `dir`
source is every file under a directory of the controller, each one a config at its path
under the target, the whole at most `MAX_DIR_FILES` files and `MAX_DIR_BYTES`.
`writable = true` (a `file` or a `dir`) makes it a writable copy on each host: the same
files and limits, mounted as one file or one directory, so a volume may lie inside it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from typing import Any

from minidock.model import ConfigFile, Volume
from minidock.spec.errors import Fail, Part
from minidock.spec.reading import resolve

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DIR_BYTES",
    "MAX_DIR_FILES",
    "build_configs",
    "check_task_path",
    "mounted",
]

MAX_CONFIG_BYTES = 500 * 1024  # per config, as Swarm's configs; the state keeps each one
# per `dir` source (a read-only bind mount of a directory beside a Compose file): the
# state keeps every file of it in every generation it holds
MAX_DIR_BYTES = 1024 * 1024
MAX_DIR_FILES = 100


def build_configs(
    table: dict[str, dict[str, Any]],
    volumes: Sequence[Volume],
    at: tuple[Part, ...],
    fail: Fail,
    base: str,
) -> tuple[ConfigFile, ...]:
    """Each `"/path/in/task" = { file = ... } | { content = ... } | { dir = ... }`, read
    now, by target (a `dir`: one config per file under it). With `writable = true` the
    file or directory is a writable copy: its files carry `copy`, the target."""
    configs: list[ConfigFile] = []
    for target, source in table.items():
        where = (*at, target)
        given = [key for key in ("file", "content", "dir") if key in source]
        if len(given) != 1:
            said = " and ".join(given) or "no source"
            raise fail(where, f"{said}: give one of file, content or dir")
        copy = target if source.get("writable", False) else ""
        if copy and "content" in source:
            raise fail((*where, "writable"), "a writable config is a file or a dir: not content")
        whole = bool(copy) and "dir" in source  # one mount: a volume may lie inside it
        outside = [v for v in volumes if not (whole and _inside(v.target, target))]
        check_task_path(target, outside, mounted(configs), where, fail)
        if "dir" in source:
            for name, content in _read_dir(resolve(base, source["dir"]), (*where, "dir"), fail):
                path = f"{target.rstrip('/')}/{name}"
                if not copy:
                    check_task_path(path, volumes, mounted(configs), where, fail)
                configs.append(ConfigFile(path, content, copy))
            continue
        if "file" in source:
            content = _read(resolve(base, source["file"]), (*where, "file"), fail)
        else:
            content = source["content"]
        size = len(content.encode())
        if size > MAX_CONFIG_BYTES:
            raise fail(where, f"{size} bytes is over the {MAX_CONFIG_BYTES // 1024} KiB limit")
        configs.append(ConfigFile(target, content, copy))
    return tuple(sorted(configs, key=lambda c: c.target))


def mounted(configs: Sequence[ConfigFile]) -> list[tuple[str, str]]:
    """(what, path in the task) of each mount the configs make: a read-only config's file,
    a writable copy's file or directory, each once."""
    found: dict[str, str] = {}
    for c in configs:
        found.setdefault(c.copy or c.target, "the writable copy at" if c.copy else "the config at")
    return [(what, path) for path, what in found.items()]


def check_task_path(
    target: str,
    volumes: Sequence[Volume],
    others: Sequence[tuple[str, str]],
    where: Sequence[Part],
    fail: Fail,
    *,
    in_volumes: bool = True,
) -> None:
    """Refuse a file's path in the task that is not absolute and plain, that a volume
    mounts or lies inside (or, unless `in_volumes`, that lies inside a volume), or that
    collides with one of `others` ((what, path) of the files placed before it)."""
    if not target.startswith("/") or target == "/":
        raise fail(where, f"{target!r} must be an absolute path in the task, like /etc/app.conf")
    if any(c in target for c in ',"\n'):
        raise fail(
            where, f"{target!r}: a path in the task may not hold a comma, quote or line break"
        )
    if posixpath.normpath(target) != target or ".." in target.split("/"):
        raise fail(where, f"{target!r} must be a plain path: write {posixpath.normpath(target)}")
    for volume in volumes:
        inside = not in_volumes and _inside(target, volume.target)
        if volume.target == target or _inside(volume.target, target) or inside:
            raise fail(where, f"{target} collides with the volume at {volume.target}")
    for what, other in others:
        if other == target or _inside(target, other) or _inside(other, target):
            raise fail(where, f"{target} collides with {what} {other}")


def _inside(path: str, outer: str) -> bool:
    """Whether `path` lies strictly inside the directory `outer`."""
    return path.startswith(outer.rstrip("/") + "/")


def _read(path: str, where: tuple[Part, ...], fail: Fail) -> str:
    """A config file's text, exactly as it is (line endings kept)."""
    try:
        size = os.stat(path).st_size
        if size > MAX_CONFIG_BYTES:
            raise fail(
                where, f"{path} is {size} bytes, over the {MAX_CONFIG_BYTES // 1024} KiB limit"
            )
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise fail(where, f"config file not found: {path}") from None
    except IsADirectoryError:
        raise fail(where, f"{path} is a directory: name a file") from None
    except UnicodeDecodeError:
        raise fail(
            where,
            f"{path} is not UTF-8 text (configs are text files): build it into the image, "
            "or use a volume",
        ) from None
    except OSError as exc:
        raise fail(where, f"cannot read config file {path}: {type(exc).__name__}") from None
    return text


def _read_dir(path: str, where: tuple[Part, ...], fail: Fail) -> list[tuple[str, str]]:
    """(path under the directory, text) of every file under `path`, in path order; links to
    files are read as their files, as a bind mount shows them. An empty directory is none."""
    if not os.path.isdir(path):
        found = "is not a directory" if os.path.exists(path) else "not found"
        raise fail(where, f"{path} {found}")
    files: list[tuple[str, str]] = []
    total = 0
    for top, dirs, names in os.walk(path):
        dirs.sort()
        for d in dirs:
            if os.path.islink(os.path.join(top, d)):
                shown = os.path.join(top, d)
                raise fail(where, f"{shown} is a link to a directory: copy what it holds")
        for name in sorted(names):
            full = os.path.join(top, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            if not os.path.isfile(full):
                raise fail(where, f"{full} is not a regular file: remove it from {path}")
            text = _read(full, where, fail)
            files.append((rel, text))
            total += len(text.encode())
            if len(files) > MAX_DIR_FILES or total > MAX_DIR_BYTES:
                raise fail(
                    where,
                    f"{path} holds more than {MAX_DIR_FILES} files or "
                    f"{MAX_DIR_BYTES // 1024 // 1024} MiB, what a directory of the controller "
                    "may ship: build them into the image, or use a volume",
                )
    return files
