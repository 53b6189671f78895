"""The version (issue 45): written once, in `minidock.__version__`; pyproject.toml reads it
from there; `minidock --version` prints it; CHANGELOG.md has a section for it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from minidock import __version__
from tests.unit.test_cli import invoke

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once_and_read_by_the_packaging() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "minidock.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_minidock_version_prints_it() -> None:
    shown = invoke("--version")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == f"minidock {__version__}\n"


def test_the_changelog_has_a_section_for_it_first() -> None:
    sections = re.findall(r"^## (\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert sections[0] == __version__
    assert sections == sorted(sections, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
