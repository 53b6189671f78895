"""The whole decision with an operator at the keyboard, as properties (hypothesis, stateful).

The fleet is test_whole_decision's `Fleet` (tests.sim.World on 3 hosts; every pass the
runner's decision, carried out as the act path would, the volume moves' copies and
removals too), running two services from one cluster file through the real loader: `web`
(routed, replicated, a canary of 1 with `promote = "manual"` or "auto") and `db` (pinned:
a named volume, `data`, whose content the sim keeps per host: made empty where a task first
starts, written by its task as time passes, copied or restored afresh, half-written while
a copy is cut off, snapshotted by a backup the passes carry out; `restart = on-failure`;
its `backup = { stop = true }` or not, and `on_host_loss = "restore"` with a
`restore_after` of two passes or not, drawn with the spec). Nobody promotes at
once: `promote` is a rule.

Between passes `OperatorDecision` draws, each command its own rule and through the same
pure transition its use case calls (`minidock.core.intents`, `core.rebalance.record`),
refused where the use case refuses: `apply` of a changed spec (web's image, replicas and
canary; db's image, an env value and replicas), `scale` (the stored spec with another
count, `admit`), `rollback`, `promote`, `drain` (refused while a pinned slot is recorded
there) and `activate`, `forget` (a host that does not answer), `move` and `restore` of a db
slot (`begin_move`, `begin_restore` with each volume's newest snapshot, `--replace-kept`
or not; each with the fault that cuts its next copy and a few passes: `restore_cut`
always cuts it, so a half-written volume is reached), `restore --empty` (`start_empty`),
`backup` of a db slot (`saving.begin`, as `minidock backup` records it: the passes carry
the Plan's backup steps, the sim's copy a snapshot of the slot's volume; db's `backup = {
stop = true }` or not, drawn with the spec: its task stopped by the pass and started
again; its fault: its copy cut or failed, the slot's host lost mid copy, or the
controller killed after the stop or before the fold; `first` backs each slot up once, or
not), `maintenance` on and off, `pause` and `resume`, `reset`, `rebalance`; and faults:
a host lost (it stops answering; one at a time, so the mass-loss guard never holds; a few
passes with it, past a failover's wait, or none) and back, and a controller killed
within a pass: before its acts, after its stops, before its fold, half-way through a
copy, a copy's target or source host lost half-way, or a copy's stream broken with both
hosts answering (each step of a move and a restore is some pass's act, so each is cut).
`settle` is the still world: passes, no command, no new fault. web may have an
`autoscale` policy (drawn with the spec: max 2 or 3, or none), and the edge's request
rate is drawn with the first spec and by `traffic` (its metrics may not answer: no data).

Properties (docs/testing.md#the-whole-decision):
(b), (c) as test_whole_decision's: no route loses its last healthy upstream, no task stops
    while a loaded table sends to it (checked by the Fleet after each pass's acts);
(g) a pinned slot never has two running copies (at a start, counting every host not
    forgotten, a forgotten one back once a pass has seen it, but a failover's old host
    while it is down: it is fenced when it answers; after each pass, every host seen), and
    a failover keeps the slot's volume on its old host, whose task of the slot never runs
    past the first pass that sees it again;
(h) a pinned slot never starts on a half-written volume (but one on a host `forget` said
    was gone for good: if it answers again, the controller knows nothing of it), nor at all
    while a restore left it half written (its record said so once), through any apply,
    scale, rollback, promote or drain, until a restore of it completes; but the operator's
    word: `reset` (drawn after the mark) starts it on what its volume holds, `restore
    --empty` after `forget` on an empty one; `move` of it is refused;
(i) nor on an empty one while a snapshot of it exists (but after `restore --empty`);
(j) maintenance and pause hold until `maintenance off` or `resume` (a rollback, an apply,
    a scale do not end them);
(k) every command but the intent's own end carries every recorded move and rebalance;
(l) `scale` changes the count of the spec that runs, nothing else;
(m) while a canary runs, a slot outside it that ran another spec never runs the canary's
    (a slot that never had a task takes the new spec, by design), and no slot holds more than
    two live tasks then (a host back's stale task draining out of the routes aside);
(s) an autoscaled web's count stays within min..max after every pass, does not change on
    a pass without data, and changes by no command but apply, scale and rollback (scale
    outside the bounds refused; its own pass never goes in from the operator's count;
    rollback keeps the decided count within the bounds it returns to);
(n) on a still world every intent ends within `SETTLE` passes of the last command: each
    backup, with its slot's task running (issue 43 break 5: a kill between the stop and
    the start never leaves it down; but a slot whose host is down, forgotten, or that is
    Failed); each recorded move and restore (one that waits on a host down but not
    forgotten excepted: its target, its source, or one last seen running its task),
    rebalance, a drain's replacements, a rollout (a manual canary, and a rebalance or a
    drain's replacements of its service, wait for its promote: the last settle promotes it
    and settles again; a rollout of a service whose pinned slot waits for the operator's
    `restore` (its host forgotten, a snapshot known) or `move` (its data on a host drained
    since) waits too: the last settle restores or moves it and settles again; a slot a
    restore left half written waits for the operator: the last settle restores it, or
    resets db), and the proxies load the routes' serving mode.

On main (1754e7f), before issue 43's fixes, it finds (each shrunk by hypothesis or, where
one finding hides another on the same assertion line, reached by the same rules in
order; the rule that draws each named; issue 43's break numbers; `first` converges the
first spec (db 1 slot, web 1 replica unless said), and every command runs its own pass):
- break 1, `apply`: (k) "apply ... dropped db.1's moving to host2: stopping its task on
  host1": move(1, host2), apply(env "b" or any db change; dbs=2 alone too);
  `scale`: (k) "scale db=2 dropped db.1's moving to host2"; `rollback`: apply(env "b"),
  settle, move(1, host2), rollback(db): (k) "rollback db dropped db.1's moving to host2:
  stopping its task on host1"; `rebalance` then `apply`
  (web 3 replicas, drain host3, settle, activate host3, rebalance, apply web:2): (k)
  "dropped web's rebalance [(1, 'host1')]"; its data loss: backup(1), restore(1, its own
  host), passes(["mid copy"]), apply(env "b"), passes: (h) "db.1 started on a
  half-written data";
- break 4, `move` + `lose_host` + `forget`: (n) "not ended in 40 passes: db.1 moving to
  host2: copying its volumes from host1": move(1, host2), lose_host (the source or the
  target), forget, settle;
- break 7, `rollback`: (j) "web is serving, set maintenance": apply(web:2),
  maintenance_on, rollback(web); the same with pause: "set paused";
- break 8, `scale` after `rollback`: (l) "scale web=3 changed its spec: web:1 {} -> web:2
  {}": apply(web:2), rollback(web), scale(web, 3) (db alike: "scale db=0 changed its
  spec: db:1 {'MODE': 'a'} -> db:1 {'MODE': 'b'}" after apply(env "b"), rollback(db));
- break 9, `drain` in a manual canary: (m) "web.2 (no canary slot) runs the unpromoted
  spec on host1": apply(web:2, canary 1, manual), passes, drain(a host of a non-canary
  web task), passes;
- break 10, `apply` in a manual canary: (m) "web.1 holds 3 live tasks in a canary":
  apply(web:2, canary 1, manual), passes, apply(web:3, canary 1, manual), passes;
- `forget` starts a pinned slot empty (issue 43, "Never empty by surprise"): (i) "db.1
  started on an empty data on host2 though a snapshot of it exists": backup(1),
  lose_host(db.1's host), passes(2), forget, passes.
Found beside the issue's list:
- `drain` of a move's target while the move is under way (drain refuses only hosts the
  slot's record names, the source until the copy): (n) "db.1 moving to host2: starting
  its task there" for good (the slot down): first, move(1, host2), drain(host2), settle;
- a forgotten host back after an `apply`: its stale pinned task is taken for the update's
  old task and runs beside the new one for a pass: (g) "db.1 runs 2 copies": lose_host
  (db.1's host), forget, apply(env "b"), host_back, pause (any command's pass);
- a `rebalance` recorded while a host is lost (then forgotten) and another drained: its
  replacements land on the very host it moves off, again and again: (n) "web's rebalance
  ((1, 'host1'),)", web.1 holding 3 live tasks on host1 once promoted: first (web 1
  replica), apply(web:2, 2 replicas, canary 1, manual), drain(host2), settle,
  lose_host(host3), rebalance, forget, settle (the teardown's promote).
After issue 43's fixes were merged it found three more, each fixed and replayed by a test
at the end of this file: a canary re-applied with `update.canary = 0` and the same tasks
stayed a canary for ever (now promoted); a pinned slot scaled away while its host was down
lost its record and, scaled back, started empty beside its old copy (g) (the record now
stays while the down host may hold it); a move of a slot scaled away never ended (n) (now
it ends). Two of its checks were narrowed where the product is right: `forget HOST` ends
the moves that need HOST (k), and a slot given back to its own older task by an apply
during a canary, or scaled away, is no canary spreading (m); and an intent waits, not
fails (n), while every host is drained or down. Later rounds found and fixed: a drain of a
move's target (refused now), and a forgotten host's stale task kept during a canary.
Random seeds (derandomize off, `--hypothesis-seed=N`) then found more, each replayed by
a test at the end of this file. Fixed in the core: a move whose source was forgotten
while it cleaned never ended (n) (seed 11; `forget` now ends it); a pinned slot scaled
away lost its record, so scaled back it started afresh on an empty volume though it
waited for a restore (i) (seed 9; its record now stays: its host, or its wait); a
rebalance move no other host could take started its task on the host it moves off,
every pass, for ever (n) (seed 103; it ends now); during a canary a slot whose host was
forgotten was refilled with the unpromoted spec (m) (seed 131; the previous spec now).
Checks that were wrong, narrowed: (m) counted a host back's stale task, draining out
before its stop, as the canary's (seeds 8, 101), and remembered the old task of a slot
scaled away and back, which takes the new spec as a slot that never had a task does
(seeds 19, 22); (g) counted a forgotten host back as holding a copy before any pass had
seen it (seed 9); (n) took a rollout held by a slot that waits for the operator's
`restore` for one that never ends (seed 9); (c) the Fleet counted when a task left the
tables only on hosts that answer (seed 131). Swept since: docs/reliability.md.
Drawing half-written volumes found: a move whose target was lost mid copy left its partial
copy there for good, and the slot, its host later forgotten, started afresh on it (h) (the
failed move now discards it once the target answers, and a slot with no host waits for
that); (n) narrowed: a restore waits while a down host last seen running its task may.
Drawing backups inside the pass found: a backup of a slot scaled away (`backup = { stop =
true }`, then `scale db=0`) never ended, 'stopping its task for the copy' (n) (the passes
decide wanted slots only; it now ends, failed, as a move of a slot scaled away does).
Drawing failover found: a move of a slot after its failover waited for the failover's old
host (down, last seen running the slot's task), its task stopped meanwhile: the database
down for as long as that host is (the old host is fenced whatever moves the slot later);
a backup after a failover likewise (`backup = { stop = true }`: stopped, it waited).
Seed 131 at 300 examples then failed three ways, each with `on_host_loss = "restore"`.
Two were the Fleet's: a copy fault that loses a host, drawn before another host was lost,
fired after it, so two of three hosts were down and the mass-loss guard held every pass
(the rule is one host lost at a time; such a fault now cuts the copy without losing a
host). Under them, in the core: a failover restore whose copy failed left the slot
Failed and "half written" on its old host, where its own volume is whole (now undone and
tried again after the restart backoff: tests/unit/test_volume_moves.py); and an exited
task on the host a failover left was taken for the slot's clean exit, so the restored
slot was Complete and never started (n) (now removed, never counted). Seed 141: a `move`
onto the host that keeps a failover's old volume wrote over it (g) (now refused unless
`--replace-kept`, and a failover never placed there). Seed 256: while a slot waited for
its restore, an older failover's old host, back, had its task adopted (g) (now fenced).
Seed 15: a task stopped for a move that then ended (its target forgotten) was taken for
its own clean exit, so a `restart = on-failure` slot was Complete for good (n) (now never
counted). The Fleet lost two hosts when one pass cut two copies (seed 174; now one a
pass). (m) narrowed twice: it kept what an earlier canary of the same spec had seen (seeds
146, 173), and took a slot's own task of the canary's spec, back from a lost host, for a
spread (seed 94). Swept with derandomize off, 300 examples of 12 steps a seed: seeds 0
to 330 pass (docs/reliability.md). Found once `move` and `restore` drew `--replace-kept`
(which changed every seed's draws), and fixed in the core: seed 67, web alone, (m)
"web.2 holds 3 live tasks in a canary": first(web:3, 1 replica), apply(web:2, canary 1,
manual), apply(web:1, 2 replicas, canary 1, manual), drain(host2), drain(host3). The
drain of host2 refilled slot 2 with web:2, the canary the second apply superseded, not
the promoted web:3: an apply during a canary took the superseded canary's spec for
`previous` (now the old tasks' spec stays previous: test_canary's replay).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck as HypothesisHealth
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from minidock.commands.proxies import configs_for
from minidock.core import canary, failover, intents, saving
from minidock.core.hosts import Availability
from minidock.core.rebalance import moves as rebalance_moves
from minidock.core.rebalance import record as record_moves
from minidock.core.serving import Serving, ended, in_maintenance, paused
from minidock.core.state import ControllerState, ServiceState
from minidock.model import Cluster, Inventory
from minidock.spec.cluster import load
from tests.unit.test_whole_decision import DT, HOSTS, INVENTORY, Fleet, Knobs

# a failover's wait once its host is down (down_after 2 probes: 2 passes of DT), so that a
# few passes of a host down pass it
FAILOVER_AFTER = int(2 * DT)
SETTLE = 40  # passes a still world may take to end every intent (measured: at most 6)


# web's autoscale policy, up to `most` tasks: a window of two passes, a cooldown of four
def policy(most: int) -> str:
    return (
        f"{{ min = 1, max = {most}, target = {{ requests_per_task = 10 }}, "
        f'window = "{2 * DT:g}s", cooldown = "{4 * DT:g}s" }}'
    )


# the edge's request rates drawn (a second; None: its metrics do not answer)
RATES = (None, 0.0, 8.0, 25.0, 40.0)
KILLS = (
    "before acts",
    "after stops",
    "before fold",
    "mid copy",
    "target lost mid copy",
    "source lost mid copy",
    "copy fails",
    "mid stop",
)


# -- the cluster file drawn -------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """What the operator's cluster file says: web's image, replicas and canary; db's
    image, an env value and replicas (db: one named volume, so each slot is pinned)."""

    web: str = "web:1"
    replicas: int = 2
    canary: int = 1
    promote: str = "manual"
    db: str = "db:1"
    env: str = "a"
    dbs: int = 1
    stop: bool = False  # db's backup = { stop = true }: its task stopped for the copy
    failover: bool = False  # db's on_host_loss = "restore", restore_after = FAILOVER_AFTER
    most: int = 0  # web's autoscale max (`policy`; 0: none): its replicas within it

    def render(self) -> str:
        replicas = min(self.replicas, self.most) if self.most else self.replicas
        web = Knobs(image=self.web, replicas=replicas, canary=self.canary)
        web = replace(web, promote=self.promote, autoscale=policy(self.most) if self.most else "")
        db = [
            "[services.db]",
            f'image = "{self.db}"',
            f"replicas = {self.dbs}",
            'volumes = ["data:/var/lib/db"]',
            f'env = {{ MODE = "{self.env}" }}',
            'restart = { condition = "on-failure" }',  # a clean exit is Complete (break 5)
            'backup = { repository = "restic", password = { file = "pass" }, '
            f"stop = {str(self.stop).lower()} }}",
        ]
        if self.failover:
            db += ['on_host_loss = "restore"', f'restore_after = "{FAILOVER_AFTER}s"']
        return web.render() + "\n".join(db) + "\n"


specs = st.builds(
    Spec,
    web=st.sampled_from(["web:1", "web:2", "web:3"]),
    replicas=st.integers(1, 3),
    canary=st.sampled_from([0, 1]),
    promote=st.sampled_from(["manual", "auto"]),
    db=st.sampled_from(["db:1", "db:2"]),
    env=st.sampled_from(["a", "b"]),
    dbs=st.integers(1, 2),
    stop=st.booleans(),
    failover=st.booleans(),
    most=st.sampled_from([0, 2, 3]),
)
_FILES = Path(tempfile.mkdtemp(prefix="operator-decision-"))
(_FILES / "inventory.toml").write_text(INVENTORY + "\n")
(_FILES / "pass").write_text("not a secret\n")
(_FILES / "pass").chmod(0o600)  # the loader refuses a password others may read
_loaded: dict[str, tuple[Cluster, Inventory]] = {}


def loaded(spec: Spec) -> tuple[Cluster, Inventory]:
    """The cluster file `spec` renders, through the loader (cached by its text)."""
    text = spec.render()
    if text not in _loaded:
        (_FILES / "cluster.toml").write_text(text)
        _loaded[text] = load(_FILES / "cluster.toml")
    return _loaded[text]


hosts = st.sampled_from(HOSTS)
services = st.sampled_from(["web", "db"])
slots = st.integers(1, 2)
TAKEN: list[int] = []  # passes each settle took, for measuring
# a move's, restore's or backup's own fault: the next pass that copies is cut so (Fleet's
# `copy_kill`), drawn with the command so that each step's fault is reached in twelve steps
faults = st.sampled_from(("", "after stops", "before fold", *KILLS[3:]))
copy_faults = st.sampled_from(KILLS[3:-1])


class OperatorDecision(RuleBasedStateMachine):
    """Commands, faults and passes in any order; (b)-(m) hold after every step, (n) at
    every settle."""

    def __init__(self) -> None:
        super().__init__()
        self.fleet: Fleet | None = None
        self.serving = Serving.ON  # what the operator last set web's routes to
        # canary spec -> slot -> its tasks when it was first seen running another spec
        self.older: dict[str, dict[int, set[str]]] = {}
        self.began: dict[str, dict[int, set[str]]] = {}
        self.lost: set[str] = set()  # hosts lost once, forgotten or not (they may come back)
        self.backed: set[int] = set()  # db slots a backup was asked of (o)

    @property
    def f(self) -> Fleet:
        assert self.fleet is not None
        return self.fleet

    @property
    def state(self) -> ControllerState:
        return self.f.state

    def command(self, rule: str, after: ControllerState, *, ends: str = "") -> None:
        """An operator command's new state, committed; (k): every recorded move and
        rebalance of a slot still wanted is carried (but `forget HOST` ends the moves that
        need HOST: `ends`)."""
        before = self.f.state
        for name, was in before.services.items():
            now = after.services.get(name)
            if now is None or now.removed:
                continue
            wanted = set(now.slot_numbers())
            for n, move in was.moves.items():
                if n in wanted and n not in now.moves and ends not in (move.target, move.source):
                    self.f.violations.append(f"(k) {rule} dropped {name}.{n}'s {move.line()}")
            kept = [r for r in was.rebalance if r[0] in wanted]
            if kept and not set(kept) <= set(now.rebalance):
                self.f.violations.append(f"(k) {rule} dropped {name}'s rebalance {kept}")
        counts = before.services["web"].replicas(), after.services["web"].replicas()
        if counts[0] != counts[1] and not rule.startswith(("apply", "scale web", "rollback web")):
            self.f.violations.append(f"(s) {rule} changed web's count: {counts}")
        self.f.state = after
        self.one_pass()  # the command's own pass (the CLI's use cases run one or more)

    def one_pass(self, kill: str = "") -> None:
        was = self.state.services["web"]
        self.lost |= self.f.down
        self.f.one_pass(kill)
        self.check_count(was)
        self.lost |= self.f.down  # a host lost mid copy
        if kill != "before acts":  # a forgotten host back, seen, its stale tasks fenced
            self.f.gone -= self.f.gone - self.f.down
        self.check_canary()

    # -- applies and the commands on a service
    @initialize(spec=specs, backed=st.booleans(), rate=st.sampled_from(RATES))
    def first(self, spec: Spec, backed: bool = False, rate: float | None = 0.0) -> None:
        cluster, inventory = loaded(spec)
        self.fleet = Fleet(list(inventory.hosts), cluster_name=cluster.name)
        self.f.answers_promote = False
        self.f.rate, self.f.unread = rate or 0.0, rate is None  # the edge's traffic
        self.f.take(cluster)
        self.settle()  # a fleet running its first apply
        for n in range(1, spec.dbs + 1) if backed else ():  # and backed up once
            self.backup(slot=n)
        if backed:
            self.settle()

    @rule(spec=specs)
    def apply(self, spec: Spec) -> None:
        """`minidock apply` of a changed cluster file."""
        cluster, _ = loaded(spec)
        before = self.f.state
        self.f.generation += 1
        self.f.cluster = cluster
        after = intents.admit(before, cluster, self.f.generation, prune=True)
        self.command(f"apply {spec}", after)

    @rule(service=services, n=st.integers(0, 3))
    def scale(self, service: str, n: int) -> None:
        """`minidock scale SERVICE=N`: the count of the spec that runs, stored with that
        spec as the next generation (minidock.usecases.desired.scale: core.scale, then
        scaled_cluster); (l)."""
        assert self.f.cluster is not None
        was = self.state.services[service].spec
        if was.autoscale is not None and was.autoscale.bounded(n) != n:
            return  # refused: outside the policy's bounds (usecases.desired.scale)
        self.f.generation += 1
        after = intents.scale(self.state, service, n, self.f.generation)
        self.f.cluster = intents.scaled_cluster(after, self.f.cluster, service)
        self.command(f"scale {service}={n}", after)
        now = self.state.services[service].spec
        if now != replace(was, replicas=n):
            changed = f"{was.image} {dict(was.env)} -> {now.image} {dict(now.env)}"
            self.f.violations.append(f"(l) scale {service}={n} changed its spec: {changed}")
        got = self.state.services[service].replicas()
        if was.autoscale is not None and got < n:  # its pass decides from n: out, never in
            self.f.violations.append(f"(s) scale {service}={n}, then {got} in its own pass")

    @rule(service=services)
    def rollback(self, service: str) -> None:
        try:
            after = intents.rollback(self.state, service)
        except ValueError:
            return  # refused: no previous spec, or a failed one
        was, now = self.state.services[service], after.services[service]
        decided = was.scaling.count if was.spec.autoscale else None
        policy = now.spec.autoscale  # the decided count, within the bounds returned to
        want = now.spec.replicas if policy is None or decided is None else policy.bounded(decided)
        if now.replicas() != want:
            why = f"{was.replicas()} -> {now.replicas()}, not {want}"
            self.f.violations.append(f"(s) rollback {service} changed the count: {why}")
        self.command(f"rollback {service}", after)

    @precondition(lambda self: self.state.services["web"].rollout.in_canary)
    @rule()
    def promote(self) -> None:
        try:
            after = intents.promote(self.state, "web")
        except ValueError:
            return  # refused: no canary
        self.command("promote web", after)

    @rule(service=services)
    def reset(self, service: str) -> None:
        """`minidock reset SERVICE`: a slot a restore left half written starts on what its
        volume holds, the operator's word (exempt from (h) at its next start)."""
        forgiven = {m for m in self.f.marked if m[0] == service}
        self.f.marked -= forgiven
        self.f.forgiven |= forgiven
        self.command(f"reset {service}", intents.reset(self.state, service))

    @rule()
    def maintenance_on(self) -> None:
        self.command(
            "maintenance on", intents.set_serving(self.state, "web", in_maintenance("", 0))
        )
        self.serving = Serving.MAINTENANCE

    @rule()
    def maintenance_off(self) -> None:
        self.serve_again(Serving.MAINTENANCE, "maintenance off")

    @rule()
    def pause(self) -> None:
        self.command("pause", intents.set_serving(self.state, "web", paused(30.0, self.f.now)))
        self.serving = Serving.PAUSED

    @rule()
    def resume(self) -> None:
        self.serve_again(Serving.PAUSED, "resume")

    def serve_again(self, mode: Serving, rule: str) -> None:
        """`maintenance off` or `resume`: serving again if it was so (usecases' _ending)."""
        was = self.state.services["web"].serving
        back = ended(was, mode)
        self.command(rule, intents.set_serving(self.state, "web", back or was))
        if back is not None:
            self.serving = Serving.ON

    @rule()
    def rebalance(self) -> None:
        """`minidock rebalance`: the moves it finds on the fleet as seen, recorded."""
        planned = rebalance_moves(self.state, self.f.inventory, self.f.observe())
        if planned:
            self.command("rebalance", record_moves(self.state, planned, self.f.now)[0])

    # -- the commands on a host
    @rule(host=hosts)
    def drain(self, host: str) -> None:
        if intents.pinned_on(self.state, host):
            return  # refused without --move-volumes-unsafe (the data stays)
        self.command(f"drain {host}", intents.set_drained(self.state, host, True))

    @rule(host=hosts)
    def activate(self, host: str) -> None:
        self.command(f"activate {host}", intents.set_drained(self.state, host, False))

    @precondition(lambda self: bool(self.f.down - self.f.gone))
    @rule()
    def forget(self) -> None:
        """`minidock forget HOST` of the host that does not answer (one that does: refused)."""
        host = sorted(self.f.down - self.f.gone)[0]
        self.f.gone.add(host)
        held = self.f.volumes[host].items()  # (h): its partial copies go with it, unknown
        self.f.forgotten |= {(host, name) for name, data in held if not data.whole}
        # the newest snapshot of each slot, as the use case lists the repository for it
        newest = {(s.service, s.slot): f"{s.id} of now" for s in self.f.snapshots if s.content}
        after = intents.forget(self.state, host, self.f.now, newest)[0]
        self.command(f"forget {host}", after, ends=host)

    # -- a db slot's data
    @rule(slot=slots, fault=faults, then=st.integers(0, 3))
    def backup(self, slot: int, fault: str = "", then: int = 0) -> None:
        """`minidock backup db.SLOT`: its intent recorded (minidock.usecases.backups.backup:
        `saving.begin` with the spec's `backup.stop`; refused for a slot not wanted or
        with no host), carried out by the passes (core/saving.py; the sim's `backup_act`):
        its task stopped when asked, its volume copied into a snapshot, its task started
        again; `fault` cuts its copy or its stop's pass (the controller killed between
        its stop and its start)."""
        ss = self.state.services["db"]
        if slot not in ss.slot_numbers() or not ss.slot(slot).host:
            return
        policy = ss.spec.backup
        assert policy is not None
        began = saving.begin(ss, slot, self.f.now, stop=policy.stop, hook=False)
        self.backed.add(slot)
        after = replace(self.state, services={**self.state.services, "db": began})
        self.command(f"backup db.{slot}", after)
        self.then(fault, then)

    @rule(slot=slots, to=hosts, fault=faults, then=st.integers(0, 3), replace_kept=st.booleans())
    def move(
        self, slot: int, to: str, fault: str = "", then: int = 0, replace_kept: bool = False
    ) -> None:
        """`minidock move db.SLOT --to TARGET [--replace-kept]` (minidock.usecases.moves.move's
        checks)."""
        target = to
        if self.state.host(target).drained:
            return
        try:
            after = intents.begin_move(
                self.state, "db", slot, target, self.f.now, replace_kept=replace_kept
            )
        except ValueError:
            return
        self.replacing_kept(slot, target)
        self.command(f"move db.{slot} --to {target}", after)
        self.then(fault, then)

    def replacing_kept(self, slot: int, target: str) -> None:
        """A copy the operator sent onto the host keeping the slot's old volume (accepted:
        `--replace-kept`) writes over it, as asked: no longer kept, for (g)."""
        ss = self.state.services["db"]
        if slot in ss.slots and target in failover.never_target(ss.slot(slot)):
            names = self.f.named_volumes(ss.spec, slot)
            self.f.kept -= {(target, n) for n in names}

    @precondition(lambda self: bool(self.f.snapshots))
    @rule(
        slot=slots,
        to=st.sampled_from(("", *HOSTS)),
        fault=faults,
        then=st.integers(0, 3),
        replace_kept=st.booleans(),
    )
    def restore(
        self, slot: int, to: str, fault: str = "", then: int = 0, replace_kept: bool = False
    ) -> None:
        """`minidock restore db.SLOT --host TARGET [--replace-kept]` from its newest snapshot
        (the use case's checks: TARGET answers and is not drained; a recorded host other
        than TARGET is refused while it answers, and while it is down and not forgotten); no
        `--host` (`to` ""): its recorded host, else one the scheduler would pick (the first
        able that keeps no old volume of the slot)."""
        ss = self.state.services["db"]
        home = ss.slot(slot).host if slot in ss.slots else ""
        never = failover.never_target(ss.slot(slot)) if slot in ss.slots else {}
        able = [h for h in HOSTS if h not in self.f.down and not self.state.host(h).drained]
        pick = next((h for h in able if h not in never), "")
        target = to or (home if home and home not in self.f.gone else pick)
        if not target:
            return
        newest = [s for s in self.f.snapshots if (s.service, s.slot) == ("db", slot)]
        if not newest or target in self.f.down or self.state.host(target).drained:
            return
        recorded = ss.slot(slot).host if slot in ss.slots else ""
        if recorded and recorded != target and recorded not in self.f.gone:
            return
        picks = ((newest[-1].volume, newest[-1].id),)
        try:
            after = intents.begin_restore(
                self.state, "db", slot, target, picks, self.f.now, replace_kept=replace_kept
            )
        except ValueError:
            return
        if target != home:
            self.replacing_kept(slot, target)
        self.command(f"restore db.{slot} --host {target}", after)
        self.then(fault, then)

    @precondition(lambda self: bool(self.f.snapshots))
    @rule(slot=slots, fault=copy_faults)
    def restore_cut(self, slot: int, fault: str) -> None:
        """`minidock restore db.SLOT` on its own host, its copy cut by `fault` (drawn
        apart from `restore` so that twelve steps reach a half-written volume often)."""
        self.restore(slot=slot, to="", fault=fault, then=2)

    @rule(slot=slots)
    def restore_empty(self, slot: int) -> None:
        """`minidock restore db.SLOT --empty`: a slot that waits for a restore starts on
        empty volumes, the operator's word (exempt from (h) and (i) at its next start)."""
        try:
            after = intents.start_empty(self.state, "db", slot)
        except ValueError:
            return  # refused: it waits for no restore
        self.f.marked.discard(("db", slot))
        self.f.forgiven.add(("db", slot))
        self.command(f"restore db.{slot} --empty", after)

    # -- faults and passes
    @precondition(lambda self: not self.f.down)
    @rule(which=st.integers(0, 3), then=st.sampled_from((0, 0, 2, 4)))
    def lose_host(self, which: int, then: int = 0) -> None:
        """A host stops answering: a db slot's, a move's source or target, or any; `then`
        passes run (four pass a failover's `restore_after`)."""
        db = self.state.services["db"]
        moves = [h for m in db.moves.values() for h in (m.target, m.source) if h]
        tasks = sorted({c.host for c in self.f.live("db")})
        found = [*moves, *tasks, *HOSTS]
        self.f.kill_host(found[which % len(found)])
        for _ in range(then):
            self.one_pass()

    @precondition(lambda self: bool(self.f.down))
    @rule()
    def host_back(self) -> None:
        """The host answers again: a forgotten one counts for (g) once a pass has seen it
        and acted (its stale tasks fenced, `one_pass`), not before: lost again unseen, what
        it runs is what the operator forgot."""
        for host in sorted(self.f.down):
            self.f.revive_host(host)

    @rule(rate=st.sampled_from(RATES), then=st.integers(0, 3))
    def traffic(self, rate: float | None, then: int = 0) -> None:
        """The requests through the edge change to `rate` a second, or its metrics stop
        answering (None: no data, the rate it counts unchanged); `then` passes run."""
        self.f.unread = rate is None
        self.f.rate = self.f.rate if rate is None else rate
        for _ in range(then):
            self.one_pass()

    @rule(kills=st.lists(st.sampled_from(("", "", *KILLS)), min_size=1, max_size=4))
    def passes(self, kills: list[str]) -> None:
        for kill in kills:
            if "lost" in kill and self.f.down:
                kill = "mid copy"  # one host lost at a time
            self.one_pass(kill)

    def then(self, fault: str, passes: int) -> None:
        """After a command: the next pass that copies is cut by `fault` (one host lost at a
        time), and `passes` passes run."""
        self.f.copy_kill = "mid copy" if "lost" in fault and self.f.down else fault
        for _ in range(passes):
            self.one_pass()

    @rule()
    def settle(self) -> None:
        """(n): on a still world, every intent ends within SETTLE passes."""
        self.f.copy_kill = ""  # no new fault
        why = ""
        for taken in range(1, SETTLE + 1):
            self.one_pass()
            why = self.open_intent()
            if not why:
                TAKEN.append(taken)
                return
        raise AssertionError(f"(n) not ended in {SETTLE} passes: {why}")

    # -- the properties
    def check_count(self, was: ServiceState) -> None:
        """(s) after a pass: an autoscaled web's count is within its policy's bounds, and
        does not change on a pass that had no data (the edge's metrics unread)."""
        ss = self.state.services["web"]
        policy, got = ss.spec.autoscale, ss.replicas()
        if policy is None:
            return
        if not policy.min <= got <= policy.max:
            self.f.violations.append(f"(s) web's count {got} outside {policy.min}..{policy.max}")
        if self.f.unread and was.spec.autoscale == policy and got != was.replicas():
            why = f"{was.replicas()} -> {got} ({ss.scaling.reason})"
            self.f.violations.append(f"(s) web's count changed without data: {why}")

    def check_canary(self) -> None:
        """(m) after a pass's acts."""
        ss = self.state.services.get("web")
        live = self.f.live("web")
        running = canary.running_spec(ss)
        for seen in [*self.older.values(), *self.began.values()] if ss is not None else ():
            for n in [n for n in seen if n not in ss.slots]:  # scaled away, its record gone:
                del seen[n]  # scaled back, it is a slot that never had a task
        if set(self.older) - {running}:  # another canary, or none: what an earlier one saw
            self.older, self.began = {}, {}  # is no guide (the same spec canaried again found
        if ss is None or not running:  # slots that a full rollout between gave it: no spread)
            return
        # a host back (forgotten or not): a stale task of a slot refilled elsewhere meanwhile
        # leaves through the drain gate (core/traffic), a pass or more, whatever runs: no
        # canary's doing, so long as it is draining
        stale = {
            c.id
            for c in live
            if c.host in self.lost
            and c.task != ss.slot(c.slot).task
            and c.task in self.state.draining
        }
        # so does a task on a drained host its slot's replacement took over: two drains a
        # pass apart give a slot three live tasks, a canary or none (seed 67)
        stale |= {
            c.id
            for c in live
            if self.state.host(c.host).availability is not Availability.ACTIVE
            and c.task != ss.slot(c.slot).task
            and c.task in self.state.draining
        }
        for slot, n in Counter(c.slot for c in live if c.id not in stale).items():
            if n > 2:
                self.f.violations.append(f"(m) web.{slot} holds {n} live tasks in a canary")
        # slot -> the slot's tasks alive when it was first seen running another spec: a
        # task among them (an apply gave a superseded canary's slot back to it) is no spread
        older = self.older.setdefault(running, {})
        # slot -> its tasks seen running the canary's spec before that (a slot that never
        # had a task took it): one of them back from a lost host is no spread either
        began = self.began.setdefault(running, {})
        for c in live:
            if c.spec != running:
                mine = {x.task for x in live if x.slot == c.slot}
                older.setdefault(c.slot, mine | began.get(c.slot, set()))
            elif c.slot not in older:
                began.setdefault(c.slot, set()).add(c.task)
            elif (
                c.slot in older
                and c.task not in older[c.slot]
                and c.slot not in ss.rollout.canary_slots()
                and c.slot in ss.slot_numbers()  # a slot scaled away: its tasks go
                and c.id not in stale  # a host back's, older than all that, on its way out
            ):
                self.f.violations.append(
                    f"(m) web.{c.slot} (no canary slot) runs the unpromoted spec on {c.host}"
                )

    def open_intent(self) -> str:
        """An intent not yet ended ("" when none), for (n)."""
        waiting = self.f.down - self.f.gone  # a host down, not forgotten: may come back
        # every host drained or down: nothing can be placed until the operator says so
        able = [h for h in HOSTS if h not in self.f.down and not self.state.host(h).drained]
        for name, ss in self.state.services.items():
            for n, move in ss.moves.items():
                # a down host that may still run the slot's task holds it too (it was last
                # seen with it: a stop there is known done only once seen again)
                held = {
                    h
                    for h in waiting
                    for t in self.state.host(h).tasks
                    if (t.service, t.slot) == (name, n)
                }
                ends = {move.target} if move.failover else {move.target, move.source}
                if not (ends | held) & waiting:  # a failover's source is down: why it runs
                    return f"{name}.{n} {move.line()}"
            manual = ss.rollout.in_canary and not canary.due(ss)
            if ss.rebalance and not manual and able:  # its moves wait for the canary's promote
                return f"{name}'s rebalance {ss.rebalance}"
            # a slot that waits for the operator holds its rollout until they say (the last
            # settle does): `minidock restore` (its host forgotten, a snapshot of it known),
            # or `minidock move` (its data on a host drained since, no task left there)
            asks = {*self.restores(name), *self.moves(name), *self.marked(name)}
            if ss.rollout.active and not (manual or waiting or asks) and able:
                return f"{name}'s rollout {ss.rollout.phase.value}"
            for n, b in ss.backups.slots.items():  # one on a down host waits for it
                if ss.slot(n).host not in waiting and n not in asks and able:
                    return f"{name}.{n} {b.line()}"
        db = self.state.services["db"]
        for n in sorted(self.backed) if able else ():  # each backup ends with its task running
            home = db.slot(n).host
            if n not in db.slot_numbers() or n in db.backups.slots or not home:
                continue  # scaled away, under way, or its host forgotten
            if home in waiting or self.state.host(home).drained or db.slot(n).failed:
                continue  # waits for its host, or for the operator
            if not [c for c in self.f.live("db") if c.slot == n and c.state == "running"]:
                return f"db.{n} backed up, its task not running ({db.slot(n).phase.value})"
        web = self.state.services["web"]
        held = web.rollout.in_canary and not canary.due(web)  # waits for its promote
        for h in self.f.hosts if able and not held else ():  # replacements need a host
            if self.state.host(h.name).drained:
                left = [c.name for c in self.f.live("web") if c.host == h.name]
                if left:
                    return f"drained {h.name} still runs {left}"
        plan = self.f.log[-1]  # the last pass's routes, loaded by it
        assert self.f.cluster is not None
        assert self.f.cluster.ingress is not None
        if configs_for(plan.routes, self.f.cluster.ingress).digest != self.f.digest:
            return "the ingress proxy has not loaded the routes"
        return ""

    @invariant()
    def nothing_bad(self) -> None:
        if self.fleet is None:
            return
        found = self.f.violations
        assert not [v for v in found if v[:3] in ("(b)", "(c)")], found  # each its own line:
        assert not [v for v in found if v.startswith("(g)")], found  # hypothesis reports
        assert not [v for v in found if v.startswith("(h)")], found  # each failing line
        assert not [v for v in found if v.startswith("(i)")], found  # as its own bug
        assert not [v for v in found if v.startswith("(k)")], found
        assert not [v for v in found if v.startswith("(l)")], found
        assert not [v for v in found if v.startswith("(m)")], found
        assert not [v for v in found if v.startswith("(r)")], found
        assert not [v for v in found if v.startswith("(p)")], found
        assert not [v for v in found if v.startswith("(s)")], found
        assert not found, found
        mode = self.state.services["web"].serving
        assert mode.serving is self.serving, f"(j) web is {mode.serving}, set {self.serving}"

    def teardown(self) -> None:
        if self.fleet is not None and not self.f.violations:
            self.settle()
            if self.state.services["web"].rollout.in_canary:  # what waited on it, judged too
                self.command("promote web", intents.promote(self.state, "web"))
                self.settle()
            able = [h for h in HOSTS if h not in self.f.down and not self.state.host(h).drained]
            asked = (self.restores("db"), self.marked("db"))
            for n in asked[0] if able else ():  # `minidock restore db.N`: what waited, judged
                self.restore(slot=n, to=able[0])
            for n in asked[1] if able else ():  # half written: restore it, else reset
                home = self.state.services["db"].slot(n).host
                self.restore(slot=n, to=home if home in able else able[0])
                if n in self.marked("db"):
                    self.reset(service="db")
            moves = self.moves("db")
            for n in moves if able else ():  # `minidock move db.N --to HOST`
                self.move(slot=n, to=able[0])
            if (any(asked) or moves) and able:
                self.settle()

    def restores(self, name: str) -> list[int]:
        """The service's slots that wait for `minidock restore` (core/intents.py: forget)."""
        ss = self.state.services[name]
        return [n for n in ss.slot_numbers() if ss.slot(n).awaiting_restore]

    def marked(self, name: str) -> list[int]:
        """The service's wanted slots a restore left half written: Failed, they wait for
        `minidock restore` or `reset` (core/slots.py: restore_failed)."""
        ss = self.state.services[name]
        return [n for n in ss.slot_numbers() if ss.slot(n).half_written]

    def moves(self, name: str) -> list[int]:
        """The service's pinned slots with no task whose data is on a drained host (scaled
        away, the host drained, scaled back): they wait for `minidock move` or `activate`."""
        ss = self.state.services[name]
        if not ss.spec.pinned:
            return []
        drained = {h for h in HOSTS if self.state.host(h).drained}
        return [n for n in ss.slot_numbers() if not ss.slot(n).task and ss.slot(n).host in drained]


