"""The inventory file into the model: hosts, their SSH settings and [defaults]."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minidock import sshconfig, units
from minidock.model import Host, Inventory
from minidock.spec.backup import backup_defaults
from minidock.spec.errors import Fail, Part, SpecError, StrPath
from minidock.spec.messages import render, show
from minidock.spec.reading import check_schema, read_toml, resolve

__all__ = ["load_inventory", "read_inventory"]


def load_inventory(path: StrPath) -> Inventory:
    """Read, validate and convert an inventory file; host paths resolve beside it."""
    return read_inventory(Path(path), os.fspath(path))


_PATH_KEYS = ("identity_file", "known_hosts")
_DURATION_KEYS = ("connect_timeout", "command_timeout", "probe_timeout", "keepalive_interval")


def read_inventory(path: Path, display: str) -> Inventory:
    """The inventory at `path`, named `display` in messages."""
    doc = read_toml(path, display)
    check_schema("inventory", doc, display)
    return _build_inventory(doc, os.path.abspath(path), display)


def _build_inventory(doc: dict[str, Any], abs_path: str, display: str) -> Inventory:
    def fail(parts: Sequence[Part], message: str) -> SpecError:
        return SpecError(display, render(parts), message)

    base = os.path.dirname(abs_path)
    defaults: dict[str, Any] = doc.get("defaults", {})
    sections: list[tuple[tuple[Part, ...], dict[str, Any]]] = [(("defaults",), defaults)]
    sections += [(("hosts", i), h) for i, h in enumerate(doc["hosts"])]
    for where, section in sections:
        for key in _DURATION_KEYS:
            if key in section and units.parse_duration(section[key]) <= 0:
                raise fail((*where, key), f"must be greater than 0, got {show(section[key])}")
        if "proxy_jump" in section:
            try:
                sshconfig.check_proxy_jump(section["proxy_jump"])
            except sshconfig.SSHConfigError as exc:
                raise fail((*where, "proxy_jump"), str(exc)) from None

    _check_identity_files(sections, base, fail)
    configs = _SSHConfigs(base, defaults, fail)
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(doc["hosts"]):
        name: str = entry["name"]
        if name in seen:
            raise fail(
                ("hosts", i, "name"), f"duplicate host name {name!r} (also hosts[{seen[name]}])"
            )
        seen[name] = i
        try:
            hosts.append(_build_host(entry, {**defaults, **entry}, base, configs.files(i, entry)))
        except sshconfig.SSHConfigError as exc:
            raise fail(("hosts", i), str(exc)) from None
    fraction = float(defaults.get("max_down_fraction", Inventory.max_down_fraction))
    backup = backup_defaults(doc, fail, base, display)
    return Inventory(path=abs_path, hosts=tuple(hosts), max_down_fraction=fraction, backup=backup)


def _build_host(
    entry: dict[str, Any], merged: dict[str, Any], base: str, config_files: tuple[str, ...]
) -> Host:
    """One host: its own keys over [defaults], then the SSH config for what neither gives
    (minidock.sshconfig: the inventory is to the config what ssh's command line is)."""
    paths = {k: resolve(base, merged[k]) for k in _PATH_KEYS if k in merged}
    durations = {k: units.parse_duration(merged[k]) for k in _DURATION_KEYS if k in merged}
    given = sshconfig.Given(
        alias=entry.get("address", entry["name"]),
        user=merged.get("user"),
        port=merged.get("port"),
        identity_file=paths.get("identity_file"),
        known_hosts=paths.get("known_hosts"),
        host_key_policy=merged.get("host_key_policy"),
        connect_timeout=durations.get("connect_timeout"),
        proxy_jump=merged.get("proxy_jump"),
    )
    counts = ("down_after", "keepalive_count_max")
    kwargs: dict[str, Any] = {k: merged[k] for k in counts if k in merged}
    if "private_address" in entry:
        kwargs["private_address"] = entry["private_address"]
    if "sudo" in merged:
        kwargs["sudo"] = bool(merged["sudo"])
    kwargs |= durations | sshconfig.resolve(given, config_files)
    if "cpus" in entry:
        kwargs["cpus"] = float(entry["cpus"])
    if "memory" in entry:
        kwargs["memory"] = units.parse_size(entry["memory"])
    if "gpus" in entry:
        given = entry["gpus"]
        kwargs["gpus"] = (
            tuple(str(i) for i in range(given)) if isinstance(given, int) else tuple(given)
        )
    labels: dict[str, str] = entry.get("labels", {})
    return Host(name=entry["name"], labels=tuple(sorted(labels.items())), **kwargs)


class _SSHConfigs:
    """The SSH config files each host reads (`ssh_config`, own or [defaults], else
    $MINIDOCK_SSH_CONFIG, else OpenSSH's), checked once per distinct setting; a problem is
    the error of the key that named the file."""

    def __init__(self, base: str, defaults: dict[str, Any], fail: Fail) -> None:
        self._base = base
        self._defaults = defaults
        self._fail = fail
        self._found: dict[str | None, tuple[str, ...]] = {}

    def files(self, index: int, entry: dict[str, Any]) -> tuple[str, ...]:
        where: tuple[Part, ...] = ("hosts", index, "ssh_config")
        setting = entry.get("ssh_config")
        if setting is None:
            where, setting = ("defaults", "ssh_config"), self._defaults.get("ssh_config")
        if setting is not None and setting.lower() != "none":
            setting = resolve(self._base, setting)
        if setting not in self._found:
            try:
                self._found[setting] = sshconfig.config_files(setting)
            except sshconfig.SSHConfigError as exc:
                if setting is None:
                    where, exc = (), sshconfig.SSHConfigError(f"${sshconfig.CONFIG_ENV}: {exc}")
                raise self._fail(where, str(exc)) from None
        return self._found[setting]


def _check_identity_files(
    sections: Sequence[tuple[tuple[Part, ...], dict[str, Any]]], base: str, fail: Fail
) -> None:
    """Refuse a private key that group or others may read or write, as OpenSSH does
    ("UNPROTECTED PRIVATE KEY FILE"): checked here, before any connection. A key that does
    not exist is left to the executor, which reports it for the hosts that use it."""
    for where, section in sections:
        if "identity_file" not in section:
            continue
        problem = sshconfig.key_problem(resolve(base, section["identity_file"]))
        if problem is not None:
            raise fail((*where, "identity_file"), problem)
