"""Lab host kinds (`lab up --kinds`): other engines and users from Debian's packages, each
an image cached by its recipe; the default lab stays as it was. Without Docker."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from minidock.lab.compose import PROC_SYS_RW, compose_document
from minidock.lab.containers import answers
from minidock.lab.directory import LabDir, LabHost
from minidock.lab.errors import BadInputError
from minidock.lab.faults import ENGINE_SOCKET_DIR, START_DOCKERD
from minidock.lab.images import (
    DEFAULT_KIND,
    data,
    host_image_tag,
    host_recipe,
    kind_image_tag,
    kind_recipe,
    parse_kinds,
)
from minidock.spec import load_inventory

KINDS = ("trixie", "trixie-sudo", "sid", "podman")


def hosts(*kinds: str) -> list[LabHost]:
    return [
        LabHost(f"host{i}", 23000 + i, "a", f"p-host{i}", kind=kind)
        for i, kind in enumerate(kinds, 1)
    ]


def test_kinds_are_given_per_host_in_order_the_rest_bookworm() -> None:
    assert parse_kinds("trixie,podman", 3) == ("trixie", "podman", DEFAULT_KIND)
    with pytest.raises(BadInputError, match=r"--kinds: unknown host kind 'fedora': use some of"):
        parse_kinds("fedora", 3)
    with pytest.raises(BadInputError, match="--kinds: 2 kinds for 1 hosts"):
        parse_kinds("sid,sid", 1)


def test_the_default_kind_is_the_host_image_as_it_was() -> None:
    assert kind_recipe(DEFAULT_KIND) == host_recipe()
    assert kind_image_tag(DEFAULT_KIND) == host_image_tag()
    plain = compose_document("p", hosts(DEFAULT_KIND), "minidock-lab/host:x", "caps", {})
    service = plain["services"]["host1"]
    assert service["image"] == "minidock-lab/host:x"
    assert service["entrypoint"][2] == data("host-init.sh").decode()
    assert service["volumes"][0] == "host1-docker:/var/lib/docker"


def test_each_kind_is_its_suites_packages_cached_by_recipe() -> None:
    trixie, _, sid, podman = (kind_recipe(k) for k in KINDS)
    assert kind_recipe("trixie-sudo") == trixie  # one image, two users
    assert kind_image_tag("trixie-sudo") == kind_image_tag("trixie")
    assert trixie[1][-2:] == ["trixie", "-"]
    assert "docker-cli" in trixie[1][3]  # Debian 13's docker.io has no docker command alone
    assert 'Acquire::Check-Valid-Until "false"' in " ".join(sid[1])
    assert "podman-docker" in podman[1][3]
    assert set(podman[2]) == {"sshd_config", "containers.conf", "storage.conf"}
    assert len({trixie[0], sid[0], podman[0], host_recipe()[0]}) == 4


def test_a_kinds_host_runs_its_image_with_what_its_engine_needs() -> None:
    document = compose_document("p", hosts(*KINDS), "minidock-lab/host:x", "caps", {})
    services = document["services"]
    assert services["host1"]["image"] == kind_image_tag("trixie")
    assert all(s["entrypoint"][2].startswith(PROC_SYS_RW) for s in services.values())
    podman = services["host4"]
    assert podman["volumes"][0] == "host4-docker:/var/lib/containers"
    assert "setsid dockerd" not in podman["entrypoint"][2]  # no daemon: Podman has none
    assert "setsid dockerd" in services["host3"]["entrypoint"][2]


def test_the_inventory_reaches_each_kind_as_its_user(tmp_path: Path) -> None:
    lab = LabDir(tmp_path, "p")
    lab.write_inventory(hosts(DEFAULT_KIND, *KINDS))
    found = [(h.user, h.sudo) for h in load_inventory(lab.inventory_path).hosts]
    assert found == [
        ("root", False),
        ("deploy", False),  # in the docker group
        ("sudoer", True),  # docker through sudo -n
        ("deploy", False),
        ("root", False),  # rootful Podman
    ]


def test_lab_json_keeps_each_hosts_kind(tmp_path: Path) -> None:
    lab = LabDir(tmp_path, "p")
    lab.write_state(hosts(*KINDS), "caps", "img")
    assert [h.kind for h in LabDir(tmp_path, "p").hosts()] == list(KINDS)


def test_a_docker_hosts_engine_socket_is_bound_to_the_lab_directory(tmp_path: Path) -> None:
    """Each Docker host's dockerd listens on a second socket, bound to .lab/engines/HOST
    (Lab.docker's way in without `docker exec`); a Podman host has no daemon to bind, and
    PID 1 and a revived dockerd start it alike."""
    engines = tmp_path / "engines"
    document = compose_document(
        "p", hosts(DEFAULT_KIND, "podman"), "minidock-lab/host:x", "caps", {}, engines=engines
    )
    docker_host, podman = document["services"]["host1"], document["services"]["host2"]
    assert f"{engines / 'host1'}:{ENGINE_SOCKET_DIR}" in docker_host["volumes"]
    assert not any(ENGINE_SOCKET_DIR in v for v in podman["volumes"])
    assert START_DOCKERD in docker_host["entrypoint"][2]
    assert f"unix://{ENGINE_SOCKET_DIR}/docker.sock" in START_DOCKERD


def _server(path: Path, reply: bytes | None) -> socket.socket:
    """A Unix socket listening at `path` that answers each connection with `reply` (None:
    accepts nothing, as a paused host's dockerd)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    if reply is not None:

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(reply)

        threading.Thread(target=serve, daemon=True).start()
    return server


def test_only_an_engine_that_answers_a_ping_is_used(tmp_path: Path) -> None:
    assert not answers(tmp_path / "absent.sock")
    with _server(tmp_path / "up.sock", b"HTTP/1.1 200 OK\r\n\r\nOK"):
        assert answers(tmp_path / "up.sock")
    with _server(tmp_path / "frozen.sock", None):  # connects, never answers
        assert not answers(tmp_path / "frozen.sock", timeout=0.2)
    with _server(tmp_path / "other.sock", b"SSH-2.0-x\r\n"):
        assert not answers(tmp_path / "other.sock")
    stale = tmp_path / "stale.sock"
    _server(stale, None).close()  # the file stays, nothing listens: refused
    assert stale.exists()
    assert not answers(stale)
