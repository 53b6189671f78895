"""Two controllers on one etcd state, on the real lab fleet and the session's real
three-member etcd (tests/etcd.py): each runs `minidock reconcile` in a loop, as cron or a
systemd timer would on two controller machines.

Every action happens once; a kill -9 of the leader mid-pass leaves the other to converge
the fleet within the lease TTL plus a pass; a leader paused (SIGSTOP) past its TTL commits
nothing when it resumes and stops with one line; one etcd member of three down changes
nothing for users, two down and the controllers refuse to act, saying "no quorum".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from minidock.store.etcd import Keys, Meta
from minidock.store.etcd_client import range_end, rpc
from tests.etcd import EtcdCluster, history, revision
from tests.integration.conftest import Fleet, Minidock

TTL = 3.0
SPEC = """
[services.web]
image = "minidock-lab/web:{version}"
replicas = 3
update = {{ parallelism = 1, monitor = "1s", order = "start-first" }}

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""
LOOP = (
    'while :; do "$0" -m minidock reconcile; echo "== exit $? at $(date +%s.%N)"; sleep 0.3; done'
)
PASS = re.compile(r"^== exit (\d+) at ([0-9.]+)$")


@dataclass
class EtcdMinidock(Minidock):
    """The real CLI with its state in etcd (MINIDOCK_STATE is the URL)."""

    url: str = ""

    def env(self) -> dict[str, str]:
        return {**super().env(), "MINIDOCK_STATE": self.url}


@dataclass
class Controller:
    """One controller machine: `minidock reconcile` in a loop, in its own process group."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, md: EtcdMinidock) -> Controller:
        log = md.workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", LOOP, sys.executable],
                env=md.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return cls(name, process, log)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def passes(self) -> list[tuple[int, float]]:
        """(exit code, wall time it ended) of each finished pass."""
        return [(int(m[1]), float(m[2])) for line in self.lines() if (m := PASS.match(line))]

    def owns(self, pid: int) -> bool:
        try:
            return os.getpgid(pid) == self.process.pid
        except ProcessLookupError:
            return False

    def signal(self, sig: signal.Signals) -> None:
        """To the whole controller (the loop and its reconcile), by the PID started here."""
        os.killpg(self.process.pid, sig)

    def end(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def ha(fleet: Fleet, tmp_path: Path, etcd_cluster: EtcdCluster) -> EtcdMinidock:
    etcd_cluster.ensure_all()
    return EtcdMinidock(fleet, tmp_path, url=etcd_cluster.url(ttl=f"{TTL:g}s"))


@pytest.fixture
def controllers(ha: EtcdMinidock) -> Callable[[], tuple[Controller, Controller]]:
    started: list[Controller] = []

    def start() -> tuple[Controller, Controller]:
        started.extend([Controller.start("a", ha), Controller.start("b", ha)])
        return started[-2], started[-1]

    yield start  # type: ignore[misc]
    for c in started:
        c.end()


def wait_for(what: str, check: Callable[[], object], timeout: float, every: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def holder_pid(cluster: EtcdCluster, url: str) -> int | None:
    """The pid named by the lock key with the lowest create revision (the holder)."""
    prefix = "/" + url.split("/", 3)[3].split("?")[0]
    lock = Keys(prefix).lock.decode()
    done = cluster.etcdctl(
        "get", "--prefix", lock, "--sort-by=CREATE", "--order=ASCEND", "--limit=1", "-w", "json"
    )
    kvs = json.loads(done.stdout or "{}").get("kvs") or []
    if not kvs:
        return None
    import base64

    holder = json.loads(base64.b64decode(kvs[0]["value"]))["holder"]
    return int(holder.split()[1])


def live(md: Minidock, hosts: list[str]) -> list[str]:
    return [
        f"{line.split()[0]}@{h}"
        for h in hosts
        for line in md.containers(h)
        if line.endswith("running")
    ]


def every_container(md: Minidock, hosts: list[str]) -> list[str]:
    return [f"{line.split()[0]}@{h}" for h in hosts for line in md.containers(h)]


def slots(names: list[str]) -> Counter[int]:
    return Counter(int(n.split(".")[1]) for n in names)


def converged(md: EtcdMinidock, version: int = 5, replicas: int = 3) -> bool:
    """What `status` reads (no pass of its own): every replica runs `version`, healthy."""
    tasks = md.tasks("web")
    return len(tasks) == replicas and all(
        t["image"].endswith(f":{version}") and t["health"] == "healthy" for t in tasks
    )


def in_a_pass(cluster: EtcdCluster, md: EtcdMinidock, *among: Controller) -> int | None:
    """The pid of the reconcile holding the lock, if it is one of `among`'s."""
    pid = holder_pid(cluster, md.url)
    return pid if pid is not None and any(c.owns(pid) for c in among) else None


