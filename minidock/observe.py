"""Observe the fleet: what runs on every host, read with `docker ps` + `docker inspect`.

Every host is probed concurrently. A probe fails (HostObservation.ok is False, with a
one-line error that does not repeat the host name) when SSH fails, when docker fails, or
when its output cannot be parsed: a failed probe is never read as "no containers". Each
probe command is bounded by `host.probe_timeout`; one that times out fails the probe and
drops the host's pooled connection, so the next pass reconnects (bounded by
`connect_timeout`) instead of waiting on a connection to a host that is cut off or hung.

Over SSH (an executor that can batch: `ssh.BatchExecutor`), a probe is one round trip:
its commands run in one session, in order, each read as if it had run alone, and
`probe_timeout` bounds them together. At fleet size that is what a probe costs: one
session per host, as a bare fan-out pays (docs/benchmarks.md). Other executors (the unit
tests' fakes) get the commands one at a time, ps and the port reads at once.

A probe is light in steady state: `docker ps` lists each container with its state and
health (commands.facts.ps_argv), and `docker inspect` runs only for the containers whose
listing key (commands.facts.listing_key: id, state, health) differs from what `memory` (a
`ProbeMemory`: watch keeps one per cluster across passes) inspected last; the others'
inspect is remembered. A memory also keeps each host's last answer times, from which the
probe's answer deadline is made (core.watching.answer_deadline): the session must open
within `probe_timeout` (the host's sshd answers), then docker is given the deadline; a host
that answers late is `slow` (reported, its probe good), one whose docker does not answer
by the deadline is a slow failure that never counts towards `down_after`.

With `ports=True` the probe also reads which host ports are held outside the cluster
(`HostObservation.ports_in_use`): listening sockets from /proc/net and other containers'
published ports, read at the same time as `docker ps` on the same connection. That read
is best effort: when it fails the probe still stands on what docker said, with an empty
set, and the failure is logged (INFO).

The probe also reads the host's engine and version (`docker version`: Docker or Podman,
HostObservation.engine), once per host for a memory (again after a failed probe), in the
same round trip; a memory may be told the engines the state recorded (runner.decide_pass:
core.hosts.engine_known), and `engine_read` says whether this probe read it. An engine
MiniDock does not drive (core.engines.refusal) fails the probe with one line naming the
engine and the feature, `refused`: never counted towards `down_after` (docs/hosts.md,
"Engines"). A version that cannot be read is no failure:
the engine is then unknown (logged, INFO).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import TypeGuard

from minidock.commands.facts import (
    ParseError,
    inspect_argv,
    parse_inspect_all,
    parse_listing,
    parse_oneoffs,
    parse_proc_net,
    parse_published_ports,
    parse_version,
    ports_held_outside,
    proc_net_argv,
    proc_net_missing_only,
    ps_argv,
    published_ports_argv,
    version_argv,
)
from minidock.core.engines import refusal
from minidock.core.watching import HISTORY, answer_deadline, slow, to_inspect
from minidock.model import Container, Engine, Host, HostObservation, Observed, OneOff
from minidock.ssh import BatchExecutor, CommandTimeout, Executor, Result, Step, Unreachable

__all__ = [
    "ProbeMemory",
    "observe",
    "observe_host",
    "port_tables",
    "ports_in_use",
    "told_engines",
]

log = logging.getLogger(__name__)

_VANISHED = re.compile(r"Error(?: response from daemon)?: No such (?:container|object): \S+")
_MAX_ERROR = 200


def _failure(result: Result, what: str) -> str:
    detail = " ".join((result.stderr.strip() or result.stdout.strip()).split())
    return f"{what} failed (exit {result.exit_status}): {detail}"[:_MAX_ERROR]


def _only_vanished(result: Result) -> bool:
    """inspect failed only because containers were removed after `docker ps` listed them."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return bool(lines) and all(_VANISHED.fullmatch(line) for line in lines)


