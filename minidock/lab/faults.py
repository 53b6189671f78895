"""The faults `lab kill HOST --mode ...` makes and how `lab revive` ends them.

Each mode is one of the ways a host is lost that FLEET-NOTES "Network" measured, and each
looks different to the controller: `stop` (host off: refused), `pause` (hung: the connect
times out), `sshd` (reset at once), `dockerd` (SSH fine, docker fails), `partition`
(iptables drops port 22; the host and its tasks keep running), `disk` (the host answers
and runs its tasks, but a new container cannot be created: "no space left on device"),
`slow` (the host answers everything, but sends at 16 Mbit/s: a long copy stays in flight
long enough for a test to act in the middle of it). Revive heals any mix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from minidock.lab import docker, local
from minidock.lab.directory import LabHost
from minidock.lab.errors import LabError

if TYPE_CHECKING:
    from minidock.lab.fleet import Lab

__all__ = [
    "CLEAN_SCRIPT",
    "ENGINE_SOCKET_DIR",
    "HEAL_SCRIPT",
    "KILL_MODES",
    "START_DOCKERD",
    "KillMode",
    "heal",
    "kill",
]

KillMode = Literal["stop", "pause", "sshd", "dockerd", "partition", "disk", "slow"]
KILL_MODES: tuple[KillMode, ...] = get_args(KillMode)

PARTITION_RULE = ("INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
START_SSHD = "mkdir -p /run/sshd && /usr/sbin/sshd -E /var/log/sshd.log"
# dockerd as the host's PID 1 starts it (host-init.sh): also on the socket the lab binds to
# .lab/engines/HOST on the machine (Lab.docker's way in without a `docker exec`)
ENGINE_SOCKET_DIR = "/run/minidock-lab-engine"
START_DOCKERD = (
    "setsid dockerd -H unix:///var/run/docker.sock"
    f" -H unix://{ENGINE_SOCKET_DIR}/docker.sock >>/var/log/dockerd.log 2>&1 </dev/null &"
)
READY_FLAG = "/run/minidock-lab.ready"
KILL_SSHD = "pkill -KILL -x sshd; true"
# SIGKILL: a crash. containerd goes with it; the tasks' shims keep them running, and
# live-restore picks them up again at revive.
KILL_DOCKERD = (
    "pkill -KILL -x dockerd; i=0;"
    " while pgrep -x dockerd >/dev/null && [ $i -lt 50 ]; do sleep 0.1;"
    " i=$((i + 1)); done; true"
)
_RULE = " ".join(PARTITION_RULE)
PARTITION = f"iptables -C {_RULE} 2>/dev/null || iptables -I {_RULE}"
# A full disk where Docker creates a container's files: a tiny tmpfs, filled, mounted over
# /var/lib/docker/containers (the running tasks keep their open files; revive unmounts it).
FULL = "minidock-lab-full"
FILL_DISK = (
    f"grep -q '^{FULL} ' /proc/mounts || {{ mount -t tmpfs -o size=64k {FULL}"
    " /var/lib/docker/containers && dd if=/dev/zero of=/var/lib/docker/containers/.fill"
    " bs=4k 2>/dev/null; }; true"
)
# A slow link: every packet the host sends is paced by a token bucket on its interface
# (tc's tbf; the lab hosts are privileged, the qdisc is in their own network namespace).
SLOW = "tc qdisc replace dev eth0 root tbf rate 16mbit burst 32kb latency 2s"
FAST = "tc qdisc del dev eth0 root 2>/dev/null; true"
EMPTY_DISK = f"while grep -q '^{FULL} ' /proc/mounts; do umount /var/lib/docker/containers; done"
HEAL_SCRIPT = f"""
i=0
while [ ! -e {READY_FLAG} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
rule="{_RULE}"
while iptables -C $rule 2>/dev/null; do iptables -D $rule; done
if ! ss -Hltn 'sport = :22' | grep -q .; then pkill -KILL -x sshd; {START_SSHD}; fi
if ! pgrep -x dockerd >/dev/null; then {START_DOCKERD} fi
{EMPTY_DISK}
{FAST}
"""
# After HEAL_SCRIPT, for `reset`: wait for dockerd, remove every MiniDock-labelled container.
CLEAN_SCRIPT = """
i=0
until ids=$(docker ps -aq --filter label=minidock.cluster 2>&1); do
    [ $i -lt 300 ] || { echo "$ids" >&2; exit 1; }
    sleep 0.1; i=$((i + 1))
done
[ -z "$ids" ] || docker rm -f -v $ids >/dev/null
for label in minidock.ingress minidock.names minidock.copy; do
    proxies=$(docker ps -aq --filter label=$label)
    [ -z "$proxies" ] || docker rm -f -v $proxies >/dev/null
done
"""
_INSIDE: dict[str, str] = {
    "sshd": KILL_SSHD,
    "dockerd": KILL_DOCKERD,
    "partition": PARTITION,
    "disk": FILL_DISK,
    "slow": SLOW,
}


def kill(lab: Lab, host: str, mode: KillMode = "stop") -> None:
    """Make the fault `mode` on `host`. Idempotent; modes other than stop need a running
    (or, for pause, an already paused) container."""
    if mode not in KILL_MODES:
        raise LabError(f"unknown kill mode {mode!r} (one of {', '.join(KILL_MODES)})")
    lab_host = lab.host(host)
    state = lab.container_state(host)
    if mode == "stop":
        if state in ("running", "paused", "restarting"):
            local.run(docker.stop_argv(lab_host.container))
        return
    if mode == "pause":
        if state != "paused":
            _require_running(lab, host, state)
            local.run(docker.pause_argv(lab_host.container))
        return
    _require_running(lab, host, state)
    lab.sh(host, _INSIDE[mode])


def _require_running(lab: Lab, host: str, state: str) -> None:
    if state != "running":
        raise LabError(f"{host} is {state}: `{lab.command(f'revive {host}')}` first")


def heal(lab: Lab, host: LabHost, state: str, then: str = "") -> None:
    """End every fault of a host (start or unpause it, drop the partition rule, restart
    sshd and dockerd when they are gone), then run the shell script `then` inside it."""
    if state == "missing":
        raise LabError(f"{host.name} has no container: run `{lab.command('up')}`")
    if state == "paused":
        local.run(docker.unpause_argv(host.container))
    elif state != "running":
        local.run(docker.start_argv(host.container))
    lab.sh(host.name, HEAL_SCRIPT + then)
