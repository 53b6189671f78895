"""JSON round-trips of model values for the state store (cattrs does the structuring).

State written by MiniDock before the core had phase enums (hosts with `down`/`drained`
booleans, slots with `failed`/`complete`, rollouts whose phase was named `status`) is read
into today's phases, so an upgrade keeps every drain, every Failed slot and every rollout;
a service's replica count over `model.MAX_REPLICAS` (which no MiniDock before it refused)
is read as that maximum, with a warning.

`Codec(box)` is what the stores use: the same JSON, with every secret value of a service
(`model.secret_values`: its `secrets`, its secret files' text, its registry password, env
values under secret-looking keys, its routes' certificate keys) and the keys of the ACME
account and certificates (minidock.core.tls) sealed by the box on the way out and opened
on the way in (minidock.store.sealing); a clear value an older MiniDock wrote is read as
it is. The module's own functions seal nothing: they are for values that hold no secret.
"""

from __future__ import annotations

import json
import logging
import operator
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from minidock.core.hosts import Availability, HostPhase, HostState
from minidock.core.slots import SlotPhase, SlotState
from minidock.core.state import ControllerState, Rollout
from minidock.core.tls import AcmeAccount, CertRecord, PendingOrder
from minidock.model import MAX_REPLICAS, Cluster, Event, Service, keyed_cluster, looks_secret
from minidock.store import parts

if TYPE_CHECKING:
    from minidock.store.sealing import SecretBox

T = TypeVar("T")
log = logging.getLogger("minidock.store")


