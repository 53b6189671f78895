"""restic on the controller (Debian's `restic`, 0.14): a repository made when missing, a
stream taken as one file of a snapshot (`backup --stdin`), snapshots listed, retention
(`forget --prune`), and a snapshot's file streamed back out (`dump`) for a restore.

The repository and its password reach restic in its environment (`RESTIC_REPOSITORY`,
`RESTIC_PASSWORD`), never on its command line: `ps` shows any user of the controller every
argv, and a backend URL may hold credentials too. The password is masked in every line
restic prints that MiniDock shows. A stream that fails before its end kills restic before
its standard input closes, so no snapshot of part of a volume is ever saved.

restic's exclusive lock (prune) and its shared ones (backup) are its own: MiniDock runs one
restic command at a time per repository (`Repository.lock`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from minidock.model import Keep

__all__ = [
    "PROGRAM",
    "Repository",
    "ResticError",
    "Saved",
    "Snapshot",
    "Write",
    "backup",
    "dump",
    "ensure",
    "forget",
    "restic_available",
    "snapshots",
    "stdin_name",
    "tag_filter",
]

PROGRAM = "restic"
Write = Callable[[bytes], Awaitable[None]]  # hands one chunk to restic's standard input
_STDERR_SHOWN = 300  # characters of a failed command's standard error in its one line
_NO_REPOSITORY = ("Is there a repository at the following location?", "does not exist")
_CHUNK = 1 << 20  # the most one chunk of a dump carries
_PIPE_SIZE = 1 << 20  # restic dump's pipe (Linux's most for any user, pipe-max-size)
_TAR_BLOCK = 512  # a dump's first chunk holds at least this much: a whole tar header


class ResticError(Exception):
    """A restic command failed: one line naming it, restic's own words masked."""


@dataclass(frozen=True)
class Repository:
    """Where snapshots go, and the password that opens them (never shown)."""

    location: str
    password: str = field(repr=False)

    def env(self) -> dict[str, str]:
        """restic's environment: the controller's, with this repository and its password
        (and none another repository's settings could leak in)."""
        own = ("RESTIC_PASSWORD", "RESTIC_REPOSITORY")
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(own)}
        return inherited | {"RESTIC_REPOSITORY": self.location, "RESTIC_PASSWORD": self.password}

    def mask(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text

    def lock(self) -> asyncio.Lock:
        """One lock per repository location in this process (restic's own lock would make a
        second command fail, not wait)."""
        return _LOCKS.setdefault(self.location, asyncio.Lock())


_LOCKS: dict[str, asyncio.Lock] = {}


@dataclass(frozen=True)
class Snapshot:
    """One snapshot as `restic snapshots --json` lists it, its MiniDock tags as a map."""

    id: str
    short_id: str
    time: str  # RFC 3339, as restic writes it
    hostname: str
    paths: tuple[str, ...]
    tags: tuple[tuple[str, str], ...]

    def tag(self, key: str) -> str:
        return dict(self.tags).get(key, "")

    @property
    def filename(self) -> str:
        """The one file of a snapshot MiniDock took (its `--stdin-filename`)."""
        return self.paths[0] if self.paths else ""


@dataclass(frozen=True)
class Saved:
    """What one `backup --stdin` saved: the snapshot's id, bytes read, bytes added to the
    repository (after deduplication and compression), seconds restic took."""

    snapshot: str
    size: int
    added: int
    seconds: float


def stdin_name(volume: str) -> str:
    """The one file of a volume's snapshot (`--stdin-filename`): `VOLUME.tar`, which
    restic keeps as `/VOLUME.tar`; a restore dumps it back."""
    return f"{volume}.tar"


def restic_available() -> bool:
    return shutil.which(PROGRAM) is not None


def tag_filter(tags: Mapping[str, str]) -> list[str]:
    """`--tag k=v,k=v`: snapshots holding every one of `tags` (restic's AND within one)."""
    return ["--tag", ",".join(f"{k}={v}" for k, v in tags.items())] if tags else []


async def _start(
    repo: Repository,
    args: Iterable[str],
    *,
    stdin: bool = False,
    stdout: int = asyncio.subprocess.PIPE,
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            PROGRAM,
            *args,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=asyncio.subprocess.PIPE,
            env=repo.env(),
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ResticError(
            f"{PROGRAM} is not installed on the controller: apt-get install restic"
        ) from None


def _failure(repo: Repository, args: list[str], stderr: bytes, status: int | None) -> ResticError:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("Fatal:")), lines[-1] if lines else "")
    said = repo.mask(said.removeprefix("Fatal: "))[:_STDERR_SHOWN]
    return ResticError(f"restic {args[0]} failed (exit {status}): {said or 'no output'}")


async def _run(repo: Repository, args: list[str]) -> bytes:
    """restic's standard output of `args`; ResticError when it fails."""
    proc = await _start(repo, args)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise _failure(repo, args, err, proc.returncode)
    return out


async def ensure(repo: Repository) -> bool:
    """Make the repository when there is none (True: it was made); a wrong password or an
    unreachable backend is a ResticError."""
    proc = await _start(repo, ["cat", "config"])
    _, err = await proc.communicate()
    if proc.returncode == 0:
        return False
    if not any(sign in err.decode(errors="replace") for sign in _NO_REPOSITORY):
        raise _failure(repo, ["cat"], err, proc.returncode)
    await _run(repo, ["init"])
    return True


