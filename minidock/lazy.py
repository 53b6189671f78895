"""Names a package hands out from its modules only when first asked for (PEP 562), so a
command loads what it runs: `minidock reconcile` neither the lab nor `status`'s documents
(tests/unit/test_lazy_lab.py). Standard library only: `python3 -m minidock.lab.prebuild`
runs before MiniDock's dependencies are installed."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: each name of `homes` imported from its module (a
    name relative to the package, `.cli`, or absolute) when first asked for, then kept on
    the package, so later reads are plain attribute reads."""

    def find(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return find
