"""Docker commands as pure argv lists: what the act path and the operator commands run.

Nothing here runs a command. Each builder returns a true argv (one list element per
argument, never pre-quoted); the executor in `minidock.ssh` quotes it once for the remote
shell. Secrets never enter an argv: `run_argv` returns the service env separately, as
env-file text for the command's stdin.
"""

from __future__ import annotations

import io
import math
import shlex
import tarfile
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from minidock.model import (
    LABEL_CLUSTER,
    LABEL_CONTROLLER,
    LABEL_GPUS,
    LABEL_ONEOFF,
    LABEL_SERVICE,
    LABEL_SLOT,
    LABEL_SPEC,
    LABEL_TASK,
    Build,
    HealthCheck,
    SecretFile,
    Service,
    Volume,
)

__all__ = [
    "CONFIG_DIR",
    "ENV_FILE_STDIN",
    "LABEL_COPY",
    "ConfigMount",
    "build_argv",
    "config_check_argv",
    "config_check_input",
    "config_dir_argvs",
    "config_finish_argvs",
    "config_mount_args",
    "config_write_argv",
    "container_name",
    "copy_in_argv",
    "copy_out_argv",
    "created_argv",
    "docker_duration",
    "engine_version_argv",
    "env_file_text",
    "exec_argv",
    "gpus_args",
    "grace_seconds",
    "health_checks_argv",
    "health_shell_command",
    "image_id_size_argv",
    "image_present_argv",
    "load_argv",
    "login_argv",
    "logs_argv",
    "network_connect_argv",
    "network_create_argv",
    "network_owner_argv",
    "oneoff_create_argv",
    "oneoff_name",
    "oneoff_start_argv",
    "operand",
    "pull_argv",
    "rm_argv",
    "run_argv",
    "run_options_args",
    "save_argv",
    "secret_files_argv",
    "secret_files_tar",
    "start_argv",
    "stop_argv",
    "task_logs_argv",
    "verify_argv",
    "volume_exists_argv",
    "volume_export_argv",
    "volume_helper_argv",
    "volume_helper_name",
    "volume_import_argv",
    "volume_name",
    "volume_rm_argv",
    "volume_spec",
    "writable_dir_argv",
    "writable_exists_argv",
    "writable_finish_argvs",
    "writable_tar",
    "writable_unpack_argvs",
]


ENV_FILE_STDIN = "/dev/stdin"
LABEL_COPY = "minidock.copy"  # a volume's helper (`volume_helper_argv`): the volume it holds
# configs on a host, each named by its content's sha256; relative to the SSH user's home
# (where every session starts), made absolute once per host by `config_dir_argvs`
CONFIG_DIR = ".minidock/configs"


# -- names ------------------------------------------------------------------------------------
def container_name(service: str, slot: int, task: str) -> str:
    """The container name of one task: SERVICE.SLOT.TASK (SwarmKit's naming)."""
    return f"{service}.{slot}.{task}"


def operand(value: str, what: str) -> str:
    """A positional operand for docker: refuse what docker would read as an option."""
    if not value or value.startswith("-"):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


# -- act --------------------------------------------------------------------------------------
def docker_duration(seconds: float) -> str:
    """A duration for docker flags: whole seconds as "2s", anything finer as "500ms"."""
    ms = round(seconds * 1000)
    if ms < 0:
        raise ValueError(f"negative duration: {seconds}")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def health_shell_command(cmd: Sequence[str]) -> str:
    """The health command as one string for the *container's* /bin/sh (CMD-SHELL).

    The docker CLI can only express CMD-SHELL, so each word is quoted for the container's
    shell. This is a value handed to docker, not the remote command line: that one is
    quoted, once, by the SSH executor.
    """
    return " ".join(shlex.quote(word) for word in cmd)


