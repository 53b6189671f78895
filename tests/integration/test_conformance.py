"""Conformance on every kind of host (issue 44, docs/testing.md "Conformance"): the same
scenarios on each lab host kind (docs/lab.md "Host kinds"): the probe reads each engine
and a health-checked service gets healthy (the Podman host's checks run by MiniDock: no
systemd there), a rolling update behind the health gate with requests through the ingress
and none failed, a name (`expose`) reached from another host, logs and exec (through sudo
too), a killed task replaced under `watch`, a volume moved to the host with its data and
backed up there, that backup restored on a host of the other engine, the seed scenario:
a host carrying 2 of the seed's tasks lost, exactly 2 replacements, its stale tasks
removed when it returns; `hosts check` on each host, and last `hosts prepare` installing
the engine on a host whose engine packages were removed.

One cluster and one deployment, shared by the scenarios in file order, on a lab of its own:
a host of each kind (`MINIDOCK_CONFORMANCE_KINDS`, comma-separated, one kind per host:
default bookworm,trixie,trixie-sudo,sid,podman, the main suite's mixed lab: Debian 12's
Docker 20.10 as root, Debian 13's Docker 26 as a docker-group user and through sudo, the
newest Debian's engine, Podman), or one kind alone
(`nox -s conformance -- KIND`: four hosts of that kind). Per-host scenarios are
parameterized by the host's kind."""

from __future__ import annotations

import json
import os
import socket
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import pytest
import tomli_w
from pytest_docker.plugin import Services

from minidock import restic
from minidock.commands.haproxy import NAMES_IMAGE
from minidock.lab import Lab, engine_available
from minidock.lab.images import HOST_KINDS
from tests.integration.conftest import Fleet, Minidock, patient_inventory
from tests.integration.test_converge import live_by_host, reconcile_until_converged, slots_of
from tests.integration.test_faults import Lines, wait_for
from tests.integration.test_ingress import EDGE, assert_no_failure, paced_load

pytestmark = pytest.mark.integration

MIXED = "bookworm,trixie,trixie-sudo,sid,podman"
KINDS = tuple(os.environ.get("MINIDOCK_CONFORMANCE_KINDS", MIXED).split(","))
HOSTS = {f"host{i}": kind for i, kind in enumerate(KINDS, 1)}
# each kind's engine and the version its Debian suite ships
ENGINES = {
    "bookworm": ("docker", "20."),
    "trixie": ("docker", "26."),
    "trixie-sudo": ("docker", "26."),
    "sid": ("docker", "28."),
    "podman": ("podman", "5."),
}
# one more seed task than the hosts it may run on (all but the edge): one holds two
SEEDS = len(HOSTS)
ONE_EACH = Counter(range(1, SEEDS + 1))
CLIENT = EDGE  # the name's client and the ingress on host1; api and seed elsewhere
PASSWORD = "lab-restic-pass"
HEALTH = """
[services.{service}.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""
SPEC = (
    """
[ingress]
hosts = ["{edge}"]

[services.web]
image = "minidock-lab/web:{version}"
mode = "global"
ingress = {{ host = "app.test", port = 8080 }}
drain_timeout = "1s"
update = {{ parallelism = 2, monitor = "1s" }}  # two of the four at a time: half the wait
"""
    + HEALTH.format(service="web")
    + """
[services.api]
image = "minidock-lab/web:5"
constraints = ["host != {edge}"]
expose = [8080]

[services.client]
image = "{names}"
command = ["sleep", "infinity"]
constraints = ["host == {edge}"]

[services.seed]
image = "minidock-lab/web:5"
replicas = {seeds}
constraints = ["host != {edge}"]

