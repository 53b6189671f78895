"""The README names every page of docs/ and every command (issue 45): a page or a command
added without it fails here."""

from __future__ import annotations

from pathlib import Path

import typer.main

from minidock.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_docs_page_is_in_the_readmes_list() -> None:
    listed = README[README.index("## Documentation") :]
    missing = [
        p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name})" not in listed
    ]
    assert missing == []


def test_every_command_is_named_in_the_readmes_commands() -> None:
    section = README[README.index("## Commands") : README.index("## Metrics")]
    command = typer.main.get_command(app)
    names = command.list_commands(None)  # type: ignore[attr-defined]
    missing = [n for n in names if f"`{n}" not in section and f" {n} " not in section]
    assert missing == []
