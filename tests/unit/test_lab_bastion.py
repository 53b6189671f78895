"""What the lab writes for its bastion, without Docker: the SSH config and the alias-only
inventory (read back by the controller's own loader: every host through the bastion), the
known_hosts lines of both hops, the bastion's compose service and its lab.json record."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import asyncssh
import tomli_w

from minidock.lab.bastion import (
    bastion_inventory_document,
    bastion_known_hosts_text,
    ssh_config_text,
)
from minidock.lab.compose import compose_document, compose_text
from minidock.lab.directory import LabBastion, LabDir, LabHost
from minidock.model import Jump
from minidock.spec import load_inventory

HOSTS = [LabHost("host1", 23001, "a", "p-host1"), LabHost("host2", 23002, "b", "p-host2")]
BASTION = LabBastion(23009, "p-bastion")


def public_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()


def test_the_inventory_names_only_aliases_and_reaches_them_through_the_bastion(
    tmp_path: Path,
) -> None:
    lab = LabDir(tmp_path, "p")
    lab.lab_dir.mkdir()
    lab.ssh_config_path.write_text(
        ssh_config_text(BASTION, HOSTS, key=lab.key_path, known_hosts=lab.known_hosts_path)
    )
    lab.ssh_config_path.chmod(0o600)
    document = bastion_inventory_document(HOSTS, ssh_config="../.lab/ssh_config")
    assert all(set(h) == {"name", "labels", "cpus", "memory"} for h in document["hosts"])
    lab.bastion_inventory_path.parent.mkdir()
    lab.bastion_inventory_path.write_text(tomli_w.dumps(document))
    assert tomllib.loads(lab.bastion_inventory_path.read_text()) == document
    hosts = load_inventory(lab.bastion_inventory_path).hosts
    jump = Jump(
        "127.0.0.1",
        23009,
        "root",
        identity_files=(str(lab.key_path),),
        known_hosts=str(lab.known_hosts_path),
    )
    assert [(h.name, h.address, h.port, h.user) for h in hosts] == [
        ("host1", "p-host1", 22, "root"),
        ("host2", "p-host2", 22, "root"),
    ]
    assert all(h.proxy_jump == (jump,) for h in hosts)
    assert all(h.identity_files == (str(lab.key_path),) for h in hosts)
    assert all(h.known_hosts == str(lab.known_hosts_path) for h in hosts)


def test_known_hosts_pin_the_bastion_at_loopback_and_hosts_by_container_name() -> None:
    keys = {h.name: public_key() for h in HOSTS}
    bastion_key = public_key()
    lines = bastion_known_hosts_text(BASTION, bastion_key, HOSTS, keys).splitlines()
    assert [line.split()[0] for line in lines] == ["[127.0.0.1]:23009", "p-host1", "p-host2"]
    assert lines[0].split()[1:] == bastion_key.split()[:2]
    assert lines[2].split()[1:] == keys["host2"].split()[:2]


def test_the_bastion_is_an_sshd_only_service_published_on_loopback() -> None:
    document = compose_document("p", HOSTS, "minidock-lab/host:x", "caps", {"x": "1"}, BASTION)
    bastion = json.loads(compose_text(document))["services"]["bastion"]
    assert bastion["container_name"] == "p-bastion"
    assert bastion["ports"] == ["127.0.0.1:23009:22"]
    assert bastion["labels"] == {"minidock.lab": "p", "minidock.lab.bastion": "bastion", "x": "1"}
    commands = [line for line in bastion["entrypoint"][2].splitlines() if line[:1] != "#"]
    assert any("/usr/sbin/sshd" in line for line in commands)
    assert not any("dockerd" in line for line in commands)
    assert "cap_add" not in bastion
    assert "volumes" not in bastion
    assert "bastion" not in compose_document("p", HOSTS, "img", "caps", {})["services"]


def test_lab_json_records_the_bastion(tmp_path: Path) -> None:
    lab = LabDir(tmp_path, "p")
    lab.write_state(HOSTS, "caps", "img")
    assert lab.bastion() is None
    lab.write_state(HOSTS, "caps", "img", BASTION)
    assert lab.bastion() == BASTION
    assert lab.container("bastion") == "p-bastion"
    assert lab.container("host2") == "p-host2"
    assert LabDir(tmp_path, "q").bastion() is None
