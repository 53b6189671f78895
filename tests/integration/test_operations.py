"""The one canonical operator set-up (docs/operations.md), run as documented: the cron line
under `env -i` (cron's empty environment) against the lab fleet, and the whole set-up from
an empty machine (user, directories, a wheel of this checkout installed with pipx into the
system's Python) as a user of its own, through a first plan, apply and cron pass, to the
state's backup restored on a second controller whose first pass changes nothing."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from minidock import __version__
from tests.integration.conftest import Fleet, Minidock

DOCS = Path(__file__).parents[2] / "docs" / "operations.md"
DOC_STATE = "/var/lib/minidock"
DOC_BINARY = "/opt/minidock/bin/minidock"


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


COUNTED = "/usr/local/bin/docker"  # before /usr/bin on an SSH session's PATH
RUNS = "/tmp/docker-runs"
COUNTING = f"""cat > {COUNTED} <<'EOF'
#!/bin/sh
echo "$*" >> {RUNS}
exec /usr/bin/docker "$@"
EOF
chmod +x {COUNTED}"""


def test_cron_passes_take_the_engine_from_the_state_and_read_it_after_a_failed_probe(
    md: Minidock, fleet: Fleet
) -> None:
    """Each cron pass is a new process: the engine a pass recorded stands for the next
    passes' `docker version` on the host (docs/hosts.md, "Engines"), and a failed probe
    (host1's dockerd killed) has the pass after it read the engine again. Counted on host1
    by a `docker` ahead of the real one on its PATH that logs each run."""
    res = md("apply", str(md.spec("")))
    assert res.returncode == 0, res.stdout + res.stderr
    fleet.exec("host1", "sh", "-c", COUNTING, check=True)

    def host1_runs(*args: str) -> list[str]:
        fleet.exec("host1", "rm", "-f", RUNS, check=True)
        md(*args)
        return fleet.exec("host1", "cat", RUNS).stdout.splitlines()

    try:
        for verb in ("reconcile", "reconcile", "ps"):
            runs = host1_runs(verb)
            assert any(r.startswith("ps ") for r in runs), runs  # host1 probed, counted
            assert not [r for r in runs if r.startswith("version ")], (verb, runs)
        fleet.kill("host1", "dockerd")
        assert md("reconcile").returncode != 0  # host1's probe failed
        fleet.revive("host1")
        versions = [r for r in host1_runs("reconcile") if r.startswith("version ")]
        assert len(versions) == 1, versions
        assert not [r for r in host1_runs("reconcile") if r.startswith("version ")]
    finally:
        fleet.exec("host1", "rm", "-f", COUNTED, RUNS)


def test_the_systemd_unit_runs_what_the_cron_line_runs() -> None:
    cron = " ".join(documented("cron-line").split()[5:])
    unit = documented("systemd-service")
    assert f"ExecStart={DOC_BINARY} reconcile" in unit
    assert f"Environment=MINIDOCK_STATE={DOC_STATE}" in unit
    assert cron == f"MINIDOCK_STATE={DOC_STATE} {DOC_BINARY} reconcile"
    assert "User=minidock" in unit


# -- the set-up from an empty machine (issue 27), as a user of its own --------------------------
DOC_PATHS = {  # the documented paths, and where under the test's root each goes
    "/opt/minidock": "opt",
    "/var/lib/minidock": "state",
    "/etc/minidock": "etc",
    "/home/minidock": "home",
}
DOC_WHEEL = f"/tmp/minidock-{__version__}-py3-none-any.whl"
REPO = Path(__file__).parents[2]


@dataclass(frozen=True)
class Machine:
    """Where the documented set-up goes: the test's root (its paths under it, readable by
    the new user: not pytest's tmp_path, which is root's alone) and the user's name."""

    root: Path
    user: str

    def line(self, command: str) -> str:
        """A documented line with this machine's paths, user and wheel."""
        command = command.replace(DOC_WHEEL, str(self.root / Path(DOC_WHEEL).name))
        for doc, here in DOC_PATHS.items():
            command = command.replace(doc, str(self.root / here))
        command = re.sub(r"(?<=-[ugo] )minidock\b", self.user, command)
        return re.sub(r"(?<=useradd )(.*) minidock$", rf"\1 {self.user}", command)

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """A documented `$ ...` line, under `env -i` as cron would start it: this machine
        has no sudo, and the test is root, so `sudo -u U CMD` is runuser's and `sudo CMD`
        is CMD itself."""
        words = shlex.split(self.line(command))
        if words[:2] == ["sudo", "-u"]:
            words = ["/usr/sbin/runuser", "-u", words[2], "--", "/usr/bin/env", *words[3:]]
        elif words[:1] == ["sudo"]:
            words = words[1:]
        return subprocess.run(  # HOME: pip's cache, for pipx's install of the dependencies
            ["env", "-i", "PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", *words],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )


