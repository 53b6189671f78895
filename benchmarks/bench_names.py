"""Service names across hosts on the lab fleet: the latency a name proxy adds per request,
same host and across hosts, against the same task direct (docs/discovery.md).

    .venv/bin/minidock lab up --hosts 2 && .venv/bin/python benchmarks/bench_names.py

Two exposed services of the lab's web image answering a TCP echo on 7000 (busybox `nc -ll
-e cat`): `near` on host1 and `far` on host2, and a client task on host1 in the name
proxy image (its perl). The client makes ROUNDS requests on each path, one connection per
request (connect, send a line, read it back, close), the name resolved once before them
(so Docker's DNS is not counted): through host1's name proxies (`near:7000`, same host;
`far:7000`, across hosts), and direct (near's address on the cluster network; far's host's
private address and the host port its task publishes 7000 on, the address the proxy
itself dials). The times are taken inside the client (Time::HiRes). Prints a Markdown table
(docs/benchmarks.md keeps the latest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minidock.commands.haproxy import NAMES_IMAGE  # noqa: E402
from minidock.lab import Lab  # noqa: E402

ROUNDS = 1000
ECHO = ["sh", "-c", "nc -ll -p 7000 -e cat & exec httpd -f -p 8080 -h /www"]
HEALTH = '{ cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"], interval = "1s", retries = 2 }'
SPEC = f"""cluster = "bench"
inventory = "{{inventory}}"

[services.near]
image = "minidock-lab/web:5"
command = {json.dumps(ECHO)}
constraints = ["host == host1"]
expose = [7000]
health = {HEALTH}

[services.far]
image = "minidock-lab/web:5"
command = {json.dumps(ECHO)}
constraints = ["host == host2"]
expose = [7000]
health = {HEALTH}

[services.client]
image = "{NAMES_IMAGE}"
command = ["sleep", "infinity"]
constraints = ["host == host1"]
"""
# ROUNDS echo requests to HOST:PORT, one connection each: "P50_MS P99_MS"
CLIENT = r"""
use IO::Socket::INET; use Socket; use Time::HiRes qw(time);
my ($name, $port, $n) = @ARGV;
my $ip = inet_ntoa(inet_aton($name) or die "cannot resolve $name");
my @t;
for (1 .. $n) {
    my $s = time;
    my $c = IO::Socket::INET->new(PeerAddr => $ip, PeerPort => $port, Proto => 'tcp')
        or die "connect $name: $!";
    print $c "ping\n"; my $l = <$c>; close $c;
    die "no echo from $name" unless defined $l and $l eq "ping\n";
    push @t, time - $s;
}
@t = sort { $a <=> $b } @t;
printf "%.3f %.3f\n", 1000 * $t[int($n / 2)], 1000 * $t[int($n * 0.99) - 1];
"""


def md(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "minidock", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def task(env: dict[str, str], service: str) -> dict[str, str]:
    res = md(env, "status", "--json")
    tasks = [t for t in json.loads(res.stdout)["tasks"] if t["service"] == service]
    return {k: str(v) for k, v in tasks[0].items()}


def inside(lab: Lab, host: str, *argv: str) -> str:
    return lab.exec(host, "docker", *argv, check=True).stdout.strip()


def direct_paths(lab: Lab, env: dict[str, str]) -> tuple[str, tuple[str, str]]:
    """near's address on the cluster network; far's (private address, published port)."""
    near = task(env, "near")["name"]
    fmt = '{{(index .NetworkSettings.Networks "minidock-bench").IPAddress}}'
    near_ip = inside(lab, "host1", "inspect", "--format", fmt, near)
    far = task(env, "far")["name"]
    published = inside(lab, "host2", "port", far, "7000/tcp").splitlines()[0]
    address, _, port = published.rpartition(":")
    return near_ip, (address, port)


def main() -> None:
    lab = Lab(ROOT)
    lab.reset()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MINIDOCK_STATE": str(Path(tmp) / "state")}
        spec = Path(tmp) / "bench.toml"
        spec.write_text(SPEC.replace("{inventory}", str(lab.inventory_path)))
        res = md(env, "apply", str(spec), "--wait", "--timeout", "5m")
        if res.returncode != 0:
            raise SystemExit(f"apply failed: {res.stdout}{res.stderr}")
        client = task(env, "client")["name"]
        near_ip, (far_ip, far_port) = direct_paths(lab, env)
        paths = (
            ("same host, through the name proxy (`near:7000`)", "near", "7000"),
            ("same host, direct (the task's address)", near_ip, "7000"),
            ("across hosts, through the name proxy (`far:7000`)", "far", "7000"),
            ("across hosts, direct (private address, published port)", far_ip, far_port),
        )
        rows = []
        for label, host, port in paths:
            out = inside(
                lab, "host1", "exec", client, "perl", "-e", CLIENT, host, port, str(ROUNDS)
            )
            p50, p99 = out.split()
            rows.append((label, p50, p99))
        lab.reset()
    print(f"| path ({ROUNDS} requests, a connection each) | p50 | p99 |")
    print("| --- | ---: | ---: |")
    for label, p50, p99 in rows:
        print(f"| {label} | {p50} ms | {p99} ms |")


if __name__ == "__main__":
    main()
