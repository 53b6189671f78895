"""A model of sharded controllers on one etcd state (docs/scale.md): it measures what the
design claims before the design is built.

    python benchmarks/scale_model.py              # every table of docs/scale.md (about a minute)
    python benchmarks/scale_model.py --quick      # smaller fleets and fewer trials
    python benchmarks/scale_model.py --seed 7     # another seed: the same claims must hold

The standard library and MiniDock's own ring, deterministic for a seed. Four parts, each
a section of the doc:

1. **The ring** (the product's: minidock/core/ring.py). Hosts are assigned to the live
   controllers by consistent hashing with bounded loads (Mirrokni, Thorup and
   Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018 / arXiv:1608.01350):
   each controller has `vnodes` points on a ring, hosts are taken in the order of their
   own hash, and each goes to the first point clockwise whose controller holds fewer than
   ceil(c * N / C) hosts. Every controller computes the same map from the member set it
   read at one etcd revision. Measured:
   max/mean load, hosts that change hands on a join, a leave or a death against the
   minimum, and the standby set each controller would keep warm.
2. **The handover.** A discrete-event simulation of leases, etcd's expiry checks, watches
   and the drain -> acknowledge -> take protocol over per-host owner keys, with a
   controller killed or paused at a random instant or a controller joining. Measured: the
   longest time a host has no controller that may act on it, and that no two controllers
   may act on one host at any instant (checked, not assumed).
3. **etcd's load.** Writes and bytes at rest and in a mass failure under the design's key
   layout, beside today's single `controller` key, with record sizes of the real state
   encoding (minidock/store/codec.py; tests/unit/test_scale_model.py holds the model's
   records to the codec's bytes).
4. **Where decisions are made.** (a) one decider over shard-written observations, against
   (b) per-shard deciders committing placements as etcd transactions against each target
   host's capacity revision (Nomad's plan applier, nomad/plan_apply.go). Measured: the
   conflicts and rounds of (b) in a mass failure; the death-to-decision latency of (a)
   composed from the figures measured in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from minidock.core.ring import CAPACITY, VNODES, Fleet, assign, capacity, shares, standbys

# -- 1. the ring ------------------------------------------------------------------------------
# The ring itself is the product's (minidock/core/ring.py: point, Fleet, Ring, capacity,
# assign, shares, standbys); the model measures it.


def numbered(n: int) -> Fleet:
    """The model's fleet: `host-000000` to `host-<n-1>`, in ring order."""
    return Fleet.of(f"host-{i:06d}" for i in range(n))


def owners_seen(
    fleet: Fleet, members: Sequence[str], rng: random.Random, c: float = CAPACITY
) -> dict[str, set[str]]:
    """Host -> the controllers that believe they own it when each controller computes the
    map itself, from the member list in its own (shuffled) order, at one revision."""
    believed: dict[str, set[str]] = {}
    for me in members:
        mine = list(members)
        rng.shuffle(mine)
        for host, m in assign(fleet, mine, c=c).items():
            if m == me:
                believed.setdefault(host, set()).add(me)
    return believed


def assert_single_owner(fleet: Fleet, members: Sequence[str], rng: random.Random) -> None:
    """No host owned by two controllers (nor by none) at one membership revision."""
    believed = owners_seen(fleet, members, rng)
    for _, host in fleet.order:
        owners = believed.get(host, set())
        assert len(owners) == 1, f"{host} is owned by {sorted(owners)} at one revision"


def members_named(count: int) -> list[str]:
    return [f"ctl-{i:02d}" for i in range(count)]


@dataclass(frozen=True)
class Balance:
    hosts: int
    members: int
    cap: int
    max_load: int
    min_load: int

    @property
    def max_over_mean(self) -> float:
        return self.max_load / (self.hosts / self.members)


def balance(fleet: Fleet, members: Sequence[str], c: float = CAPACITY) -> Balance:
    load = [len(held) for held in shares(fleet, members, c=c).values()]
    cap = capacity(len(fleet), len(members), c)
    assert max(load) <= cap, f"a controller holds {max(load)} > {cap}"
    return Balance(len(fleet), len(members), cap, max(load), min(load))


@dataclass(frozen=True)
class Moves:
    """Hosts that change hands on one membership change, against the minimum: on a join
    the newcomer's fair share N/(C+1); on a leave or death the leaver's own hosts."""

    event: str
    hosts: int
    members: int  # before the change
    moved: int
    minimal: int
    between_live: int  # hosts moved from one live controller to another (a drain each)

    @property
    def ratio(self) -> float:
        return self.moved / self.minimal if self.minimal else 0.0


def moves(before: dict[str, str], after: dict[str, str], gone: str | None) -> tuple[int, int]:
    changed = [h for h, m in before.items() if after[h] != m]
    return len(changed), sum(1 for h in changed if before[h] != gone)