[services.db]
image = "minidock-lab/web:5"
volumes = ["data:/data"]
backup = {{ repository = "{repo}", password = {{ file = "{password}" }}, keep = {{ last = 2 }} }}
"""
)
# a request to api:8080 by name, from the client (glibc resolves; bash's /dev/tcp)
GET = (
    "exec 3<>/dev/tcp/api/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 5 tail -n1 <&3"
)


@pytest.fixture(scope="module")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Minidock]:
    """A lab of a host per kind in KINDS (workloads, the ingress proxy and the name proxy
    in each), and the real CLI on it with patient probes (a loaded machine's slow `docker
    ps` says nothing here), its state and cluster file in the lab's root."""
    assert engine_available(), "no Docker engine answers: run scripts/engine.sh"
    assert restic.restic_available(), "the backup needs restic on the controller"
    unknown = [k for k in KINDS if k not in ENGINES]
    assert not unknown, f"MINIDOCK_CONFORMANCE_KINDS: unknown kinds {unknown}"
    lab = Lab(
        tmp_path_factory.mktemp("conformance"),
        # the session's prefix and labels: a lab left by a crashed run is reaped as its is
        project=f"minidock-labtest-conformance-{os.getpid()}",
        labels={"minidock.lab.test-pid": str(os.getpid()),
                "minidock.lab.test-hostname": socket.gethostname()},
    )  # fmt: skip
    try:
        started = time.monotonic()
        lab.up(len(KINDS), sets=("workloads", "ingress", "names"), kinds=KINDS, timeout=300)
        print(f"conformance lab {','.join(KINDS)} up in {time.monotonic() - started:.1f}s")
        fleet = Fleet(lab, cast(Services, None))  # no pytest-docker: the lab runs compose
        workdir = lab.root / "md"
        workdir.mkdir()
        md = Minidock(fleet, workdir, cluster="conformance")
        md.inventory = patient_inventory(fleet, workdir / "lab.toml")
        password = workdir / "restic-password"
        password.write_text(PASSWORD)
        yield md
    finally:
        lab.down()


def body(md: Minidock, version: int) -> str:
    """The cluster's services with web at minidock-lab/web:VERSION."""
    repo, password = md.workdir / "repo", md.workdir / "restic-password"
    return SPEC.format(
        edge=EDGE, version=version, names=NAMES_IMAGE, repo=repo, password=password, seeds=SEEDS
    )


def apply(md: Minidock, version: int) -> None:
    res = md("apply", str(md.spec(body(md, version))), "--wait", "--timeout", "3m", timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-1000:]


def task_on(md: Minidock, service: str, host: str) -> dict[str, Any]:
    """The running task of SERVICE on HOST (status --json)."""
    found = [t for t in md.tasks(service) if t["host"] == host and t["state"] == "running"]
    assert found, f"no running {service} task on {host}: {md.tasks(service)}"
    return found[0]


def by_kind(argnames: str = "host") -> pytest.MarkDecorator:
    """Parameterize a test by the lab's hosts, each named by its kind (`[podman-host4]`)."""
    return pytest.mark.parametrize(
        argnames, list(HOSTS), ids=[f"{k}-{h}" for h, k in HOSTS.items()]
    )


# -- the probe, the health gate, a rolling update through the ingress ------------------------
def test_each_engine_is_read_and_a_health_checked_service_is_healthy_on_each(
    conformance: Minidock,
) -> None:
    md = conformance
    apply(md, 5)
    doc = md.status()
    engines = {h["name"]: h["engine"] for h in doc["hosts"]}
    for host, kind in HOSTS.items():
        engine, version = ENGINES[kind]
        assert engines[host]["kind"] == engine, engines
        assert engines[host]["version"].startswith(version), engines
    web = {t["host"]: t for t in md.tasks("web")}
    assert sorted(web) == sorted(HOSTS)  # a task on each host, a Podman one too
    assert all(t["health"] == "healthy" for t in web.values()), web
    text = md("status").stdout
    if "podman" in KINDS:
        assert "Podman 5.4" in text
    if "sid" in KINDS:
        assert "Docker 28.5" in text


def test_hosts_check_passes_on_each_kind_and_names_its_engine(conformance: Minidock) -> None:
    """`hosts check` reads each engine as the probe does (a Podman host's root directory
    from Podman's own `info`), and a host a pass drives passes it, a sudo host too."""
    md = conformance
    res = md("hosts", "check", "--json", timeout=240)
    doc = json.loads(res.stdout)
    failed = [
        f"{h['host']}: {c['check']}: {c['found']} (fix: {c['fix']})"
        for h in doc["hosts"]
        for c in h["checks"]
        if c["ok"] is not True
    ]
    assert not failed, "\n".join(failed)
    assert res.returncode == 0, res.stderr
    found = {h["host"]: {c["check"]: c["found"] for c in h["checks"]} for h in doc["hosts"]}
    for host, kind in HOSTS.items():
        engine, version = ENGINES[kind]
        assert found[host]["engine"].startswith(f"{engine.capitalize()} {version}"), found[host]


def test_a_rolling_update_behind_the_health_gate_fails_no_request_through_the_ingress(
    conformance: Minidock,
) -> None:
    md = conformance
    with paced_load(md.fleet) as load:
        time.sleep(0.5)
        apply(md, 6)
        time.sleep(0.5)
    assert_no_failure(load, md.fleet, md)
    assert load.bodies() == {"web 5\n", "web 6\n"}
    doc = md.status()
    assert doc["converged"]
    live = [t for t in md.tasks("web") if t["state"] == "running"]
    assert sorted(t["host"] for t in live) == sorted(HOSTS)
    assert all(t["image"].endswith("web:6") and t["health"] == "healthy" for t in live), live
    print(f"rolling update of {len(live)} tasks: {len(load.replies)} requests, none failed")


# -- names, logs and exec --------------------------------------------------------------------
def test_a_name_is_reached_from_another_host(conformance: Minidock) -> None:
    md = conformance
    (api,) = md.tasks("api")
    assert api["host"] != CLIENT
    client = task_on(md, "client", CLIENT)["name"]
    res = md.fleet.docker(CLIENT, "exec", client, "bash", "-c", f"for i in 1 2 3; do ({GET}); done")
    assert res.stdout == "web 5\n" * 3, res.stdout + res.stderr
    print(f"api on {api['host']} ({HOSTS[api['host']]}) reached by name from {CLIENT}")


@by_kind()
def test_logs_and_exec(conformance: Minidock, host: str) -> None:
    md = conformance
    slot = task_on(md, "web", host)["slot"]
    ran = md("exec", f"web.{slot}", "--", "cat", "/www/index.html")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("web 6")
    logs = md("logs", "web", "--slot", str(slot), "--tail", "5")
    assert logs.returncode == 0, logs.stderr
    assert "cgroups-v1" not in logs.stdout + logs.stderr  # the lab's Podman warns no more
    if HOST_KINDS[HOSTS[host]].sudo:  # its user cannot run docker without sudo
        user = HOST_KINDS[HOSTS[host]].user
        assert md.fleet.ssh(host, "docker ps", username=user).exit_status != 0


# -- watch -----------------------------------------------------------------------------------
def running(md: Minidock, host: str, service: str) -> list[str]:
    return [
        line.split()[0]
        for line in md.containers(host)
        if line.startswith(f"{service}.") and line.endswith(" running")
    ]


def event_stream(md: Minidock, host: str) -> bool:
    """Whether watch's `docker events` (`podman events` under podman-docker) runs on HOST."""
    return md.fleet.exec(host, "pgrep", "-f", "(docker|podman) events").returncode == 0


@by_kind()
def test_a_killed_task_is_replaced_under_watch(conformance: Minidock, host: str) -> None:
    md = conformance
    watcher = md.popen("watch", "--interval", "30s")
    out = Lines(watcher)
    try:
        (victim,) = running(md, host, "web")
        # the host's event stream is open: a kill now rings it
        wait_for(f"{host}'s event stream", lambda: event_stream(md, host), 60)
        md.fleet.docker(host, "kill", victim, check=True)

        def replaced() -> bool:
            return [n for n in running(md, host, "web") if n != victim] != []

        # the interval is 30 s: only an event makes it this soon
        try:
            took = wait_for(f"a replacement of {victim} on {host}", replaced, timeout=25)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; watch printed: {out.text()}") from None
        print(f"killed task on {host} ({HOSTS[host]}) replaced under watch after {took:.1f}s")
    finally:
        watcher.terminate()
        _, err = watcher.communicate(timeout=30)
    assert "Traceback" not in err, err


# -- a volume moved and backed up ------------------------------------------------------------
DOCKER_HOSTS = [h for h, k in HOSTS.items() if ENGINES[k][0] == "docker"]
PODMAN_HOSTS = [h for h, k in HOSTS.items() if ENGINES[k][0] == "podman"]


def move_db(md: Minidock, target: str) -> tuple[str, str]:
    """db.1 moved to TARGET (from another host: it is moved off TARGET first if there), a
    line written into its volume before: (the host it came from, the line)."""
    (db,) = md.tasks("db")
    if db["host"] == target:
        elsewhere = next(h for h in HOSTS if h != target)
        assert md("move", "db.1", "--to", elsewhere, "-q", timeout=240).returncode == 0
        (db,) = md.tasks("db")
    mark = f"{db['host']}-to-{target}"
    wrote = md("exec", "db.1", "--", "sh", "-c", f"echo {mark} >> /data/marks")
    assert wrote.returncode == 0, wrote.stderr
    moved = md("move", "db.1", "--to", target, "--timeout", "3m", timeout=240)
    assert moved.returncode == 0, moved.stdout[-1500:] + moved.stderr[-500:]
    (after,) = md.tasks("db")
    failed = md("events", "--json", "--limit", "50").stdout
    assert after["host"] == target, moved.stdout[-1500:] + failed[-3000:]
    return db["host"], mark


# the last host of each engine: a Docker one, and a Podman one (its stream goes through
# `volume export/import`, docs/hosts.md)
TARGETS = [pytest.param(h, id=HOSTS[h]) for h in DOCKER_HOSTS[-1:] + PODMAN_HOSTS[-1:]]


@pytest.mark.parametrize("target", TARGETS)
def test_a_volume_is_moved_with_its_data_and_backed_up_on_its_new_host(
    conformance: Minidock, target: str
) -> None:
    """db.1 moved to TARGET, its data with it; then a backup of it there, listed."""
    md = conformance
    source, mark = move_db(md, target)
    read = md("exec", "db.1", "--", "cat", "/data/marks")
    assert read.stdout.splitlines()[-1:] == [mark], read.stdout + read.stderr
    backed = md("backup", "db", "--timeout", "3m", timeout=240)
    assert backed.returncode == 0, backed.stdout[-1500:] + backed.stderr[-500:]
    assert f"on {target}" in backed.stdout, backed.stdout
    listed = md("backups", "db", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["snapshots"], listed.stdout
    print(f"db.1 moved {mark} ({HOSTS[source]} to {HOSTS[target]}) and backed up")


def test_a_backup_taken_on_one_engine_is_restored_on_another(conformance: Minidock) -> None:
    """db.1 backed up on its host and restored onto a host of the other engine (another
    host where the lab has one engine): the lines written before the backup are there, the
    one written after it is not. The stream's form is the same on both engines
    (minidock.act.volumecopy): a snapshot made on either restores on the other."""
    md = conformance
    (db,) = md.tasks("db")
    here = db["host"]
    engine = ENGINES[HOSTS[here]][0]
    others = [h for h in HOSTS if h != here]
    there = ([h for h in others if ENGINES[HOSTS[h]][0] != engine] or others)[-1]
    before = md("exec", "db.1", "--", "cat", "/data/marks").stdout.splitlines()
    assert before, "db.1 holds no line: the move's test writes them"
    backed = md("backup", "db", "--timeout", "3m", timeout=240)
    assert backed.returncode == 0, backed.stdout[-1500:] + backed.stderr[-500:]
    after = f"after-the-backup-on-{here}"
    assert md("exec", "db.1", "--", "sh", "-c", f"echo {after} >> /data/marks").returncode == 0
    restored = md("restore", "db.1", "--host", there, "--force", "--timeout", "3m", timeout=240)
    assert restored.returncode == 0, restored.stdout[-1500:] + restored.stderr[-500:]
    (db,) = md.tasks("db")
    assert db["host"] == there, restored.stdout[-1500:]
    read = md("exec", "db.1", "--", "cat", "/data/marks")
    assert read.stdout.splitlines() == before, read.stdout + read.stderr
    print(f"db.1 backed up on {HOSTS[here]}, restored on {HOSTS[there]}: {len(before)} lines")


# -- the seed scenario: a host with 2 of the seed's tasks lost --------------------------------
def test_a_lost_host_with_two_seed_tasks_gets_exactly_two_and_its_stale_ones_go(
    conformance: Minidock,
) -> None:
    md, fleet = conformance, conformance.fleet
    eligible = [h for h in HOSTS if h != EDGE]

    def seeds(hosts: list[str]) -> dict[str, list[str]]:
        return {h: [n for n in names if n.startswith("seed.")]
                for h, names in live_by_host(md, fleet, hosts).items()}  # fmt: skip

    before = seeds(eligible)
    assert sum(len(v) for v in before.values()) == SEEDS, before
    lost = next(h for h, names in before.items() if len(names) == 2)
    fleet.kill(lost, "stop")
    try:
        printed = reconcile_until_converged(md)
        # replacements are placements; a task restarted in place is not one
        started = [line for line in printed if line.startswith("started seed.")]
        placed = [line for line in started if "(place," in line]
        assert len(placed) == 2, printed
        assert all(f" on {lost} " not in line for line in placed)
        survivors = [h for h in eligible if h != lost]
        after = seeds(survivors)
        assert slots_of([n for v in after.values() for n in v]) == ONE_EACH
    finally:
        fleet.revive(lost)
    printed = reconcile_until_converged(md)
    everywhere = seeds(eligible)
    assert slots_of([n for v in everywhere.values() for n in v]) == ONE_EACH
    assert everywhere[lost] == []  # its stale tasks were stopped and removed
    assert any(line.startswith("host-up") for line in printed)
    print(f"lost {lost} ({HOSTS[lost]}) with 2 of {SEEDS} seed tasks: 2 replacements")


# -- hosts prepare on a host without an engine (last: it takes the host's engine away) --------
# The Debian kinds' hosts reach Debian's archive (the machine's mirror) and have apt; the
# engine's packages removed, the host has no `docker` and no `dockerd`, as a fresh server.
REMOVE_ENGINE = (
    "pkill -x dockerd; sleep 1; pkill -x containerd;"
    " DEBIAN_FRONTEND=noninteractive apt-get remove -y -q docker.io docker-cli >/dev/null"
)
BARE = [h for h, k in HOSTS.items() if k in ("trixie", "trixie-sudo", "sid")][:1]


@pytest.mark.parametrize("host", BARE, ids=[f"{HOSTS[h]}-{h}" for h in BARE])
def test_hosts_prepare_installs_the_engine_on_a_host_without_one_then_the_check_passes(
    conformance: Minidock, host: str
) -> None:
    md = conformance
    assert md.inventory is not None
    as_root = tomllib.loads(md.inventory.read_text())
    for entry in as_root["hosts"]:
        if entry["name"] == host:
            entry["user"], entry["sudo"] = "root", False  # prepare installs: root's work
    root_inventory = md.workdir / "root.toml"
    root_inventory.write_text(tomli_w.dumps(as_root))
    md.fleet.exec(host, "sh", "-c", REMOVE_ENGINE, check=True)
    assert md.fleet.exec(host, "sh", "-c", "command -v docker || command -v dockerd").returncode

    before = json.loads(md("hosts", "check", host, "--json", timeout=240).stdout)
    engine = next(c for c in before["hosts"][0]["checks"] if c["check"] == "engine")
    assert engine["found"] == "no docker command", engine
    assert f"minidock hosts prepare {host}" in engine["fix"]

    done = md("hosts", "prepare", host, "--inventory", str(root_inventory), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:3] == [
        f"{host}: install: installed docker.io docker-cli",  # Debian 13's client is its own
        f"{host}: start: started the engine (dockerd started (no systemd))",
        f"{host}: group: root needs no docker group",
    ], done.stdout
    after = md("hosts", "check", host, "--json", timeout=240)  # as the inventory's `deploy`
    doc = json.loads(after.stdout)
    failed = [f"{c['check']}: {c['found']}" for c in doc["hosts"][0]["checks"] if not c["ok"]]
    assert not failed, failed
    assert after.returncode == 0, after.stderr
    print(f"{host} ({HOSTS[host]}): prepare installed the engine; hosts check passes")