def env_file_text(env: Iterable[tuple[str, str]]) -> str:
    """KEY=VALUE lines in docker's --env-file format (values are taken verbatim).

    Docker reads env files line by line and keeps the value after the first "=" as is,
    so a value must not hold a line break or NUL; a key must be a plain word.
    """
    lines: list[str] = []
    for key, value in env:
        if not key or key[0] == "#" or any(c.isspace() or c in "=\0" for c in key):
            raise ValueError(f"invalid env name: {key!r}")
        if any(c in value for c in "\n\r\0"):
            raise ValueError(f"env {key}: value must not contain a line break or NUL")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def _health_args(health: HealthCheck) -> list[str]:
    return [
        "--health-cmd",
        health_shell_command(health.cmd),
        "--health-interval",
        docker_duration(health.interval),
        "--health-timeout",
        docker_duration(health.timeout),
        "--health-retries",
        str(health.retries),
        "--health-start-period",
        docker_duration(health.start_period),
    ]


def run_argv(
    service: Service,
    cluster: str,
    slot: int,
    task: str,
    spec_hash: str,
    controller: str = "",
    *,
    network: str | None = None,
    routed: Sequence[tuple[str, int, int]] = (),
    configs: Sequence[ConfigMount] = (),
    exposed_at: str | None = None,
    gpus: Sequence[str] = (),
) -> tuple[list[str], str]:
    """`docker run -d` for one task, and the env-file text to send on its stdin.

    The env values travel only in the returned text (read by docker from /dev/stdin),
    never in the argv, so they cannot show in `ps` on the host or in any logged command.
    Docker's own restart policy is off: restarts are the controller's decision. With
    `network` (the cluster's, `model.cluster_network`) the task joins it under its service
    name; the service's extra `networks` are joined after (`network_connect_argv`).
    `routed` publishes each routed container port as (bind address, host port, container
    port): where the ingress proxies reach the task (docs/ingress.md). With `exposed_at`
    (the host's private address) each exposed port is published on it, on a host port
    docker picks, and the task has no alias: its service's name is its name proxies'
    (docs/discovery.md).
    `configs` are (host path, path in the task) pairs, placed by `minidock.act.configs`.
    """
    argv = ["docker", "run", "-d", "--name", container_name(service.name, slot, task)]
    argv += _task_labels(cluster, service.name, slot, task, spec_hash, controller)
    env_text = env_file_text((*service.env, *service.secrets))
    if env_text:
        argv += ["--env-file", ENV_FILE_STDIN]
    for port in service.ports:
        argv += ["-p", str(port)]
    for address, host_port, container_port in routed:
        argv += ["-p", f"{operand(address, 'address')}:{host_port}:{container_port}"]
    if exposed_at is not None:
        address = operand(exposed_at, "address")
        argv += [a for port in service.expose for a in ("-p", f"{address}::{port}")]
    for volume in service.volumes:
        argv += ["-v", volume_spec(volume, cluster, service.name, slot)]
    argv += config_mount_args(configs)
    if service.cpus > 0:
        argv += ["--cpus", f"{service.cpus:g}"]
    if service.memory > 0:
        argv += ["--memory", str(service.memory)]
    argv += gpus_args(gpus)
    if service.health is not None:
        argv += _health_args(service.health)
    if network is not None:
        argv += ["--network", network]
        argv += [] if service.expose else ["--network-alias", service.name]
    argv += run_options_args(service)
    argv += ["--restart", "no", operand(service.image, "image")]
    argv += [*_entrypoint_args(service), *(service.command or ())]
    return argv, env_text


def oneoff_name(service: str, kind: str, run: str) -> str:
    """A one-off task's container name: SERVICE.KIND.RUN (`web.run.3f9a0c21b7`)."""
    return f"{service}.{kind}.{run}"


