"""docs/architecture.md's module map names every module of the package as it is: a module
added without a line in the map, or a line left for a module that is gone, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "minidock"

# an entry of the map: two spaces per level, then a module (`name.py`) or a package (`name/`)
ENTRY = re.compile(r"^(?P<indent>(?:  )+)(?P<name>[a-z_]+(?:\.py|/))(?:\s|$)")


def module_map() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"\n```\nminidock/\n(.*?)\n```\n", text, re.S)
    assert found is not None, "docs/architecture.md lost its module map (a block opening minidock/)"
    return found[1].splitlines()


def mapped() -> set[str]:
    """The paths the map names, relative to minidock/: `core/hooks.py`, `serve/`..."""
    paths: set[str] = set()
    parents: list[str] = []
    for line in module_map():
        entry = ENTRY.match(line)
        if entry is None or len(entry["indent"]) > 6:
            continue  # a description's continuation line
        depth = len(entry["indent"]) // 2 - 1
        assert depth <= len(parents), f"the map skips a level at {line.strip()!r}"
        del parents[depth:]
        path = "".join(parents) + entry["name"]
        paths.add(path)
        if path.endswith("/"):
            parents.append(path[len("".join(parents)) :])
    return paths


def modules() -> set[str]:
    """Every module of the package (a package's __init__.py is its `name/` line)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in {"__init__.py", "__main__.py"}:
            continue
        found.add(relative[: -len("__init__.py")] if path.name == "__init__.py" else relative)
    return found


def test_the_module_map_names_every_module() -> None:
    missing = sorted(modules() - mapped())
    assert not missing, f"docs/architecture.md's module map lacks {missing}"


def test_the_module_map_names_no_module_that_is_gone() -> None:
    gone = sorted(p for p in mapped() if not (PACKAGE / p).exists())
    assert not gone, f"docs/architecture.md's module map names modules that do not exist: {gone}"
