"""Service names across hosts on the lab fleet (docs/discovery.md): a client task reaches
`api:PORT` by name on another host through its host's name proxy (HTTP and a plain TCP
echo), another cluster's same-named service is never reached, and api moved under
continuous requests (a constraint change, then a drain) fails no connection."""

from __future__ import annotations

import json
import time

import pytest

from minidock.haproxy import NAMES_IMAGE, name_proxy_name
from tests.integration.conftest import Fleet, Minidock, patient_inventory

pytestmark = pytest.mark.integration

WEB5, WEB6 = "minidock-lab/web:5", "minidock-lab/web:6"
CLIENT_HOST = "host1"
# api answers HTTP on 8080 (busybox httpd) and echoes any TCP stream on 7000 (busybox nc)
API_COMMAND = ["sh", "-c", "nc -ll -p 7000 -e cat & exec httpd -f -p 8080 -h /www"]
# The client resolves names with glibc (busybox-static's wget and nc cannot: they crash in
# the resolver), so it runs in the name proxy image (Debian's bash) with /dev/tcp.
CLIENT_IMAGE = NAMES_IMAGE
GET = (
    "exec 3<>/dev/tcp/api/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 5 tail -n1 <&3"
)


def spec(constraint: str, image: str = WEB5) -> str:
    return f"""
[services.api]
image = "{image}"
command = {json.dumps(API_COMMAND)}
replicas = 2
constraints = ["{constraint}"]
expose = [8080, 7000]
drain_timeout = "1s"

[services.api.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3

[services.api.update]
parallelism = 1
monitor = "1s"
order = "start-first"

[services.client]
image = "{CLIENT_IMAGE}"
command = ["sleep", "infinity"]
constraints = ["host == {CLIENT_HOST}"]
"""


def apply(md: Minidock, body: str, name: str = "cluster.toml") -> None:
    """`apply --wait`, then cron passes while a loaded machine's probes time out."""
    res = md("apply", str(md.spec(body, name)), "--wait", "--timeout", "3m", timeout=240)
    if res.returncode != 0:
        converge(md)


def converge(md: Minidock, passes: int = 60) -> None:
    for _ in range(passes):
        if md("reconcile").returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"not converged after {passes} passes")


def client(md: Minidock) -> str:
    (task,) = md.tasks("client")
    assert task["host"] == CLIENT_HOST
    name: str = task["name"]
    return name


def in_client(fleet: Fleet, md: Minidock, script: str) -> str:
    res = fleet.docker(CLIENT_HOST, "exec", client(md), "bash", "-c", script)
    if res.returncode != 0:
        print(f"client: {script!r} exited {res.returncode}: {res.stderr}")
        print(diagnosis(fleet, md))
    return res.stdout


def diagnosis(fleet: Fleet, md: Minidock) -> str:
    """The name proxies' containers, configs and logs on the client's host, and the events
    that load endpoints (for a failure message)."""
    proxy = name_proxy_name(md.cluster, "api")
    ps = fleet.docker(CLIENT_HOST, "ps", "-a", "--filter", "label=minidock.names")
    config = fleet.docker(CLIENT_HOST, "exec", proxy, "cat", "/usr/local/etc/haproxy/haproxy.cfg")
    logs = fleet.docker(CLIENT_HOST, "logs", "--tail", "30", proxy)
    kinds = ("endpoints-loaded", "names-started", "act-failed", "draining")
    lines = [f"{k}: {m}" for k in kinds for m in events(md, k)][-20:]
    parts = [ps.stdout, config.stdout + config.stderr, logs.stdout + logs.stderr, *lines]
    return "\n".join(parts)


def events(md: Minidock, kind: str) -> list[str]:
    res = md("events", "--json", "--limit", "2000")
    assert res.returncode == 0, res.stderr
    document = json.loads(res.stdout)
    found = document["events"] if isinstance(document, dict) else document
    return [e["message"] for e in found if e["kind"] == kind]


def test_a_client_reaches_api_by_name_on_another_host_never_another_clusters(
    fleet: Fleet, patient_md: Minidock
) -> None:
    md = patient_md
    other = Minidock(fleet, md.workdir / "other", cluster="other")
    other.workdir.mkdir()
    other.inventory = patient_inventory(fleet, other.workdir / "lab.toml")
    # the other cluster's api answers "web 6", on the client's own host
    apply(other, spec(f"host == {CLIENT_HOST}", WEB6).split("[services.client]")[0])
    apply(md, spec("host == host3"))
    assert {t["host"] for t in md.tasks("api")} == {"host3"}
    answers = in_client(fleet, md, f"for i in 1 2 3 4 5 6; do ({GET}); done")
    assert answers == "web 5\n" * 6  # host3's tasks by name; never the other cluster's
    echo = "exec 3<>/dev/tcp/api/7000 && echo 'SELECT 1;' >&3 && timeout 3 head -n1 <&3"
    assert in_client(fleet, md, echo) == "SELECT 1;\n"  # any TCP protocol, not only HTTP
    # the name is the proxy's alone (a task's own alias would bypass the drain)
    seen = fleet.docker(CLIENT_HOST, "inspect", name_proxy_name(md.cluster, "api"), check=True)
    (proxy,) = json.loads(seen.stdout)
    assert proxy["NetworkSettings"]["Networks"][f"minidock-{md.cluster}"]["Aliases"][:1] == ["api"]
    loads = len(events(md, "endpoints-loaded"))
    assert md("reconcile").returncode == 0
    assert len(events(md, "endpoints-loaded")) == loads  # nothing changed: nothing loaded


def test_api_moved_by_a_constraint_change_then_a_drain_fails_no_connection(
    fleet: Fleet, patient_md: Minidock
) -> None:
    md = patient_md
    apply(md, spec("host == host3"))
    loop = (
        "while [ ! -e /tmp/stop ]; do "
        f"if ({GET}) | grep -q 'web 5'; then echo ok; else echo FAIL; fi; "
        "sleep 0.1; done > /tmp/requests 2>&1"
    )
    fleet.docker(CLIENT_HOST, "exec", "-d", client(md), "bash", "-c", loop, check=True)
    apply(md, spec("host != host3"))
    moved = {t["host"] for t in md.tasks("api")}
    assert "host3" not in moved
    victim = sorted(moved - {CLIENT_HOST})[0]
    if md("drain", victim, timeout=240).returncode != 0:
        converge(md)
    assert victim not in {t["host"] for t in md.tasks("api")}
    in_client(fleet, md, "touch /tmp/stop; sleep 0.5")
    replies = in_client(fleet, md, "cat /tmp/requests").splitlines()
    assert len(replies) > 50, replies
    failed = [r for r in replies if r != "ok"]
    assert not failed, f"{len(failed)} of {len(replies)} failed: {failed[:5]}"
    assert events(md, "draining")  # each moved task left the endpoints before it stopped
    print(f"moves under load: {len(replies)} requests, none failed")
