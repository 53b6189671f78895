"""Sessions for MiniDock's checks, tests and demo: `nox` runs lint, typecheck and tests.

The lint and type-check commands live here, in CHECKS, and nowhere else: the nox sessions
run them in nox's own virtualenvs, and `scripts/test.sh` runs the same commands with the
project's .venv (no extra virtualenvs on CI) through `python noxfile.py lint typecheck`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

LINT_PATHS = ["minidock", "tests", "benchmarks", "noxfile.py"]
CHECKS: dict[str, list[list[str]]] = {
    "lint": [
        ["ruff", "check", *LINT_PATHS],
        ["ruff", "format", "--check", *LINT_PATHS],
        ["lint-imports"],  # the layers contract in pyproject.toml
    ],
    # mypy --strict on the package, configured by [tool.mypy] in pyproject.toml
    "typecheck": [["mypy"]],
}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff", "import-linter", "-e", ".[etcd]")
    for command in CHECKS["lint"]:
        session.run(*command)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[etcd]", "mypy", "types-grpcio", "types-PyYAML")
    for command in CHECKS["typecheck"]:
        session.run(*command)


@nox.session
def tests(session: nox.Session) -> None:
    """pytest; arguments after -- go to pytest (e.g. `nox -s tests -- -m "not integration"`)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """The conformance lab test on one host kind alone: `nox -s conformance -- podman`.

    tests/integration/test_conformance.py on four hosts of the kind (docs/lab.md "Host
    kinds"); with no kind, the main suite's mixed lab (a host of each). Needs a Docker
    engine (docs/testing.md "Conformance")."""
    session.install("-e", ".[test]")
    kinds = ",".join(session.posargs[:1] * 4) or "bookworm,trixie,trixie-sudo,sid,podman"
    session.run(
        "pytest", "-n", "0", "-p", "no:cacheprovider", "tests/integration/test_conformance.py",
        env={"MINIDOCK_CONFORMANCE_KINDS": kinds},
    )  # fmt: skip


@nox.session(python=False)
def demo(session: nox.Session) -> None:
    """scripts/demo.sh: a lab fleet and a tour (needs a Docker engine; uses .venv)."""
    session.run("bash", "scripts/demo.sh", external=True)


def main(names: list[str]) -> int:
    """Run the CHECKS named (all when none) with the tools beside this Python; first failure
    wins. `scripts/test.sh` calls this with the project's .venv."""
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        print(f"noxfile.py: unknown check {unknown[0]!r}; known: {', '.join(CHECKS)}")
        return 2
    bindir = Path(sys.executable).parent
    for name in names or list(CHECKS):
        for command in CHECKS[name]:
            print(f"+ {' '.join(command)}", flush=True)
            code = subprocess.call(
                [str(bindir / command[0]), *command[1:]], cwd=Path(__file__).parent
            )
            if code != 0:
                return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
