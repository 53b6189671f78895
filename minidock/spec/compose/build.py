"""A service's `build` (docs/compose.md#build): the TOML `build` table, which `apply` builds
on the controller and ships to the hosts that run it; `pull_policy` beside it."""

from __future__ import annotations

from typing import Any

from minidock.spec.compose.service_base import Service
from minidock.spec.compose.values import key_values, mapping, text

__all__ = ["BUILD_KEYS", "translate_build"]

BUILD_KEYS = ("context", "dockerfile", "args", "target", "labels")
_YOURSELF = "build the image yourself, `minidock push` it and give image instead of build"
# Accepted with a warning: they change how a build is cached or published, not what it is.
_IGNORED = {
    "cache_from": "ignored: the controller's own build cache is used",
    "cache_to": "ignored: the controller's own build cache is used",
    "no_cache": "ignored: a build runs when its content changed, with the controller's cache",
    "pull": "ignored: base images are pulled only when the controller lacks them",
    "tags": "ignored: the image is tagged by its content (and as image, when given)",
    "platforms": "ignored: the image is built for the controller's platform",
    "provenance": "ignored: no attestations are made",
    "sbom": "ignored: no attestations are made",
}
_REFUSED = (
    "dockerfile_inline", "ssh", "secrets", "additional_contexts", "entitlements", "network",
    "extra_hosts", "privileged", "shm_size", "ulimits", "isolation",
)  # fmt: skip


def translate_build(s: Service) -> None:
    """`build` (a context path, or a mapping) into the TOML `build` table, with `image`
    beside it as the built image's name, and `pull_policy` (`build`: build at every apply)."""
    at = (*s.at, "build")
    value = s.body["build"]
    table: dict[str, Any] = {}
    if isinstance(value, str):
        table["context"] = _context(s, value, at)
    else:
        body = mapping(s.ctx, value, at)
        for key in body:
            if isinstance(key, str) and key in _IGNORED:
                s.ctx.warn((*at, key), _IGNORED[key])
            elif isinstance(key, str) and key in _REFUSED:
                raise s.ctx.fail((*at, key), f"not supported in a build: remove it, or {_YOURSELF}")
        s.known_keys(body, at, (*BUILD_KEYS, *_IGNORED, *_REFUSED))
        if "context" in body:
            table["context"] = _context(s, text(s.ctx, body["context"], (*at, "context")), at)
        for key in ("dockerfile", "target"):
            if key in body:
                table[key] = text(s.ctx, body[key], (*at, key))
        for key in ("args", "labels"):
            if key in body:
                found = _pairs(s, body[key], (*at, key), from_environment=key == "args")
                if found:
                    table[key] = found
    policy = s.body.get("pull_policy")
    if policy == "build":
        table["always"] = True
    elif policy not in (None, "missing", "if_not_present"):
        s.ctx.warn(
            (*s.at, "pull_policy"),
            "ignored beside build: apply builds the image when its content changed "
            "(pull_policy: build builds at every apply)",
        )
    s.set("build", table, "build")
    if "image" in s.body:
        s.set("image", text(s.ctx, s.body["image"], (*s.at, "image")), "image")


def _context(s: Service, value: str, at: tuple[Any, ...]) -> str:
    if "://" in value or value.startswith("git@"):
        raise s.ctx.fail(
            (*at, "context"),
            "a remote build context is not supported: check it out beside the Compose file "
            "and give its path",
        )
    return value


def _pairs(
    s: Service, value: Any, at: tuple[Any, ...], *, from_environment: bool
) -> dict[str, str]:
    """Args or labels (a mapping or a `KEY=VALUE` list); an arg given without a value takes
    the controller's environment's (left out when unset), as Compose does."""
    found: dict[str, str] = {}
    for key, (item, _) in key_values(s.ctx, value, at).items():
        if item is None and from_environment:
            if key in s.ctx.lookup:
                found[key] = s.ctx.lookup[key]
            continue
        found[key] = "" if item is None else item
    return found
