"""A volume's data moved between lab hosts: the stream primitive's round trip (real docker
cp on both hosts, through the controller over real SSH), then `minidock move`.

Rebalance moves (tasks without data) are tests/integration/test_moves.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from minidock import volumecopy
from minidock.lab.images import WEB5_IMAGE
from minidock.model import Inventory
from minidock.ssh import SSHExecutor
from tests.integration.conftest import Fleet

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
