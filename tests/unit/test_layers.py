"""The use-case layer's contract, read from the imports: the CLI parses and prints and
reaches the machinery only through `minidock.usecases` (plus the types it prints); the use
cases never import the CLI or its printing libraries."""

from __future__ import annotations

import ast
from pathlib import Path

import minidock
from tests.source import parsed

PACKAGE = Path(minidock.__file__).parent

# What cli.py may import from minidock besides the use cases: the lab's sub-app, the
# state-directory rule, the real executor it wires in, the types it prints, its live
# progress view and its output streams (adapters beside it), and the observability
# adapters beside it (metrics text, the web server), loaded only by their commands.
CLI_MAY_IMPORT = {
    "minidock.lab": {"lab_app"},
    "minidock.store.directory": {"StateError", "state_dir"},
    "minidock.ssh": {"SSHExecutor"},
    "minidock.units": {"format_duration", "format_size", "parse_duration"},
    "minidock.documents.status": {
        "CertificateSummary",
        "HostSummary",
        "JobSummary",
        "ServiceSummary",
        "StatusDocument",
    },
    "minidock.core": {"Plan"},
    "minidock.model": {"Event"},
    "minidock.runner": {"PassResult"},
    "minidock.progress": {"LiveProgress", "PlainProgress", "progress_view"},
    "minidock.output": {"Output", "Printer", "rich_console"},
    "minidock.metrics": {"metrics_text", "write_textfile"},  # `metrics`, imported lazily
    "minidock.serve": {"*"},  # `serve`'s web adapter (`from minidock import serve`), lazily
}


def imports(path: Path) -> dict[str, set[str]]:
    """Module -> names imported from it (`import x` gives the name "*")."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module == "minidock":  # `from minidock import usecases`
                for name in names:
                    found.setdefault(f"minidock.{name}", set()).add("*")
            else:
                found.setdefault(node.module, set()).update(names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                found.setdefault(a.name, set()).add("*")
    return found


def test_the_cli_reaches_the_machinery_only_through_the_use_cases() -> None:
    found = imports(PACKAGE / "cli.py")
    for module, names in found.items():
        if not module.startswith("minidock") or module.startswith("minidock.usecases"):
            continue
        assert module in CLI_MAY_IMPORT, f"cli.py imports {module}"
        assert names <= CLI_MAY_IMPORT[module], f"cli.py imports {names} from {module}"
    assert "minidock.usecases" in found


def test_the_use_cases_do_not_know_the_command_line() -> None:
    modules = sorted((PACKAGE / "usecases").glob("*.py"))
    assert len(modules) >= 5
    for path in modules:
        for module in imports(path):
            top = module.split(".")[0]
            assert top not in {"typer", "rich", "click"}, f"{path.name} imports {module}"
            assert module != "minidock.cli", f"{path.name} imports the CLI"
            assert not module.startswith("minidock.lab"), f"{path.name} imports the lab"


def test_every_module_of_the_package_has_its_layer() -> None:
    """The layers contract (pyproject.toml, checked by `lint-imports`) names every
    top-level module of the package: a new module is placed in a layer on purpose."""
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and "containers" not in c]
    named = {m.strip() for layer in layers["layers"] for m in layer.replace("|", ":").split(":")}
    tops = {
        f"minidock.{p.stem if p.is_file() else p.name}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert tops - named == set()
    assert named - tops == set()
