"""Acting by share (docs/scale.md, "Acting by share"): the deciding `watch` hands a pass's
task verbs on each host another `watch` owns to that owner (minidock.store.orders), which
carries them out on its own warm connection and reports; the decider waits for the
reports within its pass (its lock held) and folds them in as its own acts.

What is handed over: the stops and starts of tasks, the acts a task's death or a rollout
makes on a host. The fleet-wide acts (proxies, certificates, names, volume moves,
backups, hooks, jobs) are done by the decider itself, once. A host is handed over only
while its owner's rounds advance (the hosts the decider borrows observations from); an
order its owner has not claimed when the owner goes is withdrawn and done by the decider
at once, and one not reported within its owner's patience (three of its resyncs and a
margin, core.borrowing.advancing) ends the pass with a failure: the next pass decides
again from what it observes (a start replayed is adopted, act.acts).

Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from minidock.act.acts import Acts
from minidock.act.carry import carry_tasks
from minidock.core import ExitNoted, Run, StartFailed, Stop
from minidock.core.handover import OwnerKey
from minidock.model import Inventory
from minidock.ssh import Executor
from minidock.store import LeaseLost, StoreError
from minidock.store.etcd import EtcdWriter
from minidock.store.members import Membership
from minidock.store.orders import Order, OrderBook, Report

__all__ = ["Delegation", "carry_orders"]

log = logging.getLogger(__name__)

POLL = 0.05  # seconds between the decider's reads of the reports it waits for
OWNERS_EVERY = 1.0  # seconds between its reads of the owner keys of the hosts it waits on


@dataclass
class Delegation:
    """One pass's task verbs, carried out (`__call__`, an act.carry.TaskActs): on the hosts
    in `owners` (host -> the owner key of another member whose rounds advance) by their
    owners, the others by this pass. `patience`: each owner's, in seconds."""

    book: OrderBook
    writer: EtcdWriter  # the lock's holder: the pass's tenure
    cluster: str
    member: str
    owners: Mapping[str, OwnerKey]
    patience: Mapping[str, float]
    ordered: int = 0  # task verbs handed over by this pass
    late: list[str] = field(default_factory=list)  # hosts whose owner did not report

    async def __call__(self, acts: Acts, stops: Sequence[Stop], runs: Sequence[Run]) -> None:
        """The orders placed, this pass's own verbs carried out, then the reports awaited."""
        placed = self._place(acts, stops, runs)
        mine_stops = [s for s in stops if s.container.host not in placed]
        mine_runs = [r for r in runs if r.host not in placed or not _on_one_host(r)]
        await carry_tasks(acts, mine_stops, mine_runs)  # meanwhile, the owners carry theirs
        await self._collect(acts, placed, stops, runs)

    def _place(self, acts: Acts, stops: Sequence[Stop], runs: Sequence[Run]) -> dict[str, int]:
        """An order for each owned host the verbs touch; host -> its revision."""
        verbs: dict[str, tuple[list[Stop], list[Run]]] = {}
        for s in stops:
            if s.container.host in self.owners:
                verbs.setdefault(s.container.host, ([], []))[0].append(s)
        for r in runs:
            if r.host in self.owners and _on_one_host(r):
                verbs.setdefault(r.host, ([], []))[1].append(r)
        tenure = self.writer.tenure[0]
        placed: dict[str, int] = {}
        for host, (host_stops, host_runs) in sorted(verbs.items()):
            services = {s.container.service for s in host_stops} | {
                r.service.name for r in host_runs
            }
            order = Order(
                self.member,
                tenure,
                self.owners[host].created,
                acts.now,
                acts.controller,
                acts.engine_of(host),
                tuple((svc, spec, g) for (svc, spec), g in acts.graces.items() if svc in services),
                tuple(host_stops),
                tuple(host_runs),
            )
            try:
                revision = self.book.place(self.writer, self.cluster, host, order)
            except LeaseLost:
                raise  # deposed: the pass acts no more
            except StoreError as exc:  # etcd not answering: this pass acts there itself
                log.info("%s: no order for %s: %s", self.cluster, host, exc)
                revision = 0
            if revision:
                log.debug("%s: ordered %s of its owner", self.cluster, host)
                placed[host] = revision
                self.ordered += len(host_stops) + len(host_runs)
        return placed

    async def _collect(
        self, acts: Acts, placed: Mapping[str, int], stops: Sequence[Stop], runs: Sequence[Run]
    ) -> None:
        """The owners' reports folded into `acts` as they come in; an order whose owner
        went before claiming it is withdrawn and carried out here; one not reported within
        its owner's patience is a failure of this pass."""
        waiting = dict(placed)
        started = time.monotonic()
        looked = started
        while waiting:
            await asyncio.sleep(POLL)
            now = time.monotonic()
            try:
                found = self.book.reports(self.cluster, waiting)
                for host, report in found.items():
                    log.debug("%s: %s's owner reported", self.cluster, host)
                    _fold(acts, report)
                    del waiting[host]
                self.book.clear(self.cluster, found)
                if waiting and now - looked >= OWNERS_EVERY:
                    looked = now
                    await self._orphans(acts, waiting, stops, runs)
            except StoreError as exc:  # etcd not answering: wait on, within the patience
                log.info("%s: the owners' reports not read: %s", self.cluster, exc)
            for host in [h for h in waiting if now - started > self._patience(h)]:
                del waiting[host]
                self._late(acts, host)

    async def _orphans(
        self, acts: Acts, waiting: dict[str, int], stops: Sequence[Stop], runs: Sequence[Run]
    ) -> None:
        """The orders whose owner key changed hands or went: withdrawn (when unclaimed)
        and carried out here; a claimed one's owner is gone, its end never reported."""
        held = self.book.holders(self.cluster, waiting)
        for host, created in held.items():
            if created == self.owners[host].created:
                continue
            revision = waiting.pop(host)
            try:
                withdrawn = self.book.withdraw(self.cluster, host, revision)
            except StoreError:
                withdrawn = False  # it may have been claimed: not done here
            if withdrawn:
                log.info("%s: %s's owner went before its order; acting here", self.cluster, host)
                await carry_tasks(
                    acts,
                    [s for s in stops if s.container.host == host],
                    [r for r in runs if r.host == host and _on_one_host(r)],
                )
            else:
                self._late(acts, host)

    def _patience(self, host: str) -> float:
        return self.patience.get(self.owners[host].controller, 0.0)

    def _late(self, acts: Acts, host: str) -> None:
        owner = self.owners[host].controller
        self.late.append(host)
        acts.failures.append(
            f"{host}: its owner {owner} did not report the acts ordered of it; the next "
            "pass decides from what it observes"
        )


