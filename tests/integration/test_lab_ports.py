"""Labs side by side on one engine never choose the same loopback port (the stop of
2026-12-05 failed CI on "Bind for 127.0.0.1:29411 failed: port is already allocated"): a
port another container publishes is never chosen, even while that container is stopped
and its port unbound. The real engine, a real stopped container."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from minidock.lab import Lab, images, remove_project
from minidock.lab.ports import port_free, published_elsewhere
from tests.integration.conftest import PROJECT_PREFIX, ours

if TYPE_CHECKING:
    from conftest import Fleet


def test_a_stopped_containers_port_is_never_chosen_though_nothing_listens_on_it(
    fleet: Fleet,
) -> None:
    project = f"{PROJECT_PREFIX}{os.getpid()}-ports"
    own = published_elsewhere(fleet.lab.project)
    lab_ports = {h.port for h in fleet.lab.hosts()}
    assert not lab_ports & own  # the lab's own ports are its own to keep
    assert lab_ports <= published_elsewhere(project)  # and taboo to any other lab
    port = next(p for p in range(29990, 29000, -1) if port_free(p) and p not in own)
    try:
        subprocess.run(
            [
                "docker", "create", "--label", f"com.docker.compose.project={project}",
                "-p", f"127.0.0.1:{port}:22", images.host_image_tag(),
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        assert port_free(port)  # created, never started: nothing holds the port
        assert port in published_elsewhere(fleet.lab.project)
        assert port not in published_elsewhere(project)
    finally:
        remove_project(project)


def test_a_prepared_labs_ports_are_taken_before_it_starts(lab_fleet: Fleet, tmp_path: Path) -> None:
    """`Lab.prepare` (the tests' labs, which pytest-docker starts later) creates its
    containers before it lets the port lock go: a lab choosing next finds each of their
    ports taken, though none is bound yet. Let go before they existed, another lab could
    pick one of them and start first, and a host of this one would never start (the stop
    of 2026-12-06: "Bind for 127.0.0.1:23916 failed: port is already allocated", every
    test of that worker in error)."""
    project = f"{PROJECT_PREFIX}{os.getpid()}-prepared"
    lab = Lab(tmp_path, project=project, labels=ours())
    try:
        lab.prepare(1, sets=())
        ports = {p for h in lab.hosts() for p in (h.port, h.http_port, h.https_port) if p}
        assert ports
        assert all(port_free(p) for p in ports)  # created, not started
        assert ports <= published_elsewhere(lab_fleet.lab.project)
    finally:
        remove_project(project)
