"""`minidock hosts check`: each check's argv beside the parser of what it prints, and the
verdict it gives with the fix for a failure. Pure: nothing here runs a command.

A check's verdict is a `Check`: passed (`ok` True), failed (False, with its `fix`), or not
checked (None: what it needs failed first, e.g. the engine when SSH did). The use case
(minidock.usecases.hostcheck) runs the argvs over SSH and hands the outputs here.

The engine is read as every pass's probe reads it (`docker version`, commands.facts), and
judged by the same rule (core.engines): a host `hosts check` passes is one a pass drives.
Its root directory, where the disk check looks, is asked of the engine it found: Docker's
`DockerRootDir`, Podman's graph root.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from minidock.commands.docker import operand
from minidock.commands.facts import ParseError, parse_version, version_argv
from minidock.core.engines import OLDEST, refusal
from minidock.model import Engine, EngineKind, Host

__all__ = [
    "CLOCK_TOLERANCE",
    "DISK_MINIMUM",
    "KERNEL_MINIMUM",
    "LISTENER",
    "Check",
    "clock_argv",
    "clock_check",
    "disk_argv",
    "disk_check",
    "engine_argv",
    "engine_check",
    "id_argv",
    "image_argv",
    "images_check",
    "kernel_argv",
    "kernel_check",
    "listener_argv",
    "listener_ready_argv",
    "listener_rm_argv",
    "parse_clock",
    "parse_df",
    "parse_id",
    "parse_kernel",
    "parse_reached",
    "parse_root",
    "reach_argv",
    "root_argv",
    "ssh_check",
    "sudo_argv",
    "task_ports_check",
    "user_check",
]

KERNEL_MINIMUM = (5, 14)  # on the hosts that run an ingress proxy
DISK_MINIMUM = 2 << 30  # bytes free under the engine's root: room for an image or two
CLOCK_TOLERANCE = 1.0  # seconds of offset from the controller's clock, beyond the round trip
# the task-port listener's container (one per host, removed when the check ends)
LISTENER = "minidock-portcheck"
# where each engine keeps its images and containers, as its `info` names it
ROOT_FORMAT: dict[EngineKind, str] = {
    "docker": "{{.DockerRootDir}}",
    "podman": "{{.Store.GraphRoot}}",
}


@dataclass(frozen=True)
class Check:
    """One check of one host: its name, whether it passed (None: not checked), what was
    found, and the fix when it failed."""

    name: str
    ok: bool | None
    found: str
    fix: str = ""


def _version(text: str) -> tuple[int, ...] | None:
    """The leading numbers of a version ("20.10.24+dfsg1" -> (20, 10, 24))."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in found[1].split(".")) if found else None


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version)


# -- SSH and the host key ---------------------------------------------------------------------
def ssh_check(host: Host, error: str | None) -> Check:
    """Whether the controller logs in (error: why not, as minidock.ssh.Unreachable says)."""
    who = f"{host.user}@{host.address}"
    if error is None:
        return Check("ssh", True, f"{who}:{host.port}, host key verified")
    known = host.known_hosts or "~/.ssh/known_hosts"
    if "host key" in error and "changed" in error:
        fix = (
            f"the host presents another key than {known} holds: if the host was rebuilt, "
            f"ssh-keygen -R '[{host.address}]:{host.port}' -f {known}, then add its new key "
            "after checking its fingerprint; if not, find out why before connecting"
        )
    elif "host key" in error or "known_hosts" in error:
        fix = (
            f"add the host's key to {known} after checking its fingerprint: "
            f"ssh-keyscan -p {host.port} {host.address} >> {known} "
            '(or host_key_policy = "accept-new" for a host you trust on first use)'
        )
    elif "authentication failed" in error:
        key = host.identity_file or "KEY"
        fix = (
            f"authorize the controller's key for {host.user}: "
            f"ssh-copy-id -i {key} -p {host.port} {who}"
        )
    else:
        fix = f"check the address, the port and that sshd runs: ssh -p {host.port} {who} true"
    return Check("ssh", False, error, fix)


# -- the kernel -------------------------------------------------------------------------------
def kernel_argv() -> list[str]:
    """The host's kernel release (also the first command: it tells that SSH works)."""
    return ["uname", "-r"]


