"""`minidock hosts check` and `hosts prepare`, without SSH: each check's parser on what the
command prints (as captured on Debian 12 and 13 hosts), its verdict and its fix; prepare's
steps and their exact argvs for each kind of host."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence, Set
from dataclasses import replace
from pathlib import Path

import pytest

from minidock.commands import hostcheck as hc
from minidock.commands import hostprep as hp
from minidock.core.engines import refusal
from minidock.model import Engine, Host
from minidock.spec import load_inventory
from minidock.ssh import Result, Unreachable
from minidock.usecases import state_location
from minidock.usecases.hostcheck import (
    Fleetwide,
    HostsCheckOutcome,
    check_hosts,
    fleetwide,
    prepare_hosts,
)
from minidock.usecases.runtime import Clock, Runtime
from tests.unit.test_engines import older, recorded, rootless

HOST = Host("web1", "10.0.0.5", port=2222, user="deploy", private_address="192.168.1.5")
ROOT = replace(HOST, user="root")


# -- SSH and the host key ---------------------------------------------------------------------
def test_ssh_passes_when_the_host_answers() -> None:
    check = hc.ssh_check(HOST, None)
    assert (check.ok, check.found) == (True, "deploy@10.0.0.5:2222, host key verified")


def test_an_unknown_host_key_is_fixed_by_scanning_it_after_checking_its_fingerprint() -> None:
    error = (
        "host key of 10.0.0.5:2222 not verifiable (unknown): presented ssh-ed25519 key "
        "SHA256:abc is not in /home/me/.ssh/known_hosts"
    )
    check = hc.ssh_check(HOST, error)
    assert check.ok is False
    assert "ssh-keyscan -p 2222 10.0.0.5 >> ~/.ssh/known_hosts" in check.fix
    assert 'host_key_policy = "accept-new"' in check.fix


def test_a_changed_host_key_is_never_fixed_by_accepting_it() -> None:
    error = "host key of 10.0.0.5:2222 not verifiable (changed): presented ... does not match"
    check = hc.ssh_check(replace(HOST, known_hosts="/etc/md/known"), error)
    assert "ssh-keygen -R '[10.0.0.5]:2222' -f /etc/md/known" in check.fix
    assert "accept-new" not in check.fix


def test_failed_authentication_is_fixed_by_authorizing_the_key() -> None:
    check = hc.ssh_check(
        replace(HOST, identity_file="/k/id"), "authentication failed for user deploy at x"
    )
    assert check.fix.endswith("ssh-copy-id -i /k/id -p 2222 deploy@10.0.0.5")


def test_a_refused_connection_is_fixed_by_checking_sshd() -> None:
    check = hc.ssh_check(HOST, "connection refused by 10.0.0.5:2222")
    assert check.fix.endswith("ssh -p 2222 deploy@10.0.0.5 true")


# -- the engine -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("recording", "found"),
    [
        ("docker-20.10.24.json", "Docker 20.10.24+dfsg1"),
        ("docker-26.1.5.json", "Docker 26.1.5+dfsg1"),
        ("docker-28.5.2.json", "Docker 28.5.2+dfsg4"),
        ("podman-5.4.2.json", "Podman 5.4.2"),
    ],
)
def test_each_engine_a_pass_drives_passes_read_as_the_probe_reads_it(
    recording: str, found: str
) -> None:
    check, engine = hc.engine_check(HOST, 0, recorded(recording), "")
    assert (check.ok, check.found) == (True, found)
    assert engine is not None
    assert str(engine) == found


def test_the_root_is_asked_of_the_engine_found() -> None:
    assert hc.root_argv("docker") == ["docker", "info", "--format", "{{.DockerRootDir}}"]
    assert hc.root_argv("podman") == ["docker", "info", "--format", "{{.Store.GraphRoot}}"]
    assert hc.parse_root("/var/lib/containers/storage\n") == "/var/lib/containers/storage"
    assert hc.parse_root("\n") is None  # what the client prints when no engine answers


def test_an_older_engine_fails_with_the_probes_refusal_and_the_upgrade() -> None:
    check, _ = hc.engine_check(HOST, 0, older("docker-20.10.24.json", "19.03.13"), "")
    assert (check.ok, check.found) == (False, refusal(Engine("docker", "19.03.13")))
    assert check.fix.startswith("upgrade the engine to Docker 20.10 or newer")
    check, _ = hc.engine_check(HOST, 0, older("podman-5.4.2.json", "3.4.4"), "")
    assert check.found.startswith("Podman 3.4.4 refused: MiniDock needs Podman 4.0")


def test_rootless_docker_fails_with_the_rootful_daemon_as_fix() -> None:
    check, _ = hc.engine_check(HOST, 0, rootless(), "")
    assert check.ok is False
    assert check.found.endswith("rootless Docker is not supported (run the daemon as root)")
    assert check.fix == "run the daemon as root (rootful Docker)"


def test_no_docker_command_is_fixed_by_prepare() -> None:
    check, _ = hc.engine_check(HOST, 127, "", "sh: 1: docker: not found\n")
    assert (check.ok, check.found) == (False, "no docker command")
    assert "minidock hosts prepare web1" in check.fix


def test_an_engine_that_does_not_answer_is_started() -> None:
    stderr = (
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?\n"
    )
    check, _ = hc.engine_check(HOST, 1, recorded("docker-no-daemon.txt"), stderr)
    assert check.found.startswith("the engine does not answer: Cannot connect")
    assert check.fix.startswith("start it: systemctl enable --now docker")


def test_a_refused_socket_points_at_the_user_check() -> None:
    stderr = (
        "permission denied while trying to connect to the Docker daemon socket at "
        "unix:///var/run/docker.sock: Get ...: connect: permission denied\n"
    )
    check, _ = hc.engine_check(HOST, 1, "", stderr)
    assert (check.ok, check.found, check.fix) == (
        False,
        "deploy may not use the engine's socket",
        "see user",
    )


# -- the user ---------------------------------------------------------------------------------
def test_id_is_read_as_uid_and_group_names() -> None:
    text = "uid=1000(deploy) gid=1000(deploy) groups=1000(deploy),27(sudo),998(docker)\n"
    assert hc.parse_id(text) == (1000, frozenset({"deploy", "sudo", "docker"}))


def test_root_and_docker_group_members_may_run_docker() -> None:
    assert hc.user_check(ROOT, "uid=0(root) gid=0(root) groups=0(root)", False).found == "root"
    member = hc.user_check(HOST, "uid=1000(deploy) gid=1000(deploy) groups=998(docker)", False)
    assert (member.ok, member.found) == (True, "deploy, in the docker group")


def test_a_user_outside_the_group_who_may_sudo_is_told_both_ways() -> None:
    check = hc.user_check(HOST, "uid=1000(deploy) gid=1000(deploy) groups=1000(deploy)", True)
    assert (check.ok, check.found) == (False, "deploy is not in the docker group (sudo -n works)")
    assert check.fix.startswith("sudo usermod -aG docker deploy (or sudo = true for web1")


def test_a_user_outside_the_group_who_may_not_sudo_is_added_by_root() -> None:
    check = hc.user_check(HOST, "uid=1000(deploy) gid=1000(deploy) groups=1000(deploy)", False)
    assert check.fix == "as root on the host: usermod -aG docker deploy; or log in as root"


# -- the kernel -------------------------------------------------------------------------------
def test_the_kernel_release_is_read() -> None:
    assert hc.parse_kernel("6.1.0-18-amd64\n") == (6, 1, 0)
    assert hc.parse_kernel("5.4.0-150-generic") == (5, 4, 0)


def test_an_old_kernel_fails_only_on_an_ingress_host() -> None:
    old = hc.kernel_check("5.4.0-150-generic\n", ingress=True)
    assert (old.ok, old.found) == (False, "5.4.0-150-generic, older than 5.14 (an ingress host)")
    assert old.fix.startswith("boot a kernel 5.14 or newer")
    elsewhere = hc.kernel_check("5.4.0-150-generic\n", ingress=False)
    assert (elsewhere.ok, elsewhere.found) == (True, "5.4.0-150-generic (runs no ingress proxy)")
    assert hc.kernel_check("5.14.0-362.el9.x86_64", ingress=True).ok


# -- disk -------------------------------------------------------------------------------------
DF = """\
Filesystem     1024-blocks     Used Available Capacity Mounted on
/dev/sda1         30787492 24418448   4777796      84% /
"""


def test_df_is_read_in_bytes_available() -> None:
    assert hc.parse_df(DF) == 4777796 * 1024
    assert hc.disk_argv("/var/lib/docker") == ["df", "-Pk", "/var/lib/docker"]


def test_little_free_disk_fails_with_the_prune() -> None:
    low = DF.replace("4777796", "1048576")
    check = hc.disk_check("/var/lib/docker", low)
    assert (check.ok, check.found) == (False, "1.0 GiB free under /var/lib/docker")
    assert check.fix.startswith("free 2 GiB or more: docker system prune")
    assert hc.disk_check("/var/lib/docker", DF).found == "4.6 GiB free under /var/lib/docker"


# -- the clock --------------------------------------------------------------------------------
def test_the_clock_offset_is_taken_from_the_round_trips_middle() -> None:
    check = hc.clock_check("1000.250000000\n", before=1000.0, after=1000.2)
    assert (check.ok, check.found) == (True, "+0.150s from the controller")


def test_a_clock_more_than_a_second_off_fails_with_ntp() -> None:
    check = hc.clock_check("998.500000000\n", before=1000.0, after=1000.0)
    assert (check.ok, check.found) == (False, "-1.500s from the controller")
    assert "timedatectl set-ntp true" in check.fix


def test_a_slow_round_trip_widens_the_tolerance_by_its_half() -> None:
    assert hc.clock_check("1002.400\n", before=1000.0, after=1002.0).ok  # 1.4 s off, rtt 2 s
    assert hc.parse_clock("1700000000.%N") == 1700000000.0  # a date without %N


# -- images -----------------------------------------------------------------------------------
def test_a_missing_proxy_image_is_pushed() -> None:
    check = hc.images_check("web1", {"caddy:2": True, "haproxy:2.6": False})
    assert (check.ok, check.found) == (False, "missing haproxy:2.6")
    assert check.fix.startswith("minidock push haproxy:2.6 --hosts web1")
    assert hc.images_check("web1", {"caddy:2": True}).found == "caddy:2"


# -- task ports -------------------------------------------------------------------------------
def test_the_listener_is_published_as_a_routed_tasks_port() -> None:
    assert hc.listener_argv("caddy:2", "192.168.1.5", 30999) == [
        "docker", "run", "-d", "--rm", "--name", "minidock-portcheck",
        "--label", "minidock.portcheck=1", "-p", "192.168.1.5:30999:30999",
        "--entrypoint", "caddy", "caddy:2", "respond", "--listen", ":30999", "ok",
    ]  # fmt: skip


def test_each_target_is_reached_from_a_container_and_read_back() -> None:
    argv = hc.reach_argv("caddy:2", [("192.168.1.6", 30999), ("192.168.1.7", 30998)])
    assert argv[:6] == ["docker", "run", "--rm", "--entrypoint", "busybox", "caddy:2"]
    assert "for t in 192.168.1.6:30999 192.168.1.7:30998; do busybox timeout 3" in argv[-1]
    printed = "192.168.1.6:30999 0\n192.168.1.7:30998 1\nwget: noise\n"
    assert hc.parse_reached(printed) == {"192.168.1.6:30999": True, "192.168.1.7:30998": False}


def test_a_task_port_not_reached_from_another_host_fails_with_the_firewall_fix() -> None:
    check = hc.task_ports_check(HOST, (30000, 30999), 30999, "", [("web2", True), ("web3", False)])
    assert (check.ok, check.found) == (False, "192.168.1.5:30999 not reached from web3")
    assert check.fix.startswith("allow TCP 30000-30999 to 192.168.1.5 from the other hosts'")
    passed = hc.task_ports_check(HOST, (30000, 30999), 30999, "", [("web2", True)])
    assert (passed.ok, passed.found) == (True, "192.168.1.5:30999 reached from 1 host(s)")


def test_a_task_port_that_could_not_be_tried_is_not_a_failure() -> None:
    check = hc.task_ports_check(HOST, (30000, 30999), 30999, "", [("web2", None)])
    assert check.ok is None
    refused = hc.task_ports_check(HOST, (30000, 30999), None, "port is already allocated", [])
    assert (refused.ok, refused.found) == (False, "no listener: port is already allocated")


# -- prepare ----------------------------------------------------------------------------------
BARE_DEBIAN_13 = {
    "uid": "1000", "groups": "deploy", "sudo": "yes", "os": "debian", "apt": "yes",
    "client": "no", "daemon": "no", "systemd": "yes", "engine": "down", "group": "no",
}  # fmt: skip


def test_facts_are_read_as_key_value_lines() -> None:
    text = "uid=0\ngroups=root\nsudo=root\nos=debian\nnoise without equals\n"
    assert hp.parse_facts(text) == {"uid": "0", "groups": "root", "sudo": "root", "os": "debian"}


def test_a_bare_debian_13_host_gets_the_engine_and_the_client_through_sudo() -> None:
    steps = hp.plan("deploy", BARE_DEBIAN_13)
    assert [(s.name, s.what) for s in steps] == [
        ("install", "installed docker.io (and docker-cli where the archive has it)"),
        ("start", "started the engine (systemctl enable --now docker)"),
        ("group", "added deploy to the docker group (from its next login)"),
    ]
    assert steps[0].argv == (
        "sudo", "-n", "sh", "-c",
        "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && set -- docker.io && "
        "if apt-cache show docker-cli >/dev/null 2>&1; then set -- docker.io docker-cli; fi && "
        'apt-get install -y -q --no-install-recommends "$@" && echo "installed $*"',
    )  # fmt: skip
    assert steps[1].argv == ("sudo", "-n", "systemctl", "enable", "--now", "docker")
    assert steps[2].argv == ("sudo", "-n", "usermod", "-aG", "docker", "deploy")


def test_a_root_host_without_systemd_installs_as_root_and_starts_dockerd() -> None:
    facts = BARE_DEBIAN_13 | {"sudo": "root", "groups": "root", "systemd": "no"}
    steps = hp.plan("root", facts)
    assert steps[0].argv is not None
    assert steps[0].argv[:2] == ("sh", "-c")  # as root: no sudo
    assert steps[1].argv is not None
    assert steps[1].argv[:2] == ("sh", "-c")
    assert "nohup dockerd" in steps[1].argv[2]
    assert (steps[2].argv, steps[2].what) == (None, "root needs no docker group")


def test_a_prepared_host_changes_nothing() -> None:
    facts = BARE_DEBIAN_13 | {
        "client": "yes",
        "daemon": "yes",
        "engine": "up",
        "groups": "deploy,docker",
    }
    steps = hp.plan("deploy", facts)
    assert [(s.argv, s.what) for s in steps] == [
        (None, "the engine is installed already"),
        (None, "the engine runs already"),
        (None, "deploy is in the docker group already"),
    ]


def test_a_user_who_cannot_become_root_is_refused_unless_nothing_is_missing() -> None:
    refused = hp.plan("deploy", BARE_DEBIAN_13 | {"sudo": "no"})
    assert [(s.ok, s.argv) for s in refused] == [(False, None)]
    assert "neither as root nor with sudo -n" in refused[0].what
    ready = hp.plan("deploy", BARE_DEBIAN_13 | {"sudo": "no", "engine": "up", "groups": "docker"})
    assert [s.ok for s in ready] == [True]


def test_a_host_without_apt_is_refused_with_the_engine_to_install() -> None:
    steps = hp.plan("root", BARE_DEBIAN_13 | {"sudo": "root", "apt": "no", "os": "fedora"})
    assert [(s.name, s.ok) for s in steps] == [("install", False)]
    assert steps[0].what.startswith("no apt-get on fedora")


# -- the use case, over a scripted executor ---------------------------------------------------
class Hosts:
    """An executor whose hosts answer the checks' commands from a script: every host
    healthy, but for what a test changes (`answers`: host -> argv[0..1] -> Result, and
    `blocked`: (from, to) pairs whose task-port request fails)."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[tuple[str, ...], Result]] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.ran: list[tuple[str, tuple[str, ...]]] = []
        self.address = {"host1": "10.0.0.1", "host2": "10.0.0.2", "host3": "10.0.0.3"}

    async def run(self, host: Host, argv: Sequence[str], **_: object) -> Result:
        self.ran.append((host.name, tuple(argv)))
        given = self.answers.get(host.name, {}).get(tuple(argv[:2]))
        if given is not None:
            return given
        return self.healthy(host, list(argv))

    def healthy(self, host: Host, argv: list[str]) -> Result:
        key = tuple(argv[:3])
        if argv == ["uname", "-r"]:
            return Result(0, "6.1.0-18-amd64\n", "")
        if argv == ["id"]:
            return Result(0, "uid=0(root) gid=0(root) groups=0(root)\n", "")
        if key == ("docker", "version", "--format"):
            return Result(0, recorded("docker-20.10.24.json"), "")
        if key == ("docker", "info", "--format"):
            return Result(0, "/var/lib/docker\n", "")
        if argv[:2] == ["df", "-Pk"]:
            return Result(0, DF, "")
        if argv[0] == "date":
            return Result(0, f"{CLOCK:.9f}\n", "")
        if key == ("docker", "image", "inspect"):
            return Result(0, "sha256:abc\n", "")
        if argv[:3] == ["docker", "run", "--rm"]:  # the reach: its targets from the script
            targets = argv[-1].split("for t in ")[1].split("; do")[0].split()
            lines = []
            for t in targets:
                to = next(n for n, a in self.address.items() if t.startswith(a + ":"))
                lines.append(f"{t} {1 if (host.name, to) in self.blocked else 0}")
            return Result(0, "\n".join(lines) + "\n", "")
        return Result(0, "", "")  # sudo -n -l docker, the listener, its readiness, rm -f

    def disconnect(self, host: Host) -> None: ...

    async def warm(self, hosts: Sequence[Host]) -> int:
        return len(hosts)

    def release(self, keep: Set[str], idle: float) -> int:
        return 0

    async def close(self) -> None: ...