# Derandomized, and no example database: the same 100 sequences every run, so the suite
# is not failed by chance. To look for more, set derandomize=False (never committed so)
# and run `pytest --hypothesis-seed=N`: the seeds swept so far are in docs/reliability.md.
OperatorDecision.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HypothesisHealth.too_slow],
)
test_operator_decision = OperatorDecision.TestCase


# -- what the machine found after issue 43's fixes, each replayed as it was shrunk -------------
def _replay(*steps: tuple[str, dict[str, object]]) -> OperatorDecision:
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1))
    for rule_name, args in steps:
        getattr(machine, rule_name)(**args)
        machine.nothing_bad()
    machine.teardown()  # settles: (n) every intent ends
    machine.nothing_bad()
    return machine


def test_a_canary_the_file_stops_asking_for_is_promoted_and_ends() -> None:
    """A canary re-applied with `update.canary = 0` and the same tasks (a generation that
    changes no task) stayed a canary with nothing in flight, waiting for a promote that
    nothing would give: now promoted, as by `minidock promote`, and the update ends."""
    machine = _replay(
        ("apply", {"spec": Spec("web:2", 1, 1, "manual", "db:1", "a", 1)}),
        ("apply", {"spec": Spec("web:2", 2, 1, "auto", "db:1", "a", 1)}),
        ("apply", {"spec": Spec("web:1", 2, 1, "manual", "db:1", "a", 1)}),
        ("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:1", "a", 1)}),
    )
    assert machine.state.services["web"].rollout.phase.value == "completed"


