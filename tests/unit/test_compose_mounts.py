"""Files beside a Compose file (docs/compose.md#files-beside-the-compose-file): a read-only
bind mount of a relative or `~` path is the service's config (a file, or every file of a
directory), content-hashed and limited; a read-write one is a writable copy on each host,
said in a warning;
absolute bind mounts stay bind mounts; an anonymous volume is one per container."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.commands.docker import run_argv
from minidock.model import ConfigFile, Service, Volume
from minidock.spec import SpecError, load_cluster
from minidock.spec.cluster import cluster_document
from minidock.spec.compose.translation import translate_file
from minidock.spec.configs import MAX_DIR_FILES

HEAD = "name: shop\nservices:\n  web:\n    image: web:5\n    volumes:\n"


def compose(tmp_path: Path, *mounts: str) -> Path:
    path = tmp_path / "compose.yaml"
    path.write_text(HEAD + "".join(f"      - {m}\n" for m in mounts))
    return path


def load(tmp_path: Path, *mounts: str) -> Service:
    (service,) = load_cluster(compose(tmp_path, *mounts)).services
    return service


def error(tmp_path: Path, *mounts: str) -> str:
    path = compose(tmp_path, *mounts)
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    text = str(caught.value)
    assert "\n" not in text
    return text.removeprefix(f"{path}: ")


def conf_dir(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    (conf / "sites").mkdir(parents=True)
    (conf / "nginx.conf").write_text("worker_processes 1;\n")
    (conf / "sites" / "default").write_text("server {}\n")
    return conf


def test_a_read_only_file_beside_the_compose_file_is_a_config(tmp_path: Path) -> None:
    (tmp_path / "nginx.conf").write_text("events {}\n")
    path = compose(tmp_path, "./nginx.conf:/etc/nginx/nginx.conf:ro")
    doc = cluster_document(path)["services"]["web"]
    assert doc["configs"] == {"/etc/nginx/nginx.conf": {"file": "./nginx.conf"}}
    assert "volumes" not in doc
    (service,) = load_cluster(path).services
    assert service.configs == (ConfigFile("/etc/nginx/nginx.conf", "events {}\n"),)
    assert service.volumes == ()
    assert not service.pinned


def test_a_read_only_directory_is_every_file_under_it(tmp_path: Path) -> None:
    conf_dir(tmp_path)
    path = compose(tmp_path, "./conf:/etc/nginx:ro")
    assert cluster_document(path)["services"]["web"]["configs"] == {"/etc/nginx": {"dir": "./conf"}}
    (service,) = load_cluster(path).services
    assert service.configs == (
        ConfigFile("/etc/nginx/nginx.conf", "worker_processes 1;\n"),
        ConfigFile("/etc/nginx/sites/default", "server {}\n"),
    )


@pytest.mark.parametrize(
    "mount",
    [
        "{type: bind, source: ./conf, target: /etc/nginx, read_only: true}",
        "{type: bind, source: conf, target: /etc/nginx, read_only: true}",  # relative, as Compose
        "../shop/conf:/etc/nginx:ro",
        ".//conf/:/etc/nginx:ro",
    ],
)
def test_every_spelling_of_a_relative_read_only_mount(tmp_path: Path, mount: str) -> None:
    shop = tmp_path / "shop"
    shop.mkdir()
    conf_dir(shop)
    service = load(shop, mount)
    assert [c.target for c in service.configs] == [
        "/etc/nginx/nginx.conf",
        "/etc/nginx/sites/default",
    ]


def test_a_tilde_path_is_the_controllers_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "app").mkdir(parents=True)
    (home / "app" / "flags").write_text("beta\n")
    monkeypatch.setenv("HOME", str(home))
    service = load(tmp_path, "~/app/flags:/etc/flags:ro")
    assert service.configs == (ConfigFile("/etc/flags", "beta\n"),)


def test_a_changed_file_is_a_changed_spec_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    conf = conf_dir(tmp_path)
    before = load(tmp_path, "./conf:/etc/nginx:ro").spec_hash()
    assert load(tmp_path, "./conf:/etc/nginx:ro").spec_hash() == before
    (conf / "sites" / "default").write_text("server { listen 81; }\n")
    assert load(tmp_path, "./conf:/etc/nginx:ro").spec_hash() != before
    (conf / "sites" / "extra").write_text("")
    assert len(load(tmp_path, "./conf:/etc/nginx:ro").configs) == 3


@pytest.mark.parametrize(
    "mount",
    [
        "./conf:/etc/nginx",
        "./conf:/etc/nginx:rw",
        "{type: bind, source: ./conf, target: /etc/nginx}",
    ],
)
def test_a_read_write_relative_mount_is_a_writable_copy_with_a_warning(
    tmp_path: Path, mount: str
) -> None:
    conf_dir(tmp_path)
    path = compose(tmp_path, mount)
    translation = translate_file(path, "compose.yaml")
    doc, warnings = translation.document, translation.warnings
    assert doc["services"]["web"]["configs"] == {"/etc/nginx": {"dir": "./conf", "writable": True}}
    assert list(warnings) == [
        "compose.yaml: services.web.volumes[0] (line 6): ./conf is shipped to each host that runs "
        "web and mounted writable at /etc/nginx: each host's copy keeps its own writes, never "
        "synced back, and is replaced when the files change; use a named volume for data that "
        "must persist"
    ]
    (service,) = load_cluster(path).services
    assert service.configs == (
        ConfigFile("/etc/nginx/nginx.conf", "worker_processes 1;\n", copy="/etc/nginx"),
        ConfigFile("/etc/nginx/sites/default", "server {}\n", copy="/etc/nginx"),
    )
    read_only = load(tmp_path, "./conf:/etc/nginx:ro")
    assert service.spec_hash() != read_only.spec_hash()  # the same files, mounted otherwise


def test_a_writable_copy_of_a_file_and_a_volume_inside_a_copied_directory(
    tmp_path: Path,
) -> None:
    conf_dir(tmp_path)
    (tmp_path / "app.ini").write_text("debug = 1\n")
    service = load(tmp_path, "./app.ini:/etc/app.ini", "./conf:/app/", "/app/node_modules")
    assert service.configs == (
        ConfigFile("/app/nginx.conf", "worker_processes 1;\n", copy="/app"),
        ConfigFile("/app/sites/default", "server {}\n", copy="/app"),
        ConfigFile("/etc/app.ini", "debug = 1\n", copy="/etc/app.ini"),
    )  # /app/ is the directory /app, as Docker mounts it
    assert service.volumes == (Volume("", "/app/node_modules"),)  # mounted over the copy
    assert error(tmp_path, "./conf:/app:ro", "/app/node_modules") == (
        "services.web.volumes[0] (line 6): /app collides with the volume at /app/node_modules"
    )  # read-only, the directory is its files, which a volume cannot lie among
    assert error(tmp_path, "./conf:/app", "/app").startswith(
        "services.web.volumes[0] (line 6): /app collides with the volume at /app"
    )


def test_the_limits_are_stated_and_enforced(tmp_path: Path) -> None:
    conf = conf_dir(tmp_path)
    (conf / "big").write_text("x" * (500 * 1024 + 1))
    assert "over the 500 KiB limit" in error(tmp_path, "./conf:/etc/nginx:ro")
    (conf / "big").unlink()
    for i in range(MAX_DIR_FILES):
        (conf / f"f{i:03}").write_text("x")
    assert error(tmp_path, "./conf:/etc/nginx:ro") == (
        f"services.web.volumes[0] (line 6): {conf} holds more than 100 files or 1 MiB, what a "
        "directory of the controller may ship: build them into the image, or use a volume"
    )
    for i in range(MAX_DIR_FILES):
        (conf / f"f{i:03}").unlink()
    for i in range(3):
        (conf / f"part{i}").write_text("x" * 400 * 1024)  # each under 500 KiB, 1.2 MiB in all
    assert "holds more than 100 files or 1 MiB" in error(tmp_path, "./conf:/etc/nginx:ro")


def test_binary_and_missing_files_are_refused(tmp_path: Path) -> None:
    conf = conf_dir(tmp_path)
    (conf / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    assert error(tmp_path, "./conf:/etc/nginx:ro") == (
        f"services.web.volumes[0] (line 6): {conf / 'logo.png'} is not UTF-8 text (configs "
        "are text files): build it into the image, or use a volume"
    )
    assert error(tmp_path, "./gone:/etc/gone:ro").startswith(
        f"services.web.volumes[0] (line 6): ./gone is not on the controller ({tmp_path / 'gone'})"
    )


def test_a_mount_and_a_config_at_one_path_collide(tmp_path: Path) -> None:
    conf_dir(tmp_path)
    path = tmp_path / "compose.yaml"
    path.write_text(
        "name: shop\nservices:\n  web:\n    image: web:5\n    volumes: ['./conf:/etc/nginx:ro']\n"
        "    configs: [{source: site, target: /etc/nginx}]\n"
        "configs:\n  site: {content: x}\n"
    )
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert str(caught.value) == (
        f"{path}: services.web.configs[0] (line 6): /etc/nginx is given twice: one config or "
        "mount per path"
    )
    path.write_text(
        "name: shop\nservices:\n  web:\n    image: web:5\n"
        "    volumes: ['./conf:/etc/nginx:ro', 'data:/etc/nginx/sites']\n"
        "volumes:\n  data:\n"
    )
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert str(caught.value) == (  # the directory's files cannot hold a volume
        f"{path}: services.web.volumes[0] (line 5): /etc/nginx collides with the volume at "
        "/etc/nginx/sites"
    )


def test_an_absolute_bind_mount_stays_a_bind_mount(tmp_path: Path) -> None:
    service = load(tmp_path, "/srv/www:/usr/share/nginx/html:ro", "/var/log/app:/logs")
    assert service.volumes == (
        Volume("/srv/www", "/usr/share/nginx/html", read_only=True),
        Volume("/var/log/app", "/logs"),
    )
    assert service.configs == ()


def test_an_anonymous_volume_is_one_per_container_and_pins_nothing(tmp_path: Path) -> None:
    path = compose(tmp_path, "/app/node_modules", "{type: volume, target: /cache}")
    assert cluster_document(path)["services"]["web"]["volumes"] == ["/app/node_modules", "/cache"]
    (service,) = load_cluster(path).services
    assert service.volumes == (Volume("", "/app/node_modules"), Volume("", "/cache"))
    assert all(v.anonymous and not v.named for v in service.volumes)
    assert not service.pinned  # no data of a slot's to keep on its host
    argv, _ = run_argv(service, "shop", 1, "t1", service.spec_hash())
    assert argv[argv.index("/app/node_modules") - 1] == "-v"  # docker run -v PATH: Docker's own
    assert argv[argv.index("/cache") - 1] == "-v"
    assert error(tmp_path, "{type: volume, target: /c, read_only: true}").startswith(
        "services.web.volumes[0].read_only (line 6): an anonymous volume starts empty"
    )


def test_a_toml_spec_ships_a_directory_too(tmp_path: Path) -> None:
    conf_dir(tmp_path)
    path = tmp_path / "cluster.toml"
    path.write_text(
        'cluster = "shop"\n[services.web]\nimage = "web:5"\nvolumes = ["/cache"]\n'
        '[services.web.configs]\n"/etc/nginx" = { dir = "conf" }\n'
    )
    (service,) = load_cluster(path).services
    assert [c.target for c in service.configs] == [
        "/etc/nginx/nginx.conf",
        "/etc/nginx/sites/default",
    ]
    assert service.volumes == (Volume("", "/cache"),)
