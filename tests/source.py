"""Reading the package's own source in tests."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """`ast.parse` with the garbage collector off. On CPython 3.11 a finalizer the
    collector runs while the tree is built (an asyncio Task an earlier test left with a
    KeyboardInterrupt, logged as it is collected) fails the parse with "AST constructor
    recursion depth mismatch"; what is collectable is collected first."""
    gc.collect()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        gc.enable()
