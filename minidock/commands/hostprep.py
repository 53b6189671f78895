"""`minidock hosts prepare`: what it takes to turn a Debian or Ubuntu host into one MiniDock
runs on, as argv lists and one pure plan. Nothing here runs a command.

The steps of `kamal setup` (basecamp/kamal, lib/kamal/commands/docker.rb: installed?,
running?, superuser?, then install and the docker group), with the distribution's own
packages where Kamal pipes get.docker.com into sh: find out what the host has (one
read-only script, `facts_argv`), then, only for what is missing and only where the user
can become root (root itself, or `sudo -n`): install the distribution's
engine (`apt-get install docker.io`, with `docker-cli` where the archive splits the client
out: Debian 13 and newer), start it (systemd's `enable --now`, else `dockerd` in the
background), and add the user to the docker group. Every step is said, done or already so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "STEP_TIMEOUT",
    "Step",
    "become",
    "facts_argv",
    "group_argv",
    "install_argv",
    "parse_facts",
    "plan",
    "start_argv",
]

STEP_TIMEOUT = 600.0  # seconds a step may take (an apt-get install on a slow mirror)

# Read-only: what prepare needs to know, a `KEY=VALUE` line each. `docker info` runs as
# the user and, when that fails, as root (the engine may run while the user may not use it).
_FACTS = r"""
echo "uid=$(id -u)"
echo "groups=$(id -nG | tr ' ' ,)"
if [ "$(id -u)" = 0 ]; then echo sudo=root
elif sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=$ID"; echo "like=$ID_LIKE"; fi
if command -v apt-get >/dev/null 2>&1; then echo apt=yes; else echo apt=no; fi
if command -v docker >/dev/null 2>&1; then echo client=yes; else echo client=no; fi
if command -v dockerd >/dev/null 2>&1; then echo daemon=yes; else echo daemon=no; fi
if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi
if docker info >/dev/null 2>&1; then echo engine=up
elif [ "$(id -u)" != 0 ] && sudo -n docker info >/dev/null 2>&1; then echo engine=up
else echo engine=down; fi
if getent group docker >/dev/null 2>&1; then echo group=yes; else echo group=no; fi
"""


def facts_argv() -> list[str]:
    """The host's facts for `plan`, a KEY=VALUE line each (changes nothing)."""
    return ["sh", "-c", _FACTS]


def parse_facts(text: str) -> dict[str, str]:
    """`facts_argv`'s lines as a mapping (unknown lines left out)."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key.isidentifier():
            facts[key] = value
    return facts


def become(root: bool, argv: list[str]) -> list[str]:
    """`argv` as root: as is for root, through `sudo -n` for a user who may."""
    return argv if root else ["sudo", "-n", *argv]


def install_argv() -> list[str]:
    """Install the distribution's engine without prompts; `docker-cli` too where the
    archive has the client as a package of its own (else `docker.io` alone has no
    `docker` command). Which it is, is asked of the archive after `apt-get update`: a
    fresh host's package lists may be empty, and asked before, Debian 13 got `docker.io`
    alone, an engine without a client."""
    script = (
        "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && set -- docker.io && "
        "if apt-cache show docker-cli >/dev/null 2>&1; then set -- docker.io docker-cli; fi && "
        'apt-get install -y -q --no-install-recommends "$@" && echo "installed $*"'
    )
    return ["sh", "-c", script]


def start_argv(systemd: bool) -> list[str]:
    """Start the engine now and at every boot (systemd), else start `dockerd` in the
    background and wait up to 30 s for it to answer."""
    if systemd:
        return ["systemctl", "enable", "--now", "docker"]
    script = (
        "nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null & "
        "i=0; while ! docker info >/dev/null 2>&1; do "
        'i=$((i+1)); [ "$i" -gt 60 ] && { tail -n 3 /var/log/dockerd.log >&2; exit 1; }; '
        "sleep 0.5; done"
    )
    return ["sh", "-c", script]


def group_argv(user: str) -> list[str]:
    """Add `user` to the docker group (it counts from its next login)."""
    return ["usermod", "-aG", "docker", user]


@dataclass(frozen=True)
class Step:
    """One step of a host's prepare: its name, whether it is fine (done or already so),
    what was done or found, and the argv that does it (None: nothing to run)."""

    name: str
    ok: bool
    what: str
    argv: tuple[str, ...] | None = None


def plan(user: str, facts: Mapping[str, str]) -> list[Step]:
    """The steps for a host with these facts, in order: each one either already so
    (argv None, ok), refused (argv None, not ok: the steps end there) or to run."""
    if facts.get("sudo") not in ("root", "yes"):
        return [_no_root(user, facts)]
    root = facts.get("sudo") == "root"
    needs_install = facts.get("client") != "yes" or facts.get("daemon") != "yes"
    install = _install(root, facts, needs_install)
    if not install.ok:
        return [install]
    return [install, _start(root, facts, needs_install), _group(root, user, facts)]


def _no_root(user: str, facts: Mapping[str, str]) -> Step:
    """A user that cannot become root: fine when the engine answers it already."""
    if facts.get("engine") == "up" and "docker" in facts.get("groups", "").split(","):
        return Step(
            "root",
            True,
            f"{user} may not become root; the engine answers and "
            f"{user} is in the docker group: nothing to do",
        )
    return Step(
        "root",
        False,
        f"{user} can become root neither as root nor with sudo -n: "
        "log in as root, or give the user passwordless sudo",
    )


def _install(root: bool, facts: Mapping[str, str], needs_install: bool) -> Step:
    if not needs_install:
        return Step("install", True, "the engine is installed already")
    if facts.get("apt") != "yes":
        os_name = facts.get("os") or "this system"
        return Step(
            "install",
            False,
            f"no apt-get on {os_name}: install Docker Engine "
            "20.10 or newer with the distribution's tools, then run prepare again",
        )
    what = "installed docker.io (and docker-cli where the archive has it)"
    return Step("install", True, what, tuple(become(root, install_argv())))


def _start(root: bool, facts: Mapping[str, str], needs_install: bool) -> Step:
    if facts.get("engine") == "up" and not needs_install:
        return Step("start", True, "the engine runs already")
    systemd = facts.get("systemd") == "yes"
    how = "systemctl enable --now docker" if systemd else "dockerd started (no systemd)"
    argv = tuple(become(root, start_argv(systemd)))
    return Step("start", True, f"started the engine ({how})", argv)


def _group(root: bool, user: str, facts: Mapping[str, str]) -> Step:
    if root and user == "root":
        return Step("group", True, "root needs no docker group")
    if "docker" in facts.get("groups", "").split(","):
        return Step("group", True, f"{user} is in the docker group already")
    argv = tuple(become(root, group_argv(user)))
    return Step("group", True, f"added {user} to the docker group (from its next login)", argv)
