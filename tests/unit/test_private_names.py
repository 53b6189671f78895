"""A module's `_private` names are its own: no module of the package imports one from another
module (`from minidock.x import _helper`) or reaches one through a module it imported
(`x._helper`). A helper two modules need is public in one place (use cases share theirs in
minidock/usecases/common.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "minidock"


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(node: ast.ImportFrom, here: str, package: bool) -> str:
    """The module an import names, a relative one resolved from the importing module."""
    if not node.level:
        return node.module or ""
    base = here.split(".")[: len(here.split(".")) - node.level + (1 if package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists()


def crossings(source: str, here: str, *, package: bool = False) -> Iterator[str]:
    """Each private name module HERE (its SOURCE) takes from another module of the package,
    as `line: what`."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to a module of the package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.asname and is_module(a.name))
        if not isinstance(node, ast.ImportFrom):
            continue
        origin = absolute(node, here, package)
        if not origin.startswith("minidock") or origin == here:
            continue
        for alias in node.names:
            if private(alias.name):
                yield f"{node.lineno}: from {origin} import {alias.name}"
            elif is_module(f"{origin}.{alias.name}"):
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in modules and private(node.attr):
            yield f"{node.lineno}: {node.value.id}.{node.attr}"


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{crossing}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for crossing in crossings(
            path.read_text(), module_of(path), package=path.name == "__init__.py"
        )
    ]
    assert not found, "private names taken from another module:\n" + "\n".join(found)


def test_the_check_sees_an_import_a_relative_import_and_a_reach() -> None:
    """The rule's own witness: each way of taking a private name is found; a module's own
    private names and a public helper are not."""
    source = (
        "from minidock.usecases.intents import _intent\n"
        "from .tasks import _cluster_of\n"
        "from minidock.commands import docker\n"
        "import minidock.commands.facts as facts\n"
        "from minidock.usecases.moves import _own\n"
        "from minidock.usecases.common import record_intent\n"
        "docker._operand, facts._parse, docker.operand\n"
    )
    assert list(crossings(source, "minidock.usecases.moves")) == [
        "1: from minidock.usecases.intents import _intent",
        "2: from minidock.usecases.tasks import _cluster_of",
        "7: docker._operand",
        "7: facts._parse",
    ]
