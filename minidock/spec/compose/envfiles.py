"""Dotenv files, read with python-dotenv: the `.env` beside a Compose file (variables for
interpolation) and a service's `env_file` (variables for its tasks)."""

from __future__ import annotations

import io
from collections.abc import Mapping

from dotenv import dotenv_values
from dotenv.parser import parse_stream

__all__ = ["EnvFileProblem", "read_env_file"]


class EnvFileProblem(Exception):
    """A dotenv file that cannot be read or has a line that is not `KEY=VALUE`."""


def read_env_file(path: str, lookup: Mapping[str, str]) -> dict[str, str]:
    """The variables of a dotenv file: `KEY=VALUE`, quoted or not, `export KEY=...`,
    comments; `${VAR}` and `${VAR:-default}` expanded from the lines above and the
    environment; a line `KEY` alone takes KEY from `lookup` (dropped when unset there)."""
    try:
        with open(path, encoding="utf-8") as fh:
            content = fh.read()
    except FileNotFoundError:
        raise EnvFileProblem(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileProblem(f"cannot read {path}: {type(exc).__name__}") from None
    for binding in parse_stream(io.StringIO(content)):
        if binding.error:
            line = binding.original.line
            raise EnvFileProblem(f"{path} line {line}: not KEY=VALUE")
    values: dict[str, str] = {}
    for key, value in dotenv_values(stream=io.StringIO(content), interpolate=True).items():
        if value is not None:
            values[key] = value
        elif key in lookup:
            values[key] = lookup[key]
    return values
