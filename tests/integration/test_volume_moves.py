"""A volume's data moved between lab hosts: the stream primitive's round trip (real docker
cp on both hosts, through the controller over real SSH), then `minidock move`.

Rebalance moves (tasks without data) are tests/integration/test_moves.py."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from minidock.act import volumecopy
from minidock.commands.docker import volume_name
from minidock.lab.images import WEB5_IMAGE
from minidock.model import Inventory
from minidock.ssh import SSHExecutor
from tests.integration.conftest import Fleet, Minidock
from tests.integration.loadgen import Reply
from tests.integration.test_ingress import EDGE, apply, converge, events, paced_load, spec

pytestmark = pytest.mark.integration

ROUND_TRIP_VOLUME = "labtest_copy.1_data"
# what a volume holds, as a listing compared between two hosts: every entry's path, owner,
# mode and size (the volume's root too), and every file's digest
LISTING = (
    "cd /var/lib/docker/volumes/{v}/_data && find . -printf '%p %U:%G %m %s %y %l\\n' | sort"
    " && find . -type f -print0 | sort -z | xargs -0 sha256sum"
)
FILL = (
    "set -e; d=/var/lib/docker/volumes/{v}/_data; mkdir -p $d/sub/deeper;"
    " head -c {mb}M /dev/urandom > $d/blob; echo hello > $d/sub/deeper/note;"
    " printf 'secret' > $d/sub/owned; chown 999:999 $d/sub/owned $d; chmod 0600 $d/sub/owned;"
    " chmod 0700 $d; ln -s sub/deeper/note $d/link; touch $d/empty"
)


def listing(fleet: Fleet, host: str, volume: str) -> str:
    found = fleet.exec(host, "sh", "-c", LISTING.format(v=volume), check=True)
    return found.stdout


def test_a_volume_streams_host_to_host_through_the_controller_whole(
    fleet: Fleet, lab_inventory: Inventory
) -> None:
    source, target = lab_inventory.hosts[0], lab_inventory.hosts[1]
    fleet.docker(source.name, "volume", "create", ROUND_TRIP_VOLUME, check=True)
    try:
        fleet.exec(source.name, "sh", "-c", FILL.format(v=ROUND_TRIP_VOLUME, mb=32), check=True)
        seen: list[int] = []

        async def main() -> volumecopy.Copied:
            executor = SSHExecutor()
            try:
                return await volumecopy.copy_volume(
                    executor,
                    source,
                    target,
                    ROUND_TRIP_VOLUME,
                    ("/srv/data", WEB5_IMAGE),
                    on_bytes=seen.append,
                )
            finally:
                await executor.close()

        started = time.monotonic()
        copied = asyncio.run(main())
        took = time.monotonic() - started
        print(f"volume copy host to host: {copied.figure()} ({took:.2f}s wall)")
        assert listing(fleet, target.name, ROUND_TRIP_VOLUME) == listing(
            fleet, source.name, ROUND_TRIP_VOLUME
        )
        assert copied.size > 32 << 20
        assert seen[-1] == copied.size
        for host in (source.name, target.name):  # the helpers are gone, the volumes stay
            helpers = fleet.docker(host, "ps", "-aq", "--filter", "label=minidock.copy")
            assert helpers.stdout.strip() == ""
    finally:
        for host in (source.name, target.name):
            fleet.docker(host, "volume", "rm", "-f", ROUND_TRIP_VOLUME)


# -- minidock move ----------------------------------------------------------------------------
MOVE_TIMEOUT = "3m"
VOLUMES = '\nvolumes = ["data:/srv/data"]\n'


def pinned_spec() -> str:
    """The routed `web` of the ingress tests, one replica, with a named volume."""
    body = spec(replicas=1)
    return body.replace('drain_timeout = "1s"\n', 'drain_timeout = "1s"' + VOLUMES, 1)


@pytest.fixture
def md(patient_md: Minidock) -> Iterator[Minidock]:
    """Patient probes; the slot's volume removed from every host afterwards (the lab's
    reset removes containers only)."""
    yield patient_md
    volume = volume_name(patient_md.cluster, "web", 1, "data")
    for host in patient_md.fleet.hosts:
        patient_md.fleet.docker(host, "volume", "rm", "-f", volume)


def placed(md: Minidock) -> tuple[str, str, str]:
    """(the host web.1 runs on, a host to move it to, its volume's name)."""
    apply(md, pinned_spec())
    (task,) = md.tasks("web")
    source = task["host"]
    target = next(h for h in md.fleet.hosts if h not in (source, EDGE))
    return source, target, volume_name(md.cluster, "web", 1, "data")


# How long after a load the outgoing config may still answer: Caddy 2.6 opens a new
# listening socket beside the old one (SO_REUSEPORT) and shuts the old server down after,
# so a connection the kernel gave the old socket an instant before is served by the old
# config (docs/ingress.md, "Reloads"). While a lone task moves, that config has no
# upstream: its answer is the route's own 503, the gap's, though it comes after another
# client's first answer from the new config (a CI run saw one, 26 ms after).
RELOAD_OVERLAP = 0.5
NO_TASK = (503, "no task is ready")


def gaps(replies: list[Reply]) -> list[tuple[float, float, int]]:
    """The windows of failed requests, in time order: (first start, last end, count), a
    window ended by a request that succeeded; a window of the route's own 503s that begins
    within RELOAD_OVERLAP of the one before it ended is that one's (the outgoing config
    answering), any other failure a window of its own."""
    found: list[tuple[float, float, int]] = []
    run: list[Reply] = []

    def close() -> None:
        end = max(x.started + x.seconds for x in run)
        outgoing = all((x.status, x.text.strip()) == NO_TASK for x in run)
        if found and outgoing and run[0].started - found[-1][1] < RELOAD_OVERLAP:
            start, _, count = found.pop()
            found.append((start, end, count + len(run)))
        else:
            found.append((run[0].started, end, len(run)))
        run.clear()

    for r in sorted(replies, key=lambda r: r.started):
        if not r.ok:
            run.append(r)
        elif run:
            close()
    if run:
        close()
    return found


def test_the_outgoing_configs_503_just_after_a_load_is_the_same_gap() -> None:
    gap = [Reply(10.0 + i / 10, 0.01, 503, "no task is ready\n") for i in range(5)]
    answered = [Reply(9.0, 0.01, 200, "web 5\n"), Reply(10.6, 0.01, 200, "web 5\n")]
    stray = Reply(10.63, 0.003, 503, "no task is ready\n")
    ((start, end, count),) = gaps([*answered, *gap, stray, Reply(11.0, 0.01, 200, "")])
    assert (start, count) == (10.0, 6)
    assert end == pytest.approx(10.633)
    reset = replace(stray, status=0, text="ConnectionResetError")
    assert len(gaps([*answered, *gap, reset, Reply(11.0, 0.01, 200, "")])) == 2
    late = replace(stray, started=11.5)
    assert len(gaps([*answered, *gap, Reply(11.0, 0.01, 200, ""), late])) == 2


def web_running(md: Minidock) -> list[str]:
    """`HOST NAME` of every running web container on any host."""
    return [
        f"{host} {line.split()[0]}"
        for host in md.fleet.hosts
        for line in md.containers(host)
        if line.startswith("web.") and line.endswith(" running")
    ]


def test_a_move_under_load_through_the_ingress_has_one_gap_the_stop(
    fleet: Fleet, md: Minidock
) -> None:
    source, target, volume = placed(md)
    fleet.exec(source, "sh", "-c", FILL.format(v=volume, mb=16), check=True)
    before = listing(fleet, source, volume)
    with paced_load(fleet) as load:
        time.sleep(1)
        started = time.monotonic()
        res = md("move", "web.1", "--to", target, "--timeout", MOVE_TIMEOUT, "-q", timeout=240)
        took = time.monotonic() - started
        time.sleep(1)
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-500:]
    windows = gaps(load.replies)
    shown = [f"{end - start:.2f}s ({n} requests)" for start, end, n in windows]
    copied = events(md, "volumes-copied")
    said = sorted({f"{r.status} {r.text[:80]!r}" for r in load.replies if not r.ok})
    print(f"move under load: {took:.1f}s; gaps {shown} ({said}); {copied}; {len(load.replies)}")
    assert len(windows) == 1, (shown, said, copied)  # the stop is the only gap
    assert load.replies[-1].ok
    assert load.bodies() == {"web 5\n"}
    assert web_running(md) == [f"{target} {md.tasks('web')[0]['name']}"]
    assert listing(fleet, target, volume) == before
    assert fleet.docker(source, "volume", "inspect", volume).returncode != 0
    assert len(events(md, "moved")) == 1


