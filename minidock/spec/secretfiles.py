"""A service's `secret_files` into SecretFiles: secrets read on the controller at apply and
given to each task as files (docs/secrets.md).

The checks the schema cannot express: one source (`file` or `env`); a path in the task that
is absolute and plain, that no volume, config or other secret file mounts, and that lies
inside no volume (Docker would copy the secret into the volume, or onto the host through a
bind mount); a controller file that exists, is UTF-8 text, at most `MAX_SECRET_BYTES`, and
that only its owner may read (as for `secrets`); a task whose root filesystem is writable
(Docker copies into it before the task starts). No message ever shows a value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from minidock.model import ConfigFile, SecretFile, Volume
from minidock.spec.agefiles import age_value
from minidock.spec.configs import check_task_path, mounted
from minidock.spec.errors import Fail, Part
from minidock.spec.messages import ONE_SOURCE
from minidock.spec.reading import resolve
from minidock.spec.sources import check_secret_mode, command_timeout, command_value, remember

__all__ = [
    "MAX_SECRET_BYTES",
    "build_secret_files",
    "one_source",
    "program_value",
]

MAX_SECRET_BYTES = 500 * 1024  # per secret, as Swarm's; the state keeps each one, sealed


def build_secret_files(
    body: dict[str, Any],
    volumes: Sequence[Volume],
    configs: Sequence[ConfigFile],
    at: tuple[Part, ...],
    fail: Fail,
    base: str,
) -> tuple[SecretFile, ...]:
    """Each `"/path/in/task" = { file = ... } | { env = ... }` of the service `body` (at
    `at`), read now, sorted by target."""
    table: dict[str, dict[str, Any]] = body.get("secret_files", {})
    if table and body.get("read_only", False):
        raise fail(
            (*at, "read_only"),
            "a read-only task cannot be given secret_files (Docker copies them into the "
            "task's filesystem before it starts): remove read_only, or give the secrets as "
            "environment values in secrets",
        )
    files: list[SecretFile] = []
    for target, source in table.items():
        where = (*at, "secret_files", target)
        others = mounted(configs)
        others += [("the secret file at", f.target) for f in files]
        check_task_path(target, volumes, others, where, fail, in_volumes=False)
        value = _value(source, where, fail, base)
        mode = int(source.get("mode", "0444"), 8)
        if mode & 0o022:
            raise fail(
                (*where, "mode"), f"{mode:04o} lets others write the secret: give one like 0440"
            )
        files.append(SecretFile(target, value, source.get("uid", 0), source.get("gid", 0), mode))
    return tuple(sorted(files, key=lambda f: f.target))


# each kind of secret source, and the keys that may go with it
_SOURCES = {
    "file": (),
    "env": (),
    "command": ("timeout",),
    "age_file": ("key", "identity", "identity_command", "timeout"),
}


def one_source(source: dict[str, Any], where: tuple[Part, ...], fail: Fail) -> str:
    """The kind of a secret source (its one key of `_SOURCES`); the keys beside it must be
    its own (`timeout` with a `command`)."""
    given = [key for key in _SOURCES if key in source]
    if len(given) != 1:
        raise fail(where, ONE_SOURCE)
    kind = given[0]
    if kind == "age_file" and "key" not in source:
        raise fail(where, 'give the key = "NAME" of the age file\'s document beside age_file')
    if "identity" in source and "identity_command" in source:
        raise fail((*where, "identity_command"), "give one of identity or identity_command")
    for key in source:
        if key in (*_SOURCES, "uid", "gid", "mode") or key in _SOURCES[kind]:
            continue
        raise fail((*where, key), f"{key} does not go with {kind}: remove it")
    return kind


def program_value(
    kind: str,
    source: dict[str, Any],
    where: tuple[Part, ...],
    fail: Fail,
    base: str,
    *,
    exact: bool,
) -> str:
    """The value of a source that runs a program on the controller: a `command`, or `age`
    for an `age_file`."""
    if kind == "age_file":
        timeout = command_timeout(source, where, fail)
        return age_value(source, where, fail, base, timeout=timeout)
    return command_value(source, where, fail, base, exact=exact)


def secret_text(path: str, where: tuple[Part, ...], fail: Fail, what: str = "secret") -> str:
    """A secret file's value (one trailing newline dropped); refused when its mode lets
    others write it (check_secret_mode). `what` names it in errors ("secret", "password")."""
    try:
        check_secret_mode(path, os.stat(path).st_mode, where, fail)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise fail(where, f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(where, f"cannot read {what} file {path}: {type(exc).__name__}") from None
    return text[:-1] if text.endswith("\n") else text


def password_text(path: str, where: tuple[Part, ...], fail: Fail) -> str:
    """A password file's value, read as a secret file's."""
    return secret_text(path, where, fail, "password")


def source_value(
    source: dict[str, Any],
    where: tuple[Part, ...],
    fail: Fail,
    base: str,
    *,
    read_file: Callable[[str, tuple[Part, ...], Fail], str],
    exact: bool,
) -> str:
    """The text of one secret source (`{ file }`, `{ env }`, `{ command }`, `{ age_file }`:
    `one_source`), read now and remembered by the masker; a file read by `read_file`, a
    program's output byte for byte when `exact`, else with one trailing newline dropped."""
    kind = one_source(source, where, fail)
    if kind == "file":
        value = read_file(resolve(base, source["file"]), (*where, "file"), fail)
    elif kind == "env":
        name = source["env"]
        if name not in os.environ:
            raise fail((*where, "env"), f"{name} is not set in the controller's environment")
        value = os.environ[name]
    else:
        value = program_value(kind, source, where, fail, base, exact=exact)
    remember(value)
    return value


def _value(source: dict[str, Any], where: tuple[Part, ...], fail: Fail, base: str) -> str:
    """A secret file's text, from its one source: a file or a command's output as it is,
    or the controller's environment variable (within the size limit)."""
    value = source_value(source, where, fail, base, read_file=_read, exact=True)
    if "env" in source and len(value.encode()) > MAX_SECRET_BYTES:
        raise fail((*where, "env"), f"over the {MAX_SECRET_BYTES // 1024} KiB limit")
    return value


def _read(path: str, where: tuple[Part, ...], fail: Fail) -> str:
    """A secret file's text exactly as it is (line endings kept); refused when others may
    read or write it."""
    limit = f"{MAX_SECRET_BYTES // 1024} KiB"
    try:
        found = os.stat(path)
        check_secret_mode(path, found.st_mode, where, fail)
        if found.st_size > MAX_SECRET_BYTES:
            raise fail(where, f"{path} is {found.st_size} bytes, over the {limit} limit")
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        raise fail(where, f"secret file not found: {path}") from None
    except IsADirectoryError:
        raise fail(where, f"{path} is a directory: name a file") from None
    except UnicodeDecodeError:
        raise fail(
            where, f"{path} is not UTF-8 text (secret files are text: store a binary one base64)"
        ) from None
    except OSError as exc:
        raise fail(where, f"cannot read secret file {path}: {type(exc).__name__}") from None
