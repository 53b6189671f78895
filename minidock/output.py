"""Where the command line prints: plain lines on a pipe or a file, rich on a terminal.

`Output` writes a text line straight to its stream when the stream is not a terminal (what
cron mail, scripts and tests read: no markup, no emoji codes, no wrapping), and so a cron
`minidock reconcile` never imports rich (about 60 ms of its start-up, docs/benchmarks.md).
On a terminal, or when rich's FORCE_COLOR / TTY_COMPATIBLE say to treat the stream as
one, everything goes to a rich Console, made on first use; tables always do.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Output", "Printer", "rich_console"]

RICH_SAYS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")  # rich decides, not isatty


class Printer(Protocol):
    """What prints a line: an `Output`, or a rich Console (tests hand one in)."""

    @property
    def is_terminal(self) -> bool: ...

    def print(self, *objects: Any, markup: bool | None = None) -> None: ...


class Output:
    """stdout (or stderr) of the command line; see the module's docstring."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The rich Console on this stream (rich is imported here, on first use)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        return self._console

    @property
    def is_terminal(self) -> bool:
        if self._console is None and not any(os.environ.get(k) for k in RICH_SAYS):
            return bool(_stream(self._stderr).isatty())
        return self.console.is_terminal

    def print(self, *objects: Any, markup: bool | None = None) -> None:
        """Each object on the stream: a line of text as it is when the stream is not a
        terminal; else (or a table) as rich renders it (`markup` as rich takes it)."""
        if all(isinstance(o, str) for o in objects) and not self.is_terminal:
            stream = _stream(self._stderr)
            stream.write(" ".join(objects) + "\n")
            stream.flush()
            return
        self.console.print(*objects, markup=markup)


def rich_console(printer: Printer) -> Console:
    """The rich Console behind `printer` (the live view and progress bars draw on it)."""
    if isinstance(printer, Output):
        return printer.console
    return printer  # type: ignore[return-value]  # a Console already


def _stream(stderr: bool) -> Any:
    return sys.stderr if stderr else sys.stdout
