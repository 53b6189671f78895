"""The lab: a local fleet of SSH + Docker hosts in containers, for demos and tests.

`Lab(root)` owns three things under `root`: the lab directory `.lab/` (compose file, key,
known_hosts, state), the inventory `inventory/lab.toml`, and a compose project of host
containers `host1`..`hostN`. Each host runs sshd and its own dockerd (Docker-in-Docker);
PID 1 is a small shell, so either daemon can be killed while the host stays up.

Images are built locally (no registry): the host image with mmdebstrap + `docker import`,
the workload images from Debian's static busybox. Each is tagged and labelled with a hash
of its recipe, so a rebuild happens only when the recipe changes. See docs/lab.md.

The plain API (`Lab`) is what the CLI (`lab_app`) and the integration tests use.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import io
import json
import os
import random
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import asyncssh
import tomli_w
import typer
from rich.console import Console
from rich.table import Table

__all__ = [
    "CRASH_IMAGE",
    "DEFAULT_PROJECT",
    "KILL_MODES",
    "WEB5_IMAGE",
    "WEB6_IMAGE",
    "WEB_BROKEN_IMAGE",
    "WORKLOAD_IMAGES",
    "HostStatus",
    "KillMode",
    "Lab",
    "LabError",
    "LabHost",
    "UnknownHostError",
    "lab_app",
    "zone_for",
]

T = TypeVar("T")

DEFAULT_PROJECT = "minidock-lab"
IMAGE_REPO = "minidock-lab"
WEB5_IMAGE = f"{IMAGE_REPO}/web:5"
WEB6_IMAGE = f"{IMAGE_REPO}/web:6"
WEB_BROKEN_IMAGE = f"{IMAGE_REPO}/web:broken"
CRASH_IMAGE = f"{IMAGE_REPO}/crash:1"
WORKLOAD_IMAGES = (WEB5_IMAGE, WEB6_IMAGE, WEB_BROKEN_IMAGE, CRASH_IMAGE)
RECIPE_LABEL = "minidock.lab.recipe"
LAB_LABEL = "minidock.lab"

KillMode = Literal["stop", "pause", "sshd", "dockerd", "partition"]
KILL_MODES: tuple[KillMode, ...] = get_args(KillMode)

HOST_SUITE = "bookworm"
HOST_PACKAGES = ("openssh-server", "docker.io", "iptables", "procps", "iproute2")
HOST_CPUS = 2
HOST_MEMORY = "2GiB"
SSH_USER = "root"
CONNECT_TIMEOUT = 2.0
PORT_RANGE = (20000, 32000)  # below the kernel's ephemeral range, so pinned ports stay free
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = (
    "sh", "sleep", "httpd", "wget", "cat", "echo", "ls", "ps", "kill", "true", "false",
    "env", "hostname", "printf", "test", "[", "nc", "timeout", "grep", "date", "id",
)  # fmt: skip

# What `kill --mode` does inside a host (FLEET-NOTES "Network"), and how revive heals it.
PARTITION_RULE = ("INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
START_SSHD = "mkdir -p /run/sshd && /usr/sbin/sshd -E /var/log/sshd.log"
START_DOCKERD = "setsid dockerd >>/var/log/dockerd.log 2>&1 </dev/null &"
READY_FLAG = "/run/minidock-lab.ready"
HEAL_SCRIPT = f"""
i=0
while [ ! -e {READY_FLAG} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
rule="{" ".join(PARTITION_RULE)}"
while iptables -C $rule 2>/dev/null; do iptables -D $rule; done
if ! ss -Hltn 'sport = :22' | grep -q .; then pkill -KILL -x sshd; {START_SSHD}; fi
if ! pgrep -x dockerd >/dev/null; then {START_DOCKERD} fi
"""
# After HEAL_SCRIPT, for `reset`: wait for dockerd, remove every MiniDock-labelled container.
CLEAN_SCRIPT = """
i=0
until ids=$(docker ps -aq --filter label=minidock.cluster 2>&1); do
    [ $i -lt 300 ] || { echo "$ids" >&2; exit 1; }
    sleep 0.1; i=$((i + 1))
done
[ -z "$ids" ] || docker rm -f -v $ids >/dev/null
"""


class LabError(Exception):
    """A lab operation failed; the message says what and where."""


class UnknownHostError(LabError):
    """The named host is not part of the lab (bad input: the CLI exits 2)."""


@dataclass(frozen=True)
class LabHost:
    """One host of the lab as written to the inventory."""

    name: str
    port: int
    zone: str
    container: str


@dataclass(frozen=True)
class HostStatus:
    """What `lab status` shows for a host."""

    name: str
    container: str
    state: str  # docker's container state: running, paused, exited, ... or "missing"
    port: int
    ssh: bool  # an SSH session with the lab's key, verified against known_hosts
    docker: bool  # `docker ps` over that session succeeded
    running: int | None  # containers running on the host (None when docker did not answer)
    error: str = ""


@dataclass
class _Process:
    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str


def zone_for(index: int) -> str:
    """Zone label of host number `index` (1-based): host1, host2 -> a; host3 -> b;
    host4 -> c; then round-robin a, b, c. Three hosts give an uneven a/a/b split (spread
    has something to do), four add a zone c (for `zone != c` constraints)."""
    if index < 1:
        raise ValueError(index)
    if index <= 2:
        return "a"
    return "abc"[(index - 2) % 3]


def _data(name: str) -> bytes:
    return resources.files("minidock").joinpath("lab_files", name).read_bytes()


def _run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = 120.0,
) -> _Process:
    """Run a local command; with check, raise LabError naming it and its stderr."""
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]}: not installed (run scripts/engine.sh)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    proc = _Process(
        argv,
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise LabError(f"`{' '.join(argv)}` exited {proc.returncode}: {detail}")
    return proc


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _run_coro(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even under a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _parallel(fn: Callable[[T], Any], items: Iterable[T]) -> None:
    """Call fn on every item concurrently; re-raise the first failure."""
    items = list(items)
    if not items:
        return
    with ThreadPoolExecutor(len(items)) as pool:
        for future in [pool.submit(fn, item) for item in items]:
            future.result()


def engine_available() -> bool:
    """True when a Docker engine answers `docker info`."""
    try:
        return _run(["docker", "info"], check=False, timeout=20).returncode == 0
    except LabError:
        return False


def _image_recipe(tag: str) -> str | None:
    proc = _run(
        ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}', tag],
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _image_id(tag: str) -> str | None:
    proc = _run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


# -- workload images --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Workload:
    tag: str
    cmd: tuple[str, ...]
    page: str | None  # /www/index.html, when the image serves


_WORKLOADS = (
    _Workload(WEB5_IMAGE, ("httpd", "-f", "-p", "8080", "-h", "/www"), "web 5\n"),
    _Workload(WEB6_IMAGE, ("httpd", "-f", "-p", "8080", "-h", "/www"), "web 6\n"),
    # Keeps running, never listens on 8080: a health check with wget fails.
    _Workload(WEB_BROKEN_IMAGE, ("sleep", "2147483647"), None),
    _Workload(CRASH_IMAGE, ("sh", "-c", "sleep 1; exit 1"), None),
)


def _workload_tar(work: _Workload) -> bytes:
    """A root filesystem: busybox and its applet links, the init wrapper, the page."""
    if not BUSYBOX.is_file():
        raise LabError(f"{BUSYBOX} missing: install busybox-static (scripts/engine.sh)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(name: str, *, data: bytes | None = None, mode: int = 0o644, link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.mode = mode
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
            elif data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)

        for directory in ("bin", "www", "etc"):
            add(directory, mode=0o755)
        add("tmp", mode=0o1777)
        add("bin/busybox", data=BUSYBOX.read_bytes(), mode=0o755)
        for applet in BUSYBOX_APPLETS:
            add(f"bin/{applet}", link="busybox")
        add("bin/lab-init", data=_data("workload-init.sh"), mode=0o755)
        add("etc/passwd", data=b"root:x:0:0:root:/:/bin/sh\n")
        add("etc/group", data=b"root:x:0:\n")
        if work.page is not None:
            add("www/index.html", data=work.page.encode())
    return buf.getvalue()


def _workload_changes(work: _Workload) -> list[str]:
    return [
        "ENV PATH=/bin",
        "WORKDIR /www",
        'ENTRYPOINT ["/bin/lab-init"]',
        f"CMD {json.dumps(list(work.cmd))}",
        "EXPOSE 8080",
    ]


def build_workload_image(work: _Workload) -> bool:
    """Build one workload image unless the tag already holds this recipe. True if built."""
    data = _workload_tar(work)
    changes = _workload_changes(work)
    recipe = hashlib.sha256(data + json.dumps(changes).encode()).hexdigest()[:16]
    if _image_recipe(work.tag) == recipe:
        return False
    argv = ["docker", "import"]
    for change in [*changes, f"LABEL {RECIPE_LABEL}={recipe} {LAB_LABEL}=image"]:
        argv += ["--change", change]
    _run([*argv, "-", work.tag], input=data)
    return True


# -- the host image ---------------------------------------------------------------------------
def _host_recipe() -> tuple[str, list[str], dict[str, bytes]]:
    """(recipe hash, mmdebstrap argv with {dir} for the uploads dir, files to upload)."""
    files = {"sshd_config": _data("sshd_config"), "daemon.json": _data("daemon.json")}
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        f"--include={','.join(HOST_PACKAGES)}",
        '--aptopt=Acquire::Retries "3"',
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        # every host makes its own host key at first start (see host-init.sh)
        '--customize-hook=rm -f "$1"/etc/ssh/ssh_host_*',
        "--customize-hook=upload {dir}/sshd_config /etc/ssh/sshd_config.d/minidock-lab.conf",
        '--customize-hook=mkdir -p "$1"/etc/docker',
        "--customize-hook=upload {dir}/daemon.json /etc/docker/daemon.json",
        HOST_SUITE,
        "-",
    ]
    digest = hashlib.sha256(json.dumps(argv).encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()[:12], argv, files


def host_image_tag() -> str:
    """The host image's tag: derived from its recipe, so a changed recipe rebuilds it."""
    return f"{IMAGE_REPO}/host:{_host_recipe()[0]}"


def build_host_image() -> bool:
    """Build the host image (mmdebstrap | docker import) unless it exists. True if built."""
    recipe, argv, files = _host_recipe()
    tag = host_image_tag()
    if _image_recipe(tag) == recipe:
        return False
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap not installed (run scripts/engine.sh)")
    staging = f"{IMAGE_REPO}/host:building-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="minidock-lab-") as tmp:
        for name, data in files.items():
            Path(tmp, name).write_bytes(data)
        argv = [arg.replace("{dir}", tmp) for arg in argv]
        importer = [
            "docker", "import",
            "--change", f"LABEL {RECIPE_LABEL}={recipe} {LAB_LABEL}=image",
            "--change", 'CMD ["/bin/sh"]',
            "-", staging,
        ]  # fmt: skip
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as debs:
            assert debs.stdout is not None
            imported = subprocess.run(
                importer, stdin=debs.stdout, capture_output=True, check=False, timeout=900
            )
            debs.stdout.close()
            _, debs_err = debs.communicate(timeout=900)
        if debs.returncode != 0 or imported.returncode != 0:
            _run(["docker", "rmi", "-f", staging], check=False)
            detail = (debs_err or imported.stderr).decode(errors="replace").strip()
            if len(detail) > 3000:  # mmdebstrap: the error comes first, then its usage text
                detail = f"{detail[:1500]}\n...\n{detail[-1500:]}"
            raise LabError(f"building the host image failed: {detail}")
    _run(["docker", "tag", staging, tag])
    _run(["docker", "rmi", staging], check=False)
    return True


def build_images() -> dict[str, float]:
    """Make every lab image present locally; return seconds spent per built image."""
    timings: dict[str, float] = {}
    for work in _WORKLOADS:
        started = time.monotonic()
        if build_workload_image(work):
            timings[work.tag] = time.monotonic() - started
    started = time.monotonic()
    if build_host_image():
        timings[host_image_tag()] = time.monotonic() - started
    return timings


def detect_dind_mode(probe_image: str = WEB5_IMAGE) -> Literal["privileged", "caps"]:
    """How host containers get the rights to run dockerd: `--privileged` if a tiny test
    container may use it here, else an explicit capability set (FLEET-NOTES: the kernel may
    withhold CAP_SYS_RESOURCE, which makes `--privileged` fail). $MINIDOCK_LAB_DIND forces."""
    forced = os.environ.get("MINIDOCK_LAB_DIND", "")
    if forced == "privileged":
        return "privileged"
    if forced == "caps":
        return "caps"
    probe = ["docker", "run", "--rm", "--privileged", "--network", "none"]
    proc = _run([*probe, "--entrypoint", "/bin/true", probe_image], check=False, timeout=60)
    return "privileged" if proc.returncode == 0 else "caps"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pick_port(taken: set[int]) -> int:
    for _ in range(500):
        port = random.randrange(*PORT_RANGE)
        if port not in taken and _port_free(port):
            return port
    raise LabError(f"no free port on 127.0.0.1 in {PORT_RANGE}")


# -- the compose file -------------------------------------------------------------------------
def _yaml_scalar(value: object) -> str:
    # JSON scalars are valid YAML flow scalars; "$" is compose's interpolation sigil.
    text = json.dumps(value)
    return text.replace("$", "$$") if isinstance(value, str) else text


def _yaml(value: object, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{key}:\n{_yaml(item, indent + 1)}")
            elif isinstance(item, dict):
                lines.append(f"{pad}{key}: {{}}")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(f"{pad}- {_yaml_scalar(item)}" for item in value)
    return pad + _yaml_scalar(value)


def compose_document(
    project: str, hosts: Sequence[LabHost], image: str, dind: str, extra_labels: dict[str, str]
) -> str:
    """The compose file (format 2.4, for Debian's docker-compose 1.29) for these hosts."""
    init = _data("host-init.sh").decode()
    services: dict[str, object] = {}
    volumes: dict[str, object] = {}
    for host in hosts:
        service: dict[str, object] = {
            "image": image,
            "container_name": host.container,
            "hostname": host.name,
            "entrypoint": ["/bin/sh", "-c", init],
            "ports": [f"127.0.0.1:{host.port}:22"],
            "stop_grace_period": "5s",
            "tmpfs": ["/run"],
            "labels": {LAB_LABEL: project, "minidock.lab.host": host.name, **extra_labels},
        }
        dind_volumes = [f"{host.name}-docker:/var/lib/docker"]
        if dind == "privileged":
            service["privileged"] = True
        else:
            service["cap_add"] = ["ALL"]
            service["cap_drop"] = ["SYS_RESOURCE"]
            service["security_opt"] = ["seccomp=unconfined", "apparmor=unconfined"]
            service["device_cgroup_rules"] = ["a *:* rwm"]
            dind_volumes.append("/sys/fs/cgroup:/sys/fs/cgroup:rw")
        service["volumes"] = dind_volumes
        services[host.name] = service
        volumes[f"{host.name}-docker"] = {"labels": {LAB_LABEL: project}}
    header = "# generated by minidock lab (minidock/lab.py); do not edit\n"
    document = {"version": "2.4", "services": services, "volumes": volumes}
    return header + _yaml(document) + "\n"


def remove_project(project: str) -> None:
    """Remove a compose project's containers, volumes and networks without its compose file
    (found by compose's own labels)."""
    label = f"label=com.docker.compose.project={project}"
    ids = _run(["docker", "ps", "-aq", "--filter", label]).stdout.split()
    if ids:
        _run(["docker", "rm", "-f", "-v", *ids])
    for kind in ("volume", "network"):
        names = _run(["docker", kind, "ls", "-q", "--filter", label]).stdout.split()
        if names:
            _run(["docker", kind, "rm", *names], check=False)


def known_hosts_line(port: int, host_key: str) -> str:
    kind, blob = host_key.split()[:2]
    return f"[127.0.0.1]:{port} {kind} {blob}\n"


# -- the lab ----------------------------------------------------------------------------------
@dataclass
class Lab:
    """A lab fleet rooted at `root` (default: the working directory).

    Files: `root/.lab/` (docker-compose.yml, id_ed25519[.pub], known_hosts, lab.json) and
    `root/inventory/lab.toml`. Containers: `<project>-hostN`, compose project `project`.
    """

    root: Path = field(default_factory=Path.cwd)
    project: str = DEFAULT_PROJECT
    labels: dict[str, str] = field(default_factory=dict)  # extra labels on host containers
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    # -- paths
    @property
    def lab_dir(self) -> Path:
        return self.root / ".lab"

    @property
    def compose_path(self) -> Path:
        return self.lab_dir / "docker-compose.yml"

    @property
    def inventory_path(self) -> Path:
        return self.root / "inventory" / "lab.toml"

    @property
    def key_path(self) -> Path:
        return self.lab_dir / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.lab_dir / "known_hosts"

    @property
    def state_path(self) -> Path:
        return self.lab_dir / "lab.json"

    # -- state
    def hosts(self) -> list[LabHost]:
        """The lab's hosts as last written by `prepare`/`up` (empty when there is no lab)."""
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return []
        if state.get("project") != self.project:
            return []
        return [LabHost(**item) for item in state["hosts"]]

    def host(self, name: str) -> LabHost:
        for host in self.hosts():
            if host.name == name:
                return host
        known = ", ".join(h.name for h in self.hosts()) or "none: run `minidock lab up`"
        raise UnknownHostError(f"no lab host {name!r} (hosts: {known})")

    def _dind_mode(self) -> str:
        try:
            return str(json.loads(self.state_path.read_text())["dind"])
        except (FileNotFoundError, KeyError):
            return ""

    def _write_state(self, hosts: Sequence[LabHost], dind: str, image: str) -> None:
        state = {
            "project": self.project,
            "dind": dind,
            "image": image,
            "hosts": [h.__dict__ for h in hosts],
        }
        _write_atomic(self.state_path, json.dumps(state, indent=2).encode())

    # -- docker helpers
    def container_states(self) -> dict[str, str]:
        """Container state of every lab host by host name ("missing" when absent)."""
        hosts = self.hosts()
        states = {h.name: "missing" for h in hosts}
        if not hosts:
            return states
        proc = _run(
            [
                "docker",
                "inspect",
                "-f",
                "{{.Name}} {{.State.Status}}",
                *[h.container for h in hosts],
            ],
            check=False,
        )
        by_container = {h.container: h.name for h in hosts}
        for line in proc.stdout.splitlines():
            name, _, status = line.strip().lstrip("/").partition(" ")
            if name in by_container:
                states[by_container[name]] = status
        return states

    def container_state(self, host: str) -> str:
        return self.container_states().get(host, "missing")

    def container_port(self, host: str) -> int | None:
        """The loopback port docker publishes the host's sshd on (None when not running)."""
        proc = _run(["docker", "port", self.host(host).container, "22/tcp"], check=False)
        for line in proc.stdout.splitlines():
            address, _, port = line.strip().rpartition(":")
            if address == "127.0.0.1" and port.isdigit():
                return int(port)
        return None

    def exec(
        self,
        host: str,
        *argv: str,
        input: bytes | None = None,
        check: bool = True,
        timeout: float | None = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the host container (docker exec), for setup and assertions."""
        flags = ["-i"] if input is not None else []
        container = self.host(host).container
        proc = _run(
            ["docker", "exec", *flags, container, *argv], input=input, check=check, timeout=timeout
        )
        return subprocess.CompletedProcess(list(argv), proc.returncode, proc.stdout, proc.stderr)

    def sh(self, host: str, script: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell script inside the host container."""
        return self.exec(host, "sh", "-c", script, check=check)

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> _Process:
        """Run docker-compose on the lab's compose file and project."""
        argv = ["docker-compose", "-f", str(self.compose_path), "-p", self.project, *args]
        return _run(argv, check=check, timeout=timeout)

    # -- lifecycle
    def prepare(self, n: int = 3) -> Path:
        """Everything before the containers start: images, key, DinD mode, ports, the
        compose file. Returns the compose file's path. Keeps the ports of hosts whose
        containers still exist, so re-running `up` leaves a running lab alone."""
        if n < 1:
            raise LabError("a lab needs at least one host")
        if not engine_available():
            raise LabError("no Docker engine answers `docker info` (run scripts/engine.sh)")
        self._check_project_owner()
        started = time.monotonic()
        self.timings.update({f"build {tag}": s for tag, s in build_images().items()})
        self.timings["images"] = time.monotonic() - started
        self._ensure_key()
        existing = {h.name: h for h in self.hosts()}
        states = self.container_states() if existing else {}
        dind = self._dind_mode() if existing else ""
        if not dind:
            dind = detect_dind_mode()
        hosts: list[LabHost] = []
        taken: set[int] = set()
        for i in range(1, n + 1):
            name = f"host{i}"
            old = existing.get(name)
            if old and states.get(name, "missing") != "missing" and old.port not in taken:
                port = old.port
            else:
                port = _pick_port(taken)
            taken.add(port)
            hosts.append(LabHost(name, port, zone_for(i), f"{self.project}-{name}"))
        image = host_image_tag()
        document = compose_document(self.project, hosts, image, dind, self.labels)
        _write_atomic(self.compose_path, document.encode())
        self._write_state(hosts, dind, image)
        return self.compose_path

    def _check_project_owner(self) -> None:
        """Refuse to take over a compose project that another lab directory runs."""
        label = f"label=com.docker.compose.project={self.project}"
        fmt = '{{.Label "com.docker.compose.project.working_dir"}}'
        dirs = set(_run(["docker", "ps", "-a", "--filter", label, "--format", fmt]).stdout.split())
        others = dirs - {str(self.lab_dir)}
        if others:
            where = ", ".join(sorted(others))
            raise LabError(
                f"compose project {self.project!r} belongs to the lab in {where}:"
                " run `minidock lab down` there, or pick another --project"
            )

    def provision(self, timeout: float = 90.0) -> None:
        """Everything after the containers start: authorized key, pinned known_hosts, the
        inventory, images loaded into each host; then wait until every host answers SSH
        and docker."""
        hosts = self.hosts()
        if not hosts:
            raise LabError("no lab: run `minidock lab up`")
        started = time.monotonic()
        public = self.key_path.with_suffix(".pub").read_bytes()
        install_key = (
            "umask 077 && mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys.new"
            " && mv /root/.ssh/authorized_keys.new /root/.ssh/authorized_keys"
        )
        host_keys: dict[str, str] = {}

        def setup(host: LabHost) -> None:
            self.exec(host.name, "sh", "-c", install_key, input=public)
            host_keys[host.name] = self._read_host_key(host.name, deadline=started + timeout)

        _parallel(setup, hosts)
        self._write_known_hosts(hosts, host_keys)
        self._write_inventory(hosts)
        self.timings["keys"] = time.monotonic() - started
        step = time.monotonic()
        self.wait_docker([h.name for h in hosts], timeout=max(1.0, started + timeout - step))
        self.timings["docker ready"] = time.monotonic() - step
        step = time.monotonic()
        _parallel(self.load_images, [h.name for h in hosts])
        self.timings["load images"] = time.monotonic() - step
        step = time.monotonic()
        self.wait_ready([h.name for h in hosts], timeout=max(1.0, started + timeout - step))
        self.timings["ssh ready"] = time.monotonic() - step
        self.timings["provision"] = time.monotonic() - started

    def up(self, n: int = 3, timeout: float = 120.0) -> list[LabHost]:
        """Start (or complete) a lab of n hosts and write its inventory. Idempotent."""
        started = time.monotonic()
        self.prepare(n)
        step = time.monotonic()
        self.compose("up", "-d", "--remove-orphans")
        self.timings["compose up"] = time.monotonic() - step
        self.provision(timeout=timeout)
        self.timings["up"] = time.monotonic() - started
        return self.hosts()

    def down(self) -> None:
        """Remove the host containers and their volumes, the inventory and known_hosts."""
        if self.compose_path.exists():
            self.compose("down", "-v", "--remove-orphans", "-t", "2")
        # and whatever the file no longer names (a smaller re-`up`, or the lab dir is gone),
        # found by compose's project label
        remove_project(self.project)
        for path in (self.inventory_path, self.known_hosts_path, self.state_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # -- faults
    def kill(self, host: str, mode: KillMode = "stop") -> None:
        """Make the fault `mode` on `host` (FLEET-NOTES "Network"). Idempotent."""
        if mode not in KILL_MODES:
            raise LabError(f"unknown kill mode {mode!r} (one of {', '.join(KILL_MODES)})")
        lab_host = self.host(host)
        state = self.container_state(host)
        if mode == "stop":
            if state in ("running", "paused", "restarting"):
                _run(["docker", "stop", "-t", "2", lab_host.container])
            return
        if mode == "pause":
            if state != "paused":
                self._require_running(host, state)
                _run(["docker", "pause", lab_host.container])
            return
        self._require_running(host, state)
        if mode == "sshd":
            self.sh(host, "pkill -KILL -x sshd; true")
        elif mode == "dockerd":
            # SIGKILL: a crash. containerd goes with it; the tasks' shims keep them running,
            # and live-restore picks them up again at revive.
            self.sh(
                host,
                "pkill -KILL -x dockerd; i=0;"
                " while pgrep -x dockerd >/dev/null && [ $i -lt 50 ]; do sleep 0.1;"
                " i=$((i + 1)); done; true",
            )
        else:  # partition
            rule = " ".join(PARTITION_RULE)
            self.sh(host, f"iptables -C {rule} 2>/dev/null || iptables -I {rule}")

    def _require_running(self, host: str, state: str) -> None:
        if state != "running":
            raise LabError(f"{host} is {state}: `minidock lab revive {host}` first")

    def revive(self, host: str, timeout: float = 60.0) -> None:
        """End whatever fault `host` has (any mix of them), then wait until it answers SSH
        and docker again."""
        self._heal(self.host(host), self.container_state(host), "")
        self.wait_ready([host], timeout=timeout)

    def reset(self, timeout: float = 60.0) -> None:
        """Revive every host and remove every container labelled minidock.cluster on it:
        the state between two tests."""
        states = self.container_states()
        _parallel(lambda h: self._heal(h, states[h.name], CLEAN_SCRIPT), self.hosts())
        self.wait_ready(timeout=timeout)

    def _heal(self, host: LabHost, state: str, then: str) -> None:
        if state == "missing":
            raise LabError(f"{host.name} has no container: run `minidock lab up`")
        if state == "paused":
            _run(["docker", "unpause", host.container])
        elif state != "running":
            _run(["docker", "start", host.container])
        self.sh(host.name, HEAL_SCRIPT + then)

    # -- readiness and status
    def wait_docker(self, hosts: Sequence[str], timeout: float = 60.0) -> None:
        """Wait until `docker info` answers inside each host (via docker exec)."""
        deadline = time.monotonic() + timeout

        def one(host: str) -> None:
            while True:
                proc = self.exec(host, "docker", "info", check=False, timeout=20)
                if proc.returncode == 0:
                    return
                if time.monotonic() > deadline:
                    raise LabError(f"{host}: dockerd not answering: {proc.stderr.strip()}")
                time.sleep(0.2)

        _parallel(one, hosts)

    def wait_ready(self, hosts: Sequence[str] | None = None, timeout: float = 60.0) -> None:
        """Wait until each host takes an SSH session with the lab's key and pinned host
        key, and `docker ps` succeeds in it."""
        names = list(hosts) if hosts is not None else [h.name for h in self.hosts()]

        async def one(host: str) -> None:
            deadline = time.monotonic() + timeout
            while True:
                status = await self._probe(host)
                if status[0] and status[1]:
                    return
                if time.monotonic() > deadline:
                    raise LabError(f"{host}: not ready after {timeout:.0f}s: {status[3]}")
                await asyncio.sleep(0.2)

        async def all_hosts() -> None:
            await asyncio.gather(*(one(h) for h in names))

        _run_coro(all_hosts())

    def connect_options(self, host: str) -> dict[str, Any]:
        """asyncssh.connect keyword arguments for a lab host (address and port included)."""
        lab_host = self.host(host)
        return {
            "host": "127.0.0.1",
            "port": lab_host.port,
            "username": SSH_USER,
            "client_keys": [str(self.key_path)],
            "known_hosts": str(self.known_hosts_path),
            "config": [],
            "agent_path": None,
            "connect_timeout": CONNECT_TIMEOUT,
        }

    @contextlib.asynccontextmanager
    async def connect(
        self, host: str, **overrides: Any
    ) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """`async with lab.connect("host1") as conn:` an SSH session to a lab host."""
        options = {**self.connect_options(host), **overrides}
        async with asyncssh.connect(**options) as conn:
            yield conn

    async def _probe(self, host: str) -> tuple[bool, bool, int | None, str]:
        """(ssh ok, docker ok, running containers, error) for one host."""
        try:
            async with self.connect(host) as conn:
                result = await asyncio.wait_for(
                    conn.run("docker ps -q", check=False), timeout=CONNECT_TIMEOUT * 5
                )
        except TimeoutError:
            return False, False, None, f"ssh: timed out after {CONNECT_TIMEOUT:g}s"
        except ConnectionRefusedError:
            return False, False, None, "ssh: connection refused"
        except (OSError, asyncssh.Error) as exc:
            return False, False, None, f"ssh: {type(exc).__name__}: {exc}".strip(" :")
        if result.exit_status != 0:
            return True, False, None, f"docker: {str(result.stderr).strip()}"
        return True, True, len(str(result.stdout).split()), ""

    async def astatus(self) -> list[HostStatus]:
        hosts = self.hosts()
        states = await asyncio.to_thread(self.container_states)
        probes = await asyncio.gather(*(self._probe(h.name) for h in hosts))
        return [
            HostStatus(h.name, h.container, states[h.name], h.port, ssh, dock, running, error)
            for h, (ssh, dock, running, error) in zip(hosts, probes, strict=True)
        ]

    def status(self) -> list[HostStatus]:
        """Every host: its container state and what a real SSH session finds."""
        return _run_coro(self.astatus())

    def run_ssh(self, host: str, command: str, **overrides: Any) -> asyncssh.SSHCompletedProcess:
        """Run a command on a lab host over SSH (sync helper for tests and scripts)."""

        async def go() -> asyncssh.SSHCompletedProcess:
            async with self.connect(host, **overrides) as conn:
                return await conn.run(command, check=False)

        return _run_coro(go())

    # -- provisioning details
    def _ensure_key(self) -> None:
        """The lab's key pair; the private key 0600 (an inventory naming a key that group or
        others may read is refused)."""
        if self.key_path.exists() and self.key_path.with_suffix(".pub").exists():
            os.chmod(self.key_path, 0o600)
            return
        key = asyncssh.generate_private_key("ssh-ed25519", comment="minidock-lab")
        _write_atomic(self.key_path, key.export_private_key(), mode=0o600)
        _write_atomic(self.key_path.with_suffix(".pub"), key.export_public_key(), mode=0o644)

    def _read_host_key(self, host: str, deadline: float) -> str:
        while True:
            proc = self.exec(host, "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=False)
            if proc.returncode == 0 and proc.stdout.startswith("ssh-ed25519 "):
                return proc.stdout.strip()
            if time.monotonic() > deadline:
                raise LabError(f"{host}: no ssh host key: {proc.stderr.strip()}")
            time.sleep(0.1)

    def _write_known_hosts(self, hosts: Sequence[LabHost], keys: dict[str, str]) -> None:
        text = "".join(known_hosts_line(h.port, keys[h.name]) for h in hosts)
        _write_atomic(self.known_hosts_path, text.encode())

    def _write_inventory(self, hosts: Sequence[LabHost]) -> None:
        base = self.inventory_path.parent
        document = {
            "defaults": {
                "user": SSH_USER,
                "identity_file": os.path.relpath(self.key_path, base),
                "known_hosts": os.path.relpath(self.known_hosts_path, base),
                "connect_timeout": f"{CONNECT_TIMEOUT:g}s",
                "down_after": 2,
            },
            "hosts": [
                {
                    "name": h.name,
                    "address": "127.0.0.1",
                    "port": h.port,
                    "labels": {"zone": h.zone},
                    "cpus": HOST_CPUS,
                    "memory": HOST_MEMORY,
                }
                for h in hosts
            ],
        }
        header = (
            "# Generated by `minidock lab up` for the local lab fleet; rewritten on every up.\n"
            "# Paths are relative to this file.\n"
        )
        lines = [header, tomli_w.dumps({"defaults": document["defaults"]})]
        for h in hosts:  # written by hand to keep `labels` an inline table, as in the docs
            lines.append(
                f'\n[[hosts]]\nname = {json.dumps(h.name)}\naddress = "127.0.0.1"\n'
                f"port = {h.port}\nlabels = {{ zone = {json.dumps(h.zone)} }}\n"
                f"cpus = {HOST_CPUS}\nmemory = {json.dumps(HOST_MEMORY)}\n"
            )
        text = "".join(lines)
        assert tomllib.loads(text)["hosts"] == document["hosts"]
        _write_atomic(self.inventory_path, text.encode())

    def load_images(self, host: str, images: Sequence[str] = WORKLOAD_IMAGES) -> list[str]:
        """Copy images into a host (docker save | docker load) unless it has the same image
        id already. Returns the images that were loaded."""
        local = {image: _image_id(image) for image in images}
        missing = [image for image, image_id in local.items() if image_id is None]
        if missing:
            raise LabError(f"images missing locally: {missing} (run `minidock lab up`)")
        inside = self.exec(
            host, "docker", "image", "inspect", "-f", "{{json .RepoTags}} {{.Id}}", *images,
            check=False,
        )  # fmt: skip
        present: set[tuple[str, str]] = set()
        for line in inside.stdout.splitlines():
            tags, _, image_id = line.rpartition(" ")
            present.update((tag, image_id) for tag in json.loads(tags or "[]"))
        wanted = [image for image in images if (image, local[image]) not in present]
        if not wanted:
            return []
        container = self.host(host).container
        with subprocess.Popen(["docker", "save", *wanted], stdout=subprocess.PIPE) as save:
            load = subprocess.run(
                ["docker", "exec", "-i", container, "docker", "load", "-q"],
                stdin=save.stdout,
                capture_output=True,
                check=False,
                timeout=300,
            )
            assert save.stdout is not None
            save.stdout.close()
        if save.returncode != 0 or load.returncode != 0:
            raise LabError(f"{host}: loading {wanted} failed: {load.stderr.decode().strip()}")
        return wanted


# -- command line -----------------------------------------------------------------------------
class Mode(enum.StrEnum):
    """The fault `lab kill` makes (KillMode as a typer choice)."""

    STOP = "stop"
    PAUSE = "pause"
    SSHD = "sshd"
    DOCKERD = "dockerd"
    PARTITION = "partition"


_MODES: dict[Mode, KillMode] = {
    Mode.STOP: "stop",
    Mode.PAUSE: "pause",
    Mode.SSHD: "sshd",
    Mode.DOCKERD: "dockerd",
    Mode.PARTITION: "partition",
}


lab_app = typer.Typer(
    name="lab",
    help="A local fleet of SSH + Docker hosts in containers, with an inventory for it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_console = Console()
_errors = Console(stderr=True)


def _lab(ctx: typer.Context) -> Lab:
    options = ctx.obj if isinstance(ctx.obj, dict) else {}
    root = options.get("lab_root")
    return Lab(Path(root) if root else Path.cwd(), project=options.get("project", DEFAULT_PROJECT))


def _fail(exc: LabError) -> typer.Exit:
    _errors.print(f"[red]lab: {exc}[/red]", highlight=False)
    return typer.Exit(2 if isinstance(exc, UnknownHostError) else 1)


RootOption = Annotated[
    Path | None,
    typer.Option("--root", help="Directory holding .lab/ and inventory/ (default: working dir)."),
]
ProjectOption = Annotated[str, typer.Option("--project", help="Compose project name.")]
HostsOption = Annotated[int, typer.Option("--hosts", min=1, max=20, help="How many hosts.")]
HostArgument = Annotated[str, typer.Argument(help="A lab host, e.g. host2.")]
ModeOption = Annotated[Mode, typer.Option("--mode", help="Which fault to make.")]


@lab_app.callback()
def _lab_options(
    ctx: typer.Context, root: RootOption = None, project: ProjectOption = DEFAULT_PROJECT
) -> None:
    options = ctx.obj if isinstance(ctx.obj, dict) else {}
    ctx.obj = {**options, "lab_root": root, "project": project}


@lab_app.command("up")
def up_command(ctx: typer.Context, hosts: HostsOption = 3) -> None:
    """Build the images if needed, start host1..hostN, write inventory/lab.toml."""
    lab = _lab(ctx)
    try:
        lab.up(hosts)
    except LabError as exc:
        raise _fail(exc) from exc
    rel = os.path.relpath(lab.inventory_path)
    _console.print(f"lab up: {hosts} hosts in {lab.timings['up']:.1f}s; inventory: {rel}")


@lab_app.command("down")
def down_command(ctx: typer.Context) -> None:
    """Remove the lab's hosts, their volumes and inventory/lab.toml."""
    try:
        _lab(ctx).down()
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print("lab down")


@lab_app.command("status")
def status_command(ctx: typer.Context) -> None:
    """Each host: container state, SSH port, and whether SSH + `docker ps` work."""
    lab = _lab(ctx)
    try:
        rows = lab.status()
    except LabError as exc:
        raise _fail(exc) from exc
    if not rows:
        _console.print("no lab here (run `minidock lab up`)")
        raise typer.Exit(1)
    table = Table(title=f"lab {lab.project} ({os.path.relpath(lab.inventory_path)})")
    for column in ("host", "container", "ssh port", "ssh", "docker ps", "running", "error"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            row.state,
            str(row.port),
            "yes" if row.ssh else "[red]no[/red]",
            "yes" if row.docker else "[red]no[/red]",
            "-" if row.running is None else str(row.running),
            row.error,
        )
    _console.print(table)


@lab_app.command("kill")
def kill_command(ctx: typer.Context, host: HostArgument, mode: ModeOption = Mode.STOP) -> None:
    """Make a fault: stop (host off), pause (hung), sshd, dockerd (daemon dead), partition."""
    try:
        _lab(ctx).kill(host, _MODES[mode])
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(f"{host}: {mode.value}")


@lab_app.command("revive")
def revive_command(ctx: typer.Context, host: HostArgument) -> None:
    """End any fault on HOST and wait until it answers SSH and docker again."""
    try:
        _lab(ctx).revive(host)
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(f"{host}: ready")


if __name__ == "__main__":
    lab_app()
