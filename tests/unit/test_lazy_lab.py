"""`minidock reconcile` (and every command but `lab`) never imports the lab package: the
CLI registers `lab` lazily (minidock/cli.py LazyGroup). Checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from minidock.cli import main
sys.argv = ["minidock", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m == "minidock.lab" or m.startswith("minidock.lab."))
print("LAB-MODULES:" + " ".join(loaded))
"""


def lab_modules_after(*args: str) -> list[str]:
    """The minidock.lab modules loaded by `minidock ARGS` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    marker = [line for line in done.stdout.splitlines() if line.startswith("LAB-MODULES:")]
    assert len(marker) == 1, done.stdout + done.stderr
    return marker[0].removeprefix("LAB-MODULES:").split()


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
