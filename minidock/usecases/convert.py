"""`minidock convert FILE`: a Compose file as the equivalent TOML cluster spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomli_w

from minidock.spec import SpecError, cluster_document
from minidock.spec.compose import is_compose_file
from minidock.usecases.outcomes import BadInput, ExitCode

__all__ = ["ConvertOutcome", "convert"]


@dataclass(frozen=True)
class ConvertOutcome:
    """The TOML text of the cluster spec a Compose file is."""

    file: Path
    toml: str
    exit_code: ExitCode = ExitCode.OK


def convert(file: Path) -> ConvertOutcome:
    """The Compose file `file` translated and checked as `apply` would, as TOML: paths in it
    stay relative to the Compose file's directory (save it beside the Compose file);
    interpolated values are written as they came out."""
    if not is_compose_file(file):
        raise BadInput(
            f"{file}: not a Compose file (*.yaml, *.yml or compose*): nothing to convert"
        )
    try:
        document = cluster_document(file)
    except SpecError as exc:
        raise BadInput(str(exc)) from None
    header = f"# The cluster spec of {file.name}, written by `minidock convert`.\n"
    return ConvertOutcome(file, header + tomli_w.dumps(document))
