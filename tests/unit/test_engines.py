"""A host's engine: read by the probe from recorded `docker version` outputs, refused when
MiniDock does not drive it (one line naming the engine and the feature), never counted."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from minidock.commands.docker import health_checks_argv
from minidock.commands.facts import (
    ParseError,
    events_argv,
    health_word,
    listing_key,
    parse_event,
    parse_version,
    ps_argv,
    version_argv,
)
from minidock.core import admit
from minidock.core.engines import health_checks_due, refusal
from minidock.core.hosts import (
    ENGINE_AGE,
    HostPhase,
    HostState,
    engine_known,
    engine_step,
    engines_known,
    probe_step,
)
from minidock.core.supervise import NO_CHECK_RAN, still_starting
from minidock.model import (
    Cluster,
    Container,
    Engine,
    HealthCheck,
    Host,
    HostObservation,
    Inventory,
    Observed,
    Service,
)
from minidock.observe import ProbeMemory, observe
from minidock.runner import health_checks, run_pass
from minidock.ssh import Executor, Result, Step, batch_script, parse_batch
from minidock.store.sqlite import SQLiteStore
from minidock.streams import EventStreams
from tests.fakes import FakeExecutor, fail, ok
from tests.sim import World, hosts, svc

VERSIONS = Path(__file__).parent.parent / "data" / "docker" / "version"
H1 = Host(name="h1", address="10.0.0.1")


def recorded(name: str) -> str:
    return (VERSIONS / name).read_text()


def rootless() -> str:
    """Debian unstable's recording with the component rootless Docker adds to its report
    (moby daemon/info.go, fillRootlessVersion): no lab host can run it to record."""
    report = json.loads(recorded("docker-28.5.2.json"))
    report["Server"]["Components"].append({"Name": "rootlesskit", "Version": "2.0.2"})
    return json.dumps(report)


def older(name: str, version: str) -> str:
    """A recording with an older version put in (no such engine is packaged to record)."""
    report = json.loads(recorded(name))
    for part in ("Client", "Server"):
        if report.get(part):
            report[part]["Version"] = version
    for component in (report.get("Server") or {}).get("Components", []):
        component["Version"] = version if component["Name"] == "Engine" else component["Version"]
    return json.dumps(report)


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("docker-20.10.24.json", Engine("docker", "20.10.24+dfsg1")),  # Debian 12
        ("docker-26.1.5.json", Engine("docker", "26.1.5+dfsg1")),  # Debian 13
        ("docker-28.5.2.json", Engine("docker", "28.5.2+dfsg4")),  # Debian unstable
        ("podman-5.4.2.json", Engine("podman", "5.4.2")),  # Debian 13, podman-docker
    ],
)
def test_the_engine_and_its_version_are_read_from_docker_version(name: str, engine: Engine) -> None:
    assert parse_version(recorded(name)) == engine
    assert refusal(engine) is None


def test_an_engine_shows_as_its_name_and_version() -> None:
    assert str(parse_version(recorded("podman-5.4.2.json"))) == "Podman 5.4.2"
    assert parse_version(recorded("docker-26.1.5.json")).release == (26, 1)


def test_a_daemon_that_does_not_answer_gives_no_engine() -> None:
    with pytest.raises(ParseError, match="no engine"):
        parse_version(recorded("docker-no-daemon.txt"))
    with pytest.raises(ParseError, match="invalid JSON"):
        parse_version("Client: Docker Engine - Community\n")


def test_rootless_docker_is_read_and_refused_with_the_reason() -> None:
    engine = parse_version(rootless())
    assert engine == Engine("docker", "28.5.2+dfsg4", rootless=True)
    assert refusal(engine) == (
        "Docker 28.5.2+dfsg4 (rootless) refused: rootless Docker is not supported "
        "(run the daemon as root)"
    )


def test_an_engine_older_than_the_oldest_supported_is_refused_naming_the_feature() -> None:
    docker = parse_version(older("docker-20.10.24.json", "19.03.15"))
    assert refusal(docker) == (
        "Docker 19.03.15 refused: MiniDock needs Docker 20.10 or newer for "
        "`docker run --pull never`"
    )
    podman = parse_version(older("podman-5.4.2.json", "3.4.4"))
    assert refusal(podman) == (
        "Podman 3.4.4 refused: MiniDock needs Podman 4.0 or newer for service names on a "
        "cluster network (netavark, aardvark-dns)"
    )
    assert refusal(Engine("podman", "4.0.0")) is None
    assert refusal(Engine("docker", "20.10.0")) is None


def handler_with(version: Result) -> FakeExecutor:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        return version if argv == version_argv() else ok("")

    return FakeExecutor(handler, engine=None)


def test_a_memory_told_the_recorded_engines_reads_none_of_them() -> None:
    executor = handler_with(ok(recorded("podman-5.4.2.json")))
    memory = ProbeMemory()
    memory.know_engines({"h1": Engine("docker", "26.1.5+dfsg1")})
    seen = asyncio.run(observe(executor, [H1], "rec", ports=False, others=False, memory=memory))
    assert seen.hosts["h1"].engine == Engine("docker", "26.1.5+dfsg1")
    assert not seen.hosts["h1"].engine_read
    assert executor.argvs() == [ps_argv("rec")]


def test_the_probe_reads_each_hosts_engine() -> None:
    executor = handler_with(ok(recorded("podman-5.4.2.json")))
    observed = asyncio.run(observe(executor, [H1], "rec", ports=False, others=False))
    seen = observed.hosts["h1"]
    assert (seen.ok, seen.engine) == (True, Engine("podman", "5.4.2"))
    assert executor.argvs() == [ps_argv("rec"), version_argv()]


def test_a_refused_engine_fails_the_probe_with_one_line_and_is_marked_refused() -> None:
    executor = handler_with(ok(older("docker-20.10.24.json", "19.03.15")))
    seen = asyncio.run(observe(executor, [H1], "rec", ports=False, others=False)).hosts["h1"]
    assert (seen.ok, seen.refused) == (False, True)
    assert seen.error == (
        "Docker 19.03.15 refused: MiniDock needs Docker 20.10 or newer for "
        "`docker run --pull never`"
    )


def test_a_version_that_cannot_be_read_leaves_the_probe_standing_engine_unknown() -> None:
    executor = handler_with(fail("unknown flag: --format", 125))
    seen = asyncio.run(observe(executor, [H1], "rec", ports=False, others=False)).hosts["h1"]
    assert (seen.ok, seen.engine, seen.refused) == (True, None, False)


class Docker26:
    """A host whose engine answers Debian 13's recorded `docker version` (and nothing
    else), or fails every command while `down` (its daemon not answering)."""

    def __init__(self) -> None:
        self.down = False
        self.executor = FakeExecutor(self.handler, engine=None)

    def handler(self, host: Host, argv: list[str], input: str | None) -> Result:
        if self.down:
            return fail("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
        return ok(recorded("docker-26.1.5.json")) if argv == version_argv() else ok("")


def test_a_memory_reads_the_engine_once_and_again_after_a_failed_probe() -> None:
    host = Docker26()
    executor = host.executor
    memory = ProbeMemory()

    def probe() -> HostObservation:
        observed = observe(executor, [H1], "rec", ports=False, others=False, memory=memory)
        return asyncio.run(observed).hosts["h1"]

    assert probe().engine_read  # read by this probe
    seen = probe()
    assert (seen.engine, seen.engine_read) == (Engine("docker", "26.1.5+dfsg1"), False)
    assert executor.argvs().count(version_argv()) == 1
    host.down = True
    probe()
    host.down = False
    probe()
    assert executor.argvs().count(version_argv()) == 2  # read anew after the failure


# -- the engine kept in the state between passes (cron's) ---------------------------------------
D26 = Engine("docker", "26.1.5+dfsg1")


def test_a_recorded_engine_stands_for_a_read_until_its_age() -> None:
    recorded_at = HostState(engine=D26, engine_read=1000.0)
    assert engine_known(recorded_at, 1000.0) == D26
    assert engine_known(recorded_at, 1000.0 + ENGINE_AGE - 0.5) == D26
    assert engine_known(recorded_at, 1000.0 + ENGINE_AGE) is None  # read again
    assert engine_known(recorded_at, 999.0) is None  # a clock set back: read again
    assert engine_known(HostState(), 1000.0) is None
    assert engine_known(HostState(engine=D26), 1000.0) is None  # no time: read
    hosts = {"h1": recorded_at, "h2": HostState(), "h3": replace(recorded_at, engine_read=0.0)}
    assert engines_known(hosts, 1100.0) == {"h1": D26}


def test_a_probe_records_the_engine_it_read_keeps_the_time_of_one_it_was_given() -> None:
    seen = HostObservation("h1", True, engine=D26, engine_read=True)
    first = engine_step(HostState(), seen, 1000.0)
    assert (first.engine, first.engine_read) == (D26, 1000.0)
    given = replace(seen, engine_read=False)  # the probe did not read it: it was told
    assert engine_step(first, given, 1300.0) is first  # the record as it was, not a copy
    assert engine_step(first, seen, 1700.0).engine_read == 1700.0  # read again at its age
    d28 = Engine("docker", "28.5.2+dfsg1")
    assert engine_step(first, replace(given, engine=d28), 1300.0).engine_read == 1300.0
    assert engine_step(first, None, 1300.0) == first  # not probed: kept
    for failed in (
        HostObservation("h1", False, error="docker ps failed"),
        HostObservation("h1", False, error="refused", engine=D26, refused=True),
        HostObservation("h1", True),  # answered, its version not read
    ):
        forgotten = engine_step(first, failed, 1300.0)
        assert (forgotten.engine, forgotten.engine_read) == (None, None)


def test_cron_passes_read_the_engine_once_an_age_and_again_after_a_failed_probe(
    tmp_path: Path,
) -> None:
    """Each `run_pass` without a memory is a cron `minidock reconcile` (a new process):
    the state's engine stands for the read for ENGINE_AGE; a failed probe forgets it."""
    host = Docker26()
    executor = host.executor
    cluster = Cluster("rec", "cluster.toml", "inventory.toml", ())
    inventory = Inventory("inventory.toml", (H1,))
    store = SQLiteStore.open(tmp_path)

    def reads_after_a_pass_at(now: float) -> int:
        asyncio.run(run_pass(cluster, inventory, store, executor, clock=lambda: now))
        return executor.argvs().count(version_argv())

    try:
        store.commit(admit(store.load(), cluster, 1, prune=True), [], generation=cluster,
                     source_path="cluster.toml")  # fmt: skip
        assert reads_after_a_pass_at(1000.0) == 1
        assert store.load().host("h1").engine == D26
        assert reads_after_a_pass_at(1060.0) == 1  # recorded a minute ago: not read
        assert reads_after_a_pass_at(1000.0 + ENGINE_AGE - 1) == 1
        assert reads_after_a_pass_at(1000.0 + ENGINE_AGE) == 2  # its age: read again
        assert reads_after_a_pass_at(1060.0 + ENGINE_AGE) == 2
        host.down = True
        assert reads_after_a_pass_at(1120.0 + ENGINE_AGE) == 2  # the probe failed
        assert store.load().host("h1").engine is None
        host.down = False
        assert reads_after_a_pass_at(1180.0 + ENGINE_AGE) == 3  # read anew
    finally:
        store.close()


