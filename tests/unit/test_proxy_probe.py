"""The ingress proxy's probe script (minidock.commands.caddy.proxy_probe_argv) run by a real shell
against a stand-in `docker` that answers as each engine does for a container that is not
there: either engine's answer is a missing proxy (to be started), never a failed probe."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from minidock.commands.caddy import parse_proxy_probe, proxy_probe_argv

ABSENT = {
    "docker": "Error: No such object: minidock-ingress-shop",
    "podman": 'Error: no such object: "minidock-ingress-shop"',  # Podman 5.4's words
}


@pytest.mark.parametrize("engine", sorted(ABSENT))
def test_a_proxy_absent_on_either_engine_is_missing_not_a_failed_probe(
    engine: str, tmp_path: Path
) -> None:
    docker = tmp_path / "docker"
    docker.write_text(f"#!/bin/sh\necho '{ABSENT[engine]}' >&2\nexit 1\n")
    docker.chmod(0o755)
    ran = subprocess.run(
        proxy_probe_argv("shop"), env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (ran.returncode, ran.stdout.strip()) == (0, "missing"), ran.stderr
    seen = parse_proxy_probe("host1", ran.stdout)
    assert seen.ok
    assert not seen.running  # to be started
