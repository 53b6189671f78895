"""A Compose file translated, and its problems located in it."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minidock.spec.compose.context import ComposeError, Context
from minidock.spec.compose.document import read_document, translate
from minidock.spec.compose.yamldoc import line_of, render
from minidock.spec.errors import SpecError
from minidock.spec.messages import render as render_toml

__all__ = ["ComposeError", "Translation", "translate_file"]

log = logging.getLogger("minidock.spec.compose")


@dataclass(frozen=True)
class Translation:
    """A Compose file as the cluster spec's TOML document, with where each key came from."""

    document: dict[str, Any]
    warnings: tuple[str, ...]
    context: Context

    def locate(self, error: SpecError) -> SpecError:
        """`error` (about a TOML key path) told about the Compose key that key came from."""
        if isinstance(error, ComposeError):
            return error
        path = error.path
        unknown = re.match(r"unknown key '([^']+)'", error.message)
        if unknown and (*self._parts(path), unknown[1]) in self.context.origins:
            path = render_toml((*self._parts(path), unknown[1]))
        best, found = -1, None
        for toml, parts in self.context.origins.items():
            key = render_toml(toml)
            covers = path == key or path.startswith((f"{key}.", f"{key}["))
            if covers and len(key) > best:
                best, found = len(key), parts
        if found is None:
            return ComposeError(error.file, "", error.message)
        line = line_of(self.context.doc, found)
        return ComposeError(error.file, render(found), error.message, line=line)

    def _parts(self, rendered: str) -> tuple[Any, ...]:
        """The TOML key path whose rendering is `rendered` (() when none is known)."""
        return next((t for t in self.context.origins if render_toml(t) == rendered), ())


def translate_file(path: Path, display: str) -> Translation:
    """Read the Compose file at `path` (named `display` in messages) into the TOML
    document; each warning is logged once. Raises ComposeError."""
    try:
        context = read_document(path, display)
        document = translate(context)
    except RecursionError:
        raise ComposeError(display, "", "nested too deeply to be a Compose file") from None
    for warning in context.warnings:
        log.warning("%s", warning)
    return Translation(document, tuple(context.warnings), context)
