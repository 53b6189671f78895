"""observe(): every host probed at once; any failure is a failed probe, never "empty"."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from minidock.commands.facts import (
    inspect_argv,
    parse_ids,
    proc_net_argv,
    ps_argv,
    published_ports_argv,
)
from minidock.model import Host, HostObservation, Observed
from minidock.observe import ProbeMemory, observe
from minidock.ssh import CommandTimeout, Result, Unreachable
from tests.fakes import FakeExecutor, Handler, fail, ok

DATA = Path(__file__).parent.parent / "data" / "docker"
PS = (DATA / "ps.txt").read_text()
MIXED = (DATA / "mixed.json").read_text()
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
OTHER = "d621864ab712f9e298c545f6a689512c5d1a3abed8445d1b1adf554c864b648c running Up 1 hour\n"
H1, H2, H3 = (Host(name=f"h{i}", address=f"10.0.0.{i}") for i in (1, 2, 3))


def run(handler: Handler, hosts: list[Host], cluster: str = "rec") -> tuple[Observed, FakeExecutor]:
    """The containers' probe alone (ps + inspect): the host ports read is tested below."""
    executor = FakeExecutor(handler)
    return asyncio.run(observe(executor, hosts, cluster, ports=False, others=False)), executor


def test_reachable_host_with_containers() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:2] == ["docker", "ps"]:
            return ok(PS)
        return ok(MIXED)

    observed, executor = run(handler, [H1])
    o = observed.hosts["h1"]
    assert (o.ok, o.error) == (True, None)
    assert [c.name for c in o.containers] == ["crash.1.t6crash", "web.1.t1run"]  # docker ps order
    assert all(c.host == "h1" and c.cluster == "rec" for c in o.containers)
    assert executor.argvs() == [ps_argv("rec"), inspect_argv(parse_ids(PS))]
    assert all(c.input is None for c in executor.calls)


def test_no_containers_skips_inspect() -> None:
    observed, executor = run(lambda host, argv, input: ok(""), [H1])
    assert observed.hosts["h1"].ok
    assert observed.hosts["h1"].containers == ()
    assert executor.argvs() == [ps_argv("rec")]


def test_docker_daemon_down_is_a_failed_probe() -> None:
    observed, _ = run(lambda host, argv, input: fail(DAEMON_DOWN), [H1])
    o = observed.hosts["h1"]
    assert not o.ok
    assert o.containers == ()
    assert o.error == (
        "docker ps failed (exit 1): Cannot connect to the Docker daemon at "
        "unix:///var/run/docker.sock. Is the docker daemon running?"
    )


def test_inspect_failure_is_a_failed_probe() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[1] == "ps":
            return ok(PS)
        return fail("permission denied while trying to connect to the Docker daemon socket")

    observed, _ = run(handler, [H1])
    assert not observed.hosts["h1"].ok
    assert "docker inspect failed (exit 1): permission denied" in str(observed.hosts["h1"].error)


def test_unreachable_is_a_failed_probe() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        raise Unreachable(host.name, "connection refused by 10.0.0.1:22")

    observed, _ = run(handler, [H1])
    assert observed.hosts["h1"] == HostObservation(
        host="h1", ok=False, error="connection refused by 10.0.0.1:22"
    )


def test_command_timeout_is_a_failed_probe() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        raise CommandTimeout(host.name, "docker ps", 60.0)

    observed, _ = run(handler, [H1])
    assert (observed.hosts["h1"].ok, observed.hosts["h1"].error) == (
        False,
        "docker ps timed out after 60s",
    )


def test_unparseable_output_is_a_failed_probe_not_an_empty_host() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        return ok(PS) if argv[1] == "ps" else ok("<html>proxy error</html>")

    observed, _ = run(handler, [H1])
    assert not observed.hosts["h1"].ok
    assert "invalid JSON" in str(observed.hosts["h1"].error)


def test_container_vanished_between_ps_and_inspect() -> None:
    vanished = (DATA / "vanished.json").read_text()
    gone = "8bcb0cc27198bfa655d446505d829b871457f37af529a5d3adb3fb4de93a371b"

    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[1] == "ps":
            return ok("61682e021ded1bf2d4e8a752c92aa7b625762c71f80b5873c2ac4430f936ec7b\n" + gone)
        # Recorded: docker exits 1, prints what it found, names the missing id on stderr.
        return Result(1, vanished, f"Error response from daemon: No such container: {gone}\n")

    observed, _ = run(handler, [H1])
    o = observed.hosts["h1"]
    assert o.ok
    assert [c.name for c in o.containers] == ["job.1.t5ok"]


def test_all_containers_vanished() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[1] == "ps":
            return ok("8bcb0cc27198\n")
        return Result(1, "[]\n", "Error response from daemon: No such container: 8bcb0cc27198\n")

    observed, _ = run(handler, [H1])
    assert observed.hosts["h1"].ok
    assert observed.hosts["h1"].containers == ()