def deploy(md: EtcdMinidock, version: int = 5) -> subprocess.CompletedProcess[str]:
    done = md("apply", str(md.spec(SPEC.format(version=version))), "--wait", "--timeout", "90s")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def acts(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(("started ", "stopped "))]


# -- every action once; kill -9 the leader mid-pass -----------------------------------------------
def test_two_controllers_act_once_and_a_killed_leaders_peer_converges_within_the_ttl(
    ha: EtcdMinidock,
    fleet: Fleet,
    etcd_cluster: EtcdCluster,
    controllers: Callable[[], tuple[Controller, Controller]],
) -> None:
    deployed = deploy(ha)
    assert len([line for line in deployed.stdout.splitlines() if line.startswith("started ")]) == 3
    a, b = controllers()
    wait_for("both to pass twice", lambda: min(len(a.passes()), len(b.passes())) >= 2, 60)
    both = a.passes() + b.passes()
    assert {code for code, _ in both} <= {0, 75}, both  # converged, or the other's turn
    assert acts(a.lines() + b.lines()) == []  # nothing to do, done by nobody

    before = Counter(n.split("@")[1] for n in live(ha, fleet.hosts))
    lost = max(sorted(before), key=lambda h: before[h])
    survivors = [h for h in fleet.hosts if h != lost]
    fleet.kill(lost, "stop")
    pid = wait_for("a controller in a pass", lambda: in_a_pass(etcd_cluster, ha, a, b), 30, 0.05)
    assert isinstance(pid, int)
    leader, other = (a, b) if a.owns(pid) else (b, a)
    killed_at = time.time()
    leader.signal(signal.SIGKILL)  # the whole controller machine dies mid-pass
    leader.process.wait(timeout=10)

    took_over = wait_for(
        "the other controller to pass",
        lambda: next((t for code, t in other.passes() if t > killed_at and code != 75), None),
        TTL + 20,
    )
    assert isinstance(took_over, float)
    assert took_over - killed_at <= TTL + 8, f"took over after {took_over - killed_at:.1f}s"
    wait_for("the fleet to converge", lambda: converged(ha), 90, every=1)

    running = live(ha, survivors)
    assert slots(running) == Counter({1: 1, 2: 1, 3: 1}), running
    assert len(every_container(ha, survivors)) == 3  # no duplicate left anywhere
    started = [line for line in acts(other.lines()) if line.startswith("started ")]
    assert len(started) <= before[lost], started
    fleet.revive(lost)
    wait_for(
        "the revived host's stale tasks to go",
        lambda: converged(ha) and len(live(ha, fleet.hosts)) == 3,
        60,
        every=1,
    )


# -- SIGSTOP the leader past its TTL, resume it ------------------------------------------------
@dataclass
class Paused:
    """One pass paused past its lease and resumed: whose it was, and how it ended."""

    pid: int
    controller: Controller
    revision: int  # etcd's revision when it was paused
    ended: int  # the exit code of that pass


