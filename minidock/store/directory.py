"""A state directory's files, beside its database: where the directory is (one rule for
every command), its permissions (0700, this user's), the controller id, and the one-writer
lock, an flock on DIR/lock that a writer holds for a whole reconcile pass (a second writer
gets `Locked` at once; the CLI exits 75). Standard library only. See docs/state.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from minidock.store.base import StoreUnusable, WriterBusy

__all__ = [
    "CONTROLLER_ID_NAME",
    "DB_NAME",
    "ENV_STATE",
    "LOCK_NAME",
    "Locked",
    "StateError",
    "StateLock",
    "check_state_dir",
    "controller_id",
    "ensure_state_dir",
    "private_file",
    "state_dir",
    "tighten_sidecars",
    "usable",
]

DB_NAME = "state.db"
LOCK_NAME = "lock"
ENV_STATE = "MINIDOCK_STATE"

DIR_MODE = 0o700
FILE_MODE = 0o600


class StateError(StoreUnusable):
    """The state directory or database cannot be used (e.g. written by a newer MiniDock)."""


class Locked(WriterBusy):
    """Another process holds the state directory's lock (the use cases decide whether to
    wait; exit 75, EX_TEMPFAIL, when they give up: cron skips this run)."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"state directory {directory} is locked by another minidock process ({holder})"
        )


# -- the state directory ----------------------------------------------------------------------
def state_dir(explicit: str | None) -> Path:
    """--state DIR, else $MINIDOCK_STATE, else .minidock/ in the working directory: one
    rule for every command, so `apply` and a later `status` or cron `reconcile` run from
    the same place find the same state. An existing directory must be private to this
    user (`check_state_dir`)."""
    if explicit:
        directory = Path(explicit).expanduser().absolute()
    elif from_env := os.environ.get(ENV_STATE):
        directory = Path(from_env).expanduser().absolute()
    else:
        directory = Path.cwd() / ".minidock"
    check_state_dir(directory)
    return directory


def check_state_dir(directory: Path) -> None:
    """Refuse an existing state directory that is not private to this user: owned by
    another user, or open to group or others (its events and specs hold the cluster's
    secrets). A missing one is fine: `ensure_state_dir` creates it 0700."""
    try:
        st = directory.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateError(f"state directory {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"state path {directory} exists and is not a directory")
    if st.st_uid != os.geteuid():
        owner, me = _user(st.st_uid), _user(os.geteuid())
        raise StateError(
            f"state directory {directory} is owned by {_shown(owner, st.st_uid)}, not by this "
            f"user ({_shown(me, os.geteuid())}): run MiniDock as its owner, "
            f"`sudo -u {owner or f'#{st.st_uid}'} minidock ...`"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise StateError(
            f"state directory {directory} is accessible by group or others "
            f"(mode {mode:04o}): run chmod 700 {directory}"
        )


def _user(uid: int) -> str:
    """The user name of `uid`, or "" when the passwd database has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def _shown(name: str, uid: int) -> str:
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def ensure_state_dir(directory: Path) -> Path:
    """Create `directory` (mode 0700) if missing; an existing one must be private to this
    user (`check_state_dir`) and is otherwise left as it is."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=DIR_MODE)
    except FileExistsError:
        check_state_dir(directory)
    except OSError as exc:
        raise StateError(f"cannot create state directory {directory}: {exc.strerror}") from None
    else:
        os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask; be exact
    return directory


CONTROLLER_ID_NAME = "controller-id"


def controller_id(directory: Path, given: str | None = None) -> str:
    """This state directory's controller id (made once, random), labelled on every task it
    starts. It lives beside state.db, not in it: a lost state.db keeps its identity, so an
    apply adopts the tasks at once, while another directory's store needs `--adopt`.
    `given`: the id to take when none was made yet (`state restore` on a new controller);
    the id there wins when one was."""
    path = directory / CONTROLLER_ID_NAME
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    ensure_state_dir(directory)
    new = given or os.urandom(6).hex()
    tmp = path.with_name(f".{CONTROLLER_ID_NAME}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(new + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return new


def private_file(path: Path) -> None:
    """Create `path` 0600 if missing, and take group/other bits off it if present."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        _tighten(fd)
    finally:
        os.close(fd)


def _tighten(fd: int) -> None:
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, FILE_MODE)


def tighten_sidecars(db: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        side = db.with_name(db.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(side.stat().st_mode) & 0o077:
                os.chmod(side, FILE_MODE)


@contextlib.contextmanager
def usable(path: Path) -> Iterator[None]:
    """A state file this user may not open or write, as a one-line StateError."""
    try:
        yield
    except PermissionError as exc:
        raise StateError(f"cannot use {exc.filename or path}: permission denied") from None
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc) and "unable to open" not in str(exc):
            raise
        raise StateError(f"cannot use {path}: {exc}") from None


# -- the lock ---------------------------------------------------------------------------------
class StateLock:
    """An exclusive, non-blocking flock on DIR/lock, held by the one writer.

    The holder writes its pid into the file so `Locked` can name it. The kernel drops the
    lock when the holder exits, even by kill -9, so a crash never leaves a stale lock.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock now or raise `Locked`; never waits."""
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this StateLock")
        ensure_state_dir(self.directory)
        with usable(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            _tighten(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise Locked(self.directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale pid for the next reader
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
