"""Running things on this machine for the lab: local commands, pipes between two of them,
atomic file writes, and a little concurrency from synchronous code."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from minidock.lab import docker
from minidock.lab.errors import LabError

__all__ = ["Process", "engine_available", "parallel", "pipe", "run", "run_coro", "write_atomic"]

T = TypeVar("T")


@dataclass(frozen=True)
class Process:
    """What a local command did (output decoded, undecodable bytes replaced)."""

    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str


def _decode(data: bytes | None) -> str:
    return (data or b"").decode(errors="replace")


def failure(argv: Sequence[str], returncode: int, detail: str) -> LabError:
    return LabError(f"`{' '.join(argv)}` exited {returncode}: {detail.strip()}")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = 120.0,
) -> Process:
    """Run a local command; with check, raise LabError naming it and its stderr."""
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]}: not installed (run scripts/engine.sh)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    proc = Process(argv, done.returncode, _decode(done.stdout), _decode(done.stderr))
    if check and proc.returncode != 0:
        raise failure(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc


def pipe(
    producer: Sequence[str],
    consumer: Sequence[str],
    *,
    timeout: float = 300.0,
    before_consumer: Callable[[], None] | None = None,
) -> tuple[Process, Process]:
    """`producer | consumer` without a shell; returns both (the producer's stdout is empty:
    it went to the consumer). `before_consumer` runs once the producer has started, before
    the consumer starts (the producer blocks on a full pipe meanwhile). Raises LabError only
    when a command cannot start (or what `before_consumer` raises, the producer killed)."""
    try:
        with subprocess.Popen(
            list(producer), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as first:
            assert first.stdout is not None
            if before_consumer is not None:
                try:
                    before_consumer()
                except BaseException:
                    first.kill()
                    raise
            second = subprocess.run(
                list(consumer),
                stdin=first.stdout,
                capture_output=True,
                check=False,
                timeout=timeout,
            )
            first.stdout.close()
            _, first_err = first.communicate(timeout=timeout)
    except FileNotFoundError as exc:
        raise LabError(f"{exc.filename}: not installed (run scripts/engine.sh)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout}s: {' '.join(exc.cmd)}") from exc
    return (
        Process(producer, first.returncode, "", _decode(first_err)),
        Process(consumer, second.returncode, _decode(second.stdout), _decode(second.stderr)),
    )


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a file whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def run_coro(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even under a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def parallel(fn: Callable[[T], Any], items: Iterable[T]) -> None:
    """Call fn on every item concurrently; re-raise the first failure."""
    items = list(items)
    if not items:
        return
    with ThreadPoolExecutor(len(items)) as pool:
        for future in [pool.submit(fn, item) for item in items]:
            future.result()


def engine_available() -> bool:
    """True when a Docker engine answers `docker info`."""
    try:
        return run(docker.info_argv(), check=False, timeout=20).returncode == 0
    except LabError:
        return False


_engine_seen = False  # once an engine answered, this process does not ask again


def wait_for_engine(timeout: float) -> None:
    """Return once a Docker engine answers (at once when one did before in this process);
    LabError after `timeout` seconds without one. A build started while the engine is still
    being installed (scripts/setup.sh --demo) waits here before its `docker import`."""
    global _engine_seen
    deadline = time.monotonic() + timeout
    while not _engine_seen:
        if engine_available():
            _engine_seen = True
        elif time.monotonic() >= deadline:
            raise LabError(f"no Docker engine answered within {timeout:.0f}s (scripts/engine.sh)")
        else:
            time.sleep(0.5)