def pause_a_pass(cluster: EtcdCluster, md: EtcdMinidock, a: Controller, b: Controller) -> Paused:
    """SIGSTOP the controller whose reconcile holds the lock, past its TTL, until the other
    took over; SIGCONT it and wait for that pass to end."""
    pid = wait_for("a controller in a pass", lambda: in_a_pass(cluster, md, a, b), 30, 0.05)
    assert isinstance(pid, int)
    paused, other = (a, b) if a.owns(pid) else (b, a)
    paused.signal(signal.SIGSTOP)
    paused_at, paused_rev = time.time(), revision(cluster.endpoints[0])
    time.sleep(TTL + 2)  # past its lease
    wait_for(
        "the other controller to take over",
        lambda: any(t > paused_at + TTL and code != 75 for code, t in other.passes()),
        30,
    )
    resumed_at = time.time()
    paused.signal(signal.SIGCONT)
    ends = wait_for(
        "the paused pass to end",
        lambda: [code for code, t in paused.passes() if t > resumed_at],
        30,
    )
    assert isinstance(ends, list)
    return Paused(pid, paused, paused_rev, ends[0])


def commits_by(cluster: EtcdCluster, md: EtcdMinidock, pid: int, since: int) -> list[str]:
    """The commits (PREFIX/meta's writer) of `pid` since etcd revision `since` that came
    after another writer's: once another controller committed, it held the lock, and the
    paused one must never commit again. One of its commits applied before that was sent
    before its SIGSTOP, while it held the lease (a CI run caught one in flight: etcd
    applied it just after the test read the revision it was paused at)."""
    meta = Keys("/" + md.url.split("/", 3)[3].split("?")[0]).meta
    writers = [Meta.loads(value).writer for _, value in history(cluster.endpoints[0], meta, since)]
    assert writers, "nobody committed since"
    mine = f"pid {pid} "
    took_over = next((i for i, w in enumerate(writers) if not w.startswith(mine)), len(writers))
    return [w for w in writers[took_over:] if w.startswith(mine)]


def test_a_leader_paused_past_its_ttl_commits_nothing_when_resumed_and_stops_with_one_line(
    ha: EtcdMinidock,
    etcd_cluster: EtcdCluster,
    controllers: Callable[[], tuple[Controller, Controller]],
) -> None:
    deploy(ha, 5)
    a, b = controllers()
    update = ha("apply", str(ha.spec(SPEC.format(version=6))))  # a rolling update: many passes
    assert update.returncode in (0, 3), update.stderr
    for _ in range(3):  # paused after its pass's last commit, it had nothing left: again
        paused = pause_a_pass(etcd_cluster, ha, a, b)
        assert commits_by(etcd_cluster, ha, paused.pid, paused.revision) == []
        if paused.ended == 75:
            break
    lines = paused.controller.lines()
    assert paused.ended == 75, lines[-5:]
    lost_lines = [line for line in lines if "lost the writer lease" in line]
    assert len(lost_lines) == 1, lines
    assert lost_lines[0].startswith(f"minidock: lost the writer lease on {ha.url.split('?')[0]}")

    wait_for("the update to converge", lambda: converged(ha, 6), 120, every=1)
    assert commits_by(etcd_cluster, ha, paused.pid, paused.revision) == []


# -- etcd members down --------------------------------------------------------------------------
def test_one_member_down_changes_nothing_two_down_and_controllers_refuse_saying_no_quorum(
    ha: EtcdMinidock, fleet: Fleet, etcd_cluster: EtcdCluster
) -> None:
    deploy(ha)
    etcd_cluster.stop_member(0)  # the URL's first endpoint
    quiet = ha("reconcile")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert len(ha.tasks("web")) == 3
    four = ha.spec(SPEC.format(version=5).replace("replicas = 3", "replicas = 4"))
    scaled = ha("apply", str(four), "--wait", "--timeout", "60s")
    assert scaled.returncode == 0, scaled.stderr
    assert len(ha.tasks("web")) == 4

    containers = every_container(ha, fleet.hosts)
    etcd_cluster.stop_member(1)
    for command in (("reconcile",), ("status",)):
        start = time.monotonic()
        refused = ha(*command)
        took = time.monotonic() - start
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith("minidock: ")
        assert "etcd has no quorum: 1 of 3 endpoints answer and none has a leader" in line
        assert took < 15, f"{command}: {took:.1f}s"
    assert every_container(ha, fleet.hosts) == containers  # nothing was done

    etcd_cluster.ensure_all()
    back = ha("reconcile")
    assert back.returncode == 0, back.stderr
    assert every_container(ha, fleet.hosts) == containers


