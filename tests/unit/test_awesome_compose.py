"""Conformance over docker/awesome-compose (tests/data/awesome-compose, CC0: its LICENSE):
each of the 39 samples' Compose files as the collection has it, nothing changed, with the
files beside it that the loader reads (build contexts' small files: its NOTICE.md says
which were left out), and the outcome MiniDock gives it: the converted spec's key facts
for a file that validates, the one refusal line (whose reason docs/compose.md's support
matrix gives) for the rest."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from minidock.spec import SpecError, load_cluster
from minidock.spec.cluster import cluster_document

SAMPLES = Path(__file__).parent.parent / "data" / "awesome-compose"
ADDRESS = "network options (aliases, addresses) are not supported"
NETWORK_MODE = "every task runs on its cluster's network (minidock-CLUSTER), which its names"
RUNTIME = "another container runtime is not supported"

# sample: (key, line, what the one line says after them)
REFUSED = {
    "elasticsearch-logstash-kibana": (
        "services.logstash.volumes[1]",
        26,
        "logstash/nginx.log is 1911841 bytes, over the 500 KiB limit",
    ),
    "minecraft": ("services.minecraft.volumes[0]", 13, "~/minecraft_data is not on the controller"),
    "pihole-cloudflared-DoH": ("services.cloudflared.networks.dns-net.ipv4_address", 16, ADDRESS),
    "plex": ("services.plex.network_mode", 5, NETWORK_MODE),
    "wasmedge-kafka-mysql": ("services.etl.runtime", 32, RUNTIME),
    "wasmedge-mysql-nginx": ("services.backend.runtime", 20, RUNTIME),
}
# files NOTICE.md says were left out (over 8,000 bytes) whose size decides an outcome:
# written at their size into the sample's copy
LEFT_OUT = {"elasticsearch-logstash-kibana": ("logstash/nginx.log", 1_911_841)}

# sample: {service: its image, or ("build", context, target) for one the controller builds}
VALID: dict[str, dict[str, str | tuple[str, str, str | None]]] = {
    "angular": {"web": ("build", "angular", "builder")},
    "apache-php": {"web": ("build", "app", "builder")},
    "aspnet-mssql": {
        "web": ("build", "app/aspnetapp", None),
        "db": "mcr.microsoft.com/azure-sql-edge:1.0.4",
    },
    "django": {"web": ("build", "app", "builder")},
    "fastapi": {"api": ("build", ".", "builder")},
    "flask": {"web": ("build", "app", "builder")},
    "flask-redis": {"redis": "redislabs/redismod", "web": ("build", ".", "builder")},
    "gitea-postgres": {"gitea": "gitea/gitea:latest", "db": "postgres:alpine"},
    "nextcloud-postgres": {"nc": "nextcloud:apache", "db": "postgres:alpine"},
    "nextcloud-redis-mariadb": {
        "nc": "nextcloud:apache",
        "redis": "redis:alpine",
        "db": "mariadb:10.5",
    },
    "nginx-flask-mongo": {
        "web": "nginx",
        "backend": ("build", "flask", "builder"),
        "mongo": "mongo",
    },
    "nginx-aspnet-mysql": {
        "backend": ("build", "backend", None),
        "db": "mariadb:10-focal",
        "proxy": ("build", "proxy", None),
    },
    "nginx-flask-mysql": {
        "db": "mariadb:10-focal",
        "backend": ("build", "backend", "builder"),
        "proxy": ("build", "proxy", None),
    },
    "nginx-golang": {"proxy": "nginx", "backend": ("build", "backend", "builder")},
    "nginx-golang-mysql": {
        "backend": ("build", "backend", "builder"),
        "db": "mariadb:10-focal",
        "proxy": "nginx",
    },
    "nginx-golang-postgres": {
        "backend": ("build", "backend", "builder"),
        "db": "postgres",
        "proxy": "nginx",
    },
    "nginx-nodejs-redis": {
        "redis": "redislabs/redismod",
        "web1": ("build", "web", None),
        "web2": ("build", "web", None),
        "nginx": ("build", "nginx", None),
    },
    "nginx-wsgi-flask": {
        "nginx-proxy": ("build", "nginx", None),
        "flask-app": ("build", "flask", None),
    },
    "portainer": {"portainer": "portainer/portainer-ce:alpine"},
    "postgresql-pgadmin": {"postgres": "postgres:latest", "pgadmin": "dpage/pgadmin4:latest"},
    "prometheus-grafana": {"prometheus": "prom/prometheus", "grafana": "grafana/grafana"},
    "react-express-mongodb": {
        "frontend": ("build", "frontend", "development"),
        "backend": ("build", "backend", "development"),
        "mongo": "mongo:4.2.0",
    },
    "react-express-mysql": {
        "backend": ("build", "backend", "development"),
        "db": "mariadb:10.6.4-focal",
        "frontend": ("build", "frontend", "development"),
    },
    "react-java-mysql": {
        "backend": ("build", "backend", None),
        "db": "mariadb:10.6.4-focal",
        "frontend": ("build", "frontend", "development"),
    },
    "react-nginx": {"frontend": ("build", ".", None)},
    "react-rust-postgres": {
        "frontend": ("build", "frontend", "development"),
        "backend": ("build", "backend", "development"),
        "db": "postgres:12-alpine",
    },
    "sparkjava": {"sparkjava": ("build", "sparkjava", None)},
    "sparkjava-mysql": {
        "backend": ("build", "backend", None),
        "db": "mariadb:10.6.4-focal",
    },
    "spring-postgres": {"backend": ("build", "backend", None), "db": "postgres"},
    "traefik-golang": {"frontend": "traefik:2.6", "backend": ("build", "backend", None)},
    "vuejs": {"web": ("build", "vuejs", "development")},
    "wireguard": {"wireguard": "linuxserver/wireguard"},
    "wordpress-mysql": {"db": "mariadb:10.6.4-focal", "wordpress": "wordpress:latest"},
}


def _compose_file(sample: str) -> Path:
    return next(p for p in (SAMPLES / sample).iterdir() if p.name.startswith("compose."))


def test_every_sample_has_an_expected_outcome() -> None:
    samples = {p.name for p in SAMPLES.iterdir() if p.is_dir()}
    assert len(samples) == 39
    assert samples == set(REFUSED) | set(VALID)
    assert not set(REFUSED) & set(VALID)
    assert (len(VALID), len(REFUSED)) == (33, 6)
    assert "CC0 1.0 Universal" in (SAMPLES / "LICENSE").read_text()


@pytest.mark.parametrize("sample", sorted(REFUSED))
def test_a_refused_sample_is_one_line_naming_the_key(
    sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPOSE_PROJECT_NAME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a controller's home without ~/x
    key, line, reason = REFUSED[sample]
    copy = tmp_path / sample
    shutil.copytree(SAMPLES / sample, copy)
    if sample in LEFT_OUT:
        name, size = LEFT_OUT[sample]
        (copy / name).write_text("x" * size)
    path = copy / _compose_file(sample).name
    with pytest.raises(SpecError) as err:
        load_cluster(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key} (line {line}): ")
    assert reason in message


@pytest.mark.parametrize("sample", sorted(VALID))
def test_a_valid_sample_converts_to_the_spec_it_says(
    sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPOSE_PROJECT_NAME", raising=False)
    copy = tmp_path / sample
    shutil.copytree(SAMPLES / sample, copy)
    compose = _compose_file(sample).name
    doc = cluster_document(copy / compose)
    assert doc["cluster"] == sample  # the directory's name, as Compose names the project
    assert "inventory" not in doc
    cluster = load_cluster(copy / compose)
    assert cluster.inventory_path == str(copy / "inventory.toml")
    assert [s.name for s in cluster.services] == list(VALID[sample])
    for service in cluster.services:
        expected = VALID[sample][service.name]
        if isinstance(expected, str):
            assert service.build is None
            assert service.image == expected
            continue
        _, context, target = expected
        build = service.build
        assert build is not None
        assert build.context == str((copy / context).resolve())
        assert build.dockerfile == str((copy / context / "Dockerfile").resolve())
        assert build.target == target
        assert build.also is None  # no image beside build: Compose's PROJECT-SERVICE name
        assert re.fullmatch(rf"{sample.lower()}-{service.name}:[0-9a-f]{{12}}", build.tag)
        assert service.image == build.tag


def test_the_samples_key_facts() -> None:
    pgadmin = cluster_document(SAMPLES / "postgresql-pgadmin" / "compose.yaml")["services"]
    assert pgadmin["postgres"]["env"]["POSTGRES_USER"] == "yourUser"  # from its .env
    assert pgadmin["postgres"]["ports"] == ["5432:5432"]
    assert pgadmin["pgadmin"]["ports"] == ["5050:80"]
    wordpress = cluster_document(SAMPLES / "wordpress-mysql" / "compose.yaml")["services"]
    assert wordpress["db"]["volumes"] == ["db_data:/var/lib/mysql"]
    assert wordpress["db"]["command"] == ["--default-authentication-plugin=mysql_native_password"]
    assert wordpress["wordpress"]["env"]["WORDPRESS_DB_HOST"] == "db"
    assert wordpress["wordpress"]["ports"] == ["80:80"]
    assert wordpress["wordpress"]["restart"] == {"condition": "any"}
    portainer = cluster_document(SAMPLES / "portainer" / "compose.yaml")["services"]["portainer"]
    assert portainer["command"] == ["-H", "unix:///var/run/docker.sock"]
    assert portainer["volumes"] == [
        "/var/run/docker.sock:/var/run/docker.sock",
        "portainer_data:/data",
    ]


def test_the_built_samples_key_facts() -> None:
    mysql = cluster_document(SAMPLES / "nginx-flask-mysql" / "compose.yaml")["services"]
    assert mysql["backend"]["build"] == {"context": "backend", "target": "builder"}
    assert mysql["backend"]["depends_on"] == ["db"]  # condition: service_healthy
    assert mysql["backend"]["secret_files"] == {
        "/run/secrets/db-password": {"file": "db/password.txt"}
    }
    assert mysql["db"]["health"]["cmd"] == [
        "/bin/sh",
        "-c",
        'mysqladmin ping -h 127.0.0.1 --password="$(cat /run/secrets/db-password)" --silent',
    ]  # `$$` is Compose's literal `$`
    assert (mysql["db"]["health"]["interval"], mysql["db"]["health"]["retries"]) == ("3s", 5)
    assert mysql["proxy"]["build"] == {"context": "proxy"}
    fastapi = cluster_document(SAMPLES / "fastapi" / "compose.yaml")["services"]["api"]
    assert fastapi["env"] == {"PORT": "8000"}
    assert fastapi["restart"] == {"condition": "none"}  # restart: "no"
    flask = cluster_document(SAMPLES / "flask" / "compose.yaml")["services"]["web"]
    assert flask["stop_signal"] == "SIGINT"
    traefik = cluster_document(SAMPLES / "traefik-golang" / "compose.yaml")["services"]
    assert traefik["backend"]["labels"]["traefik.http.routers.go.rule"] == "Path(`/`)"
    assert traefik["frontend"]["command"] == [
        "--providers.docker",
        "--entrypoints.web.address=:80",
        "--providers.docker.exposedbydefault=false",
    ]
    nodejs = cluster_document(SAMPLES / "nginx-nodejs-redis" / "compose.yaml")["services"]
    assert nodejs["web1"]["restart"] == {"condition": "on-failure"}
    assert nodejs["nginx"]["depends_on"] == ["web1", "web2"]
    assert "hostname" not in nodejs["web1"]  # a warning: one hostname cannot fit replicas


def test_a_read_only_file_beside_the_compose_file_is_shipped_as_a_config() -> None:
    path = SAMPLES / "nginx-golang-postgres" / "compose.yaml"
    proxy = cluster_document(path)["services"]["proxy"]
    assert proxy["configs"] == {"/etc/nginx/conf.d/default.conf": {"file": "./proxy/nginx.conf"}}
    assert "volumes" not in proxy
    (config,) = next(s for s in load_cluster(path).services if s.name == "proxy").configs
    text = (SAMPLES / "nginx-golang-postgres" / "proxy" / "nginx.conf").read_text()
    assert (config.target, config.content) == ("/etc/nginx/conf.d/default.conf", text)


def test_wireguards_kernel_parameter_and_env_from_its_env_file() -> None:
    path = SAMPLES / "wireguard" / "compose.yaml"
    wireguard = cluster_document(path)["services"]["wireguard"]
    assert wireguard["sysctls"] == {"net.ipv4.conf.all.src_valid_mark": "1"}
    assert wireguard["cap_add"] == ["NET_ADMIN", "SYS_MODULE"]
    assert wireguard["ports"] == ["51820:51820/udp"]
    assert wireguard["env"]["TZ"] == "Etc/UTC"  # from its .env
    assert wireguard["volumes"][2] == "/lib/modules:/lib/modules"


def test_two_services_built_from_one_context_share_its_tag() -> None:
    cluster = load_cluster(SAMPLES / "nginx-nodejs-redis" / "compose.yaml")
    web1, web2 = (next(s for s in cluster.services if s.name == n) for n in ("web1", "web2"))
    assert web1.build is not None
    assert web2.build is not None
    assert web1.build.tag.split(":")[1] == web2.build.tag.split(":")[1]


def test_read_write_mounts_beside_the_file_are_writable_copies() -> None:
    mongo = cluster_document(SAMPLES / "react-express-mongodb" / "compose.yaml")["services"]
    assert mongo["frontend"]["configs"] == {"/usr/src/app": {"dir": "./frontend", "writable": True}}
    assert mongo["frontend"]["volumes"] == ["/usr/src/app/node_modules"]  # over the copy
    assert mongo["backend"]["configs"] == {"/usr/src/app": {"dir": "./backend", "writable": True}}
    mysql = cluster_document(SAMPLES / "react-express-mysql" / "compose.yaml")["services"]
    assert mysql["backend"]["configs"] == {
        "/code/src": {"dir": "./backend/src"},  # :ro, a read-only config per file
        "/code/package.json": {"file": "./backend/package.json", "writable": True},
        "/code/package-lock.json": {"file": "./backend/package-lock.json", "writable": True},
    }
    apache = cluster_document(SAMPLES / "apache-php" / "compose.yaml")["services"]["web"]
    assert apache["configs"] == {"/var/www/html": {"dir": "./app", "writable": True}}
    redis = cluster_document(SAMPLES / "flask-redis" / "compose.yaml")["services"]["web"]
    assert redis["configs"] == {"/code": {"dir": ".", "writable": True}}
    prometheus = cluster_document(SAMPLES / "prometheus-grafana" / "compose.yaml")["services"]
    assert prometheus["prometheus"]["volumes"] == ["prom_data:/prometheus"]
    assert prometheus["prometheus"]["configs"] == {
        "/etc/prometheus": {"dir": "./prometheus", "writable": True}
    }
    cluster = load_cluster(SAMPLES / "nginx-flask-mongo" / "compose.yaml")
    web, backend = (next(s for s in cluster.services if s.name == n) for n in ("web", "backend"))
    (config,) = web.configs
    assert (config.target, config.copy) == ("/tmp/nginx.conf", "/tmp/nginx.conf")
    assert {c.copy for c in backend.configs} == {"/src"}
    assert "/src/server.py" in {c.target for c in backend.configs}