def _failed(host: Host, error: str, cause: str = "") -> HostObservation:
    """A failed probe; `cause` kept where it says it without naming the host (else the
    error is its own cause: HostObservation.why_not)."""
    error, cause = " ".join(error.split()), " ".join(cause.split())
    return HostObservation(host.name, False, error=error, cause="" if cause == error else cause)


@dataclass(frozen=True)
class _Inspected:
    """One listed container as its last inspect read it: under its listing key."""

    key: str
    containers: tuple[Container, ...]  # itself, when it is a MiniDock task (any cluster)
    oneoffs: tuple[OneOff, ...]  # itself, when it is one of this cluster's one-off tasks


class ProbeMemory:
    """What a long-lived controller (`watch`) remembers of each host between its probes:
    the containers it inspected, by listing key, and the host's last answer times. A pass
    without one (cron's reconcile, status) starts from nothing: every listed container is
    inspected and the answer deadline is the default (docs/operations.md says why cron
    keeps no memory in the state)."""

    def __init__(self) -> None:
        self._inspected: dict[str, dict[str, _Inspected]] = {}
        self._answers: dict[str, deque[float]] = {}
        self._last: dict[str, HostObservation] = {}  # each host's last good probe
        self._engines: dict[str, Engine] = {}  # each host's engine, read once until it fails
        self.inspected = 0  # containers inspected, over every probe (benchmarks)
        self.probed = 0  # hosts probed, over every pass (tests, benchmarks)

    def remembered(self) -> frozenset[str]:
        """The hosts whose last probe answered, and which no pass has acted on since."""
        return frozenset(self._last)

    def last(self, host: str) -> HostObservation | None:
        """The host's last good observation, unless forgotten since."""
        return self._last.get(host)

    def observed(self, seen: HostObservation) -> None:
        """A probe's outcome: kept when it answered, else the host's last is forgotten."""
        self.probed += 1
        if seen.ok:  # kept as remembered: a pass it stands for did not read its engine
            self._last[seen.host] = replace(seen, engine_read=False)
        else:
            self._last.pop(seen.host, None)
        if seen.ok and seen.engine is not None:
            self._engines[seen.host] = seen.engine
        else:  # a failed probe may be an engine restarted at a new version: read it again
            self._engines.pop(seen.host, None)

    def engine(self, host: str) -> Engine | None:
        """The host's engine as a probe read it, while its probes answer (else None)."""
        return self._engines.get(host)

    def know_engines(self, engines: Mapping[str, Engine]) -> None:
        """Hosts' engines as the state recorded them (core.hosts.engine_known), for those
        whose engine this memory has not read: their probes do not read it again."""
        for host, engine in engines.items():
            self._engines.setdefault(host, engine)

    def forget(self, hosts: Iterable[str]) -> None:
        """A pass acted on these hosts: their last observation no longer stands (the next
        pass probes them whatever their event streams say)."""
        for host in hosts:
            self._last.pop(host, None)

    def known(self, host: str) -> dict[str, str]:
        """Each remembered container of host, by id: its listing key."""
        return {cid: seen.key for cid, seen in self._inspected.get(host, {}).items()}

    def answers(self, host: str) -> list[float]:
        """The host's last answer times (seconds), oldest first."""
        return list(self._answers.get(host, ()))

    def answered(self, host: str, seconds: float) -> None:
        self._answers.setdefault(host, deque(maxlen=HISTORY)).append(seconds)

    def seen(
        self, host: Host, cluster: str, listed: dict[str, str], inspect: Result | None
    ) -> HostObservation:
        """The observation of a host from what ps listed and the inspect of those it did
        not know (None: none to inspect), the others as remembered; remembers them all."""
        fresh: dict[str, _Inspected] = {}
        if inspect is not None:
            found = parse_inspect_all(host.name, inspect.stdout)
            oneoffs = parse_oneoffs(host.name, cluster, inspect.stdout)
            tasks = {c.id: (c,) for c in found}
            own = {o.id: (o,) for o in oneoffs}
            for cid, key in listed.items():
                fresh[cid] = _Inspected(key, tasks.get(cid, ()), own.get(cid, ()))
            self.inspected += len(to_inspect(listed, self.known(host.name)))
        old = self._inspected.get(host.name, {})
        kept: dict[str, _Inspected] = {}
        for cid, key in listed.items():
            seen = old.get(cid)
            if seen is not None and seen.key == key:
                kept[cid] = seen  # not inspected: unchanged since it was
            elif cid in fresh and (fresh[cid].containers or fresh[cid].oneoffs):
                kept[cid] = fresh[cid]
        self._inspected[host.name] = kept
        every = [c for seen in kept.values() for c in seen.containers]
        mine = tuple(c for c in every if c.cluster == cluster)
        rest = tuple(c for c in every if c.cluster != cluster)
        oneoffs = tuple(o for seen in kept.values() for o in seen.oneoffs)
        return HostObservation(host.name, True, mine, others=rest, oneoffs=oneoffs)


