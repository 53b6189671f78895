"""The name proxies' HAProxy configs as values (draft, issue 23; docs/discovery.md). Pure.

One proxy per (host, exposed service): a container on the cluster's network under the
service's name (its network alias), so `SERVICE:PORT` from any task on that host reaches
it; it forwards each exposed port, in TCP mode, to the service's endpoints on every host
(`minidock.core.endpoints`). The config is one text whose first line carries its digest, so
a pass compares digests and loads a proxy only where they differ. A connection that cannot
be made to one endpoint is retried on another (`retries`, `option redispatch`): the TCP
counterpart of the ingress's retries; active TCP checks take a dead endpoint out between
passes.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass

from minidock.core.endpoints import Endpoints
from minidock.model import NameProxy, cluster_network

__all__ = [
    "DIGEST_PREFIX",
    "LABEL_NAMES",
    "NAMES_IMAGE",
    "NameProxy",
    "NameProxyConfig",
    "check_argv",
    "config_tar",
    "copy_argv",
    "name_proxy_config",
    "name_proxy_name",
    "names_probe_argv",
    "parse_digest",
    "parse_names_probe",
    "reload_argv",
    "remove_argv",
    "run_argv",
    "stop_argv",
]

# The name proxies' image: HAProxy 2.6 under the official image's name and config path
# (the lab loads its own build of Debian's haproxy under it: minidock.lab.images).
NAMES_IMAGE = "haproxy:2.6"
LABEL_NAMES = "minidock.names"  # CLUSTER: a name proxy of that cluster (never a task)
LABEL_NAMES_SERVICE = "minidock.names.service"

# Seconds a removed name proxy has to finish the connections under way (HAProxy's soft
# stop) before docker kills it: as long as a task's default stop_grace_period.
STOP_GRACE = 10
DIGEST_PREFIX = "# minidock-names "
CONFIG_PATH = "/usr/local/etc/haproxy/haproxy.cfg"  # the official image's path

_HEAD = """\
global
    master-worker
    stats socket /var/run/haproxy.sock mode 600 level admin expose-fd listeners
defaults
    mode tcp
    timeout connect 1s
    timeout client 1h
    timeout server 1h
    retries 3
    option redispatch
    default-server inter 2s fall 2 rise 1
"""


@dataclass(frozen=True)
class NameProxyConfig:
    """The whole config of one service's name proxy, and its digest."""

    service: str
    text: str

    @property
    def digest(self) -> str:
        return self.text.splitlines()[0].removeprefix(DIGEST_PREFIX)


def name_proxy_config(service: str, endpoints: Sequence[Endpoints]) -> NameProxyConfig:
    """The config that forwards each exposed port of `service` to its endpoints (a port
    without one refuses connections at once: HAProxy has no server to send them to)."""
    body = [_HEAD]
    for entry in sorted((e for e in endpoints if e.service == service), key=lambda e: e.port):
        body.append(f"frontend port_{entry.port}\n    bind :{entry.port}\n")
        body.append(f"    default_backend port_{entry.port}\n")
        body.append(f"backend port_{entry.port}\n    balance roundrobin\n")
        for task, address in sorted(zip(entry.tasks, entry.upstreams, strict=True)):
            body.append(f"    server {task} {address} check\n")
    text = "".join(body)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return NameProxyConfig(service, f"{DIGEST_PREFIX}{digest}\n{text}")


def parse_digest(config_text: str) -> str | None:
    """The digest a loaded config says it has (None: not one of MiniDock's)."""
    first = config_text.partition("\n")[0]
    return first.removeprefix(DIGEST_PREFIX) if first.startswith(DIGEST_PREFIX) else None


# -- the proxy container ----------------------------------------------------------------------
def name_proxy_name(cluster: str, service: str) -> str:
    return f"minidock-names-{cluster}-{service}"


