"""One Compose service being translated, and the top-level declarations it refers to."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from minidock.spec.compose.context import Context, describe
from minidock.spec.compose.values import mapping
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = ["Service", "TopLevel"]


@dataclass
class TopLevel:
    """What the top level declares: named volumes, networks (the name a service joins for
    an external one, "" for one that is the cluster's own network), secrets and configs
    (as TOML secret and config sources), and which services are in (their profiles are
    active) or out."""

    volumes: dict[str, YDict] = field(default_factory=dict)
    networks: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)


@dataclass
class Service:
    """The Compose service `name` (`body`) and the TOML service table it becomes (`out`)."""

    ctx: Context
    name: str
    body: YDict
    top: TopLevel
    out: dict[str, Any] = field(default_factory=dict)

    @property
    def at(self) -> tuple[Part, ...]:
        return ("services", self.name)

    def set(self, key: str, value: Any, *parts: Part) -> None:
        """Set the TOML key `key`, made from the Compose key at `parts` (under the service)."""
        self.out[key] = value
        self.ctx.came_from(("services", self.name, key), (*self.at, *parts))

    def section(self, *parts: Part) -> YDict:
        """The mapping at `parts` under the service (empty when absent)."""
        node: Any = self.body
        for i, part in enumerate(parts):
            node = mapping(self.ctx, node, (*self.at, *parts[:i])).get(part)
        return mapping(self.ctx, node, (*self.at, *parts))

    def list_of(self, key: str) -> YList:
        value = self.body[key]
        if not isinstance(value, YList):
            raise self.ctx.fail((*self.at, key), f"expected a list, got {describe(value)}")
        return value

    def known_keys(self, item: YDict, where: Sequence[Part], allowed: Iterable[str]) -> None:
        """Refuse a key of `item` outside `allowed` (extension fields `x-...` pass)."""
        known = list(allowed)
        for key in item:
            if isinstance(key, str) and key.startswith("x-"):
                continue
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(known)}"
                raise self.ctx.fail((*where, key), f"unknown key {key!r} ({hint})")
