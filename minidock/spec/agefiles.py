"""age-encrypted secret documents (docs/secrets.md#from-an-age-encrypted-file):
`{ age_file = "secrets/prod.age", key = "DB_PASSWORD", identity = "~/.config/age/key.txt" }`.

The file is decrypted on the controller at apply by Debian's `age` binary (`age --decrypt
-i IDENTITY FILE`; an `identity_command`'s output is given on its stdin as `-i -`), through
the same runner as a `command` source (minidock.spec.sources: no shell, a timeout, one
line on failure). The plain text, never written to disk, is a dotenv document (`KEY=VALUE`
lines, as python-dotenv reads them, without interpolation) or a JSON object of strings;
each file is decrypted once per load however many keys it gives. A document's problem
names its file and line number, never the line's text (a password wrapped onto a line of its
own would be shown). `encrypt` writes a document back for `minidock secrets edit`.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

from dotenv import dotenv_values
from dotenv.parser import parse_stream

from minidock.spec.compose.envfiles import line_of
from minidock.spec.errors import Fail, Part, SpecError
from minidock.spec.messages import did_you_mean
from minidock.spec.reading import resolve
from minidock.spec.sources import (
    DEFAULT_TIMEOUT,
    cached_document,
    check_secret_mode,
    remember,
    run_program,
)

__all__ = [
    "AGE",
    "DEFAULT_IDENTITY",
    "age_value",
    "decrypt",
    "encrypt",
    "parse_document",
]

AGE = "age"  # Debian's package of the same name: the format's reference implementation
DEFAULT_IDENTITY = "~/.config/age/key.txt"
_HINT = " (Debian and Ubuntu: apt-get install age)"
_NOISE = ("age: report unexpected",)  # age's second line on every error: a web address
# A line of one word: a name without its value, or a value wrapped onto a line of its own.
# Never quoted in a message: that line may be (part of) a password.
_BARE = "a line without `=`: write NAME=VALUE on one line (a long value may not wrap)"


def age_value(
    source: dict[str, Any],
    where: tuple[Part, ...],
    fail: Fail,
    base: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """The value under `key` of the age-encrypted document `age_file`."""
    path = resolve(base, source["age_file"])
    identity = source.get("identity", DEFAULT_IDENTITY)
    by_command = tuple(source.get("identity_command", ()))
    how = ("command", *by_command) if by_command else ("file", resolve(base, identity))

    def read() -> dict[str, str]:
        given = _identity(source, identity, by_command, where, fail, base, timeout)
        plain = decrypt(path, given, (*where, "age_file"), fail, base, timeout=timeout)
        return parse_document(plain, path, (*where, "age_file"), fail)

    document = cached_document((path, *how), read)
    key = source["key"]
    if key not in document:
        hint = did_you_mean(key, document)
        raise fail((*where, "key"), f"{key} is not a key of {path}{hint}")
    value = document[key]
    remember(value)
    return value


def _identity(
    source: dict[str, Any],
    identity: str,
    by_command: Sequence[str],
    where: tuple[Part, ...],
    fail: Fail,
    base: str,
    timeout: float,
) -> tuple[str, bytes | None]:
    """What `age -i` is given: a path, or "-" with an identity command's output."""
    if by_command:
        text = run_program(by_command, (*where, "identity_command"), fail, base, timeout=timeout)
        remember(text)
        return "-", text.encode()
    path = resolve(base, identity)
    at = (*where, "identity") if "identity" in source else where
    try:
        check_secret_mode(path, os.stat(path).st_mode, at, fail)
    except FileNotFoundError:
        raise fail(
            at, f'age identity not found: {path} (give identity = "PATH" of your key file)'
        ) from None
    return path, None


def decrypt(
    path: str,
    identity: tuple[str, bytes | None],
    where: Sequence[Part],
    fail: Fail,
    base: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """The plain text of the age file `path`, decrypted with `identity` (a path, or "-"
    and the identity's text)."""
    if not os.path.isfile(path):
        raise fail(where, f"age file not found: {path}")
    named, text = identity
    argv = [AGE, "--decrypt", "-i", named, path]
    return run_program(
        argv, where, fail, base, timeout=timeout, stdin=text, hint=_HINT, noise=_NOISE
    )


def encrypt(
    plain: str,
    recipients_file: str,
    out: str,
    where: Sequence[Part],
    fail: Fail,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """`plain` encrypted to every recipient of `recipients_file` (age's -R), into `out`."""
    argv = [AGE, "--encrypt", "-R", recipients_file, "-o", out]
    base = os.path.dirname(out) or "."
    run_program(
        argv, where, fail, base, timeout=timeout, stdin=plain.encode(), hint=_HINT, noise=_NOISE
    )


def parse_document(text: str, path: str, where: Sequence[Part], fail: Fail) -> dict[str, str]:
    """A decrypted document's keys and values: a JSON object of strings, else dotenv."""
    if text.lstrip().startswith("{"):
        return _json_document(text, path, where, fail)
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise fail(where, f"{path} line {line_of(binding)}: not KEY=VALUE")
        if binding.key is not None and binding.value is None:
            raise fail(where, f"{path} line {line_of(binding)}: {_BARE}")
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {k: v for k, v in values.items() if v is not None}


def _json_document(text: str, path: str, where: Sequence[Part], fail: Fail) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(where, f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise fail(where, f"{path}: give a JSON object of names to strings")
    for key, value in doc.items():
        if not isinstance(value, str):
            raise fail(where, f"{path}: {key} is not a string: write its value in quotes")
    return doc


def check_document(text: str, path: str) -> str | None:
    """What is wrong with a document's text (for `secrets edit`), or None."""

    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(path, "", message)

    try:
        parse_document(text, path, (), fail)
    except SpecError as exc:
        return exc.message
    return None