def told_engines(engines: Mapping[str, Engine]) -> ProbeMemory:
    """A new memory that knows these hosts' engines (the state's record younger than
    core.hosts.ENGINE_AGE: core.hosts.engines_known): a command's probes do not read them."""
    memory = ProbeMemory()
    memory.know_engines(engines)
    return memory


def _seen(
    memory: ProbeMemory, host: Host, cluster: str, ps: Result, inspect: Result | None
) -> HostObservation:
    """What `docker ps` and `docker inspect` of the ids it listed anew said, as the host's
    observation, with `memory`'s inspect of the others (raises ParseError on output that
    is not what the commands promise). `inspect` is None when none was to be inspected."""
    if ps.exit_status != 0:
        return _failed(host, _failure(ps, "docker ps"))
    listed = parse_listing(ps.stdout)
    if inspect is None and to_inspect(listed, memory.known(host.name)):
        raise ParseError("docker inspect did not run")
    if inspect is not None and inspect.exit_status != 0 and not _only_vanished(inspect):
        return _failed(host, _failure(inspect, "docker inspect"))
    return memory.seen(host, cluster, listed, inspect)


async def _containers(
    executor: Executor, host: Host, cluster: str, memory: ProbeMemory, *, others: bool = True
) -> HostObservation:
    """docker ps + docker inspect of what it lists anew: this cluster's containers (and,
    with `others`, those of every other MiniDock cluster, which count against the host's
    capacity and ports), or why they could not be read."""
    try:
        ps = await executor.run(
            host, ps_argv(None if others else cluster), timeout=host.probe_timeout
        )
        listed = parse_listing(ps.stdout) if ps.exit_status == 0 else {}
        ids = to_inspect(listed, memory.known(host.name))
        inspect = None
        if ids:
            inspect = await executor.run(host, inspect_argv(ids), timeout=host.probe_timeout)
        return _seen(memory, host, cluster, ps, inspect)
    except (CommandTimeout, Unreachable, ParseError) as exc:
        return _failed_probe(executor, host, exc)


def _failed_probe(
    executor: Executor, host: Host, exc: CommandTimeout | Unreachable | ParseError
) -> HostObservation:
    """The failed probe an error makes. A command that timed out before its session opened
    means a cut-off or hung host, whose connection is dropped so the next pass connects
    afresh; one that timed out after (the host's sshd answered, its docker did not in
    time) is a slow host: its connection is kept and the failure is marked `slow`."""
    if isinstance(exc, CommandTimeout) and exc.opened:
        return replace(_failed(host, f"{exc.reason} (sshd answers: slow)"), slow=True)
    if isinstance(exc, CommandTimeout):
        executor.disconnect(host)
    if isinstance(exc, Unreachable):
        return _failed(host, exc.reason, exc.cause)
    if isinstance(exc, CommandTimeout):
        return _failed(host, exc.reason)
    return _failed(host, str(exc)[:_MAX_ERROR])


