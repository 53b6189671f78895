"""Record real `docker inspect` outputs into this directory (needs a local Docker engine).

    .venv/bin/python tests/data/docker/record.py tests/data/docker

The image is a one-file busybox import (no registry needed):
    mkdir -p /tmp/wl/bin && cp /bin/busybox /tmp/wl/bin/ && for c in sh sleep true wget; do
      ln -sf busybox /tmp/wl/bin/$c; done && tar -C /tmp/wl -cf /tmp/wl.tar . &&
    docker import -c 'CMD ["sleep","3600"]' /tmp/wl.tar rec/busybox:1
Containers are started with `minidock.commands.docker.run_argv` itself (env on stdin), so the
recordings also prove that the argv it builds is one docker accepts. Everything this
script creates is removed at the end.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from minidock.commands.docker import run_argv
from minidock.commands.facts import inspect_argv
from minidock.model import HealthCheck, PortMapping, Service

OUT = Path(sys.argv[1])
IMG = "rec/busybox:1"
CL = "rec"
created: list[str] = []


def sh(argv, input=None, check=True):
    r = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and r.returncode:
        raise SystemExit(f"{argv}: {r.stderr}")
    return r


def launch(svc, slot, task, create=False):
    argv, env = run_argv(svc, CL, slot, task, svc.spec_hash())
    if create:
        argv = ["docker", "create", *argv[3:]]
    print(" ".join(argv), file=sys.stderr)
    cid = sh(argv, input=env or None).stdout.strip()
    created.append(cid)
    return cid


def inspect(name, *ids):
    r = sh(inspect_argv(list(ids)), check=False)
    (OUT / f"{name}.json").write_text(r.stdout)
    return r


def wait(cid, fmt, want, limit=30):
    for _ in range(limit * 10):
        got = sh(["docker", "inspect", "-f", fmt, cid]).stdout.strip()
        if got == want:
            return
        time.sleep(0.1)
    raise SystemExit(f"{cid}: {fmt} is {got}, wanted {want}")


try:
    OUT.mkdir(parents=True, exist_ok=True)
    web = Service(
        name="web",
        image=IMG,
        command=("sleep", "3600"),
        env=(("MODE", "prod"), ("TOKEN", "not-a-real-secret")),
        ports=(PortMapping(18080, 8080), PortMapping(18081, 8081, "udp")),
        cpus=0.5,
        memory=64 * 1024 * 1024,
    )
    running = launch(web, 1, "t1run")
    wait(running, "{{.State.Status}}", "running")
    inspect("running", running)

    hok = Service(
        name="api",
        image=IMG,
        command=("sleep", "3600"),
        cpus=1.5,
        memory=128 * 1024 * 1024,
        ports=(PortMapping(18090, 8080),),
        health=HealthCheck(
            cmd=("sh", "-c", "echo ok from $HOSTNAME"),
            interval=0.5,
            timeout=1.0,
            retries=2,
            start_period=0.0,
        ),
    )
    healthy = launch(hok, 1, "t2hok")
    wait(healthy, "{{.State.Health.Status}}", "healthy")
    inspect("healthy", healthy)

    hbad = Service(
        name="api",
        image=IMG,
        command=("sleep", "3600"),
        health=HealthCheck(
            cmd=("wget", "-qO-", "http://127.0.0.1:8080/"),
            interval=0.5,
            timeout=1.0,
            retries=1,
            start_period=0.0,
        ),
    )
    unhealthy = launch(hbad, 2, "t3bad")
    wait(unhealthy, "{{.State.Health.Status}}", "unhealthy")
    inspect("unhealthy", unhealthy)

    hslow = Service(
        name="api",
        image=IMG,
        command=("sleep", "3600"),
        health=HealthCheck(
            cmd=("true",), interval=3600.0, timeout=1.0, retries=3, start_period=60.0
        ),
    )
    starting = launch(hslow, 3, "t4start")
    wait(starting, "{{.State.Health.Status}}", "starting")
    inspect("starting", starting)

    ok = Service(name="job", image=IMG, command=("true",))
    exited0 = launch(ok, 1, "t5ok")
    wait(exited0, "{{.State.Status}}", "exited")
    inspect("exited-0", exited0)

    crash = Service(name="crash", image=IMG, command=("sh", "-c", "echo boom; exit 1"))
    exited1 = launch(crash, 1, "t6crash")
    wait(exited1, "{{.State.Status}}", "exited")
    inspect("exited-1", exited1)

    never = Service(
        name="web", image=IMG, command=("sleep", "3600"), ports=(PortMapping(18082, 8080),)
    )
    created_only = launch(never, 2, "t7new", create=True)
    inspect("created", created_only)

    # Foreign containers: no labels at all, and another cluster's task.
    foreign = sh(["docker", "run", "-d", "--name", "rec-foreign", IMG]).stdout.strip()
    created.append(foreign)
    other_argv, _ = run_argv(Service(name="web", image=IMG), "other", 1, "t8other", "0" * 12)
    other = sh(other_argv).stdout.strip()
    created.append(other)
    # A container with this cluster's label but no slot label: not a task, ignored.
    partial = sh(
        [
            "docker",
            "run",
            "-d",
            "--name",
            "rec-partial",
            "--label",
            f"minidock.cluster={CL}",
            "--label",
            "minidock.service=web",
            IMG,
        ]
    ).stdout.strip()
    created.append(partial)
    inspect("mixed", running, foreign, other, exited1, partial)

    # ps as the probe runs it (ids only), for this cluster.
    from minidock.commands.facts import ps_argv

    (OUT / "ps.txt").write_text(sh(ps_argv(CL)).stdout)

    # Vanished between ps and inspect: one existing id, one removed.
    gone = sh(["docker", "run", "-d", "--name", "rec-gone", IMG, "true"]).stdout.strip()
    sh(["docker", "rm", "-f", gone])
    r = inspect("vanished", exited0, gone)
    print("vanished:", json.dumps({"exit": r.returncode, "stderr": r.stderr}))
    r = inspect("all-vanished", gone)
    print("all-vanished:", json.dumps({"exit": r.returncode, "stderr": r.stderr}))
finally:
    if created:
        subprocess.run(["docker", "rm", "-f", *created], capture_output=True)
