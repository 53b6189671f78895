"""Service names across hosts on the lab fleet (docs/discovery.md): a client task reaches
`api:PORT` by name on another host through its host's name proxy (HTTP and a plain TCP
echo), another cluster's same-named service is never reached, api moved under continuous
requests (a constraint change in either update order, converging, then a drain) fails no
connection, and `expose` turned on and then off keeps the name answering."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections import Counter
from datetime import datetime

import pytest

from minidock.act.names import NamesOutcome, converge_names
from minidock.commands.haproxy import NAMES_IMAGE, name_proxy_name
from minidock.commands.proxies import name_loads
from minidock.core.endpoints import Endpoints, NameStep
from minidock.model import HostNames, Inventory, NameProxy
from minidock.ssh import Result, SSHExecutor
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


# A move converges in some 15 s here, 50 s on a machine loaded by two labs and more; the
# bound leaves room for that, and is what a move that never converges costs the suite.
MOVE_TIMEOUT = "2m"


def spec(
    *constraints: str,
    image: str = WEB5,
    order: str = "start-first",
    expose: tuple[int, ...] = (8080, 7000),
) -> str:
    exposed = f"expose = {json.dumps(list(expose))}" if expose else ""
    return f"""
[services.api]
image = "{image}"
command = {json.dumps(API_COMMAND)}
replicas = 2
constraints = {json.dumps(list(constraints))}
{exposed}
drain_timeout = "1s"