def test_all_hosts_are_observed_concurrently_and_independently() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if host.name == "h2":
            raise Unreachable("h2", "connecting to 10.0.0.2:22 timed out after 5s")
        if host.name == "h3":
            return fail(DAEMON_DOWN)
        return ok("")

    observed, executor = run(handler, [H1, H2, H3])
    assert {n: o.ok for n, o in observed.hosts.items()} == {"h1": True, "h2": False, "h3": False}
    assert executor.max_in_flight == 3  # every host's ps was in flight at once
    assert sorted(c.host for c in executor.calls) == ["h1", "h2", "h3"]
    assert observed.containers() == []


# -- probe_timeout: a hung probe fails fast and costs its connection ----------------------------
def test_probe_commands_are_bounded_by_the_probe_timeout() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        return ok(PS) if argv[1] == "ps" else ok(MIXED)

    quick = Host(name="h1", address="10.0.0.1", probe_timeout=1.5)
    observed, executor = run(handler, [quick])
    assert observed.hosts["h1"].ok
    assert [c.timeout for c in executor.calls] == [1.5, 1.5]
    assert executor.disconnected == []


@pytest.mark.parametrize("stuck", ["ps", "inspect"])
def test_a_probe_that_times_out_fails_and_drops_the_connection(stuck: str) -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[1] == stuck:
            raise CommandTimeout(host.name, f"docker {stuck}", host.probe_timeout)
        return ok(PS) if argv[1] == "ps" else ok(MIXED)

    observed, executor = run(handler, [H1, H2])
    assert observed.hosts["h1"] == HostObservation(
        host="h1", ok=False, error=f"docker {stuck} timed out after 3s"
    )
    assert sorted(executor.disconnected) == ["h1", "h2"]


def test_an_unreachable_host_keeps_no_connection_to_drop() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        raise Unreachable(host.name, "connection refused by 10.0.0.1:22")

    _, executor = run(handler, [H1])
    assert executor.disconnected == []  # the executor already dropped a broken connection


# -- ports held outside the cluster -------------------------------------------------------------
HOST_DATA = DATA.parent / "host"
REC_HELD = frozenset(
    {
        *(f"{p}/tcp" for p in (22, 17070, 18081, 18082, 19000, 19001, 36477)),
        *(f"{p}/udp" for p in (15353, 15454, 58778)),
    }
)  # tests/data/host/, as seen by cluster "rec" (test_host_ports.py)


def host_with_ports(argv: list[str]) -> Result:
    """A host whose docker and /proc/net answer with the recordings in tests/data/host."""
    if argv == ps_argv("rec"):
        return ok(PS)
    if argv == published_ports_argv():
        return ok((HOST_DATA / "published.txt").read_text())
    if argv == proc_net_argv("tcp"):
        return ok((HOST_DATA / "proc-net-tcp.txt").read_text())
    if argv == proc_net_argv("udp"):
        return ok((HOST_DATA / "proc-net-udp.txt").read_text())
    assert argv[:2] == ["docker", "inspect"], argv
    return ok(MIXED)


def observe_ports(handler: Handler, hosts: list[Host]) -> tuple[Observed, FakeExecutor]:
    executor = FakeExecutor(handler)
    return asyncio.run(observe(executor, hosts, "rec", ports=True, others=False)), executor


def test_ports_in_use_are_read_with_the_probe_at_the_same_time() -> None:
    observed, executor = observe_ports(lambda h, argv, i: host_with_ports(argv), [H1])
    o = observed.hosts["h1"]
    assert o.ok
    assert [c.name for c in o.containers] == ["crash.1.t6crash", "web.1.t1run"]  # docker ps order
    assert o.ports_in_use == REC_HELD
    assert executor.max_in_flight == 4  # ps and the three port reads were in flight at once
    assert {c.timeout for c in executor.calls} == {H1.probe_timeout}
    assert sorted(executor.argvs()) == sorted(
        [
            ps_argv("rec"),
            inspect_argv(parse_ids(PS)),
            published_ports_argv(),
            proc_net_argv("tcp"),
            proc_net_argv("udp"),
        ]
    )


def test_without_ports_the_probe_reads_none() -> None:
    observed, executor = run(lambda h, argv, i: host_with_ports(argv), [H1])
    assert observed.hosts["h1"].ports_in_use == frozenset()
    assert all(a[:2] == ["docker", "ps"] or a[1] == "inspect" for a in executor.argvs())
    assert published_ports_argv() not in executor.argvs()


def test_a_kernel_without_ipv6_tables_still_gives_its_ports() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv == proc_net_argv("tcp"):
            tcp4 = (HOST_DATA / "proc-net-tcp.txt").read_text().split("  sl ", 2)
            return Result(1, "  sl " + tcp4[1], "cat: /proc/net/tcp6: No such file or directory\n")
        return host_with_ports(argv)

    observed, _ = observe_ports(handler, [H1])
    assert observed.hosts["h1"].ports_in_use == REC_HELD - {"17070/tcp"}  # it was IPv6


