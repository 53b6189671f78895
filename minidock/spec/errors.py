"""The one error every spec problem becomes, and the types the readers share."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

__all__ = ["Fail", "Part", "SpecError", "StrPath"]

Part = str | int
StrPath = str | os.PathLike[str]
Fail = Callable[[Sequence[Part], str], "SpecError"]


class SpecError(Exception):
    """A problem in an inventory or cluster file, located by file and dotted key path.

    `path` is like `services.web.update.parallelism` or `hosts[1].name` ("" for the whole
    file); `line` and `column` are set for malformed TOML. `str()` is one line.
    """

    def __init__(
        self,
        file: str,
        path: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(file, path, message)
        self.file = file
        self.path = path
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        return " ".join(f"{where}: {self.message}".splitlines())
