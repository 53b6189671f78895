"""One masker per command: every secret value the command may meet, replaced by `***` at
its output boundary, before anything is cut short.

`masker_for(store, state, observed)` gathers the secrets (`model.secret_values`: `secrets`
values, registry passwords, env values under secret-looking keys; plain env values are
configuration and stay as they are) of every generation still in use: the controller's
current and previous spec of each service, and every stored generation a task still runs
(a task's `minidock.spec` label matched against each generation's spec hashes, newest
first, until every live task is accounted for). The masker then masks the plan the runner
commits and reports (`plan`), each act's line, the lines of `logs` and `exec`, errors,
status and plans; a line that may be long (a health check's output, a log tail) is masked
whole and only then cut (`line`), so a secret at the cut cannot show its first characters.

A command that runs several passes (`apply --wait`, `drain`, `watch`) builds its masker
once: each pass hands the masker it has to `masker_for(..., known=)`, which returns that
very masker while it already holds every secret the pass meets, and reads the store's
generations again only for a task of a spec it has not looked for yet (or after a new
generation was applied). See docs/ssh.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace

from minidock.core import ControllerState, Plan, SlotState, Waiting
from minidock.model import Observed, Service, secret_values
from minidock.store import Store

__all__ = ["LINE_MAX", "MASK", "NO_SECRETS", "Masker", "Masks", "kept_masker", "masker_for"]

MASK = "***"
LINE_MAX = 300  # characters a slot's failure line, a rollout reason or an event keeps


class Masker:
    """Replaces each of its secrets (and their JSON-escaped forms) with `***`, longest
    first, in one pass over the text. `sought` and `generation`: what `masker_for` built it
    from (the (service, spec hash) of the tasks' specs it looked up in the stored
    generations, and the state's generation then), so a later pass of the same command
    can tell whether it already holds everything."""

    def __init__(
        self,
        secrets: Iterable[str],
        *,
        sought: frozenset[tuple[str, str]] = frozenset(),
        generation: int | None = None,
    ) -> None:
        found = {s for s in secrets if s}
        found |= {json.dumps(s)[1:-1] for s in found}  # as a --json document shows them
        self.secrets = tuple(sorted(found, key=lambda s: (-len(s), s)))
        self._pattern = re.compile("|".join(map(re.escape, self.secrets))) if found else None
        self._held = frozenset(found)
        self.sought = sought
        self.generation = generation

    def holds(self, values: Iterable[str]) -> bool:
        """Whether every one of `values` is among this masker's secrets."""
        return all(v in self._held for v in values if v)

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def line(self, text: str, limit: int = LINE_MAX) -> str:
        """`text` masked, then cut to `limit` characters (an ellipsis says so)."""
        masked = self(text)
        return masked if len(masked) <= limit else masked[: limit - 3] + "..."

    def also(self, services: Iterable[Service]) -> Masker:
        """This masker with the secrets of `services` too (a file about to be applied)."""
        return Masker((*self.secrets, *(v for s in services for v in secret_values(s))))

    def plan(self, plan: Plan) -> Plan:
        """The plan with every line it carries masked: its events and its state's lines
        (`state`), and the reasons of its stops, pending slots and waits."""
        plan = replace(
            plan,
            stop=tuple(replace(s, reason=self(s.reason)) for s in plan.stop),
            pending=tuple(replace(p, reason=self(p.reason)) for p in plan.pending),
            waiting=tuple(
                Waiting(w.subject, self(w.reason), w.kind, w.service) for w in plan.waiting
            ),
        )
        events = tuple(replace(e, message=self.line(e.message)) for e in plan.events)
        return replace(plan, state=self.state(plan.state), events=events)

    def state(self, state: ControllerState) -> ControllerState:
        """The state with every line it keeps masked, then cut: each slot's failure line,
        each rollout's reason, each hook's failure and each scheduled run's output."""
        services = {
            name: replace(
                ss,
                slots={n: self._slot(slot) for n, slot in ss.slots.items()},
                rollout=replace(ss.rollout, reason=self.line(ss.rollout.reason)),
                hook=replace(ss.hook, why=self.line(ss.hook.why)),
                job=replace(
                    ss.job, runs=tuple(replace(r, tail=self.line(r.tail)) for r in ss.job.runs)
                ),
            )
            for name, ss in state.services.items()
        }
        return replace(state, services=services)

    def _slot(self, slot: SlotState) -> SlotState:
        """The slot with its failure line masked and cut: the record itself when that
        changes nothing (almost every slot of a pass; a commit then knows it unchanged
        without comparing it, codec.StateRecords)."""
        line = self.line(slot.last_exit)
        return slot if line == slot.last_exit else replace(slot, last_exit=line)


NO_SECRETS = Masker(())


class Masks:
    """A command's maskers, one per cluster, for the whole command: built where the command
    first needs one (`of`), then handed back as it is while it holds every secret in use,
    and extended only by a secret it has not met (`masker_for`'s `known`). It rides on the
    use cases' Runtime: every pass, document and line of one command is masked by it."""

    def __init__(self) -> None:
        self._by_cluster: dict[str, Masker] = {}

    def of(self, store: Store, state: ControllerState, observed: Observed | None = None) -> Masker:
        """The command's masker for `state`'s cluster, holding every secret in use now."""
        known = self._by_cluster.get(state.cluster)
        found = masker_for(store, state, observed, known=known)
        self._by_cluster[state.cluster] = found
        return found


def kept_masker(state: ControllerState) -> Masker:
    """The masker of the specs `state` keeps: each service's current and previous."""
    return Masker(v for s in _kept(state) for v in secret_values(s))


def _kept(state: ControllerState) -> list[Service]:
    return [s for ss in state.services.values() for s in (ss.spec, ss.previous) if s]


def masker_for(
    store: Store,
    state: ControllerState,
    observed: Observed | None = None,
    *,
    known: Masker | None = None,
) -> Masker:
    """The masker of everything in use: the current and previous spec of every service in
    `state`, and every stored generation that a task seen in `observed` (or recorded on
    an unreachable host in `state`) still runs. With `known` (the masker of the same
    command's earlier pass): `known` itself while it holds all of that, else `known`'s
    secrets and the new ones; the generations are read only for the tasks' specs `known`
    has not looked for (all of them again once `state` has a newer generation)."""
    specs = _kept(state)
    kept = [v for s in specs for v in secret_values(s)]
    running = set(_tasks(state, observed)) - {(s.name, s.spec_hash()) for s in specs}
    sought: frozenset[tuple[str, str]] = frozenset()
    if known is not None and known.generation == state.generation:
        sought = known.sought
        if running <= sought and known.holds(kept):
            return known
    found = [v for s in _in_generations(store, running - sought) for v in secret_values(s)]
    before = known.secrets if known is not None else ()
    return Masker((*before, *kept, *found), sought=sought | running, generation=state.generation)


def _in_generations(store: Store, running: set[tuple[str, str]]) -> list[Service]:
    """The specs of `running` (service, spec hash) in the stored generations, newest first."""
    specs: list[Service] = []
    running = set(running)
    gen_id = store.next_generation_id() - 1 if running else 0
    while running and gen_id > 0:
        cluster = store.generation(gen_id)
        for svc in cluster.services if cluster is not None else ():
            if (svc.name, svc.spec_hash()) in running:
                running.discard((svc.name, svc.spec_hash()))
                specs.append(svc)
        gen_id -= 1
    return specs


def _tasks(state: ControllerState, observed: Observed | None) -> Iterable[tuple[str, str]]:
    """(service, spec hash) of every task seen now, or recorded on an unreachable host."""
    if observed is not None:
        yield from ((c.service, c.spec) for c in observed.containers())
    for host in state.hosts.values():
        yield from ((t.service, t.spec) for t in host.tasks)