def _held(cluster: str, tcp: Result, udp: Result, published: Result) -> frozenset[str]:
    """The host ports held outside the cluster, from the three reads (ParseError when one
    failed or printed what it should not)."""
    for result, what in ((tcp, "cat /proc/net/tcp"), (udp, "cat /proc/net/udp")):
        if result.exit_status != 0 and not proc_net_missing_only(result.stderr):
            raise ParseError(_failure(result, what))
    if published.exit_status != 0:
        raise ParseError(_failure(published, "docker ps"))
    listening = parse_proc_net(tcp.stdout, "tcp") | parse_proc_net(udp.stdout, "udp")
    return ports_held_outside(cluster, listening, parse_published_ports(published.stdout))


async def ports_in_use(executor: Executor, host: Host, cluster: str) -> frozenset[str]:
    """Host ports held by anything but this cluster's containers ("8080/tcp", "53/udp").

    Three reads at once: /proc/net/tcp[6] and /proc/net/udp[6] (every listening or bound
    socket on the host, docker-proxy's included) and `docker ps` of every running
    container's cluster label and published ports. Raises Unreachable, CommandTimeout or
    ParseError (a failed command is a ParseError naming it).
    """
    reads = await asyncio.gather(
        executor.run(host, proc_net_argv("tcp"), timeout=host.probe_timeout),
        executor.run(host, proc_net_argv("udp"), timeout=host.probe_timeout),
        executor.run(host, published_ports_argv(), timeout=host.probe_timeout),
        return_exceptions=True,  # all three finish before any failure is raised
    )
    for read in reads:
        if isinstance(read, BaseException):
            raise read
    tcp, udp, published = (r for r in reads if isinstance(r, Result))
    return _held(cluster, tcp, udp, published)


_BATCHES: dict[type, bool] = {}  # executor type -> whether it runs batches


def batches(executor: Executor) -> TypeGuard[BatchExecutor]:
    """Whether `executor` runs batches, asked once a type (its methods are its type's):
    an `isinstance` against the Protocol looks up each of its methods, 22 us here, and a
    pass asks it for every host."""
    kind = type(executor)
    known = _BATCHES.get(kind)
    if known is None:
        known = _BATCHES[kind] = isinstance(executor, BatchExecutor)
    return known


async def _ports_or_none(executor: Executor, host: Host, cluster: str) -> frozenset[str]:
    """`ports_in_use`, or an empty set (logged) when it cannot be read: the probe does not
    fail for it."""
    try:
        if batches(executor):  # the three reads in one round trip
            reads = (proc_net_argv("tcp"), proc_net_argv("udp"), published_ports_argv())
            steps = [Step(tuple(argv)) for argv in reads]
            found = await executor.run_batch(host, steps, timeout=host.probe_timeout)
            return _held_or_none(host, cluster, found)
        return await ports_in_use(executor, host, cluster)
    except (Unreachable, CommandTimeout, ParseError) as exc:
        reason = exc.reason if isinstance(exc, Unreachable | CommandTimeout) else str(exc)
        log.info("%s: host ports in use not read: %s", host.name, reason)
        return frozenset()