async def backup(
    repo: Repository,
    filename: str,
    tags: Mapping[str, str],
    host: str,
    feed: Callable[[Write], Awaitable[object]],
) -> Saved:
    """One snapshot of the stream `feed` writes (through the `Write` it is given) as the
    file `filename`, tagged `k=v` for each of `tags`, its hostname `host`. A `feed` that
    raises kills restic first: no snapshot is saved, and the error goes on."""
    args = ["backup", "--stdin", "--stdin-filename", filename, "--host", host, "--json"]
    args += tag_filter(tags)
    proc = await _start(repo, args, stdin=True)
    assert proc.stdin is not None
    assert proc.stdout is not None
    reading = asyncio.ensure_future(_read_all(proc))

    async def write(chunk: bytes) -> None:
        assert proc.stdin is not None
        proc.stdin.write(chunk)
        await proc.stdin.drain()

    try:
        await feed(write)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(BaseException):
            await reading
            await proc.wait()
        raise
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()
        await proc.stdin.wait_closed()
    out, err = await reading
    if await proc.wait() != 0:
        raise _failure(repo, args, err, proc.returncode)
    return _saved(repo, out)


async def _read_all(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
    return out, err


def _saved(repo: Repository, out: bytes) -> Saved:
    for line in reversed(out.decode(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict) and doc.get("message_type") == "summary":
                return Saved(
                    snapshot=str(doc["snapshot_id"]),
                    size=int(doc.get("total_bytes_processed", 0)),
                    added=int(doc.get("data_added", 0)),
                    seconds=float(doc.get("total_duration", 0.0)),
                )
    raise ResticError(f"restic backup printed no summary: {repo.mask(out.decode()[-200:])}")


async def snapshots(repo: Repository, tags: Mapping[str, str] | None = None) -> list[Snapshot]:
    """The repository's snapshots holding every one of `tags`, oldest first."""
    out = await _run(repo, ["snapshots", "--json", *tag_filter(tags or {})])
    found = [_snapshot(doc) for doc in json.loads(out or b"[]") or []]
    return sorted(found, key=lambda s: s.time)


def _snapshot(doc: dict[str, object]) -> Snapshot:
    raw_tags = doc.get("tags") or []
    assert isinstance(raw_tags, list)
    pairs = tuple(tuple(str(t).partition("=")[::2]) for t in raw_tags)
    paths = doc.get("paths") or []
    assert isinstance(paths, list)
    return Snapshot(
        id=str(doc["id"]),
        short_id=str(doc.get("short_id", str(doc["id"])[:8])),
        time=str(doc["time"]),
        hostname=str(doc.get("hostname", "")),
        paths=tuple(str(p) for p in paths),
        tags=tuple((k, v) for k, v in pairs),
    )


async def forget(repo: Repository, keep: Keep, tags: Mapping[str, str]) -> list[str]:
    """`forget --prune` of the snapshots holding every one of `tags`, taken as one group,
    keeping what `keep` keeps; the ids removed (none when `keep` has no rule)."""
    rules = keep.rules()
    if not rules:
        return []
    args = ["forget", "--prune", "--group-by", "", "--json", *tag_filter(tags)]
    for rule, count in rules:
        args += [f"--keep-{rule}", str(count)]
    out = await _run(repo, args)
    text = out.decode(errors="replace")
    start = text.find("[")  # prune's own lines follow the JSON document
    groups = json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else []
    return [str(s["id"]) for g in groups or [] for s in g.get("remove") or []]


async def dump(repo: Repository, snapshot: str, filename: str) -> AsyncGenerator[bytes, None]:
    """The bytes of `filename` in `snapshot` (`restic dump`), as a restore streams them
    into a volume: each chunk all that has come (at most 1 MiB), the first one at least a
    tar header (512 bytes) when the file is that long. restic writes into a pipe of 1 MiB
    (not Linux's 64 KiB), and up to 2 MiB more is read ahead while the consumer is busy
    with the last chunk: restic is not stopped while the SSH stream sends
    (docs/benchmarks.md, "Volumes"). A failure (after the last chunk) is a ResticError.
    Leaving the iteration early stops restic."""
    args = ["dump", snapshot, filename]
    read_end, write_end = os.pipe()
    pipe = os.fdopen(read_end, "rb", buffering=0)
    try:
        _widen(write_end)
        proc = await _start(repo, args, stdout=write_end)
    except BaseException:
        pipe.close()
        raise
    finally:
        os.close(write_end)  # restic holds its own copy: its exit ends the stream
    assert proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())
    reader = asyncio.StreamReader(limit=_CHUNK)
    transport: asyncio.BaseTransport | None = None
    try:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        first = await reader.read(_CHUNK)
        while first and len(first) < _TAR_BLOCK and (more := await reader.read(_CHUNK)):
            first += more
        if first:
            yield first
            while chunk := await reader.read(_CHUNK):
                yield chunk
        if await proc.wait() != 0:
            raise _failure(repo, args, await errors, proc.returncode)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if not errors.done():
            errors.cancel()
        if transport is not None:
            transport.close()
        pipe.close()


def _widen(fd: int) -> None:
    """The pipe of `fd` made to hold `_PIPE_SIZE` bytes, where Linux allows it (elsewhere,
    or over a lowered pipe-max-size, it keeps its size)."""
    setting = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setting is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, setting, _PIPE_SIZE)