def oneoff_create_argv(
    service: Service,
    cluster: str,
    kind: str,
    run: str,
    controller: str = "",
    *,
    slot: int = 1,
    network: str | None = None,
    configs: Sequence[ConfigMount] = (),
    interactive: bool = False,
    tty: bool = False,
) -> tuple[list[str], str]:
    """`docker create` of a one-off task of `service` (the spec as `core.jobs.oneoff_spec`
    made it), and the env-file text for its stdin, as `run_argv` sends a task's. It is
    labelled as the cluster's and the service's, with its kind and run id and the spec
    hash, but no slot: never a slot's task. Named volumes are those of `slot` (the pinned
    slot's data). `interactive`/`tty` keep stdin open and give it a PTY (`-i`, `-t`)."""
    argv = ["docker", "create", "--name", oneoff_name(service.name, kind, run)]
    labels = [
        (LABEL_CLUSTER, cluster),
        (LABEL_SERVICE, service.name),
        (LABEL_ONEOFF, kind),
        (LABEL_TASK, run),
        (LABEL_SPEC, service.spec_hash()),
        *([(LABEL_CONTROLLER, controller)] if controller else []),
    ]
    argv += [arg for key, value in labels for arg in ("--label", f"{key}={value}")]
    env_text = env_file_text((*service.env, *service.secrets))
    if env_text:
        argv += ["--env-file", ENV_FILE_STDIN]
    for volume in service.volumes:
        argv += ["-v", volume_spec(volume, cluster, service.name, slot)]
    argv += config_mount_args(configs)
    if service.cpus > 0:
        argv += ["--cpus", f"{service.cpus:g}"]
    if service.memory > 0:
        argv += ["--memory", str(service.memory)]
    if network is not None:
        argv += ["--network", network]
    argv += run_options_args(service)
    argv += ["-i"] if interactive else []
    argv += ["-t"] if tty else []
    argv += ["--restart", "no", operand(service.image, "image")]
    argv += [*_entrypoint_args(service), *(service.command or ())]
    return argv, env_text


def oneoff_start_argv(name: str, *, interactive: bool = False) -> list[str]:
    """Start a created one-off attached to its output (and, `interactive`, its stdin); the
    command's exit status is the one-off's."""
    return ["docker", "start", "-a", *(["-i"] if interactive else []), operand(name, "container")]


def _task_labels(
    cluster: str, service: str, slot: int, task: str, spec_hash: str, controller: str
) -> list[str]:
    """The labels that say whose task a container is: cluster, service, slot, task, the
    spec hash, and the controller that started it (when it has an id)."""
    labels = [
        (LABEL_CLUSTER, cluster),
        (LABEL_SERVICE, service),
        (LABEL_SLOT, str(slot)),
        (LABEL_TASK, task),
        (LABEL_SPEC, spec_hash),
        *([(LABEL_CONTROLLER, controller)] if controller else []),
    ]
    return [arg for key, value in labels for arg in ("--label", f"{key}={value}")]


def volume_name(cluster: str, service: str, slot: int, name: str) -> str:
    """The Docker volume of one slot's named volume: each slot has its own data, kept on
    the host it is pinned to (`prod_db.1_pgdata`).

    Unambiguous across clusters and services: a `_` inside the cluster or service name is
    written `U` (names are lowercase, so `U` stands for nothing else), so the first `_`
    ends the cluster, the next one the `SERVICE.SLOT` part, and the volume's own name is
    the rest (`shop_eu` + `db` -> `shopUeu_db.1_data`, `shop` + `eu_db` -> `shop_euUdb.1_data`).
    Names without `_` keep the name they always had (docs/formats.md: the migration)."""
    return f"{_unscored(cluster)}_{_unscored(service)}.{slot}_{name}"


def _unscored(name: str) -> str:
    return name.replace("_", "U")


def volume_spec(volume: Volume, cluster: str, service: str, slot: int) -> str:
    """`docker run -v` for a volume: a slot's own named volume, the bind mount as is, or
    the container path alone (an anonymous volume, one per container)."""
    if volume.anonymous:
        return volume.target
    source = volume_name(cluster, service, slot, volume.source) if volume.named else volume.source
    return f"{source}:{volume.target}" + (":ro" if volume.read_only else "")


# -- a volume's data, as a tar stream (minidock.act.volumecopy) ----------------------------------
def volume_helper_name(volume: str) -> str:
    """The container that holds a volume while its data streams in or out of it."""
    return f"minidock-copy.{operand(volume, 'volume')}"


