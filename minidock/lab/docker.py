"""Argv builders and output parsers for the LOCAL Docker engine and docker-compose.

Everything the lab runs on this machine's engine (and, through `exec_argv`, inside a host
container) is built here as a true argv, never a shell string, and tested without Docker
(tests/unit/test_lab_docker.py), as `minidock.commands` is for the hosts' engines. Nothing
here runs a command; `minidock.lab.local.run` does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "COMPOSE_DIR_LABEL",
    "COMPOSE_PROJECT_LABEL",
    "all_containers_argv",
    "compose_down_argv",
    "compose_up_argv",
    "container_addresses_argv",
    "container_states_argv",
    "engine_argv",
    "exec_argv",
    "image_id_argv",
    "image_label_argv",
    "image_tags_argv",
    "import_argv",
    "info_argv",
    "load_argv",
    "parse_container_addresses",
    "parse_container_states",
    "parse_image_tags",
    "parse_lines",
    "parse_loopback_port",
    "parse_published_ports",
    "parse_words",
    "pause_argv",
    "port_argv",
    "privileged_probe_argv",
    "project_containers_argv",
    "project_dirs_argv",
    "published_ports_argv",
    "remove_containers_argv",
    "remove_resources_argv",
    "resources_argv",
    "rmi_argv",
    "save_argv",
    "start_argv",
    "stop_argv",
    "tag_argv",
    "unpause_argv",
]

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_DIR_LABEL = "com.docker.compose.project.working_dir"
ResourceKind = Literal["volume", "network"]


def _operand(value: str, what: str) -> str:
    """A positional operand: refuse what docker would read as an option."""
    if not value or value.startswith("-"):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


def _operands(values: Sequence[str], what: str) -> list[str]:
    if not values:
        raise ValueError(f"no {what} given")
    return [_operand(v, what) for v in values]


def _project_filter(project: str) -> list[str]:
    return ["--filter", f"label={COMPOSE_PROJECT_LABEL}={_operand(project, 'project')}"]


# -- the engine and images ---------------------------------------------------------------------
def info_argv() -> list[str]:
    """`docker info`: does an engine answer (here, or inside a host through exec_argv)."""
    return ["docker", "info"]


def image_label_argv(tag: str, label: str) -> list[str]:
    """One label of a local image (empty output when the image lacks it)."""
    template = f'{{{{index .Config.Labels "{label}"}}}}'
    return ["docker", "image", "inspect", "-f", template, _operand(tag, "image")]


def image_id_argv(tag: str) -> list[str]:
    """The id of a local image."""
    return ["docker", "image", "inspect", "-f", "{{.Id}}", _operand(tag, "image")]


def image_tags_argv(images: Sequence[str]) -> list[str]:
    """`TAGS-AS-JSON ID` per image, for `parse_image_tags` (images that exist only)."""
    template = "{{json .RepoTags}} {{.Id}}"
    return ["docker", "image", "inspect", "-f", template, *_operands(images, "image")]


def parse_image_tags(stdout: str) -> set[tuple[str, str]]:
    """(tag, image id) pairs printed by `image_tags_argv`."""
    present: set[tuple[str, str]] = set()
    for line in stdout.splitlines():
        tags, _, image_id = line.strip().rpartition(" ")
        if image_id:
            present.update((tag, image_id) for tag in json.loads(tags or "[]"))
    return present


def import_argv(tag: str, changes: Sequence[str]) -> list[str]:
    """`docker import` of a root filesystem tarball on stdin, with Dockerfile changes."""
    argv = ["docker", "import"]
    for change in changes:
        argv += ["--change", change]
    return [*argv, "-", _operand(tag, "image")]


def tag_argv(source: str, target: str) -> list[str]:
    return ["docker", "tag", _operand(source, "image"), _operand(target, "image")]


def rmi_argv(tag: str, *, force: bool = False) -> list[str]:
    return ["docker", "rmi", *(["-f"] if force else []), _operand(tag, "image")]


def save_argv(images: Sequence[str]) -> list[str]:
    """Images as one tarball on stdout (for `load_argv` inside a host)."""
    return ["docker", "save", *_operands(images, "image")]


def load_argv() -> list[str]:
    """Load a `docker save` tarball from stdin, quietly."""
    return ["docker", "load", "-q"]


def privileged_probe_argv(image: str) -> list[str]:
    """A throw-away container that succeeds only when `--privileged` works here."""
    return [
        "docker", "run", "--rm", "--privileged", "--network", "none",
        "--entrypoint", "/bin/true", _operand(image, "image"),
    ]  # fmt: skip


# -- host containers ---------------------------------------------------------------------------
def container_states_argv(containers: Sequence[str]) -> list[str]:
    """`/NAME STATE` per existing container, for `parse_container_states`."""
    return _inspect_containers_argv("{{.Name}} {{.State.Status}}", containers)


def parse_container_states(stdout: str) -> dict[str, str]:
    """Container name -> docker's state (running, paused, exited, ...)."""
    states: dict[str, str] = {}
    for line in stdout.splitlines():
        name, _, status = line.strip().lstrip("/").partition(" ")
        if name and status:
            states[name] = status
    return states


def container_addresses_argv(containers: Sequence[str]) -> list[str]:
    """`/NAME ADDRESS...` per running container: its addresses on its docker networks."""
    template = "{{.Name}}{{range .NetworkSettings.Networks}} {{.IPAddress}}{{end}}"
    return _inspect_containers_argv(template, containers)


