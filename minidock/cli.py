"""The command line: parse, wire, print. No decisions live here."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="minidock",
    help="Keep Docker services converged on a fleet of SSH hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    app()
