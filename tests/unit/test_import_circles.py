"""The spec package's modules import each other one way: no two of them import each other,
at the top or inside a function (a package's __init__, which gathers its modules, aside).
What two readers share lives below both: `check_secret_mode`, which secretfiles and
agefiles both use, is in minidock.spec.sources."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]


def module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that PATH imports anywhere in it (functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def mutual_imports(package: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """Each pair of modules of PACKAGE (under ROOT) that import each other."""
    modules = {module_of(p, root): p for p in package.rglob("*.py") if p.name != "__init__.py"}
    graph = {name: imported(path, set(modules)) - {name} for name, path in modules.items()}
    return sorted({(a, b) for a in graph for b in graph[a] if a < b and a in graph[b]})


def test_no_two_spec_modules_import_each_other() -> None:
    assert mutual_imports(ROOT / "minidock" / "spec") == []


def test_the_check_sees_a_circle_closed_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / "minidock" / "spec"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from minidock.spec.b import x\n")
    (package / "b.py").write_text("def x():\n    from minidock.spec.a import y\n")
    (package / "c.py").write_text("from minidock.spec import a\n")
    found = mutual_imports(package, tmp_path)
    assert found == [("minidock.spec.a", "minidock.spec.b")]
