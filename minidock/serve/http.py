"""The HTTP side of `minidock serve` (the standard library's ThreadingHTTPServer): routes,
the token check, security headers on every answer, Server-Sent Events. Read-only: every
route reads the shared reading or the event log; nothing takes the writer lock or acts.

GET /            the dashboard (static files shipped in the package)
GET /metrics     Prometheus text (minidock.metrics)
GET /api/status  the `status --json` document (503 with the reasons when a store or cluster
                 could not be read)
GET /api/events  the event log as JSON (?since=10m, ?limit=N, ?service=, ?host=); with
                 ?follow=1, Server-Sent Events: the newest `limit`, then each new one
GET /api/traffic each ingress proxy's request counters per route (traffic_json)
"""

from __future__ import annotations

import dataclasses
import json
import queue
import re
import sys
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from minidock import usecases
from minidock.metrics import CONTENT_TYPE, metrics_text
from minidock.model import Event
from minidock.serve.access import COOKIE, Access
from minidock.serve.shared import EventHub, SharedReading
from minidock.units import parse_duration
from minidock.usecases.fleetview import FleetReading, status_json

__all__ = ["SECURITY_HEADERS", "App", "Handler"]

_TOKEN = re.compile(r"token=[^&\s'\"]*")
KEEPALIVE = 15.0  # seconds between SSE comments, so a gone client is noticed
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}


@dataclass
class App:
    """What the handlers share: the access rule, the cached reading, the event hub."""

    access: Access
    reading: SharedReading
    hub: EventHub
    directory: usecases.StateLocation
    cluster: str | None = None


class BadQuery(ValueError):
    pass


