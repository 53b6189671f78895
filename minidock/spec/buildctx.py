"""A service's `build` (docs/compose.md#build): what the controller builds, and the content
tag that names it, worked out from the files alone (no Docker engine: `validate` and
`plan` need none; `apply` builds, minidock.act.build).

The tag is REPOSITORY:DIGEST12. The digest is a sha256 over the build context's files as
Docker sends them (`.dockerignore` honoured, with Docker's own pattern rules: patterns
anchored at the context, `*` and `?` within one path element, `**` across any number,
`!` for exceptions, the last matching pattern winning, a directory's pattern covering
everything under it), each file's path, permission bits and content (a symbolic link's
target, unfollowed), and over the Dockerfile's text, the build args, target and labels.
File times and owners are not in it, so an unchanged checkout elsewhere gives the same tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from minidock.model import Build
from minidock.spec.errors import Fail, Part
from minidock.spec.reading import resolve

__all__ = ["IgnoreRules", "build_of", "context_digest", "repository_of"]


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    depth: int  # path elements in the pattern: a parent directory of that depth may match
    exception: bool


class IgnoreRules:
    """A `.dockerignore`'s patterns, matched as Docker matches them (moby's patternmatcher)."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exception = line.startswith("!")
            if exception:
                line = line[1:].strip()
            line = os.path.normpath(line).replace(os.sep, "/")
            if len(line) > 1 and line.startswith("/"):
                line = line.lstrip("/") or "/"
            if line in (".", ""):
                continue
            depth = len(line.split("/"))
            self.patterns.append(_Pattern(re.compile(_regex(line)), depth, exception))

    @property
    def has_exceptions(self) -> bool:
        return any(p.exception for p in self.patterns)

    def ignored(self, path: str) -> bool:
        """Whether `path` (relative to the context, '/'-separated) is left out."""
        parts = path.split("/")
        ignored = False
        for p in self.patterns:
            matched = p.regex.match(path) is not None
            if not matched and len(parts) > 1 and p.depth < len(parts):
                matched = p.regex.match("/".join(parts[: p.depth])) is not None
            if matched:
                ignored = not p.exception
        return ignored


def _regex(pattern: str) -> str:
    """A Docker ignore pattern as a regular expression over a '/'-separated path."""
    out = "^"
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*":
            if i < len(pattern) and pattern[i] == "*":
                i += 1
                if i < len(pattern) and pattern[i] == "/":
                    i += 1
                out += ".*" if i == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i < len(pattern):
            out += re.escape(pattern[i])
            i += 1
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out += re.escape(ch)
                continue
            body = pattern[i:end]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        else:
            out += re.escape(ch)
    return out + "$"


def _entries(context: str, rules: IgnoreRules) -> Iterator[str]:
    """One line per file, directory and link of the context that is sent, in path order."""
    prune = not rules.has_exceptions  # with an exception, an ignored directory may hold one
    for top, dirs, files in os.walk(context):
        rel_top = os.path.relpath(top, context).replace(os.sep, "/")
        prefix = "" if rel_top == "." else rel_top + "/"
        dirs.sort()
        kept = []
        for d in dirs:
            rel = prefix + d
            full = os.path.join(top, d)
            if os.path.islink(full):  # os.walk does not enter links; hash them as links
                files.append(d)
                continue
            if rules.ignored(rel):
                if not prune:
                    kept.append(d)
                continue
            kept.append(d)
            yield f"d {rel} {stat.S_IMODE(os.lstat(full).st_mode):o}"
        dirs[:] = kept
        for f in sorted(files):
            rel = prefix + f
            if not rules.ignored(rel):
                yield _file_entry(os.path.join(top, f), rel)


def _file_entry(full: str, rel: str) -> str:
    info = os.lstat(full)
    mode = f"{stat.S_IMODE(info.st_mode):o}"
    if stat.S_ISLNK(info.st_mode):
        return f"l {rel} {os.readlink(full)}"
    if not stat.S_ISREG(info.st_mode):
        return f"o {rel} {mode}"  # a socket or fifo: Docker skips or refuses it; noted
    digest = hashlib.sha256()
    with open(full, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return f"f {rel} {mode} {digest.hexdigest()}"


def context_digest(context: str) -> str:
    """The sha256 over what of `context` Docker sends (its `.dockerignore` honoured)."""
    ignore = os.path.join(context, ".dockerignore")
    lines: list[str] = []
    if os.path.isfile(ignore):
        with open(ignore, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    digest = hashlib.sha256()
    for entry in _entries(context, IgnoreRules(lines)):
        digest.update(entry.encode("utf-8", errors="surrogateescape") + b"\n")
    return digest.hexdigest()


def repository_of(image: str) -> str:
    """An image reference without its tag and digest: `reg:5000/web:1` -> `reg:5000/web`."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _default_repository(cluster: str, service: str) -> str:
    """Compose's name for a built image, `PROJECT-SERVICE`, as a valid repository."""
    return re.sub(r"[^a-z0-9]+", "-", f"{cluster}-{service}".lower()).strip("-") or "build"


def build_of(
    body: dict[str, Any], at: tuple[Part, ...], fail: Fail, base: str, cluster: str
) -> Build:
    """The service's `build` table, its files read now and its content tag worked out."""
    table: dict[str, Any] = body["build"]
    where = (*at, "build")
    written = table.get("context", ".")
    context = resolve(base, written)
    if not os.path.isdir(context):
        raise fail(
            (*where, "context"),
            f"build context {written} is not a directory (paths are relative to the file)",
        )
    dockerfile = resolve(context, table.get("dockerfile", "Dockerfile"))
    try:
        with open(dockerfile, "rb") as fh:
            text = fh.read()
    except OSError as exc:
        shown = os.path.relpath(dockerfile, base)
        raise fail((*where, "dockerfile"), f"cannot read {shown}: {exc.strerror}") from None
    try:
        files = context_digest(context)
    except OSError as exc:
        raise fail((*where, "context"), f"cannot read {exc.filename}: {exc.strerror}") from None
    args = tuple(sorted(table.get("args", {}).items()))
    labels = tuple(sorted(table.get("labels", {}).items()))
    target = table.get("target")
    seen = [files, hashlib.sha256(text).hexdigest(), args, target, labels]
    digest = hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:12]
    image = body.get("image")
    repository = repository_of(image) if image else _default_repository(cluster, str(at[-1]))
    return Build(
        context=context,
        dockerfile=dockerfile,
        tag=f"{repository}:{digest}",
        args=args,
        target=target,
        labels=labels,
        also=image if image and image != f"{repository}:{digest}" else None,
        always=bool(table.get("always", False)),
    )