def test_a_pinned_slot_scaled_away_on_a_down_host_waits_for_it_when_scaled_back() -> None:
    """db.2 scaled away while its host was down lost its record, so scaled back it started
    on an empty volume elsewhere beside its old copy: (g). Its record now stays while its
    down host may hold it."""
    machine = _replay(
        ("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:1", "a", 2)}),
        ("lose_host", {"which": 3}),
        ("passes", {"kills": ["", ""]}),
        ("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:2", "b", 1)}),
        ("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:1", "b", 2)}),
    )
    db = machine.state.services["db"]
    assert db.slot(2).host in machine.f.down  # waits for its data there


def test_a_move_of_a_slot_scaled_away_ends() -> None:
    """`scale db=0` during a move left it 'stopping its task' for ever: (n)."""
    machine = _replay(
        ("move", {"slot": 1, "to": "host2"}),
        ("scale", {"service": "db", "n": 0}),
    )
    assert machine.state.services["db"].moves == {}


def test_a_drain_of_a_moves_target_is_refused_and_the_move_ends() -> None:
    """`drain` refused only the host a slot's record names (the source until the copy), so
    a drained target took the data and no task: 'starting its task there' for ever (n).
    pinned_on now names a move's target too, and the drain is refused."""
    machine = _replay(
        ("move", {"slot": 1, "to": "host2"}),
        ("drain", {"host": "host2"}),
    )
    assert not machine.state.host("host2").drained
    assert machine.state.services["db"].slot(1).host == "host2"


