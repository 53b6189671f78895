"""A Compose service's keys: which MiniDock honours (and as what), which it ignores with a
warning because they change nothing it could do otherwise, and which it refuses."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from minidock.spec.compose import configs, deploy, lifecycle, mounts, runopts, secrets
from minidock.spec.compose.context import Context
from minidock.spec.compose.service_base import Service, TopLevel
from minidock.spec.compose.yamldoc import YDict
from minidock.spec.reading import shipped_schema

__all__ = ["COMPOSE_SERVICE_KEYS", "IGNORED", "REFUSED", "translate_service"]

# Read by the builders below.
HONOURED = (
    "image", "build", "command", "entrypoint", "environment", "env_file", "ports", "expose",
    "volumes", "networks", "depends_on", "healthcheck", "restart", "labels", "user",
    "working_dir", "cap_add", "cap_drop", "ulimits", "logging", "extra_hosts", "dns", "init",
    "read_only", "stop_signal", "stop_grace_period", "deploy", "scale", "cpus", "mem_limit",
    "mem_reservation", "profiles", "links", "pull_policy", "secrets", "configs", "sysctls",
    "privileged", "devices", "gpus", "tmpfs", "shm_size", "pids_limit",
)  # fmt: skip

# Ignored, with a warning: they change nothing MiniDock could do otherwise.
IGNORED = {
    "platform": "ignored: each host pulls the image for its own platform",
    "tty": "ignored: tasks run without a terminal (minidock exec -it gives one)",
    "stdin_open": "ignored: tasks run without stdin (minidock exec -it gives one)",
    "attach": "ignored: minidock logs SERVICE reads a service's output",
    "develop": "ignored: it is for docker compose watch on a workstation",
    "pull_refresh_after": "ignored: hosts pull an image only when they lack it",
    # cannot apply to a replicated task: each names what MiniDock does instead
    "container_name": "ignored: a fixed name cannot apply to replicas; MiniDock names each "
    "task SERVICE.SLOT.TASKID, and tasks reach each other by service name",
    "hostname": "ignored: one hostname cannot apply to replicas; each task's hostname is "
    "its container ID, and tasks reach each other by service name",
    "domainname": "ignored: tasks reach each other by service name on the cluster's network",
    "mac_address": "ignored: one MAC address cannot apply to replicas; Docker gives each "
    "task its own",
}

_REMOVE = "not supported by MiniDock: remove it"
# Refused, each with what to do instead.
REFUSED = {
    "network_mode": "every task runs on its cluster's network (minidock-CLUSTER), which its "
    "names and published ports need: remove it; join existing networks with networks "
    "(external: true)",
    "external_links": "not supported: publish the other container's port and use its host's "
    "address, or an external network",
    "extends": "not supported: share settings with YAML anchors and merge keys "
    "(x-base: &base ..., then <<: *base)",
    "volumes_from": "not supported: mount the same named volume or bind mount instead",
    "device_cgroup_rules": _REMOVE,
    "security_opt": _REMOVE,
    "pid": _REMOVE,
    "ipc": _REMOVE,
    "uts": _REMOVE,
    "userns_mode": _REMOVE,
    "cgroup": _REMOVE,
    "cgroup_parent": _REMOVE,
    "isolation": _REMOVE,
    "group_add": "not supported: give user as UID:GID, or remove it",
    "oom_kill_disable": _REMOVE,
    "oom_score_adj": _REMOVE,
    "runtime": "another container runtime is not supported: tasks run on each host's default "
    "runtime (runc); remove it",
    "storage_opt": _REMOVE,
    "dns_opt": _REMOVE,
    "dns_search": "not supported: write full names, or add them with extra_hosts",
    "annotations": _REMOVE,
    "credential_spec": _REMOVE,
    "blkio_config": _REMOVE,
    "cpu_count": "use deploy.resources.limits.cpus",
    "cpu_percent": "use deploy.resources.limits.cpus",
    "cpu_period": "use deploy.resources.limits.cpus",
    "cpu_quota": "use deploy.resources.limits.cpus",
    "cpu_rt_period": _REMOVE,
    "cpu_rt_runtime": _REMOVE,
    "cpu_shares": "use deploy.resources.limits.cpus",
    "cpuset": _REMOVE,
    "mem_swappiness": _REMOVE,
    "memswap_limit": "use deploy.resources.limits.memory (tasks get no extra swap limit)",
    "label_file": "not supported: write the labels under labels",
    "models": _REMOVE,
    "provider": _REMOVE,
    "post_start": _REMOVE,
    "pre_start": _REMOVE,
    "pre_stop": "not supported: give the task a stop_signal and stop_grace_period",
    "use_api_socket": _REMOVE,
}

COMPOSE_SERVICE_KEYS = (*HONOURED, *IGNORED, *REFUSED)

_BUILDERS: tuple[Callable[[Service], None], ...] = (
    runopts.image,
    runopts.commands,
    runopts.environment,
    mounts.ports,
    runopts.expose,
    mounts.volumes,
    mounts.networks,
    lifecycle.depends_on,
    lifecycle.healthcheck,
    lifecycle.restart,
    runopts.labels,
    runopts.run_options,
    runopts.links,
    deploy.deploy,
    deploy.resources,
    secrets.service_secrets,
    configs.service_configs,
)


def translate_service(ctx: Context, name: str, body: YDict, top: TopLevel) -> dict[str, object]:
    """The TOML service table for Compose service `name`, or the error about its first
    key MiniDock cannot honour."""
    s = Service(ctx, name, body, top)
    for key in body:
        where = (*s.at, key)
        if not isinstance(key, str) or key.startswith("x-") or key in HONOURED:
            continue
        if key in IGNORED:
            ctx.warn(where, IGNORED[key])
        elif key in REFUSED:
            raise ctx.fail(where, REFUSED[key])
        else:
            close = difflib.get_close_matches(key, COMPOSE_SERVICE_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ctx.fail(where, f"unknown Compose key {key!r}{hint}")
    for build in _BUILDERS:
        build(s)
    runopts.extension(s)
    order = {
        key: i for i, key in enumerate(shipped_schema("cluster")["$defs"]["service"]["properties"])
    }
    return dict(sorted(s.out.items(), key=lambda kv: order.get(kv[0], len(order))))
