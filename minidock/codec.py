"""JSON round-trips of model values for the state store (cattrs does the structuring).

State written by MiniDock before the core had phase enums (hosts with `down`/`drained`
booleans, slots with `failed`/`complete`) is read into today's phases, so an upgrade keeps
every drain and every Failed slot.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn

from minidock.core.hosts import Availability, HostPhase, HostState
from minidock.core.slots import SlotPhase, SlotState

_converter = cattrs.Converter()
T = TypeVar("T")


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


def _upgrading(cls: type[T], upgrade: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    base = make_dict_structure_fn(cls, _converter)
    _converter.register_structure_hook(cls, lambda d, _: base(upgrade(d), cls))


_upgrading(HostState, _legacy_host)
_upgrading(SlotState, _legacy_slot)


def dumps(value: object) -> str:
    """Serialize a model value (dataclass tree) to compact, stable JSON."""
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