def parse_kernel(text: str) -> tuple[int, ...] | None:
    """`uname -r`'s release as numbers ("6.1.0-18-amd64" -> (6, 1, 0))."""
    return _version(text.strip())


def kernel_check(release: str, ingress: bool) -> Check:
    """Kernel 5.14 or newer on a host that runs an ingress proxy; any other host passes."""
    found = parse_kernel(release)
    if found is None:
        return Check(
            "kernel",
            False,
            f"cannot read `uname -r`: {release.strip()[:60]!r}",
            "run `uname -r` on the host and report what it prints",
        )
    shown = release.strip()
    if not ingress:
        return Check("kernel", True, f"{shown} (runs no ingress proxy)")
    if found[:2] < KERNEL_MINIMUM:
        need = _dotted(KERNEL_MINIMUM)
        return Check(
            "kernel",
            False,
            f"{shown}, older than {need} (an ingress host)",
            f"boot a kernel {need} or newer (the distribution's newer release), "
            "or run the ingress on other hosts ([ingress] hosts)",
        )
    return Check("kernel", True, shown)


# -- the engine -------------------------------------------------------------------------------
def engine_argv() -> list[str]:
    """The engine's version report, as the probe asks it (`commands.facts.parse_version`)."""
    return version_argv()


def engine_check(
    host: Host, exit_status: int, stdout: str, stderr: str
) -> tuple[Check, Engine | None]:
    """The engine answers `docker version` and is one MiniDock drives (core.engines: Docker
    20.10 or newer, Podman 4.0 or newer, not rootless Docker); and the engine it found."""
    said = " ".join((stderr.strip() or stdout.strip() or "no output").split())[:160]
    prepare = f"minidock hosts prepare {host.name}"
    if exit_status == 127 or ("not found" in said.lower() and "docker" in said.lower()):
        return Check(
            "engine",
            False,
            "no docker command",
            f"install the engine: {prepare} (Debian, Ubuntu), or the "
            "distribution's docker.io and docker-cli packages",
        ), None
    if "permission denied" in said.lower():
        found = f"{host.user} may not use the engine's socket"
        return Check("engine", False, found, "see user"), None
    try:
        engine = parse_version(stdout) if exit_status == 0 else None
    except ParseError:
        engine = None
    if engine is None:
        return Check(
            "engine",
            False,
            f"the engine does not answer: {said}",
            f"start it: systemctl enable --now docker (or {prepare})",
        ), None
    refused = refusal(engine)
    if refused is not None:
        (major, minor), _ = OLDEST[engine.kind]
        fix = (
            "run the daemon as root (rootful Docker)"
            if engine.rootless
            else f"upgrade the engine to {engine.name} {major}.{minor} or newer (the "
            "distribution's packages, or the engine's own)"
        )
        return Check("engine", False, refused, fix), engine
    return Check("engine", True, str(engine)), engine


def root_argv(kind: EngineKind) -> list[str]:
    """Where the engine keeps its images and containers (the disk check's directory)."""
    return ["docker", "info", "--format", ROOT_FORMAT[kind]]


def parse_root(text: str) -> str | None:
    """`root_argv`'s line; None when it is not an absolute path."""
    root = text.strip()
    return root if root.startswith("/") else None


# -- the user's right to run docker -----------------------------------------------------------
def id_argv() -> list[str]:
    return ["id"]


def sudo_argv() -> list[str]:
    """Whether the user may run docker as root without a password (exit 0: yes): what the
    inventory's `sudo = true` needs, and no more (a sudoers line for docker alone, as the
    lab's `sudoer` has, passes; `sudo -n true` would fail it)."""
    return ["sudo", "-n", "-l", "docker"]


def parse_id(text: str) -> tuple[int, frozenset[str]] | None:
    """`id`'s uid and group names ("uid=1000(deploy) gid=... groups=1000(deploy),998(docker)")."""
    uid = re.search(r"\buid=(\d+)", text)
    if uid is None:
        return None
    groups = re.search(r"\bgroups=(\S+)", text)
    names = re.findall(r"\(([^)]*)\)", groups[1]) if groups else []
    return int(uid[1]), frozenset(names)