async def observe_host(
    executor: Executor,
    host: Host,
    cluster: str,
    *,
    ports: bool = True,
    others: bool = True,
    memory: ProbeMemory | None = None,
) -> HostObservation:
    """One probe of one host: this cluster's containers (with `others`, the other MiniDock
    clusters' too; with `ports`, the host ports held outside MiniDock) and its engine, or
    why the containers could not be read (or its engine is refused). `memory`: what
    earlier probes inspected (else none)."""
    memory = ProbeMemory() if memory is None else memory
    if batches(executor):
        return await _in_one_session(executor, host, cluster, memory, ports=ports, others=others)
    if not ports:
        seen, (engine, read) = await asyncio.gather(
            _containers(executor, host, cluster, memory, others=others),
            _engine_or_known(executor, host, memory),
        )
        return _with_engine(seen, engine, read=read)
    seen, held, (engine, read) = await asyncio.gather(
        _containers(executor, host, cluster, memory, others=others),
        _ports_or_none(executor, host, cluster),
        _engine_or_known(executor, host, memory),
    )
    return _with_engine(replace(seen, ports_in_use=held) if seen.ok else seen, engine, read=read)


def probe_steps(
    cluster: str,
    *,
    ports: bool = True,
    others: bool = True,
    known: Sequence[str] = (),
    engine: bool = True,
) -> list[Step]:
    """A probe as one batch: ps, the engine's version (with `engine`), the port reads
    (with `ports`), then inspect of what ps listed, but for the containers whose listing
    key is `known` (unchanged since the last probe inspected them)."""
    steps = [Step(tuple(ps_argv(None if others else cluster)))]
    if engine:
        steps.append(Step(tuple(version_argv())))
    if ports:
        reads = (proc_net_argv("tcp"), proc_net_argv("udp"), published_ports_argv())
        steps += [Step(tuple(argv)) for argv in reads]
    steps.append(Step(tuple(inspect_argv([])), ids_from=0, skip=tuple(known)))
    return steps


def _engine(host: Host, result: Result | None) -> Engine | None:
    """The engine a version read printed, or None (logged) when it failed."""
    if result is None:
        return None
    try:
        if result.exit_status != 0:
            raise ParseError(_failure(result, "docker version"))
        return parse_version(result.stdout)
    except ParseError as exc:
        log.info("%s: engine not read: %s", host.name, exc)
        return None


def _with_engine(seen: HostObservation, engine: Engine | None, *, read: bool) -> HostObservation:
    """The observation with its host's engine (`read`: by this probe, not remembered); one
    MiniDock does not drive fails it, with the line core.engines.refusal says, `refused`
    (never counted towards down_after)."""
    if not seen.ok or engine is None:
        return seen
    line = refusal(engine)
    if line is None:
        return replace(seen, engine=engine, engine_read=read)
    return HostObservation(
        seen.host, False, error=line, engine=engine, engine_read=read, refused=True
    )


async def _engine_or_known(
    executor: Executor, host: Host, memory: ProbeMemory
) -> tuple[Engine | None, bool]:
    """The host's engine: as `memory` knows it, else read now (None when it cannot be),
    and whether it was read now."""
    known = memory.engine(host.name)
    if known is not None:
        return known, False
    try:
        argv = version_argv()
        return _engine(host, await executor.run(host, argv, timeout=host.probe_timeout)), True
    except (CommandTimeout, Unreachable) as exc:
        log.info("%s: engine not read: %s", host.name, exc.reason)
        return None, True


async def _in_one_session(
    executor: BatchExecutor,
    host: Host,
    cluster: str,
    memory: ProbeMemory,
    *,
    ports: bool,
    others: bool,
) -> HostObservation:
    """`observe_host` in one round trip: ps, the engine's version (unless `memory` knows
    it), the port reads, then inspect of what ps listed anew, as one batch whose session
    opens within `probe_timeout` and whose answer has the host's answer deadline (the same
    commands and the same reading of their results as one command at a time); how long it
    took, and whether that was slow."""
    known = memory.known(host.name)
    engine = memory.engine(host.name)
    steps = probe_steps(
        cluster, ports=ports, others=others, known=tuple(known.values()), engine=engine is None
    )
    recent = memory.answers(host.name)
    deadline = answer_deadline(recent, host.probe_timeout, host.command_timeout)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        results = await executor.run_batch(
            host, steps, timeout=host.probe_timeout, answer_timeout=deadline
        )
        ps = results[0]
        assert ps is not None  # the first step always runs
        seen = _seen(memory, host, cluster, ps, results[-1])
    except (CommandTimeout, Unreachable, ParseError) as exc:
        return _failed_probe(executor, host, exc)
    seconds = loop.time() - start
    if seen.ok:
        seen = replace(seen, seconds=seconds, slow=slow(seconds, recent, host.probe_timeout))
        memory.answered(host.name, seconds)
    fresh = engine is None  # read by this probe, not remembered
    read = 2 if fresh else 1  # the index of the first port read
    if engine is None:
        engine = _engine(host, results[1])
    if ports and seen.ok:
        seen = replace(seen, ports_in_use=_held_or_none(host, cluster, results[read : read + 3]))
    return _with_engine(seen, engine, read=fresh)