CLOCK = 1_800_000_000.0


def checked(tmp_path: Path, fake: Hosts, *names: str) -> HostsCheckOutcome:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        "".join(f'[[hosts]]\nname = "{n}"\naddress = "{a}"\n' for n, a in fake.address.items())
    )
    clock = Clock(now=lambda: CLOCK, monotonic=lambda: 0.0, sleep=asyncio.sleep)
    runtime = Runtime(executor=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    where = state_location(str(tmp_path / "state"))
    return asyncio.run(check_hosts(where, runtime, hosts=names, inventory=inventory))


def test_every_check_of_every_host_passes_on_a_healthy_fleet(tmp_path: Path) -> None:
    result = checked(tmp_path, Hosts())
    assert result.exit_code == 0
    assert [c.name for c in result.hosts[0].checks] == [
        "ssh", "engine", "user", "kernel", "disk", "clock", "images", "task ports",
    ]  # fmt: skip
    assert result.hosts[0].checks[-1].found == "10.0.0.1:30999 reached from 2 host(s)"


def test_a_port_closed_between_two_hosts_fails_the_host_it_is_closed_to(tmp_path: Path) -> None:
    fake = Hosts()
    fake.blocked = {("host1", "host3")}
    result = checked(tmp_path, fake)
    assert result.exit_code == 1
    by_host = {h.host: h.checks[-1] for h in result.hosts}
    assert (by_host["host3"].ok, by_host["host3"].found) == (
        False,
        "10.0.0.3:30999 not reached from host1",
    )
    assert by_host["host1"].ok
    assert by_host["host2"].ok
    listeners = [h for h, argv in fake.ran if argv[:4] == ("docker", "run", "-d", "--rm")]
    removed = [h for h, argv in fake.ran if argv == tuple(hc.listener_rm_argv())]
    assert sorted(listeners) == ["host1", "host2", "host3"]
    assert removed.count("host1") == 2  # one left behind before, its own after


def test_an_unreachable_host_fails_ssh_and_checks_nothing_else(tmp_path: Path) -> None:
    class Down(Hosts):
        async def run(self, host: Host, argv: Sequence[str], **kw: object) -> Result:
            if host.name == "host2":
                raise Unreachable("host2", "connection refused by 10.0.0.2:22")
            return await super().run(host, argv, **kw)

    result = checked(tmp_path, Down())
    host2 = next(h for h in result.hosts if h.host == "host2")
    assert [(c.name, c.ok) for c in host2.checks] == [("ssh", False)] + [
        (name, None)
        for name in ("engine", "user", "kernel", "disk", "clock", "images", "task ports")
    ]
    host1 = next(h for h in result.hosts if h.host == "host1")
    assert host1.checks[-1].found == "10.0.0.1:30999 reached from 1 host(s); not tried from host2"
    assert result.exit_code == 1


def test_a_host_without_the_proxy_image_is_not_a_listener_and_says_why(tmp_path: Path) -> None:
    fake = Hosts()
    fake.answers["host1"] = {("docker", "image"): Result(1, "", "Error: No such image")}
    result = checked(tmp_path, fake, "host1", "host2")
    host1 = result.hosts[0]
    assert host1.checks[-2].found == "missing caddy:2, haproxy:2.6"
    assert (host1.checks[-1].ok, host1.checks[-1].found) == (
        None,
        "not checked: needs the engine and caddy:2",
    )


# -- what the applied specs say of the hosts --------------------------------------------------
def test_the_applied_specs_name_the_ingress_hosts_image_and_range(tmp_path: Path) -> None:
    from tests.unit.test_usecases import make_setup

    setup = make_setup(tmp_path)
    inventory = load_inventory(setup.root / "inventory.toml")
    where = state_location(str(setup.state))
    assert fleetwide(where, inventory) == Fleetwide()  # nothing applied: every host, defaults
    setup.file.write_text(
        setup.file.read_text()
        + '[ingress]\nhosts = ["host2"]\nimage = "caddy:2.8"\ntask_ports = "31000-31099"\n'
        + '[services.site]\nimage = "web:5"\nports = ["9090:8080"]\n'
        + 'ingress = [{ host = "x.example", port = 8080 }]\n'
    )
    setup.apply()
    seen = fleetwide(where, inventory)
    assert seen == Fleetwide(frozenset({"host2"}), "caddy:2.8", (31000, 31099))
    assert (seen.images("host1", 3), seen.images("host2", 3)) == (
        ("haproxy:2.6",),
        ("caddy:2.8", "haproxy:2.6"),
    )


def test_a_fleet_that_routes_nothing_needs_no_task_ports(tmp_path: Path) -> None:
    from tests.unit.test_usecases import make_setup

    setup = make_setup(tmp_path)
    setup.apply()
    where = state_location(str(setup.state))
    assert fleetwide(where, load_inventory(setup.root / "inventory.toml")).ingress_hosts == set()


# -- prepare over a scripted executor ---------------------------------------------------------
class NoImages:
    """A controller engine that holds no image (the host's own are then used as they are)."""

    async def inspect(self, image: str) -> None:
        return None

    def save(self, image: str) -> AsyncIterator[bytes]:
        raise AssertionError("nothing to save")


DONE = Result(0, "Setting up docker.io ...\ninstalled docker.io docker-cli\n", "")


class Bare(Hosts):
    """A Debian 13 host without the engine, reached as a user with sudo -n."""

    def __init__(self, install: Result = DONE) -> None:
        super().__init__()
        self.install = install
        self.facts = dict(BARE_DEBIAN_13)

    async def run(self, host: Host, argv: Sequence[str], **kw: object) -> Result:
        self.ran.append((host.name, tuple(argv)))
        if list(argv) == hp.facts_argv():
            return Result(0, "".join(f"{k}={v}\n" for k, v in self.facts.items()), "")
        if "apt-get" in " ".join(argv):
            return self.install
        return Result(0, "sha256:abc\n", "")  # systemctl, usermod, the images on the host


def prepared(tmp_path: Path, fake: Hosts) -> tuple[list[str], int]:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text('[[hosts]]\nname = "host1"\naddress = "10.0.0.1"\nuser = "deploy"\n')
    clock = Clock(now=lambda: CLOCK, monotonic=lambda: 0.0, sleep=asyncio.sleep)
    runtime = Runtime(executor=lambda: fake, clock=clock, engine=NoImages)  # type: ignore[arg-type,return-value]
    lines: list[str] = []
    where = state_location(str(tmp_path / "state"))
    work = prepare_hosts(
        where, runtime, ["host1"], lambda h, s: lines.append(f"{h}: {s.name}: {s.what}"),
        inventory=inventory,
    )  # fmt: skip
    return lines, asyncio.run(work).exit_code


def test_prepare_says_each_step_and_runs_each_argv_once(tmp_path: Path) -> None:
    fake = Bare()
    lines, code = prepared(tmp_path, fake)
    assert (code, lines) == (0, [
        "host1: install: installed docker.io docker-cli",  # the script's own last line
        "host1: start: started the engine (systemctl enable --now docker)",
        "host1: group: added deploy to the docker group (from its next login)",
        "host1: image caddy:2: caddy:2 is on the host already",
    ])  # fmt: skip
    ran = [argv for _, argv in fake.ran]
    assert ran[1][:2] == ("sudo", "-n") and "apt-get" in ran[1][-1]  # noqa: PT018
    assert ran[2:4] == [
        ("sudo", "-n", "systemctl", "enable", "--now", "docker"),
        ("sudo", "-n", "usermod", "-aG", "docker", "deploy"),
    ]


def test_a_failed_step_ends_the_hosts_steps_with_its_last_line(tmp_path: Path) -> None:
    failing = Result(100, "", "Reading package lists...\nE: Unable to locate package docker-cli\n")
    lines, code = prepared(tmp_path, Bare(failing))
    assert (code, lines) == (
        1,
        ["host1: install: exit 100: E: Unable to locate package docker-cli"],
    )
