"""A Compose `build:` on the real lab, with `minidock apply compose.yaml` and nothing else:
the controller builds the image FROM a lab image with its own engine, tags it by content,
pushes it over SSH only to the hosts that run it; a changed file in the build context is a
new image that rolls out, and an unchanged one builds and rolls nothing."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Fleet, Minidock

COMPOSE = """\
name: {cluster}
x-minidock:
  inventory: {inventory}
services:
  site:
    build:
      context: ./site
      args: {{PAGE: index.html}}
    healthcheck:
      test: ["CMD", "wget", "-qO-", "http://127.0.0.1:8080/"]
      interval: 1s
    deploy:
      replicas: 2
      placement:
        constraints: [node.hostname != host1]
      update_config: {{parallelism: 1, order: start-first, monitor: 1s}}
"""
DOCKERFILE = "FROM minidock-lab/web:5\nARG PAGE\nCOPY $PAGE /www/index.html\n"


@pytest.fixture
def site(md: Minidock) -> Iterator[Path]:
    folder = md.workdir / "site"
    folder.mkdir()
    (folder / "Dockerfile").write_text(DOCKERFILE)
    (folder / "index.html").write_text("built v1\n")
    (folder / ".dockerignore").write_text("notes.txt\n")
    path = md.workdir / "compose.yaml"
    path.write_text(COMPOSE.format(cluster=md.cluster, inventory=md.fleet.inventory))
    yield path
    images = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", f"{md.cluster}-site"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if images:
        subprocess.run(["docker", "rmi", "-f", *images], capture_output=True, check=False)


def pages(md: Minidock) -> set[str]:
    out = md("exec", "site.1", "--", "wget", "-qO-", "http://127.0.0.1:8080/").stdout
    out2 = md("exec", "site.2", "--", "wget", "-qO-", "http://127.0.0.1:8080/").stdout
    return {out, out2}


def host_images(fleet: Fleet, host: str, repository: str) -> list[str]:
    res = fleet.docker(host, "image", "ls", "--format", "{{.Tag}}", repository)
    return res.stdout.split()


def test_a_compose_build_is_built_pushed_and_a_changed_context_rolls_out(
    md: Minidock, fleet: Fleet, site: Path
) -> None:
    repository = f"{md.cluster}-site"
    started = time.monotonic()
    first = md("apply", str(site), "--wait", "--timeout", "120s")
    took = time.monotonic() - started
    assert first.returncode == 0, first.stdout + first.stderr
    built = re.search(rf"site: built ({repository}:[0-9a-f]{{12}}) in ([0-9.]+)s", first.stdout)
    assert built is not None, first.stdout
    tag = built[1]
    pushes = re.findall(rf"pushed {re.escape(tag)} to (host\d) \(([^)]*)\)", first.stdout)
    assert sorted(h for h, _ in pushes) == sorted({h for h, _ in pushes})
    assert "host1" not in {h for h, _ in pushes}  # never runs it: never gets it
    assert host_images(fleet, "host1", repository) == []
    assert pages(md) == {"built v1\n"}
    print(f"first apply {took:.1f}s: build {built[2]}s; pushes {pushes}")

    (site.parent / "site" / "notes.txt").write_text("ignored by .dockerignore\n")
    again = md("apply", str(site), "--wait", "--timeout", "60s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"site: {tag} is built already" in again.stdout
    assert "no changes" in again.stdout

    (site.parent / "site" / "index.html").write_text("built v2\n")
    started = time.monotonic()
    changed = md("apply", str(site), "--wait", "--timeout", "120s")
    took = time.monotonic() - started
    assert changed.returncode == 0, changed.stdout + changed.stderr
    rebuilt = re.search(rf"site: built ({repository}:[0-9a-f]{{12}}) in ([0-9.]+)s", changed.stdout)
    assert rebuilt is not None, changed.stdout
    assert rebuilt[1] != tag
    assert pages(md) == {"built v2\n"}
    print(f"changed apply {took:.1f}s: build {rebuilt[2]}s")
