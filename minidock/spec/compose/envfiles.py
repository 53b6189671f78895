"""Dotenv files, read with python-dotenv: the `.env` beside a Compose file (variables for
interpolation) and a service's `env_file` (variables for its tasks)."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping

from dotenv import dotenv_values
from dotenv.parser import Binding, parse_stream

__all__ = ["EnvFileProblem", "line_of", "read_env_file"]


class EnvFileProblem(Exception):
    """A dotenv file that cannot be read or has a line that is not `KEY=VALUE`."""


def read_env_file(
    path: str, lookup: Mapping[str, str], names: re.Pattern[str] | None = None
) -> dict[str, str]:
    """The variables of a dotenv file: `KEY=VALUE`, quoted or not, `export KEY=...`,
    comments; `${VAR}` and `${VAR:-default}` expanded from the lines above and the
    environment; a line `KEY` alone takes KEY from `lookup` (dropped when unset there).
    With `names`, a KEY it does not match is refused by its line number: a value wrapped
    onto a line of its own would read as a name, and the name be shown."""
    try:
        with open(path, encoding="utf-8") as fh:
            content = fh.read()
    except FileNotFoundError:
        raise EnvFileProblem(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileProblem(f"cannot read {path}: {type(exc).__name__}") from None
    for binding in parse_stream(io.StringIO(content)):
        if binding.error:
            raise EnvFileProblem(f"{path} line {line_of(binding)}: not KEY=VALUE")
        if names is not None and binding.key is not None and not names.fullmatch(binding.key):
            raise EnvFileProblem(
                f"{path} line {line_of(binding)}: not an environment variable name before "
                "its `=` (letters, digits, '_', '.' and '-', not starting with a digit)"
            )
    values: dict[str, str] = {}
    for key, value in dotenv_values(stream=io.StringIO(content), interpolate=True).items():
        if value is not None:
            values[key] = value
        elif key in lookup:
            values[key] = lookup[key]
    return values


def line_of(binding: Binding) -> int:
    """The line a dotenv binding starts on: python-dotenv counts the blank lines before it
    as its own. Messages name a dotenv line by this number, never by its text (a value
    wrapped onto a line of its own is a secret)."""
    text = binding.original.string
    return binding.original.line + text[: len(text) - len(text.lstrip())].count("\n")
