"""A scale fleet for the SSH side: N real OpenSSH `sshd` processes on loopback addresses,
each with a `docker` stand-in on its PATH. For benchmarks only; not shipped, not a test fleet.

    .venv/bin/python benchmarks/scale_fleet.py up --hosts 500     # .scale/ in the cwd
    .venv/bin/python benchmarks/scale_fleet.py seed --per-host 2  # containers to observe
    .venv/bin/python benchmarks/scale_fleet.py down

Each host `sNNNN` is one `sshd` (Debian's OpenSSH 9.2, its own config, host key and pid
file) listening on 127.100.X.Y:2222 (127.101.X.Y when another fleet holds 127.100, and so
on), with its own directory holding what the host's
`docker` and `/proc/net` say: `benchmarks/standin/docker.sh` answers `ps`, `inspect`,
`run`, `stop`, `rm`, `image inspect`, `logs` and `pull` from per-host state files in the
real CLI's output formats (tests/data/docker), and `benchmarks/standin/cat.sh` serves a
recorded /proc/net table of one host (tests/data/host), since every host here shares one
kernel (for the same reason starting the fleet raises the machine's inotify instances to
fit every host's `docker events`: `inotify_for`). The stand-ins are found first on the
session's PATH (sshd_config `SetEnv`).

Why OpenSSH rather than asyncssh servers: the hosts' side of the benchmark is then the
real server MiniDock meets in production (key exchange, privilege separation, a fork and
exec of the user's shell for every session, MaxSessions), and it is C, so the fleet costs
this machine's two cores as little CPU as a real fleet would and leaves the rest to the
controller under test; an asyncssh server fleet would share Python's interpreter costs
with the client it is measuring. What it is not: Docker. A stand-in container runs
nothing, starts in a millisecond and is healthy at once; the lab fleet (`minidock lab`)
stays the real thing for correctness.

sshd is taken from PATH or /usr/sbin; otherwise Debian's `openssh-server` (and `libwrap0`)
packages are fetched with `apt-get download` and unpacked under `.scale/sshd/`, so nothing
is installed and no system sshd is started; the system user `sshd` (which the package would
add, for sshd's privilege separation) is added when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncssh
import tomli_w

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).resolve().parent / "standin"
DATA = ROOT / "tests" / "data"
PORT = 2222
IMAGES = ("bench/web:1", "bench/web:2", "minidock-lab/web:5")


NETS = range(100, 200)  # the second octet of a fleet's loopback network, 127.NET.0.0/16


def address(i: int, net: int = NETS[0]) -> str:
    """Host i (from 1) on the fleet's loopback network: 127.100.0.1 ... 127.100.3.250 ..."""
    return f"127.{net}.{(i - 1) // 250}.{(i - 1) % 250 + 1}"


def _taken(where: str) -> bool:
    """Whether something already listens on where:PORT (another fleet's sshd)."""
    with socket.socket() as sock:
        try:
            sock.bind((where, PORT))
        except OSError:
            return True
    return False


def host_name(i: int) -> str:
    return f"s{i:04d}"


