"""`python3 -m minidock.lab.prebuild [host] [SET...]`: `minidock lab build` with nothing but
the standard library and this source tree, so the lab's images can be built before
MiniDock's dependencies are installed: scripts/setup.sh --demo starts it on a fresh machine
as soon as mmdebstrap is there, beside `pip install` and beside apt-get installing the
engine (each image's `docker import` waits for the engine: minidock.lab.local).
tests/unit/test_lab_local.py holds it to the standard library."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from minidock.lab.errors import LabError
from minidock.lab.images import build_named, built_line

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    """Build what `argv` names (as `lab build` does); 0, or 1 or 2 with one line on stderr."""
    try:
        built = build_named(argv)
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return exc.exit_code
    print(built_line(built))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
