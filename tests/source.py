"""Reading the package's own source in tests."""

from __future__ import annotations

import ast
import functools
import gc
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """`ast.parse` with the garbage collector off, once a file for the test process. On
    CPython 3.11 a finalizer the collector runs while the tree is built (an asyncio Task an
    earlier test left with a KeyboardInterrupt, logged as it is collected) fails the parse
    with "AST constructor recursion depth mismatch". No collection before it: a full one
    per file cost over a minute of one worker in a unit run whose heap hypothesis had
    grown (test_machines, 140 s on a loaded machine). Callers only read the tree."""
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        gc.enable()