def run_argv(cluster: str, service: str, image: str) -> list[str]:
    """Start a service's name proxy on the cluster's network under the service's name,
    restarted by docker between passes: HAProxy in master-worker mode on an empty config
    until a pass loads its first one (as root, so the same argv runs the official image,
    whose user could not replace its config). `docker stop` sends SIGUSR1, the master's
    soft stop (the official image's STOPSIGNAL): the listeners close, the connections under
    way are served to their end, then HAProxy exits."""
    start = 'mkdir -p "${1%/*}"; [ -f "$1" ] || echo global > "$1"; exec haproxy -W -db -f "$1"'
    return [
        "docker", "run", "-d",
        "--name", name_proxy_name(cluster, service),
        "--label", f"{LABEL_NAMES}={cluster}",
        "--label", f"{LABEL_NAMES_SERVICE}={service}",
        "--network", cluster_network(cluster),
        "--network-alias", service,
        "--restart", "unless-stopped",
        "--stop-signal", "USR1",
        "--user", "0",
        "--entrypoint", "sh",
        image, "-c", start, "sh", CONFIG_PATH,
    ]  # fmt: skip


def stop_argv(cluster: str, service: str) -> list[str]:
    """Stop a name proxy gracefully before it is removed (`run_argv`'s stop signal; docker
    kills it after STOP_GRACE; one an older MiniDock started stops on SIGTERM, at once)."""
    return ["docker", "stop", "--time", str(STOP_GRACE), name_proxy_name(cluster, service)]


def remove_argv(cluster: str, service: str) -> list[str]:
    return ["docker", "rm", "-f", name_proxy_name(cluster, service)]


def config_tar(config: NameProxyConfig) -> str:
    """The config as a one-file tar stream (text, as `commands.secret_files_tar`)."""
    data = config.text.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(CONFIG_PATH.lstrip("/") + ".new")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue().decode("utf-8")


def copy_argv(cluster: str, service: str) -> list[str]:
    """Copy `config_tar` (stdin) into the running proxy, beside its config."""
    return ["docker", "cp", "-", f"{name_proxy_name(cluster, service)}:/"]


def check_argv(cluster: str, service: str) -> list[str]:
    """Check the copied config, and put it in place only when HAProxy takes it."""
    new = CONFIG_PATH + ".new"
    return [
        "docker", "exec", name_proxy_name(cluster, service), "sh", "-c",
        'haproxy -c -q -f "$1" && mv -f "$1" "$2"', "sh", new, CONFIG_PATH,
    ]  # fmt: skip


def reload_argv(cluster: str, service: str) -> list[str]:
    """HAProxy's master-worker reload: the listening sockets go to the new worker."""
    return ["docker", "kill", "--signal", "USR2", name_proxy_name(cluster, service)]


_PROBE = (
    (
        "set -u\n"
        "docker ps -a --filter label=LABEL=\"$1\" --format '{{.Names}} {{.State}}' |\n"
        "while read -r name state; do\n"
        '  echo "== $name $state"\n'
        '  [ "$state" = running ] && docker exec "$name" cat CONFIG 2>/dev/null\n'
        "done\n"
        "true\n"
    )
    .replace("LABEL", LABEL_NAMES)
    .replace("CONFIG", CONFIG_PATH)
)


def names_probe_argv(cluster: str) -> list[str]:
    """One command: each of the cluster's name proxies on the host (name and state), then
    the config a running one has."""
    return ["sh", "-c", _PROBE, "sh", cluster]


def parse_names_probe(cluster: str, stdout: str) -> dict[str, NameProxy]:
    """What `names_probe_argv` printed: each name proxy by its service, with the servers
    of each backend (`port_PORT`) of its loaded config."""
    found: dict[str, NameProxy] = {}
    prefix = name_proxy_name(cluster, "")
    for block in stdout.split("== ")[1:]:
        head, _, config = block.partition("\n")
        name, _, state = head.partition(" ")
        if not name.startswith(prefix):
            continue
        service = name.removeprefix(prefix)
        digest = parse_digest(config) or ""
        found[service] = NameProxy(service, state == "running", digest, _servers(config))
    return found


def _servers(config: str) -> tuple[tuple[int, str, str], ...]:
    servers: list[tuple[int, str, str]] = []
    port = 0
    for line in config.splitlines():
        words = line.split()
        if words[:1] == ["backend"] and len(words) == 2 and words[1].startswith("port_"):
            port = int(words[1].removeprefix("port_") or 0) if words[1][5:].isdigit() else 0
        elif words[:1] == ["server"] and len(words) >= 3 and port:
            servers.append((port, words[1], words[2]))
    return tuple(servers)
