"""One-off tasks (docs/jobs.md): the spec a one-off runs, where it runs, which a pass
removes, and the docker commands and parsers for them (the pure parts of `minidock run`)."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from minidock.commands.docker import oneoff_create_argv, oneoff_name, oneoff_start_argv
from minidock.commands.facts import parse_inspect, parse_oneoffs
from minidock.core import ControllerState, ServiceState, SlotState
from minidock.core.hosts import Availability, HostState
from minidock.core.jobs import finished_oneoffs, oneoff_spec, place_oneoff
from minidock.model import (
    Container,
    HealthCheck,
    Host,
    HostObservation,
    Inventory,
    Observed,
    OneOff,
    PortMapping,
    Service,
    Volume,
)

WEB = Service(
    "web",
    "web:5",
    command=("httpd",),
    env=(("MODE", "prod"), ("LEVEL", "1")),
    secrets=(("TOKEN", "s3cret"),),
    ports=(PortMapping(8080, 8080),),
    health=HealthCheck(("true",)),
    cpus=1.0,
)
HOSTS = tuple(Host(f"host{n}", f"10.0.0.{n}", cpus=2) for n in (1, 2, 3))
INVENTORY = Inventory("inv.toml", HOSTS)
KEYS = st.sampled_from(["MODE", "LEVEL", "TOKEN", "EXTRA", "OTHER"])


@given(st.lists(st.tuples(KEYS, st.text(max_size=5)), max_size=4, unique_by=lambda kv: kv[0]))
def test_a_oneoff_runs_the_spec_with_its_command_and_env_given_over_the_services(
    env: list[tuple[str, str]],
) -> None:
    spec = oneoff_spec(WEB, ["sh", "-c", "env"], env)
    seen = dict((*spec.env, *spec.secrets))
    assert len(seen) == len(spec.env) + len(spec.secrets)  # each key once
    for key, value in (*WEB.env, *WEB.secrets, *env):
        assert seen[key] == dict(env).get(key, value)
    assert spec.command == ("sh", "-c", "env")
    assert (spec.ports, spec.health, spec.ingress) == ((), None, ())
    assert (spec.image, spec.cpus) == (WEB.image, WEB.cpus)


def task(host: str, service: str = "web", cpus: float = 1.0) -> Container:
    return Container(
        f"id-{host}", f"{service}.1.t", host, "c", service, 1, "t", "spec", "web:5", "running",
        cpus=cpus, host_ports=("8080/tcp",),
    )  # fmt: skip


def world(*down: str) -> Observed:
    return Observed(
        {
            h.name: HostObservation(h.name, False, error="refused")
            if h.name in down
            else HostObservation(h.name, True, (task(h.name),) if h.name == "host1" else ())
            for h in HOSTS
        }
    )


def test_a_oneoff_is_placed_by_the_scheduler_and_publishes_nothing() -> None:
    spec = oneoff_spec(WEB, ["true"])
    state = ControllerState("c", hosts={"host2": HostState(availability=Availability.DRAINED)})
    ss = ServiceState(WEB, 1)
    placed = place_oneoff(ss, spec, INVENTORY, world("host3"), state)
    assert (placed.host, placed.slot) == ("host1", 1)  # bin-packing: the fullest that fits
    # asked for host1, which holds the service's port 8080: fine, nothing is published
    assert place_oneoff(ss, spec, INVENTORY, world(), state, "host1").host == "host1"
    drained = place_oneoff(ss, spec, INVENTORY, world(), state, "host2")
    assert drained.host == ""
    assert "drained" in drained.why
    silent = place_oneoff(ss, spec, INVENTORY, world("host3"), state, "host3")
    assert silent.host == ""
    assert "did not answer (refused)" in silent.why


def test_a_oneoff_that_fits_nowhere_says_why_host_by_host() -> None:
    big = oneoff_spec(Service("big", "web:5", cpus=2.0), ["true"])
    placed = place_oneoff(ServiceState(big, 1), big, INVENTORY, world(), ControllerState("c"))
    assert placed.host == "host2"  # host1 has 1 of 2 cpus free
    huge = oneoff_spec(Service("huge", "web:5", cpus=3.0), ["true"])
    refused = place_oneoff(ServiceState(huge, 1), huge, INVENTORY, world(), ControllerState("c"))
    assert refused.host == ""
    assert refused.why.count("cpus") == 3, refused.why


def test_a_pinned_services_oneoff_runs_where_its_lowest_slot_keeps_its_volumes() -> None:
    db = Service("db", "db:2", replicas=2, volumes=(Volume("data", "/var/lib/db"),))
    slots = {2: SlotState(task="a", host="host3"), 1: SlotState(task="b", host="host2")}
    ss = ServiceState(db, 1, slots=slots)
    spec = oneoff_spec(db, ["migrate"])
    placed = place_oneoff(ss, spec, INVENTORY, world(), ControllerState("c"))
    assert (placed.host, placed.slot) == ("host2", 1)
    elsewhere = place_oneoff(ss, spec, INVENTORY, world(), ControllerState("c"), "host1")
    assert elsewhere.host == ""
    assert "keeps its volumes on host2 (slot 1)" in elsewhere.why
    argv, _ = oneoff_create_argv(spec, "c", "run", "r1", slot=placed.slot)
    assert "c_db.1_data:/var/lib/db" in argv


def test_a_pass_removes_finished_oneoffs_on_answering_hosts_only() -> None:
    def oneoff(host: str, state: str) -> OneOff:
        return OneOff(f"id-{host}-{state}", "web.run.r", host, "web", "r", "run", state)  # type: ignore[arg-type]

    observed = Observed(
        {
            "host1": HostObservation(
                "host1", True, oneoffs=(oneoff("host1", "running"), oneoff("host1", "exited"))
            ),
            "host2": HostObservation("host2", True, oneoffs=(oneoff("host2", "dead"),)),
            "host3": HostObservation("host3", False, oneoffs=(oneoff("host3", "exited"),)),
        }
    )
    assert [o.id for o in finished_oneoffs(observed)] == ["id-host1-exited", "id-host2-dead"]


def inspected(labels: dict[str, str], status: str = "exited", code: int = 3) -> dict[str, object]:
    return {
        "Id": "ab" * 32,
        "Name": "/web.run.r1",
        "Config": {"Labels": labels, "Image": "web:5"},
        "State": {"Status": status, "ExitCode": code},
        "HostConfig": {},
    }


def test_a_oneoff_is_parsed_as_one_and_never_as_a_task() -> None:
    spec = oneoff_spec(WEB, ["true"])
    argv, _ = oneoff_create_argv(spec, "c", "run", "r1", "ctl")
    pairs = [value.split("=", 1) for flag, value in itertools.pairwise(argv) if flag == "--label"]
    labels = dict(pairs)
    assert "minidock.slot" not in labels
    assert labels["minidock.oneoff"] == "run"
    assert labels["minidock.task"] == "r1"
    task_labels = {**labels, "minidock.slot": "1"}
    output = json.dumps([inspected(labels), inspected(task_labels, "running", 0)])
    assert [c.slot for c in parse_inspect("h", "c", output)] == [1]
    (found,) = parse_oneoffs("h", "c", output)
    assert (found.name, found.run, found.kind, found.exit_code, found.finished) == (
        "web.run.r1", "r1", "run", 3, True,
    )  # fmt: skip
    assert parse_oneoffs("h", "other", output) == ()


@given(st.text(min_size=1, max_size=12).filter(lambda v: not any(c in v for c in "\n\r\0")))
def test_a_oneoffs_env_travels_on_stdin_never_in_the_argv(value: str) -> None:
    spec = oneoff_spec(WEB, ["true"], [("EXTRA", value)])
    argv, env = oneoff_create_argv(spec, "c", "run", "r1", interactive=True, tty=True)
    assert f"EXTRA={value}\n" in env
    assert "TOKEN=s3cret\n" in env
    assert not any("s3cret" in a or a == f"EXTRA={value}" for a in argv)
    assert "-p" not in argv
    assert "--health-cmd" not in argv
    assert "--network-alias" not in argv
    assert argv[:4] == ["docker", "create", "--name", oneoff_name("web", "run", "r1")]
    assert argv[-3:] == ["no", "web:5", "true"]
    assert {"-i", "-t"} <= set(argv)
    assert oneoff_start_argv("web.run.r1", interactive=True) == [
        "docker", "start", "-a", "-i", "web.run.r1",
    ]  # fmt: skip
