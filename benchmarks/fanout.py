"""The floor a cron `minidock reconcile` is measured against (issue 47, item 6): the least
a program can do to look at a fleet. A fresh Python process reads the inventory, opens
one asyncssh connection to every host (the inventory's user, port, key and known_hosts,
the same ciphers and connection bound as MiniDock), runs the probe's `docker ps` in each
and prints how many hosts answered. Nothing of MiniDock is imported.

    .venv/bin/python benchmarks/fanout.py .scale/inventory.toml

benchmarks/bench_fixed_cost.py times it, whole process, against `minidock reconcile`.
"""

from __future__ import annotations

import asyncio
import sys
import tomllib
from typing import Any

import asyncssh

PS = (
    "docker ps -a --no-trunc --filter label=minidock.cluster "
    "--format '{{.ID}} {{.State}} {{.Status}}'"
)
CIPHERS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"]
BOUND = 128  # MiniDock's bound on connections being opened at once


async def probe(host: dict[str, Any], options: dict[str, Any], opening: asyncio.Semaphore) -> bool:
    async with opening:
        conn = await asyncssh.connect(host["address"], **options)
    async with conn:
        done = await conn.run(PS, check=False)
    return done.exit_status == 0


async def main(path: str) -> int:
    with open(path, "rb") as f:
        inventory = tomllib.load(f)
    defaults = inventory.get("defaults", {})
    seconds = float(str(defaults.get("connect_timeout", "10s")).rstrip("s"))
    options = {
        "port": defaults.get("port", 22),
        "username": defaults.get("user", "root"),
        "client_keys": [defaults["identity_file"]],
        "agent_path": None,
        "known_hosts": asyncssh.read_known_hosts(defaults["known_hosts"]),
        "config": [],
        "connect_timeout": seconds,
        "login_timeout": seconds,
        "encryption_algs": CIPHERS,
    }
    opening = asyncio.Semaphore(BOUND)
    answers = await asyncio.gather(*(probe(h, options, opening) for h in inventory["hosts"]))
    print(f"{sum(answers)} of {len(answers)} hosts answered")
    return 0 if all(answers) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
