"""awesome-compose samples (tests/data/awesome-compose) on the real lab, each deployed with
`minidock apply compose.yaml` and nothing else. The lab has no registry and no internet, so
each sample's images are swapped for lab ones (an `image:` for minidock-lab/web:5, a
`build:` context's Dockerfile for one FROM it, and the commands and health checks that
named the real images' programs); every other key is the sample's own.

- nginx-golang-postgres: the database, on one host, reached by its service name from the
  backend on another (its volume, secret and health check as the sample has them); the
  proxy's read-only nginx.conf shipped; a changed build context rolls the backend out and
  leaves the database as it was.
- flask-redis: `.:/code`, a read-write bind mount of the Compose file's directory, is a
  writable copy on each host: the task writes into it, the write stays on that host and
  never reaches the controller, and a changed file beside the Compose file rolls out onto
  a fresh copy.
- prometheus-grafana: two images (no build), each serving the directory beside the Compose
  file that the sample mounts read-write, shipped to its host as one writable copy.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from minidock.lab.images import WEB5_IMAGE
from tests.integration.conftest import Fleet, Minidock

SAMPLES = Path(__file__).parent.parent / "data" / "awesome-compose"
Edit = Callable[[dict[str, Any]], None]


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def apply(md: Minidock, path: Path) -> subprocess.CompletedProcess[str]:
    """`minidock apply compose.yaml --wait`, its time printed (the test's measured cost)."""
    started = time.monotonic()
    res = md("apply", str(path), "--wait", "--timeout", "120s")
    print(f"apply {path.parent.name}: {time.monotonic() - started:.1f}s")
    return res


def lab_sample(md: Minidock, sample: str, edit: Edit, dockerfiles: dict[str, str]) -> Path:
    """The sample copied into md's directory, its compose.yaml given md's cluster and the
    lab's inventory and changed by `edit` (the image swaps), each named Dockerfile
    (context: text) replaced; the Compose file's path."""
    folder = md.workdir / sample
    shutil.copytree(SAMPLES / sample, folder)
    path = folder / "compose.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["name"] = md.cluster
    doc["x-minidock"] = {"inventory": str(md.fleet.inventory)}
    edit(doc["services"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for context, text in dockerfiles.items():
        (folder / context / "Dockerfile").write_text(text)
    return path


@pytest.fixture
def built(md: Minidock) -> Iterator[None]:
    """The images the controller builds for md's cluster, removed after the test."""
    yield
    listed = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    ours = [i for i in listed if i.startswith(f"{md.cluster}-")]
    if ours:
        subprocess.run(["docker", "rmi", "-f", *ours], capture_output=True, check=False)


def running(md: Minidock) -> dict[str, dict[str, str]]:
    """The running tasks by service: container name to host (one `status`)."""
    found: dict[str, dict[str, str]] = {}
    for t in md.tasks():
        if t["state"] == "running":
            found.setdefault(t["service"], {})[t["name"]] = t["host"]
    return found


def golang_postgres(services: dict[str, Any]) -> None:
    db = services["db"]
    db["image"] = WEB5_IMAGE
    del db["user"]  # the lab image has no postgres user
    page = "/var/lib/postgresql/data"  # the sample's volume: the database's data
    db["command"] = [
        "sh",
        "-c",
        f"echo db-ok > {page}/index.html && exec httpd -f -p 5432 -h {page}",
    ]
    db["healthcheck"] |= {
        "test": ["CMD", "wget", "-qO-", "http://127.0.0.1:5432/"],
        "interval": "1s",
    }
    db["deploy"] = {"placement": {"constraints": ["node.hostname == host1"]}}
    db["x-minidock"] = {"expose": [5432]}  # reached by name from every host
    services["backend"]["deploy"] = {"placement": {"constraints": ["node.hostname == host2"]}}
    services["proxy"]["image"] = WEB5_IMAGE
    services["proxy"]["ports"] = ["18080:8080"]  # the lab image serves on 8080


def test_nginx_golang_postgres_reaches_its_database_across_hosts_and_rolls_a_build(
    md: Minidock, fleet: Fleet, built: None
) -> None:
    dockerfile = "FROM minidock-lab/web:5 AS builder\nCOPY page /www/index.html\n"
    path = lab_sample(md, "nginx-golang-postgres", golang_postgres, {"backend": dockerfile})
    (path.parent / "backend" / "page").write_text("backend v1\n")
    ok(apply(md, path))
    tasks = running(md)
    (db,), (backend,) = tasks["db"].items(), tasks["backend"].items()
    assert (db[1], backend[1]) == ("host1", "host2")
    by_name = ("wget", "-qO-", "http://db:5432/")
    seen = fleet.docker("host2", "exec", backend[0], *by_name)
    assert seen.stdout == "db-ok\n", seen.stderr  # from host2 to host1, by name
    (proxy, host), *_ = tasks["proxy"].items()
    conf = (path.parent / "proxy" / "nginx.conf").read_text()
    shown = fleet.docker(host, "exec", proxy, "cat", "/etc/nginx/conf.d/default.conf")
    assert shown.stdout == conf

    (path.parent / "backend" / "page").write_text("backend v2\n")
    ok(apply(md, path))
    tasks = running(md)
    assert tasks["db"] == dict([db])  # the database untouched
    ((name, host),) = tasks["backend"].items()
    assert name != backend[0]
    page = fleet.docker(host, "exec", name, "wget", "-qO-", "http://127.0.0.1:8080/")
    assert page.stdout == "backend v2\n"
    assert fleet.docker(host, "exec", name, *by_name).stdout == "db-ok\n"


def flask_redis(services: dict[str, Any]) -> None:
    services["redis"]["image"] = WEB5_IMAGE
    services["web"]["deploy"] = {"replicas": 2}  # its fixed port: one per host


def test_flask_redis_gets_a_writable_copy_of_its_directory_on_each_host(
    md: Minidock, fleet: Fleet, built: None
) -> None:
    dockerfile = (
        "FROM minidock-lab/web:5 AS builder\nWORKDIR /code\nCOPY . /code\n"
        'CMD ["httpd", "-f", "-p", "8000", "-h", "/code"]\n'
    )
    path = lab_sample(md, "flask-redis", flask_redis, {".": dockerfile})
    applied = apply(md, path)
    ok(applied)
    assert ". is shipped to each host that runs web and mounted writable at /code" in applied.stderr
    web = running(md)["web"]
    assert len(set(web.values())) == 2, web
    app = (path.parent / "app.py").read_text()
    (first, first_host), (second, second_host) = sorted(web.items())
    for name, host in web.items():
        served = fleet.docker(host, "exec", name, "wget", "-qO-", "http://127.0.0.1:8000/app.py")
        assert served.stdout == app  # the image serves the copy mounted at /code
    wrote = fleet.docker(first_host, "exec", first, "sh", "-c", "echo mine > /code/note.txt")
    assert wrote.returncode == 0, wrote.stderr
    assert fleet.docker(first_host, "exec", first, "cat", "/code/note.txt").stdout == "mine\n"
    assert fleet.docker(second_host, "exec", second, "test", "-e", "/code/note.txt").returncode
    assert not (path.parent / "note.txt").exists()  # never synced back

    (path.parent / "app.py").write_text(app + "# changed\n")
    ok(apply(md, path))
    after = running(md)["web"]
    assert not set(after) & set(web)  # rolled out
    for name, host in after.items():
        shown = fleet.docker(host, "exec", name, "cat", "/code/app.py").stdout
        assert shown == app + "# changed\n"
        assert fleet.docker(host, "exec", name, "test", "-e", "/code/note.txt").returncode


def prometheus_grafana(services: dict[str, Any]) -> None:
    for name, folder, port in (
        ("prometheus", "/etc/prometheus", 9090),
        ("grafana", "/etc/grafana/provisioning/datasources", 3000),
    ):
        services[name]["image"] = WEB5_IMAGE
        services[name]["command"] = ["httpd", "-f", "-p", str(port), "-h", folder]


def test_prometheus_grafana_runs_from_images_with_its_directories_shipped(
    md: Minidock, fleet: Fleet
) -> None:
    path = lab_sample(md, "prometheus-grafana", prometheus_grafana, {})
    ok(apply(md, path))
    tasks = running(md)
    for service, port, file in (
        ("prometheus", 9090, "prometheus/prometheus.yml"),
        ("grafana", 3000, "grafana/datasource.yml"),
    ):
        ((name, host),) = tasks[service].items()
        url = f"http://127.0.0.1:{port}/{Path(file).name}"
        served = fleet.docker(host, "exec", name, "wget", "-qO-", url)
        assert served.stdout == (path.parent / file).read_text(), served.stderr
    mounts = fleet.docker(
        host, "inspect", "--format", "{{range .Mounts}}{{.Type}}:{{.Destination}} {{end}}", name
    ).stdout.split()
    assert "bind:/etc/grafana/provisioning/datasources" in mounts  # one writable copy
