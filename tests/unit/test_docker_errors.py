"""Docker's errors, read by the named parsers in minidock.commands from real stderr
(tests/data/docker/errors/, recorded by record_errors.py there), and the act path reading
them: a taken host port fails the start with its cause, never an adoption."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minidock.act.acts import first_line
from minidock.commands.errors import (
    DaemonDown,
    ImageNotFound,
    NameConflict,
    NoSuchNetwork,
    PortTaken,
    daemon_down,
    docker_error,
    image_not_found,
    name_conflict,
    no_such_network,
    port_taken,
)
from minidock.model import PortMapping
from minidock.ssh import Result
from tests.sim import RunnerWorld, hosts, svc

ERRORS = Path(__file__).parent.parent / "data" / "docker" / "errors"
CASES: dict[str, int] = json.loads((ERRORS / "cases.json").read_text())


def stderr(name: str) -> str:
    return (ERRORS / f"{name}.stderr").read_text()


EXPECTED: dict[str, Any] = {
    "name-conflict": NameConflict(
        "web.1.e1name",
        'Conflict. The container name "/web.1.e1name" is already in use by container '
        '"60839cde7ddf36d80fa74b6b97671f5aec9f6f32a5bf777a8c7e4959ace0d08c"',
    ),
    "port-allocated": PortTaken(
        "127.0.0.1:55081", True, "Bind for 127.0.0.1:55081 failed: port is already allocated"
    ),
    "address-in-use": PortTaken(
        "127.0.0.1:42563", False, "listen tcp4 127.0.0.1:42563: bind: address already in use"
    ),
    "run-image-not-found": ImageNotFound("rec/absent:1", False, "No such image: rec/absent:1"),
    "image-inspect-not-found": ImageNotFound("rec/absent:1", False, "No such image: rec/absent:1"),
    "pull-not-found": ImageNotFound(
        "127.0.0.1:47299/rec/absent:1",
        True,
        "manifest for 127.0.0.1:47299/rec/absent:1 not found: manifest unknown: manifest unknown",
    ),
    "pull-unreachable": None,  # the registry does not answer: not a missing image
    "network-connect-no-such-network": NoSuchNetwork("rec-absent", "network rec-absent not found"),
    "run-no-such-network": NoSuchNetwork("rec-absent", "network rec-absent not found"),
    "daemon-down": DaemonDown(
        "unix:///tmp/rec-nodaemon-xngehhx7/docker.sock",
        "Cannot connect to the Docker daemon at unix:///tmp/rec-nodaemon-xngehhx7/docker.sock."
        " Is the docker daemon running?",
    ),
}
PARSERS = {
    NameConflict: name_conflict,
    PortTaken: port_taken,
    ImageNotFound: image_not_found,
    NoSuchNetwork: no_such_network,
    DaemonDown: daemon_down,
}


def test_every_recording_has_its_expectation() -> None:
    assert sorted(EXPECTED) == sorted(CASES)
    assert all(code != 0 for code in CASES.values())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_recorded_error_is_read_by_its_parser_and_no_other(case: str) -> None:
    text, want = stderr(case), EXPECTED[case]
    assert docker_error(text) == want
    for kind, parser in PARSERS.items():
        if want is not None and kind is type(want):
            assert parser(text) == want
        else:
            assert parser(text) is None, (kind.__name__, case)


def test_address_already_in_use_is_a_taken_port_not_the_name_conflict() -> None:
    """Issue 19 item 5: both texts say "already in use"; only one is the name conflict."""
    text = stderr("address-in-use")
    assert "already in use" in text
    assert name_conflict(text) is None
    assert docker_error(text) == EXPECTED["address-in-use"]


def test_pull_access_denied_from_docker_hub_is_an_image_not_in_its_registry() -> None:
    """Docker Hub's answer for a repository that does not exist (moby's words; Hub is not
    reachable from here to record it)."""
    text = (
        "Error response from daemon: pull access denied for acme/absent, repository does "
        "not exist or may require 'docker login': denied: requested access to the resource "
        "is denied\n"
    )
    assert docker_error(text) == ImageNotFound(
        "acme/absent",
        True,
        "pull access denied for acme/absent, repository does not exist or may require "
        "'docker login'",
    )


@pytest.mark.parametrize(
    ("case", "line"),
    [
        (
            "port-allocated",
            "host port 127.0.0.1:55081 is taken by another container "
            "(Bind for 127.0.0.1:55081 failed: port is already allocated)",
        ),
        (
            "address-in-use",
            "host port 127.0.0.1:42563 is taken by a process outside Docker "
            "(listen tcp4 127.0.0.1:42563: bind: address already in use)",
        ),
        (
            "daemon-down",
            "the Docker daemon is not running (nothing answers at "
            "unix:///tmp/rec-nodaemon-xngehhx7/docker.sock) (Cannot connect to the Docker "
            "daemon at unix:///tmp/rec-nodaemon-xngehhx7/docker.sock. Is the docker daemon "
            "running?)",
        ),
        (
            "pull-unreachable",
            'Error response from daemon: Get "http://127.0.0.1:54837/v2/": dial tcp '
            "127.0.0.1:54837: connect: connection refused",
        ),
    ],
)
def test_an_act_failure_says_the_named_cause_in_dockers_words(case: str, line: str) -> None:
    assert first_line(Result(CASES[case], "", stderr(case))) == line


def test_a_host_port_taken_after_the_probe_fails_the_start_with_its_cause(
    tmp_path: Path,
) -> None:
    """Issue 19 item 5: "address already in use" was read as the name conflict and the
    start recorded as an adoption. Now the start fails with the port's cause, counts as a
    failed attempt, and the next start avoids that host."""
    world = RunnerWorld(hosts(3), tmp_path / "state")
    try:
        world.apply(svc(ports=(PortMapping(8080, 8080),)))
        (first,) = world.plan().run
        world.docker.held[first.host] = {"8080/tcp"}  # taken after the probe looked
        world.step()
        kinds = [e.kind for e in world.events()]
        assert "adopt" not in kinds
        (failed,) = [e for e in world.events() if e.kind == "act-failed"]
        assert failed.host == first.host
        assert (
            "host port 0.0.0.0:8080 is taken by a process outside Docker (listen tcp4 "
            "0.0.0.0:8080: bind: address already in use)" in failed.message
        )
        slot = world.state.services["web"].slot(1)
        assert slot.avoid == first.host
        assert slot.last_exit.endswith("bind: address already in use)")
        for _ in range(5):
            world.step()
        placed = {h: world.docker.names(h, status="running") for h in world.docker.engines}
        (where,) = [h for h, names in placed.items() if names]
        assert where != first.host
        assert placed[where][0].startswith("web.1.")
    finally:
        world.close()
