"""JSON round-trips of model values for the state store (cattrs does the structuring)."""

from __future__ import annotations

import json
from typing import TypeVar

import cattrs

_converter = cattrs.Converter()
T = TypeVar("T")


def dumps(value: object) -> str:
    """Serialize a model value (dataclass tree) to compact, stable JSON."""
    return json.dumps(_converter.unstructure(value), sort_keys=True, separators=(",", ":"))


def loads(text: str, kind: type[T]) -> T:
    """Rebuild a model value of `kind` from `dumps` output."""
    return _converter.structure(json.loads(text), kind)