def volume_helper_argv(volume: str, target: str, image: str) -> list[str]:
    """`docker create` (never started) of a container of the task's own image with the
    volume mounted where the task mounts it, so that `docker cp` reaches the volume with no
    task running and no other image; `nocopy`: a volume it creates stays empty (Docker
    would fill it from the image), and no network. Created, it makes the volume. `--volume`
    with `nocopy`, not `--mount` with `volume-nocopy`, which Podman refuses ("invalid mount
    option"); both engines take this one."""
    if not target.startswith("/") or target == "/" or "," in target or ":" in target:
        raise ValueError(f"invalid volume target: {target!r}")
    mount = f"{operand(volume, 'volume')}:{target}:nocopy"
    return [
        "docker",
        "create",
        "--name",
        volume_helper_name(volume),
        "--label",
        f"{LABEL_COPY}={volume}",
        "--network",
        "none",
        "--entrypoint",
        "true",
        "--volume",
        mount,
        operand(image, "image"),
    ]


def copy_out_argv(container: str, path: str) -> list[str]:
    """A tar stream of `path` (and all below it, owners and modes kept) on stdout, out of a
    container running or not; the archive's one top entry is the path's last name."""
    return ["docker", "cp", f"{operand(container, 'container')}:{path}", "-"]


def copy_in_argv(container: str, parent: str) -> list[str]:
    """The tar stream on stdin (`copy_out_argv`'s) unpacked under `parent` in a container,
    owners kept (`-a`): the stream of `/var/lib/data` goes in under `/var/lib`."""
    return ["docker", "cp", "-a", "-", f"{operand(container, 'container')}:{parent}"]


def volume_export_argv(volume: str) -> list[str]:
    """Podman's tar stream of a volume's contents on stdout (names relative to the volume,
    no top entry; owners kept): Podman's `cp` out of a container never started (the
    helper) reads the container's own root and gives every file to root, never the
    volume mounted there (docs/hosts.md). `podman-docker`'s docker is podman."""
    return ["docker", "volume", "export", operand(volume, "volume")]


def volume_import_argv(volume: str) -> list[str]:
    """Podman's unpacking of a tar stream on stdin (`volume_export_argv`'s form) into a
    volume that is there, owners kept (its `cp` into the helper misses the volume)."""
    return ["docker", "volume", "import", operand(volume, "volume"), "-"]


def volume_exists_argv(volume: str) -> list[str]:
    """Exit 0 (printing its name) when the volume is on the host, non-zero when not."""
    return ["docker", "volume", "inspect", "--format", "{{.Name}}", operand(volume, "volume")]


def volume_rm_argv(volume: str) -> list[str]:
    """Remove a volume and its data (refused by Docker while a container uses it)."""
    return ["docker", "volume", "rm", operand(volume, "volume")]


class ConfigMount(NamedTuple):
    """A placed config's bind mount: the host's path, the task's path, and whether it is a
    writable copy (docs/configs.md#writable-copies) rather than a read-only config."""

    source: str
    target: str
    writable: bool = False


def config_mount_args(configs: Sequence[ConfigMount]) -> list[str]:
    """A bind mount per config, read-only unless a writable copy: `--mount` (not `-v`) so
    that a file missing on the host fails the start instead of becoming an empty
    directory."""
    argv: list[str] = []
    for source, target, writable in configs:
        mode = "" if writable else ",readonly"
        argv += ["--mount", f"type=bind,source={source},target={target}{mode}"]
    return argv


def config_dir_argvs() -> list[list[str]]:
    """Make the host's config directory, then print its absolute path (one line)."""
    return [["mkdir", "-p", "--", CONFIG_DIR], ["realpath", "-e", "--", CONFIG_DIR]]


def config_check_argv() -> list[str]:
    """Exit 0 when the file named on stdin (`config_check_input`) has that sha256."""
    return ["sha256sum", "--check", "--status", "-"]


def config_check_input(digest: str, path: str) -> str:
    return f"{digest}  {path}\n"


def config_write_argv(path: str) -> list[str]:
    """Write stdin to `path` (a temporary name next to the config: made whole, then
    renamed over, so a config is never rewritten in place)."""
    return ["dd", f"of={path}", "status=none"]


