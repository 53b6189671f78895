"""Every proxy's config of one pass, rendered once, right after the decision, from its Plan
(`render`): the ingress proxies' from its route table (`Plan.routes`), the certificates of
its next state (`Plan.state.tls`) and the pending orders' HTTP-01 responses
(`Plan.challenges`); each name proxy's from its endpoint table (`Plan.endpoints`). Each
proxy step then carries its config's digest and whether the pass loads it: the proxy
starts, or what it holds (observed) differs. `plan`, `status`, `serve` and the act path
read the result (`runner.PassResult.rendered`); none renders a config of its own
(docs/architecture.md, "One pass, one plan"). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from minidock.commands.caddy import Certificate, ProxyConfig, RouteSpec, proxy_config
from minidock.commands.haproxy import NameProxyConfig, name_proxy_config
from minidock.core.endpoints import Endpoints, NameStep
from minidock.core.plan import Plan
from minidock.core.routes import ProxyStep, RouteTable
from minidock.core.serving import Serving
from minidock.core.tls import TlsState
from minidock.model import HostNames, Ingress, Observed, ProxyObservation

__all__ = [
    "NOTHING_RENDERED",
    "NameLoad",
    "NamesLoad",
    "ProxyLoad",
    "Rendered",
    "configs_for",
    "ingress_loads",
    "name_loads",
    "render",
]

NO_TLS = TlsState()


@dataclass(frozen=True)
class ProxyLoad:
    """One ingress host's step with the pass's config: its `digest`, and whether the pass
    loads it (`load`: the step starts the proxy, or the proxy holds another config)."""

    step: ProxyStep
    digest: str
    load: bool


@dataclass(frozen=True)
class NameLoad:
    """One service's name proxy on a step's host: its config, whether the pass starts it
    (missing or stopped) and whether it loads the config (it starts, or holds another)."""

    config: NameProxyConfig
    start: bool
    load: bool


@dataclass(frozen=True)
class NamesLoad:
    """One host's name-proxy step with the config of each service it runs, in its order."""

    step: NameStep
    loads: tuple[NameLoad, ...] = ()


@dataclass(frozen=True)
class Rendered:
    """Every proxy's config of a pass: the one every ingress proxy loads (None: no ingress
    proxy answered, or no ingress), each ingress step's load, each name step's loads."""

    ingress: ProxyConfig | None = None
    proxies: tuple[ProxyLoad, ...] = ()
    names: tuple[NamesLoad, ...] = ()

    @property
    def digest(self) -> str:
        """The ingress proxies' config's digest ("" when none is rendered)."""
        return self.ingress.digest if self.ingress is not None else ""


NOTHING_RENDERED = Rendered()


def render(plan: Plan, ingress: Ingress | None, observed: Observed) -> Rendered:
    """Every proxy's config of the pass that decided `plan` on `observed`, with each step's
    digest and whether it loads (module docstring)."""
    config = None
    if ingress is not None and plan.proxies:
        challenges = dict(plan.challenges)  # a pending ACME order's, served meanwhile
        config = configs_for(plan.routes, ingress, plan.state.tls, challenges)
    proxies = ingress_loads(config.digest, plan.proxies, observed.proxies) if config else ()
    return Rendered(config, proxies, name_loads(plan.endpoints, plan.names, observed.names))


def ingress_loads(
    digest: str, steps: Sequence[ProxyStep], seen: Mapping[str, ProxyObservation]
) -> tuple[ProxyLoad, ...]:
    """Each step of an observed proxy with the config of `digest`: loaded where the step
    starts the proxy or the proxy holds another."""
    return tuple(
        ProxyLoad(s, digest, s.start or seen[s.host].digest != digest)
        for s in steps
        if s.host in seen
    )


def name_loads(
    table: Sequence[Endpoints], steps: Sequence[NameStep], seen: Mapping[str, HostNames]
) -> tuple[NamesLoad, ...]:
    """Each name step with the config of each service it runs (one config a service, the
    same on every host)."""
    configs: dict[str, NameProxyConfig] = {}
    found = []
    for step in steps:
        proxies = seen.get(step.host) or {}
        loads = []
        for service in step.run:
            if service not in configs:
                configs[service] = name_proxy_config(service, table)
            config = configs[service]
            proxy = proxies.get(service)
            if proxy is None or not proxy.running:
                loads.append(NameLoad(config, start=True, load=True))
            else:
                loads.append(NameLoad(config, start=False, load=proxy.digest != config.digest))
        found.append(NamesLoad(step, tuple(loads)))
    return tuple(found)


def configs_for(
    table: RouteTable,
    ingress: Ingress,
    tls: TlsState = NO_TLS,
    challenges: Mapping[str, str] = MappingProxyType({}),
) -> ProxyConfig:
    """The config every ingress proxy of the cluster loads for this route table: the
    certificates its TLS routes were given or got from ACME (`tls`; an ACME route whose
    certificate is not issued yet is served on plain HTTP), and any ACME `challenges`."""
    certificates: dict[str, Certificate] = {}
    for e in table:
        route = e.route
        if route.tls.mode == "files":
            certificates[route.domain] = Certificate(route.tls.cert, route.tls.key)
        elif route.tls.mode == "acme" and tls.record(route.domain).has_certificate:
            record = tls.record(route.domain)
            certificates[route.domain] = Certificate(record.chain, record.key)
    routes = [
        RouteSpec(
            e.route.domain,
            e.route.path,
            e.upstreams,
            e.route.domain in certificates,
            e.mode.message if e.mode.serving is Serving.MAINTENANCE else "",
            e.mode.timeout if e.mode.serving is Serving.PAUSED else 0.0,
            e.weights,
            e.service,
        )
        for e in table
    ]
    return proxy_config(routes, ingress, list(certificates.values()), challenges)