def _held_or_none(host: Host, cluster: str, reads: Sequence[Result | None]) -> frozenset[str]:
    """The port reads of a batch as `ports_in_use`, or an empty set (logged)."""
    tcp, udp, published = reads
    try:
        if tcp is None or udp is None or published is None:
            raise ParseError("the port reads did not run")
        return _held(cluster, tcp, udp, published)
    except ParseError as exc:
        log.info("%s: host ports in use not read: %s", host.name, exc)
        return frozenset()


async def observe(
    executor: Executor,
    hosts: Sequence[Host],
    cluster: str,
    *,
    ports: bool = True,
    others: bool = True,
    memory: ProbeMemory | None = None,
    scope: Set[str] | None = None,
    borrowed: Mapping[str, HostObservation] | None = None,
    clock: Callable[[], float] | None = None,
) -> Observed:
    """Probe every host at once; each gets a HostObservation, failed or not. `memory`:
    what earlier probes inspected (watch's), else none. With `scope` (a watch pass between
    resyncs: core.watching.probe_scope), only those hosts are probed; every other host's
    last good observation in `memory` stands for it (one it does not have is probed).
    `borrowed`: observations made by the hosts' owners (core.borrowing), which stand for
    those hosts' probes. `clock`: the pass's; each observation is stamped with when it
    was had (`seen_at`): a probe's at its answer, a borrowed one at this call (after it
    was read), a kept one keeps its own."""
    memory = ProbeMemory() if memory is None else memory
    borrowed = borrowed or {}
    start = clock() if clock is not None else None
    kept = {} if scope is None else {h.name: memory.last(h.name) for h in hosts}
    kept |= {h.name: replace(borrowed[h.name], seen_at=start) for h in hosts if h.name in borrowed}
    probed = [
        h
        for h in hosts
        if h.name not in borrowed and (scope is None or h.name in scope or kept[h.name] is None)
    ]

    async def stamped(host: Host) -> HostObservation:
        seen = await observe_host(
            executor, host, cluster, ports=ports, others=others, memory=memory
        )
        return seen if clock is None else replace(seen, seen_at=clock())

    found = await asyncio.gather(*(stamped(h) for h in probed))
    for seen in found:
        memory.observed(seen)
    everyone = {o.host: o for o in kept.values() if o is not None} | {o.host: o for o in found}
    return Observed(hosts={h.name: everyone[h.name] for h in hosts})


async def port_tables(
    executor: Executor, hosts: Sequence[Host], observed: Observed, cluster: str
) -> Observed:
    """`observed` with the port tables of every host that answered read now (one round
    trip each: the reads of `ports_in_use`), for a pass whose decision needs them
    (core.watching.port_tables_needed)."""
    answered = [h for h in hosts if h.name in observed.hosts and observed.hosts[h.name].ok]
    held = await asyncio.gather(*(_ports_or_none(executor, h, cluster) for h in answered))
    found = dict(observed.hosts)
    for h, ports in zip(answered, held, strict=True):
        found[h.name] = replace(found[h.name], ports_in_use=ports)
    return replace(observed, hosts=found)