def config_finish_argvs(temporary: str, path: str) -> list[list[str]]:
    """Make the written file read-only for everyone and give it its name, atomically."""
    return [["chmod", "0444", "--", temporary], ["mv", "-f", "--", temporary, path]]


def writable_dir_argv(path: str) -> list[str]:
    """Make the directory that holds a host's writable copies (under its config one)."""
    return ["mkdir", "-p", "--", path]


def writable_exists_argv(path: str) -> list[str]:
    """Exit 0 when the writable copy `path` is on the host (made whole, then renamed: a
    copy that is there is complete)."""
    return ["test", "-d", path]


def writable_unpack_argvs(temporary: str) -> list[list[str]]:
    """Make a copy's temporary directory, then unpack the tar stream on stdin
    (`writable_tar`) into it."""
    return [
        ["mkdir", "-p", "--", temporary],
        ["tar", "-x", "--no-same-owner", "-C", temporary, "-f", "-"],
    ]


def writable_finish_argvs(temporary: str, path: str) -> list[list[str]]:
    """Let every user write the unpacked copy (a task's user is any user), then give it its
    name, atomically."""
    return [["chmod", "-R", "a+rwX", "--", temporary], ["mv", "-T", "--", temporary, path]]


def writable_tar(files: Sequence[tuple[str, str]]) -> str:
    """A tar stream of (path under the copy, text) files, mode 0666, as text for a
    command's stdin (ASCII headers, UTF-8 contents: the stream byte for byte)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text in files:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o666
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue().decode("utf-8")


def secret_files_argv(container: str) -> list[str]:
    """Copy the tar stream on stdin (`secret_files_tar`) into a created task, at its root,
    keeping each file's owner and mode (`-a`): the secrets go into the task's own
    filesystem, never into a file of the host's."""
    return ["docker", "cp", "-a", "-", f"{operand(container, 'container')}:/"]


def secret_files_tar(files: Sequence[SecretFile]) -> str:
    """A tar stream of the files alone (no directory entries: Docker makes a missing
    parent 0755 and leaves an existing one as it is), as text for a command's stdin:
    headers are ASCII and the contents UTF-8, so the text is the stream byte for byte."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            data = f.value.encode()
            info = tarfile.TarInfo(f.target.lstrip("/"))
            info.size, info.mode, info.uid, info.gid = len(data), f.mode, f.uid, f.gid
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue().decode("utf-8")


def run_options_args(service: Service) -> list[str]:
    """The flags of the docker run surface a service sets (labels ... dns), in one order;
    nothing for options left at their defaults. The entrypoint goes separately."""
    argv: list[str] = []
    for key, value in service.labels:
        argv += ["--label", f"{key}={value}"]
    for flag, given in (("--user", service.user), ("--workdir", service.workdir)):
        if given is not None:
            argv += [flag, given]
    if service.entrypoint is not None:
        argv += ["--entrypoint", service.entrypoint[0] if service.entrypoint else ""]
    if service.stop_signal is not None:
        argv += ["--stop-signal", service.stop_signal]
    if service.stop_grace_period != Service.stop_grace_period:
        argv += ["--stop-timeout", str(grace_seconds(service))]
    argv += ["--init"] if service.init else []
    argv += ["--read-only"] if service.read_only else []
    argv += [arg for cap in service.cap_add for arg in ("--cap-add", cap)]
    argv += [arg for cap in service.cap_drop for arg in ("--cap-drop", cap)]
    argv += [arg for limit in service.ulimits for arg in ("--ulimit", str(limit))]
    if service.log is not None:
        argv += ["--log-driver", service.log.driver] if service.log.driver else []
        argv += [arg for k, v in service.log.options for arg in ("--log-opt", f"{k}={v}")]
    argv += [arg for name, ip in service.extra_hosts for arg in ("--add-host", f"{name}:{ip}")]
    argv += [arg for server in service.dns for arg in ("--dns", server)]
    argv += [arg for key, value in service.sysctls for arg in ("--sysctl", f"{key}={value}")]
    argv += [arg for device in service.devices for arg in ("--device", device)]
    argv += ["--privileged"] if service.privileged else []
    argv += ["--shm-size", str(service.shm_size)] if service.shm_size else []
    argv += [arg for mount in service.tmpfs for arg in ("--tmpfs", mount)]
    argv += ["--pids-limit", str(service.pids_limit)] if service.pids_limit else []
    return argv


def gpus_args(ids: Sequence[str]) -> list[str]:
    """The GPUs a task is given, by device id, as Docker documents them for NVIDIA's
    runtime (`--gpus '"device=0,2"'`: the value is CSV, so several ids are quoted), with
    the label that records them (`minidock.gpus`: the ids stay held while the task lives,
    and a restart of it keeps them)."""
    if not ids:
        return []
    joined = ",".join(operand(i, "GPU device id") for i in ids)
    value = f"device={joined}" if len(ids) == 1 else f'"device={joined}"'
    return ["--label", f"{LABEL_GPUS}={joined}", "--gpus", value]


def _entrypoint_args(service: Service) -> list[str]:
    """The entrypoint's arguments after its first word: docker's --entrypoint takes one
    executable, so the rest lead the command (as the exec form would run them)."""
    return list(service.entrypoint[1:]) if service.entrypoint else []


def grace_seconds(service: Service) -> int:
    """The service's stop grace period in whole seconds (docker stop -t counts in seconds)."""
    return math.ceil(service.stop_grace_period)


