"""The controller state as many small documents, one per host, service and slot, so the
etcd store keeps it in a key each and a commit rewrites only what changed (docs/ha.md,
"What is in etcd"; docs/scale.md says why: one key stops fitting in an etcd request at
about 1,300 hosts, and a fleet's every pass would rewrite it whole).

Names, under the state's `PREFIX/state/`:

    rest                 the ControllerState without its hosts and services
    seen                 {host: last_seen}: the one field every pass's probes change
    hosts/<host>         one HostState without its last_seen
    services/<service>   one ServiceState without its slots
    slots/<service>/<n>  one SlotState

Each host's `last_seen` lives in `seen`, not in its own key: a pass in which nothing
happened then writes three small keys (`seen`, `rest` with its pass counters, and
PREFIX/meta) however many hosts it probed, not one key a host.

Pure: JSON data in (a codec's `to_data` output), bytes out, and back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "REST",
    "SEEN",
    "changes",
    "document",
    "host_documents",
    "join",
    "last_seen",
    "slot_documents",
    "split",
]

REST = "rest"
SEEN = "seen"


def document(data: Any) -> bytes:
    """One document's bytes: compact JSON, keys sorted (equal data, equal bytes)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def split(data: Mapping[str, Any]) -> dict[str, bytes]:
    """A ControllerState's data as {name: document}: equal data, equal documents."""
    rest = dict(data)
    hosts = rest.pop("hosts", {})
    services = rest.pop("services", {})
    parts = {REST: document(rest)}
    seen = {}
    for host, record in hosts.items():
        own = dict(record)
        seen[host] = own.pop("last_seen", None)
        parts[f"hosts/{host}"] = document(own)
    parts[SEEN] = document(seen)
    for service, record in services.items():
        own = dict(record)
        for n, slot in own.pop("slots", {}).items():
            parts[f"slots/{service}/{n}"] = document(slot)
        parts[f"services/{service}"] = document(own)
    return parts


def join(parts: Mapping[str, bytes], *, records: bool = True) -> dict[str, Any] | None:
    """The data `split` was given (slot numbers as JSON keys, strings), or None when
    there is no `rest` document: nothing was committed in this layout. Without `records`,
    no host and no slot (every service's `slots` empty): the caller reads them from
    `host_documents`, `last_seen` and `slot_documents`."""
    if REST not in parts:
        return None
    data: dict[str, Any] = json.loads(parts[REST])
    seen = last_seen(parts) if records else {}
    hosts: dict[str, Any] = {}
    services: dict[str, dict[str, Any]] = {}
    slots: dict[str, dict[str, Any]] = {}
    for name, raw in parts.items():
        kind, _, rest = name.partition("/")
        if kind == "hosts" and records:
            hosts[rest] = {**json.loads(raw), "last_seen": seen.get(rest)}
        elif kind == "services":
            services[rest] = json.loads(raw)
        elif kind == "slots" and records:
            service, _, n = rest.rpartition("/")
            slots.setdefault(service, {})[n] = json.loads(raw)
    for service, record in services.items():
        record["slots"] = slots.get(service, {})
    return {**data, "hosts": hosts, "services": services}


def host_documents(parts: Mapping[str, bytes]) -> dict[str, bytes]:
    """Each host's document (its record without `last_seen`), by host, in key order."""
    return {name[6:]: raw for name, raw in parts.items() if name.startswith("hosts/")}


def slot_documents(parts: Mapping[str, bytes]) -> dict[str, dict[str, bytes]]:
    """Each service's slot documents, by slot number (a string), in key order."""
    slots: dict[str, dict[str, bytes]] = {}
    for name, raw in parts.items():
        if name.startswith("slots/"):
            service, _, n = name[6:].rpartition("/")
            slots.setdefault(service, {})[n] = raw
    return slots


def last_seen(parts: Mapping[str, bytes]) -> dict[str, Any]:
    """Each host's `last_seen` (None: never), from the `seen` document."""
    seen: dict[str, Any] = json.loads(parts.get(SEEN, b"{}"))
    return seen


def changes(
    current: Mapping[bytes, bytes], target: Mapping[bytes, bytes]
) -> tuple[dict[bytes, bytes], list[bytes]]:
    """What turns the keys `current` into `target`: the puts (new or changed values) and
    the deletes (keys `target` no longer has), each in key order."""
    puts = {k: v for k, v in sorted(target.items()) if current.get(k) != v}
    return puts, sorted(k for k in current if k not in target)
