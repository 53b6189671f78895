"""`minidock secrets edit FILE`: an age-encrypted secret document opened in the editor and
encrypted again (docs/secrets.md#editing-an-age-file); `minidock secrets check FILE`: which
services' running tasks hold an older value than the file's sources give now
(docs/secrets.md#rotation).

The document is decrypted into a private temporary directory (0700; under /dev/shm when
there is one, so the plain text stays in memory), as a 0600 file; the editor runs on it;
an unchanged document writes nothing; a changed one is checked (dotenv or a JSON object
of strings, as `age_file` sources read it), encrypted to every recipient of the recipients
file into a temporary file beside FILE, and renamed over it (atomic). The plain copy is
overwritten and removed whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from minidock.model import Container, Service, looks_secret
from minidock.observe import observe
from minidock.spec import SpecError
from minidock.spec.agefiles import DEFAULT_IDENTITY, check_document, decrypt, encrypt
from minidock.spec.errors import Part
from minidock.store import StateLocation, Store
from minidock.usecases.access import load_spec, read_desired, reading, require_applied
from minidock.usecases.clusters import home
from minidock.usecases.outcomes import BadInput, ExitCode
from minidock.usecases.runtime import Runtime, connected

__all__ = ["EditOutcome", "SecretsCheckOutcome", "ServiceSecrets", "check_secrets", "edit_age_file"]

# memory, not disk, for the plain copy; mkdtemp makes a 0700 directory of its own there
_SHM = "/dev/shm"  # noqa: S108


@dataclass(frozen=True)
class EditOutcome:
    """What `secrets edit` did: `changed` False when the document was left as it was."""

    file: Path
    changed: bool
    recipients: Path
    exit_code: ExitCode = ExitCode.OK


def edit_age_file(
    file: Path,
    *,
    identity: str | None = None,
    recipients: Path | None = None,
    editor: str | None = None,
) -> EditOutcome:
    """Decrypt `file` (a new one starts empty), edit it, encrypt it to the recipients
    (`recipients`, else FILE.recipients), replacing it atomically."""
    to = _recipients(file, recipients)
    key = os.path.expanduser(identity or DEFAULT_IDENTITY)
    plain = _decrypted(file, key) if file.exists() else ""
    with _private_copy(file, plain) as copy:
        _run_editor(editor or _default_editor(), copy, file)
        edited = copy.read_text(encoding="utf-8")
    if edited == plain:
        return EditOutcome(file, changed=False, recipients=to)
    problem = check_document(edited, str(file))
    if problem is not None:
        raise BadInput(f"{problem}: nothing was written; run the edit again to fix it")
    _replace(file, edited, to)
    return EditOutcome(file, changed=True, recipients=to)


def _fail(parts: Sequence[Part], message: str) -> SpecError:
    return SpecError("secrets edit", "", message)


def _recipients(file: Path, given: Path | None) -> Path:
    beside = file.with_name(file.name + ".recipients")
    chosen = given if given is not None else beside
    if not chosen.is_file():
        if given is not None:
            raise BadInput(f"--recipients-file {given}: not found")
        raise BadInput(
            f"{file}: no recipients to encrypt to: put one age recipient a line in {beside} "
            f"(`age-keygen -y KEY > {beside}` for your own key), or give --recipients-file"
        )
    return chosen


def _decrypted(file: Path, key: str) -> str:
    if not os.path.isfile(key):
        raise BadInput(f"age identity not found: {key} (give --identity KEY)")
    try:
        return decrypt(str(file), (key, None), (), _fail, str(file.parent.resolve()))
    except SpecError as exc:
        raise BadInput(f"{file}: {exc.message}") from None


@contextlib.contextmanager
def _private_copy(file: Path, plain: str) -> Iterator[Path]:
    """A 0600 file holding `plain`, in a 0700 directory of its own; overwritten with
    zeros and removed on the way out."""
    shm = _SHM if os.access(_SHM, os.W_OK | os.X_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="minidock-secrets-", dir=shm))
    name = file.name.removesuffix(".age") or "secrets"
    copy = folder / name
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(plain)
        yield copy
    finally:
        with contextlib.suppress(OSError):
            size = copy.stat().st_size
            with open(copy, "r+b") as fh:
                fh.write(b"\0" * size)
        shutil.rmtree(folder, ignore_errors=True)


def _default_editor() -> str:
    return os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"


def _run_editor(editor: str, copy: Path, file: Path) -> None:
    argv = [*shlex.split(editor), str(copy)]
    try:
        done = subprocess.run(argv, check=False)
    except OSError as exc:
        raise BadInput(
            f"cannot run the editor {argv[0]!r} ($VISUAL, $EDITOR): {exc.strerror or exc}"
        ) from None
    if done.returncode != 0:
        raise BadInput(f"the editor exited {done.returncode}: {file} was left as it was")


def _replace(file: Path, text: str, recipients: Path) -> None:
    """`text` encrypted into a temporary file beside `file`, renamed over it."""
    folder = file.parent if str(file.parent) else Path(".")
    tmp = folder / f".{file.name}.{os.getpid()}.tmp"
    try:
        encrypt(text, str(recipients), str(tmp), (), _fail)
        if file.exists():
            os.chmod(tmp, file.stat().st_mode & 0o777)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, file)
    except SpecError as exc:
        raise BadInput(f"{file}: {exc.message}: {file} was left as it was") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


# -- secrets check ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServiceSecrets:
    """One secret-bearing service of the file: its running tasks, how many hold an older
    value (`older`, and the names of the secrets that changed: env names, paths in the
    task), and how many run a spec no stored generation holds (`unknown`). No value."""

    service: str
    running: int
    older: int = 0
    changed: tuple[str, ...] = ()
    unknown: int = 0


@dataclass(frozen=True)
class SecretsCheckOutcome:
    """`secrets check FILE`: exit 1 when a running task holds an older value."""

    file: Path
    services: tuple[ServiceSecrets, ...]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if any(s.older for s in self.services) else ExitCode.OK


async def check_secrets(
    file: Path, directory: StateLocation, runtime: Runtime, inventory: Path | None = None
) -> SecretsCheckOutcome:
    """Read every secret of FILE now (its sources run as at apply), observe the running
    tasks, and compare each task's values (those of the stored spec its label names) with
    them, by name: nothing is changed, no value or digest is shown."""
    desired = load_spec(file, inventory)
    location = home(directory, desired.cluster.name)
    require_applied(location)
    with reading(location) as store:
        stored = read_desired(store, location)
        async with connected(runtime) as executor:
            observed = await observe(executor, stored.inventory.hosts, desired.cluster.name)
        tasks = [c for c in observed.containers() if c.cluster == desired.cluster.name and c.live]
        specs = _specs(store, {(c.service, c.spec) for c in tasks})
    found = []
    for svc in desired.cluster.services:
        if not _secret_names(svc):
            continue
        own = [c for c in tasks if c.service == svc.name and c.slot > 0]
        found.append(_compare(svc, own, specs))
    return SecretsCheckOutcome(file, tuple(found))


def _compare(
    svc: Service, tasks: Sequence[Container], specs: dict[tuple[str, str], Service]
) -> ServiceSecrets:
    now = _secret_names(svc)
    older, unknown, changed = 0, 0, set()
    for task in tasks:
        ran = specs.get((svc.name, task.spec))
        if ran is None:
            unknown += 1
            continue
        then = _secret_names(ran)
        differ = {name for name in now.keys() | then.keys() if now.get(name) != then.get(name)}
        if differ:
            older += 1
            changed |= differ
    return ServiceSecrets(svc.name, len(tasks), older, tuple(sorted(changed)), unknown)


def _secret_names(svc: Service) -> dict[str, str]:
    """Each secret of a service by its name (env name, or path in the task for a file):
    its value with, for a file, its owner and mode. Compared here, never shown."""
    named = dict(svc.secrets)
    named |= {k: v for k, v in svc.env if looks_secret(k)}
    named |= {f.target: f"{f.uid}:{f.gid}:{f.mode:o}:{f.value}" for f in svc.secret_files}
    return named


def _specs(store: Store, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Service]:
    """The stored spec of each (service, spec hash) in `wanted` that one is found for: the
    controller's current and previous specs, then the generations, newest first."""
    found: dict[tuple[str, str], Service] = {}

    def take(svc: Service | None) -> None:
        if svc is not None and (key := (svc.name, svc.spec_hash())) in wanted:
            found.setdefault(key, svc)

    for ss in store.load().services.values():
        take(ss.spec)
        take(ss.previous)
    gen = store.next_generation_id() - 1
    while gen > 0 and wanted - found.keys():
        cluster = store.generation(gen)
        for svc in cluster.services if cluster is not None else ():
            take(svc)
        gen -= 1
    return found
