"""`python benchmarks/traced.py DIR ARGS...`: `minidock ARGS...` with MiniDock's debug lines
written to DIR/PID.log, each after the system's monotonic clock (comparable between
processes on one machine, as bench_watches.py's own times are): the timeline of a
death or a failover across watches (`bench_watches.py --trace DIR`). The SSH adapter's
lines are left out: they name each command with its arguments, a task's environment
among them. On SIGUSR1 it writes every thread's and every asyncio task's stack to
DIR/PID.stacks (what a watch that went silent is waiting on), and its end, however it
came, is its log's last line. For benchmarks only; MiniDock itself configures no
logging."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType


class Monotonic(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{time.monotonic():.3f} {record.name} {record.getMessage()}"


def stacks_to(path: Path) -> None:
    """On SIGUSR1, every thread's stack and every task of the running loop, to `path`."""

    def dump(signum: int, frame: FrameType | None) -> None:
        with path.open("a") as out:
            print(f"--- {time.monotonic():.3f}", file=out)
            faulthandler.dump_traceback(out, all_threads=True)
            try:
                tasks = asyncio.all_tasks(asyncio.get_running_loop())
            except RuntimeError:
                tasks = set()
            for task in tasks:
                task.print_stack(file=out)

    signal.signal(signal.SIGUSR1, dump)


def main() -> None:
    trace = Path(sys.argv[1])
    stacks_to(trace / f"{os.getpid()}.stacks")
    handler = logging.FileHandler(trace / f"{os.getpid()}.log")
    handler.setFormatter(Monotonic())
    root = logging.getLogger("minidock")
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    logging.getLogger("minidock.ssh").setLevel(logging.INFO)  # not every command: its connects
    logging.getLogger("minidock.ssh.connects").setLevel(logging.DEBUG)
    sys.argv = ["minidock", *sys.argv[2:]]
    from minidock.cli import main as minidock

    try:
        minidock()
    except BaseException as exc:
        root.debug("traced: ends: %r", exc)
        raise
    root.debug("traced: ends")


if __name__ == "__main__":
    main()