def test_a_refused_host_takes_no_task_and_is_never_counted_towards_down() -> None:
    line = "Docker 19.03.15 refused: MiniDock needs Docker 20.10 or newer for ..."
    state, event = probe_step(
        "h1", HostState(), answered=None, error=line, down_after=1, now=1.0, refused=True
    )
    assert (state.phase, state.failures, state.last_error) == (HostPhase.UNREACHABLE, 0, line)
    assert state.why_not_eligible() == f"unreachable ({line})"
    assert event is not None
    assert (event.kind, event.message) == ("host-refused", f"h1: {line}; it takes no task")
    for now in (2.0, 3.0, 400.0):
        state, event = probe_step(
            "h1", state, answered=None, error=line, down_after=1, now=now, refused=True
        )
        assert (state.phase, state.failures, event) == (HostPhase.UNREACHABLE, 0, None)


# -- health checks on Podman hosts, and a gate that never waits silently ------------------------
def task(n: int, host: str, health: str, state: str = "running", log: str = "") -> Container:
    return Container(
        id=f"{n:064x}",
        name=f"web.{n}.t{n}",
        host=host,
        cluster="c",
        service="web",
        slot=n,
        task=f"t{n}",
        spec="s",
        image="web:5",
        state=state,  # type: ignore[arg-type]
        health=health,  # type: ignore[arg-type]
        started_at=100.0,
        health_log=log,
    )


