"""The local end of an interactive session (`minidock exec -it`): which file descriptors
it joins, raw mode for the local terminal while a remote PTY is attached, window-size
changes passed on, and the copying of bytes both ways. The SSH executor opens the session
(`SSHExecutor.attach`); this module only pumps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import termios
import tty
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Terminal", "pump", "terminal_type"]

CHUNK = 65536
DEFAULT_SIZE = (80, 24)


@dataclass(frozen=True)
class Terminal:
    """File descriptors of the local side. `interactive`: local stdin is sent to the
    command (else it gets end-of-file at once); `tty`: the command runs on a PTY and the
    local terminal is put in raw mode for the session."""

    stdin: int = 0
    stdout: int = 1
    stderr: int = 2
    interactive: bool = False
    tty: bool = False

    def size(self) -> tuple[int, int]:
        """(columns, rows) of the local terminal, or 80x24 when it is not one."""
        try:
            columns, rows = os.get_terminal_size(self.stdout)
        except OSError:
            return DEFAULT_SIZE
        return columns, rows


def terminal_type() -> str:
    return os.environ.get("TERM") or "xterm"


@contextlib.contextmanager
def _raw(terminal: Terminal) -> Iterator[None]:
    """The local terminal in raw mode (keys pass through, Ctrl-C included), restored after."""
    if not (terminal.tty and os.isatty(terminal.stdin)):
        yield
        return
    saved = termios.tcgetattr(terminal.stdin)
    tty.setraw(terminal.stdin, termios.TCSADRAIN)  # not TCSAFLUSH: keep what was typed ahead
    try:
        yield
    finally:
        termios.tcsetattr(terminal.stdin, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _resizing(process: Any, terminal: Terminal) -> Iterator[None]:
    """Pass local window-size changes (SIGWINCH) on to the remote PTY."""
    if not terminal.tty:
        yield
        return
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGWINCH, lambda: process.change_terminal_size(*terminal.size()))
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)


async def _copy_out(stream: Any, fd: int) -> None:
    while data := await stream.read(CHUNK):
        os.write(fd, data)


async def _copy_in(process: Any, fd: int) -> None:
    """Local stdin to the command until end-of-file: through the event loop for a terminal
    or a pipe, in chunks for a regular file (which the loop cannot watch)."""
    loop = asyncio.get_running_loop()
    if stat.S_ISREG(os.fstat(fd).st_mode):
        while data := os.read(fd, CHUNK):
            process.stdin.write(data)
            await process.stdin.drain()
        process.stdin.write_eof()
        return
    finished = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, CHUNK)
        except OSError:
            data = b""
        if data:
            process.stdin.write(data)
            return
        loop.remove_reader(fd)
        process.stdin.write_eof()
        if not finished.done():
            finished.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await finished
    finally:
        loop.remove_reader(fd)


async def pump(process: Any, terminal: Terminal) -> None:
    """Copy bytes between an open session (asyncssh, binary) and the local terminal until
    the command ends; the local stdin stops being read then, whether or not it ended."""
    with _raw(terminal), _resizing(process, terminal):
        feeding: asyncio.Task[None] | None = None
        if terminal.interactive:
            feeding = asyncio.ensure_future(_copy_in(process, terminal.stdin))
        else:
            process.stdin.write_eof()
        try:
            await asyncio.gather(
                _copy_out(process.stdout, terminal.stdout),
                _copy_out(process.stderr, terminal.stderr),
            )
            await process.wait_closed()
        finally:
            if feeding is not None:
                feeding.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await feeding
