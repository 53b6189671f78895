"""Service names across hosts (docs/discovery.md): the endpoint table from observed tasks,
the name proxies' HAProxy configs with their digests (checked by haproxy itself), the
probe's parser, converging the proxies over a recording shell, the drain gate over the
name proxies, the task's argv and inspect, and the spec key."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from minidock.act.names import converge_names, loaded_name_upstreams
from minidock.commands.docker import run_argv
from minidock.commands.facts import parse_inspect
from minidock.commands.haproxy import (
    NAMES_IMAGE,
    name_proxy_config,
    parse_digest,
    parse_names_probe,
)
from minidock.commands.haproxy import run_argv as haproxy_run_argv
from minidock.commands.proxies import name_loads
from minidock.core import ControllerState, Plan, Stop
from minidock.core.endpoints import (
    Endpoints,
    NameStep,
    endpoint_table,
    name_steps,
    names_in_use,
)
from minidock.core.state import ServiceState
from minidock.core.traffic import Traffic, gate
from minidock.model import (
    Cluster,
    Container,
    HealthCheck,
    Host,
    HostNames,
    HostObservation,
    Inventory,
    NameProxy,
    Observed,
    Service,
)
from minidock.spec import SpecError, load_cluster
from minidock.ssh import Result

NOW = 1000.0
API = Service(
    "api",
    "web:5",
    replicas=2,
    health=HealthCheck(("wget", "http://127.0.0.1:8080/")),
    expose=(8080, 5432),
)
HOSTS = (
    Host("host1", "127.0.0.1", private_address="10.0.0.1"),
    Host("host2", "127.0.0.1", private_address="10.0.0.2"),
)
INVENTORY = Inventory("inventory.toml", HOSTS)
CLUSTER = Cluster("c", "c.toml", "inventory.toml", (API, Service("web", "web:5")))


def task(n: int, host: str = "host1", health: str = "healthy", base: int = 31000) -> Container:
    return Container(
        id=f"id{n}",
        name=f"api.{n}.t{n}",
        host=host,
        cluster="c",
        service="api",
        slot=n,
        task=f"t{n}",
        spec=API.spec_hash(),
        image="web:5",
        state="running",
        health=health,  # type: ignore[arg-type]
        started_at=NOW - 10,
        published=((8080, base), (5432, base + 1)),
    )


def observed(*tasks: Container) -> Observed:
    return Observed(
        {
            h.name: HostObservation(h.name, True, tuple(t for t in tasks if t.host == h.name))
            for h in HOSTS
        }
    )


def test_endpoints_are_the_exposed_tasks_that_take_traffic_on_every_host() -> None:
    seen = observed(task(1), task(2, "host2", base=31010), task(3, health="starting"))
    table = endpoint_table(CLUSTER, INVENTORY, seen, ControllerState(), NOW)
    assert table == (
        Endpoints("api", 5432, ("10.0.0.1:31001", "10.0.0.2:31011"), ("t1", "t2")),
        Endpoints("api", 8080, ("10.0.0.1:31000", "10.0.0.2:31010"), ("t1", "t2")),
    )
    draining = ControllerState(draining={"t1": NOW})
    table = endpoint_table(CLUSTER, INVENTORY, seen, draining, NOW)
    assert [e.tasks for e in table] == [("t2",), ("t2",)]  # a draining task leaves first
    silent = replace(seen, hosts={**seen.hosts, "host2": HostObservation("host2", False)})
    table = endpoint_table(CLUSTER, INVENTORY, silent, ControllerState(), NOW)
    assert [e.tasks for e in table] == [("t1",), ("t1",)]


def test_a_service_that_exposes_nothing_has_no_endpoints() -> None:
    cluster = replace(CLUSTER, services=(replace(API, expose=()),))
    assert endpoint_table(cluster, INVENTORY, observed(task(1)), ControllerState(), NOW) == ()


def test_the_config_is_one_value_whose_digest_follows_its_endpoints() -> None:
    one = (Endpoints("api", 8080, ("10.0.0.1:31000",), ("t1",)),)
    two = (Endpoints("api", 8080, ("10.0.0.1:31000", "10.0.0.2:31010"), ("t1", "t2")),)
    first, again, second = (name_proxy_config("api", e) for e in (one, one, two))
    assert first == again
    assert first.digest != second.digest
    assert parse_digest(second.text) == second.digest
    assert parse_digest("global\n") is None
    assert "    server t2 10.0.0.2:31010 check\n" in second.text
    assert "bind :8080\n" in second.text
    other = name_proxy_config("web", two)  # only the named service's endpoints
    assert "    server " not in other.text
    assert "backend" not in other.text


def test_haproxy_itself_takes_the_config(tmp_path: Path) -> None:
    entries = (
        Endpoints("api", 8080, ("10.0.0.1:31000", "10.0.0.2:31010"), ("t1", "t2")),
        Endpoints("api", 5432, (), ()),
    )
    text = name_proxy_config("api", entries).text
    path = tmp_path / "haproxy.cfg"
    path.write_text(text.replace("/var/run/haproxy.sock", str(tmp_path / "s.sock")))
    checked = subprocess.run(  # Debian's haproxy (scripts/engine.sh installs it)
        ["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- the names adapter over a recording shell ------------------------------------------------
def test_a_probe_reads_each_proxy_its_state_digest_and_upstreams() -> None:
    config = name_proxy_config("api", (Endpoints("api", 8080, ("10.0.0.2:31010",), ("t2",)),))
    stdout = (
        f"== minidock-names-c-api running\n{config.text}"
        "== minidock-names-c-db exited\n"
        "== minidock-names-other-api running\n# minidock-names zzz\n"
    )
    found = parse_names_probe("c", stdout)
    assert found == {
        "api": NameProxy("api", True, config.digest, ((8080, "t2", "10.0.0.2:31010"),)),
        "db": NameProxy("db", False),
    }


def test_converging_starts_a_missing_proxy_loads_only_where_the_digest_differs() -> None:
    table = (Endpoints("api", 8080, ("10.0.0.2:31010",), ("t2",)),)
    config = name_proxy_config("api", table)
    calls: list[tuple[str, list[str]]] = []

    async def sh(host: str, argv: list[str], stdin: str | None = None) -> Result:
        calls.append((host, argv))
        return Result(0, "", "")

    seen: dict[str, HostNames] = {
        "host1": {},  # no proxy yet: started, then loaded
        "host2": {"api": NameProxy("api", True, config.digest)},  # loaded already
        "host3": {"api": NameProxy("api", True, "old"), "gone": NameProxy("gone", True)},
        "host4": None,  # did not answer: left alone
    }
    used = {"host1", "host2", "host3", "host4"}
    steps = name_steps(table, seen, used, {})
    assert steps == (
        NameStep("host1", ("api",)),
        NameStep("host2", ("api",)),
        NameStep("host3", ("api",), ("gone",)),
    )
    rendered = name_loads(table, steps, seen)
    outcome = asyncio.run(converge_names(sh, "c", "names:1", rendered, NOW))
    assert outcome.failures == []
    by_host = {h: [a[1] for h2, a in calls if h2 == h] for h in seen}
    assert by_host["host1"] == ["rm", "run", "cp", "exec", "kill"]
    assert by_host["host2"] == []
    assert by_host["host3"] == ["cp", "exec", "kill", "stop", "rm"]  # `gone`: stopped, removed
    assert by_host["host4"] == []
    assert [e.kind for e in outcome.events].count("endpoints-loaded") == 2
    assert loaded_name_upstreams(seen) == frozenset()


# -- the rest of the wiring: held endpoints, the drain gate, argv, inspect, the spec ----------
def test_a_silent_host_that_is_not_down_keeps_the_endpoints_the_proxies_loaded() -> None:
    loaded = NameProxy("api", True, "d", ((8080, "t2", "10.0.0.2:31010"),))
    seen = replace(
        observed(task(1)),
        names={"host1": {"api": loaded}, "host2": None},
    )
    silent = replace(seen, hosts={**seen.hosts, "host2": HostObservation("host2", False)})
    table = endpoint_table(CLUSTER, INVENTORY, silent, ControllerState(), NOW)
    by_port = {e.port: (e.upstreams, e.tasks) for e in table}
    assert by_port[8080] == (("10.0.0.1:31000", "10.0.0.2:31010"), ("t1", "t2"))
    assert by_port[5432] == (("10.0.0.1:31001",), ("t1",))  # nothing loaded there for t2
    draining = ControllerState(draining={"t2": NOW})  # a draining task is never kept
    table = endpoint_table(CLUSTER, INVENTORY, silent, draining, NOW)
    assert {e.port: e.tasks for e in table}[8080] == ("t1",)


def test_names_are_looked_at_while_a_service_or_a_kept_spec_exposes() -> None:
    plain = replace(CLUSTER, services=(Service("web", "web:5"),))
    assert names_in_use(CLUSTER, ControllerState())
    assert not names_in_use(plain, ControllerState())
    kept = ControllerState(
        services={"api": ServiceState(spec=Service("api", "x"), generation=2, previous=API)}
    )
    assert names_in_use(plain, kept)  # its proxies are removed by the passes that follow


def gated(plan: Plan, seen: Observed, now: float) -> Plan:
    """The traffic gate over `plan`, with what the pass knows of traffic (`Traffic.of`)."""
    return gate(plan, Traffic.of(CLUSTER, INVENTORY, seen, plan.state, now))


def test_an_exposed_task_leaves_every_name_proxy_before_it_stops() -> None:
    t = task(1)
    loaded = NameProxy("api", True, "d", ((8080, "t1", "10.0.0.1:31000"),))
    seen = replace(observed(t), names={"host2": {"api": loaded}})
    held = gated(Plan(ControllerState(), stop=(Stop(t, "scaled down"),)), seen, NOW)
    assert held.stop == ()
    assert held.state.draining == {"t1": NOW}
    assert [e.kind for e in held.events] == ["draining"]
    gone = replace(seen, names={"host2": {"api": NameProxy("api", True, "e")}})
    waiting = gated(Plan(held.state, stop=(Stop(t, "scaled down"),)), gone, NOW + 1)
    assert waiting.stop == ()  # out of every proxy, drain_timeout (5 s) still running
    done = gated(Plan(held.state, stop=(Stop(t, "scaled down"),)), gone, NOW + 5)
    assert [s.container.task for s in done.stop] == ["t1"]


def test_an_exposed_task_publishes_on_its_hosts_address_and_has_no_alias() -> None:
    argv, _ = run_argv(API, "c", 1, "t1", "h", network="minidock-c", exposed_at="10.0.0.1")
    joined = " ".join(argv)
    assert "-p 10.0.0.1::8080 -p 10.0.0.1::5432" in joined
    assert "--network minidock-c" in joined
    assert "--network-alias" not in argv
    plain, _ = run_argv(Service("web", "web:5"), "c", 1, "t1", "h", network="minidock-c")
    assert plain[plain.index("--network-alias") + 1] == "web"


def test_the_port_docker_picked_is_read_from_inspect() -> None:
    raw = {
        "Id": "abc",
        "Name": "/api.1.t1",
        "Created": "2026-01-01T00:00:00Z",
        "Config": {
            "Image": "web:5",
            "Labels": {
                "minidock.cluster": "c",
                "minidock.service": "api",
                "minidock.slot": "1",
                "minidock.task": "t1",
                "minidock.spec": "h",
            },
        },
        "State": {"Status": "running", "StartedAt": "2026-01-01T00:00:01Z"},
        "HostConfig": {"PortBindings": {"8080/tcp": [{"HostIp": "10.0.0.1", "HostPort": ""}]}},
        "NetworkSettings": {"Ports": {"8080/tcp": [{"HostIp": "10.0.0.1", "HostPort": "32771"}]}},
    }
    (found,) = parse_inspect("host1", "c", json.dumps([raw]))
    assert found.published == ((8080, 32771),)


def test_the_name_proxy_starts_under_the_services_name_on_the_cluster_network() -> None:
    argv = haproxy_run_argv("c", "api", NAMES_IMAGE)
    assert argv[argv.index("--network") + 1] == "minidock-c"
    assert argv[argv.index("--network-alias") + 1] == "api"
    assert argv[argv.index("--label") + 1] == "minidock.names=c"
    assert "haproxy -W -db" in argv[-3]
    assert NAMES_IMAGE in argv
    # docker stop sends the master's soft stop: the connections under way are served
    assert argv[argv.index("--stop-signal") + 1] == "USR1"


def test_expose_in_the_spec(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text('[[hosts]]\nname = "h1"\naddress = "127.0.0.1"\n')
    path = tmp_path / "c.toml"
    head = 'cluster = "c"\ninventory = "inventory.toml"\n[services.api]\nimage = "web:5"\n'
    path.write_text(head + "expose = [8080, 5432]\n")
    (api,) = load_cluster(path).services
    assert api.expose == (5432, 8080)
    assert api.spec_hash() != replace(api, expose=()).spec_hash()  # adding it rolls out
    for bad, said in (
        ("expose = [0]", "expose"),
        ("expose = [8080, 8080]", "expose"),
        ('expose = [8080]\nschedule = "0 3 * * *"', "a job's runs take no traffic"),
    ):
        path.write_text(head + bad + "\n")
        with pytest.raises(SpecError) as caught:
            load_cluster(path)
        assert said in str(caught.value)
