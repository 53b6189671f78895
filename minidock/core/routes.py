"""Routes as a function of observed tasks (Kubernetes' EndpointSlices): which tasks take
traffic, where each is reached, and the route table every ingress proxy loads. Pure.

A task takes traffic when it runs and is healthy (or, without a health check, has run for
its service's `update.monitor`), its host answered this pass, and it is not draining
(`minidock.core.traffic`). It is reached at its host's `private_address` and the host
port docker published for the route's container port. A host that did not answer this
pass but is not down keeps the upstreams the proxies have loaded for it. The table is
recomputed every pass from what the pass observed; nothing edits it. docs/ingress.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from minidock.core import canary
from minidock.core.serving import SERVING, Serving, ServingMode
from minidock.core.specs import TaskSpecs
from minidock.core.state import ControllerState, ServiceState
from minidock.model import (
    Cluster,
    Container,
    Ingress,
    Inventory,
    Observed,
    ProxyObservation,
    Route,
    Service,
)

__all__ = [
    "ProxyStep",
    "RouteEntry",
    "RouteTable",
    "effective_services",
    "ingress_hosts",
    "proxy_steps",
    "route_changes",
    "route_table",
    "routed_services",
    "takes_traffic",
    "upstream",
]


@dataclass(frozen=True)
class RouteEntry:
    """One route and its upstreams ("ADDRESS:PORT"): first those of the observed tasks that
    take its traffic (their ids in `tasks`, in the same order), then those kept for hosts
    that did not answer this pass."""

    route: Route
    service: str
    upstreams: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    mode: ServingMode = SERVING  # serving, maintenance or paused: its service's (core/serving.py)
    # each upstream's weight, in the same order, while a canary takes `canary_weight`
    # percent of the requests (core/canary.py); () when they all weigh the same
    weights: tuple[int, ...] = ()
    canary: int = 0  # that percent (0: no canary share)
    canaries: int = 0  # how many of the upstreams are the canary's tasks

    @property
    def sends_to(self) -> tuple[str, ...]:
        """The upstreams its requests go to: none in maintenance (the proxy answers)."""
        return () if self.mode.serving is Serving.MAINTENANCE else self.upstreams

    def weighed(self) -> tuple[tuple[str, int], ...]:
        """Each upstream with its weight (1 each without a canary share)."""
        return tuple(zip(self.upstreams, self.weights or (1,) * len(self.upstreams), strict=True))


RouteTable = tuple[RouteEntry, ...]  # most specific first, as Caddy matches (`_specificity`)


@dataclass(frozen=True)
class ProxyStep:
    """One answering ingress host's proxy this pass: (re)started first when it is missing,
    stopped or of another spec (`start`, `why`), then the pass's route table loaded where
    the proxy's loaded config differs from it. A running proxy of another spec whose
    replacement waits for another host's proxy to serve (`waits`, why) keeps running and
    is loaded with the table; a later pass replaces it."""

    host: str
    start: bool = False
    why: str = ""
    waits: str = ""


def proxy_steps(
    ingress: Ingress | None,
    proxies: Mapping[str, ProxyObservation],
    down: frozenset[str] = frozenset(),
) -> tuple[ProxyStep, ...]:
    """What each answering ingress host's proxy does this pass (a host that did not
    answer is left for a later pass). A proxy that is missing or stopped serves nothing:
    it is started at once. Running proxies of another spec (a new `image`, `http_port` or
    `https_port`) are replaced one host at a time: one in a pass, and only while every
    other ingress host's proxy serves (it answered, runs, and has loaded its routes; a
    host that is `down` is out of the count), so the next is replaced once the one before
    answers with its routes loaded. With one ingress host it is replaced at once."""
    if ingress is None:
        return ()
    spec = ingress.proxy_spec()
    serving = {h for h, p in proxies.items() if _serves(p) or h in down}
    steps, replaced = [], ""
    for host, proxy in sorted(proxies.items()):
        if not proxy.ok:
            continue
        if proxy.running and proxy.spec == spec:
            steps.append(ProxyStep(host))
        elif not proxy.running or not proxy.spec:
            steps.append(ProxyStep(host, True, "was not running" if proxy.spec else "was missing"))
        elif replaced or serving - {host} != set(proxies) - {host}:
            out = sorted(set(proxies) - serving - {host})
            why = f"{replaced}'s new proxy" if replaced else ", ".join(out)
            steps.append(ProxyStep(host, waits=f"replaced once {why} serves"))
        else:
            replaced = host
            steps.append(ProxyStep(host, True, "had another spec"))
    return tuple(steps)


def _serves(proxy: ProxyObservation) -> bool:
    """The proxy answered, runs, and has loaded a config of ours (its routes)."""
    return proxy.ok and proxy.running and bool(proxy.digest)


def ingress_hosts(cluster: Cluster, inventory: Inventory) -> tuple[str, ...]:
    """The inventory hosts that run the cluster's ingress proxy (none without an ingress)."""
    ingress = cluster.ingress
    if ingress is None:
        return ()
    return tuple(h.name for h in inventory.hosts if ingress.serves(h))