# -- sshd -------------------------------------------------------------------------------------
def sshd_binary(cache: Path) -> tuple[str, dict[str, str]]:
    """An OpenSSH sshd to run, with the environment it needs (a library path when unpacked)."""
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else "")
    if found:
        return found, {}
    unpacked = cache / "root"
    binary = unpacked / "usr/sbin/sshd"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["apt-get", "download", "openssh-server", "libwrap0"],
            cwd=cache,
            check=True,
            capture_output=True,
        )
        for deb in sorted(cache.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    libs = unpacked / "usr/lib/x86_64-linux-gnu"
    return str(binary), {"LD_LIBRARY_PATH": str(libs)}


def sshd_config(fleet: Path, host: Path, listen: str) -> str:
    path = f"{host}/bin:/usr/local/bin:/usr/bin:/bin"
    return f"""\
ListenAddress {listen}:{PORT}
HostKey {host}/ssh_host_ed25519_key
PidFile {host}/sshd.pid
AuthorizedKeysFile {fleet}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
StrictModes no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
MaxSessions 32
MaxStartups 200:30:400
LogLevel ERROR
Subsystem sftp internal-sftp
SetEnv PATH={path} STANDIN_HOST={host} HOME={host}
"""


# -- the docker stand-in's inspect document -----------------------------------------------------
def inspect_template() -> str:
    """The stand-in's `doc` shell function: healthy.json's document (a real `docker inspect`
    of a MiniDock task), with every field MiniDock reads, and the ids in its paths, made
    variables of the stand-in (@@name@@ inside a string, "@@raw:name@@" a whole value)."""
    doc: dict[str, Any] = json.loads((DATA / "docker" / "healthy.json").read_text())[0]
    recorded = doc["Id"]
    doc.update(Id="@@id@@", Created="@@created@@", Name="/@@name@@", Image="@@image_id@@")
    doc.update(Path="@@raw:path_j@@", Args="@@raw:args@@", State="@@raw:state@@")
    doc["HostConfig"].update(
        PortBindings="@@raw:bindings_obj@@", NanoCpus="@@raw:nano@@", Memory="@@raw:memory@@"
    )
    doc["Config"].update(
        Hostname="@@short@@",
        Image="@@raw:image_j@@",
        Cmd="@@raw:cmd@@",
        Labels="@@raw:labels_obj@@",
        ExposedPorts="@@raw:exposed_obj@@",
        Healthcheck="@@raw:healthcheck@@",
    )
    doc["NetworkSettings"]["Ports"] = "@@raw:net_ports_obj@@"
    text = json.dumps([doc], indent=4)[2:-2]  # the object, indented as docker prints it
    text = text.replace(recorded, "@@id@@").replace(recorded[:12], "@@short@@")
    body = ""
    for n, token in enumerate(re.split(r'("@@raw:\w+@@"|@@\w+@@)', text)):
        if n % 2 == 0:
            body += shlex.quote(token) if token else ""
        else:
            body += '"${' + token.strip('"').strip("@").removeprefix("raw:") + '}"'
    return (
        "doc() { # the loaded container's inspect document -> $DOC\n"
        '    short=${id%"${id#????????????}"}\n'
        '    labels_obj="{$labels\n            }"\n'
        '    bindings_obj="{$bindings\n            }"\n'
        '    exposed_obj="{$exposed\n            }"\n'
        '    net_ports_obj="{$net_ports\n            }"\n'
        f"    DOC={body}\n"
        "}\n"
    )


INOTIFY = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_for(hosts: int) -> None:
    """Room for every host's `docker events` (the stand-in's `tail -f` of its event log
    takes an inotify instance): the hosts share one kernel and one user here, and at the
    default of 128 instances the rest fall back to polling once a second, which a real
    fleet (a kernel each) never does. Raised for the whole machine, as root only: several
    controllers follow a host each during a handover, hence four a host."""
    want = 4 * hosts + 256
    try:
        if int(INOTIFY.read_text()) < want:
            INOTIFY.write_text(f"{want}\n")
    except (OSError, ValueError):
        print(f"note: {INOTIFY} not raised to {want}: event streams past it poll", file=sys.stderr)


class ScaleFleet:
    """The fleet under `root`: its files, its sshd processes, its inventory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.inventory = self.root / "inventory.toml"
        self.key = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"

    @property
    def net(self) -> int:
        """This fleet's loopback network (127.NET.0.0/16), chosen by `create`: the first of
        NETS where no other fleet listens, so a benchmark's fleet left running and the
        smoke test's fleet never answer for each other."""
        recorded = self.root / "net"
        if not recorded.exists():
            mine = {self.host_dir(h) for h in self.hosts}
            free = next(n for n in NETS if mine or not _taken(address(1, n)))
            recorded.parent.mkdir(parents=True, exist_ok=True)
            recorded.write_text(f"{free}\n")
        return int(recorded.read_text())

    def address(self, i: int) -> str:
        return address(i, self.net)

    @property
    def hosts(self) -> list[str]:
        return (
            sorted(p.name for p in (self.root / "hosts").iterdir())
            if (self.root / "hosts").exists()
            else []
        )

    def host_dir(self, name: str) -> Path:
        return self.root / "hosts" / name

    # -- files --------------------------------------------------------------------------------
    def create(self, n: int) -> None:
        """Keys, configs, stand-ins and the inventory for hosts s0001..sNNNN (idempotent)."""
        # The network is chosen before the first host's directory exists (a fleet with host
        # directories and no record of its network is one made before it: on 127.100).
        assert self.net in NETS
        (self.root / "hosts").mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(self.key))
            self.key.chmod(0o600)
            key.write_public_key(str(self.root / "authorized_keys"))
        self._standins()
        lines = []
        for i in range(1, n + 1):
            lines.append(self._host(i))
        self.known_hosts.write_text("".join(lines))
        self._inventory(n)

    def _standins(self) -> None:
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        docker = (STANDIN / "docker.sh").read_text().replace("#@DOC@\n", inspect_template())
        (bin_dir / "docker").write_text(docker)
        shutil.copy(STANDIN / "cat.sh", bin_dir / "cat")
        for name in ("docker", "cat"):
            (bin_dir / name).chmod(0o755)
        net = self.root / "proc" / "net"
        net.mkdir(parents=True, exist_ok=True)
        for proto in ("tcp", "udp"):
            both = (DATA / "host" / f"proc-net-{proto}.txt").read_text()
            header = both.index("  sl ", 1)  # the IPv6 table starts with its own header line
            (net / proto).write_text(both[:header])
            (net / f"{proto}6").write_text(both[header:])
        digest = "sha256:" + "c6de011504a610400713c49d1a6d9061073a3f04109ffcc3f60935c7fee1ec9a"
        (self.root / "images").write_text("".join(f"{image} {digest}\n" for image in IMAGES))

    def _host(self, i: int) -> str:
        """One host's directory; its known_hosts line."""
        d = self.host_dir(host_name(i))
        (d / "state").mkdir(parents=True, exist_ok=True)
        key_path = d / "ssh_host_ed25519_key"
        if not key_path.exists():
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(key_path))
            key_path.chmod(0o600)
            key.write_public_key(str(key_path) + ".pub")
        (d / "sshd_config").write_text(sshd_config(self.root, d, self.address(i)))
        for link, target in (
            ("bin", self.root / "bin"),
            ("proc", self.root / "proc"),
            ("images", self.root / "images"),
        ):
            if not (d / link).exists():
                (d / link).symlink_to(target)
        (d / "prefix").write_text(f"{i:08x}" + "5eed" * 10 + "\n")  # 48 hex digits
        algorithm, blob = Path(str(key_path) + ".pub").read_text().split()[:2]
        return f"[{self.address(i)}]:{PORT} {algorithm} {blob}\n"

    def _inventory(self, n: int, connect_timeout: str = "10s") -> None:
        doc = {
            "defaults": {
                "user": "root",
                "port": PORT,
                "identity_file": str(self.key),
                "known_hosts": str(self.known_hosts),
                "connect_timeout": connect_timeout,
                "probe_timeout": "30s",
                "down_after": 2,
            },
            "hosts": [
                {
                    "name": host_name(i),
                    "address": self.address(i),
                    "labels": {"zone": "abcde"[i % 5]},
                }
                for i in range(1, n + 1)
            ],
        }
        self.inventory.write_text(tomli_w.dumps(doc))

    # -- processes ----------------------------------------------------------------------------
    def start(self) -> float:
        """Start every host's sshd that is not running; seconds until all accept connections."""
        binary, extra = sshd_binary(self.root / "sshd")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation root
        if subprocess.run(["getent", "passwd", "sshd"], capture_output=True).returncode != 0:
            # the user Debian's package would create: sshd's privilege-separated child runs as it
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--home-dir",
                    "/run/sshd",
                    "--shell",
                    "/usr/sbin/nologin",
                    "sshd",
                ],
                check=True,
            )
        env = {**os.environ, **extra}
        inotify_for(len(self.hosts))
        begin = time.monotonic()

        def one(name: str) -> None:
            d = self.host_dir(name)
            if self._pid(name) is None:
                subprocess.run(
                    [binary, "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")],
                    env=env,
                    check=True,
                )

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, self.hosts))
        for i in range(1, len(self.hosts) + 1):
            self._wait_listening(self.address(i))
        return time.monotonic() - begin

    def _pid(self, name: str) -> int | None:
        """The host's running sshd listener, by its pid file (None if not running)."""
        pid_file = self.host_dir(name) / "sshd.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    @staticmethod
    def _wait_listening(where: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((where, PORT), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the sshd listeners this fleet started (by their pid files, nothing else)."""
        pids = [p for p in (self._pid(h) for h in self.hosts) if p is not None]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [p for p in (self._pid(h) for h in self.hosts) if p is not None]

    # -- state ----------------------------------------------------------------------------------
    def ready(self, n: int) -> list[str]:
        """At least `n` hosts created and started, every host without containers: the
        names of the first `n`, which a benchmark's spec spreads over."""
        self.create(max(n, len(self.hosts)))
        self.start()
        self.clear()
        return list(self.hosts)[:n]

    def inventory_text(self, n: int) -> str:
        """The inventory of the first `n` hosts only: a fleet made larger by an earlier
        benchmark keeps its other hosts running, and a benchmark of `n` must not watch
        them."""
        doc = tomllib.loads(self.inventory.read_text())
        doc["hosts"] = doc["hosts"][:n]
        return tomli_w.dumps(doc)

    def clear(self) -> None:
        """Every host without containers."""
        for name in self.hosts:
            for f in (self.host_dir(name) / "state").iterdir():
                f.unlink()

    def snapshot(self) -> None:
        """Keep every host's containers as they are now, for `restore`."""
        for name in self.hosts:
            d = self.host_dir(name)
            shutil.rmtree(d / "state.snap", ignore_errors=True)
            shutil.copytree(d / "state", d / "state.snap")

    def restore(self) -> None:
        """Every host's containers as at the last `snapshot`."""
        for name in self.hosts:
            d = self.host_dir(name)
            shutil.rmtree(d / "state")
            shutil.copytree(d / "state.snap", d / "state")

    def docker(self, name: str, *argv: str, input: str = "") -> subprocess.CompletedProcess[str]:
        """The host's docker stand-in, run here (to seed state or look at it)."""
        env = {**os.environ, "STANDIN_HOST": str(self.host_dir(name))}
        return subprocess.run(
            [str(self.root / "bin" / "docker"), *argv],
            env=env,
            input=input,
            capture_output=True,
            text=True,
            check=False,
        )

    def seed(self, per_host: int, cluster: str = "seeded", foreign: bool = True) -> None:
        """`per_host` running tasks of `cluster` on every host (as MiniDock would label them),
        and one container MiniDock does not manage."""

        def one(name: str) -> None:
            for slot in range(1, per_host + 1):
                self.docker(
                    name,
                    "run",
                    "-d",
                    "--name",
                    f"seed{slot}.{slot}.{name}",
                    "--label",
                    f"minidock.cluster={cluster}",
                    "--label",
                    f"minidock.service=seed{slot}",
                    "--label",
                    f"minidock.slot={slot}",
                    "--label",
                    f"minidock.task={name}x{slot}",
                    "--label",
                    "minidock.spec=000000000000",
                    "--cpus",
                    "0.1",
                    "--memory",
                    "67108864",
                    "--restart",
                    "no",
                    "bench/web:1",
                    "sleep",
                    "1d",
                )
            if foreign:
                self.docker(name, "run", "-d", "--name", "other", "-p", "9100:9100", "bench/web:1")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, self.hosts))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "seed", "clear"])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path(".scale"))
    args = parser.parse_args()
    fleet = ScaleFleet(args.root)
    if args.command == "up":
        fleet.create(args.hosts)
        took = fleet.start()
        print(f"{len(fleet.hosts)} hosts up in {took:.1f} s; inventory: {fleet.inventory}")
    elif args.command == "down":
        fleet.stop()
        print("down")
    elif args.command == "seed":
        fleet.clear()
        fleet.seed(args.per_host)
        fleet.snapshot()
    else:
        fleet.clear()


if __name__ == "__main__":
    sys.exit(main())
