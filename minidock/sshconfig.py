"""The OpenSSH client config (`~/.ssh/config`) as it applies to inventory hosts.

OpenSSH's rule, with the inventory in the place of the command line: a value the inventory
gives (the host's own or its `[defaults]`) wins, the config fills in what it leaves out,
then MiniDock's defaults apply. A host is looked up under its `address` (else its `name`),
matched against `Host` and `Match` blocks as `ssh ADDRESS` would be; `HostName` then says
where to connect. `ProxyJump` chains become `Jump` hops, each jump host looked up under its
own alias. asyncssh's parser reads the files (Host, Match, Include, %-tokens); this module
takes the keywords MiniDock uses (`KEYWORDS`) and refuses the ones that would change what
it verifies. docs/ssh.md, "SSH config, jump hosts and the agent", is the reference.
"""

from __future__ import annotations

import getpass
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import asyncssh
from asyncssh.config import SSHClientConfig, SSHConfig

from minidock.model import HostKeyPolicy, Jump

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILES",
    "KEYWORDS",
    "MAX_HOPS",
    "Given",
    "SSHConfigError",
    "check_proxy_jump",
    "config_files",
    "key_problem",
    "resolve",
]

CONFIG_ENV = "MINIDOCK_SSH_CONFIG"
DEFAULT_CONFIG_FILES = ("~/.ssh/config", "/etc/ssh/ssh_config")  # OpenSSH's, in its order
MAX_HOPS = 8  # jump hosts on one route: more means a ProxyJump loop
DEFAULT_USER = "root"  # MiniDock's default login, for hosts and jump hosts alike
KEYWORDS = (
    "HostName", "Port", "User", "IdentityFile", "IdentitiesOnly", "IdentityAgent",
    "ProxyJump", "UserKnownHostsFile", "StrictHostKeyChecking", "ConnectTimeout",
)  # fmt: skip
_POLICIES: dict[str, HostKeyPolicy] = {
    "yes": "strict",
    "ask": "strict",  # nobody to ask: an unattended controller refuses, as ssh -o BatchMode
    "accept-new": "accept-new",
    "no": "accept-new",  # its safe half: learn unknown hosts, still refuse changed keys
    "off": "accept-new",
}
_UNSET = object()


class SSHConfigError(ValueError):
    """An SSH config or ProxyJump problem, in one line."""


class _ClientConfig(SSHClientConfig):
    """asyncssh's client config parser, also keeping StrictHostKeyChecking (which asyncssh
    itself does not read)."""

    _handlers = {  # noqa: RUF012 (asyncssh declares it so; it is never mutated)
        **SSHClientConfig._handlers,
        "stricthostkeychecking": ("StrictHostKeyChecking", SSHConfig._set_string),
    }


@dataclass(frozen=True)
class Given:
    """What the inventory says about one host's connection; None where it says nothing.

    `alias` is what the config is looked up under: the host's address, else its name.
    """

    alias: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    host_key_policy: HostKeyPolicy | None = None
    connect_timeout: float | None = None
    proxy_jump: str | None = None


def config_files(setting: str | None) -> tuple[str, ...]:
    """The config files to read, first match wins: the inventory's `ssh_config` when set,
    else $MINIDOCK_SSH_CONFIG, else OpenSSH's own (`DEFAULT_CONFIG_FILES`, those present).
    "none" reads no file (as `ssh -F none`); a named file must exist."""
    named = setting if setting is not None else os.environ.get(CONFIG_ENV) or None
    if named is None:
        found = (os.path.expanduser(p) for p in DEFAULT_CONFIG_FILES)
        files = tuple(p for p in found if os.path.isfile(p) and os.access(p, os.R_OK))
    elif named.lower() == "none":
        return ()
    else:
        files = (os.path.expanduser(named),)
        if not os.path.isfile(files[0]):
            raise SSHConfigError(f"ssh config file {files[0]} not found")
    for path in files:
        _check_config_file(path)
    return files


def _check_config_file(path: str) -> None:
    """OpenSSH refuses a config file that someone else could have written."""
    info = os.stat(path)
    if info.st_mode & 0o022 or info.st_uid not in (0, os.getuid()):
        raise SSHConfigError(
            f"bad owner or permissions on ssh config file {path} (OpenSSH refuses it too): "
            f"run chmod go-w {path}"
        )