PODMAN, DOCKER = Engine("podman", "5.4.2"), Engine("docker", "26.1.5+dfsg1")


def test_health_checks_run_for_health_checked_running_tasks_on_podman_hosts_only() -> None:
    observed = Observed(
        {
            "p1": HostObservation(
                "p1",
                True,
                (
                    task(1, "p1", "starting"),
                    task(2, "p1", "none"),
                    task(3, "p1", "healthy"),
                    task(4, "p1", "unhealthy", state="exited"),
                ),
                engine=PODMAN,
            ),
            "d1": HostObservation("d1", True, (task(5, "d1", "starting"),), engine=DOCKER),
            "p2": HostObservation("p2", False, error="connection refused", engine=PODMAN),
        }
    )
    assert health_checks_due(observed, "c") == {"p1": (f"{1:064x}", f"{3:064x}")}
    assert health_checks_due(observed, "other") == {}


def test_the_pass_runs_them_in_one_command_per_podman_host() -> None:
    observed = Observed(
        {
            "p1": HostObservation("p1", True, (task(1, "p1", "starting"),), engine=PODMAN),
            "d1": HostObservation("d1", True, (task(2, "d1", "starting"),), engine=DOCKER),
        }
    )
    inventory = Inventory("inv.toml", (Host("p1", "10.0.0.1"), Host("d1", "10.0.0.2")))
    executor = FakeExecutor(lambda host, argv, input: ok(""))
    fenced: list[bool] = []
    ran = asyncio.run(
        health_checks(executor, inventory, observed, "c", lambda: fenced.append(True))
    )
    assert ran == ["p1"]
    assert fenced == [True]
    assert executor.argvs() == [health_checks_argv([f"{1:064x}"])]
    (argv,) = executor.argvs()
    assert argv[:2] == ["sh", "-c"]
    assert "docker healthcheck run" in argv[2]


