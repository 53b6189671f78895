"""A service's `backup` and `hooks.before_backup`, and the inventory's `[backup]`, into
BackupPolicy and Hook values (docs/backups.md).

The checks the schema cannot express: a service with a named volume (the only data a
backup copies), not a scheduled job; a repository that is a directory (resolved beside the
file) or a URL of a backend restic speaks; a password source that reads now, is not empty
and holds no line break; a schedule croniter reads, in a known timezone; a repository and
a password, from the service or the inventory. The password's value is read to check it
and then dropped: the model keeps its source (`password_source`), read again by
`password_value` when a backup runs, so no state file or spec hash ever holds it.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from minidock import units
from minidock.model import BackupPolicy, Cluster, Hook, Inventory, Keep
from minidock.schedules import cron_problem, timezone_problem
from minidock.spec.errors import Fail, Part, SpecError
from minidock.spec.messages import show
from minidock.spec.reading import resolve
from minidock.spec.secretfiles import password_text, source_value

__all__ = [
    "BACKENDS",
    "backup_defaults",
    "backup_of",
    "before_backup_of",
    "password_value",
    "with_backup_defaults",
]

# restic's backends named by a URL prefix (restic 0.14); any other text is a directory
BACKENDS = ("local", "sftp", "rest", "s3", "b2", "azure", "gs", "swift", "rclone")
_PATH_KEYS = ("file", "age_file", "identity")  # paths of a secret source, made absolute


def backup_of(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, base: str, display: str
) -> BackupPolicy | None:
    """A service's `backup` (at `at`), or None; its repository and password may be left
    to the inventory (`with_backup_defaults`)."""
    if "backup" not in body:
        return None
    table: dict[str, Any] = body["backup"]
    where = (*at, "backup")
    _check_named_volume(body, where, fail)
    zone = table.get("timezone", "UTC")
    if "schedule" in table:
        problem = cron_problem(table["schedule"], zone)
        if problem:
            raise fail((*where, "schedule"), problem)
    elif "timezone" in table:
        raise fail((*where, "timezone"), "timezone is for a schedule: add schedule or remove it")
    if timezone_problem(zone):
        raise fail((*where, "timezone"), timezone_problem(zone))
    verify = tuple(table.get("verify", ()))
    if "verify_schedule" in table:
        if not verify:
            raise fail(
                (*where, "verify_schedule"),
                'a drill runs backup.verify: give verify = ["CMD", ...] or remove it',
            )
        problem = cron_problem(table["verify_schedule"], zone)
        if problem:
            raise fail((*where, "verify_schedule"), problem)
    return BackupPolicy(
        repository=_repository(table, where, fail, base),
        password_source=_password(table, where, fail, base, display),
        schedule=table.get("schedule"),
        timezone=zone,
        keep=Keep(**table.get("keep", {})),
        stop=table.get("stop", False),
        verify=verify,
        verify_schedule=table.get("verify_schedule"),
    )


def before_backup_of(body: dict[str, Any], at: tuple[Part, ...], fail: Fail) -> Hook | None:
    """A service's `hooks.before_backup` (at `at`, the service), or None."""
    hook = body.get("hooks", {}).get("before_backup")
    if hook is None:
        return None
    where = (*at, "hooks", "before_backup")
    _check_named_volume(body, where, fail)
    timeout = units.parse_duration(hook.get("timeout", "10m"))
    if timeout <= 0:
        raise fail((*where, "timeout"), f"must be greater than 0, got {show(hook['timeout'])}")
    return Hook(tuple(hook["command"]), timeout)


def backup_defaults(
    doc: dict[str, Any], fail: Fail, base: str, display: str
) -> BackupPolicy | None:
    """The inventory's `[backup]` (its repository and password), or None."""
    if "backup" not in doc:
        return None
    where: tuple[Part, ...] = ("backup",)
    return BackupPolicy(
        repository=_repository(doc["backup"], where, fail, base),
        password_source=_password(doc["backup"], where, fail, base, display),
    )


def with_backup_defaults(cluster: Cluster, inventory: Inventory, display: str) -> Cluster:
    """`cluster` with each service's backup completed by the inventory's `[backup]`; a
    backup left with no repository or no password is an error of the cluster file."""
    defaults = inventory.backup or BackupPolicy()
    services = []
    for s in cluster.services:
        if s.backup is not None:
            policy = replace(
                s.backup,
                repository=s.backup.repository or defaults.repository,
                password_source=s.backup.password_source or defaults.password_source,
            )
            for key, value in (("repository", "repository"), ("password", "password_source")):
                if not getattr(policy, value):
                    raise SpecError(
                        display,
                        f"services.{s.name}.backup",
                        f"no {key}: give backup.{key} here, or {key} in the inventory's "
                        f"[backup] ({os.path.basename(inventory.path)})",
                    )
            s = replace(s, backup=policy)
        services.append(s)
    return replace(cluster, services=tuple(services))


def password_value(policy: BackupPolicy) -> str:
    """The repository's password, read now from its source (raises SpecError, naming the
    file and key that gave it, when it cannot be read)."""
    found = json.loads(policy.password_source)
    file, at = found["file"], found["at"]

    def fail(parts: Any, message: str) -> SpecError:
        return SpecError(file, ".".join(str(p) for p in parts), message)

    return _read(found["source"], tuple(at.split(".")), fail, found["base"])


def _check_named_volume(body: dict[str, Any], where: tuple[Part, ...], fail: Fail) -> None:
    named = [v for v in body.get("volumes", []) if ":" in v and not v.startswith("/")]
    if not named:
        raise fail(
            where,
            'the service has no named volume to back up: give volumes = ["NAME:/path"], '
            "or remove it",
        )


def _repository(table: dict[str, Any], where: tuple[Part, ...], fail: Fail, base: str) -> str:
    """A repository as restic takes it: a backend URL as given (`local:` resolved), else a
    directory made absolute ("" when not given)."""
    text: str = table.get("repository", "")
    if not text:
        return ""
    scheme, colon, rest = text.partition(":")
    if not colon or "/" in scheme or text.startswith(("/", "~", ".")):
        return resolve(base, text)
    if scheme not in BACKENDS:
        shown = ", ".join(f"{b}:" for b in BACKENDS)
        raise fail(
            (*where, "repository"),
            f"unknown restic backend {scheme + ':'!r}: give a directory, or a URL "
            f"starting with one of {shown}",
        )
    return f"local:{resolve(base, rest)}" if scheme == "local" else text


def _password(
    table: dict[str, Any], where: tuple[Part, ...], fail: Fail, base: str, display: str
) -> str:
    """The password's source as JSON (its paths absolute), after reading it once."""
    if "password" not in table:
        return ""
    at = (*where, "password")
    source = {k: resolve(base, v) if k in _PATH_KEYS else v for k, v in table["password"].items()}
    _read(source, at, fail, base)
    shown = ".".join(str(p) for p in at)
    return json.dumps({"source": source, "base": base, "file": display, "at": shown})


def _read(source: dict[str, Any], at: tuple[Part, ...], fail: Fail, base: str) -> str:
    value = source_value(source, at, fail, base, read_file=password_text, exact=False)
    if not value:
        raise fail(at, "the password is empty")
    if any(c in value for c in "\n\r\0"):
        raise fail(at, "the password must not contain a line break or NUL")
    return value