@pytest.fixture
def machine() -> Iterator[Machine]:
    root = Path(tempfile.mkdtemp(prefix="md-ops-", dir="/tmp"))
    root.chmod(0o755)
    made = Machine(root, f"mdops{os.getpid()}")
    built = subprocess.run(  # the wheel the docs have the operator copy to the controller
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (root / Path(DOC_WHEEL).name).is_file(), sorted(p.name for p in root.iterdir())
    try:
        yield made
    finally:
        subprocess.run(["/usr/sbin/userdel", made.user], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def console_lines(marker: str) -> list[str]:
    """The `$ ` commands of a documented console block."""
    return [line[2:] for line in documented(marker).splitlines() if line.startswith("$ ")]


def give_the_lab(machine: Machine, fleet: Fleet) -> None:
    """What the docs leave to the operator (the user's key and known_hosts, the files in
    /etc/minidock): the lab's key and pinned keys, an inventory of the lab and a spec."""
    account = pwd.getpwnam(machine.user)
    ssh = machine.root / "home" / ".ssh"
    ssh.mkdir(mode=0o700)
    shutil.copy(fleet.lab.key_path, ssh / "id_ed25519")
    shutil.copy(fleet.lab.known_hosts_path, ssh / "known_hosts")
    for path in (ssh, *ssh.iterdir()):
        os.chown(path, account.pw_uid, account.pw_gid)
    (ssh / "id_ed25519").chmod(0o600)
    inventory = tomllib.loads(fleet.inventory.read_text())
    inventory["defaults"] |= {
        "identity_file": str(ssh / "id_ed25519"),
        "known_hosts": str(ssh / "known_hosts"),
        # this machine's load (eight sessions' tests on two cores) is no fault to detect
        "connect_timeout": "20s",
        "probe_timeout": "30s",
    }
    etc = machine.root / "etc"
    (etc / "inventory.toml").write_text(tomli_w.dumps(inventory))
    (etc / "cluster.toml").write_text(
        'cluster = "ops"\ninventory = "inventory.toml"\n\n'
        '[services.web]\nimage = "minidock-lab/web:5"\nreplicas = 2\n'
    )
    for name in ("inventory.toml", "cluster.toml"):
        os.chown(etc / name, 0, account.pw_gid)
        (etc / name).chmod(0o640)


def test_the_documented_set_up_runs_as_its_own_user_and_converges(
    fleet: Fleet, machine: Machine
) -> None:
    for command in console_lines("setup"):
        if command.startswith("sudo apt-get install"):
            packages = [w for w in shlex.split(command)[3:] if not w.startswith("-")]
            assert subprocess.run(["dpkg", "-s", *packages], capture_output=True).returncode == 0
            continue
        done = machine.run(command)
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    assert done.stdout == f"minidock {__version__}\n"  # the last line: the wheel's version
    venv_python = (machine.root / "opt" / "venvs" / "minidock" / "bin" / "python").resolve()
    assert not venv_python.is_relative_to("/root"), venv_python  # the system's Python
    assert (machine.root / "state").stat().st_mode & 0o777 == 0o700
    give_the_lab(machine, fleet)

    (check_line,) = console_lines("check")
    checked = machine.run(check_line)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (apply_line,) = console_lines("apply")
    planned = machine.run(apply_line.replace(f"{DOC_BINARY} apply", f"{DOC_BINARY} plan"))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "run web.1." in planned.stdout
    applied = machine.run(apply_line)
    assert applied.returncode in (0, 3), applied.stdout + applied.stderr
    assert applied.stdout.startswith("generation 1: ops (1 services)\n")
    cron = machine.line(" ".join(documented("cron-line").split()[5:]))
    ran = subprocess.run(
        ["env", "-i", "/usr/sbin/runuser", "-u", machine.user, "--", "/bin/sh", "-c", cron],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    status = machine.run(f"sudo -u minidock MINIDOCK_STATE={DOC_STATE} {DOC_BINARY} status")
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stdout + status.stdout + status.stderr
    state = machine.root / "state"
    assert state.stat().st_uid == pwd.getpwnam(machine.user).pw_uid
    running = [
        line
        for host in fleet.hosts
        for line in fleet.docker(
            host, "ps", "--filter", "label=minidock.cluster=ops", "--format", "{{.Names}}"
        ).stdout.split()
    ]
    assert sorted(name.split(".")[:2] for name in running) == [["web", "1"], ["web", "2"]]

    # the controller's own backup, restored on a second controller (operations.md)
    kept = machine.root / "home" / "state.json"  # the user's own directory
    backup = machine.line(" ".join(documented("state-backup").split()[5:]))
    assert backup.endswith(" state backup /var/backups/minidock-state.json")
    backup = backup.replace("/var/backups/minidock-state.json", str(kept))
    ran = subprocess.run(
        ["env", "-i", "/usr/sbin/runuser", "-u", machine.user, "--", "/bin/sh", "-c", backup],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    second = machine.root / "state2"
    made = machine.run(f"sudo install -d -o minidock -g minidock -m 0700 {second}")
    assert made.returncode == 0, made.stderr
    restore = machine.run(
        f"sudo -u minidock MINIDOCK_STATE={second} {DOC_BINARY} state restore "
        f"{kept} --key-file {state / 'secrets.key'}"
    )
    assert restore.returncode == 0, restore.stdout + restore.stderr
    ids = sorted(
        line
        for host in fleet.hosts
        for line in fleet.docker(
            host, "ps", "-q", "--filter", "label=minidock.cluster=ops", "--no-trunc"
        ).stdout.split()
    )
    again = subprocess.run(
        [
            "env",
            "-i",
            "/usr/sbin/runuser",
            "-u",
            machine.user,
            "--",
            "/bin/sh",
            "-c",
            cron.replace(str(state), str(second)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")  # nothing to do
    assert ids == sorted(
        line
        for host in fleet.hosts
        for line in fleet.docker(
            host, "ps", "-q", "--filter", "label=minidock.cluster=ops", "--no-trunc"
        ).stdout.split()
    )