def helper(md: Minidock, host: str) -> str:
    """The id of a volume's helper container on the host ("" when there is none)."""
    return md.fleet.docker(host, "ps", "-aq", "--filter", "label=minidock.copy").stdout.strip()


def kill_when(md: Minidock, args: tuple[str, ...], ready: str) -> None:
    """Run `minidock ARGS` and kill -9 it once `ready` is seen: "draining" (an event) or
    "copying" (a volume's helper container on some host). A run that ends "not converged
    yet" (exit 3) before that is run again, as cron would: a move takes several passes (the
    stop is one, the copy a later one), and which pass the kill lands in is timing."""
    proc = md.popen(*args)
    for _ in range(600):
        if proc.poll() == 3:
            proc.communicate()
            proc = md.popen(*args)
        elif proc.poll() is not None:
            break
        if ready == "draining" and events(md, "draining"):
            break
        helpers = [
            md.fleet.docker(h, "ps", "-aq", "--filter", "label=minidock.copy")
            for h in md.fleet.hosts
        ]
        if ready == "copying" and any(h.stdout.strip() for h in helpers):
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"{args} ended before {ready}: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)


def test_a_controller_killed_while_stopping_then_while_copying_leaves_one_copy_and_no_loss(
    fleet: Fleet, md: Minidock
) -> None:
    source, target, volume = placed(md)
    fleet.exec(source, "sh", "-c", FILL.format(v=volume, mb=32), check=True)
    before = listing(fleet, source, volume)
    started = time.monotonic()
    kill_when(md, ("move", "web.1", "--to", target, "-q"), "draining")
    assert len(web_running(md)) <= 1
    # The copy of 32 MiB takes under a second at the lab's speed, shorter than one look for
    # the helper on every host (CI saw the pass end before a look found it): the source
    # sends at 16 Mbit/s while the copy is to be killed, about 16 s of copy in flight.
    fleet.kill(source, "slow")
    try:
        kill_when(md, ("reconcile",), "copying")
    finally:
        fleet.revive(source)
    assert web_running(md) == []  # the data on its way: no task runs anywhere
    assert listing(fleet, source, volume) == before
    converge(md)
    took = time.monotonic() - started
    print(f"move killed while stopping and while copying: converged in {took:.1f}s")
    assert [line.split()[0] for line in web_running(md)] == [target]
    assert listing(fleet, target, volume) == before
    assert fleet.docker(source, "volume", "inspect", volume).returncode != 0
    copied = events(md, "volumes-copied")
    assert len(copied) == 1, copied
