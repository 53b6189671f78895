"""Real workloads (issue 15), below the command line: the spec keys of the docker run
surface, networks, registry credentials and controller-pushed images, read into the model;
and what the runner's acts do with them over FakeDocker (the cluster network ensured once
per host, extra networks joined before the start, a login before a pull, a push instead of
a pull, each task stopped with its own grace period)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from minidock.act.acts import STOP_TIMEOUT, Acts, stop_graces
from minidock.core import Run, Stop
from minidock.core.outcomes import fold
from minidock.masking import Masker, kept_masker
from minidock.model import (
    Container,
    Inventory,
    LogConfig,
    RegistryAuth,
    Service,
    Ulimit,
    cluster_network,
    image_registry,
    secret_values,
)
from minidock.spec import SpecError, load
from tests.fakes import Call, FakeDocker, FakeEngine, FakeExecutor
from tests.sim import World, host

HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'


def spec(tmp_path: Path, body: str) -> Path:
    (tmp_path / "inventory.toml").write_text(HOST)
    path = tmp_path / "cluster.toml"
    path.write_text('cluster = "prod"\ninventory = "inventory.toml"\n' + body)
    return path


def secret_file(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    os.chmod(path, mode)


# -- the spec ------------------------------------------------------------------------------
EVERY_OPTION = """
[services.api]
image = "api:2"
labels = { "app.team" = "payments", tier = "web" }
user = "1000:1000"
workdir = "/srv"
entrypoint = ["/bin/tini", "--"]
stop_signal = "SIGQUIT"
stop_grace_period = "1m30s"
init = true
read_only = true
cap_add = ["NET_ADMIN"]
cap_drop = ["ALL"]
ulimits = { nproc = 512, nofile = { soft = 1024, hard = 2048 } }
log = { driver = "json-file", options = { max-size = "10m", max-file = "3" } }
extra_hosts = { "db.internal" = "10.0.0.5", gw = "host-gateway" }
dns = ["10.0.0.2", "2001:db8::53"]
networks = ["backend", "bridge"]
"""


def test_every_run_option_reads_into_the_model(tmp_path: Path) -> None:
    cluster, _ = load(spec(tmp_path, EVERY_OPTION))
    (api,) = cluster.services
    assert api == Service(
        name="api",
        image="api:2",
        labels=(("app.team", "payments"), ("tier", "web")),
        user="1000:1000",
        workdir="/srv",
        entrypoint=("/bin/tini", "--"),
        stop_signal="SIGQUIT",
        stop_grace_period=90.0,
        init=True,
        read_only=True,
        cap_add=("NET_ADMIN",),
        cap_drop=("ALL",),
        ulimits=(Ulimit("nofile", 1024, 2048), Ulimit("nproc", 512, 512)),
        log=LogConfig("json-file", (("max-file", "3"), ("max-size", "10m"))),
        extra_hosts=(("db.internal", "10.0.0.5"), ("gw", "host-gateway")),
        dns=("10.0.0.2", "2001:db8::53"),
        networks=("backend", "bridge"),
    )


def test_a_fractional_grace_period_rounds_up_and_entrypoint_may_clear(tmp_path: Path) -> None:
    body = '[services.a]\nimage = "a"\nstop_grace_period = "1500ms"\nentrypoint = []\n'
    (a,) = load(spec(tmp_path, body))[0].services
    assert (a.stop_grace_period, a.entrypoint) == (2.0, ())


def test_options_left_unset_keep_the_hash_a_task_had_before_they_existed() -> None:
    # the spec hash of a plain service, as every MiniDock before issue 15 computed it:
    # an upgrade must not roll out every running task
    assert Service(name="web", image="web:5").spec_hash() == "8a5a384bfa94"
    assert Service(name="web", image="web:5", stop_grace_period=10.0).spec_hash() == "8a5a384bfa94"


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("web:5", "docker.io"),
        ("library/web", "docker.io"),
        ("team/web:1", "docker.io"),
        ("localhost/web", "localhost"),
        ("127.0.0.1:5099/web:5", "127.0.0.1:5099"),
        ("registry.example/team/web@sha256:" + "a" * 64, "registry.example"),
    ],
)
def test_the_registry_of_an_image_by_dockers_rule(image: str, registry: str) -> None:
    assert image_registry(image) == registry


REGISTRIES = """
[services.app]
image = "reg.example:5000/app:1"

