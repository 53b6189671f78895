"""A service's `autoscale` into the model, and the checks the schema cannot express
(docs/autoscale.md): min <= max, exactly one target, a window, a starting count within
the bounds, a service whose routes the ingress counts, and the services it cannot be for
(global, pinned to named volumes). Compose's `x-minidock: {autoscale: ...}` reaches here
as the same table."""

from __future__ import annotations

from typing import Any

from minidock import units
from minidock.model import Autoscale, Cluster, Volume
from minidock.spec.errors import Fail, Part, SpecError
from minidock.spec.messages import show

__all__ = ["autoscale_of", "check_autoscale", "starting_replicas"]


def autoscale_of(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, volumes: tuple[Volume, ...]
) -> Autoscale | None:
    """The service's autoscale policy, or None when it has none."""
    if "autoscale" not in body:
        return None
    table: dict[str, Any] = body["autoscale"]
    where = (*at, "autoscale")
    if "schedule" in body:
        raise fail(where, "a job has no count to scale: each scheduled time starts one run")
    if body.get("mode") == "global":
        raise fail(where, "a global service runs one task per host: remove autoscale")
    named = next((v for v in volumes if v.named), None)
    if named is not None:
        raise fail(
            where,
            f"each slot keeps its own named volume {named.source}: a count that follows "
            "traffic would leave one behind at every scale-in; remove autoscale",
        )
    if not body.get("ingress"):
        raise fail(
            where,
            "the count follows the requests of the service's routes, and it has none: "
            "add ingress = [...] or remove autoscale",
        )
    low, high = table.get("min", 1), table["max"]
    if low > high:
        raise fail((*where, "min"), f"min {low} is above max {high}: give min <= max")
    target: dict[str, Any] = table["target"]
    if len(target) != 1:
        raise fail(
            (*where, "target"),
            "give exactly one of requests_per_task = N or p95 = '250ms'"
            + (", not both" if target else ""),
        )
    p95 = units.parse_duration(target["p95"]) if "p95" in target else None
    if p95 is not None and p95 <= 0:
        raise fail((*where, "target", "p95"), f"must be greater than 0, got {show(target['p95'])}")
    window = units.parse_duration(table.get("window", "1m"))
    if window <= 0:
        raise fail((*where, "window"), f"must be greater than 0, got {show(table['window'])}")
    rate = target.get("requests_per_task")
    return Autoscale(
        min=low,
        max=high,
        requests_per_task=float(rate) if rate is not None else None,
        p95=p95,
        window=window,
        cooldown=units.parse_duration(table.get("cooldown", "3m")),
    )


def starting_replicas(
    body: dict[str, Any], policy: Autoscale | None, at: tuple[Part, ...], fail: Fail
) -> int:
    """`replicas` (default 1); with a policy, the starting count: within min..max, and
    `min` when the file gives none."""
    if policy is None:
        return int(body.get("replicas", 1))
    if "replicas" not in body:
        return policy.min
    replicas = int(body["replicas"])
    if policy.bounded(replicas) != replicas:
        raise fail(
            (*at, "replicas"),
            f"{replicas} is outside autoscale's {policy.min}..{policy.max}: the starting "
            "count must be within them (or leave replicas out: it starts at min)",
        )
    return replicas


def check_autoscale(cluster: Cluster, display: str) -> None:
    """An autoscaled service's routes must be counted: not with `[ingress]
    request_metrics = false`."""
    ingress = cluster.ingress
    if ingress is None or ingress.request_metrics:
        return
    for service in cluster.services:
        if service.autoscale is not None:
            raise SpecError(
                display,
                f"services.{service.name}.autoscale",
                "the count follows the ingress's request metrics, which [ingress] "
                "request_metrics = false turns off: turn them on or remove autoscale",
            )