def join(fleet: Fleet, members: Sequence[str], c: float = CAPACITY) -> Moves:
    before = assign(fleet, members, c=c)
    after = assign(fleet, [*members, "ctl-new"], c=c)
    moved, live = moves(before, after, None)
    return Moves("join", len(fleet), len(members), moved, len(fleet) // (len(members) + 1), live)


def leave(fleet: Fleet, members: Sequence[str], c: float = CAPACITY) -> Moves:
    """A controller leaves or dies: the map is the same either way (its member key is
    gone); only the handover differs (section 2)."""
    gone = members[len(members) // 2]
    before = assign(fleet, members, c=c)
    after = assign(fleet, [m for m in members if m != gone], c=c)
    moved, live = moves(before, after, gone)
    own = sum(1 for m in before.values() if m == gone)
    return Moves("leave", len(fleet), len(members), moved, own, live)


def standby_sizes(fleet: Fleet, members: Sequence[str], c: float = CAPACITY) -> dict[str, int]:
    """For each controller, how many hosts it would take if any one other controller died:
    the connections it keeps warm (docs/scale.md, "Warm takeover")."""
    return {m: len(hosts) for m, hosts in standbys(fleet, members, c=c).items()}


# -- 2. the handover: a discrete-event simulation ----------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Durations of the handover, in seconds. `ttl` is the controller's lease (MiniDock's
    default 10 s, at least 2 s: minidock/store/location.py, docs/ha.md); renewals every
    ttl/3 and a fence margin of min(1 s, ttl/10) as minidock/store/etcd.py's LeaseKeeper;
    etcd revokes expired leases at checks half a second apart (docs/ha.md, "Measured
    failover"). `fence` and `drain` exist to break the design on purpose in the tests."""

    ttl: float = 10.0
    hop: tuple[float, float] = (0.0005, 0.005)  # one-way etcd request or watch delivery
    expiry_check: float = 0.5
    busy: float = 0.3  # share of hosts with a command in flight when a drain starts
    inflight: float = 2.0  # the longest rest of a command in flight (a `docker stop`)
    fence: bool = True  # each act checks the lease deadline (store.fence())
    drain: bool = True  # a host changes hands only through its owner key (drain, ack, take)

    @property
    def margin(self) -> float:
        return min(1.0, self.ttl / 10)


@dataclass
class _Controller:
    name: str
    lease: int
    deadline: float  # local: send time of the last answered renewal + ttl
    dead_at: float = math.inf
    paused: tuple[float, float] = (math.inf, math.inf)
    lost_at: float = math.inf  # when it learns its lease is gone
    view: frozenset[str] = frozenset()  # the member set of its last ring computation
    owns: dict[str, float] = field(default_factory=dict)  # host -> since (may act from)
    history: list[tuple[float, float]] = field(default_factory=list)  # (answered at, deadline)

    def running(self, t: float) -> bool:
        return t < self.dead_at and not (self.paused[0] <= t < self.paused[1])


@dataclass(frozen=True)
class Span:
    """A time a controller may act on a host: [start, end)."""

    controller: str
    host: str
    start: float
    end: float


@dataclass(frozen=True)
class Trial:
    scenario: str
    spans: tuple[Span, ...]
    gaps: tuple[float, ...]  # per host that changed hands: no controller may act for so long
    late_commands: int  # commands of a deposed owner still running when the next may act
    refused_commits: int  # commits etcd's compare refused (the owner key was not theirs)
    overlaps: int  # instants where two controllers may act on one host: must be 0


class Handover:
    """One trial: C controllers own H hosts by per-host owner keys under their leases; one
    event (a kill, a pause, a join) at a random instant; the simulation runs
    until every host is owned again, then the spans are checked."""

    def __init__(self, timing: Timing, rng: random.Random, hosts: int, members: int) -> None:
        self.timing, self.rng = timing, rng
        self.fleet = numbered(hosts)
        self.queue: list[tuple[float, int, str, tuple[object, ...]]] = []
        self.seq = 0
        self.now = 0.0
        self.expiry: dict[int, float] = {}  # lease -> expiry at etcd
        self.member_lease: dict[str, int] = {}
        self.owner_key: dict[str, tuple[str, int]] = {}  # host -> (controller, lease)
        self.controllers: dict[str, _Controller] = {}
        self.spans: list[Span] = []
        self.inflight_end: dict[tuple[str, str], float] = {}  # (ctl, host) -> its command ends
        self.refused = 0  # writes etcd refused: the owner key was not the writer's
        self.applied = 0  # writes about a host that etcd applied
        self.delivered: dict[str, float] = {}  # a watcher's last delivery: etcd keeps order
        self.maps: dict[frozenset[str], dict[str, str]] = {}
        for name in members_named(members):
            self._start(name, 0.0)
        owner = assign(self.fleet, self.member_lease)
        for host, m in owner.items():
            self.owner_key[host] = (m, self.member_lease[m])
            self.controllers[m].owns[host] = 0.0
        for c in self.controllers.values():
            c.view = frozenset(self.member_lease)
        self.at(rng.uniform(0, timing.expiry_check), "expiry_check")

    # the queue
    def at(self, t: float, kind: str, *args: object) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, args))

    def hop(self) -> float:
        return self.rng.uniform(*self.timing.hop)

    def run(self, until: float) -> None:
        while self.queue and self.queue[0][0] <= until:
            t, _, kind, args = heapq.heappop(self.queue)
            self.now = t
            getattr(self, f"on_{kind}")(*args)

    # leases
    def _start(self, name: str, t: float) -> None:
        lease = len(self.expiry) + 1
        self.expiry[lease] = t + self.timing.ttl
        self.member_lease[name] = lease
        c = _Controller(name, lease, deadline=t + self.timing.ttl)
        c.history.append((t, c.deadline))
        self.controllers[name] = c
        phase = self.rng.uniform(0, self.timing.ttl / 3)  # renewals start out of step
        self.at(t + phase, "renew", name)

    def on_renew(self, name: str) -> None:
        c = self.controllers[name]
        if self.now >= c.dead_at or self.now >= c.lost_at:
            return
        if not c.running(self.now):  # paused: the renewal thread resumes with the process
            self.at(c.paused[1], "renew", name)
            return
        sent = self.now
        self.at(sent + self.hop(), "renew_arrives", name, sent)
        self.at(sent + self.timing.ttl / 3, "renew", name)

    def on_renew_arrives(self, name: str, sent: float) -> None:
        c = self.controllers[name]
        alive = self.expiry.get(c.lease, -1.0) > self.now
        if alive:
            self.expiry[c.lease] = self.now + self.timing.ttl
        self.at(self.now + self.hop(), "renew_answer", name, sent, alive)

    def on_renew_answer(self, name: str, sent: float, alive: bool) -> None:
        c = self.controllers[name]
        if self.now >= c.dead_at:
            return
        at = max(self.now, c.paused[1]) if c.paused[0] <= self.now else self.now
        if alive:
            c.deadline = max(c.deadline, sent + self.timing.ttl)
            c.history.append((at, c.deadline))
        else:
            c.lost_at = min(c.lost_at, at)  # it stops, commits nothing more (exit 75)

    def on_expiry_check(self) -> None:
        for lease, expiry in list(self.expiry.items()):
            if expiry <= self.now:
                del self.expiry[lease]
                self._revoked(lease)
        self.at(self.now + self.timing.expiry_check, "expiry_check")

    def _revoked(self, lease: int) -> None:
        """etcd deletes the member key and every owner key of the lease, at one revision."""
        gone = [m for m, lz in self.member_lease.items() if lz == lease]
        for m in gone:
            del self.member_lease[m]
        freed = [h for h, (_, lz) in self.owner_key.items() if lz == lease]
        for h in freed:
            del self.owner_key[h]
        self._notify(freed)

    def _notify(self, freed: Sequence[str]) -> None:
        members = frozenset(self.member_lease)
        for c in self.controllers.values():
            if c.name in members:
                self._deliver(c.name, self.now + self.hop(), members, tuple(freed))

    def _deliver(
        self, name: str, t: float, members: frozenset[str], freed: tuple[str, ...]
    ) -> None:
        """A watch event, delivered after the watcher's earlier ones (etcd's order)."""
        t = max(t, self.delivered.get(name, 0.0) + 1e-9)
        self.delivered[name] = t
        self.at(t, "watch", name, members, freed)

    # the ring and the protocol
    def on_watch(self, name: str, members: frozenset[str], freed: tuple[str, ...]) -> None:
        c = self.controllers[name]
        if self.now >= c.dead_at or self.now >= c.lost_at:
            return
        if not c.running(self.now):  # paused: its watch stream is read after it resumes
            self.delivered[name] = c.paused[1] + 2 * self.hop()
            self._deliver(name, self.delivered[name], members, freed)
            return
        want = self._want(members)
        if members != c.view:
            c.view = members
            for host in list(c.owns):
                if want.get(host) != name:
                    self._drain(c, host)
            for host, m in want.items():
                if m == name and host not in c.owns:
                    if self.timing.drain:
                        self.at(self.now + self.hop(), "take", name, host)
                    else:  # broken on purpose: a ring view alone makes an owner
                        c.owns[host] = self.now
        for host in freed:
            if want.get(host) == name and host not in c.owns:
                self.at(self.now + self.hop(), "take", name, host)

    def _want(self, members: frozenset[str]) -> dict[str, str]:
        if members not in self.maps:
            self.maps[members] = assign(self.fleet, members)
        return self.maps[members]

    def _drain(self, c: _Controller, host: str) -> None:
        """Stop starting commands on `host`, let the one in flight end, then acknowledge
        by deleting the owner key (a transaction compared on our lease)."""
        since = c.owns.pop(host)
        self.spans.append(Span(c.name, host, since, self.now))
        rest = (
            self.rng.uniform(0, self.timing.inflight) if self.rng.random() < self.timing.busy else 0
        )
        self.inflight_end[(c.name, host)] = self.now + rest
        if self.timing.drain:
            self.at(self.now + rest + self.hop(), "ack", c.name, host)

    def on_ack(self, name: str, host: str) -> None:
        key = self.owner_key.get(host)
        if key is None or key != (name, self.controllers[name].lease):
            self.refused += 1
            return
        del self.owner_key[host]
        self._notify([host])

    def on_take(self, name: str, host: str) -> None:
        """Create-if-absent of the owner key under our lease; the answer makes us owner."""
        c = self.controllers[name]
        if host in self.owner_key or c.lease not in self.expiry:
            return  # held (its owner drains and acks), or our lease is gone
        self.owner_key[host] = (name, c.lease)
        self.at(self.now + self.hop(), "taken", name, host)

    def on_taken(self, name: str, host: str) -> None:
        c = self.controllers[name]
        if self.owner_key.get(host, ("", 0))[0] == name and host not in c.owns:
            c.owns[host] = self.now

    # the events a trial injects
    def kill(self, name: str, t: float) -> None:
        self.controllers[name].dead_at = t

    def pause(self, name: str, t: float, length: float) -> None:
        self.controllers[name].paused = (t, t + length)
        self.at(t + length, "resumes", name)

    def on_resumes(self, name: str) -> None:
        """It was paused mid-pass: it goes on to commit what it observed of its hosts,
        each write compared on the host's owner key, if its own fence lets it."""
        c = self.controllers[name]
        if self.timing.fence and self.now >= c.deadline - self.timing.margin:
            return  # store.fence() raises LeaseLost: nothing is sent
        for host in c.owns:
            self.at(self.now + self.hop(), "write", name, host)

    def on_write(self, name: str, host: str) -> None:
        if self.owner_key.get(host) == (name, self.controllers[name].lease):
            self.applied += 1
        else:
            self.refused += 1  # etcd's compare: the key is gone, or another's

    def add(self, name: str, t: float) -> None:
        self.at(t, "joins", name)

    def on_joins(self, name: str) -> None:
        self._start(name, self.now)
        self.controllers[name].view = frozenset()
        self._notify([])

    # what may act, and when
    def fence_spans(self, c: _Controller, end: float) -> list[tuple[float, float]]:
        """When the controller's own fence lets it act: before its deadline less the
        margin, as its deadline stood at each instant; running; lease not known lost."""
        out: list[tuple[float, float]] = []
        stops = min(end, c.dead_at, c.lost_at)
        for i, (answered, deadline) in enumerate(c.history):
            nxt = c.history[i + 1][0] if i + 1 < len(c.history) else stops
            hi = min(nxt, stops)
            if self.timing.fence:
                hi = min(hi, deadline - self.timing.margin)
            if hi > answered:
                out.append((answered, hi))
        pause_lo, pause_hi = c.paused
        cut: list[tuple[float, float]] = []
        for lo, hi in out:
            if hi <= pause_lo or lo >= pause_hi:
                cut.append((lo, hi))
                continue
            if lo < pause_lo:
                cut.append((lo, pause_lo))
            if hi > pause_hi:
                cut.append((pause_hi, hi))
        return cut

    def result(self, scenario: str, end: float) -> Trial:
        for c in self.controllers.values():
            for host, since in c.owns.items():
                self.spans.append(Span(c.name, host, since, end))
        acts: list[Span] = []
        for span in self.spans:
            c = self.controllers[span.controller]
            for lo, hi in self.fence_spans(c, end):
                a, b = max(lo, span.start), min(hi, span.end)
                if b > a:
                    acts.append(Span(span.controller, span.host, a, b))
        by_host: dict[str, list[Span]] = {}
        for s in merged(acts):
            by_host.setdefault(s.host, []).append(s)
        overlaps, gaps, late = 0, [], 0
        for host, spans in by_host.items():
            spans.sort(key=lambda s: s.start)
            overlaps += sum(
                1
                for i, a in enumerate(spans)
                for b in spans[i + 1 :]
                if a.controller != b.controller and b.start < a.end
            )
            for prev, nxt in itertools.pairwise(spans):
                if nxt.controller == prev.controller:
                    continue
                gaps.append(nxt.start - prev.end)
                if self.inflight_end.get((prev.controller, host), -1.0) > nxt.start:
                    late += 1
            if not any(s.end >= end for s in spans):
                gaps.append(math.inf)  # nobody owns it at the end: a lost host
        return Trial(scenario, tuple(acts), tuple(gaps), late, self.refused, overlaps)


