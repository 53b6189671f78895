"""Real workloads (issue 15) on the real lab fleet, through the real command line: tasks on
one host talking by service name over the cluster's network, extra networks, the docker
run surface as the engine applies it, stop grace periods and signals, a private registry
with credentials from a secret file, an image pushed from the controller to a host that
never had it, and the operator's ps, logs, exec (-it on a PTY) and scale."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock, on_terminal
from tests.integration.registry import Registry, gateway, running_registry, seed, trust

ON_HOST1 = 'constraints = ["host == host1"]\n'


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def inspect(fleet: Fleet, host: str, name_prefix: str) -> dict[str, object]:
    """`docker inspect` of the one running container whose name starts with the prefix."""
    names = ok(fleet.docker(host, "ps", "--format", "{{.Names}}")).split()
    (name,) = [n for n in names if n.startswith(name_prefix)]
    doc: list[dict[str, object]] = json.loads(ok(fleet.docker(host, "inspect", name)))
    return doc[0]


# -- networks ---------------------------------------------------------------------------------
TWO_ON_ONE_HOST = f"""
[services.api]
image = "{WEB5_IMAGE}"
{ON_HOST1}
[services.client]
image = "{WEB5_IMAGE}"
{ON_HOST1}"""


def test_two_tasks_on_one_host_talk_by_service_name(md: Minidock, fleet: Fleet) -> None:
    ok(md("apply", str(md.spec(TWO_ON_ONE_HOST)), "--wait", "--timeout", "60s"))
    network = f"minidock-{md.cluster}"
    label = ok(
        fleet.docker(
            "host1", "network", "inspect", network, "--format",
            '{{.Driver}} {{index .Labels "minidock.cluster"}}',
        )
    )  # fmt: skip
    assert label.split() == ["bridge", md.cluster]
    answer = md("exec", "client", "--", "wget", "-qO-", "http://api:8080/")
    assert (answer.returncode, answer.stdout) == (0, "web 5\n"), answer.stderr


def test_a_network_of_our_name_that_is_not_ours_is_left_alone(md: Minidock, fleet: Fleet) -> None:
    md.cluster = f"foreign-net-{os.getpid()}"
    network = f"minidock-{md.cluster}"
    ok(fleet.docker("host1", "network", "create", "--label", "owner=someone", network))
    try:
        res = md("apply", str(md.spec(f'[services.api]\nimage = "{WEB5_IMAGE}"\n{ON_HOST1}')))
        assert res.returncode == 1
        assert f"network {network} on host1 is not this cluster's" in res.stderr
        labels = ok(
            fleet.docker("host1", "network", "inspect", network, "--format", "{{json .Labels}}")
        )
        assert json.loads(labels) == {"owner": "someone"}
        assert md.containers("host1") == []
    finally:
        fleet.docker("host1", "network", "rm", network)


def test_a_service_joins_extra_networks_under_its_name(md: Minidock, fleet: Fleet) -> None:
    extra = f"backend-{os.getpid()}"
    ok(fleet.docker("host1", "network", "create", extra))
    try:
        body = f'[services.api]\nimage = "{WEB5_IMAGE}"\nnetworks = ["{extra}"]\n{ON_HOST1}'
        ok(md("apply", str(md.spec(body)), "--wait", "--timeout", "60s"))
        doc = inspect(fleet, "host1", "api.1.")
        networks = doc["NetworkSettings"]["Networks"]  # type: ignore[index]
        assert set(networks) == {f"minidock-{md.cluster}", extra}
        # a container that is not MiniDock's, on the extra network only, finds it by name
        found = fleet.docker(
            "host1",
            "run",
            "--rm",
            "--network",
            extra,
            WEB5_IMAGE,
            "wget",
            "-qO-",
            "http://api:8080/",
        )
        assert ok(found) == "web 5\n"
    finally:
        fleet.reset()  # the task leaves the network, which can then go
        fleet.docker("host1", "network", "rm", extra)


# -- the docker run surface -------------------------------------------------------------------
SURFACE = f"""
[services.api]
image = "{WEB5_IMAGE}"
{ON_HOST1}labels = {{ "app.team" = "payments" }}
user = "1000:1000"
workdir = "/tmp"
entrypoint = ["/bin/sh", "-c"]
command = ["exec httpd -f -p 8080 -h /www"]
stop_signal = "SIGINT"
stop_grace_period = "3s"
init = true
read_only = true
cap_drop = ["ALL"]
cap_add = ["NET_BIND_SERVICE"]
ulimits = {{ nofile = {{ soft = 1024, hard = 2048 }} }}
log = {{ driver = "local", options = {{ max-size = "5m" }} }}
extra_hosts = {{ "db.internal" = "10.0.0.5" }}
dns = ["10.0.0.2"]
health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 3 }}
"""


def test_the_docker_run_surface_is_what_the_engine_runs(md: Minidock, fleet: Fleet) -> None:
    ok(md("apply", str(md.spec(SURFACE)), "--wait", "--timeout", "60s"))
    doc = inspect(fleet, "host1", "api.1.")
    config, host = doc["Config"], doc["HostConfig"]
    assert isinstance(config, dict)
    assert isinstance(host, dict)
    assert config["Labels"]["app.team"] == "payments"
    assert (config["User"], config["WorkingDir"]) == ("1000:1000", "/tmp")
    # docker's --entrypoint takes one word: the rest of it leads the command
    assert config["Entrypoint"] == ["/bin/sh"]
    assert config["Cmd"] == ["-c", "exec httpd -f -p 8080 -h /www"]
    assert (config["StopSignal"], config["StopTimeout"]) == ("SIGINT", 3)
    assert (host["Init"], host["ReadonlyRootfs"]) == (True, True)
    assert (host["CapDrop"], host["CapAdd"]) == (["ALL"], ["NET_BIND_SERVICE"])
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 2048}]
    assert host["LogConfig"] == {"Type": "local", "Config": {"max-size": "5m"}}
    assert host["ExtraHosts"] == ["db.internal:10.0.0.5"]
    assert host["Dns"] == ["10.0.0.2"]
    id_line = md("exec", "api", "--", "id", "-u")
    assert (id_line.returncode, id_line.stdout) == (0, "1000\n")
    assert md("exec", "api", "--", "touch", "/www/x").returncode != 0  # read-only root
    hosts_file = ok(md("exec", "api", "--", "cat", "/etc/hosts"))
    assert "10.0.0.5\tdb.internal" in hosts_file


STUBBORN = f"""
[services.stubborn]
image = "{WEB5_IMAGE}"
{ON_HOST1}entrypoint = ["/bin/sh", "-c"]
command = ["trap '' TERM; while :; do sleep 1; done"]
stop_grace_period = "2s"
desired = "DESIRED"

