"""`minidock hosts check` and `hosts prepare` on the lab fleet, with faults planted inside
the hosts and taken away at the end of each test (the lab is shared): a proxy image gone,
a task port closed by the host's firewall, the user out of the docker group, an engine
older than MiniDock drives (a `docker` that reports 19.03: Debian packages none), the
engine stopped. Each is named with its fix; prepare turns the host without an engine into
one the check passes. Assertions read `--json` (docs/cli.md#hosts-check). Last, a device, a
tmpfs, /dev/shm's size and a pids limit given to a lab task, seen inside it and by the
engine (issue 44, item 5)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from minidock.commands.haproxy import NAMES_IMAGE
from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock, patient_inventory

# the firewall rule of the closed task port: the forward path a published port takes
# (Docker's DNAT, then DOCKER-USER) of what comes in from the network (eth0), as a firewall
# in front of the host would block it
CLOSED = ["DOCKER-USER", "-i", "eth0", "-p", "tcp", "--dport", "30000:30999", "-j", "REJECT"]
HIDDEN = "minidock-hidden/names:check"


def checked(md: Minidock, *args: str) -> tuple[int, dict[str, Any]]:
    res = md("hosts", "check", "--json", *args, timeout=240)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


def verdicts(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """host -> check name -> its verdict."""
    return {h["host"]: {c["check"]: c for c in h["checks"]} for h in doc["hosts"]}


def failures(doc: dict[str, Any]) -> str:
    """Every failed check, a line each (the assertion's message)."""
    return "\n".join(
        f"{h['host']}: {c['check']}: {c['found']} (fix: {c['fix']})"
        for h in doc["hosts"]
        for c in h["checks"]
        if c["ok"] is False
    )


def failed(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {
        h["host"]: [c["check"] for c in h["checks"] if c["ok"] is False]
        for h in doc["hosts"]
        if not h["ok"]
    }


def test_hosts_check_names_each_planted_fault_with_its_fix(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    inventory = patient_inventory(fleet, tmp_path / "lab.toml")
    hosts = fleet.hosts[:3]
    code, clean = checked(md, "--inventory", str(inventory), *hosts)
    assert (code, failed(clean)) == (0, {}), failures(clean)
    seen = verdicts(clean)
    assert seen["host1"]["engine"]["found"].startswith("Docker 2")
    assert seen["host1"]["task ports"]["found"].endswith("reached from 2 host(s)")

    # the user: a `deploy` user on host3 (the controller's key, no docker group, no sudo)
    as_deploy = tomllib.loads(inventory.read_text())
    for h in as_deploy["hosts"]:
        if h["name"] == "host3":
            h["user"] = "deploy"
    deploy_inventory = tmp_path / "deploy.toml"
    deploy_inventory.write_text(tomli_w.dumps(as_deploy))
    try:
        fleet.exec("host1", "docker", "tag", NAMES_IMAGE, HIDDEN, check=True)
        fleet.exec("host1", "docker", "rmi", NAMES_IMAGE, check=True)
        fleet.exec("host2", "iptables", "-I", *CLOSED, check=True)
        fleet.exec(
            "host3", "sh", "-c",
            "useradd -m -s /bin/sh deploy && mkdir -p ~deploy/.ssh && "
            "cp /root/.ssh/authorized_keys ~deploy/.ssh/ && chown -R deploy ~deploy/.ssh",
            check=True,
        )  # fmt: skip
        code, doc = checked(md, "--inventory", str(deploy_inventory), *hosts)
        assert code == 1
        seen = verdicts(doc)
        assert failed(doc)["host1"] == ["images"], doc
        images = seen["host1"]["images"]
        assert images["found"] == f"missing {NAMES_IMAGE}"
        assert f"minidock push {NAMES_IMAGE} --hosts host1" in images["fix"]
        assert failed(doc)["host2"] == ["task ports"], doc
        ports = seen["host2"]["task ports"]
        assert "not reached from host1" in ports["found"], ports
        assert ports["fix"].startswith("allow TCP 30000-30999 to ")
        assert "user" in failed(doc)["host3"], doc
        user = seen["host3"]["user"]
        assert user["found"] == "deploy is not in the docker group and may not sudo -n"
        assert "usermod -aG docker deploy" in user["fix"]
    finally:
        fleet.exec("host1", "docker", "tag", HIDDEN, NAMES_IMAGE)
        fleet.exec("host1", "docker", "rmi", HIDDEN)
        fleet.exec("host2", "iptables", "-D", *CLOSED)
        fleet.exec("host3", "userdel", "-r", "deploy")
    assert fleet.docker("host1", "image", "inspect", NAMES_IMAGE).returncode == 0
    rules = fleet.exec("host2", "iptables", "-S", "DOCKER-USER").stdout
    assert "REJECT" not in rules


# An engine older than MiniDock drives, planted: Debian ships none, so host4's `docker`
# answers `version` as Docker 19.03 would (a wrapper first on the PATH); all else is the
# host's own engine.
OLD_ENGINE = r"""#!/bin/sh
if [ "$1" = version ]; then
    /usr/bin/docker "$@" | sed 's/"Version":"20[.]10[.][^"]*"/"Version":"19.03.15"/g'
    exit
fi
exec /usr/bin/docker "$@"
"""


def test_an_old_engine_is_named_with_the_probes_refusal_and_the_upgrade(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    inventory = patient_inventory(fleet, tmp_path / "lab.toml")
    wrapper = "/usr/local/bin/docker"
    plant = f"cat > {wrapper} <<'EOF'\n{OLD_ENGINE}EOF\nchmod 755 {wrapper}"
    fleet.exec("host4", "sh", "-c", plant, check=True)
    try:
        code, doc = checked(md, "--inventory", str(inventory), "host4")
        assert code == 1
        engine = verdicts(doc)["host4"]["engine"]
        assert engine["found"] == (
            "Docker 19.03.15 refused: MiniDock needs Docker 20.10 or newer for "
            "`docker run --pull never`"
        ), engine
        assert engine["fix"].startswith("upgrade the engine to Docker 20.10 or newer")
    finally:
        fleet.exec("host4", "rm", "-f", wrapper)


def test_hosts_prepare_starts_the_engine_of_a_host_then_the_check_passes(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    """A lab host whose engine is stopped (its packages installed: a lab host reaches no
    archive): prepare starts it and says each step; a second prepare changes nothing."""
    inventory = str(patient_inventory(fleet, tmp_path / "lab.toml"))
    try:
        fleet.kill("host4", "dockerd")
        code, doc = checked(md, "--inventory", inventory, "host4")
        assert code == 1
        engine = verdicts(doc)["host4"]["engine"]
        assert engine["found"].startswith("the engine does not answer"), engine
        assert "minidock hosts prepare host4" in engine["fix"]

        first = md("hosts", "prepare", "host4", "--inventory", inventory, timeout=240)
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines()[:3] == [
            "host4: install: the engine is installed already",
            "host4: start: started the engine (dockerd started (no systemd))",
            "host4: group: root needs no docker group",
        ]
        again = md("hosts", "prepare", "host4", "--inventory", inventory, timeout=240)
        assert again.returncode == 0, again.stderr
        assert "host4: start: the engine runs already" in again.stdout
        assert f"host4: image {NAMES_IMAGE}: {NAMES_IMAGE} is on the host already" in again.stdout
        code, doc = checked(md, "--inventory", inventory, "host4")
        assert (code, failed(doc)) == (0, {}), failures(doc)
    finally:
        fleet.revive("host4")


# -- devices (issue 44, item 5) ---------------------------------------------------------------
DEVICES = f"""
[services.dev]
image = "{WEB5_IMAGE}"
constraints = ["host == host1"]
devices = ["/dev/null:/dev/mydev"]
tmpfs = ["/scratch:size=8m"]
shm_size = "32m"
pids_limit = 64
"""


def test_a_device_is_passed_to_a_lab_task_and_seen_inside_it(md: Minidock, fleet: Fleet) -> None:
    res = md("apply", str(md.spec(DEVICES)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    seen = md(
        "exec", "dev", "--", "sh", "-c",
        '[ -c /dev/mydev ] && echo char; echo written > /dev/mydev && echo writable; '
        'while read -r _ at kind _; do [ "$at" = /scratch ] && echo "$kind"; done < /proc/mounts',
    )  # fmt: skip
    assert seen.stdout.split() == ["char", "writable", "tmpfs"], seen.stderr
    names = fleet.docker("host1", "ps", "--format", "{{.Names}}").stdout.split()
    (name,) = [n for n in names if n.startswith("dev.1.")]
    shown = fleet.docker(
        "host1", "inspect", name, "--format",
        "{{json .HostConfig.Devices}} {{.HostConfig.ShmSize}} {{.HostConfig.PidsLimit}}",
    ).stdout.split()  # fmt: skip
    devices = json.loads(shown[0])
    assert [(d["PathOnHost"], d["PathInContainer"]) for d in devices] == [
        ("/dev/null", "/dev/mydev")
    ]
    assert shown[1:] == [str(32 << 20), "64"]