def effective_services(
    cluster: Cluster, state: ControllerState, wanted: Callable[[Service], object]
) -> dict[str, Service]:
    """Each service whose effective spec is `wanted`, by name: that spec (after any
    rollback) where the state has one, else the cluster's. Pruned services are left out."""
    found: dict[str, Service] = {}
    for service in cluster.services:
        ss = state.services.get(service.name)
        spec = ss.spec if ss is not None and not ss.removed else service
        if wanted(spec):
            found[spec.name] = spec
    return found


def routed_services(cluster: Cluster, state: ControllerState) -> dict[str, Service]:
    """Each service with routes, by name, in its effective spec (`effective_services`)."""
    return effective_services(cluster, state, lambda s: s.ingress)


def takes_traffic(c: Container, service: Service, now: float) -> bool:
    """Running and healthy; without a health check, running for `update.monitor`."""
    if c.state != "running":
        return False
    if c.health != "none":
        return c.health == "healthy"
    started = c.started_at if c.started_at is not None else c.created_at
    return service.health is None and now - started >= service.update.monitor


def upstream(c: Container, port: int, inventory: Inventory) -> str | None:
    """Where a task's container port is reached from other hosts: its host's private
    address and the host port docker published it on (None when it is not published)."""
    host = inventory.host(c.host)
    published = next((hp for cp, hp in c.published if cp == port), None)
    if host is None or published is None:
        return None
    return f"{host.reached_at}:{published}"


def route_table(
    cluster: Cluster,
    inventory: Inventory,
    observed: Observed,
    state: ControllerState,
    now: float,
    specs: TaskSpecs | None = None,
) -> RouteTable:
    """Every route of every routed service, with the upstreams of its tasks that take
    traffic now (draining tasks left out), most specific route first. Each task is judged
    by the spec it runs (`specs`): whether it takes traffic, and which of its container
    ports the route (the same host name and path) reaches."""
    services = routed_services(cluster, state)
    if cluster.ingress is None or not services:
        return ()
    specs = specs if specs is not None else TaskSpecs.of_state(cluster, state)
    taking = _taking_traffic(observed.containers(), services, specs, state.draining, now)
    held = _held(observed, inventory, state)
    entries: list[RouteEntry] = []
    for name, service in services.items():
        ss = state.services.get(name)
        mode = ss.serving if ss is not None else SERVING
        for route in service.ingress:
            key = _key(route.domain, route.path)
            pairs = sorted(
                (address, c.task, c.spec)
                for c, own in taking.get(name, ())
                if (port := _port_of(own, key)) is not None
                and (address := upstream(c, port, inventory)) is not None
            )
            kept = sorted(held.get(key, set()) - {a for a, _, _ in pairs})
            upstreams = (*(a for a, _, _ in pairs), *kept)
            tasks = tuple(t for _, t, _ in pairs)
            entry = RouteEntry(route, name, upstreams, tasks, mode)
            entries.append(_canary_share(entry, ss, [s for _, _, s in pairs]))
    return tuple(sorted(entries, key=_specificity))


def _canary_share(entry: RouteEntry, ss: ServiceState | None, specs: list[str]) -> RouteEntry:
    """While the service's canary runs with `canary_weight`, its route's upstreams weighed
    so that the canary's tasks (`specs`: what each observed upstream runs; the kept ones
    are the old tasks') take that percent of the requests."""
    running = canary.running_spec(ss)
    percent = ss.spec.update.canary_weight if ss is not None and running else 0
    if not percent:
        return entry
    flags = [s == running for s in specs] + [False] * (len(entry.upstreams) - len(specs))
    weights = canary.weights(percent, flags)
    if not any(flags) or all(flags):
        return entry
    return replace(entry, weights=weights, canary=percent, canaries=sum(flags))


def _port_of(spec: Service, key: tuple[str, str]) -> int | None:
    """The container port `spec`'s route of that host name and path reaches (None: its
    spec has no such route)."""
    return next((r.port for r in spec.ingress if _key(r.domain, r.path) == key), None)


def _key(domain: str, path: str) -> tuple[str, str]:
    """A route's host and path as the proxy matches them: ignoring case (validate refuses
    two routes that differ in case only), a trailing slash ignored."""
    return domain.lower(), path.rstrip("/").lower() or "/"


def _held(
    observed: Observed, inventory: Inventory, state: ControllerState
) -> dict[tuple[str, str], set[str]]:
    """Upstreams the answering proxies have loaded at hosts that did not answer this pass
    and are not down, by route: such a task keeps its place in the routes (one missed
    probe, or a mass-loss guard that holds, is no reason to send its requests elsewhere;
    the proxy retries if it is really gone). A host that is down loses them."""
    silent = {
        h.reached_at
        for h in inventory.hosts
        if (seen := observed.hosts.get(h.name)) is not None
        and not seen.ok
        and not state.host(h.name).down
    }
    held: dict[tuple[str, str], set[str]] = {}
    if not silent:
        return held
    for proxy in observed.proxies.values():
        for domain, path, upstreams in proxy.routes if proxy.ok else ():
            found = {u for u in upstreams if u.rpartition(":")[0] in silent}
            if found:
                held.setdefault(_key(domain, path), set()).update(found)
    return held


