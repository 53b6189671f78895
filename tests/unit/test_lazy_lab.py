"""`minidock reconcile` (and every command but `lab`) never imports the lab package: the
CLI registers `lab` lazily (minidock/cli.py LazyGroup); and on a pipe it never imports rich
(minidock/output.py). Checked in fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minidock.output import RICH_SAYS

PROBE = """
import sys
from minidock.cli import main
sys.argv = ["minidock", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
packages = ("minidock.lab", "rich", "minidock.serve", "prometheus_client", "minidock.act.acme",
            "acme", "requests", "minidock.documents", "minidock.progress", "minidock.usecases")
prefixes = tuple(p + "." for p in packages)
loaded = sorted(m for m in sys.modules if m in packages or m.startswith(prefixes))
print("LOADED:" + " ".join(loaded))
"""


def modules_after(*args: str, package: str = "minidock.lab") -> list[str]:
    """The modules of `package` (minidock.lab or rich) that `minidock ARGS` loads in a
    fresh interpreter, its output on pipes."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k not in RICH_SAYS},
    )
    marker = [line for line in done.stdout.splitlines() if line.startswith("LOADED:")]
    assert len(marker) == 1, done.stdout + done.stderr
    found = marker[0].removeprefix("LOADED:").split()
    return [m for m in found if m == package or m.startswith(package + ".")]


def lab_modules_after(*args: str) -> list[str]:
    return modules_after(*args, package="minidock.lab")


def test_importing_the_cli_loads_no_lab_module() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import minidock.cli"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "minidock.cli" in imported
    assert "minidock.core.reconcile" in imported
    assert [m for m in imported if m.startswith("minidock.lab")] == []


@pytest.mark.parametrize(
    "args",
    [["reconcile", "--help"], ["reconcile", "--state", "/nonexistent/state"]],
    ids=lambda a: " ".join(a),
)
def test_reconcile_loads_no_lab_module(args: list[str]) -> None:
    assert lab_modules_after(*args) == []


def test_lab_commands_load_the_lab() -> None:
    """The check above can fail: `lab --help` does load the package."""
    loaded = lab_modules_after("lab", "--help")
    assert {"minidock.lab", "minidock.lab.cli", "minidock.lab.fleet"} <= set(loaded)


def test_reconcile_loads_neither_the_web_server_nor_the_metrics_library() -> None:
    """`serve` and `metrics` import them inside the command (docs/observability.md)."""
    for package in ("minidock.serve", "prometheus_client"):
        assert modules_after("reconcile", "--state", "/nonexistent/state", package=package) == []
    serve = ("serve", "--listen", "nowhere", "--state", "/nonexistent/state")  # exit 2
    assert "minidock.serve.http" in modules_after(*serve, package="minidock.serve")


def test_reconcile_loads_no_acme_client_until_an_order_is_due() -> None:
    """The ACME client and its HTTP stack load inside the pass that orders (certify.py)."""
    for package in ("minidock.act.acme", "acme", "requests"):
        assert modules_after("reconcile", "--state", "/nonexistent/state", package=package) == []


def test_reconcile_on_a_pipe_loads_no_rich_and_its_help_does() -> None:
    """A cron run prints plain lines; help is rendered by rich, so the check can fail."""
    assert modules_after("reconcile", "--state", "/nonexistent/state", package="rich") == []
    assert "rich.console" in modules_after("reconcile", "--help", package="rich")  # typer's help


def test_reconcile_loads_the_use_cases_it_runs_and_not_the_documents_of_status() -> None:
    """The use cases load by name (minidock/usecases/__init__.py), and the CLI names the
    status documents and the live view for types only: a cron pass loads neither."""
    cron = ("reconcile", "--state", "/nonexistent/state")
    assert modules_after(*cron, package="minidock.documents") == []
    assert modules_after(*cron, package="minidock.progress") == []
    loaded = set(modules_after(*cron, package="minidock.usecases"))
    assert "minidock.usecases.passes" in loaded
    assert not loaded & {"minidock.usecases.desired", "minidock.usecases.reads"}
    status = ("status", "--state", "/nonexistent/state")  # the check can fail: status loads them
    assert "minidock.documents.status" in modules_after(*status, package="minidock.documents")
