"""Pure decisions of a watching controller (docs/operations.md, "Watch"): which listed
containers need a `docker inspect`, how long a probe waits for a host's docker and when
its answer is "slow", whether a pass reads the hosts' port tables before it decides,
which hosts a pass between resyncs probes, and when the next pass runs (events
coalesced, the interval as the resync). No I/O: the observe adapter, the event streams
and the watch loop hand these functions what they measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from minidock.core import rollout
from minidock.core.slots import SlotPhase
from minidock.core.state import ControllerState, ServiceState
from minidock.model import Inventory, Observed, Service

__all__ = [
    "ANSWER_FACTOR",
    "DIED_PATIENCE",
    "HISTORY",
    "PROGRESS",
    "SETTLE",
    "PassTimer",
    "answer_deadline",
    "backoff_ends",
    "port_tables_needed",
    "port_tables_wanted",
    "probe_scope",
    "slow",
    "to_inspect",
    "unconfirmed_dies",
]

# -- which containers need docker inspect ---------------------------------------------------


def to_inspect(listed: Mapping[str, str], known: Mapping[str, str]) -> list[str]:
    """The ids, of those `docker ps` listed (id -> key), whose key is not the one the last
    observation inspected: new containers and changed ones, in listing order."""
    return [cid for cid, key in listed.items() if known.get(cid) != key]


# -- slow is not down -----------------------------------------------------------------------

HISTORY = 5  # a host's last answer times the deadline is made from
ANSWER_FACTOR = 4  # the deadline for docker's answer: this many probe_timeouts at least,
# and this many times the host's slowest recent answer


def answer_deadline(recent: Sequence[float], probe_timeout: float, ceiling: float) -> float:
    """How long a probe waits for a host's docker to answer once its sshd opened the
    session: ANSWER_FACTOR x probe_timeout (12 s by default), or ANSWER_FACTOR x the slowest
    of its last HISTORY answers when that is longer (a host that answers in 5 s under load
    is waited for 20 s), never over `ceiling` (its command_timeout) nor under probe_timeout.
    The session itself must open within probe_timeout: a hung or cut-off host (its sshd
    silent) fails as fast as before."""
    slowest = max(recent[-HISTORY:], default=0.0)
    wanted = max(ANSWER_FACTOR * probe_timeout, ANSWER_FACTOR * slowest)
    return max(probe_timeout, min(wanted, ceiling))


def slow(seconds: float, recent: Sequence[float], probe_timeout: float) -> bool:
    """An answer is "slow" when it took longer than probe_timeout and longer than twice the
    host's usual (median of its last HISTORY answers): reported, never a failure."""
    last = sorted(recent[-HISTORY:])
    usual = last[len(last) // 2] if last else 0.0  # the median (the upper of an even two)
    return seconds > probe_timeout and seconds > 2 * usual


# -- port tables ----------------------------------------------------------------------------


def port_tables_needed(runs: Iterable[Service]) -> bool:
    """Whether starting these services' tasks reads the hosts' port tables (/proc/net and
    other containers' published ports): one takes a host port (a published port, or an
    ingress route's task port, chosen from the tables when it is placed). No other
    decision reads them: one-off tasks (jobs, hooks, `minidock run`) publish no ports
    (core.jobs.oneoff_spec)."""
    return any(s.ports or s.ingress for s in runs)


def port_tables_wanted(inventory: Inventory, state: ControllerState, observed: Observed) -> bool:
    """Whether a pass reads the hosts' port tables before its one decision: unless every
    service that takes a host port (in any spec it keeps: `port_tables_needed`) is
    settled, a task that takes one may start this pass. Conservative (a pass that starts
    nothing may read them; one that starts such a task always does): a settled service
    has no rollout under way, no volume move, backup or rebalance move, and each slot it
    wants is complete, or running the task its record names (of the spec the slot should
    run), not unhealthy, on the host the record names, answering, listed, not drained,
    its constraints met (a global service: its slots are on every such host)."""
    running = {
        (c.host, c.task): c.spec
        for h in observed.hosts.values()
        if h.ok
        for c in h.containers
        if c.state == "running" and c.health != "unhealthy"
    }
    return any(
        not ss.removed
        and port_tables_needed(s for s in (ss.spec, ss.previous, *ss.older) if s is not None)
        and not _settled(ss, inventory, state, running)
        for ss in state.services.values()
    )


def _settled(
    ss: ServiceState,
    inventory: Inventory,
    state: ControllerState,
    running: Mapping[tuple[str, str], str],
) -> bool:
    """Whether no task of the service starts this pass (`port_tables_wanted`)."""
    if ss.rollout.active or ss.moves or ss.backups.slots or ss.rebalance:
        return False
    allowed = {
        h.name
        for h in inventory.hosts
        if not state.host(h.name).drained and all(k.allows(h) for k in ss.spec.constraints)
    }
    if ss.spec.mode == "global" and set(ss.global_slots) != allowed:
        return False
    for n in ss.slot_numbers():
        record = ss.slot(n)
        if record.complete:
            continue
        if record.phase is not SlotPhase.RUNNING or record.host not in allowed:
            return False
        # its task running, of the spec the slot should run (one of another spec is
        # replaced: a scale back up after a scale down can find an old task still draining)
        if running.get((record.host, record.task)) != rollout.slot_target(ss, n).spec_hash():
            return False
    return True


# -- which hosts a pass probes --------------------------------------------------------------


def probe_scope(
    hosts: Iterable[str], *, rung: Set[str], up: Set[str], remembered: Set[str]
) -> frozenset[str]:
    """The hosts a pass between resyncs probes: those whose event stream rang since the
    last pass took its rings (an event, or the stream broke), those whose stream is not up
    (not yet open, reopening, or never opened: nothing would tell of a change), and those
    with no good observation remembered (never probed, the last probe failed, or the last
    pass acted there). Every other host's stream is up and silent, so its containers are
    as its last probe saw them: that observation is used again. A resync probes them all."""
    return frozenset(h for h in hosts if h in rung or h not in up or h not in remembered)


def backoff_ends(state: ControllerState, now: float, decided: float | None = None) -> float | None:
    """Seconds from `now` to the soonest restart backoff of `state` that ends after the
    pass's decision (`decided`; `now` when not given), 0 when it ended since (a slot not
    Failed whose next start is later than the decision); None when none does. The pass
    after it has a task to start, and no event will say when."""
    since = now if decided is None else min(decided, now)
    left = [
        max(0.0, slot.next_start - now)
        for service in state.services.values()
        for slot in service.slots.values()
        if slot.next_start > since and not slot.failed
    ]
    return min(left, default=None)


DIED_PATIENCE = 30.0  # seconds a probe may show a container live after its `die`


def unconfirmed_dies(
    died: Mapping[str, float], live: Set[str] | None, now: float
) -> dict[str, float]:
    """Of a host's `die`s (container id -> when it came), those no probe has confirmed yet:
    Docker 20.10 says `die` before `docker ps` does (minidock.streams), so a die stands
    while a probe of the host (`live`: the ids it found live; None: not observed by this
    pass) still lists its container live, and is let go DIED_PATIENCE after it came."""
    return {
        cid: at
        for cid, at in died.items()
        if now - at < DIED_PATIENCE and (live is None or cid in live)
    }


# -- when the next pass runs ----------------------------------------------------------------

SETTLE = 0.05  # seconds an event waits for others (a stop is die then destroy) before a pass
PROGRESS = 1.0  # seconds between passes while one says work is under way (exit 3)


@dataclass(frozen=True)
class PassTimer:
    """When `watch` runs its next pass: at the resync (`interval` after the last full pass
    began: every host probed); SETTLE after the first event that came since the last pass
    began; or, after a pass that left work under way (a restart backoff, a task starting,
    a rollout), PROGRESS later, or when its soonest backoff ends if that is sooner (no
    event says when a backoff ends), whichever is soonest. Events that come during a pass,
    or from many hosts at once, make one pass. Passes between resyncs probe only the hosts
    that need it (probe_scope), so they do not push the resync back."""

    interval: float
    last_full: float | None = None  # when the last full pass began (None: none yet)
    woken: float | None = None  # the first event since the last pass began
    busy: float | None = None  # when the next pass is due for work under way

    def resync_due(self, now: float) -> bool:
        """Whether a pass beginning now probes every host."""
        return self.last_full is None or now >= self.last_full + self.interval

    def started(self, now: float, *, full: bool = True) -> PassTimer:
        """A pass begins now (a full one, or scoped): events before it are its own."""
        return PassTimer(self.interval, now if full else self.last_full)

    def finished(
        self, now: float, *, under_way: bool, backoff_left: float | None = None
    ) -> PassTimer:
        """The pass (the round) ended now, with work under way or not; `backoff_left`:
        seconds to the soonest restart backoff's end (core.watching.backoff_ends)."""
        busy = None
        if under_way:
            busy = now + min(PROGRESS, PROGRESS if backoff_left is None else backoff_left)
        return PassTimer(self.interval, self.last_full, self.woken, busy)

    def event(self, now: float, *, settle: bool = True) -> PassTimer:
        """An event (or a broken stream) came: a pass is due SETTLE after the first one;
        at once for one that comes alone (`settle` False: an order for this watch's host,
        which no other event follows)."""
        woken = now if settle else now - SETTLE
        if self.woken is not None and self.woken <= woken:
            return self
        return PassTimer(self.interval, self.last_full, woken, self.busy)

    def due(self) -> float:
        """When the next pass begins (a time on the same clock)."""
        times = [0.0 if self.last_full is None else self.last_full + self.interval]
        if self.woken is not None:
            times.append(self.woken + SETTLE)
        if self.busy is not None:
            times.append(self.busy)
        return min(times)

    def wait(self, now: float) -> float:
        """Seconds to wait from `now` before the next pass (0: at once)."""
        return max(0.0, self.due() - now)