def _taking_traffic(
    containers: Iterable[Container],
    services: Mapping[str, Service],
    specs: TaskSpecs,
    draining: Mapping[str, float],
    now: float,
) -> dict[str, list[tuple[Container, Service]]]:
    """The tasks of each routed service that take traffic, each with the spec it runs."""
    found: dict[str, list[tuple[Container, Service]]] = {}
    for c in containers:
        if c.service not in services or c.task in draining:
            continue
        own = specs.of(c)
        if own is not None and takes_traffic(c, own, now):
            found.setdefault(c.service, []).append((c, own))
    return found


def _specificity(entry: RouteEntry) -> tuple[bool, bool, int, str, int, str]:
    """Caddy's own precedence (its Caddyfile adapter sorts site blocks so; with a JSON
    config the first route that matches wins, so the order given is the order matched):
    exact hosts, then wildcard hosts, then the catch-all; a more specific host first (its
    length less its `*`s); for one host, longer paths first. The names and paths break
    ties, so the order is a function of the routes alone."""
    domain = entry.route.domain.lower()
    path = entry.route.path.rstrip("/").lower()
    host_specificity = len(domain) - domain.count("*")
    return (domain == "", "*" in domain, -host_specificity, domain, -len(path), path)


LoadedRoutes = tuple[tuple[str, str, tuple[str, ...]], ...]  # a proxy's (Host, path, upstreams)


LoadedModes = tuple[tuple[str, str, str], ...]  # a proxy's routes not serving: (Host, path, mode)


def route_changes(
    table: RouteTable, loaded: LoadedRoutes, modes: LoadedModes = ()
) -> tuple[str, ...]:
    """What loading `table` changes on a proxy that has loaded `loaded` (its services'
    routes, as `minidock.commands.caddy` reads them back: a TLS route once, its HTTPS one) in
    `modes` (those not serving): one line per route added (`+`), removed (`-`), sent to
    other upstreams (`~`, the addresses that join and leave) or put in another mode (`~`,
    the mode it enters)."""
    before: dict[tuple[str, str], tuple[str, ...]] = {}
    for domain, path, upstreams in loaded:
        before.setdefault(_key(domain, path), upstreams)
    was = {_key(domain, path): mode for domain, path, mode in modes}
    lines: list[str] = []
    after: set[tuple[str, str]] = set()
    for entry in table:
        key = _key(entry.route.domain, entry.route.path)
        after.add(key)
        if key not in before:
            count = len(entry.sends_to)
            ready = f"{count} upstream{'s' if count != 1 else ''}" if count else "no task ready"
            if entry.mode.serving is Serving.MAINTENANCE:
                ready = "maintenance"
            elif entry.mode.serving is Serving.PAUSED:
                ready += ", paused"
            lines.append(f"+ {_label(key)} -> {entry.service} ({ready})")
            continue
        if was.get(key, Serving.ON.value) != entry.mode.serving.value:
            lines.append(f"~ {_label(key)}: {_entering(entry.mode)}")
        joins = sorted(set(entry.sends_to) - set(before[key]))
        leaves = sorted(set(before[key]) - set(entry.sends_to))
        if joins or leaves:
            moves = [*(f"+{u}" for u in joins), *(f"-{u}" for u in leaves)]
            lines.append(f"~ {_label(key)}: {' '.join(moves)}")
        lines += _share_change(entry, before[key], _label(key))
    lines += [f"- {_label(key)}" for key in before if key not in after]
    return tuple(lines)


def _share_change(entry: RouteEntry, loaded: tuple[str, ...], label: str) -> list[str]:
    """A line when the route's canary share changes: the proxy lists an upstream once per
    turn of its round robin (minidock.commands.caddy), so its loaded turns are compared."""
    if not entry.sends_to:
        return []
    turns = {u: loaded.count(u) for u in set(loaded)}
    weighed = dict(entry.weighed())
    if _ratio(turns) == _ratio(weighed):
        return []
    if entry.canary:
        share = f"canary {entry.canary}% of requests ({entry.canaries} of {len(weighed)} upstreams)"
        return [f"~ {label}: {share}"]
    return [f"~ {label}: every upstream an equal share"] if len(set(turns.values())) > 1 else []


def _ratio(turns: dict[str, int]) -> dict[str, float]:
    total = sum(turns.values()) or 1
    return {u: round(t / total, 6) for u, t in turns.items()}


def _entering(mode: ServingMode) -> str:
    if mode.serving is Serving.MAINTENANCE:
        return "maintenance (503 with its page)"
    if mode.serving is Serving.PAUSED:
        return f"paused (requests held up to {mode.timeout:g}s)"
    return "serving again"


def _label(key: tuple[str, str]) -> str:
    domain, path = key
    return f"{domain or '*'}{path}"
