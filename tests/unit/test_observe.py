"""observe(): every host probed at once; any failure is a failed probe, never "empty"."""

from __future__ import annotations

import asyncio
from pathlib import Path

from minidock.commands import inspect_argv, parse_ids, ps_argv
from minidock.model import Host, HostObservation, Observed
from minidock.observe import observe
from minidock.ssh import CommandTimeout, Result, Unreachable
from tests.fakes import FakeExecutor, Handler, fail, ok

DATA = Path(__file__).parent.parent / "data" / "docker"
PS = (DATA / "ps.txt").read_text()
MIXED = (DATA / "mixed.json").read_text()
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
H1, H2, H3 = (Host(name=f"h{i}", address=f"10.0.0.{i}") for i in (1, 2, 3))


def run(handler: Handler, hosts: list[Host], cluster: str = "rec") -> tuple[Observed, FakeExecutor]:
    executor = FakeExecutor(handler)
    return asyncio.run(observe(executor, hosts, cluster)), executor


def test_reachable_host_with_containers() -> None:
    def handler(host: Host, argv: list[str], input: str | None) -> Result:
        if argv[:2] == ["docker", "ps"]:
            return ok(PS)
        return ok(MIXED)

    observed, executor = run(handler, [H1])
    o = observed.hosts["h1"]
    assert (o.ok, o.error) == (True, None)
    assert [c.name for c in o.containers] == ["web.1.t1run", "crash.1.t6crash"]
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
