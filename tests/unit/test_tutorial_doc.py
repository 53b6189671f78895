"""docs/tutorial.md cannot drift from what the suite runs: every command it shows is in a
block tests/integration/test_tutorial.py runs (`<!-- tutorial: run -->`), except the few
listed here that the lab test cannot run (the session's lab is up already), and every TOML
block it shows parses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

TUTORIAL = Path(__file__).parents[2] / "docs" / "tutorial.md"
FENCE = re.compile(
    r"(?P<mark><!-- tutorial: [^>]*-->\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)\n```", re.S
)
# shown, not run by the lab test: its lab is up before it starts and down after it ends
NOT_RUN = (
    'export PATH="$PWD/.venv/bin:$PATH"',
    "minidock lab up --hosts 3",
    "minidock lab down",
)


def blocks(lang: str) -> list[tuple[str | None, str]]:
    return [
        (m["mark"], m["body"]) for m in FENCE.finditer(TUTORIAL.read_text()) if m["lang"] == lang
    ]


def test_every_command_shown_is_run_or_named_here() -> None:
    unrun = []
    for mark, body in blocks("console"):
        if mark is not None and "tutorial: run" in mark:
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                command = line[2:].split("#")[0].strip()
                unrun.append(command)
    assert unrun == list(NOT_RUN)


def test_the_cluster_file_and_every_toml_block_parse() -> None:
    cluster = ""
    for mark, body in blocks("toml"):
        if mark is not None and "tutorial: file" in mark:
            cluster = body + "\n"
        elif mark is not None and "tutorial: append" in mark:
            cluster += body + "\n"
        else:
            tomllib.loads(body)  # the inventory and the real servers' variants
    doc = tomllib.loads(cluster)
    assert set(doc["services"]) == {"db", "web", "backup"}
    web = doc["services"]["web"]
    assert web["ingress"]["tls"] == "acme"
    assert "before_update" in web["hooks"]
    assert doc["services"]["db"]["expose"] == [5432]
    assert doc["services"]["db"]["volumes"]
    assert doc["services"]["backup"]["schedule"]
