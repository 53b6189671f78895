"""What goes wrong in the lab, and which exit code the `lab` command gives for it."""

from __future__ import annotations

__all__ = ["BadInputError", "LabError", "NotOwnedError", "UnknownHostError"]


class LabError(Exception):
    """A lab operation failed; the message says what and where (exit 1)."""

    exit_code = 1


class UnknownHostError(LabError):
    """The named host is not part of the lab (bad input: exit 2)."""

    exit_code = 2


class NotOwnedError(LabError):
    """The compose project or the lab files belong to another lab (refused: exit 2)."""

    exit_code = 2


class BadInputError(LabError):
    """An option's value the lab does not know, e.g. an image set (exit 2)."""

    exit_code = 2