def test_a_forgotten_hosts_stale_task_is_removed_during_a_canary() -> None:
    """A forgotten host back during a manual canary kept its stale web.1 task running
    beside the canary and its old task (three live tasks) until someone promoted: the
    slot's decision kept every task while the canary stood beside its old one."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1))
    machine.lose_host(which=0)
    machine.forget()
    machine.apply(spec=Spec("web:2", 1, 1, "manual", "db:1", "a", 1))
    machine.host_back()
    for _ in range(4):
        machine.one_pass()
    assert machine.state.services["web"].rollout.in_canary  # still waiting for promote
    assert len(machine.f.live("web")) == 2  # the canary and the task it runs beside
    machine.nothing_bad()


def test_a_stale_task_of_a_host_back_drains_out_beside_a_canary() -> None:
    """web.1 was replaced on host2 while host1 was down (not forgotten); a manual canary
    then stood beside the replacement, and host1 came back with the old task: three live
    tasks for a pass, the stale one draining out of the routes before its stop
    (core/traffic), as it does whatever runs. (m) took it for the canary spreading; a
    draining stale task of any host back is the host's doing, not the canary's."""
    machine = _replay(
        ("lose_host", {"which": 0}),
        ("passes", {"kills": ["", ""]}),  # host1 down: web.1 replaced on host2
        ("apply", {"spec": Spec("web:2", 1, 1, "manual", "db:1", "a", 1)}),
        ("host_back", {}),
        ("passes", {"kills": ["", ""]}),
    )
    assert not [c for c in machine.f.live("web") if c.host == "host1"]  # drained, stopped


def test_a_move_whose_source_is_forgotten_while_it_cleans_ends() -> None:
    """db.1 moved to host2 and ready there, its old volumes on host1 to remove; host1 lost,
    then forgotten: the move stayed 'removing its volumes on ' (no host left) for ever (n).
    `forget` now ends it, its old volumes gone with the host."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1))
    machine.move(slot=1, to="host2")
    machine.passes(kills=["", ""])  # copied, started on host2
    machine.lose_host(which=1)  # host1, the move's source
    machine.passes(kills=[""])  # ready on host2: cleaning host1
    assert machine.state.services["db"].moves[1].phase.value == "cleaning"
    machine.forget()
    assert machine.state.services["db"].moves == {}
    machine.teardown()
    machine.nothing_bad()


