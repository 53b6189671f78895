"""Several clusters in one state store: which of them a command works on.

A store holds the cluster applied to it first itself, and every further cluster in a whole
store of its own beside it (`minidock.store.cluster_location`: DIR/clusters/NAME or
PREFIX/clusters/NAME), each with its own generations, controller state, event log and
writer lock, and all with the store's controller id. A cluster file goes to its cluster's
store; `status`, `reconcile` and `watch` cover every cluster (or `--cluster NAME`); a
command about one service finds the cluster that has it; a command about a host acts in
every cluster that knows the host. docs/state.md has the layout and the decisions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from minidock import store as stores
from minidock.store import StateLocation
from minidock.usecases.access import further_clusters, has_state, read_desired, reading
from minidock.usecases.outcomes import (
    BadInput,
    Busy,
    ConvergeOutcome,
    Deposed,
    ExitCode,
    IntentOutcome,
    UseCaseError,
)


@dataclass(frozen=True)
class Held:
    """A cluster a store holds, and where its own store is."""

    name: str
    location: StateLocation


def held(root: StateLocation) -> list[Held]:
    """Every cluster the store at `root` holds: its own first, then the further ones by
    name; none when nothing was ever applied there."""
    if not has_state(root):
        return []
    further = further_clusters(root)
    return [
        Held(_own_cluster(root), root),
        *(Held(name, stores.cluster_location(root, name)) for name in further),
    ]


def home(root: StateLocation, name: str) -> StateLocation:
    """Where cluster `name` is kept, or goes on its first apply: the store itself when it
    is empty or holds `name`, else the cluster's own store beside it."""
    if not has_state(root) or _own_cluster(root) in ("", name):
        return root
    return stores.cluster_location(root, name)


def chosen(root: StateLocation, cluster: str | None) -> list[Held]:
    """The clusters a command covers: `--cluster NAME`, else all of them."""
    every = held(root)
    if cluster is None:
        return every
    found = [h for h in every if h.name == cluster]
    if not found and every:
        names = ", ".join(h.name for h in every)
        raise BadInput(f"--cluster {cluster}: {root} holds no such cluster; it holds {names}")
    return found


def one(root: StateLocation, cluster: str | None, service: str | None = None) -> StateLocation:
    """The one cluster a command about a service works on: `--cluster NAME`, else the only
    one, else the one whose latest generation has `service`. With nothing applied, the
    store itself (whose use case then says so)."""
    candidates = chosen(root, cluster)
    if len(candidates) <= 1:
        return candidates[0].location if candidates else root
    names = ", ".join(h.name for h in candidates)
    if service is None:
        raise BadInput(f"{root} holds clusters {names}: name one with --cluster NAME")
    having = [h for h in candidates if service in _services(h)]
    if len(having) == 1:
        return having[0].location
    if not having:
        raise BadInput(f"no cluster in {root} has a service {service!r}; it holds {names}")
    both = ", ".join(h.name for h in having)
    raise BadInput(f"service {service} is in clusters {both}: name one with --cluster NAME")


def knowing_host(root: StateLocation, cluster: str | None, host: str) -> list[Held]:
    """The clusters whose inventory or state knows `host` (all chosen, when none does, so
    that each says why it does not)."""
    candidates = chosen(root, cluster)
    if len(candidates) <= 1:
        return candidates or [Held("", root)]
    knowing = [h for h in candidates if _knows(h, host)]
    return knowing or candidates[:1]


def tagged(h: Held, count: int) -> str:
    """The cluster's name to show beside its lines, when there is more than one."""
    return h.name if count > 1 else ""


# -- running one use case in several clusters ---------------------------------------------------
_RANK = {
    ExitCode.FAILED: 4,
    ExitCode.NOT_CONVERGED: 3,
    ExitCode.DEGRADED: 2,
    ExitCode.LOCKED: 1,
    ExitCode.OK: 0,
}


async def each(
    targets: Sequence[Held], work: Callable[[Held], Awaitable[ConvergeOutcome]]
) -> ConvergeOutcome:
    """`work` in every cluster in turn, and one outcome for all: the worst exit (1, then
    3, then 4, then 75 for a cluster whose lock another writer held, then 0). With one
    cluster, exactly its outcome (a taken lock raises, as it always did)."""
    if len(targets) == 1:
        return await work(targets[0])
    outcomes: list[tuple[str, ConvergeOutcome]] = []
    busy: list[str] = []
    for h in targets:
        try:
            outcomes.append((h.name, await work(h)))
        except (Busy, Deposed) as exc:
            busy.append(f"{h.name}: {exc}")
    if busy and all(o.exit_code is ExitCode.OK for _, o in outcomes):
        raise Busy("; ".join(busy))
    return combined(outcomes)


def combined(outcomes: Sequence[tuple[str, ConvergeOutcome]]) -> ConvergeOutcome:
    """Several clusters' outcomes as one: the worst's exit and ending, every cluster's
    waiting lines and reasons, named by cluster."""
    worst = max((o for _, o in outcomes), key=lambda o: _RANK.get(o.exit_code, 5))
    return ConvergeOutcome(
        worst.exit_code,
        worst.ending,
        sum(o.passes for _, o in outcomes),
        worst.timeout,
        tuple(f"{name}: {line}" for name, o in outcomes for line in o.waiting),
        "; ".join(f"{name}: {o.why}" for name, o in outcomes if o.why),
    )


async def each_intent(
    targets: Sequence[Held], work: Callable[[Held], Awaitable[IntentOutcome]]
) -> IntentOutcome:
    """An operator's intent about a host, in every cluster that knows it: one outcome
    whose message names the clusters."""
    if len(targets) == 1:
        return await work(targets[0])
    done: list[tuple[str, IntentOutcome]] = []
    for h in targets:
        done.append((h.name, await work(h)))
    message = f"{done[0][1].message} in clusters {', '.join(name for name, _ in done)}"
    return IntentOutcome(message, combined([(name, o.convergence) for name, o in done]))


# -- reading what a cluster's store holds --------------------------------------------------------
def _own_cluster(location: StateLocation) -> str:
    with reading(location) as store:
        own = store.cluster()
        if not own and (latest := store.latest_generation()) is not None:
            own = latest[1].name
    return own


def _services(h: Held) -> set[str]:
    with reading(h.location) as store:
        latest = store.latest_generation()
    return {s.name for s in latest[1].services} if latest else set()


def _knows(h: Held, host: str) -> bool:
    try:
        with reading(h.location) as store:
            state = store.load()
            desired = read_desired(store, h.location)
    except UseCaseError:
        return False
    return desired.inventory.host(host) is not None or state.host(host).last_known is not None