def key_problem(path: str) -> str | None:
    """Why a private key must not be used (group or others may read or write it, which
    OpenSSH refuses as an "UNPROTECTED PRIVATE KEY FILE"), or None; a missing file is not
    this check's business."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read private key {path}: {exc.strerror or exc}"
    if mode & 0o077:
        return (
            f"private key {path} is accessible by group or others (mode {mode:04o}): "
            f"run chmod 600 {path}"
        )
    return None


def resolve(given: Given, files: Sequence[str]) -> dict[str, Any]:
    """A host's connection settings, as `Host` keyword arguments: the inventory's values,
    filled in from the config for `given.alias`; keys neither sets are left out (the
    model's defaults apply). SSHConfigError for a config MiniDock cannot honour."""
    config = _lookup(files, given.alias, given.user, given.port)
    found: dict[str, Any] = {"address": _text(config, "Hostname") or given.alias}
    if (user := _text(config, "User")) is not None:
        found["user"] = user
    if (port := config.get("Port")) is not None:
        found["port"] = _port(port, given.alias)
    if given.identity_file is not None:
        found["identity_file"] = given.identity_file
    else:
        found |= _auth(config, given.alias)
    known_hosts = given.known_hosts or _known_hosts(config, given.alias)
    if known_hosts is not None:
        found["known_hosts"] = known_hosts
    policy = given.host_key_policy or _policy(config, given.alias)
    if policy is not None:
        found["host_key_policy"] = policy
    timeout = config.get("ConnectTimeout")
    if given.connect_timeout is None and isinstance(timeout, int) and timeout > 0:
        found["connect_timeout"] = float(timeout)
    found["proxy_jump"] = _route(given, config, files)
    return found


def _route(given: Given, config: SSHConfig, files: Sequence[str]) -> tuple[Jump, ...]:
    """The jump hosts to the host: the inventory's proxy_jump, else the config's ProxyJump
    (a ProxyCommand is refused: MiniDock cannot verify what a command connects to)."""
    spec = given.proxy_jump if given.proxy_jump is not None else _text(config, "ProxyJump")
    if spec is None and _text(config, "ProxyCommand") is not None:
        raise SSHConfigError(
            f"the ssh config sets ProxyCommand for {given.alias}, which MiniDock does not "
            "run: use ProxyJump (or proxy_jump in the inventory)"
        )
    return _chain(spec, files, given, depth=0)


def _chain(spec: str | None, files: Sequence[str], given: Given, depth: int) -> tuple[Jump, ...]:
    """The hops of one ProxyJump value ("a,b" or "none"). As in OpenSSH, the first hop is
    reached by its own config (its own ProxyJump included); the others only through it."""
    if spec is None or spec.strip().lower() == "none":
        return ()
    first, *rest = (hop.strip() for hop in spec.split(","))
    hops = [*_reach(first, files, given, depth + 1)]
    hops += [_jump(hop, files, given)[1] for hop in rest]
    if depth + len(hops) > MAX_HOPS:
        raise SSHConfigError(
            f"ProxyJump to {given.alias} goes through more than {MAX_HOPS} jump hosts "
            "(a ProxyJump loop in the ssh config?)"
        )
    return tuple(hops)


def _reach(hop: str, files: Sequence[str], given: Given, depth: int) -> tuple[Jump, ...]:
    """A first hop and, before it, whatever its own ProxyJump names."""
    if depth > MAX_HOPS:
        raise SSHConfigError(
            f"ProxyJump to {given.alias} goes through more than {MAX_HOPS} jump hosts "
            "(a ProxyJump loop in the ssh config?)"
        )
    config, jump = _jump(hop, files, given)
    return (*_chain(_text(config, "ProxyJump"), files, given, depth), jump)


def _jump(hop: str, files: Sequence[str], given: Given) -> tuple[SSHConfig, Jump]:
    """One jump host: `[user@]host[:port]` (or `ssh://...`), looked up in the config under
    `host`. The inventory's known_hosts, host_key_policy and (when the config names no
    IdentityFile for it) identity_file apply to it too."""
    user, alias, port = _parse_hop(hop, given.alias)
    config = _lookup(files, alias, user, port)
    auth = _auth(config, alias)
    if not auth["identity_files"] and given.identity_file is not None:
        auth["identity_files"] = (given.identity_file,)
    jump = Jump(
        address=_text(config, "Hostname") or alias,
        port=_port(config.get("Port", 22), alias),
        user=_text(config, "User") or DEFAULT_USER,
        known_hosts=given.known_hosts or _known_hosts(config, alias),
        host_key_policy=given.host_key_policy or _policy(config, alias) or "strict",
        **auth,
    )
    return config, jump


def check_proxy_jump(spec: str) -> None:
    """SSHConfigError unless `spec` is a ProxyJump value: "none", or comma-separated hops
    `[user@]host[:port]`."""
    if spec.strip().lower() != "none":
        for hop in spec.split(","):
            _parse_hop(hop.strip(), None)


def _parse_hop(hop: str, target: str | None) -> tuple[str | None, str, int | None]:
    """(user, host, port) of one ProxyJump hop, by OpenSSH's `[user@]host[:port]` or
    `ssh://[user@]host[:port]` (IPv6 in brackets)."""
    try:
        parts = urlsplit(hop if hop.startswith("ssh://") else f"ssh://{hop}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or not parts.hostname or parts.password is not None or parts.path:
        where = f" on the way to {target}" if target else ""
        raise SSHConfigError(
            f"invalid ProxyJump hop {hop!r}{where}: use [user@]host[:port], comma-separated"
        )
    return parts.username or None, parts.hostname, port


def _lookup(files: Sequence[str], alias: str, user: str | None, port: int | None) -> SSHConfig:
    """The config as it applies to `ssh [-l user] [-p port] alias` (a `Match final` block
    gets the second pass OpenSSH gives it)."""
    args = (getpass.getuser(), user if user is not None else (), alias, port or ())
    try:
        config = _ClientConfig.load(None, list(files), False, False, False, *args)
        if config.has_match_final():
            config = _ClientConfig.load(config, list(files), True, False, True, *args)
    except (ValueError, asyncssh.Error, OSError) as exc:
        raise SSHConfigError(f"ssh config for {alias}: {_message(exc)}") from None
    return config


def _message(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.Error):
        return exc.reason
    if isinstance(exc, OSError):
        return f"{exc.filename or ''} {exc.strerror or exc}".strip()
    return str(exc)


def _text(config: SSHConfig, option: str) -> str | None:
    value = config.get(option)
    return value if isinstance(value, str) else None


def _port(value: object, alias: str) -> int:
    if not isinstance(value, int) or not 1 <= value <= 65535:
        raise SSHConfigError(f"ssh config for {alias}: Port {value} is not in 1..65535")
    return value


def _auth(config: SSHConfig, alias: str) -> dict[str, Any]:
    """identity_files, identities_only and identity_agent from the config."""
    files = cast(list[str], config.get("IdentityFile", []))
    keys = tuple(os.path.expanduser(f) for f in files)
    for key in keys:
        if (problem := key_problem(key)) is not None:
            raise SSHConfigError(f"ssh config for {alias}: IdentityFile {problem}")
    return {
        "identity_files": keys,
        "identities_only": bool(config.get("IdentitiesOnly", False)),
        "identity_agent": _agent(config.get("IdentityAgent", _UNSET), alias),
    }


def _agent(value: object, alias: str) -> str | None:
    """IdentityAgent as OpenSSH reads it: "none" (asyncssh's None) for no agent,
    SSH_AUTH_SOCK or unset for $SSH_AUTH_SOCK (None here), "$VAR" for another variable."""
    if value is _UNSET or value == "SSH_AUTH_SOCK":
        return None
    if value is None:
        return "none"
    text = str(value)
    if text.startswith("$"):
        socket_path = os.environ.get(text[1:])
        if not socket_path:
            raise SSHConfigError(f"ssh config for {alias}: IdentityAgent {text} is not set")
        text = socket_path
    return os.path.expanduser(text)


def _known_hosts(config: SSHConfig, alias: str) -> str | None:
    """The first UserKnownHostsFile; `none` is refused (MiniDock always verifies keys)."""
    files = config.get("UserKnownHostsFile")
    if files is None:
        return None
    names = cast(list[str], files)
    if not names:
        raise SSHConfigError(
            f"ssh config for {alias}: UserKnownHostsFile none would leave host keys "
            "unverified, which MiniDock never does: name a file"
        )
    return os.path.expanduser(names[0])


def _policy(config: SSHConfig, alias: str) -> HostKeyPolicy | None:
    value = _text(config, "StrictHostKeyChecking")
    if value is None:
        return None
    policy = _POLICIES.get(value.lower())
    if policy is None:
        raise SSHConfigError(
            f"ssh config for {alias}: StrictHostKeyChecking {value!r} is not one of "
            "yes, accept-new, no, ask"
        )
    return policy