[services.polite]
image = "{WEB5_IMAGE}"
{ON_HOST1}entrypoint = ["/bin/sh", "-c"]
command = ["trap 'exit 0' QUIT; trap '' TERM; while :; do sleep 1; done"]
stop_signal = "SIGQUIT"
stop_grace_period = "40s"
desired = "DESIRED"
"""


def test_every_stop_waits_the_tasks_grace_period_after_its_stop_signal(
    md: Minidock, fleet: Fleet
) -> None:
    running = md.spec(STUBBORN.replace("DESIRED", "running"))
    ok(md("apply", str(running), "--wait", "--timeout", "60s"))
    started = time.monotonic()
    stopped = md("apply", str(md.spec(STUBBORN.replace("DESIRED", "stopped"), "stopped.toml")))
    took = time.monotonic() - started
    assert stopped.returncode in (0, 3), stopped.stdout + stopped.stderr  # 3: it acted
    # stubborn ignores SIGTERM: killed after its 2 s, not docker's 10 s; polite leaves at
    # once on its SIGQUIT, not after its 40 s
    assert took < 9, took
    assert "stopped stubborn.1." in stopped.stdout
    assert "stopped polite.1." in stopped.stdout
    assert md.containers("host1") == []


# -- a private registry -----------------------------------------------------------------------
@pytest.fixture(scope="session")
def registry(lab_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry with htpasswd auth on the lab network's gateway, trusted by every host,
    holding `private/web:5` (pushed from host1, which then forgets it)."""
    with running_registry(tmp_path_factory.mktemp("registry"), gateway(lab_fleet)) as reg:
        trust(lab_fleet, reg)
        seed(lab_fleet, reg, WEB5_IMAGE, "private/web:5")
        yield reg


def private_spec(md: Minidock, registry: Registry, password_file: Path) -> Path:
    return md.spec(
        f'[services.app]\nimage = "{registry.image("private/web:5")}"\nreplicas = 2\n'
        f'health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }}\n\n'
        f'[registries."{registry.address}"]\nusername = "{registry.username}"\n'
        f'password = {{ file = "{password_file}" }}\n'
    )


