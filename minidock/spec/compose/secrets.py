"""A Compose service's `secrets` (short and long syntax) as its `secret_files` table: each
top-level secret it names, as a file at `/run/secrets/NAME` (or its `target`), owned by
`uid`:`gid` with `mode`, as `docker stack deploy` gives them (docs/secrets.md)."""

from __future__ import annotations

from typing import Any

from minidock.spec.compose.context import describe
from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import text
from minidock.spec.compose.yamldoc import Part, YDict, YList

__all__ = ["service_secrets"]

SECRETS_DIR = "/run/secrets"  # where Docker puts a secret whose target is a name


def service_secrets(s: Service) -> None:
    """`secrets: [NAME, {source, target, uid, gid, mode}]` into `secret_files`, keyed by the
    path in the task."""
    if "secrets" not in s.body:
        return
    at = (*s.at, "secrets")
    value = s.body["secrets"]
    if not isinstance(value, YList):
        raise s.ctx.fail(at, f"expected a list, got {describe(value)}")
    table: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(value):
        source, target, owner = _one(s, item, (*at, i))
        if target in table:
            raise s.ctx.fail((*at, i), f"{target} is given twice: one secret per path")
        table[target] = {**s.top.secrets[source], **owner}
        s.ctx.came_from(("services", s.name, "secret_files", target), (*at, i))
    if table:
        s.set("secret_files", table, "secrets")


def _one(s: Service, item: Any, where: tuple[Part, ...]) -> tuple[str, str, dict[str, Any]]:
    """(source, path in the task, its uid/gid/mode as TOML gives them) of one entry."""
    owner: dict[str, Any] = {}
    if isinstance(item, YDict):
        s.known_keys(item, where, ("source", "target", "uid", "gid", "mode"))
        if "source" not in item:
            raise s.ctx.fail(where, "missing source: name a top-level secret")
        source = text(s.ctx, item["source"], (*where, "source"))
        target = text(s.ctx, item.get("target", source), (*where, "target"))
        for key in ("uid", "gid"):
            if key in item:
                owner[key] = _id(s, item[key], (*where, key))
        if "mode" in item:
            owner["mode"] = _mode(s, item["mode"], (*where, "mode"))
    else:
        source = target = text(s.ctx, item, where)
    if source not in s.top.secrets:
        known = ", ".join(sorted(s.top.secrets)) or "none"
        raise s.ctx.fail(where, f"unknown secret {source!r} (declared at the top: {known})")
    if not target.startswith("/"):
        target = f"{SECRETS_DIR}/{target}"
    return source, target, owner


def _id(s: Service, value: Any, where: tuple[Part, ...]) -> int:
    """A numeric user or group id (Compose writes them as strings: "1000")."""
    given = text(s.ctx, value, where)
    if not given.isascii() or not given.isdigit():
        raise s.ctx.fail(where, f"{given!r} is not a number: give the numeric id, like 1000")
    return int(given)


def _mode(s: Service, value: Any, where: tuple[Part, ...]) -> str:
    """The mode as compose-go reads it: a number is the mode itself (`0440` and `0o440`
    are octal to YAML, so 288, mode 0440; `440` is decimal, mode 0670), a string is octal
    digits (`"0440"`, `"440"`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    else:
        digits = text(s.ctx, value, where).removeprefix("0o")
        if not digits.isascii() or not digits.isdigit() or "8" in digits or "9" in digits:
            raise s.ctx.fail(where, f"{digits!r} is not an octal mode: write it like 0440")
        mode = int(digits, 8)
    if not 0 <= mode <= 0o777:
        raise s.ctx.fail(where, f"{value} is not a file mode (at most 0777): write it like 0440")
    return f"0{mode:03o}"