def _inspect_containers_argv(template: str, containers: Sequence[str]) -> list[str]:
    """`docker inspect` of existing containers, one `template` line each."""
    return [
        "docker",
        "inspect",
        "--type",
        "container",
        "-f",
        template,
        *_operands(containers, "container"),
    ]


def parse_container_addresses(stdout: str) -> dict[str, str]:
    """Container name -> its first network address (containers without one left out)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        name, *addresses = line.strip().lstrip("/").split() or [""]
        if name and addresses:
            found[name] = addresses[0]
    return found


def port_argv(container: str, port: str = "22/tcp") -> list[str]:
    """Where docker publishes a container port (`ADDRESS:PORT` lines)."""
    return ["docker", "port", _operand(container, "container"), port]


def all_containers_argv() -> list[str]:
    """Ids of every container on the engine, in any state."""
    return ["docker", "ps", "-aq"]


def published_ports_argv(ids: Sequence[str]) -> list[str]:
    """`PROJECT PORT...` per container: its compose project (empty when none) and every
    host port it publishes, bound now or when it starts again (a stopped container's ports
    are free on the machine but still its own)."""
    template = (
        f'{{{{index .Config.Labels "{COMPOSE_PROJECT_LABEL}"}}}}:'
        "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}} {{.HostPort}}{{end}}{{end}}"
    )
    return _inspect_containers_argv(template, ids)


def parse_published_ports(stdout: str, *, except_project: str) -> set[int]:
    """The host ports in `published_ports_argv`'s output, but those of `except_project`'s
    own containers."""
    ports: set[int] = set()
    for line in stdout.splitlines():
        project, _, words = line.strip().partition(":")
        if project != except_project:
            ports.update(int(w) for w in words.split() if w.isdigit())
    return ports


def parse_loopback_port(stdout: str) -> int | None:
    """The port published on 127.0.0.1 in `port_argv`'s output, if any."""
    for line in stdout.splitlines():
        address, _, port = line.strip().rpartition(":")
        if address == "127.0.0.1" and port.isdigit():
            return int(port)
    return None


def exec_argv(container: str, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
    """Run argv inside a running container; with stdin, this process's stdin is passed on."""
    if not argv:
        raise ValueError("empty argv")
    return ["docker", "exec", *(["-i"] if stdin else []), _operand(container, "container"), *argv]


def engine_argv(socket: Path, argv: Sequence[str]) -> list[str]:
    """`docker ARGV` against the engine listening on the Unix socket `socket`."""
    if not argv:
        raise ValueError("empty argv")
    return ["docker", "-H", f"unix://{socket}", *argv]


def stop_argv(container: str, timeout_s: int = 2) -> list[str]:
    return ["docker", "stop", "-t", str(timeout_s), _operand(container, "container")]


def start_argv(container: str) -> list[str]:
    return ["docker", "start", _operand(container, "container")]


def pause_argv(container: str) -> list[str]:
    return ["docker", "pause", _operand(container, "container")]


def unpause_argv(container: str) -> list[str]:
    return ["docker", "unpause", _operand(container, "container")]


# -- compose projects --------------------------------------------------------------------------
def compose_up_argv(file: Path, project: str) -> list[str]:
    """Start (or complete) every service of the compose file, as project `project`."""
    return _compose(file, project, "up", "-d", "--remove-orphans")


def compose_create_argv(file: Path, project: str) -> list[str]:
    """Create every service's container of the compose file (networks and volumes too)
    without starting any: their published ports are then the project's, seen by
    `docker inspect`, though nothing binds them yet."""
    return _compose(file, project, "up", "--no-start", "--remove-orphans")


def compose_down_argv(file: Path, project: str) -> list[str]:
    """Remove the project's containers, networks and volumes."""
    return _compose(file, project, "down", "-v", "--remove-orphans", "-t", "2")


def _compose(file: Path, project: str, *args: str) -> list[str]:
    return ["docker-compose", "-f", str(file), "-p", _operand(project, "project"), *args]


def project_containers_argv(project: str) -> list[str]:
    """Ids of every container (any state) of a compose project, found by compose's label."""
    return ["docker", "ps", "-aq", *_project_filter(project)]


def project_dirs_argv(project: str) -> list[str]:
    """The state and compose working directory of every container of a project, one a
    line (`running /r/a/.lab`): which lab directory the project belongs to, and whether
    that lab still runs."""
    template = f'{{{{.State}}}} {{{{.Label "{COMPOSE_DIR_LABEL}"}}}}'
    return ["docker", "ps", "-a", *_project_filter(project), "--format", template]


def remove_containers_argv(ids: Sequence[str]) -> list[str]:
    """Remove containers and their anonymous volumes, running or not."""
    return ["docker", "rm", "-f", "-v", *_operands(ids, "container")]


def resources_argv(kind: ResourceKind, project: str) -> list[str]:
    """Names of a compose project's volumes or networks."""
    return ["docker", kind, "ls", "-q", *_project_filter(project)]


def remove_resources_argv(kind: ResourceKind, names: Sequence[str]) -> list[str]:
    return ["docker", kind, "rm", *_operands(names, kind)]


def parse_words(stdout: str) -> list[str]:
    """Whitespace-separated words (ids, names), in order."""
    return stdout.split()


def parse_lines(stdout: str) -> list[str]:
    """Non-empty lines (directories may hold spaces), in order."""
    return [line for line in stdout.splitlines() if line.strip()]
