"""Event: one line of the controller's durable event log (a pure value, no I/O).

The pure core builds events; the store (minidock.state) appends them in the same
transaction as the state they explain. Messages are stored as given: redacting secrets
is the producer's job, before an event is built.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Event"]


@dataclass(frozen=True)
class Event:
    """Something the controller did or saw. `slot` 0 and empty strings mean "not about one"."""

    at: float  # epoch seconds
    kind: str  # short machine-readable word, e.g. "task.started", "host.down"
    message: str  # one human-readable line, already redacted
    service: str = ""
    slot: int = 0
    host: str = ""
    task: str = ""