def start_argv(id: str) -> list[str]:
    """Start a created or stopped container (by id or name)."""
    return ["docker", "start", operand(id, "container")]


# each id's health check, once; a check's own verdict is the engine's (ps shows it next)
_HEALTH_CHECKS = 'for c in "$@"; do docker healthcheck run "$c" >/dev/null 2>&1; done; true'


def health_checks_argv(ids: Sequence[str]) -> list[str]:
    """Run each container's health check once, in one command: Podman's `healthcheck run`
    (`podman-docker`'s docker is podman), for a Podman host with no systemd timer to run
    them (docs/hosts.md). Always exits 0: the checks' verdicts are read by the next probe."""
    return ["sh", "-c", _HEALTH_CHECKS, "sh", *(operand(c, "container") for c in ids)]


def stop_argv(name_or_id: str, timeout_s: int = 10) -> list[str]:
    """Stop gracefully: SIGTERM, then SIGKILL after timeout_s seconds."""
    return ["docker", "stop", "-t", str(int(timeout_s)), operand(name_or_id, "container")]


def rm_argv(ids: Sequence[str], force: bool = False) -> list[str]:
    """Remove containers (by id or name); force also kills a running one."""
    flags = ["-f"] if force else []
    return ["docker", "rm", *flags, *(operand(c, "container") for c in ids)]


def logs_argv(id: str, tail: int = 20) -> list[str]:
    """The last `tail` lines of a container's output (stdout and stderr); redact them."""
    return ["docker", "logs", "--tail", str(int(tail)), operand(id, "container")]


def image_present_argv(image: str) -> list[str]:
    """Exit 0 (printing the image id) when the image is on the host, non-zero when not."""
    return ["docker", "image", "inspect", "--format", "{{.Id}}", operand(image, "image")]


def pull_argv(image: str) -> list[str]:
    """Pull an image from its registry onto the host."""
    return ["docker", "pull", operand(image, "image")]


def login_argv(registry: str, username: str) -> list[str]:
    """Log the host's docker in to a registry; the password goes on stdin, never in argv."""
    user = operand(username, "registry user")
    return [
        "docker",
        "login",
        "--username",
        user,
        "--password-stdin",
        operand(registry, "registry"),
    ]


def created_argv(run: Sequence[str]) -> list[str]:
    """A `run_argv` as `docker create`: the same task, made but not started, so that its
    extra networks are connected before its command starts."""
    if list(run[:3]) != ["docker", "run", "-d"]:
        raise ValueError(f"not a run_argv: {list(run[:3])}")
    return ["docker", "create", *run[3:]]


# -- networks ---------------------------------------------------------------------------------
def network_owner_argv(network: str) -> list[str]:
    """Print the network's minidock.cluster label (empty when it has none); fails when the
    network does not exist on the host."""
    fmt = f'{{{{index .Labels "{LABEL_CLUSTER}"}}}}'
    return ["docker", "network", "inspect", "--format", fmt, operand(network, "network")]