def merged(spans: Iterable[Span]) -> list[Span]:
    """Each controller's spans on each host, touching ones joined."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.host, s.controller, s.start)):
        last = out[-1] if out else None
        if (
            last
            and (last.host, last.controller) == (s.host, s.controller)
            and s.start <= last.end + 1e-9
        ):
            out[-1] = Span(s.controller, s.host, last.start, max(last.end, s.end))
        else:
            out.append(s)
    return out


SCENARIOS = ("kill", "pause", "join")


def trial(
    scenario: str, timing: Timing, rng: random.Random, hosts: int = 60, members: int = 4
) -> Trial:
    """One handover: `kill` (SIGKILL: the process and its renewals stop), `pause` (SIGSTOP
    for ttl/2 to ttl + 3 s, then it resumes: past its lease or not), `join` (a fifth
    controller starts). The event comes at a random instant, the leases running a while."""
    sim = Handover(timing, rng, hosts, members)
    t0 = 3 * timing.ttl + rng.uniform(0, timing.ttl)
    victim = members_named(members)[rng.randrange(members)]
    if scenario in ("kill", "pause"):
        # the victim's commands in flight go on running on their hosts: the window of
        # docs/ha.md ("a deposed controller's last command"), counted as late commands
        for host, (m, _) in sim.owner_key.items():
            if m == victim and rng.random() < timing.busy:
                sim.inflight_end[(victim, host)] = t0 + rng.uniform(0, timing.inflight)
    if scenario == "kill":
        sim.kill(victim, t0)
    elif scenario == "pause":
        sim.pause(victim, t0, rng.uniform(timing.ttl / 2, timing.ttl + 3.0))
    elif scenario == "join":
        sim.add("ctl-new", t0)
    else:
        raise ValueError(scenario)
    end = t0 + 2 * timing.ttl + 10.0
    sim.run(end)
    return sim.result(scenario, end)


@dataclass(frozen=True)
class HandoverRow:
    scenario: str
    ttl: float
    trials: int
    handed: int  # host handovers seen
    gap_median: float
    gap_max: float
    overlaps: int
    late: int  # deposed owners' commands still landing (docs/ha.md, "The window")
    refused: int  # deposed owners' writes (acknowledgements) refused by etcd's compare


def handovers(scenario: str, timing: Timing, trials: int, seed: int) -> HandoverRow:
    rng = random.Random(f"{seed}/{scenario}/{timing.ttl}")
    gaps: list[float] = []
    overlaps = late = refused = 0
    for _ in range(trials):
        t = trial(scenario, timing, rng)
        gaps += t.gaps
        overlaps += t.overlaps
        late += t.late_commands
        refused += t.refused_commits
    assert overlaps == 0 or not (timing.fence and timing.drain), "two controllers may act"
    finite = [g for g in gaps if math.isfinite(g)]
    assert len(finite) == len(gaps), "a host was left without an owner"
    return HandoverRow(
        scenario,
        timing.ttl,
        trials,
        len(gaps),
        statistics.median(finite) if finite else 0.0,
        max(finite, default=0.0),
        overlaps,
        late,
        refused,
    )


# -- 3. etcd's load -----------------------------------------------------------------------------

PREFIX = "/minidock/prod/"
TXN_OPS = 100  # operations per transaction (etcd refuses more than 128 by default)
REQUEST_LIMIT = int(1.5 * 1024 * 1024)  # etcd's --max-request-bytes default


def host_record(name: str, tasks: int) -> dict[str, object]:
    """A host's record as codec.dumps(HostState) writes it (the keys and the values'
    shapes of minidock/core/hosts.py HostState and minidock/model.py Host)."""
    return {
        "availability": "active",
        "engine": {"kind": "docker", "rootless": False, "version": "26.1.5+dfsg1"},
        "engine_read": 1796490017.5279202,
        "failures": 0,
        "last_error": None,
        "last_known": {
            "address": "10.1.0.42",
            "command_timeout": 60.0,
            "connect_timeout": 5.0,
            "cpus": 4.0,
            "down_after": 2,
            "gpus": [],
            "host_key_policy": "strict",
            "identities_only": False,
            "identity_agent": None,
            "identity_file": None,
            "identity_files": [],
            "keepalive_count_max": 3,
            "keepalive_interval": 15.0,
            "known_hosts": None,
            "labels": [["zone", "z3"]],
            "memory": 8589934592,
            "name": name,
            "port": 22,
            "private_address": "",
            "probe_timeout": 3.0,
            "proxy_jump": [],
            "sudo": False,
            "user": "root",
        },
        "last_seen": 1796490217.5279202,
        "move_volumes": False,
        "phase": "ready",
        "tasks": [
            {
                "service": "web",
                "slot": i,
                "spec": "9c1e2f3a4b5d6e7f",
                "task": f"web.{i}.3f9a2c1b7d4e",
            }
            for i in range(tasks)
        ],
    }


def slot_record(host: str, slot: int) -> dict[str, object]:
    """A slot's record as codec.dumps(SlotState) writes it (minidock/core/slots.py)."""
    return {
        "attempts": [],
        "avoid": "",
        "awaiting_restore": "",
        "backups": [],
        "counted": [],
        "half_written": "",
        "host": host,
        "kept_on": "",
        "last_exit": "",
        "next_start": 0.0,
        "phase": "running",
        "task": f"web.{slot}.3f9a2c1b7d4e",
    }