def test_a_task_starting_past_its_health_deadline_says_why() -> None:
    health = HealthCheck(("true",), interval=2.0, retries=3, start_period=5.0, timeout=1.0)
    web = Service(name="web", image="web:5", health=health)
    never = task(1, "p1", "starting")
    assert still_starting(never, web, now=100.0 + 11.0) == ""  # within 5 + 3 x 2 + 1 = 12 s
    assert still_starting(never, web, now=100.0 + 30.0) == (
        f"starting 30s, past its health check's 12s; {NO_CHECK_RAN}"
    )
    failing = task(2, "d1", "starting", log="wget: can't connect to remote host")
    assert still_starting(failing, web, now=130.0).endswith(
        "; last check: wget: can't connect to remote host"
    )
    assert still_starting(task(3, "d1", "healthy"), web, now=130.0) == ""


def test_podmans_starting_health_is_read_from_its_status_column_as_the_batch_reads_it() -> None:
    podman_ps = "b30f3b385f94 running Up 1 second (starting)\n"  # Podman 5.4.2's docker ps
    assert health_word("Up 1 second (starting)") == "starting"
    key = listing_key("b30f3b385f94", "running", "Up 1 second (starting)")
    steps = [Step(("printf", "%s", podman_ps)), Step(("echo", "inspect"), ids_from=0, skip=(key,))]
    done = subprocess.run(
        ["sh", "-c", batch_script(steps, "@@m")], capture_output=True, text=True, check=False
    )
    assert parse_batch(done.stdout, done.stderr, "@@m", 2) == [ok(podman_ps), None]  # known


def test_a_slot_whose_task_stays_starting_says_why_in_its_waiting_line() -> None:
    world = World(hosts(1))
    world.apply(svc(health=HealthCheck(("true",), interval=1.0, retries=2, timeout=1.0)))
    world.step()  # placed
    (name,) = world.containers
    started = replace(world.containers[name][0], health="starting", started_at=world.now)
    world.containers[name] = [started]  # an engine that runs no check: starting for ever
    assert [w.reason for w in world.plan().waiting] == [f"task {started.task} running (starting)"]
    world.now += 10.0
    (line,) = [w.reason for w in world.plan().waiting]
    assert line == (
        f"task {started.task} running (starting): starting 10s, past its health check's 3s; "
        f"{NO_CHECK_RAN}"
    )


# -- watch's event streams on Podman ------------------------------------------------------------
PODMAN_DIED = (  # what Podman 5.4.2 printed for a killed container (recorded)
    "died 0f120a9c3f781ef41212adb202fa47184c2dbb56fee485119e0acd8691e3620f 1796446780641819667"
)


def test_podmans_events_have_their_own_template_and_read_as_dockers_words() -> None:
    docker, podman = events_argv("c", "1.0"), events_argv("c", "1.0", "podman")
    assert docker[docker.index("--format") + 1] == "{{.Action}} {{.ID}} {{.TimeNano}}"
    assert podman[podman.index("--format") + 1] == "{{.Status}} {{.ID}} {{.TimeNano}}"
    assert docker[:-3] == podman[:-3]  # the same filters
    assert parse_event(PODMAN_DIED) == (
        "die",
        "0f120a9c3f781ef41212adb202fa47184c2dbb56fee485119e0acd8691e3620f",
        1796446780641819667,
    )
    assert parse_event(f"remove {'a' * 64} 1")[0] == "destroy"


def test_a_stream_is_opened_anew_with_podmans_template_once_a_pass_finds_podman() -> None:
    opened: list[list[str]] = []

    class Recording:
        async def follow(self, host: Host, argv: list[str], on_line: object) -> int:
            opened.append(argv)
            await asyncio.sleep(3600)
            return 0

    async def scenario() -> None:
        events = EventStreams(cast(Executor, Recording()), lambda host: None)
        events.follow("c", [H1])
        await asyncio.sleep(0.01)
        events.engines("c", {"h1": "docker"})  # as it was: nothing reopened
        await asyncio.sleep(0.01)
        events.engines("c", {"h1": "podman"})
        await asyncio.sleep(0.01)
        await events.close()

    asyncio.run(scenario())
    templates = [argv[argv.index("--format") + 1].split()[0] for argv in opened]
    assert templates == ["{{.Action}}", "{{.Status}}"]