def timed_out(host: Host) -> Result:
    raise CommandTimeout(host.name, "cat /proc/net/tcp", host.probe_timeout)


@pytest.mark.parametrize(
    ("argv", "broken", "logged"),
    [
        pytest.param(
            proc_net_argv("tcp"),
            lambda h: fail("cat: /proc/net/tcp: Permission denied"),
            "cat /proc/net/tcp failed (exit 1): cat: /proc/net/tcp: Permission denied",
            id="cat-fails",
        ),
        pytest.param(
            proc_net_argv("tcp"),
            lambda h: ok("garbage\n"),
            "/proc/net/tcp printed an unexpected line: 'garbage'",
            id="unparseable",
        ),
        pytest.param(
            published_ports_argv(),
            lambda h: fail("unknown flag: --format", 125),
            "docker ps failed (exit 125): unknown flag: --format",
            id="docker-ps-fails",
        ),
        pytest.param(
            proc_net_argv("tcp"), timed_out, "cat /proc/net/tcp timed out after 3s", id="timeout"
        ),
    ],
)
def test_a_failed_ports_read_leaves_the_probe_standing(
    argv: list[str],
    broken: Callable[[Host], Result],
    logged: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(host: Host, called: list[str], input: str | None) -> Result:
        return broken(host) if called == argv else host_with_ports(called)

    with caplog.at_level(logging.INFO, logger="minidock.observe"):
        observed, executor = observe_ports(handler, [H1])
    o = observed.hosts["h1"]
    assert (o.ok, o.error, o.ports_in_use) == (True, None, frozenset())
    assert len(o.containers) == 2
    assert executor.disconnected == []  # docker answered: the connection is fine
    assert [r.getMessage() for r in caplog.records] == [f"h1: host ports in use not read: {logged}"]


def test_a_failed_probe_is_failed_whatever_the_ports_read_found() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        return fail(DAEMON_DOWN) if argv == ps_argv("rec") else host_with_ports(argv)

    observed, _ = observe_ports(handler, [H1])
    o = observed.hosts["h1"]
    assert not o.ok
    assert o.ports_in_use == frozenset()
    assert str(o.error).startswith("docker ps failed (exit 1): Cannot connect")


def test_other_clusters_tasks_are_observed_apart_for_capacity_and_ports() -> None:
    """Issue 15: several clusters share hosts; each sees the others' tasks only as load."""
    executor = FakeExecutor(
        lambda h, argv, i: host_with_ports(argv) if argv != ps_argv(None) else ok(PS + OTHER)
    )
    observed = asyncio.run(observe(executor, [H1], "rec", ports=False))
    o = observed.hosts["h1"]
    assert executor.argvs()[0] == ps_argv(None)  # every MiniDock cluster's containers
    assert [c.name for c in o.containers] == ["crash.1.t6crash", "web.1.t1run"]  # docker ps order
    assert [(c.name, c.cluster) for c in o.others] == [("web.1.t8other", "other")]
    assert [c.name for c in observed.containers()] == [
        "crash.1.t6crash",
        "web.1.t1run",
    ]  # docker ps order
    assert len(observed.load()) == 3


def test_each_observation_is_stamped_when_it_was_had_on_the_passs_clock() -> None:
    """With the pass's clock: a probe's observation at its answer (failed or not), a
    borrowed one at the call (it was read before), a kept one (a scoped pass's) keeps its
    own stamp; without a clock, none is stamped."""

    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if host.name == "h3":
            return fail(DAEMON_DOWN)
        return ok(PS) if argv[:2] == ["docker", "ps"] else ok(MIXED)

    reads = iter([10.0, 11.0, 12.0, 13.0])
    memory = ProbeMemory()
    memory.observed(HostObservation("h2", True, seen_at=5.0))
    borrowed = {"h4": HostObservation("h4", True, seen_at=99.0)}  # the writer's clock
    h4 = Host(name="h4", address="10.0.0.4")
    observed = asyncio.run(
        observe(
            FakeExecutor(handler),
            [H1, H2, H3, h4],
            "rec",
            ports=False,
            others=False,
            memory=memory,
            scope={"h1", "h3"},
            borrowed=borrowed,
            clock=lambda: next(reads),
        )
    )
    stamps = {n: o.seen_at for n, o in observed.hosts.items()}
    assert stamps["h4"] == 10.0  # the call's start, never the writer's stamp
    assert stamps["h2"] == 5.0
    assert sorted([stamps["h1"], stamps["h3"]]) == [11.0, 12.0]
    assert not observed.hosts["h3"].ok
    plain, _ = run(handler, [H1])
    assert plain.hosts["h1"].seen_at is None