def encoded(value: object) -> int:
    """Bytes of a value as the codec writes it: compact, sorted JSON."""
    return len(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Sizes:
    """Bytes of one key and value of each kind (a zero-padded host name of 11 chars)."""

    host: int
    slot: int
    owner: int
    member: int

    @classmethod
    def measure(cls, tasks_per_host: int) -> Sizes:
        name = "host-000042"
        host = len(f"{PREFIX}hosts/{name}") + encoded(host_record(name, tasks_per_host))
        slot = len(f"{PREFIX}slots/web/00042") + encoded(slot_record(name, 42))
        owner = len(f"{PREFIX}owners/{name}") + encoded({"controller": "ctl-00", "since": 0.0})
        member = len(f"{PREFIX}members/ctl-00") + encoded(
            {"holder": "pid 4242 on ctl-a", "since": 0.0, "last_pass": 0.0, "hosts": 2000}
        )
        return cls(host, slot, owner, member)


def whole_state(hosts: int, tasks_per_host: int) -> int:
    """Today's `PREFIX/controller` value: every host's and slot's record in one key."""
    one_host = encoded(host_record("host-000042", tasks_per_host)) + len('"host-000042":,')
    one_slot = encoded(slot_record("host-000042", 42)) + len('"42":,')
    return hosts * one_host + hosts * tasks_per_host * one_slot


def whole_state_limit(tasks_per_host: int) -> int:
    """The fleet size at which one commit of today's key passes etcd's request limit."""
    return REQUEST_LIMIT // (whole_state(1000, tasks_per_host) // 1000)


@dataclass(frozen=True)
class Load:
    hosts: int
    members: int
    writes_per_s: float
    per_host_per_min: float
    bytes_per_s: float
    at_rest_bytes: int
    today_bytes_per_min: float  # the single controller key, rewritten by every commit


@dataclass(frozen=True)
class Rates:
    """What happens at rest. `churn` is task changes (a death, a restart, a deploy's
    replacement) per host per hour; each costs the writes listed in `per_change`."""

    tasks_per_host: int = 2
    heartbeat: float = 10.0  # s between a controller's member-key updates (its last pass)
    churn: float = 1.0
    per_change: int = 4  # host summary (gone), slot decided, slot running, host summary (new)
    today_commits_per_min: float = 4.0  # two resync passes a minute, two commits each


def at_rest(hosts: int, members: int, rates: Rates) -> Load:
    s = Sizes.measure(rates.tasks_per_host)
    writes = members / rates.heartbeat + hosts * rates.churn / 3600 * rates.per_change
    change_bytes = (2 * s.host + 2 * s.slot) / 4  # the mean of the four writes
    bytes_s = members / rates.heartbeat * s.member + (
        hosts * rates.churn / 3600 * rates.per_change * change_bytes
    )
    rest = hosts * (s.host + s.owner) + hosts * rates.tasks_per_host * s.slot + members * s.member
    today = rates.today_commits_per_min * whole_state(hosts, rates.tasks_per_host)
    return Load(hosts, members, writes, writes * 60 / hosts, bytes_s, rest, today)


@dataclass(frozen=True)
class Burst:
    hosts: int
    members: int
    lost_hosts: int
    replacements: int
    ops: int
    txns: int
    bytes: int
    ring_ops: int  # owner keys deleted by the dead controller's lease and created again


def mass_failure(
    hosts: int, members: int, rates: Rates, lost: float = 0.10, moved: int | None = None
) -> Burst:
    """A tenth of the hosts lost at once, and one controller dead with them: what the
    shards, the decider and the survivors' takes write. `moved`: hosts that changed hands
    (from the ring model; default N/C)."""
    s = Sizes.measure(rates.tasks_per_host)
    gone = round(hosts * lost)
    replaced = gone * rates.tasks_per_host
    targets = min(replaced, hosts - gone)
    observe = 2 * gone  # unreachable, then down (down_after = 2): a summary each
    decide = replaced  # one slot record per replacement, in the decider's transactions
    fold = replaced + targets  # each slot running, each target host's summary once
    moved = hosts // members if moved is None else moved
    ring = 2 * moved  # each owner key deleted (the dead lease) and created by its taker
    ops = observe + decide + fold
    txns = (
        math.ceil(observe / TXN_OPS) * 2 + math.ceil(decide / TXN_OPS) + math.ceil(fold / TXN_OPS)
    )
    txns += 1 + math.ceil(moved / TXN_OPS)  # the revoke, then the takes
    size = observe * s.host + (decide + replaced) * s.slot + targets * s.host + moved * s.owner
    return Burst(hosts, members, gone, replaced, ops + ring, txns, size, ring)


# -- 4. where decisions are made -------------------------------------------------------------


@dataclass(frozen=True)
class Conflicts:
    hosts: int
    shards: int
    policy: str
    placements: int
    rounds: int
    txns: int
    refused: int

    @property
    def rate(self) -> float:
        return self.refused / self.txns if self.txns else 0.0


def per_shard_placement(
    hosts: int, shards: int, rng: random.Random, policy: str = "ranked", slots: int = 4
) -> Conflicts:
    """(b): a mass failure (10% of hosts lost, each had 2 tasks of one spread service; every
    host takes `slots` tasks). Each shard replaces the tasks of its own lost hosts: it plans
    on a snapshot of the fleet's free capacity at the round's start, and commits one
    transaction per target host compared on that host's capacity revision (Nomad's plan
    applier checks each node's fit and commits partially: nomad/plan_apply.go,
    evaluateNodePlan). etcd applies the shards' transactions in some order; a refused one
    goes back to its shard for the next round, on a fresh snapshot.

    `ranked`: every shard ranks hosts as MiniDock's scheduler does (fewest tasks of the
    service, then fullest, then by name: deterministic, so shards agree on the best host);
    `sampled`: the better of two random candidates (the power of two choices; Nomad's
    GenericStack visits nodes in random order "to reduce collisions between schedulers"
    and weighs 2, or log2(n) for services: scheduler/stack.go)."""
    lost = set(rng.sample(range(hosts), hosts // 10))
    live = [h for h in range(hosts) if h not in lost]
    count = dict.fromkeys(live, 2)  # tasks of the service per host (here: all its tasks)
    revision = dict.fromkeys(live, 0)
    pending = dict.fromkeys(range(shards), 0)
    for i in range(len(lost)):
        pending[i % shards] += 2  # a lost host's shard replaces its tasks
    placements = sum(pending.values())
    rounds = txns = refused = 0
    while any(pending.values()):
        rounds += 1
        snapshot = dict(count)
        seen = dict(revision)
        plans: list[tuple[int, int, int]] = []  # (shard, host, tasks)
        for shard, want in pending.items():
            if want:
                chosen = _plan(snapshot, want, rng, policy, slots)
                plans += [(shard, h, n) for h, n in chosen.items()]
        rng.shuffle(plans)  # the order in which etcd applies them
        for shard, h, n in plans:
            txns += 1
            if revision[h] != seen[h] or count[h] + n > slots:
                refused += 1
                continue
            revision[h] += 1
            count[h] += n
            pending[shard] -= n
        assert rounds < 10_000, "placement does not converge"
    assert max(count.values()) <= slots
    assert sum(count.values()) == 2 * hosts
    return Conflicts(hosts, shards, policy, placements, rounds, txns, refused)


def _plan(
    snapshot: dict[int, int], want: int, rng: random.Random, policy: str, slots: int
) -> dict[int, int]:
    """`want` placements on this shard's copy of the snapshot (the shard's own plan)."""
    mine = dict(snapshot)
    chosen: dict[int, int] = {}
    if policy == "ranked":
        heap = [(n, h) for h, n in mine.items() if n < slots]
        heapq.heapify(heap)
        while want and heap:
            n, h = heapq.heappop(heap)
            if mine[h] != n:
                continue
            mine[h] += 1
            chosen[h] = chosen.get(h, 0) + 1
            want -= 1
            if mine[h] < slots:
                heapq.heappush(heap, (mine[h], h))
        return chosen
    hosts = list(mine)
    while want:
        a, b = rng.choice(hosts), rng.choice(hosts)
        h = min((a, b), key=lambda x: mine[x])
        if mine[h] >= slots:
            if all(mine[x] >= slots for x in hosts):
                break
            continue
        mine[h] += 1
        chosen[h] = chosen.get(h, 0) + 1
        want -= 1
    return chosen


# Figures measured in docs/benchmarks.md that the latency below is composed of:
KILL_TO_STARTED = {100: 0.69, 1000: 2.18}  # "Watch reacts to events", quiet machine, medians
DECIDE_PER_TASK = 0.0715 / 10_000  # "The decision core": converged, 1,000 hosts, 10,000 tasks
IN_PROCESS_PER_HOST = 0.175 / 1000  # "Watch reacts to events": a pass's own work, 0.15-0.2 s
PROBE_ONE_HOST = 0.104  # "A pass over real SSH": a warm probe (4 lab hosts, in parallel)
ETCD_HOP = 0.005  # one request or watch delivery: the handover model's upper bound


@dataclass(frozen=True)
class Latency:
    """Seconds from a task's death, with one task per host (bench_watch's fleet)."""

    hosts: int
    members: int
    today: float  # to its replacement started, one controller (fitted to the measured two)
    decision: tuple[float, float]  # (a): to the decider's decision, idle .. loaded as today
    started: tuple[float, float]  # (a): to the replacement started, the two attributions

    @property
    def per_shard(self) -> tuple[float, float]:
        """(b) without a conflict: the same less the decider's two etcd hops."""
        return (self.started[0] - 2 * ETCD_HOP, self.started[1] - 2 * ETCD_HOP)


def fitted() -> tuple[float, float]:
    """Today's death-to-started as b + 2 k N (two passes of k per host), through the two
    measured points: b is the fixed part (SSH round trips, the 100 ms backoff, a pass's
    fixed costs), k a pass's cost per host."""
    (n1, l1), (n2, l2) = sorted(KILL_TO_STARTED.items())
    k = (l2 - l1) / (2 * (n2 - n1))
    return l1 - 2 * k * n1, k


def latency(hosts: int, members: int) -> Latency:
    """(a) one decider. Its passes keep the decision over the whole fleet (DECIDE_PER_TASK
    a task) but lose the whole-state codec (a key per host and slot, read from its watch
    cache, written only when changed); the shard's pass probes the one host that rang.
    Today's k is about 4.7 times a pass's own work on an idle machine
    (IN_PROCESS_PER_HOST); two attributions of the rest bracket the projection: low, all
    of it is the pass's own work slowed by the shared machine (the decision slowed alike);
    high, the rest is the controller carrying N connections and event streams, of which a
    shard carries N/C. Four etcd hops: the observation's put and its watch, the
    decision's put and its watch."""
    b, k = fitted()
    slow = k / IN_PROCESS_PER_HOST
    decide = DECIDE_PER_TASK * hosts
    probe = PROBE_ONE_HOST + 2 * ETCD_HOP
    low = b + 2 * slow * decide + 4 * ETCD_HOP
    high = low + 2 * (k - IN_PROCESS_PER_HOST) * hosts / members
    return Latency(hosts, members, b + 2 * k * hosts, (probe + decide, probe + slow * decide),
                   (low, high))  # fmt: skip


# -- the tables ----------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[object]], right: int = 1) -> str:
    out = ["| " + " | ".join(header) + " |"]
    out.append("| " + " | ".join(["---"] * right + ["---:"] * (len(header) - right)) + " |")
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def human(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def report(seed: int, quick: bool) -> str:
    started = time.monotonic()
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    counts = (1, 2, 3, 5, 10) if quick else (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
    rng = random.Random(seed)
    out: list[str] = []
    fleets = {n: numbered(n) for n in sizes}

    for n in sizes[:2]:  # the single-owner check, each controller computing alone
        for c in (2, 5, 10):
            assert_single_owner(fleets[n], members_named(c), rng)

    out.append(f"### The ring: load per controller (c = {CAPACITY}, {VNODES} points each)\n")
    rows = []
    for n in sizes:
        for c in counts:
            b = balance(fleets[n], members_named(c))
            rows.append([f"{n:,}", c, f"{b.cap:,}", f"{b.max_load:,}", f"{b.min_load:,}",
                         f"{b.max_over_mean:.3f}"])  # fmt: skip
    out.append(table(["hosts", "controllers", "cap ceil(cN/C)", "max", "min", "max/mean"], rows, 2))

    out.append("\n### The ring: hosts that change hands\n")
    rows = []
    for n in sizes:
        for c in (c for c in counts if c > 1):
            for m in (join(fleets[n], members_named(c - 1)), leave(fleets[n], members_named(c))):
                after = m.members + (1 if m.event == "join" else -1)
                rows.append([f"{n:,}", f"{m.members} -> {after}", m.event, f"{m.moved:,}",
                             f"{m.minimal:,}", f"{m.ratio:.2f}",
                             f"{m.between_live:,}"])  # fmt: skip
    out.append(table(["hosts", "controllers", "event", "moved", "minimum", "moved/minimum",
                      "moved between controllers that stay"], rows, 3))  # fmt: skip

    n = sizes[1]
    out.append(f"\n### The bound c: {n:,} hosts, 10 controllers (a join: from 9)\n")
    rows = []
    for bound in (1.02, 1.05, 1.1, 1.25, 1.5, math.inf):
        bal = balance(fleets[n], members_named(10), bound)
        jm = join(fleets[n], members_named(9), bound)
        lm = leave(fleets[n], members_named(10), bound)
        rows.append(["none" if bound == math.inf else f"{bound:g}", f"{bal.max_over_mean:.3f}",
                     f"{jm.ratio:.2f}", f"{lm.ratio:.2f}", f"{lm.between_live:,}"])  # fmt: skip
    out.append(table(["c", "max/mean", "join: moved/minimum", "leave: moved/minimum",
                      "leave: moved between live"], rows))  # fmt: skip

    out.append("\n### Warm takeover: the standby set (what a controller takes on any one death)\n")
    rows = []
    for n in sizes[:2]:
        for c in (3, 5, 10):
            sb = standby_sizes(fleets[n], members_named(c))
            share = n / c
            rows.append([f"{n:,}", c, f"{share:,.0f}", f"{max(sb.values()):,}",
                         f"{max(sb.values()) / share:.2f}"])  # fmt: skip
    out.append(
        table(["hosts", "controllers", "share N/C", "standby, max", "standby/share"], rows, 2)
    )

    trials = 40 if quick else 200
    out.append(f"\n### The handover: {trials} trials each, 60 hosts, 4 controllers (+1 joining)\n")
    rows = []
    for ttl in (2.0, 3.0, 10.0):
        for scenario in SCENARIOS:
            h = handovers(scenario, Timing(ttl=ttl), trials, seed)
            rows.append([scenario, f"{ttl:g} s", f"{h.handed:,}", f"{h.gap_median:.3f} s",
                         f"{h.gap_max:.3f} s", h.overlaps, h.late, h.refused])  # fmt: skip
    out.append(table(["event", "lease ttl", "hosts handed over", "no owner: median", "max",
                      "two may act", "late commands", "writes refused"], rows, 2))  # fmt: skip
    broken = []
    for label, timing, scenario in (
        ("acts not fenced by the lease", Timing(ttl=2.0, fence=False), "pause"),
        ("no drain: the ring view alone", Timing(ttl=2.0, drain=False), "join"),
    ):
        h = handovers(scenario, timing, max(trials // 4, 10), seed)
        broken.append([label, scenario, f"{h.handed:,}", h.overlaps, h.refused])
    out.append("\nThe same check on the design broken on purpose (it must find overlaps):\n")
    out.append(table(["broken", "event", "hosts handed over", "two may act", "writes refused"],
                     broken, 2))  # fmt: skip

    rates = Rates()
    s = Sizes.measure(rates.tasks_per_host)
    out.append(
        f"\n### etcd at rest ({rates.tasks_per_host} tasks per host; a key and its value: "
        f"host {s.host} B, slot {s.slot} B, owner {s.owner} B, member {s.member} B)\n"
    )
    rows = []
    for n in sizes:
        for c in (5, 10):
            for churn in (0.0, rates.churn):
                load = at_rest(n, c, Rates(churn=churn))
                rows.append([f"{n:,}", c, f"{churn:g}", f"{load.writes_per_s:.1f}",
                             f"{load.per_host_per_min:.3f}", human(load.bytes_per_s) + "/s",
                             human(load.at_rest_bytes),
                             human(load.today_bytes_per_min) + "/min"])  # fmt: skip
    out.append(table(["hosts", "controllers", "changes/host/hour", "writes/s", "writes/host/min",
                      "written", "at rest", "today: the one key written"], rows, 3))  # fmt: skip
    out.append(
        f"\nToday's single `controller` key: {human(whole_state(1000, 2))} at 1,000 hosts of "
        "2 tasks; one commit of it passes etcd's 1.5 MiB request limit from "
        f"{whole_state_limit(2):,} hosts of 2 tasks ({whole_state_limit(1):,} of 1 task)."
    )

    out.append("\n### etcd in a mass failure (10% of hosts lost, and one of 5 controllers dead)\n")
    rows = []
    for n in sizes:
        moved = leave(fleets[n], members_named(5)).moved
        burst = mass_failure(n, 5, rates, moved=moved)
        rows.append([f"{n:,}", f"{burst.lost_hosts:,}", f"{burst.replacements:,}",
                     f"{moved:,}", f"{burst.ops:,}", f"{burst.txns:,}",
                     human(burst.bytes)])  # fmt: skip
    out.append(table(["hosts", "lost hosts", "replacements", "hosts changing controller",
                      "operations", "transactions", "bytes written"], rows))  # fmt: skip

    out.append("\n### Deciding: (b) per-shard deciders in a mass failure (10% of hosts lost)\n")
    rows = []
    for n in sizes:
        for shards in (2, 5, 10):
            for policy in ("ranked", "sampled"):
                cf = per_shard_placement(n, shards, random.Random(f"{seed}/{n}/{shards}"), policy)
                rows.append([f"{n:,}", shards, policy, f"{cf.placements:,}", cf.rounds,
                             f"{cf.txns:,}", f"{cf.refused:,}", f"{cf.rate:.0%}"])  # fmt: skip
    out.append(table(["hosts", "shards", "ranking", "placements", "rounds", "transactions",
                      "refused", "conflict rate"], rows, 3))  # fmt: skip

    out.append("\n### Deciding: a task's death to (a)'s decision and to its replacement started\n")
    rows = []
    for n in (100, 1_000, 10_000, 100_000):
        for c in (1, 5, 10):
            lat = latency(n, c)
            rows.append([f"{n:,}", c, f"{lat.today:.2f} s",
                         f"{lat.decision[0]:.2f}-{lat.decision[1]:.2f} s",
                         f"{lat.started[0]:.2f}-{lat.started[1]:.2f} s"])  # fmt: skip
    out.append(table(["hosts", "controllers", "today: started (one controller)",
                      "(a): decided", "(a): started"], rows, 2))  # fmt: skip
    took = time.monotonic() - started
    out.append(f"\n(seed {seed}{', --quick' if quick else ''}; the model ran {took:.0f} s)")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="smaller fleets, fewer trials")
    args = parser.parse_args(argv)
    print(report(args.seed, args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
