"""How fast an image streams from the controller to lab hosts without a registry.

    .venv/bin/minidock lab up --hosts 4 && .venv/bin/python benchmarks/bench_push.py

(or `--inventory PATH` for another lab's inventory, e.g. one an integration session kept
with `--keep-lab`). For images of about 2, 50 and 200 MiB (the lab's web:5, and web:5
with an incompressible file added, built in this machine's engine and removed at the
end): `docker save | docker load` over SSH (minidock.act.push.push_image) to one host that
lacks the image, then to every host at once, then the check that finds it there already.
Median of 3 runs; the pushed copies are removed from the hosts between runs. Prints a
Markdown table (docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidock.act.push import LocalEngine, LocalImage, push_image
from minidock.lab.images import WEB5_IMAGE
from minidock.model import Host
from minidock.spec import load_inventory
from minidock.ssh import SSHExecutor
from minidock.units import approx_size

RUNS = 3
SIZES_MIB = (0, 48, 198)  # added to web:5's 2 MiB


def build(extra_mib: int) -> str:
    """web:5, or web:5 plus `extra_mib` MiB of random bytes, under a benchmark tag."""
    tag = f"minidock-bench/push:{extra_mib}"
    if extra_mib == 0:
        subprocess.run(["docker", "tag", WEB5_IMAGE, tag], check=True)
        return tag
    name = f"minidock-bench-build-{extra_mib}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    fill = f"dd if=/dev/urandom of=/blob bs=1048576 count={extra_mib} 2>/dev/null"
    subprocess.run(
        ["docker", "run", "--name", name, "--entrypoint", "/bin/sh", WEB5_IMAGE, "-c", fill],
        check=True,
    )
    change = 'ENTRYPOINT ["/bin/lab-init"]'
    subprocess.run(
        ["docker", "commit", "--change", change, name, tag], capture_output=True, check=True
    )
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=True)
    return tag


async def forget(executor: SSHExecutor, hosts: list[Host], image: str) -> None:
    await asyncio.gather(*(executor.run(h, ["docker", "rmi", "-f", image]) for h in hosts))


async def measure(hosts: list[Host], image: LocalImage) -> tuple[float, float, float]:
    """Seconds: push to one host, push to every host at once, the check when present."""
    executor = SSHExecutor()
    engine = LocalEngine()
    try:
        await forget(executor, hosts, image.name)
        start = time.perf_counter()
        await push_image(executor, engine, hosts[0], image)
        one = time.perf_counter() - start
        await forget(executor, hosts, image.name)
        start = time.perf_counter()
        await asyncio.gather(*(push_image(executor, engine, h, image) for h in hosts))
        every = time.perf_counter() - start
        start = time.perf_counter()
        pushed = await push_image(executor, engine, hosts[0], image)
        present = time.perf_counter() - start
        assert pushed.skipped
        await forget(executor, hosts, image.name)
    finally:
        await executor.close()
    return one, every, present


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", default="inventory/lab.toml")
    args = parser.parse_args()
    hosts = list(load_inventory(args.inventory).hosts)
    print(
        f"| image size | to 1 host | to {len(hosts)} hosts at once | rate, 1 host | already there |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for extra in SIZES_MIB:
        tag = build(extra)
        try:
            image = asyncio.run(LocalEngine().inspect(tag))
            assert image is not None
            runs = [asyncio.run(measure(hosts, image)) for _ in range(RUNS)]
        finally:
            subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
        one, every, present = (statistics.median(r[i] for r in runs) for i in range(3))
        rate = approx_size(int(image.size / one))
        print(
            f"| {approx_size(image.size)} | {one:.2f} s | {every:.2f} s | {rate}/s "
            f"| {present * 1000:.0f} ms |"
        )


if __name__ == "__main__":
    main()