# -- watches sharing the fleet: each holds the ring's share of the owner keys ---------------------
def shares_held(md: EtcdMinidock, hosts: list[str], members: int) -> dict[str, str] | None:
    """The owner keys (host -> controller) once `members` watches are live and the keys
    are exactly the ring's map over them; None before. Every owner is a live member."""
    from minidock.core.ring import assign
    from minidock.store import parse_location
    from minidock.store.etcd_client import EtcdClient
    from minidock.store.location import EtcdURL
    from minidock.store.owners import read_table

    url = parse_location(md.url)
    assert isinstance(url, EtcdURL)
    client = EtcdClient(url)
    try:
        table = read_table(url, client)
    finally:
        client.close()
    owners = {h: key.controller for h, key in table.owners.items()}
    assert set(owners.values()) <= table.members, (owners, table.members)
    named = [f"{md.cluster}/{h}" for h in hosts]  # an owner key names its cluster
    if len(table.members) != members or owners != assign(named, table.members):
        return None
    return owners


RESYNC = "60s"  # longer than any wait of the test below: only etcd's news moves the shares


def stop_watches(watches: list[subprocess.Popen[str]]) -> None:
    """Ctrl-C each watch still running, then wait for all (a kill after 20 s)."""
    for watch in watches:
        if watch.poll() is None:
            watch.send_signal(signal.SIGINT)
    for watch in watches:
        try:
            watch.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.communicate()


def passes_by_pid(md: EtcdMinidock) -> dict[int, int]:
    """Each running watch's passes that held the lock, by its pid (`controllers --json`)."""
    doc = json.loads(md("controllers", "--json").stdout)
    return {int(m["holder"].split()[1]): m["passes"] for m in doc["members"]}


def test_watches_hold_the_rings_shares_a_joiner_rebalances_and_a_killed_ones_are_taken(
    ha: EtcdMinidock, fleet: Fleet
) -> None:
    """Three `minidock watch` on one etcd state: their owner keys come to the ring's map
    over them; one of them (the senior) makes the passes, the others stand by; a fourth
    joins, makes no pass, and the keys follow the ring over four; the one making the
    passes is killed with -9, the survivors take its hosts within the TTL and another
    makes the passes. Each on etcd's news, not at a resync: the resync is a minute away
    and every wait here is shorter (30 s, the loaded machine's margin). The shares are
    not yet worked by (docs/scale.md): the tasks stay as they were, each slot once."""
    deploy(ha)
    before = sorted(every_container(ha, fleet.hosts))
    watches = [ha.popen("watch", "--interval", RESYNC) for _ in range(3)]
    try:
        three = wait_for("three shares", lambda: shares_held(ha, fleet.hosts, 3), 30, every=0.5)
        assert isinstance(three, dict)
        assert sorted(three) == sorted(f"{ha.cluster}/{h}" for h in fleet.hosts)
        doc = json.loads(ha("controllers", "--json").stdout)
        owned = {m["id"]: m["owned"] for m in doc["members"]}
        assert owned == {m: sum(1 for c in three.values() if c == m) for m in owned}
        status = json.loads(ha("status", "--json").stdout)
        named = {h["name"]: h["controller"] for h in status["hosts"]}
        assert named == {h: three[f"{ha.cluster}/{h}"] for h in fleet.hosts}
        shown = ha("status").stdout.splitlines()  # the table: a controller column
        assert any("controller" in line and "engine" in line for line in shown), shown
        rows = {line.split()[1]: line for line in shown if len(line.split()) > 1}
        assert all(three[f"{ha.cluster}/{h}"] in rows[h] for h in fleet.hosts), shown

        joiner = ha.popen("watch", "--interval", RESYNC)
        watches.append(joiner)
        four = wait_for("four shares", lambda: shares_held(ha, fleet.hosts, 4), 30, every=0.5)
        assert isinstance(four, dict)
        passes = passes_by_pid(ha)
        assert passes[joiner.pid] == 0, passes  # it saw the senior at its first round
        # a watch started with the others may have passed once, before any had a member key;
        # after that only the senior passes (each join and each key given up rang them all)
        assert sum(1 for n in passes.values() if n > 1) <= 1, passes
        deciding = max(passes, key=lambda pid: passes[pid])
        (senior,) = [w for w in watches if w.pid == deciding]

        senior.kill()  # -9: its member key and owner keys go with its lease
        senior.wait(timeout=10)
        # Its lease ends within TTL (3 s), and the news of its keys gone rings the
        # survivors' rounds: they take its hosts, and the next senior makes a pass
        wait_for("the survivors' shares", lambda: shares_held(ha, fleet.hosts, 3), 30, every=0.5)
        wait_for(
            "another watch's pass",
            lambda: any(n > passes[pid] for pid, n in passes_by_pid(ha).items()),
            30,
            every=0.5,
        )
        assert sorted(every_container(ha, fleet.hosts)) == before  # acted on by nobody
    finally:
        stop_watches(watches)