def user_check(host: Host, id_text: str, sudo_ok: bool) -> Check:
    """The user may run docker: root, a member of the docker group, or (with the
    inventory's `sudo`) through `sudo -n`."""
    parsed = parse_id(id_text)
    user = host.user
    if parsed is None:
        return Check(
            "user",
            False,
            f"cannot read `id`: {id_text.strip()[:60]!r}",
            "run `id` on the host and report what it prints",
        )
    uid, groups = parsed
    if uid == 0:
        return Check("user", True, "root")
    if "docker" in groups:
        return Check("user", True, f"{user}, in the docker group")
    through_sudo = bool(getattr(host, "sudo", False))  # the inventory's `sudo` key
    if sudo_ok and through_sudo:
        return Check("user", True, f"{user}, docker through sudo -n")
    add = f"usermod -aG docker {user}"
    if sudo_ok:
        return Check(
            "user",
            False,
            f"{user} is not in the docker group (sudo -n works)",
            f"sudo {add} (or sudo = true for {host.name} in the inventory, "
            f"or minidock hosts prepare {host.name})",
        )
    return Check(
        "user",
        False,
        f"{user} is not in the docker group and may not sudo -n",
        f"as root on the host: {add}; or log in as root",
    )


# -- free disk under the engine's root --------------------------------------------------------
def disk_argv(root: str) -> list[str]:
    """POSIX `df` of the engine's root directory, in KiB."""
    return ["df", "-Pk", operand(root, "directory")]


def parse_df(text: str) -> int | None:
    """Bytes available on the filesystem `df -Pk` reported (its last line's 4th field)."""
    lines = [line.split() for line in text.strip().splitlines()[1:] if line.strip()]
    if not lines or len(lines[-1]) < 6 or not lines[-1][3].isdigit():
        return None
    return int(lines[-1][3]) * 1024


def disk_check(root: str, df_text: str, minimum: int = DISK_MINIMUM) -> Check:
    """At least `minimum` bytes free under the engine's root."""
    free = parse_df(df_text)
    if free is None:
        return Check(
            "disk",
            False,
            f"cannot read `df -Pk {root}`",
            f"run `df -Pk {root}` on the host and report what it prints",
        )
    shown = f"{free / (1 << 30):.1f} GiB free under {root}"
    if free < minimum:
        return Check(
            "disk",
            False,
            shown,
            f"free {minimum >> 30} GiB or more: docker system prune (stopped "
            f"containers, unused images), or grow the filesystem of {root}",
        )
    return Check("disk", True, shown)


# -- the clock --------------------------------------------------------------------------------
def clock_argv() -> list[str]:
    """The host's clock, in seconds with nanoseconds (GNU date; busybox prints %N as is)."""
    return ["date", "+%s.%N"]


def parse_clock(text: str) -> float | None:
    """`date +%s.%N`'s time; seconds alone when %N was not understood."""
    whole, _, frac = text.strip().partition(".")
    if not whole.isdigit():
        return None
    return float(f"{whole}.{frac}") if frac.isdigit() else float(whole)


def clock_check(text: str, before: float, after: float) -> Check:
    """The host's clock within CLOCK_TOLERANCE of the controller's, read between `before`
    and `after` (the controller's times around the command): the offset is taken from the
    round trip's middle, and half the round trip is allowed on top."""
    remote = parse_clock(text)
    if remote is None:
        return Check(
            "clock",
            False,
            f"cannot read `date +%s.%N`: {text.strip()[:40]!r}",
            "run `date +%s` on the host and report what it prints",
        )
    offset = remote - (before + after) / 2
    shown = f"{offset:+.3f}s from the controller"
    if abs(offset) > CLOCK_TOLERANCE + (after - before) / 2:
        return Check(
            "clock",
            False,
            shown,
            "synchronise the clock: timedatectl set-ntp true (systemd-timesyncd), "
            "or install chrony",
        )
    return Check("clock", True, shown)


# -- the proxies' images ----------------------------------------------------------------------
def image_argv(image: str) -> list[str]:
    """The image's id on the host (exit non-zero when it lacks it)."""
    return ["docker", "image", "inspect", "--format", "{{.Id}}", operand(image, "image")]


