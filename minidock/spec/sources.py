"""Secret sources that run a program on the controller at apply (docs/secrets.md):
`{ command = ["op", "read", "op://prod/db/password"] }`, whose standard output is the
value, and (minidock.spec.agefiles) `{ age_file = ..., key = ... }`.

A command runs with the controller's environment, in the cluster file's directory, with
no standard input, in a process group of its own, for at most its `timeout` (default
`DEFAULT_TIMEOUT`): past it the whole group is killed. Within one load of a cluster file
(`one_run`) each command runs once, however many keys name it. Its output is never logged
and never shown; on failure, one line names the command and shows its standard error with
every secret value masked, its own output included: the load's reader reads every other
source of the file after a failure (`reread_failures`), so a value read later in the file (an
`{ env }` one a `set -x` trace shows) is masked too. The value travels like any secret's:
the env-file on stdin, never a remote command line.

`check_secret_mode`, the rule for a secret file's mode, is here too: the secret files
(minidock.spec.secretfiles) and the age identities (minidock.spec.agefiles) both read it,
and secretfiles imports agefiles, so it lives below both.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from minidock import units
from minidock.spec.errors import Fail, Part, SpecError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_OUTPUT_BYTES",
    "cached_document",
    "check_secret_mode",
    "command_timeout",
    "command_value",
    "masked",
    "one_run",
    "remember",
    "reread_failures",
    "run_program",
]

DEFAULT_TIMEOUT = 30.0  # seconds a secret command may take: `timeout = "2m"` gives more
MAX_OUTPUT_BYTES = 500 * 1024  # as for a secret file: the state keeps each value, sealed
_STDERR_SHOWN = 300  # characters of a failed command's standard error in its one line
MASK = "***"
log = logging.getLogger("minidock.spec")


@dataclass(frozen=True)
class _Failure:
    """A program that failed, and its error: the standard error it shows is masked again
    once every secret value of the load is known (`reread_failures`)."""

    error: SpecError
    shown: str  # its standard error as the error shows it
    err: str  # its standard error, as it printed it
    out: str  # its standard output: a value it printed before failing is masked too


@dataclass
class _Run:
    """What one load of a cluster file has fetched: each command's output, by its argv
    and directory, every value read (to mask a command's standard error), and each program
    that failed (run once: a second source naming it gets its error again)."""

    outputs: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)
    documents: dict[tuple[str, ...], dict[str, str]] = field(default_factory=dict)
    values: set[str] = field(default_factory=set)
    failures: dict[tuple[str, tuple[str, ...]], _Failure] = field(default_factory=dict)


# The run under way, set by `one_run` around one load and reset after it. It stays ambient
# (docs/architecture.md, "Ambient values"): a secret source is read deep in the spec's
# parser (a service's env, secrets, secret files and registry password, a backup password,
# an inventory's password command, an age file), and passing the run down would add a
# parameter to every function between `cluster.load` and those readers.
_RUN: ContextVar[_Run | None] = ContextVar("minidock_secret_run", default=None)


@contextlib.contextmanager
def one_run() -> Iterator[None]:
    """One load of a cluster file (and its inventory): a command named by several keys
    runs once. Within a run already under way, that run goes on."""
    if _RUN.get() is not None:
        yield
        return
    token = _RUN.set(_Run())
    try:
        yield
    finally:
        _RUN.reset(token)


def cached_document(key: tuple[str, ...], read: Callable[[], dict[str, str]]) -> dict[str, str]:
    """A decrypted document (minidock.spec.agefiles) read once per run under `key`."""
    run = _RUN.get()
    if run is None:
        return read()
    if key not in run.documents:
        run.documents[key] = read()
    return run.documents[key]


def remember(value: str) -> None:
    """A secret value read in this run, masked in any later command's error."""
    run = _RUN.get()
    if run is not None and value:
        run.values.add(value)


def reread_failures(read_the_rest: Callable[[], None]) -> None:
    """After a load failed: when a program failed in it, `read_the_rest` reads every
    secret source of the file (its own failures ignored) and each failure's error shows its
    standard error masked with every value now known. Nothing when no program failed."""
    run = _RUN.get()
    if run is None or not run.failures:
        return
    failures = list(run.failures.values())
    read_the_rest()
    for failure in failures:
        error = failure.error
        error.message = error.message.replace(failure.shown, _shown(failure.err, failure.out))


def _shown(err: str, out: str) -> str:
    """A failed program's standard error on one line, every secret value of this run and
    its own output masked, then cut to `_STDERR_SHOWN` characters."""
    said = " ".join(masked(err, [out]).split())
    if len(said) > _STDERR_SHOWN:
        said = said[: _STDERR_SHOWN - 3] + "..."
    return said or "(nothing on its standard error)"


def masked(text: str, values: Sequence[str] = ()) -> str:
    """`text` with every secret value of this run (and `values`, each whole and line by
    line) replaced by `***`, longest first."""
    run = _RUN.get()
    given = {*(run.values if run else ()), *values}
    found = {part.strip() for v in given for part in (v, *v.splitlines())}
    for value in sorted((v for v in found if v), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def check_secret_mode(path: str, mode: int, where: Sequence[Part], fail: Fail) -> None:
    """A secret file writable by every user is refused (anyone could swap the secret); one
    the group or others may read (0644, 0664: what a git checkout leaves) is a warning
    naming `chmod 600`, since it is read only here, on the controller, and sealed."""
    if mode & 0o002:
        raise fail(where, f"{path} is writable by every user: chmod 600 {path}")
    if mode & 0o077:
        problem = fail(
            where,
            f"{path} is open to the group or others (mode {mode & 0o777:04o}): chmod 600 {path}",
        )
        log.warning("%s", problem)


def command_value(
    source: dict[str, Any], where: tuple[Part, ...], fail: Fail, base: str, *, exact: bool
) -> str:
    """The value a `{ command = [...], timeout = ... }` source prints: its standard output,
    one trailing newline dropped unless `exact` (a secret file keeps every byte)."""
    argv = tuple(str(a) for a in source["command"])
    if not argv[0]:
        raise fail((*where, "command", 0), "the program's name is empty: give its name or path")
    timeout = command_timeout(source, where, fail)
    run = _RUN.get()
    cached = None if run is None else run.outputs.get((base, argv))
    if cached is None:
        cached = run_program(argv, (*where, "command"), fail, base, timeout=timeout)
        if not cached.strip():
            raise fail((*where, "command"), f"`{_name(argv)}` printed nothing on its output")
        if run is not None:
            run.outputs[(base, argv)] = cached
    remember(cached)
    return cached if exact or not cached.endswith("\n") else cached[:-1]


def command_timeout(source: dict[str, Any], where: tuple[Part, ...], fail: Fail) -> float:
    """A source's `timeout` in seconds (default `DEFAULT_TIMEOUT`), more than 0."""
    timeout = units.parse_duration(source.get("timeout", DEFAULT_TIMEOUT))
    if timeout <= 0:
        raise fail((*where, "timeout"), 'must be more than 0s: give one like "30s"')
    return timeout


def run_program(
    argv: Sequence[str],
    where: Sequence[Part],
    fail: Fail,
    base: str,
    *,
    timeout: float,
    stdin: bytes | None = None,
    hint: str = "",
    noise: Sequence[str] = (),
) -> str:
    """Run `argv` on the controller (see the module): its standard output, or one line
    naming it."""
    name = _name(argv)
    run = _RUN.get()
    failed = None if run is None else run.failures.get((base, tuple(argv)))
    if failed is not None:
        raise failed.error  # a program runs once per load, failing or not
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=base,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,  # a timeout kills what it started too
        )
    except FileNotFoundError:
        raise fail(where, f"`{name}` is not found on the controller: install it{hint}") from None
    except OSError as exc:
        raise fail(where, f"cannot run `{name}`: {exc.strerror or type(exc).__name__}") from None
    with proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise fail(
                where,
                f"`{name}` gave no answer in {units.format_duration(timeout)} and was stopped: "
                'give it longer with timeout = "2m" beside the command',
            ) from None
    kept = [
        line
        for line in err.splitlines()
        if not line.decode(errors="replace").startswith(tuple(noise))
    ]
    if proc.returncode != 0:
        code = proc.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
        said = b"\n".join(kept).decode("utf-8", errors="replace")
        text = out.decode("utf-8", errors="replace")
        shown = _shown(said, text)
        failure = _Failure(fail(where, f"`{name}` {how}: {shown}"), shown, said, text)
        if run is not None:
            run.failures[(base, tuple(argv))] = failure
        raise failure.error
    return _output(name, out, where, fail)


def _output(name: str, out: bytes, where: Sequence[Part], fail: Fail) -> str:
    if len(out) > MAX_OUTPUT_BYTES:
        raise fail(where, f"`{name}` printed over the {MAX_OUTPUT_BYTES // 1024} KiB limit")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(where, f"`{name}` printed something that is not UTF-8 text") from None


def _name(argv: Sequence[str]) -> str:
    return os.path.basename(argv[0]) if argv else "(empty command)"
