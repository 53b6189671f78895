"""docs/tutorial.md is true: its files are written and its commands run, in order, in one
shell, against the session's lab, and what it shows of their output is what they print.

The blocks it runs are the ones marked `<!-- tutorial: file PATH -->` (a file written),
`<!-- tutorial: append PATH -->` (appended to) and `<!-- tutorial: run -->` (each `$ `
line a command; a trailing `# exit N` is its exit status, else 0; the lines under it are
its output, where `...` stands for anything and a number for any number). The one block it
does not run is `minidock lab up`: the session's lab is up already. `minidock` is the real
command line; `minidock lab ...` reaches the session's lab (its root and project), and
`inventory/lab.toml` is that lab's first three hosts, as `lab up --hosts 3` writes it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from tests.integration.conftest import Fleet, Minidock, patient_inventory

pytestmark = pytest.mark.integration

TUTORIAL = Path(__file__).parents[2] / "docs" / "tutorial.md"
BLOCK = re.compile(
    r"<!-- tutorial: (?P<verb>file|append|run)(?: (?P<path>\S+))? -->\n"
    r"```[a-z]*\n(?P<body>.*?)\n```",
    re.S,
)
EXIT = re.compile(r"#\s*exit (\d+)\s*$")


@dataclass(frozen=True)
class Command:
    line: str
    exit_code: int
    shown: tuple[str, ...]  # the output the tutorial shows under it


@dataclass(frozen=True)
class File:
    path: str
    text: str
    append: bool


def steps() -> list[Command | File]:
    found: list[Command | File] = []
    for block in BLOCK.finditer(TUTORIAL.read_text()):
        if block["verb"] != "run":
            found.append(File(block["path"], block["body"] + "\n", block["verb"] == "append"))
            continue
        for part in re.split(r"^\$ ", block["body"], flags=re.M)[1:]:
            line, *shown = part.split("\n")
            code = EXIT.search(line)
            found.append(Command(line, int(code[1]) if code else 0, tuple(s for s in shown if s)))
    return found


def script(found: list[Command | File]) -> str:
    """One bash script: files written with quoted here-documents, each command's output
    kept in out/N (its start and end in out/N.time), and a wrong exit status stopping the
    script, naming the command."""
    lines = ["mkdir -p out"]
    for n, step in enumerate(found):
        if isinstance(step, File):
            lines.append(f"mkdir -p \"$(dirname '{step.path}')\"")
            arrow = ">>" if step.append else ">"
            lines.append(f"cat {arrow} '{step.path}' <<'TUTORIAL_FILE'\n{step.text}TUTORIAL_FILE")
            continue
        lines.append(f"t0=$EPOCHREALTIME; {{ {step.line}\n}} >out/{n} 2>&1")
        lines.append(
            f'rc=$?; echo "$t0 $EPOCHREALTIME" >out/{n}.time; [ "$rc" -eq {step.exit_code} ] || '
            f'{{ echo "step {n}: exit $rc, not {step.exit_code}"; cat out/{n}; exit 90; }}'
        )
    return "\n".join(lines) + "\n"


def pattern(shown: str) -> re.Pattern[str]:
    """A line the tutorial shows, as a pattern: `...` is anything, a number any number."""
    parts = re.split(r"(\.{3,}|\d+(?:\.\d+)?)", shown.strip())
    out = []
    for part in parts:
        if re.fullmatch(r"\.{3,}", part):
            out.append(".*")
        elif re.fullmatch(r"\d+(?:\.\d+)?", part):
            out.append(r"\d+(?:\.\d+)?")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


def slowest(found: list[Command | File], out: Path, count: int = 8) -> str:
    """The commands that took longest, with their seconds (what to cut when it grows)."""
    took = []
    for n, step in enumerate(found):
        times = out / f"{n}.time"
        if isinstance(step, Command) and times.exists():
            start, end = (float(t) for t in times.read_text().split())
            took.append((end - start, step.line))
    return "\n".join(f"{s:6.1f} s  {line[:100]}" for s, line in sorted(took, reverse=True)[:count])


def shim(fleet: Fleet, folder: Path) -> Path:
    """`minidock` on PATH: the real command line; `minidock lab` is the session's lab."""
    folder.mkdir()
    lab = fleet.lab
    python = sys.executable
    (folder / "minidock").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = lab ]; then shift; exec "{python}" -m minidock lab '
        f'--root "{lab.root}" --project "{lab.project}" "$@"; fi\n'
        f'exec "{python}" -m minidock "$@"\n'
    )
    (folder / "minidock").chmod(0o755)
    return folder


def three_hosts(fleet: Fleet, path: Path) -> None:
    """The session lab's inventory, patient probes, its first three hosts only."""
    patient_inventory(fleet, path)
    doc = tomllib.loads(path.read_text())
    doc["hosts"] = doc["hosts"][:3]
    path.write_text(tomli_w.dumps(doc))


def test_the_tutorial_runs_as_written(fleet: Fleet, tmp_path: Path) -> None:
    found = steps()
    commands = [s for s in found if isinstance(s, Command)]
    files = {s.path for s in found if isinstance(s, File)}
    assert files == {"shop/cluster.toml"}
    assert len(commands) >= 15, [c.line for c in commands]
    work = tmp_path / "checkout"
    (work / "inventory").mkdir(parents=True)
    three_hosts(fleet, work / "inventory" / "lab.toml")
    bin_dir = shim(fleet, tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIDOCK_")}
    env |= {"PATH": f"{bin_dir}:{env['PATH']}", "COLUMNS": "200"}
    (work / "tutorial.sh").write_text(script(found))
    started = time.monotonic()
    ran = subprocess.run(
        ["bash", "tutorial.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    took = time.monotonic() - started
    print(f"the tutorial ran in {took:.1f} s; its slowest commands:")
    print(slowest(found, work / "out"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for n, step in enumerate(found):
        if isinstance(step, Command):
            got = (work / "out" / str(n)).read_text().splitlines()
            for shown in step.shown:
                wanted = pattern(shown)
                assert any(wanted.fullmatch(g.strip()) for g in got), (step.line, shown, got)
    # what the page says happened, read from the fleet
    answers = (work / "load.log").read_text().splitlines()
    assert [a for a in answers if a.startswith("failed")] == [], answers
    assert {"web 5", "web 6"} <= set(answers), sorted(set(answers))
    md = Minidock(fleet, work, cluster="shop")
    md.extra_env = {"MINIDOCK_STATE": str(work / ".minidock")}
    doc = md.status()
    web = next(s for s in doc["services"] if s["name"] == "web")
    assert (web["image"], web["state"], web["healthy"]) == ("minidock-lab/web:6", "converged", 2)
    assert web["hook"]["state"] == "succeeded", web["hook"]
    job = next(s for s in doc["services"] if s["name"] == "backup")["job"]
    assert job["next"] is not None, job
    certificate = next(c for c in doc["certificates"] if c["name"] == "shop.test")
    assert certificate["issuer"].startswith("Pebble"), certificate
    assert not any(h["drained"] for h in doc["hosts"])
    db = [t for t in doc["tasks"] if t["service"] == "db" and t["state"] == "running"]
    assert [t["host"] for t in db] == ["host3"]
    printed = "".join(p.read_text() for p in (work / "out").iterdir())
    assert "correct-horse-battery" not in json.dumps(doc) + printed + ran.stdout + ran.stderr