def images_check(host: str, present: Mapping[str, bool]) -> Check:
    """Every image the proxies need is on the host (images: whether the host holds it)."""
    missing = [image for image, held in present.items() if not held]
    if missing:
        pushes = "; ".join(f"minidock push {image} --hosts {host}" for image in missing)
        return Check(
            "images",
            False,
            "missing " + ", ".join(missing),
            f"{pushes} (or docker pull where a registry is reachable)",
        )
    return Check("images", True, ", ".join(present) or "none needed")


# -- the task ports ---------------------------------------------------------------------------
def listener_argv(image: str, address: str, port: int) -> list[str]:
    """A listener published on the host's private address and task port, as a routed
    task's port is (`docker run -p ADDRESS:PORT:PORT`): Caddy's `respond` in the proxy's
    own image, answering 200 to any request."""
    return [
        "docker",
        "run",
        "-d",
        "--rm",
        "--name",
        LISTENER,
        "--label",
        "minidock.portcheck=1",
        "-p",
        f"{address}:{port}:{port}",
        "--entrypoint",
        "caddy",
        operand(image, "image"),
        "respond",
        "--listen",
        f":{port}",
        "ok",
    ]


def listener_ready_argv(port: int, patience: float) -> list[str]:
    """Wait, inside the listener, until it answers on its own port (at most `patience`
    seconds): a listener just started is not reached from elsewhere before it listens."""
    tries = max(1, int(patience * 4))
    script = (
        f"i=0; until busybox timeout 1 busybox wget -q -O /dev/null http://127.0.0.1:{port}/; do "
        f'i=$((i+1)); [ "$i" -ge {tries} ] && exit 1; busybox sleep 0.25; done'
    )
    return ["docker", "exec", LISTENER, "busybox", "sh", "-c", script]


def listener_rm_argv() -> list[str]:
    return ["docker", "rm", "-f", LISTENER]


def reach_argv(image: str, targets: Sequence[tuple[str, int]]) -> list[str]:
    """From a container on this host, as an ingress proxy reaches a task: an HTTP request
    to each `address:port`, a line each: "ADDRESS:PORT STATUS" (0: reached). Uses the
    image's busybox wget (the official Alpine image's, and the lab's), bounded by busybox
    `timeout`: Debian 12's static busybox wget crashes with its own `-T`."""
    urls = " ".join(shlex.quote(f"{a}:{p}") for a, p in targets)
    script = (
        f"for t in {urls}; do busybox timeout 3 busybox wget -q -O /dev/null http://$t/ "
        '>/dev/null 2>&1; echo "$t $?"; done'
    )
    return [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "busybox",
        operand(image, "image"),
        "sh",
        "-c",
        script,
    ]


def parse_reached(text: str) -> dict[str, bool]:
    """`reach_argv`'s lines: each target, and whether it answered."""
    found: dict[str, bool] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            found[words[0]] = words[1] == "0"
    return found


def task_ports_check(
    host: Host,
    span: tuple[int, int],
    port: int | None,
    refused: str,
    reached_from: Iterable[tuple[str, bool | None]],
) -> Check:
    """The task port `port` on this host's private address answers from every other host
    (reached_from: each host, and whether it reached it; None: it could not try)."""
    if port is None:
        return Check(
            "task ports",
            False,
            f"no listener: {refused}",
            f"free a port of {span[0]}-{span[1]} (the ingress's task_ports) on the host",
        )
    where = f"{host.reached_at}:{port}"
    seen = list(reached_from)
    failed = [name for name, ok in seen if ok is False]
    unknown = [name for name, ok in seen if ok is None]
    if failed:
        return Check(
            "task ports",
            False,
            f"{where} not reached from {', '.join(failed)}",
            f"allow TCP {span[0]}-{span[1]} to {host.reached_at} from the other hosts' "
            "private addresses (firewall: iptables, nftables, ufw, the cloud's "
            "security group)",
        )
    if not seen:
        return Check("task ports", True, f"{where} answers (no other host to try from)")
    shown = f"{where} reached from {len(seen) - len(unknown)} host(s)"
    if unknown:
        return Check("task ports", None, shown + f"; not tried from {', '.join(unknown)}")
    return Check("task ports", True, shown)
