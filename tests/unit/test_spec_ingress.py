"""`[ingress]`, routes, `drain_timeout` and `private_address`: what loads, and each error's
one line (docs/ingress.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.model import Constraint, Ingress, Route
from minidock.spec import SpecError, load

INVENTORY = """
[[hosts]]
name = "host1"
address = "10.0.0.1"
private_address = "10.1.0.1"
labels = { role = "edge" }

[[hosts]]
name = "host2"
address = "10.0.0.2"
"""
HEAD = 'cluster = "prod"\ninventory = "inventory.toml"\n'
HEALTH = 'health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"] }\n'
WEB = '[services.web]\nimage = "web:5"\n' + HEALTH


def loaded(tmp_path: Path, body: str) -> tuple[object, object]:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    path = tmp_path / "cluster.toml"
    path.write_text(HEAD + body)
    return load(path)


def test_routes_drain_timeout_and_the_ingress_load(tmp_path: Path) -> None:
    cluster, inventory = loaded(
        tmp_path,
        '[ingress]\nconstraints = ["role == edge"]\nhttp_port = 8000\ntask_ports = "31000-31099"\n'
        + WEB
        + 'ingress = { host = "app.test", port = 8080 }\ndrain_timeout = "2s"\n'
        + '[services.api]\nimage = "api:1"\nports = ["9001:9000"]\n'
        + 'ingress = [{ host = "app.test", path = "/api", port = 9000, tls = "off" }]\n',
    )
    assert cluster.ingress == Ingress(  # type: ignore[attr-defined]
        constraints=(Constraint("role", "==", "edge"),), http_port=8000, task_ports=(31000, 31099)
    )
    web, api = cluster.services  # type: ignore[attr-defined]
    assert (web.ingress, web.drain_timeout) == ((Route("app.test", "/", 8080),), 2.0)
    assert (api.ingress, api.drain_timeout) == ((Route("app.test", "/api", 9000),), 5.0)
    host1, host2 = inventory.hosts  # type: ignore[attr-defined]
    assert (host1.reached_at, host2.reached_at) == ("10.1.0.1", "10.0.0.2")


def test_request_metrics_is_on_unless_the_ingress_turns_it_off(tmp_path: Path) -> None:
    route = WEB + 'ingress = { host = "app.test", port = 8080 }\n'
    for table, expected in (("", True), ("request_metrics = true\n", True),
                            ("request_metrics = false\n", False)):  # fmt: skip
        cluster, _ = loaded(tmp_path, "[ingress]\n" + table + route)
        assert cluster.ingress.request_metrics is expected  # type: ignore[attr-defined]
    cluster, _ = loaded(tmp_path, route)  # no [ingress] table: the defaults
    assert cluster.ingress.request_metrics is True  # type: ignore[attr-defined]


def test_http2_is_off_unless_the_ingress_turns_it_on(tmp_path: Path) -> None:
    route = WEB + 'ingress = { host = "app.test", port = 8080 }\n'
    for table, expected in (("", False), ("http2 = false\n", False), ("http2 = true\n", True)):
        cluster, _ = loaded(tmp_path, "[ingress]\n" + table + route)
        assert cluster.ingress.http2 is expected  # type: ignore[attr-defined]
    cluster, _ = loaded(tmp_path, route)  # no [ingress] table: the defaults
    assert cluster.ingress.http2 is False  # type: ignore[attr-defined]


def test_a_route_without_an_ingress_table_gets_every_host(tmp_path: Path) -> None:
    cluster, _ = loaded(tmp_path, WEB + "ingress = { port = 8080 }\n")
    assert cluster.ingress == Ingress()  # type: ignore[attr-defined]
    assert cluster.services[0].ingress == (Route("", "/", 8080),)  # type: ignore[attr-defined]
    plain, _ = loaded(tmp_path, WEB)
    assert plain.ingress is None  # type: ignore[attr-defined]


def test_routes_are_not_part_of_what_a_task_runs_but_their_ports_are(tmp_path: Path) -> None:
    one, _ = loaded(tmp_path, WEB + 'ingress = { host = "a.test", port = 8080 }\n')
    two, _ = loaded(tmp_path, WEB + 'ingress = { host = "b.test", port = 8080 }\n')
    bare, _ = loaded(tmp_path, WEB)
    hashes = [c.services[0].spec_hash() for c in (one, two, bare)]  # type: ignore[attr-defined]
    assert hashes[0] == hashes[1] != hashes[2]


ROUTE = WEB + 'ingress = { host = "app.test", port = 8080 }\n'
BAD = [
    (
        WEB
        + 'ingress = { host = "app.test", path = "/api", port = 8080 }\n'
        + '[services.other]\nimage = "web:5"\n'
        + HEALTH
        + 'ingress = { host = "APP.test", path = "/API/", port = 8080 }\n',
        "services.other.ingress: host app.test path /API/ is claimed by both services web "
        "(as app.test/api: the proxy matches paths ignoring case) and other: give one "
        "another host or path",
    ),
    (
        ROUTE
        + '[services.other]\nimage = "web:5"\n'
        + HEALTH
        + 'ingress = { host = "App.Test", port = 8080 }\n',
        "services.other.ingress: host app.test path / is claimed by both services web and "
        "other: give one another host or path",
    ),
    (
        ROUTE
        + '[services.other]\nimage = "web:5"\n'
        + HEALTH
        + 'ingress = { host = "app.test", path = "/", port = 8080 }\n',
        "services.other.ingress: host app.test path / is claimed by both services web and "
        "other: give one another host or path",
    ),
    (
        WEB + 'ingress = { host = "app.test", port = 9090 }\n',
        "services.web.ingress.port: the service does not say it listens on 9090: route to a "
        "container port of its ports, or give it a health check on that port "
        "(e.g. wget -qO- http://127.0.0.1:9090/)",
    ),
    (
        WEB + "ingress = [{ port = 8080 }, { port = 80 }]\n",
        "services.web.ingress[1].port: the service does not say it listens on 80: route to a "
        "container port of its ports, or give it a health check on that port "
        "(e.g. wget -qO- http://127.0.0.1:80/)",
    ),
    (
        "[ingress]\nhttps_port = 80\n" + ROUTE,
        "ingress.https_port: must differ from http_port",
    ),
    (
        '[ingress]\nhosts = ["host9"]\n' + ROUTE,
        "ingress.hosts[0]: unknown host 'host9' (inventory: ['host1', 'host2'])",
    ),
    (
        '[ingress]\nconstraints = ["role == db"]\n' + ROUTE,
        "ingress.constraints: matches no host of the inventory: no proxy would take traffic",
    ),
    (
        '[ingress]\nhosts = ["host1"]\nconstraints = ["role == edge"]\n' + ROUTE,
        "ingress.constraints: give hosts or constraints, not both",
    ),
    (
        ROUTE + 'ports = ["30005:8080"]\n',
        "services.web.ports[0]: host port 30005 is in the ingress's task_ports (30000-30999), "
        "where MiniDock publishes routed tasks: publish another port, or move task_ports",
    ),
    (
        ROUTE + '[services.api]\nimage = "api:1"\nports = ["8443:8443", "80:8080"]\n',
        "services.api.ports[1]: host port 80 is the ingress's http_port, which its proxy holds "
        "on host1 and host2, where api may run: publish another host port (or route it "
        "through the ingress), or give the ingress its hosts ([ingress] hosts or "
        "constraints; by default every host runs its proxy) and keep api off them",
    ),
    (
        '[ingress]\nconstraints = ["role == edge"]\nhttps_port = 8443\n'
        + ROUTE
        + '[services.api]\nimage = "api:1"\nports = ["8443:8443"]\n',
        "services.api.ports[0]: host port 8443 is the ingress's https_port, which its proxy "
        "holds on host1, where api may run: publish another host port (or route it through "
        'the ingress), or keep api off the ingress hosts: constraints = ["role != edge"]',
    ),
    (
        '[ingress]\nhosts = ["host1", "host2"]\n'
        + ROUTE
        + '[services.api]\nimage = "api:1"\nports = ["443:8443"]\n'
        + 'constraints = ["host != host1"]\n',
        "services.api.ports[0]: host port 443 is the ingress's https_port, which its proxy "
        "holds on host2, where api may run: publish another host port (or route it through "
        'the ingress), or keep api off the ingress hosts: constraints = ["host != host1", '
        '"host != host2"]',
    ),
    (
        '[ingress]\ntask_ports = "900-1000"\n' + ROUTE,
        "ingress.task_ports: must be FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, "
        "got '900-1000'",
    ),
    (
        '[ingress]\nrequest_metrics = "off"\n' + ROUTE,
        "ingress.request_metrics: expected true (each route counted by a server of its own) "
        "or false (the proxy sends directly, nothing counted per route), got string 'off'",
    ),
    (
        '[ingress]\nhttp2 = "yes"\n' + ROUTE,
        "ingress.http2: expected true (the HTTPS server speaks HTTP/2 and HTTP/1.1) "
        "or false (HTTP/1.1 only), got string 'yes'",
    ),
    (
        "[ingress]\nrequest_metrics = 0\n" + ROUTE,
        "ingress.request_metrics: expected true (each route counted by a server of its own) "
        "or false (the proxy sends directly, nothing counted per route), got integer 0",
    ),
]


@pytest.mark.parametrize(("body", "expected"), BAD)
def test_bad_ingress_is_one_line_naming_the_key(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, body)
    assert str(err.value) == f"{tmp_path / 'cluster.toml'}: {expected}"


def test_host_ports_of_the_ingress_are_free_off_its_hosts_and_for_udp(tmp_path: Path) -> None:
    """The proxy holds http_port and https_port (TCP) on the ingress hosts only: a service
    kept off them by its constraints may publish them, and UDP never clashes; nor does a
    UDP port in task_ports (routed tasks publish TCP)."""
    cluster, _ = loaded(
        tmp_path,
        '[ingress]\nconstraints = ["role == edge"]\n'
        + ROUTE
        + '[services.edge]\nimage = "lb:1"\nports = ["80:80", "443:443"]\n'
        + 'constraints = ["role != edge"]\n'
        + '[services.dns]\nimage = "dns:1"\nports = ["53:53/udp", "80:80/udp", "30001:53/udp"]\n',
    )
    edge, dns = cluster.services[1:]  # type: ignore[attr-defined]
    assert [str(p) for p in edge.ports] == ["80:80/tcp", "443:443/tcp"]
    assert [str(p) for p in dns.ports] == ["53:53/udp", "80:80/udp", "30001:53/udp"]


def test_a_compose_host_port_on_the_ingress_is_refused_naming_its_compose_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "name: prod\nx-minidock:\n  inventory: inventory.toml\n"
        "  ingress: {hosts: [host1]}\nservices:\n"
        "  web:\n    image: web:5\n    ports: ['8080:8080']\n"
        "    x-minidock: {ingress: {port: 8080}}\n"
        "  api:\n    image: api:1\n    ports:\n      - '9000:9000'\n      - '80:9000'\n"
    )
    with pytest.raises(SpecError) as err:
        load(compose)
    assert str(err.value) == (
        f"{compose}: services.api.ports[1] (line 14): host port 80 is the ingress's http_port, "
        "which its proxy holds on host1, where api may run: publish another host port (or "
        "route it through the ingress), or keep api off the ingress hosts: constraints = "
        '["host != host1"]'
    )


def test_compose_takes_request_metrics_in_x_minidock_and_names_a_bad_value(
    tmp_path: Path,
) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    compose = tmp_path / "compose.yaml"
    body = (
        "name: prod\nx-minidock:\n  inventory: inventory.toml\n"
        "  ingress: {hosts: [host1], request_metrics: VALUE}\nservices:\n"
        "  web:\n    image: web:5\n    ports: ['8080:8080']\n"
        "    x-minidock: {ingress: {port: 8080}}\n"
    )
    compose.write_text(body.replace("VALUE", "false"))
    cluster, _ = load(compose)
    assert cluster.ingress == Ingress(hosts=("host1",), request_metrics=False)
    compose.write_text(body.replace("VALUE", "'no'"))
    with pytest.raises(SpecError) as err:
        load(compose)
    assert str(err.value) == (
        f"{compose}: x-minidock.ingress.request_metrics (line 4): expected true (each route "
        "counted by a server of its own) or false (the proxy sends directly, nothing counted "
        "per route), got string 'no'"
    )
