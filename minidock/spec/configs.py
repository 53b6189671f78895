"""A service's `configs` into ConfigFiles: files from the controller, read at apply, put
read-only into each task (docs/configs.md).

The checks the schema cannot express: an absolute, normal path in the task; no path that
another config or a volume already mounts, or that lies inside another config (a file has
no inside); a file that exists and is UTF-8 text; at most `MAX_CONFIG_BYTES`.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from minidock.model import ConfigFile, Volume
from minidock.spec.errors import Fail, Part
from minidock.spec.reading import resolve

__all__ = ["MAX_CONFIG_BYTES", "build_configs", "check_task_path"]

MAX_CONFIG_BYTES = 500 * 1024  # per config, as Swarm's configs; the state keeps each one


def build_configs(
    table: dict[str, dict[str, str]],
    volumes: Sequence[Volume],
    at: tuple[Part, ...],
    fail: Fail,
    base: str,
) -> tuple[ConfigFile, ...]:
    """Each `"/path/in/task" = { file = ... } | { content = ... }`, read now, by target."""
    configs: list[ConfigFile] = []
    for target, source in table.items():
        where = (*at, target)
        others = [("the config at", c.target) for c in configs]
        check_task_path(target, volumes, others, where, fail)
        if "file" in source:
            content = _read(resolve(base, source["file"]), (*where, "file"), fail)
        else:
            content = source["content"]
        size = len(content.encode())
        if size > MAX_CONFIG_BYTES:
            raise fail(where, f"{size} bytes is over the {MAX_CONFIG_BYTES // 1024} KiB limit")
        configs.append(ConfigFile(target, content))
    return tuple(sorted(configs, key=lambda c: c.target))


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
    for i, volume in enumerate(volumes):
        inside = not in_volumes and _inside(target, volume.target)
        if volume.target == target or _inside(volume.target, target) or inside:
            raise fail(where, f"{target} collides with volumes[{i}] ({volume.target})")
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
        raise fail(where, f"{path} is not UTF-8 text (configs are text files)") from None
    except OSError as exc:
        raise fail(where, f"cannot read config file {path}: {type(exc).__name__}") from None
    return text
