"""Secret sources on the real lab (docs/secrets.md): a value from a stand-in password-manager
CLI and one from a real age file reach the task's environment on its host, and appear in
no output, label or state file; a value rotated in the manager is named by `secrets check`
(exit 1) and rolls the service out once at the next apply."""

from __future__ import annotations

import json
import os
import subprocess

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock

DB_PASSWORD, ROTATED, API_TOKEN = "vault-pw-8c1d", "vault-pw-9e2f", "age-token-3b7a"
SPEC = f"""
[services.api]
image = "{WEB5_IMAGE}"
constraints = ["host == host1"]
[services.api.secrets]
DB_PASSWORD = {{ command = ["op", "read", "op://prod/db/password"] }}
API_TOKEN = {{ age_file = "prod.age", key = "API_TOKEN", identity = "key.txt" }}
"""


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _sources(md: Minidock) -> None:
    """A stand-in `op` on PATH printing workdir/value; an age identity and prod.age."""
    bin_dir = md.workdir / "bin"
    bin_dir.mkdir()
    op = bin_dir / "op"
    reads = '[ "$1 $2" = "read op://prod/db/password" ]'
    op.write_text(f'#!/bin/sh\n{reads} && cat "{md.workdir}/value"\n')
    op.chmod(0o700)
    md.extra_env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    (md.workdir / "value").write_text(DB_PASSWORD + "\n")
    key = md.workdir / "key.txt"
    subprocess.run(["age-keygen", "-o", str(key)], capture_output=True, check=True, timeout=60)
    key.chmod(0o600)
    subprocess.run(
        ["age", "-e", "-i", str(key), "-o", str(md.workdir / "prod.age")],
        input=f"API_TOKEN={API_TOKEN}\n",
        text=True,
        check=True,
        timeout=60,
    )


def _task(fleet: Fleet) -> dict[str, object]:
    names = ok(fleet.docker("host1", "ps", "--format", "{{.Names}}")).split()
    (name,) = [n for n in names if n.startswith("api.1.")]
    doc: list[dict[str, object]] = json.loads(ok(fleet.docker("host1", "inspect", name)))
    return doc[0]


def _env(task: dict[str, object]) -> list[str]:
    config = task["Config"]
    assert isinstance(config, dict)
    return list(config["Env"])


def test_command_and_age_values_reach_the_task_and_nothing_else(md: Minidock, fleet: Fleet) -> None:
    _sources(md)
    spec = md.spec(SPEC)
    applied = md("apply", str(spec), "--wait", "--timeout", "120s")
    ok(applied)
    task = _task(fleet)
    env = _env(task)
    assert f"DB_PASSWORD={DB_PASSWORD}" in env
    assert f"API_TOKEN={API_TOKEN}" in env
    shown = applied.stdout + applied.stderr + json.dumps(md.status())
    shown += json.dumps(task["Config"]["Labels"])  # type: ignore[index]
    state = b"".join(p.read_bytes() for p in md.state.rglob("state.db*") if p.is_file())
    for value in (DB_PASSWORD, API_TOKEN):
        assert value not in shown
        assert value.encode() not in state
    checked = md("secrets", "check", str(spec))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout == "api: every running task holds the current values\n"

    (md.workdir / "value").write_text(ROTATED + "\n")  # rotated in the manager
    stale = md("secrets", "check", str(spec))
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert stale.stdout.startswith("api: 1 of 1 running task holds an older DB_PASSWORD")
    assert ROTATED not in stale.stdout
    assert DB_PASSWORD not in stale.stdout
    ok(md("apply", str(spec), "--wait", "--timeout", "120s"))
    rolled = _task(fleet)
    assert rolled["Id"] != task["Id"]
    assert f"DB_PASSWORD={ROTATED}" in _env(rolled)
    ok(md("apply", str(spec), "--wait", "--timeout", "120s"))
    assert _task(fleet)["Id"] == rolled["Id"]  # once: the same value again restarts nothing
    assert md("secrets", "check", str(spec)).returncode == 0
