"""Several clusters in one state store (issue 15, item 8) on the real lab fleet, through the
real command line: two files into one store, `status` and `reconcile` covering both (or
`--cluster`), a host port one cluster holds seen by the other's scheduler, and a drain
that empties a host of both."""

from __future__ import annotations

import json

from tests.integration.conftest import STATUS_SCHEMA, Fleet, Minidock
from tests.integration.test_converge import reconcile_until_converged

FIRST = """
[services.web]
image = "minidock-lab/web:5"
replicas = 2
ports = ["8080:8080"]
"""

SECOND = """
[services.edge]
image = "minidock-lab/web:5"
replicas = {replicas}
ports = ["8080:8080"]
"""


def second_file(md: Minidock, replicas: int) -> str:
    """Cluster `second`, with `edge` wanting the same host port as the first's `web`."""
    path = md.workdir / "second.toml"
    body = SECOND.format(replicas=replicas)
    path.write_text(f'cluster = "second"\ninventory = "{md.fleet.inventory}"\n{body}')
    return str(path)


def statuses(md: Minidock, *args: str) -> list[dict[str, object]]:
    res = md("status", "--json", *args)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    docs: list[dict[str, object]] = doc.get("clusters", [doc])
    for d in docs:
        STATUS_SCHEMA.validate(d)
    return docs


def hosts_of(doc: dict[str, object], service: str) -> set[str]:
    tasks = doc["tasks"]
    assert isinstance(tasks, list)
    return {t["host"] for t in tasks if t["service"] == service and t["state"] == "running"}


def test_two_clusters_in_one_store_are_both_covered(md: Minidock, fleet: Fleet) -> None:
    assert md("apply", str(md.spec(FIRST)), "--wait", "--timeout", "60s").returncode == 0
    free = len(fleet.hosts) - 2  # hosts without the first cluster's port 8080
    res = md("apply", second_file(md, free), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (md.state / "clusters" / "second" / "state.db").exists()
    first, second = statuses(md)
    assert (first["cluster"], second["cluster"]) == ("itest", "second")
    assert hosts_of(first, "web").isdisjoint(hosts_of(second, "edge"))  # ports across clusters
    assert len(hosts_of(second, "edge")) == free
    (only,) = statuses(md, "--cluster", "second")
    assert only["cluster"] == "second"
    human = md("status")
    assert "cluster itest (generation 1)" in human.stdout
    assert "cluster second (generation 1)" in human.stdout

    web_host, edge_host = sorted(hosts_of(first, "web"))[0], sorted(hosts_of(second, "edge"))[0]
    for host, cluster, service in ((web_host, "itest", "web"), (edge_host, "second", "edge")):
        names = fleet.docker(
            host, "ps", "-q", "--filter", f"label=minidock.cluster={cluster}",
            "--filter", f"label=minidock.service={service}", check=True,
        ).stdout.split()  # fmt: skip
        fleet.docker(host, "rm", "-f", *names, check=True)
    printed = "\n".join(reconcile_until_converged(md))
    assert "[itest] started web." in printed
    assert "[second] started edge." in printed
    first, second = statuses(md)
    assert len(hosts_of(first, "web")) == 2
    assert len(hosts_of(second, "edge")) == free


def test_one_more_task_than_free_ports_stays_pending_and_a_drain_empties_both(
    md: Minidock, fleet: Fleet
) -> None:
    assert md("apply", str(md.spec(FIRST)), "--wait", "--timeout", "60s").returncode == 0
    free = len(fleet.hosts) - 2
    res = md("apply", second_file(md, free + 1))
    assert res.returncode == 3, res.stdout + res.stderr  # it started what fits
    res = md("reconcile")
    assert res.returncode == 4, res.stdout + res.stderr  # degraded: one edge fits nowhere
    assert res.stderr == "minidock: second: degraded: edge.3 pending\n"
    _, second = statuses(md)
    assert len(hosts_of(second, "edge")) == free
    services = second["services"]
    assert isinstance(services, list)
    (reason,) = [p["reason"] for s in services for p in s["pending"]]
    assert "host port 8080/tcp in use" in reason  # held by itest's web: MiniDock's
    assert "held outside MiniDock" not in reason
    path = md.workdir / "second.toml"
    path.write_text(path.read_text().replace('ports = ["8080:8080"]\n', ""))  # edge: no ports
    res = md("apply", str(path), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    first, second = statuses(md)
    both = sorted(hosts_of(first, "web") & hosts_of(second, "edge"))
    target = both[0] if both else sorted(hosts_of(first, "web"))[0]
    drained = md("drain", target, "--timeout", "60s")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert f"[itest] draining {target}\n" in drained.stdout
    assert f"[second] draining {target}\n" in drained.stdout
    left = fleet.docker(target, "ps", "-aq", "--filter", "label=minidock.cluster", check=True)
    assert left.stdout == ""
    first, second = statuses(md)
    assert len(hosts_of(first, "web")) == 2
    assert target not in hosts_of(first, "web") | hosts_of(second, "edge")
