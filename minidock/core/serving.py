"""How a service's routes answer, as the operator set it: serving (to its tasks), in
maintenance (503, a page with the operator's message and `Retry-After`), or paused (each
new request held until the pause ends or it has waited `timeout`, then sent to the tasks).
Pure.

kamal-proxy's pause controller (running, paused, stopped) as desired state: the mode is
kept in the service's state (`ServiceState.serving`), so it survives the proxies' restarts
and the controller's; the route table carries it (`minidock.core.routes.RouteEntry.mode`)
and the proxies' configs render it (`minidock.commands.caddy`). One mode at a time: `maintenance on`
and `pause` each replace what was set; `maintenance off` ends a maintenance only, `resume`
a pause only. docs/ingress.md#maintenance-and-pause.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MESSAGE",
    "DEFAULT_TIMEOUT",
    "RETRY_AFTER",
    "SERVING",
    "Serving",
    "ServingMode",
    "ended",
    "in_maintenance",
    "paused",
]

DEFAULT_MESSAGE = "This service is down for maintenance. Please try again shortly."
DEFAULT_TIMEOUT = 30.0  # seconds a paused route holds a request at most (kamal-proxy's)
RETRY_AFTER = 60  # seconds, the maintenance answer's `Retry-After`


class Serving(enum.StrEnum):
    ON = "serving"
    MAINTENANCE = "maintenance"
    PAUSED = "paused"


@dataclass(frozen=True)
class ServingMode:
    """A service's routes' mode, the operator's message (maintenance), how long a request
    is held at most (paused), and when the operator set it (epoch seconds, 0: never)."""

    serving: Serving = Serving.ON
    message: str = ""
    timeout: float = 0.0
    since: float = 0.0

    @property
    def on(self) -> bool:
        return self.serving is Serving.ON

    def line(self) -> str:
        """One line for people ("" while serving)."""
        if self.serving is Serving.MAINTENANCE:
            return f"maintenance: {self.message}"
        if self.serving is Serving.PAUSED:
            return f"paused: requests held up to {self.timeout:g}s"
        return ""


SERVING = ServingMode()


def in_maintenance(message: str, now: float) -> ServingMode:
    """`minidock maintenance SERVICE on [--message TEXT]`."""
    return ServingMode(Serving.MAINTENANCE, message or DEFAULT_MESSAGE, 0.0, now)


def paused(timeout: float, now: float) -> ServingMode:
    """`minidock pause SERVICE [--timeout 30s]`."""
    return ServingMode(Serving.PAUSED, "", timeout, now)


def ended(mode: ServingMode, serving: Serving) -> ServingMode | None:
    """The mode once the operator ends `serving` (`maintenance off`: MAINTENANCE, `resume`:
    PAUSED): serving again, or None when the routes were not in that mode."""
    return SERVING if mode.serving is serving else None