def test_private_images_pull_after_a_login_with_a_secret_files_password(
    md: Minidock, fleet: Fleet, registry: Registry, tmp_path: Path
) -> None:
    secret = tmp_path / "registry-password"
    secret.write_text("not-the-password\n")
    secret.chmod(0o600)
    spec = private_spec(md, registry, secret)
    wrong = md("apply", str(spec))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    failed = [line for line in wrong.stderr.splitlines() if line.startswith("failed: ")]
    assert failed
    assert all(
        f"docker login to registry {registry.address} as {registry.username} failed: " in line
        for line in failed
    ), failed
    assert md.containers("host1") + md.containers("host2") == []

    secret.write_text(registry.password + "\n")
    right = md("apply", str(spec), "--wait", "--timeout", "90s")
    assert right.returncode == 0, right.stdout + right.stderr
    tasks = md.tasks("app")
    assert len(tasks) == 2
    assert {t["image"] for t in tasks} == {registry.image("private/web:5")}
    for t in tasks:  # the host was logged in: its docker config holds the registry now
        config = ok(fleet.exec(t["host"], "cat", "/root/.docker/config.json"))
        assert registry.address in json.loads(config)["auths"]
    printed = wrong.stdout + wrong.stderr + right.stdout + right.stderr
    printed += ok(md("events", "-n", "0")) + json.dumps(md.status())
    assert registry.password not in printed
    assert "not-the-password" not in printed


# -- images without a registry ----------------------------------------------------------------
@pytest.fixture
def fresh_image() -> Iterator[str]:
    """A new image in the controller's engine that no lab host has: web:5 with another page."""
    tag = f"minidock-labtest/pushed-{os.getpid()}:1"
    script = "printf 'pushed\\n' > /www/index.html"
    name = f"minidock-labtest-build-{os.getpid()}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(
        ["docker", "run", "--name", name, "--entrypoint", "/bin/sh", WEB5_IMAGE, "-c", script],
        capture_output=True, check=True,
    )  # fmt: skip
    changes = ['ENTRYPOINT ["/bin/lab-init"]', 'CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]']
    commit = ["docker", "commit", *(a for c in changes for a in ("--change", c)), name, tag]
    subprocess.run(commit, capture_output=True, check=True)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=True)
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def host_has(fleet: Fleet, host: str, image: str) -> bool:
    return fleet.docker(host, "image", "inspect", image).returncode == 0


def test_minidock_push_streams_an_image_to_the_hosts_named(
    md: Minidock, fleet: Fleet, fresh_image: str
) -> None:
    assert not any(host_has(fleet, h, fresh_image) for h in fleet.hosts)
    pushed = md("push", fresh_image, "--hosts", "host2,host3", "--inventory", str(fleet.inventory))
    lines = ok(pushed).splitlines()
    assert sorted(line.split(" (")[0] for line in lines) == [
        f"host2: pushed {fresh_image}",
        f"host3: pushed {fresh_image}",
    ]
    assert [host_has(fleet, h, fresh_image) for h in fleet.hosts] == [False, True, True, False]
    again = ok(md("push", fresh_image, "--hosts", "host2", "--inventory", str(fleet.inventory)))
    assert again == f"host2: already has {fresh_image}\n"
    missing = md("push", "minidock-labtest/none:1", "--inventory", str(fleet.inventory))
    assert missing.returncode == 2
    assert "is not in the controller's Docker engine" in missing.stderr