class Handler(BaseHTTPRequestHandler):
    """One request. `app` is set on a subclass per server (`handler_for`)."""

    app: ClassVar[App]
    server_version = "minidock"
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a client may take to send its request

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/" and "token" in query:
            self._log_in(query["token"])
            return
        if not self.app.access.allows(
            self.headers.get("Authorization"), self.headers.get("Cookie")
        ):
            self._send(
                HTTPStatus.UNAUTHORIZED,
                b"unauthorized: a bearer token is needed\n",
                "text/plain; charset=utf-8",
                {"WWW-Authenticate": 'Bearer realm="minidock"'},
            )
            return
        try:
            self._route(url.path, query)
        except BadQuery as exc:
            self._send(HTTPStatus.BAD_REQUEST, f"{exc}\n".encode(), "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away

    do_HEAD = do_GET

    def _route(self, path: str, query: dict[str, str]) -> None:
        if path in STATIC:
            name, kind = STATIC[path]
            body = (resources.files("minidock.serve") / "static" / name).read_bytes()
            self._send(HTTPStatus.OK, body, kind, {"Cache-Control": "no-cache"})
        elif path == "/metrics":
            self._send(HTTPStatus.OK, metrics_text(self.app.reading.current()), CONTENT_TYPE)
        elif path == "/api/status":
            self._status()
        elif path == "/api/events":
            self._events(query)
        elif path == "/api/traffic":
            self._json(HTTPStatus.OK, traffic_json(self.app.reading.current()))
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def _status(self) -> None:
        reading = self.app.reading.current()
        headers = {"X-Minidock-Observed-At": f"{reading.at:.3f}"}
        if not reading.errors:
            self._json(HTTPStatus.OK, status_json(reading.documents), headers)
            return
        documents = reading.documents
        partial = status_json(documents) if documents else None
        body = {"errors": list(reading.errors), "status": partial}
        self._json(HTTPStatus.SERVICE_UNAVAILABLE, body, headers)

    def _events(self, query: dict[str, str]) -> None:
        where, limit = _event_query(query)
        try:
            log = usecases.events(
                self.app.directory, limit=limit, where=where, cluster=self.app.cluster
            )
        except usecases.UseCaseError as exc:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"errors": [str(exc)]})
            return
        shown = [_event_json(i, e) for i, e in zip(log.ids, log.events, strict=True)]
        if query.get("follow") not in ("1", "true", "yes"):
            self._json(HTTPStatus.OK, shown)
            return
        self._follow(shown, where)

    def _follow(self, backlog: list[dict[str, Any]], where: usecases.EventFilter) -> None:
        """Server-Sent Events: the backlog, then every new event, until the client leaves."""
        subscription = self.app.hub.subscribe()
        try:
            self._head(
                HTTPStatus.OK,
                "text/event-stream; charset=utf-8",
                None,
                {"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )
            self.wfile.write(b"retry: 3000\n\n")
            for doc in backlog:
                self._sse(doc)
            while True:
                try:
                    i, e = subscription.get(timeout=KEEPALIVE)
                except queue.Empty:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                if where.keeps(e):
                    self._sse(_event_json(i, e))
        except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
            pass
        finally:
            self.app.hub.unsubscribe(subscription)
            self.close_connection = True

    def _sse(self, doc: dict[str, Any]) -> None:
        self.wfile.write(f"id: {doc['id']}\ndata: {json.dumps(doc)}\n\n".encode())
        self.wfile.flush()

    def _log_in(self, given: str) -> None:
        """`/?token=TOKEN` from a browser: a session cookie, then the dashboard."""
        access = self.app.access
        if access.token is not None and not access.is_token(given):
            self._send(
                HTTPStatus.UNAUTHORIZED,
                b"unauthorized: wrong token\n",
                "text/plain; charset=utf-8",
                {"WWW-Authenticate": 'Bearer realm="minidock"'},
            )
            return
        cookie = f"{COOKIE}={access.session}; Path=/; HttpOnly; SameSite=Strict"
        self._send(
            HTTPStatus.SEE_OTHER,
            b"",
            "text/plain; charset=utf-8",
            {"Location": "/", "Set-Cookie": cookie},
        )

    def _json(self, status: HTTPStatus, doc: Any, headers: dict[str, str] | None = None) -> None:
        body = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
        self._send(
            status, body, "application/json", {"Cache-Control": "no-store", **(headers or {})}
        )

    def _send(
        self, status: HTTPStatus, body: bytes, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        self._head(status, kind, len(body), headers)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _head(
        self, status: HTTPStatus, kind: str, length: int | None, headers: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def end_headers(self) -> None:
        """Every answer (http.server's own errors too) carries the security headers."""
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def version_string(self) -> str:
        return self.server_version

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """One line per request on stderr, without the query (it may hold a token)."""
        path = urlsplit(self.path).path
        code = code.value if isinstance(code, HTTPStatus) else code
        self.log_message("%s %s %s", self.command, path, code)

    def log_message(self, format: str, *args: Any) -> None:
        line = _TOKEN.sub("token=***", format % args)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp} {self.client_address[0]} {line}", file=sys.stderr, flush=True)


def traffic_json(reading: FleetReading) -> dict[str, Any]:
    """Each cluster's ingress proxies' request metrics as read with the observation
    (docs/observability.md#request-metrics): counters since each proxy started."""
    return {
        "at": reading.at,
        "clusters": [
            {
                "cluster": c.name,
                "proxies": [
                    {
                        "host": p.host,
                        "error": p.error or None,
                        "request_metrics": p.counted,
                        "started": p.started or None,
                        "routes": [
                            {
                                "service": r.service,
                                "route": r.route,
                                "classes": dict(r.classes),
                                "count": r.count,
                                "seconds": r.seconds,
                                "buckets": [list(b) for b in r.buckets],
                            }
                            for r in p.routes
                        ],
                    }
                    for p in c.traffic
                ],
            }
            for c in reading.clusters
        ],
    }


def _event_query(query: dict[str, str]) -> tuple[usecases.EventFilter, int]:
    """The event filter and count a query asks for (`since` a duration, like `--since`)."""
    try:
        since = time.time() - parse_duration(query["since"]) if query.get("since") else 0.0
    except ValueError as exc:
        raise BadQuery(f"since: {exc}") from None
    limit = query.get("limit", "50")
    if not limit.isdigit():
        raise BadQuery(f"limit: {limit!r} is not a count; give e.g. limit=50")
    where = usecases.EventFilter(
        service=query.get("service", ""), host=query.get("host", ""), since=since
    )
    return where, int(limit)


def _event_json(i: int, e: Event) -> dict[str, Any]:
    """An event as `events --json` prints it."""
    return {"id": i, **dataclasses.asdict(e)}
