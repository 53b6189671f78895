"""Record real host-port outputs from a lab host into this directory (needs a lab).

    .venv/bin/minidock lab up --hosts 1
    .venv/bin/python tests/data/host/record.py tests/data/host

Inside host1 (with docker exec) it starts containers that hold ports in every way the
probe must tell apart, then records the probe's own commands (`minidock.commands`
`published_ports_argv` and `proc_net_argv`) and removes what it started:

- `foreign`: no labels, publishes 18081->8080/tcp, the range 19000-19001/tcp and 15353/udp;
- `mine`: cluster `rec`, publishes 18080->8080/tcp (MiniDock's own: not held outside);
- `other`: cluster `other`, publishes 18082->8080/tcp;
- `exposed`: exposes 7000/tcp without publishing it (holds nothing);
- `hostnet`: host network, a process listening on 17070/tcp (no container publishes it);
- a process on the host itself (perl, outside any container) bound to 15454/udp;
- sshd listens on 22/tcp; docker-proxy listens for every published port.
"""

import json
import sys
from pathlib import Path

from minidock.commands.facts import proc_net_argv, published_ports_argv
from minidock.lab import WEB5_IMAGE, Lab

OUT = Path(sys.argv[1])
HOST = "host1"
LAB = Lab(Path.cwd(), project=json.loads(Path(".lab/lab.json").read_text())["project"])
STARTED = [
    ["--name", "foreign", "-p", "18081:8080", "-p", "19000-19001:9000-9001",
     "-p", "15353:5353/udp", WEB5_IMAGE],
    ["--name", "mine", "--label", "minidock.cluster=rec", "-p", "18080:8080", WEB5_IMAGE],
    ["--name", "other", "--label", "minidock.cluster=other", "-p", "18082:8080", WEB5_IMAGE],
    ["--name", "exposed", "--expose", "7000", WEB5_IMAGE],
    ["--name", "hostnet", "--network", "host", WEB5_IMAGE, "httpd", "-f", "-p", "17070"],
]  # fmt: skip
UDP_SERVER = (
    "setsid perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalPort => 15454,"
    " Proto => q(udp)) or die $!; sleep 30' </dev/null >/dev/null 2>&1 & echo $!"
)


def run(argv: list[str]) -> str:
    proc = LAB.exec(HOST, *argv, check=True)
    return proc.stdout


udp_pid = ""
try:
    for args in STARTED:
        run(["docker", "run", "-d", *args])
    udp_pid = run(["sh", "-c", UDP_SERVER]).strip()
    run(["sleep", "1"])
    (OUT / "published.txt").write_text(run(published_ports_argv()))
    (OUT / "proc-net-tcp.txt").write_text(run(proc_net_argv("tcp")))
    (OUT / "proc-net-udp.txt").write_text(run(proc_net_argv("udp")))
finally:
    LAB.exec(HOST, "docker", "rm", "-f", *(a[1] for a in STARTED), check=False)
    if udp_pid:
        LAB.exec(HOST, "kill", udp_pid, check=False)
