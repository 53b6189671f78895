"""The lab's side of the ingress (docs/lab.md, docs/ingress.md): each host's ports 80 and
443 published on loopback, `lab status --json` (with the lab's ACME server), every host
reaching the others on their private addresses, and the proxy image under its default
name on every host."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from minidock.lab import WEB5_IMAGE, lab_app
from minidock.lab.images import PROXY_IMAGE

if TYPE_CHECKING:
    from conftest import Fleet

pytestmark = pytest.mark.integration

SMOKE = "minidock.cluster=smoke"  # the fleet fixture removes containers with this label key


def lab_status(fleet: Fleet) -> dict[str, object]:
    base = ["--root", str(fleet.lab.root), "--project", fleet.lab.project]
    result = CliRunner().invoke(lab_app, [*base, "status", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert isinstance(document, dict)
    return document


def test_status_json_names_each_hosts_ports_and_private_address(fleet: Fleet) -> None:
    document = lab_status(fleet)
    acme = document["acme"]  # the lab's Pebble (docs/lab.md#the-acme-server)
    assert isinstance(acme, dict)
    assert acme["directory"].startswith("https://127.0.0.1:")
    assert acme["directory"].endswith("/dir")
    root = Path(acme["ca_root"]).read_text()
    assert root.count("BEGIN CERTIFICATE") == 2  # the lab's root and Pebble's issuing root
    with urllib.request.urlopen(  # the directory answers over HTTPS that ca_root verifies
        acme["directory"], context=ssl.create_default_context(cadata=root), timeout=30
    ) as answer:
        assert "newOrder" in json.loads(answer.read())
    hosts = document["hosts"]
    assert isinstance(hosts, list)
    assert [h["name"] for h in hosts] == fleet.hosts
    ports: set[int] = set()
    for h in hosts:
        assert {"name", "ssh_port", "http_port", "https_port", "private_address"} <= set(h)
        assert h["ssh_port"] == fleet.port(h["name"])
        ports |= {h["ssh_port"], h["http_port"], h["https_port"]}
        assert (h["ssh"], h["docker"]) == (True, True), h
    assert len(ports) == 3 * len(hosts)  # every port its own
    assert len({h["private_address"] for h in hosts}) == len(hosts)


def test_port_80_of_a_host_is_reached_on_its_loopback_port(fleet: Fleet) -> None:
    host = lab_status(fleet)["hosts"][0]  # type: ignore[index]
    name = host["name"]
    fleet.docker(
        name,
        "run",
        "-d",
        "--name",
        "smoke-80",
        "--label",
        SMOKE,
        "-p",
        "80:8080",
        WEB5_IMAGE,
        check=True,
    )
    fleet.docker(
        name,
        "exec",
        "smoke-80",
        "sh",
        "-c",
        "until wget -qO- http://127.0.0.1:8080/; do sleep 0.1; done",
        check=True,
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{host['http_port']}/", timeout=5) as reply:
        assert reply.read() == b"web 5\n"


def test_hosts_reach_each_other_on_private_addresses(fleet: Fleet) -> None:
    first, second = lab_status(fleet)["hosts"][:2]  # type: ignore[index]
    fleet.docker(
        second["name"],
        "run",
        "-d",
        "--name",
        "smoke-private",
        "--label",
        SMOKE,
        "-p",
        f"{second['private_address']}:28080:8080",
        WEB5_IMAGE,
        check=True,
    )
    url = f"http://{second['private_address']}:28080/"
    script = f"for i in 1 2 3 4 5 6 7 8 9 10; do wget -qO- {url} && exit 0; sleep 0.5; done; exit 1"
    page = fleet.docker(
        first["name"], "run", "--rm", "--label", SMOKE, WEB5_IMAGE, "sh", "-c", script, check=True
    ).stdout
    assert page == "web 5\n"


def test_the_proxy_image_is_on_every_host_under_its_default_name(fleet: Fleet) -> None:
    for name in fleet.hosts:
        version = fleet.docker(
            name, "run", "--rm", "--label", SMOKE, PROXY_IMAGE, "caddy", "version", check=True
        ).stdout
        assert version.lstrip("v").startswith("2."), (name, version)  # Debian's: "2.6.2"


def test_a_host_started_on_another_address_is_readdressed(fleet: Fleet) -> None:
    """While host2 is stopped another container takes its address; once revived, host2 has
    a new one, and lab status and the inventory's private_address follow it."""
    import subprocess

    from minidock.lab.images import host_image_tag

    old = fleet.lab.host("host2").private_address
    fleet.kill("host2", "stop")
    network = f"{fleet.lab.project}_default"
    grabbers: list[str] = []
    taken = ""
    while taken != old and len(grabbers) < 8:  # containers on the network until one has it
        grabbers.append(f"{fleet.lab.project}-grabber{len(grabbers)}")
        subprocess.run(
            ["docker", "run", "-d", "--rm", "--name", grabbers[-1], "--network", network,
             "--entrypoint", "sleep", host_image_tag(), "600"],
            check=True, capture_output=True,
        )  # fmt: skip
        taken = subprocess.run(
            ["docker", "inspect", "-f",
             "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", grabbers[-1]],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    try:
        assert taken == old  # the fault is made: host2's address is held by another
        fleet.revive("host2")
        now = next(h for h in lab_status(fleet)["hosts"] if h["name"] == "host2")  # type: ignore[attr-defined]
        actual = subprocess.run(
            ["docker", "inspect", "-f",
             "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
             fleet.lab.host("host2").container],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert now["private_address"] == actual
        assert f'private_address = "{actual}"' in fleet.inventory.read_text()
        assert actual != old
    finally:
        subprocess.run(["docker", "rm", "-f", *grabbers], capture_output=True, check=False)