def test_a_rollout_waits_for_the_restore_a_forgotten_hosts_slot_asks_for() -> None:
    """db.1's host forgotten with a snapshot known, then db's spec changed: the rollout
    cannot end while db.1 waits for `minidock restore` (the operator's word, said by the
    plan, exit 4); (n) took the wait for a rollout that never ends. Once restored (the
    teardown's restore), it completes."""
    machine = _replay(
        ("backup", {"slot": 1}),
        ("lose_host", {"which": 0}),
        ("forget", {}),
        ("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:1", "b", 1)}),
    )
    assert machine.state.services["db"].rollout.phase.value == "completed"


def test_a_pinned_slot_scaled_away_while_it_waits_for_a_restore_still_waits() -> None:
    """db.1's host forgotten with a snapshot of it known: db.1 waits for `minidock
    restore`. Scaled away, its record went with it, so scaled back it started on an empty
    volume (i). A pinned slot's record now stays when its last task goes."""
    machine = _replay(
        ("backup", {"slot": 1}),
        ("lose_host", {"which": 0}),
        ("forget", {}),
        ("scale", {"service": "db", "n": 0}),
        ("scale", {"service": "db", "n": 1}),
    )
    assert machine.state.services["db"].slot(1).host  # restored by the teardown's restore


def test_a_pinned_slot_scaled_back_waits_for_its_data_on_a_drained_host() -> None:
    """db.2 scaled away (its volume stays on its host), that host drained, db.2 scaled
    back: with no record it started elsewhere on an empty volume though its data and a
    snapshot of it exist (i). It now waits for `minidock move` (or `activate`)."""
    machine = _replay(("apply", {"spec": Spec("web:1", 1, 0, "manual", "db:1", "a", 2)}))
    home = machine.state.services["db"].slot(2).host
    machine.backup(slot=2)
    machine.scale(service="db", n=1)
    machine.drain(host=home)
    machine.scale(service="db", n=2)
    machine.nothing_bad()
    assert machine.moves("db") == [2]  # waits, its data on the drained host
    machine.teardown()  # moves it off the drained host, as the operator would
    machine.nothing_bad()
    assert machine.state.services["db"].slot(2).host != home


