"""Record Docker's real error output into errors/ here (needs a local Docker engine and
Debian's docker-registry).

    .venv/bin/python tests/data/docker/record_errors.py tests/data/docker/errors

Each case writes `NAME.stderr` (what docker printed on stderr, byte for byte) and the
exit status into `errors/cases.json`. Docker is driven with the argv MiniDock's act path
uses where it has one (`run_argv`, `pull_argv`, `network_connect_argv`, `ps_argv`), with
ports on 127.0.0.1 only. The image is the one-file busybox import of record.py. A
registry (Debian's `docker-registry`) on a free loopback port gives the real "not found"
of a pull. Everything this script creates is removed at the end.
"""

import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from minidock.commands.docker import network_connect_argv, pull_argv, run_argv
from minidock.commands.facts import ps_argv
from minidock.model import PortMapping, Service

OUT = Path(sys.argv[1])
IMG = "rec/busybox:1"
CL = "rec"
created: list[str] = []
cases: dict[str, int] = {}


def sh(argv, input=None, check=True):
    r = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and r.returncode:
        raise SystemExit(f"{argv}: {r.stderr}")
    return r


def record(name, argv, input=None):
    print(" ".join(argv), file=sys.stderr)
    r = sh(argv, input=input, check=False)
    if r.returncode == 0:
        raise SystemExit(f"{name}: {argv} succeeded, expected a failure")
    (OUT / f"{name}.stderr").write_text(r.stderr)
    cases[name] = r.returncode
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback(argv):
    """run_argv publishes on every address; the recordings publish on loopback only."""
    return [
        f"127.0.0.1:{a}" if b == "-p" else a for b, a in zip(["", *argv[:-1]], argv, strict=True)
    ]


def task(name, slot, tid, **kw):
    svc = Service(name=name, image=IMG, command=("sleep", "3600"), **kw)
    argv, env = run_argv(svc, CL, slot, tid, svc.spec_hash())
    return loopback(argv), env


registry = None
try:
    OUT.mkdir(parents=True, exist_ok=True)
    if sh(["docker", "image", "inspect", IMG], check=False).returncode:
        raise SystemExit(f"import {IMG} first (see record.py)")

    # A name conflict: the same task started twice (a replayed decision).
    argv, env = task("web", 1, "e1name")
    created.append(sh(argv, input=env).stdout.strip())
    record("name-conflict", argv, input=env)

    # A host port published by another container: "port is already allocated".
    port = free_port()
    argv, env = task("web", 2, "e2port", ports=(PortMapping(port, 8080),))
    created.append(sh(argv, input=env).stdout.strip())
    argv, env = task("api", 1, "e3port", ports=(PortMapping(port, 8080),))
    record("port-allocated", argv, input=env)
    created.append("api.1.e3port")  # docker run leaves it created, never started

    # A host port held by a process that is not a container: "address already in use".
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        argv, env = task("api", 2, "e4addr", ports=(PortMapping(held.getsockname()[1], 8080),))
        record("address-in-use", argv, input=env)
        created.append("api.2.e4addr")

    # An image that is not on the host: run with --pull never, and a pull from a
    # registry that does not have it.
    argv, env = task("web", 3, "e5img")
    argv[argv.index(IMG)] = "rec/absent:1"
    record("run-image-not-found", [*argv[:2], "--pull", "never", *argv[2:]], input=env)
    record("image-inspect-not-found", ["docker", "image", "inspect", "rec/absent:1"])
    root = tempfile.mkdtemp(prefix="rec-registry-")
    reg_port = free_port()
    config = Path(root) / "config.yml"
    config.write_text(
        "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{root}/data\nhttp:\n  addr: 127.0.0.1:{reg_port}\n"
    )
    registry = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(50):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", reg_port)) == 0:
                break
        time.sleep(0.1)
    record("pull-not-found", pull_argv(f"127.0.0.1:{reg_port}/rec/absent:1"))
    record("pull-unreachable", pull_argv(f"127.0.0.1:{free_port()}/rec/absent:1"))

    # A network that does not exist: joining it, and running on it.
    argv, env = task("db", 1, "e6net")
    created.append(sh(argv, input=env).stdout.strip())
    record(
        "network-connect-no-such-network", network_connect_argv("rec-absent", "db.1.e6net", "db")
    )
    argv, env = task("db", 2, "e7net")
    record("run-no-such-network", [*argv[:2], "--network", "rec-absent", *argv[2:]], input=env)
    created.append("db.2.e7net")

    # No daemon behind the socket: what a host whose dockerd died answers.
    sock = Path(tempfile.mkdtemp(prefix="rec-nodaemon-")) / "docker.sock"
    record("daemon-down", ["docker", "-H", f"unix://{sock}", *ps_argv(CL)[1:]])

    (OUT / "cases.json").write_text(json.dumps(cases, indent=2, sort_keys=True) + "\n")
finally:
    if registry is not None:
        registry.terminate()
        registry.wait()
    names = [c.strip() for c in created if c.strip()]
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)