[services.hub]
image = "web:5"

[services.pushed]
image = "reg.example:5000/tool:1"
image_source = "controller"

[registries."reg.example:5000"]
username = "ci"
password = { file = "secrets/reg" }

[registries."docker.io"]
username = "me"
password = { env = "MINIDOCK_TEST_HUB_TOKEN" }
"""


def test_registry_credentials_go_to_the_services_pulling_from_that_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secrets").mkdir()
    secret_file(tmp_path / "secrets" / "reg", "s3cr3t-pw\n")
    monkeypatch.setenv("MINIDOCK_TEST_HUB_TOKEN", "hub-tok")
    cluster, _ = load(spec(tmp_path, REGISTRIES))
    app, hub, pushed = cluster.services
    assert app.registry_auth == RegistryAuth("reg.example:5000", "ci", "s3cr3t-pw")
    assert hub.registry_auth == RegistryAuth("docker.io", "me", "hub-tok")
    assert pushed.registry_auth is None  # the controller pushes it: no pull, no login
    assert "s3cr3t-pw" not in repr(app)
    assert "s3cr3t-pw" in secret_values(app)
    assert app.spec_hash() == Service(name="app", image=app.image).spec_hash()


def test_a_registry_password_file_every_user_may_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    secret_file(tmp_path / "secrets" / "reg", "pw", mode=0o666)
    path = spec(tmp_path, REGISTRIES.split('[registries."docker.io"]')[0])
    with pytest.raises(SpecError) as err:
        load(path)
    where = tmp_path / "secrets" / "reg"
    assert str(err.value) == (
        f'{path}: registries."reg.example:5000".password.file: {where} is writable by '
        f"every user: chmod 600 {where}"
    )


def test_registry_passwords_are_masked_with_every_kept_spec(tmp_path: Path) -> None:
    auth = RegistryAuth("reg.example:5000", "ci", "pw")  # short: masked all the same
    w = World([host("h1")])
    w.apply(Service(name="app", image="reg.example:5000/app:1", registry_auth=auth))
    assert kept_masker(w.state)("login pw") == "login ***"


# -- the runner's acts -----------------------------------------------------------------------
def acts(
    docker: FakeDocker,
    inventory: Inventory,
    *,
    engine: FakeEngine | None = None,
    graces: dict[tuple[str, str], int] | None = None,
) -> Acts:
    executor = docker.executor()
    return Acts(executor, inventory, "prod", 1000.0, Masker(("pw",)), graces=graces, engine=engine)


def inventory(*names: str) -> Inventory:
    return Inventory("inventory.toml", tuple(host(n) for n in names))


def run_of(service: Service, slot: int = 1, on: str = "h1") -> Run:
    return Run(service, slot, on, f"t{slot}", "new task")


def go(a: Acts, *runs: Run) -> None:
    async def main() -> None:
        for r in runs:
            await a.run(r)

    asyncio.run(main())


def calls(a: Acts) -> list[Call]:
    assert isinstance(a.executor, FakeExecutor)
    return a.executor.calls


def argvs(docker: FakeDocker, a: Acts, verb: str) -> list[list[str]]:
    return [c.argv for c in calls(a) if c.argv[1] == verb]


def test_the_cluster_network_is_created_once_per_host_labelled_and_joined() -> None:
    docker = FakeDocker()
    a = acts(docker, inventory("h1", "h2"))
    web = Service(name="web", image="web:5", replicas=2)
    go(a, run_of(web, 1, "h1"), run_of(web, 2, "h1"), run_of(web, 3, "h2"))
    assert docker.nets["h1"] == {"minidock-prod": {"minidock.cluster": "prod"}}
    assert docker.nets["h2"] == {"minidock-prod": {"minidock.cluster": "prod"}}
    creates = [argv for argv in argvs(docker, a, "network") if argv[2] == "create"]
    assert len(creates) == 2  # one per host, not one per task
    runs = argvs(docker, a, "run")
    assert all(r[r.index("--network") + 1] == cluster_network("prod") for r in runs)
    assert all(r[r.index("--network-alias") + 1] == "web" for r in runs)
    assert sorted(docker.names(status="running")) == ["web.1.t1", "web.2.t2", "web.3.t3"]


def test_a_network_of_that_name_that_is_not_ours_is_never_touched() -> None:
    docker = FakeDocker()
    docker.nets["h1"] = {"minidock-prod": {"owner": "someone-else"}}
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="web", image="web:5")))
    assert docker.nets["h1"] == {"minidock-prod": {"owner": "someone-else"}}
    assert not argvs(docker, a, "run")
    (line,) = a.failures
    assert line == (
        "run web.1.t1 on h1: network minidock-prod on h1 is not this cluster's (no label "
        "minidock.cluster=prod): rename or remove it; MiniDock leaves it alone"
    )
    assert a.outcomes  # a failed start: backoff and crash-loop counting as for any other


def test_extra_networks_are_joined_before_the_task_starts() -> None:
    docker = FakeDocker()
    docker.nets["h1"] = {"backend": {}}
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="web", image="web:5", networks=("backend",))))
    verbs = [c.argv[1:3] for c in calls(a)][-3:]
    assert verbs == [["create", "--name"], ["network", "connect"], ["start", "web.1.t1"]]
    (doc,) = docker.containers("h1")
    assert docker.networks[doc["Id"]] == ["minidock-prod", "backend"]
    assert doc["State"]["Status"] == "running"


def test_a_network_that_cannot_be_joined_removes_the_created_task() -> None:
    docker = FakeDocker()
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="web", image="web:5", networks=("missing",))))
    assert docker.containers("h1") == []
    (line,) = a.failures
    assert line.startswith("run web.1.t1 on h1: joining missing failed: ")


def test_a_host_logs_in_before_a_pull_from_a_registry_with_credentials() -> None:
    docker = FakeDocker(images={"web:5"})
    docker.registry = {"reg.example:5000/app:1"}
    docker.passwords = {("reg.example:5000", "ci"): "pw"}
    auth = RegistryAuth("reg.example:5000", "ci", "pw")
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="app", image="reg.example:5000/app:1", registry_auth=auth)))
    assert a.failures == []
    login = next(c for c in calls(a) if c.argv[1] == "login")
    assert login.argv == [
        "docker", "login", "--username", "ci", "--password-stdin", "reg.example:5000",
    ]  # fmt: skip
    assert login.input == "pw"  # on stdin only
    assert docker.names("h1", "running") == ["app.1.t1"]


def test_without_credentials_the_pull_fails_with_the_registrys_word() -> None:
    docker = FakeDocker(images={"web:5"})
    docker.registry = {"reg.example:5000/app:1"}
    docker.passwords = {("reg.example:5000", "ci"): "pw"}
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="app", image="reg.example:5000/app:1")))
    (line,) = a.failures
    assert "cannot be pulled: Error response from daemon: Head https://reg.example" in line


def test_a_wrong_password_is_one_line_naming_the_registry_and_a_failed_start() -> None:
    docker = FakeDocker(images={"web:5"})
    docker.registry = {"reg.example:5000/app:1"}
    docker.passwords = {("reg.example:5000", "ci"): "right"}
    auth = RegistryAuth("reg.example:5000", "ci", "pw")
    a = acts(docker, inventory("h1"))
    svc = Service(name="app", image="reg.example:5000/app:1", registry_auth=auth)
    w = World([host("h1")])
    w.apply(svc)
    go(a, run_of(svc))
    (line,) = a.failures
    assert line == (
        "run app.1.t1 on h1: docker login to registry reg.example:5000 as ci failed: "
        "Error response from daemon: login attempt to http://reg.example:5000/v2/ failed"
    )
    assert not any("pull" in argv for argv in [c.argv for c in calls(a)])
    state, _ = fold(w.state, a.outcomes, w.now)
    slot = state.services["app"].slot(1)
    assert slot.attempts == (1000.0,)  # one failure, at the pass's time
    assert "docker login to registry reg.example:5000" in slot.last_exit


def test_image_source_controller_pushes_instead_of_pulling() -> None:
    docker = FakeDocker(images={"web:5"})
    engine = FakeEngine("tool:7", size=10 << 10)
    a = acts(docker, inventory("h1", "h2"), engine=engine)
    tool = Service(name="tool", image="tool:7", replicas=2, image_source="controller")
    go(a, run_of(tool, 1, "h1"), run_of(tool, 2, "h1"), run_of(tool, 3, "h2"))
    assert a.failures == []
    assert engine.saves == ["tool:7", "tool:7"]  # once per host that lacked it
    assert not any(argv[1] == "pull" for argv in [c.argv for c in calls(a)])
    pushes = [line for line in a.done if line.startswith("pushed")]
    assert [p.split(" (")[0] for p in pushes] == ["pushed tool:7 to h1", "pushed tool:7 to h2"]
    assert "(10.0KiB in " in pushes[0]
    assert sorted(docker.names(status="running")) == ["tool.1.t1", "tool.2.t2", "tool.3.t3"]


def test_a_controller_image_the_controller_lacks_is_a_failed_start() -> None:
    docker = FakeDocker()
    a = acts(docker, inventory("h1"), engine=FakeEngine())
    go(a, run_of(Service(name="tool", image="tool:7", image_source="controller")))
    (line,) = a.failures
    assert line == (
        "run tool.1.t1 on h1: image tool:7 is not in the controller's Docker engine "
        "(image_source = controller): build or pull it there first"
    )


def container(service: str, spec: str, host_name: str = "h1") -> Container:
    return Container(
        id="c" * 64, name=f"{service}.1.t0", host=host_name, cluster="prod", service=service,
        slot=1, task="t0", spec=spec, image="web:5", state="running",
    )  # fmt: skip


def test_every_stop_uses_the_grace_period_of_the_spec_the_task_runs() -> None:
    old = Service(name="db", image="db:1", stop_grace_period=60.0)
    new = Service(name="db", image="db:2", stop_grace_period=5.0)
    w = World([host("h1")])
    w.apply(old)
    w.apply(new)
    graces = stop_graces(w.state)
    assert graces[("db", old.spec_hash())] == 60
    assert graces[("db", new.spec_hash())] == 5
    assert graces[("db", "")] == 5
    docker = FakeDocker()
    a = acts(docker, inventory("h1"), graces=graces)
    stops = [
        Stop(container("db", old.spec_hash()), "outdated"),
        Stop(container("db", "unknown"), "superseded"),
        Stop(container("cache", "x"), "removed service"),
    ]

    async def main() -> None:
        for s in stops:
            await a.stop(s)

    asyncio.run(main())
    stopped = [c for c in calls(a) if c.argv[1] == "stop"]
    assert [c.argv[2:4] for c in stopped] == [["-t", "60"], ["-t", "5"], ["-t", str(STOP_TIMEOUT)]]
    command_timeout = host("h1").command_timeout
    assert [c.timeout for c in stopped] == [
        60 + command_timeout,
        5 + command_timeout,
        10 + command_timeout,
    ]