def test_a_forgotten_host_back_and_lost_again_unseen_runs_what_was_forgotten() -> None:
    """host1 forgotten (db.1 started afresh on host2), back, and lost again before any
    pass saw it: its stale db.1 is what the operator forgot, never seen since, so db.1
    starting again on host2 is no second copy (g). A forgotten host counts again once a
    pass has seen it and fenced its stale tasks."""
    _replay(
        ("lose_host", {"which": 0}),
        ("forget", {}),
        ("host_back", {}),
        ("lose_host", {"which": 0}),
        ("scale", {"service": "db", "n": 0}),
        ("scale", {"service": "db", "n": 1}),
    )


def test_a_slot_scaled_away_and_back_during_a_canary_is_a_new_slot() -> None:
    """web.2 ran web:1, was scaled away by an apply that began a manual canary of web:2,
    and scaled back by the next: it had no record left, so its new task took the new spec,
    as any slot that never had a task does (by design). (m) remembered its old task and
    took the new one for the canary spreading; a slot scaled away whose record is gone is
    forgotten there too."""
    _replay(
        ("apply", {"spec": Spec("web:1", 2, 0, "manual", "db:1", "a", 1)}),
        ("apply", {"spec": Spec("web:2", 1, 1, "manual", "db:1", "a", 1)}),
        ("passes", {"kills": ["", ""]}),  # web.2's task drained out and stopped
        ("apply", {"spec": Spec("web:2", 2, 1, "manual", "db:1", "a", 1)}),
    )


