"""Under `watch`, one `docker events` stream per host, on its pooled SSH connection.

Each stream follows the events of this cluster's containers that can change a decision
(commands.WATCHED_EVENTS: die, start, health_status, oom, destroy) and rings `on_event`
for each: the watch loop then runs a pass at once (core.watching.PassTimer coalesces the
rings of many hosts into one pass). A stream that breaks after it was up (its process
killed, sshd gone, the connection closed by its keepalives) rings too, since events may
have been lost, and is reopened after a pause (1 s, doubling to 30 s while it keeps
failing), with `--since` the last event it delivered (the host's clock), so events
meanwhile are replayed; a first stream replays from the second it started on the host
(commands.facts.events_argv), so what happened before docker subscribed it (a container
killed as the stream opened) is not lost either. A stream that has been open UP_AFTER
(1 s) rings once, so that a pass then sees what happened before the stream started. One
that cannot open at all (the host is off) rings nothing: the passes find that host (a
host whose stream is not up is probed by every pass). Between resyncs a pass probes only
the hosts whose stream rang or is not up (core.watching.probe_scope, `take`); every
other host's stream is up and silent, so its last observation stands; the resync probes
every host whatever the streams said.

Docker may say `die` before `docker ps` does: 20.10 logs the event, cleans the container
up (its network, its mounts: a while on a loaded host), and only then updates the view
`ps` reads, so a pass that probes at once may still see the container running. A stream
therefore keeps each container whose `die` came until a probe of its host shows it not
live (or its `start` or `destroy` came); until then its host counts as rung, and the
watch runs another pass soon (`unconfirmed`). A `die` no probe has confirmed within
core.watching.DIED_PATIENCE (its host does not answer, or `ps` never catches up) is let
go: the resync sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field

from minidock.commands.facts import event_since, events_argv, parse_event
from minidock.core.watching import unconfirmed_dies
from minidock.model import EngineKind, Host
from minidock.ssh import CommandTimeout, Executor, OutputLine, Unreachable

__all__ = ["EventStreams"]

log = logging.getLogger(__name__)

FIRST_PAUSE = 1.0  # seconds before a broken stream is reopened; doubles while it fails
LAST_PAUSE = 30.0
UP_AFTER = 1.0  # seconds a stream must have lasted (or a line) to count as having been up


@dataclass
class _Stream:
    """One host's stream: its task, and the last event it delivered (ns, host clock)."""

    host: Host
    cluster: str
    task: asyncio.Task[None] | None = None
    last_event: int = 0
    opened: int = 0  # how many times it was started
    broken: int = 0  # how many times it ended after it was up
    up: bool = False  # open, and up (a line came, or it lasted UP_AFTER): it would tell
    rung: bool = False  # it rang since the last pass took its rings (`take`)
    died: dict[str, float] = field(default_factory=dict)  # short id -> when its `die` came
    events: list[str] = field(default_factory=list)  # the last few actions (diagnostics)
    engine: EngineKind = "docker"  # its host's engine, as the last pass read it


