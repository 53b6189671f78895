"""Building the lab's images in the background, a bounded number at once.

The lab's images do not depend on one another (each is its own `docker import`), but what
uses them does: the host containers need the host image, and each host needs the images
loaded into it. `Builds` starts every build at once, at most `workers` running (a build is
mostly mmdebstrap: one core's work), in the order `build_order` gives: the host image first,
since the containers wait for it, then the cheapest, so the quick ones never wait behind a
long one. `wait(name)` blocks until that one is done, so `lab up` starts the containers
while the proxies' images are still building, and loads each image when it is there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

from minidock.lab.errors import LabError

__all__ = ["HOST", "Builds", "Job", "build_order", "workers_for"]

HOST = "host"  # the host image's build: always first
Job = Callable[[], dict[str, float]]  # builds what is missing; seconds per image it built


def build_order(names: Iterable[str], cost: Mapping[str, float]) -> list[str]:
    """The order to start builds in: the host image first, then the others by `cost`
    (a rough expected time; unknown names last), cheapest first, ties by name."""
    unique = dict.fromkeys(names)
    rest = sorted((n for n in unique if n != HOST), key=lambda n: (cost.get(n, float("inf")), n))
    return [HOST, *rest] if HOST in unique else rest


def workers_for(jobs: int, cpus: int | None = None) -> int:
    """How many builds run at once: one a core, never more than there are builds."""
    return max(1, min(jobs, cpus if cpus is not None else (os.cpu_count() or 1)))


class Builds:
    """Jobs started in the order given, at most `workers` at once (a thread each, since a
    build waits on its subprocesses). Use as a context manager: leaving it waits for every
    job (and drops the ones not started when leaving on an error)."""

    def __init__(self, jobs: Mapping[str, Job], workers: int | None = None) -> None:
        count = workers if workers is not None else workers_for(len(jobs))
        self._pool = ThreadPoolExecutor(max_workers=max(1, count), thread_name_prefix="lab-build")
        self._futures: dict[str, Future[dict[str, float]]] = {}
        for name, job in jobs.items():  # a pool runs its queue in order: the start order
            self._futures[name] = self._pool.submit(job)

    def __enter__(self) -> Builds:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._pool.shutdown(wait=True, cancel_futures=exc is not None)

    @property
    def names(self) -> list[str]:
        return list(self._futures)

    def wait(self, name: str) -> dict[str, float]:
        """Block until the build `name` is done; its timings, or its error re-raised. A
        name not started here has nothing to wait for."""
        future = self._futures.get(name)
        if future is None:
            return {}
        return future.result()

    def wait_all(self) -> dict[str, float]:
        """Every build's timings, waiting for each; the first error (in start order) is
        raised after all have finished, so no build is left running behind it."""
        timings: dict[str, float] = {}
        errors: list[BaseException] = []
        for future in self._futures.values():
            try:
                timings.update(future.result())
            except (LabError, OSError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return timings