def test_a_slot_scaled_away_in_one_canary_is_a_new_slot_in_the_next() -> None:
    """The same across canaries: web.2 scaled away by a canary of web:1, which an apply
    of web:2 superseded (no canary runs: (m) looked at nothing, and kept web.2's old task
    in mind), then a canary of web:1 again with web.2 scaled back."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:2", 2, 0, "manual", "db:1", "a", 1))
    for spec in (
        Spec("web:1", 1, 1, "manual", "db:1", "a", 1),
        Spec("web:2", 1, 0, "manual", "db:1", "a", 1),
        Spec("web:1", 2, 1, "manual", "db:1", "a", 1),
    ):
        machine.apply(spec=spec)
        machine.passes(kills=[""])
        machine.nothing_bad()
    machine.teardown()
    machine.nothing_bad()


def test_a_rebalance_no_other_host_can_take_ends() -> None:
    """web on 3 hosts, host3 drained, host2 lost, then `rebalance`: it planned web.1 off
    host1 onto host2 (not yet seen down), and the passes then started web.1's replacement
    on host1 itself, the only host left, again and again (three live web.1 tasks there),
    and the rebalance never ended (n). A rebalance move no other host can take now ends,
    said by an event."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 3, 0, "manual", "db:1", "a", 2))
    machine.drain(host="host3")
    machine.lose_host(which=1)  # host2, db.2's
    machine.rebalance()
    machine.passes(kills=["", "", ""])
    assert machine.state.services["web"].rebalance == ()
    assert sorted(c.slot for c in machine.f.live("web")) == [1, 2, 3]
    machine.teardown()
    machine.nothing_bad()


def test_a_stale_task_of_a_host_back_running_the_canarys_spec_is_no_spread() -> None:
    """web.1 ran web:1 when a canary of web:1 began (after web:2 was applied and not yet
    rolled out); its host lost, web.1 was refilled elsewhere with web:2, and the host came
    back with the old web:1 task, draining out before its stop. (m) took that old task for
    the canary spreading to web.1; a host back's draining stale task is no spread."""
    _replay(
        ("apply", {"spec": Spec("web:2", 1, 0, "manual", "db:1", "a", 1)}),
        ("apply", {"spec": Spec("web:1", 2, 1, "manual", "db:1", "a", 1)}),
        ("lose_host", {"which": 0}),
        ("passes", {"kills": ["", ""]}),  # host1 down: web.1 refilled on host3
        ("host_back", {}),
        ("passes", {"kills": [""]}),
    )