[services.api.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"
retries = 3

[services.api.update]
parallelism = 1
monitor = "1s"
order = "{order}"

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
    apply(other, spec(f"host == {CLIENT_HOST}", image=WEB6).split("[services.client]")[0])
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


# One request by name, the address the name resolved to named (in $ip): the first address
# glibc gives, as bash's own /dev/tcp/api would try first.
GET_AT = (
    "ip=$(getent ahostsv4 api | awk 'NR==1 {print $1}'); echo \"ip=$ip\"; "
    "exec 3<>/dev/tcp/$ip/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 5 tail -n1 <&3"
)


def start_requests(fleet: Fleet, task: str, name: str) -> None:
    """A request to api:8080 by name every 0.1 s in the client, each bounded by 5 s (bash's
    connect has no timeout of its own), into /tmp/NAME until /tmp/NAME.stop exists: a line
    `ok`, or `FAIL rc=EXIT t=UNIX: WHAT` (124: timed out; what the shell and api said, the
    address the name resolved to first: `ip=ADDRESS`), UNIX the time it was begun."""
    loop = (
        f"REQ={shlex.quote(GET_AT)}; while [ ! -e /tmp/{name}.stop ]; do "
        't=$(date +%s.%N); out=$(timeout 5 bash -c "$REQ" 2>&1); rc=$?; '
        'case "$out" in *"web 5"*) echo ok;; *) echo "FAIL rc=$rc t=$t: $(echo $out)";; esac; '
        f"sleep 0.1; done > /tmp/{name} 2>&1; echo end >> /tmp/{name}"
    )
    fleet.docker(CLIENT_HOST, "exec", "-d", task, "bash", "-c", loop, check=True)


def stop_requests(fleet: Fleet, task: str, name: str) -> tuple[int, list[str]]:
    """Stop the requests of `start_requests` once its last one ended: how many were sent,
    and the failed ones' lines."""
    script = (
        f"touch /tmp/{name}.stop; for i in $(seq 150); do "
        f'[ "$(tail -n1 /tmp/{name})" = end ] && break; sleep 0.1; done; cat /tmp/{name}'
    )
    lines = fleet.docker(CLIENT_HOST, "exec", task, "bash", "-c", script).stdout.splitlines()
    assert lines[-1:] == ["end"], f"the requests did not end: {lines[-5:]}"
    failed = [line for line in lines if line.startswith("FAIL")]
    return sum(1 for line in lines if line == "ok") + len(failed), failed


def said_by_shell(failed: list[str]) -> list[tuple[str, int]]:
    """The failed requests' lines, most frequent first (`FAIL rc=0: `: connected, and the
    connection closed with no answer)."""
    return Counter(failed).most_common(4)


def moved_by_apply(md: Minidock, body: str, name: str) -> tuple[int, str, str]:
    """`apply --wait` of a change, bounded by MOVE_TIMEOUT and never helped by cron passes
    after it: its exit code, a line of figures, and (when not 0) its last words and
    `status`."""
    started = time.monotonic()
    res = md("apply", str(md.spec(body, name)), "--wait", "--timeout", MOVE_TIMEOUT, timeout=240)
    said = f"apply --wait exit {res.returncode} after {time.monotonic() - started:.1f} s"
    detail = ""
    if res.returncode != 0:
        status = md("status").stdout
        detail = f"{res.stdout[-1200:]}{res.stderr[-400:]}\nstatus:\n{status}"
    return res.returncode, said, detail


@pytest.mark.parametrize("order", ["start-first", "stop-first"])
def test_api_moved_by_a_constraint_change_then_a_drain_fails_no_connection(
    fleet: Fleet, patient_md: Minidock, order: str
) -> None:
    """api's two tasks move from host3 to two hosts that are not the client's (so every
    request crosses hosts), in each update order (stop-first is the default): the move
    converges by itself (`apply --wait` exits 0 within MOVE_TIMEOUT, issue 31 break 1);
    then (once: a drain does not depend on the order) one task's host is drained. No
    request by name fails."""
    md = patient_md
    apply(md, spec("host == host3", order=order))
    task = client(md)
    start_requests(fleet, task, "move")
    elsewhere = spec("host != host3", f"host != {CLIENT_HOST}", order=order)
    code, said, detail = moved_by_apply(md, elsewhere, "moved.toml")
    if code != 0:
        sent, failed = stop_requests(fleet, task, "move")
        figures = f"move {order}: {said}; {len(failed)} of {sent} failed"
        print(figures)
        raise AssertionError(f"{figures}: {said_by_shell(failed)}\n{detail}")
    moved = {t["host"] for t in md.tasks("api")}
    assert len(moved) == 2, moved
    assert not moved & {"host3", CLIENT_HOST}, moved
    if order == "start-first":  # a drain starts replacements first whatever the order
        victim = sorted(moved)[0]
        if md("drain", victim, timeout=240).returncode != 0:
            converge(md)
        assert victim not in {t["host"] for t in md.tasks("api")}
    sent, failed = stop_requests(fleet, task, "move")
    assert sent > 50, sent
    assert not failed, f"{len(failed)} of {sent} failed: {said_by_shell(failed)}"
    assert events(md, "draining")  # each moved task left the endpoints before it stopped
    print(f"moves under load ({order}): {said}; {sent} requests, none failed")


def name_holders(fleet: Fleet, md: Minidock) -> dict[str, float]:
    """The addresses on the cluster network of the client host's containers that hold the
    name `api` (an alias: the tasks without `expose`, or the name proxy), each with the
    Unix time its container started."""
    network = f"minidock-{md.cluster}"
    ids = fleet.docker(CLIENT_HOST, "ps", "-q").stdout.split()
    found = fleet.docker(CLIENT_HOST, "inspect", *ids).stdout if ids else "[]"
    return {
        net["IPAddress"]: unix_time(c["State"]["StartedAt"])
        for c in json.loads(found)
        for name, net in c["NetworkSettings"]["Networks"].items()
        if name == network and "api" in (net.get("Aliases") or [])
    }


def unix_time(docker_time: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, `Z`) as Unix seconds."""
    whole, _, fraction = docker_time.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}+00:00").timestamp() + float(f"0.{fraction or 0}")


# How long after its container started a new holder of the name may refuse a request: its
# alias is in Docker's DNS from the start, its process listens some milliseconds later.
BORN_WINDOW = 2.0


def raced_to(failure: str, gone: set[str], born: dict[str, float]) -> bool:
    """A failed request (`FAIL rc=RC t=UNIX: ip=ADDRESS ...`) that met Docker's hand-over
    race (docs/discovery.md): it resolved the name to a holder the change removed (`gone`),
    then timed out connecting (the holder had left the network) or was refused (it was
    stopping); or to a holder the change added (`born`: its start time), and was refused
    within BORN_WINDOW of that start (its alias was there, its process not yet listening)."""
    head, _, said = failure.partition(": ip=")
    code, _, begun = head.partition(" t=")
    address, _, rest = said.partition(" ")
    refused = code == "FAIL rc=1" and "Connection refused" in rest
    if address in gone:
        return code == "FAIL rc=124" or refused
    started = born.get(address)
    if started is None or not refused:
        return False
    return started - 1 <= float(begun) <= started + BORN_WINDOW


def test_a_failure_counts_as_the_hand_over_race_only_to_a_removed_or_starting_holder() -> None:
    gone, born = {"172.18.0.2"}, {"172.18.0.6": 1000.0}
    assert raced_to("FAIL rc=124 t=1000.5: ip=172.18.0.2", gone, born)
    refused = "FAIL rc=1 t=1000.5: ip=172.18.0.2 bash: connect: Connection refused bash: ..."
    assert raced_to(refused, gone, born)
    assert not raced_to(refused.replace("0.2 ", "0.5 "), gone, born)  # a holder that stays
    assert raced_to(refused.replace("0.2 ", "0.6 "), gone, born)  # one that was starting
    assert not raced_to(refused.replace("0.2 ", "0.6 ").replace("1000.5", "1003.5"), gone, born)
    assert not raced_to("FAIL rc=124 t=1000.5: ip=172.18.0.6", gone, born)  # it never answers
    assert not raced_to("FAIL rc=124 t=1000.5: ip=172.18.0.5", gone, born)
    assert not raced_to("FAIL rc=1 t=1000.5: ip= bash: api: Name or service not known", gone, born)
    assert not raced_to("FAIL rc=0 t=1000.5: ip=172.18.0.2 web 4", gone, born)  # a wrong answer
    assert unix_time("1970-01-01T00:16:40.25Z") == 1000.25
    assert unix_time("1970-01-01T00:16:40.123456789Z") == pytest.approx(1000.123456789)


def test_expose_turned_on_then_off_keeps_the_name_answering(
    fleet: Fleet, patient_md: Minidock
) -> None:
    """api's two tasks on the client's own host, first reached by name through their own
    alias on the cluster network (no `expose`); then `expose = [8080]` turned on (a rollout:
    the name passes to the host's name proxy, whose endpoints must hold a task before it
    takes the name) and off again (back to the tasks' aliases: the proxy must keep the name
    until a task of the new spec holds it), in the default stop-first order, under requests
    by name every 0.1 s: each change converges by itself and no request fails (issue 31,
    break 3), but for Docker's own race at a hand-over: a request whose name resolved to a
    holder (an old task, the proxy) an instant before that holder left the network, then
    connects to an address that is gone and times out, or is refused by the holder as it
    stops; or one that resolved to a holder the change started (a new task carries its
    alias from its start) and is refused before that holder's process listens
    (docs/discovery.md). A name left with no holder would fail as "no address", and count."""
    md = patient_md
    plain = spec(f"host == {CLIENT_HOST}", order="stop-first", expose=())
    apply(md, plain)
    task = client(md)
    probe = fleet.docker(CLIENT_HOST, "exec", task, "bash", "-c", GET)
    assert probe.stdout == "web 5\n", probe  # the tasks' alias answers before any change
    exposed = spec(f"host == {CLIENT_HOST}", order="stop-first", expose=(8080,))
    report, ok = [], True
    for change, body in (("on", exposed), ("off", plain)):
        holders = name_holders(fleet, md)
        start_requests(fleet, task, change)
        code, said, detail = moved_by_apply(md, body, f"expose-{change}.toml")
        time.sleep(1)
        sent, failed = stop_requests(fleet, task, change)
        after = name_holders(fleet, md)
        gone = set(holders) - set(after)  # the name's holders the change removed
        born = {a: t for a, t in after.items() if a not in holders}  # and those it added
        raced = [f for f in failed if raced_to(f, gone, born)]
        fails = len(failed) - len(raced)
        figures = f"expose {change}: {said}; {fails} of {sent} failed"
        figures += f" ({len(raced)} more met a holder as it went or came)"
        print(figures, raced)
        report += [f"{figures}: {said_by_shell(failed)}", detail]
        ok = ok and code == 0 and sent > 20 and fails == 0
    assert ok, "\n".join(report)
    proxies = fleet.docker(
        CLIENT_HOST, "ps", "-q", "--filter", f"name={name_proxy_name(md.cluster, 'api')}"
    )
    assert proxies.stdout.strip() == ""  # turned off: the name proxy is gone


AWAIT_SAID = "for i in $(seq 100); do [ -e /tmp/said ] && break; sleep 0.1; done; cat /tmp/said"


def test_a_name_proxy_removed_under_a_request_serves_it_to_its_end(
    fleet: Fleet, lab_inventory: Inventory
) -> None:
    """A name proxy a pass removes (`expose` turned off, a host no longer used, a service
    gone) while a request through it is under way: the request is answered, then the proxy
    is gone. The adapter's own acts over SSH on a lab host, with an upstream that answers
    3 s after it is asked (killed at once, as `docker rm -f` did, the request got nothing)."""
    cluster, network = "gone", "minidock-gone"
    host = lab_inventory.host(CLIENT_HOST)
    assert host is not None
    upstream, asker = "gone-slow", "gone-client"
    proxy = name_proxy_name(cluster, "slow")
    # the upstream marks a request it has read (not the proxy's checks, which send nothing)
    slow = 'nc -ll -p 9000 -e sh -c "read -r line && : >/tmp/asked && sleep 3 && echo answered"'
    ask = (
        "exec 3<>/dev/tcp/slow/9000 && echo x >&3 && said=$(timeout 10 head -n1 <&3); "
        'echo "said: $said" > /tmp/said'
    )

    def converge(step: NameStep, seen: HostNames, table: tuple[Endpoints, ...]) -> list[str]:
        async def go() -> NamesOutcome:
            executor = SSHExecutor()

            async def sh(name: str, argv: list[str], stdin: str | None = None) -> Result:
                return await executor.run(host, argv, input=stdin)

            try:
                rendered = name_loads(table, [step], {CLIENT_HOST: seen})
                return await converge_names(sh, cluster, NAMES_IMAGE, rendered, 0.0)
            finally:
                await executor.close()

        done = asyncio.run(go())
        assert done.failures == [], done.failures
        return [e.kind for e in done.events]

    try:
        fleet.docker(CLIENT_HOST, "network", "create", network, check=True)
        on_network = ("run", "-d", "--network", network, "--name")
        fleet.docker(CLIENT_HOST, *on_network, upstream, WEB5, "sh", "-c", slow, check=True)
        fleet.docker(CLIENT_HOST, *on_network, asker, CLIENT_IMAGE, "sleep", "inf", check=True)
        where = f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}'
        found = fleet.docker(CLIENT_HOST, "inspect", "-f", where, upstream, check=True)
        address = found.stdout.strip()
        table = (Endpoints("slow", 9000, (f"{address}:9000",), ("t1",)),)
        assert converge(NameStep(CLIENT_HOST, ("slow",)), {}, table) == [
            "names-started", "endpoints-loaded"
        ]  # fmt: skip
        fleet.docker(CLIENT_HOST, "exec", "-d", asker, "bash", "-c", ask, check=True)
        for _ in range(100):  # the upstream has the request: it is under way
            if (
                fleet.docker(CLIENT_HOST, "exec", upstream, "test", "-e", "/tmp/asked").returncode
                == 0
            ):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the request never reached the upstream")
        running = {"slow": NameProxy("slow", True, "")}
        removed = converge(NameStep(CLIENT_HOST, (), ("slow",)), running, table)
        assert removed == ["names-removed"]
        said = fleet.docker(CLIENT_HOST, "exec", asker, "sh", "-c", AWAIT_SAID).stdout
        assert said == "said: answered\n", said
        assert fleet.docker(CLIENT_HOST, "ps", "-aq", "--filter", f"name={proxy}").stdout == ""
    finally:
        fleet.docker(CLIENT_HOST, "rm", "-f", upstream, asker, proxy)
        fleet.docker(CLIENT_HOST, "network", "rm", network)
