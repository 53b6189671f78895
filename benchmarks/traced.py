"""`python benchmarks/traced.py DIR ARGS...`: `minidock ARGS...` with MiniDock's debug lines
written to DIR/PID.log, each after the system's monotonic clock (comparable between
processes on one machine, as bench_watches.py's own times are): the timeline of a
death or a failover across watches (`bench_watches.py --trace DIR`). The SSH adapter's
lines are left out: they name each command with its arguments, a task's environment
among them. For benchmarks only; MiniDock itself configures no logging."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path


class Monotonic(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{time.monotonic():.3f} {record.name} {record.getMessage()}"


def main() -> None:
    trace = Path(sys.argv[1])
    handler = logging.FileHandler(trace / f"{os.getpid()}.log")
    handler.setFormatter(Monotonic())
    root = logging.getLogger("minidock")
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    logging.getLogger("minidock.ssh").setLevel(logging.INFO)
    sys.argv = ["minidock", *sys.argv[2:]]
    from minidock.cli import main as minidock

    minidock()


if __name__ == "__main__":
    main()