def test_image_source_controller_runs_a_pushed_image_on_a_host_that_never_had_it(
    md: Minidock, fleet: Fleet, fresh_image: str
) -> None:
    body = (
        f'[services.tool]\nimage = "{fresh_image}"\nimage_source = "controller"\n'
        f'constraints = ["host == host4"]\n'
        f'health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }}\n'
    )
    assert not host_has(fleet, "host4", fresh_image)
    res = md("apply", str(md.spec(body)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"pushed {fresh_image} to host4 (" in res.stdout
    assert ok(md("exec", "tool", "--", "wget", "-qO-", "http://127.0.0.1:8080/")) == "pushed\n"
    assert "push: pushed" in ok(md("events", "-n", "0"))


# -- the operator's commands: ps, logs, exec, scale --------------------------------------------
CHATTY = f"""
[services.web]
image = "{WEB5_IMAGE}"
replicas = 2
entrypoint = ["/bin/sh", "-c"]
command = ["echo started with $TOKEN; echo to stderr >&2; exec httpd -f -p 8080 -h /www"]
init = true  # httpd as PID 1 would ignore SIGTERM: every stop would wait out the grace
ports = ["8080:8080"]
secrets = {{ TOKEN = {{ file = "token" }} }}
health = {{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s" }}
"""
TOKEN = "tok-4d5e6f"


@pytest.fixture
def chatty(md: Minidock) -> Minidock:
    token = md.workdir / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    ok(md("apply", str(md.spec(CHATTY)), "--wait", "--timeout", "60s"))
    return md


def test_ps_lists_tasks_with_host_state_and_ports(chatty: Minidock) -> None:
    doc = json.loads(ok(chatty("ps", "web", "--json")))
    tasks = doc["tasks"]
    assert sorted(t["slot"] for t in tasks) == [1, 2]
    assert len({t["host"] for t in tasks}) == 2
    assert {t["state"] for t in tasks} == {"running"}
    assert all(t["ports"] == ["8080/tcp"] for t in tasks)
    table = ok(chatty("ps")).splitlines()
    assert table[0].split() == ["TASK", "HOST", "STATE", "HEALTH", "PORTS", "IMAGE"]
    assert len(table) == 3


def test_logs_prefix_lines_with_their_task_and_mask_secrets(chatty: Minidock) -> None:
    res = chatty("logs", "web", "--slot", "1")
    ok(res)
    (task,) = {line.split(" | ")[0] for line in res.stdout.splitlines()}
    assert task.startswith("web.1.")
    assert res.stdout == f"{task} | started with ***\n"
    assert res.stderr == f"{task} | to stderr\n"
    last = chatty("logs", "web", "--tail", "1", "--since", "10m")  # each task's last line
    lines = (ok(last) + last.stderr).splitlines()
    assert sorted(line.split(".")[1] for line in lines) == ["1", "2"]


def test_logs_follow_shows_new_lines_masked_until_interrupted(chatty: Minidock) -> None:
    follower = chatty.popen("logs", "web", "--slot", "2", "--follow", "--tail", "0")
    try:
        # Nothing says when the follower's `docker logs --follow --tail 0` has begun (a
        # fresh process: its imports, its SSH session; over 2 s on a loaded machine, when
        # a line written once before it began was never seen): the line is written again
        # each 2 s until the follower shows it, within 30 s.
        line = f"late line with {TOKEN}"
        deadline, written = time.monotonic() + 30, 0.0
        seen = ""
        assert follower.stdout is not None
        while time.monotonic() < deadline and "late line" not in seen:
            if time.monotonic() - written >= 2:
                ok(chatty("exec", "web.2", "--", "sh", "-c", f"echo '{line}' > /proc/1/fd/1"))
                written = time.monotonic()
            ready, _, _ = select.select([follower.stdout], [], [], 0.5)
            if ready:
                seen += follower.stdout.readline()
        assert "late line with ***" in seen, seen
        assert TOKEN not in seen
    finally:
        follower.send_signal(signal.SIGINT)
        _, errors = follower.communicate(timeout=10)
    assert follower.returncode == 0, errors


def test_exec_masks_its_output_and_passes_the_exit_status(chatty: Minidock) -> None:
    env = chatty("exec", "web.1", "--", "sh", "-c", "echo $TOKEN; exit 7")
    assert (env.returncode, env.stdout) == (7, "***\n")


def test_exec_it_runs_on_a_terminal(chatty: Minidock) -> None:
    proc, output = on_terminal(
        ["exec", "-it", "web", "--", "sh"], chatty.env(), b"tty; echo $((40 + 2)); exit 3\n", 30
    )
    assert proc.wait(timeout=10) == 3
    text = output.decode(errors="replace")
    assert "/dev/pts/" in text, text
    assert "42" in text, text


def test_scale_is_a_new_generation_of_the_stored_spec(chatty: Minidock) -> None:
    res = chatty("scale", "web=3", "--wait", "--timeout", "60s")
    out = ok(res)
    assert "scaled web from 2 to 3\n" in out
    assert len(chatty.tasks("web")) == 3
    assert chatty.status()["generation"] == 2
    assert ok(chatty("scale", "web=1", "--wait", "--timeout", "60s")).count("stopped web.") == 2
    assert len(chatty.tasks("web")) == 1
