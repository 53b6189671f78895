"""A tar stream's member names rewritten as it passes, chunk by chunk, never held whole:
how a volume's stream keeps one form between engines (minidock.act.volumecopy).

Docker's `cp` streams `/var/lib/data` as `data/`, `data/f`, ...; Podman's `volume export`
streams the volume's contents as `f`, `sub/`, ... (no top entry) and `volume import`
unpacks such names into the volume. `under("data")` puts an export's names under the top
name (`f` -> `data/f`), `out_of("data")` takes a `cp`-form stream's names out of it
(`data/f` -> `f`; the top entry itself dropped: the volume is its directory).

Only the names change: a member's header (its `name`, the ustar `prefix`, a hard link's
`linkname`; the checksum recomputed), its pax `path` and `linkpath` records, or a GNU long
name or link (replaced by a pax record when the new name does not fit the header). The
data, the other pax records (times, extended attributes), and everything after the end
of the archive pass as they came.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["Renamer", "TarError", "out_of", "under"]

BLOCK: Final = 512
Rename = Callable[[str], str | None]  # a member's new name; None: the member is left out

_PAX, _GLOBAL, _LONGNAME, _LONGLINK, _HARDLINK = b"x", b"g", b"L", b"K", b"1"
_POSIX = b"ustar\x0000"  # the ustar magic and version of a POSIX header (its prefix field used)


class TarError(ValueError):
    """The stream is not a tar the renamer can read, or a name falls outside the top."""


def _bare(name: str) -> str:
    while name.startswith(("./", "/")):
        name = name[1:] if name.startswith("/") else name[2:]
    return "" if name == "." else name


def under(top: str) -> Rename:
    """Each name put under `top` (`f` -> `top/f`; the stream's root, if any, is `top/`)."""

    def rename(name: str) -> str:
        bare = _bare(name)
        return f"{top}/{bare}" if bare else f"{top}/"

    return rename


def out_of(top: str) -> Rename:
    """Each name taken out of `top` (`top/f` -> `f`), `top` itself left out; a name
    outside `top` raises TarError (the stream is not of this volume)."""

    def rename(name: str) -> str | None:
        first, _, rest = _bare(name).partition("/")
        if first != top:
            raise TarError(f"the stream holds {name!r}, outside {top}/")
        return rest or None

    return rename


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _field(block: bytes | bytearray, start: int, end: int) -> str:
    return _text(bytes(block[start:end]).split(b"\0", 1)[0])


def _size(block: bytes | bytearray) -> int:
    raw = bytes(block[124:136])
    if raw[0] & 0x80:  # base-256 (GNU): a big-endian number after the marker bit
        return int.from_bytes(bytes([raw[0] & 0x7F]) + raw[1:], "big")
    text = raw.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarError("not a tar stream (a header's size is not a number)") from None


def _number(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        raise TarError("not a tar stream (a pax size is not a number)") from None


def _checksummed(block: bytearray) -> bytes:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _pax_records(data: bytes) -> list[tuple[str, bytes]]:
    records: list[tuple[str, bytes]] = []
    at = 0
    while at < len(data) and data[at : at + 1] not in (b"\0", b""):
        space = data.find(b" ", at)
        try:
            length = int(data[at:space])
        except ValueError:
            raise TarError("not a tar stream (a pax record's length is not a number)") from None
        key, _, value = data[space + 1 : at + length - 1].partition(b"=")
        records.append((_text(key), value))
        at += length
    return records


def _pax_data(records: list[tuple[str, bytes]]) -> bytes:
    out = bytearray()
    for key, value in records:
        body = f" {key}=".encode("utf-8", "surrogateescape") + value + b"\n"
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length = len(str(length)) + len(body)
        out += str(length).encode() + body
    return bytes(out)


def _pax_header(template: bytes | None, data: bytes) -> bytes:
    """A pax header block for `data`: the original's (`template`) with the new size, else
    a fresh one."""
    if template is not None:
        block = bytearray(template)
    else:
        block = bytearray(BLOCK)
        block[0:14] = b"././@PaxHeader"
        block[100:108] = b"0000644\0"
        block[108:116] = block[116:124] = b"0000000\0"
        block[136:148] = b"00000000000\0"
        block[156:157] = _PAX
        block[257:265] = _POSIX
    block[124:136] = b"%011o\0" % len(data)
    return _checksummed(block)


def _split(name: bytes) -> tuple[bytes, bytes] | None:
    """A POSIX header's (prefix, name) for a name longer than 100 bytes, if any fits."""
    for at in range(len(name) - 1, 0, -1):
        if name[at : at + 1] == b"/" and at <= 155 and len(name) - at - 1 <= 100:
            return name[:at], name[at + 1 :]
    return None


class Renamer:
    """A tar stream's names rewritten (`rename`), fed chunk by chunk (`feed` returns the
    bytes ready to pass on); `close` once the stream ends (raises TarError if it ended
    inside a member)."""

    def __init__(self, rename: Rename) -> None:
        self._rename = rename
        self._buffer = bytearray()
        self._passing = 0  # bytes of a member's data still to pass (or to drop)
        self._dropping = False
        self._extension: tuple[bytes, int] | None = None  # (its header, padded size)
        self._pax: tuple[bytes, list[tuple[str, bytes]]] | None = None
        self._long: dict[bytes, str] = {}  # a GNU long name (L) or link (K) for the next
        self._ended = False
        self.members = 0  # members passed on (those left out not counted)
        self.file_bytes = 0  # bytes of the regular files' data passed on

    def feed(self, chunk: bytes) -> bytes:
        buffer = self._buffer + chunk if self._buffer else chunk
        at, out = 0, bytearray()
        while at < len(buffer):
            left = len(buffer) - at
            if self._ended:
                out += buffer[at:]
                at = len(buffer)
            elif self._passing:
                take = min(self._passing, left)
                if not self._dropping:
                    out += buffer[at : at + take]
                at += take
                self._passing -= take
            elif self._extension is not None:
                header, size = self._extension
                if left < size:
                    break
                self._extension = None
                self._extended(header, bytes(buffer[at : at + size]))
                at += size
            elif left < BLOCK:
                break
            else:
                out += self._header(bytes(buffer[at : at + BLOCK]))
                at += BLOCK
        self._buffer = bytearray(buffer[at:])
        return bytes(out)

    def close(self) -> None:
        if self._passing or self._extension is not None or self._buffer:
            raise TarError("the tar stream ended inside a member")

    def _extended(self, header: bytes, data: bytes) -> None:
        kind = header[156:157]
        length = _size(header)
        if kind == _PAX:
            self._pax = (header, _pax_records(data[:length]))
        else:
            self._long[kind] = _text(data[:length].split(b"\0", 1)[0])

    def _header(self, block: bytes) -> bytes:
        if block == bytes(BLOCK):
            self._ended = True  # the end of the archive: the rest passes as it is
            return block
        kind, size = block[156:157], _size(block)
        if kind in (_PAX, _LONGNAME, _LONGLINK):
            self._extension = (block, _padded(size))
            return b""
        if kind == _GLOBAL:
            self._passing, self._dropping = _padded(size), False
            return block
        pax_header, records = self._pax if self._pax is not None else (None, [])
        long, self._pax, self._long = self._long, None, {}
        found = dict(records)
        if "size" in found:  # a file over 8 GiB: its size in a pax record
            size = _number(found["size"])
        name = _field(block, 0, 100)
        if block[257:265] == _POSIX and block[345] != 0:
            name = f"{_field(block, 345, 500)}/{name}"
        name = long.get(_LONGNAME, _text(found["path"]) if "path" in found else name)
        new = self._rename(name)
        self._passing, self._dropping = _padded(size), new is None
        if new is None:
            return b""
        self.members += 1
        if kind in (b"0", b"\0", b"7"):
            self.file_bytes += size
        header = bytearray(block)
        kept = [(k, v) for k, v in records if k not in ("path", "linkpath")]
        kept += self._named(header, new, ("path" in found or _LONGNAME in long))
        if kind == _HARDLINK:
            target = self._rename(self._link(block, found, long))
            if target is None:
                raise TarError(f"a hard link to the stream's top: {name!r}")
            kept += self._linked(header, target)
        elif "linkpath" in found or _LONGLINK in long:  # a symbolic link's target: as it was
            kept += self._linked(header, self._link(block, found, long))
        ahead = b""
        if kept:
            data = _pax_data(kept)
            ahead = _pax_header(pax_header, data) + data + bytes(_padded(len(data)) - len(data))
        return ahead + _checksummed(header)

    @staticmethod
    def _link(block: bytes, found: dict[str, bytes], long: dict[bytes, str]) -> str:
        link = _text(found["linkpath"]) if "linkpath" in found else _field(block, 157, 257)
        return long.get(_LONGLINK, link)

    @staticmethod
    def _named(header: bytearray, name: str, recorded: bool) -> list[tuple[str, bytes]]:
        """The header's name fields set to `name` where it fits; the pax record when it
        does not, or when the original said it in one."""
        raw = name.encode("utf-8", "surrogateescape")
        posix = header[257:265] == _POSIX
        if posix:
            header[345:500] = bytes(155)
        split = _split(raw) if posix and len(raw) > 100 else None
        if split is not None:
            header[345 : 345 + len(split[0])] = split[0]
            raw_name = split[1]
        else:
            raw_name = raw[:100]
        header[0:100] = raw_name + bytes(100 - len(raw_name))
        fits = len(raw) <= 100 or split is not None
        return [] if fits and not recorded else [("path", raw)]

    @staticmethod
    def _linked(header: bytearray, target: str) -> list[tuple[str, bytes]]:
        raw = target.encode("utf-8", "surrogateescape")
        header[157:257] = raw[:100] + bytes(100 - len(raw[:100]))
        return [] if len(raw) <= 100 else [("linkpath", raw)]
