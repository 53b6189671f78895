"""The one canonical operator set-up (docs/operations.md), run as documented: the cron line
under `env -i` (cron's empty environment) against the lab fleet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Minidock

DOCS = Path(__file__).parents[2] / "docs" / "operations.md"
DOC_STATE = "/var/lib/minidock"
DOC_BINARY = "/opt/minidock/.venv/bin/minidock"


def documented(marker: str) -> str:
    found = re.search(
        rf"<!-- {marker} -->\n```\w+\n(.*?)```\n<!-- /{marker} -->", DOCS.read_text(), re.S
    )
    assert found is not None, f"docs/operations.md lost its {marker} block"
    return found[1].strip()


def test_the_documented_cron_line_runs_under_cron_s_empty_environment(md: Minidock) -> None:
    res = md("apply", str(md.spec('[services.web]\nimage = "minidock-lab/web:5"\n')), "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    schedule_and_command = documented("cron-line").split()
    command = " ".join(schedule_and_command[5:])  # after the five schedule fields
    binary = str(Path(sys.executable).parent / "minidock")
    command = command.replace(DOC_STATE, str(md.state)).replace(DOC_BINARY, binary)
    assert command == f"MINIDOCK_STATE={md.state} {binary} reconcile"
    ran = subprocess.run(
        ["env", "-i", "/bin/sh", "-c", command], capture_output=True, text=True, timeout=120
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")  # converged: quiet
    md.fleet.kill(md.tasks("web")[0]["host"], "stop")
    ran = subprocess.run(
        ["env", "-i", "/bin/sh", "-c", command], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 3  # one failed probe: progressing, and it says so in one line
    assert ran.stderr.startswith("minidock: not converged: ")


def test_the_systemd_unit_runs_what_the_cron_line_runs() -> None:
    cron = " ".join(documented("cron-line").split()[5:])
    unit = documented("systemd-service")
    assert f"ExecStart={DOC_BINARY} reconcile" in unit
    assert f"Environment=MINIDOCK_STATE={DOC_STATE}" in unit
    assert cron == f"MINIDOCK_STATE={DOC_STATE} {DOC_BINARY} reconcile"
    assert "User=minidock" in unit
