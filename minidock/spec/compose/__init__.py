"""Compose files read as cluster specs: `minidock apply compose.yaml`.

A Compose file is parsed (PyYAML's safe loader, YAML 1.2 scalars, anchors and merge keys),
interpolated as Compose does (`${VAR:-default}`, from the environment and `.env` beside
the file) and translated into the TOML cluster spec's document (the dict a `cluster.toml`
parses to), which then goes through the same schema, checks and model building as a TOML
file: everything downstream is unchanged. Each TOML key remembers the Compose key it came
from, so a problem found later names the Compose key and its line. What MiniDock cannot
honour is refused; what changes nothing is a warning, logged on `minidock.spec.compose`.
The support matrix is docs/compose.md.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["is_compose_file"]


def is_compose_file(path: Path) -> bool:
    """A Compose file by its name: `*.yaml`, `*.yml`, or `compose*` that is not `*.toml`."""
    suffix = path.suffix.lower()
    return suffix in (".yaml", ".yml") or (path.name.startswith("compose") and suffix != ".toml")
