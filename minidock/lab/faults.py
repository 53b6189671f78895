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

import time
from typing import TYPE_CHECKING, Literal, get_args

from minidock.lab import docker, engine_api, images, local
from minidock.lab.directory import LabHost
from minidock.lab.errors import LabError

if TYPE_CHECKING:
    from minidock.lab.fleet import Lab

__all__ = [
    "CLEAN_LABELS",
    "CLEAN_SCRIPT",
    "ENGINE_SOCKET_DIR",
    "HEAL_SCRIPT",
    "KILL_MODES",
    "START_DOCKERD",
    "KillMode",
    "clean",
    "heal",
    "kill",
    "pause",
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
# Each fault it ends prints a line "healed: WHAT" (`heal` returns whether one did).
HEALED = "healed:"
HEAL_SCRIPT = f"""
i=0
while [ ! -e {READY_FLAG} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
rule="{_RULE}"
while iptables -C $rule 2>/dev/null; do iptables -D $rule; echo "{HEALED} partition"; done
if ! ss -Hltn 'sport = :22' | grep -q .; then
    pkill -KILL -x sshd; {START_SSHD}; echo "{HEALED} sshd"
fi
if ! pgrep -x dockerd >/dev/null; then {START_DOCKERD} echo "{HEALED} dockerd"; fi
while grep -q '^{FULL} ' /proc/mounts; do
    umount /var/lib/docker/containers; echo "{HEALED} disk"
done
tc qdisc del dev eth0 root 2>/dev/null && echo "{HEALED} slow"
true
"""
# What a reset removes from every host: MiniDock's tasks, then its proxies and copy helpers.
CLEAN_LABELS = ("minidock.cluster", "minidock.ingress", "minidock.names", "minidock.copy")
# After HEAL_SCRIPT, for `reset` on a host whose engine the lab cannot reach from this
# machine (the other kinds; Lab.reset speaks to a Docker host's socket instead): wait for
# the engine, remove every container carrying one of CLEAN_LABELS.
CLEAN_SCRIPT = f"""
i=0
until docker ps -q >/dev/null 2>&1; do
    [ $i -lt 300 ] || {{ docker ps -q; exit 1; }}
    sleep 0.1; i=$((i + 1))
done
for label in {" ".join(CLEAN_LABELS)}; do
    ids=$(docker ps -aq --filter label=$label)
    [ -z "$ids" ] || docker rm -f -v $ids >/dev/null
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
            pause(lab_host.container)
        return
    _require_running(lab, host, state)
    lab.sh(host, _INSIDE[mode])


# runc's cgroup v1 freezer writes FROZEN up to 1,000 times and gives up, thawing the cgroup
# again, while the cgroup's processes keep appearing (runc's fs/freezer.go): a lab host
# forks all the time (health checks, runc execs, sshd), and on a loaded machine a pause
# failed so once in CI's whole run. The container is left running, so pausing again is the
# same request; only that error is tried again, a bounded number of times.
UNABLE_TO_FREEZE = "unable to freeze"
PAUSE_TRIES = 5


def pause(container: str, tries: int = PAUSE_TRIES) -> None:
    """`docker pause` the container, again while runc could not freeze it (above)."""
    argv = docker.pause_argv(container)
    for attempt in range(1, tries + 1):
        proc = local.run(argv, check=False)
        if proc.returncode == 0:
            return
        if UNABLE_TO_FREEZE not in proc.stderr or attempt == tries:
            raise local.failure(argv, proc.returncode, proc.stderr or proc.stdout)
        time.sleep(0.2 * attempt)


def _require_running(lab: Lab, host: str, state: str) -> None:
    if state != "running":
        raise LabError(f"{host} is {state}: `{lab.command(f'revive {host}')}` first")


def heal(lab: Lab, host: LabHost, state: str, then: str = "") -> bool:
    """End every fault of a host (start or unpause it, drop the partition rule, restart
    sshd and dockerd when they are gone), then run the shell script `then` inside it.
    Whether there was a fault to end (a host that had none answers as it did)."""
    if state == "missing":
        raise LabError(f"{host.name} has no container: run `{lab.command('up')}`")
    if state == "paused":
        local.run(docker.unpause_argv(host.container))
    elif state != "running":
        local.run(docker.start_argv(host.container))
    healed = HEALED in lab.sh(host.name, HEAL_SCRIPT + then).stdout
    return healed or state != "running"


def clean(lab: Lab, host: LabHost, state: str) -> bool:
    """`heal` the host, then remove every container carrying one of CLEAN_LABELS: where
    a Docker host's engine answers on the lab's socket, listed and removed there
    (engine_api, no process); else (a dockerd the heal has just started, one started
    without the lab's socket, as `hosts prepare` starts it, another kind) with the CLI
    inside the host. Whether the host may not answer SSH as it did: it had a fault to end
    or took the CLI's way (one that had none: the heal found sshd listening, dockerd up)."""
    socket_path = lab.engine_socket(host.name)  # absent in a lab made before it
    direct = host.kind == images.DEFAULT_KIND and socket_path.parent.is_dir()
    healed = heal(lab, host, state, "" if direct else CLEAN_SCRIPT)
    if direct and engine_api.answers(socket_path):
        engine_api.remove_labelled(socket_path, CLEAN_LABELS)
        return healed
    if direct:
        lab.sh(host.name, CLEAN_SCRIPT)
    return True
