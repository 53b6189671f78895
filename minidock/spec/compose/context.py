"""What a translation carries: the file, its directory, the environment, and its record of
where each TOML value came from and what it warned about; and the one-line error."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from minidock.spec.compose.yamldoc import Part, YDict, line_of, render
from minidock.spec.errors import SpecError

__all__ = ["ComposeError", "Context", "TomlPath"]

TomlPath = tuple[Part, ...]


class ComposeError(SpecError):
    """A problem in a Compose file: `FILE: KEY.PATH (line N): message`, one line."""

    def __str__(self) -> str:
        where = self.file
        if self.path:
            where += f": {self.path}"
            if self.line is not None:
                where += f" (line {self.line})"
        elif self.line is not None:
            where += f": line {self.line}"
        return " ".join(f"{where}: {self.message}".splitlines())


@dataclass
class Context:
    """One Compose file's translation: `fail` and `warn` name the Compose key and its line;
    `came_from` records which Compose key gave a TOML key, so that an error the cluster
    schema or the model finds later is told about the Compose key too."""

    display: str
    base: str
    doc: YDict
    lookup: Mapping[str, str]
    origins: dict[TomlPath, tuple[Part, ...]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def fail(self, parts: Sequence[Part], message: str) -> ComposeError:
        """The error about the Compose key at `parts` (raise it)."""
        return ComposeError(self.display, render(parts), message, line=line_of(self.doc, parts))

    def warn(self, parts: Sequence[Part], message: str) -> None:
        """A warning about the Compose key at `parts`, one line, said once."""
        line = line_of(self.doc, parts)
        at = f" (line {line})" if line is not None else ""
        text = f"{self.display}: {render(parts)}{at}: {message}"
        if text not in self.warnings:
            self.warnings.append(text)

    def came_from(self, toml: TomlPath, parts: Sequence[Part]) -> None:
        """The TOML value at `toml` was made from the Compose key at `parts`."""
        self.origins.setdefault(toml, tuple(parts))

    def path(self, value: str) -> str:
        """A path of the controller's, as written in the file: relative to its directory."""
        return os.path.normpath(os.path.join(self.base, os.path.expanduser(value)))


def describe(value: Any) -> str:
    """A YAML value named by its type, for 'expected ..., got ...' messages."""
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value[:57] + '...' if len(value) > 60 else value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
