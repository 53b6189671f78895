"""Who may read what `minidock serve` serves: the listen address (loopback needs nothing;
anything else needs a bearer token), the token file, and checking a request's token in
constant time. Pure but for reading the token file."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path

__all__ = ["COOKIE", "Access", "Listen", "ServeInputError", "load_token", "parse_listen"]

COOKIE = "minidock_session"


class ServeInputError(ValueError):
    """A bad --listen or --token-file: one line naming the option and the fix."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a name other than localhost may resolve anywhere
            return False

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}"


def parse_listen(text: str) -> Listen:
    """`HOST:PORT` (`[::1]:9440` for IPv6; port 0: any free port)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ServeInputError(f"--listen {text}: give HOST:PORT, e.g. 127.0.0.1:9440")
    return Listen(host, int(port))


def load_token(path: Path) -> str:
    """The bearer token in `path` (surrounding whitespace dropped): at least 16 characters."""
    try:
        token = path.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeInputError(f"--token-file {path}: cannot read it ({exc})") from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ServeInputError(
            f"--token-file {path}: the token must be one word of at least 16 characters, "
            "e.g. from `openssl rand -hex 32`"
        )
    return token


@dataclass(frozen=True)
class Access:
    """The token a request must carry (None: none needed, on loopback without a file): as
    `Authorization: Bearer TOKEN`, or the session cookie that `/?token=TOKEN` sets for a
    browser (a digest of the token, never the token itself)."""

    token: str | None

    @property
    def session(self) -> str:
        key = (self.token or "").encode()
        return hmac.new(key, b"minidock serve session", hashlib.sha256).hexdigest()

    def allows(self, authorization: str | None, cookie: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            return True
        return self.session_in(cookie)

    def session_in(self, cookie: str | None) -> bool:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie or "")
        except Exception:  # a malformed Cookie header is no session
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and hmac.compare_digest(
            morsel.value.encode(), self.session.encode()
        )

    def is_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())