def network_create_argv(network: str, cluster: str) -> list[str]:
    """Create the cluster's user-defined bridge network, labelled as the cluster's."""
    return [
        "docker",
        "network",
        "create",
        "--driver",
        "bridge",
        "--label",
        f"{LABEL_CLUSTER}={cluster}",
        operand(network, "network"),
    ]


def network_connect_argv(network: str, container: str, alias: str) -> list[str]:
    """Join a container to one more network, reachable there as `alias` too."""
    return [
        "docker",
        "network",
        "connect",
        "--alias",
        alias,
        operand(network, "network"),
        operand(container, "container"),
    ]


# -- images without a registry: docker save on the controller, docker load on a host -----------
def image_id_size_argv(image: str) -> list[str]:
    """Print "ID SIZE" of a local image (exit non-zero when it is missing)."""
    return ["docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", operand(image, "image")]


def build_argv(build: Build) -> list[str]:
    """`docker build` of a service's image on the controller, tagged by content (and with
    the name the file gave, when it gave one); the context is the last operand."""
    argv = ["docker", "build", "--file", build.dockerfile, "--tag", operand(build.tag, "image")]
    if build.also is not None:
        argv += ["--tag", operand(build.also, "image")]
    for key, value in build.args:
        argv += ["--build-arg", f"{key}={value}"]
    if build.target is not None:
        argv += ["--target", operand(build.target, "build target")]
    for key, value in build.labels:
        argv += ["--label", f"{key}={value}"]
    return [*argv, "--", build.context]


def engine_version_argv() -> list[str]:
    """Print the controller's Docker engine version (exit non-zero when none answers)."""
    return ["docker", "version", "--format", "{{.Server.Version}}"]


def save_argv(image: str) -> list[str]:
    """Write an image as a tar stream on stdout (run on the controller)."""
    return ["docker", "save", operand(image, "image")]


def load_argv() -> list[str]:
    """Read an image tar stream from stdin into the host's engine."""
    return ["docker", "load", "--quiet"]


# -- operator commands ------------------------------------------------------------------------
def task_logs_argv(
    id: str, *, tail: int | None = None, since: float | None = None, follow: bool = False
) -> list[str]:
    """A task's output (stdout and stderr as the task wrote them), optionally only the last
    `tail` lines or those of the last `since` seconds, and with `follow` as it comes."""
    argv = ["docker", "logs"]
    argv += ["--follow"] if follow else []
    argv += ["--tail", str(int(tail))] if tail is not None else []
    argv += ["--since", docker_duration(since)] if since is not None else []
    return [*argv, operand(id, "container")]


def exec_argv(
    id: str, command: Sequence[str], *, interactive: bool = False, tty: bool = False
) -> list[str]:
    """Run a command in a running task; `interactive` keeps stdin open, `tty` gives a PTY."""
    if not command:
        raise ValueError("exec needs a command")
    flags = ["-i"] if interactive else []
    flags += ["-t"] if tty else []
    return ["docker", "exec", *flags, operand(id, "container"), *command]


def verify_argv(
    name: str, image: str, volumes: Sequence[tuple[str, str]], command: Sequence[str]
) -> list[str]:
    """`docker run --rm` of a restore drill (`backup.verify`): a throwaway container of the
    service's image, on no network and with no minidock label (no pass, route or name
    proxy counts it), each throwaway volume mounted where the task mounts it, running
    exactly `command` (its first word as the entrypoint, the image's own bypassed)."""
    if not command:
        raise ValueError("a drill needs a command")
    argv = ["docker", "run", "--rm", "--name", operand(name, "container"), "--network", "none"]
    for volume, target in volumes:
        if not target.startswith("/") or "," in target:
            raise ValueError(f"invalid volume target: {target!r}")
        argv += ["--mount", f"type=volume,source={operand(volume, 'volume')},target={target}"]
    return [*argv, "--entrypoint", command[0], operand(image, "image"), *command[1:]]