def test_a_slot_of_a_forgotten_host_is_refilled_with_the_previous_spec_during_a_canary() -> None:
    """A manual canary of web:1 beside web:2's two tasks; web.2's host lost and forgotten:
    `forget` empties the slot's record, so its refill was taken for a slot that never had
    a task and ran the unpromoted spec, the canary growing past `update.canary` (m). A
    slot that lost its task to `forget` is refilled with the previous spec, as one whose
    host is down."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:2", 2, 0, "manual", "db:1", "a", 1))
    machine.apply(spec=Spec("web:1", 2, 1, "manual", "db:1", "a", 1))
    machine.lose_host(which=2)  # host2, web.2's
    machine.forget()
    machine.nothing_bad()
    running = {c.slot: machine.f.started_with[c.id].image for c in machine.f.live("web")}
    assert running[2] == "web:2"
    machine.teardown()
    machine.nothing_bad()


def test_a_failed_moves_partial_copy_is_removed_before_its_slot_starts_there_afresh() -> None:
    """db.1's move to host2 cut by host2 lost mid copy: the move ended with its partial
    copy left on host2 (the act could not remove it, and nothing did later); host2 back,
    host1 (db.1's data) lost and forgotten, db.1 started afresh on host2 on that half-
    written copy (h). The failed move now removes its partial copy once host2 answers
    (discarding), and a slot with no host waits for that removal before it starts."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1))
    machine.move(slot=1, to="host2", fault="target lost mid copy", then=1)
    machine.host_back()
    machine.f.kill_host("host1")
    machine.forget()
    machine.nothing_bad()
    machine.teardown()
    machine.nothing_bad()


def test_a_stale_task_of_a_forgotten_host_back_stops_after_its_drain() -> None:
    """host1 forgotten (web.1 refilled on host2), back, and a pass killed before its acts:
    the next pass stops host1's stale web.1, out of every route since host1 was lost. The
    Fleet counted when a task left the tables only on hosts that answer, so (c) saw it
    stop '0s after it left'; it counts every host's tasks now."""
    _replay(
        ("passes", {"kills": [""]}),
        ("lose_host", {"which": 0}),
        ("forget", {}),
        ("passes", {"kills": [""]}),
        ("host_back", {}),
        ("passes", {"kills": ["before acts", ""]}),
    )


def test_a_backup_of_a_slot_scaled_away_ends() -> None:
    """db.1's backup with `backup = { stop = true }`, then `scale db=0`: the passes decide
    the wanted slots only, so the backup stayed 'stopping its task for the copy' for ever
    (n), and `minidock backup` waited on it. It now ends, failed, as a move of a slot
    scaled away does."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1, stop=True))
    machine.backup(slot=1)
    machine.scale(service="db", n=0)
    machine.teardown()
    machine.nothing_bad()
    assert machine.state.services["db"].backups.slots == {}
    assert machine.state.services["db"].backups.last[1].failed


def test_a_move_after_a_failover_does_not_wait_for_the_old_host() -> None:
    """db.1 failed over from host1 (down) to host2, then `move db.1 --to host3`: the move
    stopped db.1 on host2 and waited for host1 to answer (it last ran a task of db.1), the
    database down for as long as host1 is (found through the backup check of (n)). The
    failover's old host is fenced whatever moves the slot later, so the move goes on."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1, failover=True), backed=True)
    machine.f.kill_host(machine.state.services["db"].slot(1).host)
    machine.passes(kills=[""] * 4)  # down, restore_after passed, restored elsewhere
    machine.passes(kills=[""] * 4)  # its task ready there
    to = next(h for h in HOSTS if h not in machine.f.down and h != machine.f.live("db")[0].host)
    machine.move(slot=1, to=to)
    machine.teardown()
    machine.nothing_bad()
    assert machine.state.services["db"].slot(1).host == to


def test_a_backup_after_a_failover_does_not_wait_for_the_old_host() -> None:
    """db.1 failed over from its down host, then backed up with `backup = { stop = true }`:
    the backup's stop waited for the old host to answer (it last ran a task of db.1) and,
    stopped for the copy, db.1 stayed down for as long as that host is (n). The failover's
    old host is fenced whatever holds the slot later, so the backup goes on."""
    spec = Spec("web:1", 1, 0, "manual", "db:1", "a", 1, stop=True, failover=True)
    machine = OperatorDecision()
    machine.first(spec=spec, backed=True)
    machine.f.kill_host(machine.state.services["db"].slot(1).host)
    machine.passes(kills=[""] * 4)  # down, restore_after passed, restored elsewhere
    machine.passes(kills=[""] * 4)  # its task ready there
    machine.backup(slot=1)
    machine.teardown()
    machine.nothing_bad()
    assert machine.state.services["db"].backups.last[1].snapshots


def test_a_failover_restore_whose_old_host_returns_stopped_still_starts_on_the_snapshot() -> None:
    """Seed 131 (one host lost at a time): db.1 restored on host2 by a failover, host1
    forgotten, then back with its task, which the next pass stops and dies before removing
    (`mid stop`): the exited task on host1 was taken for db.1's own clean exit, the slot
    Complete, and the restored database never started (n) "starting its task there". An
    exited task on the host a failover left is removed, never counted."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1, failover=True), backed=True)
    machine.lose_host(which=0)
    machine.passes(kills=[""])
    machine.maintenance_off()  # a command: its pass
    machine.forget()
    machine.host_back()
    machine.passes(kills=["mid stop"])
    machine.settle()
    machine.teardown()
    machine.nothing_bad()
    (task,) = machine.f.live("db")
    assert task.host != "host1"
    assert not machine.state.services["db"].slot(1).complete


def test_a_move_onto_the_host_that_keeps_a_failovers_old_volume_is_refused() -> None:
    """Seed 141: db.1 failed over from host1, host1 back (its task fenced, its volume
    kept), then `move db.1 --to host1` whose copy is cut: the move wrote over the kept
    volume and its partial copy was then removed, (g) "kept by a failover, removed". A
    move or restore onto the kept volume's host is refused unless `--replace-kept`."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1, failover=True), backed=True)
    machine.lose_host(which=0, then=2)
    machine.forget()
    machine.host_back()
    machine.maintenance_off()
    machine.maintenance_off()
    machine.move(slot=1, to="host1", fault="target lost mid copy")
    assert not machine.state.services["db"].moves  # refused
    machine.teardown()
    machine.nothing_bad()
    assert machine.f.volumes["host1"]  # the kept volume is there


def test_a_stale_copy_back_while_the_slot_waits_for_its_restore_is_fenced_not_adopted() -> None:
    """Seed 256: db.1 failed over from host1 to host2; host1 forgotten, then back with its
    old task (no pass seeing it yet); host2 lost and forgotten: the slot waited for its
    restore, and the next pass adopted host1's task, the database running an older copy
    of its data instead of the restore it asks for (g). While a slot waits for `minidock
    restore` with no host, a task of it found anywhere is fenced, its volume kept."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1, failover=True), backed=True)
    machine.lose_host(which=0, then=4)
    machine.forget()
    machine.host_back()
    machine.lose_host(which=1)
    machine.forget()
    machine.nothing_bad()
    assert machine.f.live("db") == []
    assert machine.state.services["db"].slot(1).awaiting_restore
    machine.teardown()
    machine.nothing_bad()


def test_a_task_stopped_for_a_move_that_then_ends_is_started_again() -> None:
    """Seed 15: db.1's task stopped for its move (the controller dying between the `docker
    stop` and the removal), then the move's target lost and forgotten: the move ended and
    the next pass took the stopped task's exit 0 for its own clean exit, so with `restart =
    on-failure` the slot was Complete and the database never ran again (n). A task a move
    or restore stopped is never counted when the intent ends; it starts again."""
    spec = Spec("web:1", 1, 0, "manual", "db:1", "a", 2, stop=True)
    machine = OperatorDecision()
    machine.first(spec=spec, backed=False)
    machine.backup(slot=1, then=1)
    machine.backup(slot=2, fault="mid stop")
    machine.move(slot=1, to="host2")
    machine.lose_host(which=0)
    machine.forget()
    machine.teardown()
    machine.nothing_bad()
    assert not machine.state.services["db"].slot(1).complete
    assert [c.host for c in machine.f.live("db") if c.slot == 1] == ["host1"]


def test_an_apply_during_a_canary_then_two_drains_keep_the_old_tasks_spec() -> None:
    """Seed 67: web:2's manual canary beside web:3, superseded by web:1 (2 replicas, a
    canary of 1), then host2 and host3 drained a pass apart. The drains refilled slot 2
    with web:2, the abandoned canary's spec taken for the previous one; now with web:3,
    the old tasks' spec. The drained tasks leave through the drain gate meanwhile, so the
    slot holds three live tasks for a pass, a canary or none: (m) counts them apart."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:3", 1, 0, "manual", "db:1", "a", 1))
    machine.apply(spec=Spec("web:2", 1, 1, "manual", "db:1", "a", 1))
    machine.apply(spec=Spec("web:1", 2, 1, "manual", "db:1", "a", 1))
    machine.drain(host="host2")
    machine.nothing_bad()
    machine.drain(host="host3")
    machine.nothing_bad()
    previous = machine.state.services["web"].previous
    assert previous is not None
    assert previous.image == "web:3"
    assert "web:2" not in {machine.f.started_with[c.id].image for c in machine.f.live("web")}
    machine.teardown()
    machine.nothing_bad()


def test_a_move_cut_mid_copy_whose_source_is_forgotten_discards_its_partial_copy() -> None:
    """Seed 105: db.1's move to host2 cut half-way through its copy, then host1 (its
    source, the only whole copy) lost and forgotten. The move was dropped with its partial
    copy left on host2, where the slot, its host forgotten, was placed and started on it
    (h). Now the move ends DISCARDING that copy: the slot waits for its removal, then
    starts afresh (no snapshot was taken)."""
    machine = OperatorDecision()
    machine.first(spec=Spec("web:1", 1, 0, "manual", "db:1", "a", 1))
    machine.move(fault="mid copy", replace_kept=False, slot=1, then=1, to="host2")
    machine.nothing_bad()
    machine.lose_host(then=0, which=1)
    machine.nothing_bad()
    machine.forget()
    machine.nothing_bad()
    machine.teardown()
    machine.nothing_bad()
    assert [c.host for c in machine.f.live("db")] == ["host2"]


def test_an_unstopped_backup_of_a_slot_waiting_on_its_drained_host_ends() -> None:
    """Seed 109: db scaled to 0, its host lost and drained, db scaled back (its slot waits
    for its data on the drained host, for the operator), the host back, then `backup
    db.1` (an unstopped copy, which runs in the slot's task): it waited for a task that
    only the operator's word would start, for ever (n). Now it ends, failed."""
    machine = OperatorDecision()
    spec = Spec("web:1", 1, 0, "manual", "db:1", "a", 1)
    machine.first(spec=spec)
    machine.scale(n=0, service="db")
    machine.lose_host(then=0, which=0)
    machine.drain(host="host1")
    machine.apply(spec=spec)
    machine.host_back()
    machine.backup(fault="", slot=1, then=0)
    machine.nothing_bad()
    machine.settle()
    machine.nothing_bad()
    assert not machine.state.services["db"].backups.slots
