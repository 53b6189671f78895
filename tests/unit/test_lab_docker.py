"""The lab's local docker / docker-compose argv builders (exact argvs) and their parsers,
without a Docker engine (minidock/lab/docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.commands.facts import parse_ids, running_ids_argv
from minidock.lab import docker

PROJECT_FILTER = ["--filter", "label=com.docker.compose.project=lab-a"]


def test_engine_and_image_argvs() -> None:
    assert docker.info_argv() == ["docker", "info"]
    assert docker.image_label_argv("minidock-lab/web:5", "minidock.lab.recipe") == [
        "docker", "image", "inspect", "-f", '{{index .Config.Labels "minidock.lab.recipe"}}',
        "minidock-lab/web:5",
    ]  # fmt: skip
    assert docker.image_id_argv("w:5") == ["docker", "image", "inspect", "-f", "{{.Id}}", "w:5"]
    assert docker.image_tags_argv(["a:1", "b:2"]) == [
        "docker", "image", "inspect", "-f", "{{json .RepoTags}} {{.Id}}", "a:1", "b:2",
    ]  # fmt: skip
    assert docker.import_argv("w:5", ["ENV PATH=/bin", 'CMD ["sh"]']) == [
        "docker", "import", "--change", "ENV PATH=/bin", "--change", 'CMD ["sh"]', "-", "w:5",
    ]  # fmt: skip
    assert docker.tag_argv("h:building-1", "h:abc") == ["docker", "tag", "h:building-1", "h:abc"]
    assert docker.rmi_argv("h:x") == ["docker", "rmi", "h:x"]
    assert docker.rmi_argv("h:x", force=True) == ["docker", "rmi", "-f", "h:x"]
    assert docker.save_argv(["a:1", "b:2"]) == ["docker", "save", "a:1", "b:2"]
    assert docker.load_argv() == ["docker", "load", "-q"]
    assert docker.privileged_probe_argv("w:5") == [
        "docker", "run", "--rm", "--privileged", "--network", "none",
        "--entrypoint", "/bin/true", "w:5",
    ]  # fmt: skip


def test_host_container_argvs() -> None:
    assert docker.container_states_argv(["lab-host1", "lab-host2"]) == [
        "docker", "inspect", "--type", "container", "-f", "{{.Name}} {{.State.Status}}",
        "lab-host1", "lab-host2",
    ]  # fmt: skip
    assert docker.port_argv("lab-host1") == ["docker", "port", "lab-host1", "22/tcp"]
    assert docker.exec_argv("lab-host1", ["docker", "info"]) == [
        "docker", "exec", "lab-host1", "docker", "info",
    ]  # fmt: skip
    assert docker.exec_argv("lab-host1", ["docker", "load", "-q"], stdin=True) == [
        "docker", "exec", "-i", "lab-host1", "docker", "load", "-q",
    ]  # fmt: skip
    assert docker.engine_argv(Path("/r/.lab/engines/host1/docker.sock"), ["ps", "-q"]) == [
        "docker", "-H", "unix:///r/.lab/engines/host1/docker.sock", "ps", "-q",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="empty argv"):
        docker.engine_argv(Path("/r/docker.sock"), [])
    assert docker.stop_argv("lab-host1") == ["docker", "stop", "-t", "2", "lab-host1"]
    assert docker.start_argv("lab-host1") == ["docker", "start", "lab-host1"]
    assert docker.pause_argv("lab-host1") == ["docker", "pause", "lab-host1"]
    assert docker.unpause_argv("lab-host1") == ["docker", "unpause", "lab-host1"]


def test_compose_project_argvs() -> None:
    file = Path("/r/.lab/docker-compose.json")
    assert docker.compose_up_argv(file, "lab-a") == [
        "docker-compose", "-f", str(file), "-p", "lab-a", "up", "-d", "--remove-orphans",
    ]  # fmt: skip
    assert docker.compose_down_argv(file, "lab-a") == [
        "docker-compose", "-f", str(file), "-p", "lab-a",
        "down", "-v", "--remove-orphans", "-t", "2",
    ]  # fmt: skip
    assert docker.project_containers_argv("lab-a") == ["docker", "ps", "-aq", *PROJECT_FILTER]
    assert docker.project_dirs_argv("lab-a") == [
        "docker", "ps", "-a", *PROJECT_FILTER,
        "--format", '{{.State}} {{.Label "com.docker.compose.project.working_dir"}}',
    ]  # fmt: skip
    assert docker.remove_containers_argv(["c1", "c2"]) == ["docker", "rm", "-f", "-v", "c1", "c2"]
    assert docker.resources_argv("volume", "lab-a") == [
        "docker", "volume", "ls", "-q", *PROJECT_FILTER,
    ]  # fmt: skip
    assert docker.remove_resources_argv("network", ["n1"]) == ["docker", "network", "rm", "n1"]


def test_the_probe_over_ssh_is_a_minidock_command() -> None:
    assert running_ids_argv() == ["docker", "ps", "-q", "--no-trunc"]
    assert parse_ids("a" * 64 + "\n" + "b" * 64 + "\n") == ["a" * 64, "b" * 64]


@pytest.mark.parametrize(
    "build",
    [
        lambda: docker.stop_argv("-t"),
        lambda: docker.exec_argv("--privileged", ["sh"]),
        lambda: docker.exec_argv("lab-host1", []),
        lambda: docker.save_argv([]),
        lambda: docker.project_dirs_argv("--all"),
        lambda: docker.remove_containers_argv(["c1", "-f"]),
        lambda: docker.compose_down_argv(Path("f"), ""),
    ],
)
def test_operands_that_read_as_options_or_are_missing_are_refused(build: object) -> None:
    with pytest.raises(ValueError, match=r"invalid|no |empty"):
        build()  # type: ignore[operator]


def test_parsers() -> None:
    states = "/lab-host1 running\n/lab-host2 exited\n\n"
    assert docker.parse_container_states(states) == {"lab-host1": "running", "lab-host2": "exited"}
    assert docker.parse_loopback_port("0.0.0.0:1234\n127.0.0.1:23018\n") == 23018
    assert docker.parse_loopback_port("[::]:23018\n") is None
    assert docker.parse_loopback_port("") is None
    tags = '["minidock-lab/web:5","w:latest"] sha256:aa\n[] sha256:bb\n'
    assert docker.parse_image_tags(tags) == {
        ("minidock-lab/web:5", "sha256:aa"),
        ("w:latest", "sha256:aa"),
    }
    assert docker.parse_lines("/a b/.lab\n\n/c/.lab\n") == ["/a b/.lab", "/c/.lab"]
    assert docker.parse_words("id1\nid2 id3\n") == ["id1", "id2", "id3"]


def test_container_addresses() -> None:
    assert docker.container_addresses_argv(["p-host1"]) == [
        "docker", "inspect", "--type", "container", "-f",
        "{{.Name}}{{range .NetworkSettings.Networks}} {{.IPAddress}}{{end}}", "p-host1",
    ]  # fmt: skip
    out = "/p-host1 172.18.0.2\n/p-host2\n\n/p-host3 172.18.0.4 10.0.0.9\n"
    assert docker.parse_container_addresses(out) == {
        "p-host1": "172.18.0.2",
        "p-host3": "172.18.0.4",
    }


def test_published_ports_of_every_container_but_the_projects_own() -> None:
    assert docker.all_containers_argv() == ["docker", "ps", "-aq"]
    assert docker.published_ports_argv(["c1", "c2"]) == [
        "docker", "inspect", "--type", "container", "-f",
        '{{index .Config.Labels "com.docker.compose.project"}}:'
        "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}} {{.HostPort}}{{end}}{{end}}",
        "c1", "c2",
    ]  # fmt: skip
    out = "lab-a: 23001 23002 23003\nlab-b: 24001\n: 8080 \nlab-c:\n\n"
    assert docker.parse_published_ports(out, except_project="lab-a") == {24001, 8080}
    assert docker.parse_published_ports(out, except_project="lab-x") == {
        23001, 23002, 23003, 24001, 8080,
    }  # fmt: skip