def _on_one_host(run: Run) -> bool:
    """Whether a start acts on its own host alone: a stop-first replacement whose old task
    is on another host stops it there first, in that order, so the decider does it."""
    return run.replaces is None or run.replaces.host == run.host


def _fold(acts: Acts, report: Report) -> None:
    """An owner's report, as if its acts had been this pass's."""
    for event in report.events:
        acts.record_event(event)
    acts.outcomes.extend(report.start_failed)
    acts.outcomes.extend(report.exits)


async def carry_orders(
    book: OrderBook,
    membership: Membership,
    executor: Executor,
    inventory: Inventory,
    cluster: str,
    owned: Mapping[str, int],
) -> tuple[set[str], int]:
    """The orders for this member's hosts of `cluster` (`owned`: host -> its owner key's
    create revision), each claimed then carried out on this member's connections, each
    command fenced on its member lease, and reported; the hosts acted on, and the verbs
    carried out."""
    lease = membership.lease_id
    if lease is None:
        return set(), 0
    acted: set[str] = set()
    verbs = 0
    for host, revision, order in book.pending(cluster, owned):
        if host not in {h.name for h in inventory.hosts}:
            continue
        if not book.claim(cluster, host, revision, order):
            continue
        acts = Acts(
            executor,
            inventory,
            cluster,
            order.now,
            order.controller,
            graces={(svc, spec): g for svc, spec, g in order.graces},
            fence=membership.fence,
        )
        acts.engines[host] = order.engine
        log.debug("%s: carrying the order for %s", cluster, host)
        await carry_tasks(acts, order.stop, order.run)
        start_failed = tuple(o for o in acts.outcomes if isinstance(o, StartFailed))
        exits = tuple(o for o in acts.outcomes if isinstance(o, ExitNoted))
        report = Report(revision, tuple(acts.events), start_failed, exits)
        try:
            book.report(cluster, host, lease, order.owner, report)
        except StoreError as exc:
            log.info("%s: the acts on %s not reported: %s", cluster, host, exc)
        acted.add(host)
        verbs += len(order.stop) + len(order.run)
    return acted, verbs
