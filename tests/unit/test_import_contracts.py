"""The core's import contract is an allow-list (issue 19, Deliver 9): the contract type in
tools/import_contracts.py keeps an import of what it lists and breaks on anything else,
and pyproject.toml's contract for minidock.core uses it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from grimp import ImportGraph

from tools.import_contracts import AllowListContract

ROOT = Path(__file__).resolve().parents[2]


def graph(*imports: tuple[str, str]) -> ImportGraph:
    g = ImportGraph()
    for module in ("pkg", "pkg.core", "pkg.core.a", "pkg.model", "pkg.io"):
        g.add_module(module)
    for importer, imported in imports:
        g.add_import(importer=importer, imported=imported, line_number=3, line_contents="")
    return g


def contract(*allowed: str) -> AllowListContract:
    options = {"source_modules": ["pkg.core"], "allowed_modules": list(allowed)}
    return AllowListContract("core", session_options={}, contract_options=options)


def test_imports_of_itself_and_of_the_allowed_modules_keep_the_contract() -> None:
    g = graph(("pkg.core.a", "pkg.core"), ("pkg.core.a", "pkg.model"))
    g.add_module("heapq", is_squashed=True)
    g.add_import(importer="pkg.core", imported="heapq", line_number=5, line_contents="")
    assert contract("pkg.model", "heapq").check(g, verbose=False).kept


def test_any_other_import_breaks_it_and_is_named_with_its_line() -> None:
    g = graph(("pkg.core.a", "pkg.model"), ("pkg.core.a", "pkg.io"))
    g.add_module("os", is_squashed=True)
    g.add_import(importer="pkg.core", imported="os", line_number=7, line_contents="import os")
    check = contract("pkg.model").check(g, verbose=False)
    assert not check.kept
    assert check.metadata["broken"] == [
        {"importer": "pkg.core", "imported": "os", "lines": [7]},
        {"importer": "pkg.core.a", "imported": "pkg.io", "lines": [3]},
    ]


def test_the_cores_contract_in_pyproject_is_the_allow_list() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert "allow_list: tools.import_contracts.AllowListContract" in config["contract_types"]
    (core,) = [c for c in config["contracts"] if c.get("source_modules") == ["minidock.core"]]
    assert core["type"] == "allow_list"
    allowed = set(core["allowed_modules"])
    assert {"minidock.model", "minidock.units"} <= allowed
    assert not allowed & {"os", "time", "asyncio", "socket", "subprocess", "random", "sqlite3"}
    assert not [
        m
        for m in allowed
        if m.startswith("minidock.") and m not in ("minidock.model", "minidock.units")
    ]