class EventStreams:
    """The event streams of a watching controller, one per (cluster, host); `follow` sets
    which hosts, `close` ends them all. `on_event(host)` is called for every event and for
    every stream that broke after it was up."""

    def __init__(self, executor: Executor, on_event: Callable[[str], None]) -> None:
        self._executor = executor
        self._on_event = on_event
        self._streams: dict[tuple[str, str], _Stream] = {}

    def follow(self, cluster: str, hosts: Sequence[Host]) -> None:
        """Streams for exactly these hosts of `cluster`: new hosts get one, hosts gone from
        the inventory (or whose details changed) lose theirs (a changed one gets a new)."""
        wanted = {(cluster, h.name): h for h in hosts}
        for key, stream in list(self._streams.items()):
            if key[0] == cluster and wanted.get(key) != stream.host:
                self._end(key)
        for key, host in wanted.items():
            if key not in self._streams:
                stream = self._streams[key] = _Stream(host, cluster)
                stream.task = asyncio.create_task(self._keep(stream))

    def take(self, cluster: str) -> tuple[frozenset[str], frozenset[str]]:
        """For a pass of `cluster` about to probe: the hosts whose stream rang since the
        last take (their rings are now this pass's), and those whose stream is up, so
        that a host neither rang nor down is as its last probe saw it
        (core.watching.probe_scope)."""
        mine = [s for (c, _), s in self._streams.items() if c == cluster]
        rung = frozenset(s.host.name for s in mine if s.rung or s.died)
        for s in mine:
            s.rung = False
        return rung, frozenset(s.host.name for s in mine if s.up)

    def seen(self, cluster: str, live: Mapping[str, Set[str]]) -> None:
        """A pass of `cluster` observed these hosts, with these containers live (short
        ids): a `die` is confirmed once its container is not among them."""
        now = time.monotonic()
        for (c, name), stream in self._streams.items():
            if c == cluster:
                stream.died = unconfirmed_dies(stream.died, live.get(name), now)

    def engines(self, cluster: str, kinds: Mapping[str, EngineKind]) -> None:
        """Each host's engine as a pass read it: a stream whose host turns out another
        engine (Podman's events want their own template) is opened anew for it."""
        for (c, name), stream in self._streams.items():
            kind = kinds.get(name)
            if c != cluster or kind is None or kind == stream.engine:
                continue
            stream.engine = kind
            if stream.task is not None:
                stream.task.cancel()
            stream.task = asyncio.create_task(self._keep(stream))

    def unconfirmed(self) -> bool:
        """Whether a `die` came that no probe has shown yet: another pass is due soon."""
        return any(s.died for s in self._streams.values())

    def _ring(self, stream: _Stream) -> None:
        stream.rung = True
        self._on_event(stream.host.name)

    def _up(self, stream: _Stream) -> None:
        """The stream has been open UP_AFTER: from now on it would tell of a change; a
        pass then sees what happened before docker subscribed it."""
        stream.up = True
        self._ring(stream)

    def stream(self, cluster: str, host: str) -> _Stream | None:
        """A host's stream (tests and benchmarks read its counts)."""
        return self._streams.get((cluster, host))

    def _end(self, key: tuple[str, str]) -> None:
        stream = self._streams.pop(key)
        if stream.task is not None:
            stream.task.cancel()

    async def close(self) -> None:
        """End every stream (their sessions close)."""
        tasks = [s.task for s in self._streams.values() if s.task is not None]
        self._streams.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep(self, stream: _Stream) -> None:
        """Keep the host's stream open until cancelled: reopen it after each end."""
        pause = FIRST_PAUSE
        while True:
            up = await self._once(stream)
            stream.up = False
            if up:
                stream.broken += 1
                pause = FIRST_PAUSE
                self._ring(stream)  # events may have been lost meanwhile
            await asyncio.sleep(pause)
            pause = min(LAST_PAUSE, pause * 2)

    async def _once(self, stream: _Stream) -> bool:
        """Run the stream once, until it ends; whether it had been up (a line came, or it
        lasted UP_AFTER seconds)."""
        since = event_since(stream.last_event) if stream.last_event else ""
        argv = events_argv(stream.cluster, since, stream.engine)
        delivered = False

        def on_line(line: OutputLine) -> None:
            nonlocal delivered
            found = parse_event(line.text) if line.stream == "stdout" else None
            if found is None:
                log.info("%s: docker events: %s", stream.host.name, line.text)
                return
            delivered = stream.up = True
            stream.last_event = max(stream.last_event, found[2])
            if found[0] == "die":
                stream.died[found[1][:12]] = time.monotonic()
            elif found[0] in ("start", "destroy"):
                stream.died.pop(found[1][:12], None)
            stream.events = [*stream.events[-9:], found[0]]
            log.debug("%s: docker event %s %s", stream.host.name, found[0], found[1][:12])
            self._ring(stream)

        stream.opened += 1
        started = time.monotonic()
        # once up, a pass: what happened before docker subscribed it is not missed
        up = asyncio.get_running_loop().call_later(UP_AFTER, self._up, stream)
        try:
            status = await self._executor.follow(stream.host, argv, on_line)
            log.info("%s: docker events ended (exit %d)", stream.host.name, status)
        except (Unreachable, CommandTimeout) as exc:
            log.info("%s: docker events broke: %s", stream.host.name, exc.reason)
        finally:
            up.cancel()
        return delivered or time.monotonic() - started >= UP_AFTER
