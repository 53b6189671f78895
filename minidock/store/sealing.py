"""Secret values at rest: sealed with AES-256-GCM (`cryptography`'s AEAD) under a key that
lives outside the store, so no state file, WAL, backup or etcd key holds one in clear.

A sealed value is one string, `minidock-sealed:1:KEYID:BASE64(nonce + ciphertext + tag)`:
KEYID (the first 8 bytes of the key's SHA-256, in hex) names the key without revealing it,
so a controller given the wrong key file says so instead of failing obscurely; the nonce is
random, so equal secrets do not look equal. A value without the prefix is a clear value
written by an older MiniDock: it is read as it is and sealed on the next write.

The key file is 32 random bytes in base64 on one line, mode 0600: DIR/secrets.key for a
state directory, the file named by $MINIDOCK_KEY_FILE for an etcd state (each controller
is given a copy). It is made on first use, and only while the store holds nothing sealed:
a store that holds sealed values and a missing key file is refused, never given a new key.
See docs/state.md and docs/ha.md.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from minidock.store.base import StoreUnusable

__all__ = [
    "KEY_ENV",
    "KEY_NAME",
    "SEALED",
    "KeyProblem",
    "SecretBox",
    "is_sealed",
    "key_box",
]

KEY_ENV = "MINIDOCK_KEY_FILE"  # the key file of an etcd state (each controller has a copy)
KEY_NAME = "secrets.key"  # a state directory's own key file, beside state.db
SEALED = "minidock-sealed:1:"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_ID_BYTES = 8
# what HKDF derives the spec hash's digest key for: a key of its own, never the sealing key
_DIGEST_INFO = b"minidock spec-hash secret digest v1"


class KeyProblem(StoreUnusable):
    """The key file is missing, unreadable, not a key, open to others, or not the key the
    store's secrets were sealed with (the CLI exits 2: the operator's set-up to fix)."""


def is_sealed(text: str) -> bool:
    """Whether `text` is a sealed value (else it is a clear one from an older state)."""
    return text.startswith(SEALED)


@dataclass(frozen=True)
class SecretBox:
    """One key, and the file it came from (for messages): seals and opens values."""

    path: Path
    key: bytes = field(repr=False)

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.key).digest()[:_ID_BYTES].hex()

    @property
    def digest_key(self) -> bytes:
        """The key of the spec hash's secret digest (HMAC-SHA256, `model.Service.keyed`):
        derived from this key with HKDF-SHA256, so one key file serves both and neither
        use weakens the other; a label made under it says nothing without the key file."""
        return HKDF(algorithm=SHA256(), length=_KEY_BYTES, salt=None, info=_DIGEST_INFO).derive(
            self.key
        )

    def seal(self, value: str) -> str:
        """`value` sealed (a fresh nonce each time)."""
        nonce = os.urandom(_NONCE_BYTES)
        aad = (SEALED + self.key_id).encode()
        sealed = AESGCM(self.key).encrypt(nonce, value.encode(), aad)
        return f"{SEALED}{self.key_id}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, text: str) -> str:
        """The value `text` seals; a clear value (an older state's) as it is."""
        if not is_sealed(text):
            return text
        key_id, _, body = text[len(SEALED) :].partition(":")
        if key_id != self.key_id:
            raise KeyProblem(
                f"the state's secrets are sealed with key {key_id}, but {self.path} holds key "
                f"{self.key_id}: give this controller the state's key file (docs/state.md)"
            )
        try:
            raw = base64.b64decode(body, validate=True)
            aad = (SEALED + key_id).encode()
            plain = AESGCM(self.key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], aad)
        except (binascii.Error, ValueError, InvalidTag):
            raise KeyProblem(
                f"a sealed secret in the state does not open with key {self.key_id} "
                f"({self.path}): the state was altered; restore it from a backup"
            ) from None
        return plain.decode()


def key_box(path: Path, *, holds_sealed: Callable[[], bool]) -> SecretBox:
    """The key at `path`; made (0600, atomically) when missing, unless the store it is for
    `holds_sealed()` values already (asked only then): a new key could open none of them."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    if holds_sealed():
        raise KeyProblem(
            f"the state holds sealed secrets but the key file {path} is missing: restore it "
            "(from a backup or another controller); a new key cannot open them"
        )
    return _make(path)


def _read(path: Path) -> SecretBox:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise KeyProblem(f"cannot read the key file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_IMODE(st.st_mode) & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise KeyProblem(
                f"the key file {path} is accessible by group or others (mode {mode:04o}): "
                f"run chmod 600 {path}"
            )
        text = f.read(4096)
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        raise KeyProblem(f"{path} is not a MiniDock key file (32 bytes in base64 on one line)")
    return SecretBox(path, key)


def _make(path: Path) -> SecretBox:
    """A new random key written to a private temporary file, then linked into place: two
    controllers making it at once end with one key, each reading the winner's."""
    key = AESGCM.generate_key(bit_length=_KEY_BYTES * 8)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(base64.b64encode(key).decode() + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except OSError as exc:
        raise KeyProblem(f"cannot make the key file {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return _read(path)