def _legacy_host(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    if d.pop("drained", False):
        d["availability"] = Availability.DRAINED
    if "down" in d:
        phase = HostPhase.UNREACHABLE if d.get("failures") else HostPhase.READY
        d["phase"] = HostPhase.DOWN if d.pop("down") else phase
    return d


def _legacy_slot(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    failed, complete = d.pop("failed", None), d.pop("complete", None)
    if "phase" not in d and (failed is not None or complete is not None):
        backing_off = bool(d.get("attempts"))
        d["phase"] = (
            SlotPhase.FAILED
            if failed
            else SlotPhase.COMPLETE
            if complete
            else SlotPhase.BACKING_OFF
            if backing_off
            else SlotPhase.EMPTY
        )
    return d


def _legacy_rollout(d: dict[str, Any]) -> dict[str, Any]:
    """A rollout stored before its phase field was named `phase` (it was `status`)."""
    if "status" in d and "phase" not in d:
        d = dict(d)
        d["phase"] = d.pop("status")
    return d


def _upgrading(
    converter: cattrs.Converter, cls: type[T], upgrade: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    base = make_dict_structure_fn(cls, converter)
    converter.register_structure_hook(cls, lambda d, _: base(upgrade(d), cls))


# The box of the `Codec` call under way, set by `Codec.to_data`/`from_data` around one
# (un)structuring and reset after it. It stays ambient (docs/architecture.md, "Ambient
# values"): cattrs calls a hook with the value alone, and a converter per box, its hooks
# closing over it, costs about 30 ms to compile (measured on the empty state), once per
# store opened.
_BOX: ContextVar[SecretBox | None] = ContextVar("minidock_codec_box", default=None)


def _seal(value: str) -> str:
    box = _BOX.get()
    return value if box is None else box.seal(value)


def _open(value: str) -> str:
    box = _BOX.get()
    return value if box is None else box.open(value)


def _sealing(converter: cattrs.Converter) -> None:
    """Service values with their secret values sealed out and opened in by the box of
    the `Codec` call under way (none: as they are). One converter for the process: its
    hooks are compiled once, not per store."""
    unstructure = make_dict_unstructure_fn(Service, converter)
    converter.register_unstructure_hook(
        Service, lambda service: _secret_fields(unstructure(service), _seal)
    )
    _upgrading(converter, Service, lambda d: _secret_fields(_bounded_replicas(d), _open))


_TOLD: set[tuple[object, int]] = set()  # the over-large counts already said, once a process


def _bounded_replicas(d: dict[str, Any]) -> dict[str, Any]:
    """A service stored before `MAX_REPLICAS` may hold any count (`scale web=99999999999`
    stored one, then every pass and `status` ran out of memory building its slots): it is
    read as `MAX_REPLICAS`, said once a process on the `minidock.store` log."""
    replicas = d.get("replicas", 1)
    if not isinstance(replicas, int) or replicas <= MAX_REPLICAS:
        return d
    name = d.get("name")
    if (name, replicas) not in _TOLD:
        _TOLD.add((name, replicas))
        log.warning(
            "state: services.%s.replicas is %s, over the maximum of %d (stored by an older "
            "MiniDock): read as %d; set the count with minidock scale %s=N",
            name, replicas, MAX_REPLICAS, MAX_REPLICAS, name,
        )  # fmt: skip
    return {**d, "replicas": MAX_REPLICAS}


def _secret_fields(d: dict[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """A service's data with `change` applied to each secret value (model.secret_values)."""
    d = dict(d)
    d["env"] = [[k, change(v) if looks_secret(k) and v else v] for k, v in d.get("env", ())]
    d["secrets"] = [[k, change(v) if v else v] for k, v in d.get("secrets", ())]
    d["secret_files"] = [
        {**f, "value": change(f["value"]) if f["value"] else ""} for f in d.get("secret_files", ())
    ]
    auth = d.get("registry_auth")
    if auth is not None and auth.get("password"):
        d["registry_auth"] = {**auth, "password": change(auth["password"])}
    d["ingress"] = [_route_key(route, change) for route in d.get("ingress", ())]
    return d


def _route_key(route: dict[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """A route's data with `change` applied to its certificate's private key."""
    tls = route.get("tls")
    if not isinstance(tls, dict) or not tls.get("key"):
        return route
    return {**route, "tls": {**tls, "key": change(tls["key"])}}


def _sealing_keys(converter: cattrs.Converter, cls: type[Any]) -> None:
    """Values of `cls` with their `key` (a private key) sealed out and opened in."""
    unstructure = make_dict_unstructure_fn(cls, converter)

    def out(value: Any) -> dict[str, Any]:
        d: dict[str, Any] = unstructure(value)
        return {**d, "key": _seal(d["key"])} if d.get("key") else d

    converter.register_unstructure_hook(cls, out)
    _upgrading(converter, cls, lambda d: {**d, "key": _open(d["key"])} if d.get("key") else d)


_converter = cattrs.Converter(detailed_validation=False)  # a KeyProblem comes out as it is
_upgrading(_converter, HostState, _legacy_host)
_upgrading(_converter, SlotState, _legacy_slot)
_upgrading(_converter, Rollout, _legacy_rollout)
_sealing(_converter)
_sealing_keys(_converter, AcmeAccount)  # the state's ACME account key
_sealing_keys(_converter, CertRecord)  # each ACME certificate's key
_sealing_keys(_converter, PendingOrder)  # the key of each ACME order not collected yet


def warm() -> None:
    """Make the converter's hooks for what a store reads and writes now rather than on
    first use (cattrs generates them then: about 0.09 s of a command's CPU), for a process
    that forks its commands afterwards (the tests' zygote, tests/zygote.py)."""
    for kind in (ControllerState, Cluster, Event):
        _converter.get_structure_hook(kind)
        _converter.get_unstructure_hook(kind)


class Codec:
    """JSON round-trips for a store: secret values sealed with `box` (see the module;
    None seals nothing, as an older MiniDock wrote)."""

    def __init__(self, box: SecretBox | None) -> None:
        self.box = box

    def keyed(self, cluster: Cluster) -> Cluster:
        """`cluster` with each service's secret digest under this store's digest key (the
        box's; no box: as it is), as `apply` stores it and `plan` compares it."""
        return cluster if self.box is None else keyed_cluster(cluster, self.box.digest_key)

    def dumps(self, value: object) -> str:
        """`value` as compact, stable JSON, its secret values sealed."""
        return json.dumps(self.to_data(value), sort_keys=True, separators=(",", ":"))

    def loads(self, text: str, kind: type[T]) -> T:
        """A value of `kind` from `dumps` output (or an older store's clear JSON)."""
        return self.from_data(json.loads(text), kind)

    def to_data(self, value: object) -> Any:
        token = _BOX.set(self.box)
        try:
            return _converter.unstructure(value)
        finally:
            _BOX.reset(token)

    def from_data(self, data: Any, kind: type[T]) -> T:
        token = _BOX.set(self.box)
        try:
            return _converter.structure(data, kind)
        finally:
            _BOX.reset(token)


class StateRecords:
    """A state's host and slot records with their documents (`store.parts`; a host's
    without its `last_seen`), both ways: a state read again structures only the records
    whose document changed, and gives each host its `last_seen` from the `seen` document;
    a state written again encodes only the records that differ from the ones last written
    under their names (`documents`). At 1,000 hosts, structuring them was most of
    a read's CPU and encoding them most of a commit's, and a `watch` reads the state a few
    times a pass and commits it two or three times (docs/benchmarks.md, "Reading the
    state", "Writing the state"). Neither record holds anything sealed, so one record and
    its document serve any codec."""

    def __init__(self) -> None:
        self._hosts: dict[bytes, HostState] = {}
        self._slots: dict[bytes, SlotState] = {}
        self._host_documents: dict[str, tuple[HostState, bytes]] = {}
        self._slot_documents: dict[tuple[str, int], tuple[SlotState, bytes]] = {}

    def fill(self, state: ControllerState, parted: Mapping[str, bytes]) -> ControllerState:
        """`state` (structured from `parts.join(parted, records=False)`) with the host and
        slot records of `parted`, that read's documents."""
        hosts: dict[str, HostState] = {}
        kept_hosts: dict[bytes, HostState] = {}
        seen = parts.last_seen(parted)
        for name, raw in parts.host_documents(parted).items():
            host = kept_hosts.get(raw) or self._hosts.get(raw) or _structured(raw, HostState)
            kept_hosts[raw] = host
            at = seen.get(name)
            hosts[name] = host if at is None else replace(host, last_seen=float(at))
        kept_slots: dict[bytes, SlotState] = {}
        services = dict(state.services)
        for service, documents in parts.slot_documents(parted).items():
            slots: dict[int, SlotState] = {}
            for n, raw in documents.items():
                slot = kept_slots.get(raw) or self._slots.get(raw) or _structured(raw, SlotState)
                slots[int(n)] = kept_slots[raw] = slot
            if service in services:
                services[service] = replace(services[service], slots=slots)
        self._hosts, self._slots = kept_hosts, kept_slots
        return replace(state, hosts=hosts, services=services)

    def documents(self, codec: Codec, state: ControllerState) -> dict[str, bytes]:
        """`parts.split(codec.to_data(state))`, but a host or slot record equal to the one
        last written under its name (a host's `last_seen` aside) is given that one's
        document (encoded again, an equal record could differ only where a number is an
        int in one and a float in the other, which reads back equal). Records no longer
        in the state are forgotten."""
        bare = replace(
            state,
            hosts={},
            services={name: replace(ss, slots={}) for name, ss in state.services.items()},
        )
        documents = parts.split(codec.to_data(bare))
        hosts = {
            name: (host, self._host_document(name, host)) for name, host in state.hosts.items()
        }
        slots = {
            (service, n): (slot, self._slot_document(service, n, slot))
            for service, ss in state.services.items()
            for n, slot in ss.slots.items()
        }
        self._host_documents, self._slot_documents = hosts, slots
        for name, (_, raw) in hosts.items():
            documents[f"hosts/{name}"] = raw
        documents[parts.SEEN] = parts.document({n: h.last_seen for n, h in state.hosts.items()})
        for (service, n), (_, raw) in slots.items():
            documents[f"slots/{service}/{n}"] = raw
        return documents

    def _host_document(self, name: str, host: HostState) -> bytes:
        known = self._host_documents.get(name)
        if known is not None and (known[0] is host or _but_seen(known[0]) == _but_seen(host)):
            return known[1]
        data = _converter.unstructure(host, HostState)
        data.pop("last_seen", None)
        return parts.document(data)

    def _slot_document(self, service: str, n: int, slot: SlotState) -> bytes:
        known = self._slot_documents.get((service, n))
        if known is not None and (known[0] is slot or known[0] == slot):
            return known[1]
        return parts.document(_converter.unstructure(slot, SlotState))


# a host record's fields but `last_seen` (which every probe that answers changes)
_but_seen = operator.attrgetter(*(f.name for f in fields(HostState) if f.name != "last_seen"))


def _structured(raw: bytes, kind: type[T]) -> T:
    return _converter.structure(json.loads(raw), kind)


def dumps(value: object) -> str:
    """Serialize a model value (dataclass tree) to compact, stable JSON (nothing sealed)."""
    return json.dumps(to_data(value), sort_keys=True, separators=(",", ":"))


def loads(text: str, kind: type[T]) -> T:
    """Rebuild a model value of `kind` from `dumps` output."""
    return from_data(json.loads(text), kind)


def to_data(value: object) -> Any:
    """A model value as JSON-ready data (dicts, lists, numbers, strings), for a document
    that holds several values (the etcd store's keys)."""
    return _converter.unstructure(value)


def from_data(data: Any, kind: type[T]) -> T:
    """Rebuild a model value of `kind` from `to_data` output."""
    return _converter.structure(data, kind)