def shard_keys(md: EtcdMinidock) -> dict[str, Any]:
    """What the owners wrote and the deciders wanted, as etcd holds it (a failure says)."""
    from minidock.store import parse_location
    from minidock.store.etcd_client import EtcdClient
    from minidock.store.location import EtcdURL
    from minidock.store.seen import read_shard_table, wanted_prefix

    url = parse_location(md.url)
    assert isinstance(url, EtcdURL)
    client = EtcdClient(url)
    try:
        table = read_shard_table(url, client, md.cluster)
        wanted = client.range(
            rpc.RangeRequest(key=wanted_prefix(url), range_end=range_end(wanted_prefix(url)))
        )
        tenure = client.range(rpc.RangeRequest(key=Keys(url.prefix).tenure))
    finally:
        client.close()
    return {
        "written": {h: (w.writer, w.owner, w.revision) for h, w in table.written.items()},
        "owners": {h: (k.controller, k.created) for h, k in table.owners.items()},
        "rounds": dict(table.rounds),
        "wanted": [(bytes(kv.key).decode(), int(kv.mod_revision)) for kv in wanted.kvs],
        "tenure": [int(kv.mod_revision) for kv in tenure.kvs],
        "revision": int(tenure.header.revision),
    }


def test_watches_observe_and_act_by_share_a_task_killed_on_an_owners_host_is_replaced_by_it(
    ha: EtcdMinidock, fleet: Fleet
) -> None:
    """Three `minidock watch`: the two that stand by probe the hosts whose owner keys they
    hold and follow those hosts' event streams, and write what they saw; the one making
    the passes borrows those observations (its member key's `borrowed`, and the table
    says so) instead of probing those hosts, and its next pass comes as soon as an owner
    writes. A task killed on a host another watch owns is replaced, each slot once, the
    verbs on that host carried out by its owner on the decider's order (their member
    keys' `carried` and `ordered`; docs/scale.md, "Observing by share" and "Acting by
    share"). Each on events and etcd's news: the resync is a minute away and every wait
    here is shorter (45 s, 30 s and 10 s)."""
    deploy(ha)
    watches = [ha.popen("watch", "--interval", RESYNC) for _ in range(3)]

    last: list[Any] = []

    def borrowing() -> dict[str, Any] | None:
        members = json.loads(ha("controllers", "--json").stdout)["members"]
        last[:] = [members, shard_keys(ha)]
        deciding = [m for m in members if m["decides"]]
        if len(members) != 3 or len(deciding) != 1 or not deciding[0]["borrowed"]:
            return None
        return {"decider": deciding[0], "others": [m for m in members if not m["decides"]]}

    try:
        try:
            found = wait_for("the deciding watch to borrow", borrowing, 45, every=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last}") from None
        assert isinstance(found, dict)
        decider, others = found["decider"], found["others"]
        lent = sum(m["owned"] for m in others if ha.cluster in m["rounds"])
        assert 0 < decider["borrowed"] <= lent, found
        assert "hosts borrowed)" in ha("controllers").stdout
        status = json.loads(ha("status", "--json").stdout)
        theirs = {h["name"] for h in status["hosts"] if h["controller"] != decider["id"]}
        victims = [n for h in sorted(theirs) for n in live(ha, [h])]
        assert victims, (theirs, live(ha, fleet.hosts))
        name, host = victims[0].split("@")
        fleet.docker(host, "kill", name, check=True)
        wait_for(
            "the killed task replaced",
            lambda: (
                name not in {n.split("@")[0] for n in live(ha, fleet.hosts)}
                and len(live(ha, fleet.hosts)) == 3
                and converged(ha)
            ),
            30,
            every=1,
        )
        assert slots(live(ha, fleet.hosts)) == Counter({1: 1, 2: 1, 3: 1})
        owner = next(h["controller"] for h in status["hosts"] if h["name"] == host)

        def carried() -> bool:
            members = {
                m["id"]: m for m in json.loads(ha("controllers", "--json").stdout)["members"]
            }
            last[:] = [members]
            return members[owner]["carried"] >= 1 and members[decider["id"]]["ordered"] >= 1

        try:  # the victim's host's verbs were its owner's, on the decider's order
            wait_for("the owner to have carried the acts on its host", carried, 10, every=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last}") from None
    finally:
        stop_watches(watches)


SLOW_ROLLOUT = SPEC.replace('monitor = "1s"', 'monitor = "4s"')  # a batch takes 5 s or more


def started_twice(md: EtcdMinidock) -> list[str]:
    """The tasks whose start was recorded more than once (a double act), from `events`."""
    events = json.loads(md("events", "-n", "0", "--json").stdout)
    runs = Counter(e["task"] for e in events if e["kind"] == "run" and e.get("task"))
    return [task for task, n in runs.items() if n > 1]


def test_watches_acting_by_share_finish_a_rollout_past_a_killed_decider_and_a_joiner(
    ha: EtcdMinidock, fleet: Fleet
) -> None:
    """Three `minidock watch` acting by share (docs/scale.md, "Acting by share"): a
    rolling update begins; the watch making the passes is killed with -9 in its middle;
    the survivors take its hosts and another makes the passes and finishes the update; a
    fourth joins and the shares rebalance as the update goes on. The task verbs on the
    owners' hosts are carried out by their owners (`carried`), each task is started once
    (no start recorded twice, no container left over), each slot ends with one task of
    the new spec."""
    deploy(ha)
    watches = [ha.popen("watch", "--interval", RESYNC) for _ in range(3)]
    last: list[Any] = []

    def members() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(ha("controllers", "--json").stdout)["members"]
        last[:] = [found, shard_keys(ha)]
        return found

    def deciding() -> dict[str, Any] | None:
        found = members()
        decider = [m for m in found if m["decides"]]
        return (
            decider[0] if len(found) == 3 and len(decider) == 1 and decider[0]["borrowed"] else None
        )

    try:
        try:
            decider = wait_for("the deciding watch to borrow", deciding, 45, every=1)
            assert isinstance(decider, dict)
            update = ha("apply", str(ha.spec(SLOW_ROLLOUT.format(version=6))))
            assert update.returncode in (0, 3), update.stdout + update.stderr
            wait_for(
                "the update's first new task",
                lambda: any(t["image"].endswith(":6") for t in ha.tasks("web")),
                30,
                every=0.5,
            )
            assert not converged(ha, version=6)  # mid-rollout
            (killed,) = [w for w in watches if decider["holder"].split()[1] == str(w.pid)]
            killed.kill()  # -9: its lease, member key, owner keys and any order go
            killed.wait(timeout=10)
            watches.append(ha.popen("watch", "--interval", RESYNC))  # a fourth joins
            wait_for(
                "the survivors' and the joiner's shares",
                lambda: shares_held(ha, fleet.hosts, 3),
                30,
                every=0.5,
            )
            wait_for("the update to finish", lambda: converged(ha, version=6), 90, every=1)
            wait_for(
                "the replaced tasks to go",
                lambda: len(every_container(ha, fleet.hosts)) == 3,
                30,
                every=1,
            )
            carried = sum(m["carried"] for m in members())
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last}") from None
        assert slots(live(ha, fleet.hosts)) == Counter({1: 1, 2: 1, 3: 1})
        assert started_twice(ha) == []
        assert carried >= 1, last  # the owners' share of the update's verbs
    finally:
        stop_watches(watches)
