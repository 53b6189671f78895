"""Secrets never at rest in clear (issue 19.3): after an apply, a pass and a rollback, no
byte of the SQLite files (the database, its WAL, a `sqlite3 .backup` of it) and no value
any etcd key ever held contains a secret value, a secret-looking env value or a registry
password; they are sealed with a key kept outside the store (minidock.store.sealing), and
an older state written in clear is sealed by its first writer."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minidock import usecases
from minidock.cli import app
from minidock.model import SecretFile
from minidock.store import StateLocation, codec, parse_location
from minidock.store.sealing import KEY_ENV, KEY_NAME
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode
from tests.behaviour import Clock
from tests.etcd import EtcdCluster, history
from tests.fakes import FakeDocker
from tests.unit.test_usecases import INVENTORY, FakeClock, run

DB_SECRET = "db-pa55-9f3c1e"  # a `secrets` value, from a file
DB_SECRET_2 = "db-pa55-second-77ab"  # the same secret, changed in generation 2
INLINE_TOKEN = "inline-tok-5d2a"  # an env value under a secret-looking key
REGISTRY_PASSWORD = "reg-pw-c41d"
FILE_LINES = ("-----BEGIN KEY-----", "tls-key-line-8e1f07", "-----END KEY-----")
FILE_SECRET = "\n".join(FILE_LINES) + "\n"  # a `secret_files` value: a file, several lines
SECRETS = (DB_SECRET, DB_SECRET_2, INLINE_TOKEN, REGISTRY_PASSWORD, FILE_LINES[1])
IMAGE = "reg.test:5000/db"

STACK = """\
cluster = "rest"
inventory = "inventory.toml"

[services.db]
image = "{image}"
replicas = 2
env = {{ MODE = "plain-config", API_TOKEN = "{token}" }}
secrets = {{ DB_PASSWORD = {{ file = "db.secret" }} }}
update = {{ monitor = "0s" }}
secret_files = {{ "/run/secrets/tls.key" = {{ file = "tls.secret", uid = 70, mode = "0400" }} }}

[registries."reg.test:5000"]
username = "bot"
password = {{ file = "registry.secret" }}
"""


@dataclass
class Fleet:
    """A cluster file with secrets, in-memory engines behind a registry that wants them."""

    root: Path
    docker: FakeDocker
    clock: FakeClock

    def write(self, version: int, secret: str) -> Path:
        for name, text in (
            ("db.secret", secret + "\n"),
            ("registry.secret", REGISTRY_PASSWORD + "\n"),
            ("tls.secret", FILE_SECRET),
        ):
            path = self.root / name
            path.write_text(text)
            os.chmod(path, 0o600)
        file = self.root / "cluster.toml"
        file.write_text(STACK.format(image=f"{IMAGE}:{version}", token=INLINE_TOKEN))
        return file

    def runtime(self) -> usecases.Runtime:
        clock = usecases.Clock(self.clock.now, self.clock.monotonic, self.clock.sleep)
        return usecases.Runtime(self.docker.executor, clock)

    def apply(self, location: StateLocation, version: int, secret: str) -> None:
        file = self.write(version, secret)
        done = run(
            usecases.apply(file, location, self.runtime(), usecases.ignore, wait=True, timeout=60.0)
        )
        assert done.exit_code is ExitCode.OK, done

    def reconcile(self, location: StateLocation) -> None:
        done = run(usecases.reconcile(location, self.runtime(), usecases.ignore))
        assert done.exit_code is ExitCode.OK, done

    def rollback(self, location: StateLocation) -> None:
        done = run(
            usecases.rollback(
                "db", location, self.runtime(), usecases.ignore, wait=True, timeout=60.0
            )
        )
        assert done.exit_code is ExitCode.OK, done


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    clock = FakeClock()
    docker = FakeDocker(clock=Clock(clock.t), images=())
    docker.registry = {f"{IMAGE}:1", f"{IMAGE}:2"}
    docker.passwords = {("reg.test:5000", "bot"): REGISTRY_PASSWORD}
    clock.engines = docker
    return Fleet(tmp_path, docker, clock)


def leaks(blob: bytes) -> list[str]:
    """The secrets found in `blob`, in clear or in base64 (either alignment)."""
    found = []
    for secret in SECRETS:
        raw = secret.encode()
        encoded = {base64.b64encode(pad + raw)[4:-4] for pad in (b"", b"x", b"xx")}
        if raw in blob or any(e and e in blob for e in encoded):
            found.append(secret)
    return found


def sqlite_bytes(directory: Path) -> Iterator[tuple[str, bytes]]:
    """Every file of the state directory but the key, and a backup of the database made
    with SQLite's online backup (what the shell's `.backup` does)."""
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != KEY_NAME:
            yield str(path), path.read_bytes()
    backup = directory.parent / "backup.db"
    source, copy = sqlite3.connect(directory / "state.db"), sqlite3.connect(backup)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    yield str(backup), backup.read_bytes()
    backup.unlink()


def assert_sealed_directory(directory: Path) -> None:
    files = dict(sqlite_bytes(directory))
    assert files[str(directory / "state.db-wal")]  # the WAL is read too, and holds pages
    for name, blob in files.items():
        assert leaks(blob) == [], name
    key = directory / KEY_NAME
    assert key.stat().st_mode & 0o777 == 0o600


def etcd_values(cluster: EtcdCluster, prefix: str) -> Iterator[tuple[bytes, bytes]]:
    """Every value every key under `prefix` ever had (etcd's MVCC history)."""
    listed = cluster.etcdctl("get", prefix, "--prefix", "--keys-only", "-w", "json")
    assert listed.returncode == 0, listed.stderr
    keys = [base64.b64decode(kv["key"]) for kv in json.loads(listed.stdout).get("kvs", [])]
    assert keys
    for key in keys:
        for _, value in history(cluster.endpoints[0], key):
            yield key, value


def test_a_directory_state_holds_no_secret_after_apply_pass_and_rollback(
    fleet: Fleet, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with SQLiteStore.open(state) as store:  # a reader held open keeps the WAL's pages
        fleet.apply(state, 1, DB_SECRET)
        assert_sealed_directory(state)
        fleet.reconcile(state)
        assert_sealed_directory(state)
        fleet.apply(state, 2, DB_SECRET_2)
        fleet.rollback(state)
        assert_sealed_directory(state)
        spec = store.load().services["db"].spec  # and they open again, as they were
    assert spec.secrets == (("DB_PASSWORD", DB_SECRET),)
    assert ("API_TOKEN", INLINE_TOKEN) in spec.env
    assert ("MODE", "plain-config") in spec.env
    assert spec.registry_auth is not None
    assert spec.registry_auth.password == REGISTRY_PASSWORD
    assert fleet.docker.logins  # the hosts were logged in with it
    assert spec.secret_files == (SecretFile("/run/secrets/tls.key", FILE_SECRET, 70, 0, 0o400),)
    copied = [c.get("Files") for c in fleet.docker.containers()]
    assert copied
    assert all(f == {"/run/secrets/tls.key": (FILE_SECRET, 70, 0, 0o400)} for f in copied)


def test_an_etcd_state_holds_no_secret_in_any_key_or_revision(
    fleet: Fleet, etcd_cluster: EtcdCluster, etcd_url: str
) -> None:
    location = parse_location(etcd_url)
    fleet.apply(location, 1, DB_SECRET)
    fleet.reconcile(location)
    fleet.apply(location, 2, DB_SECRET_2)
    fleet.rollback(location)
    prefix = etcd_url.split("/", 3)[3].partition("?")[0]
    seen = 0
    for key, value in etcd_values(etcd_cluster, "/" + prefix):
        assert leaks(value) == [], key
        seen += 1
    assert seen > 5


# -- an older state, written in clear, is sealed by its first writer ----------------------
def clear_v1_state(fleet: Fleet, state: Path) -> None:
    """What an older MiniDock left: schema 1, every value as plain JSON."""
    fleet.apply(state, 1, DB_SECRET)
    with SQLiteStore.open(state) as store:
        snapshot = store.snapshot()
    (state / KEY_NAME).unlink()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (state / name).unlink(missing_ok=True)
    with SQLiteStore.open(state):  # the schema, then the old rows in clear
        pass
    (state / KEY_NAME).unlink()
    db = sqlite3.connect(state / "state.db")
    db.execute("PRAGMA user_version = 1")
    for g in snapshot.generations:
        db.execute(
            "INSERT INTO generations VALUES (?, ?, ?, ?)",
            (g.id, g.applied_at, g.source_path, codec.dumps(g.cluster)),
        )
    db.execute("INSERT INTO controller VALUES (1, ?)", (codec.dumps(snapshot.state),))
    db.commit()
    db.close()
    assert leaks((state / "state.db").read_bytes()) or leaks((state / "state.db-wal").read_bytes())


def test_an_older_clear_state_is_read_then_sealed_by_the_first_write(
    fleet: Fleet, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    clear_v1_state(fleet, state)
    status = run(usecases.status(state, fleet.runtime()))  # a reader reads it as it is
    assert status.exit_code is ExitCode.OK
    with SQLiteStore.open(state) as store:
        fleet.reconcile(state)  # the first writer seals it
        assert_sealed_directory(state)
        assert store.load().services["db"].spec.secrets == (("DB_PASSWORD", DB_SECRET),)
        generation = store.generation(1)
    assert generation is not None
    assert generation.services[0].secrets == (("DB_PASSWORD", DB_SECRET),)


# -- the key ------------------------------------------------------------------------------
def invoke(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_a_missing_or_wrong_key_is_one_line_and_exit_2(fleet: Fleet, tmp_path: Path) -> None:
    state = tmp_path / "state"
    fleet.apply(state, 1, DB_SECRET)
    key = state / KEY_NAME
    saved = key.read_bytes()
    key.unlink()
    code, out = invoke("status", "--state", str(state))
    assert code == 2, out
    assert out.strip().splitlines() == [
        f"minidock: the state holds sealed secrets but the key file {key} is missing: restore "
        "it (from a backup or another controller); a new key cannot open them"
    ]
    assert not key.exists()  # no new key was made for a sealed state
    key.write_text(base64.b64encode(b"k" * 32).decode() + "\n")
    os.chmod(key, 0o600)
    code, out = invoke("status", "--state", str(state))
    assert code == 2, out
    assert "sealed with key" in out
    assert "give this controller the state's key file" in out
    assert len(out.strip().splitlines()) == 1
    os.chmod(key, 0o644)
    code, out = invoke("status", "--state", str(state))
    assert (code, out.strip()) == (
        2,
        f"minidock: the key file {key} is accessible by group or others (mode 0644): "
        f"run chmod 600 {key}",
    )
    key.write_bytes(saved)
    os.chmod(key, 0o600)
    assert invoke("status", "--state", str(state))[0] == 0


def test_an_etcd_controller_without_the_key_refuses(
    fleet: Fleet, etcd_url: str, etcd_key_file: Path, tmp_path: Path
) -> None:
    fleet.apply(parse_location(etcd_url), 1, DB_SECRET)
    code, out = invoke("status", "--state", etcd_url, env={KEY_ENV: None})
    assert code == 2, out
    assert out.strip().endswith(
        f"no key for the state's secrets: set {KEY_ENV} to the key file every controller "
        "of this state is given (docs/ha.md)"
    )
    other = tmp_path / "other.key"
    code, out = invoke("status", "--state", etcd_url, env={KEY_ENV: str(other)})
    assert code == 2, out
    assert f"the key file {other} is missing" in out
    assert not other.exists()
    code, out = invoke("status", "--state", etcd_url, env={KEY_ENV: str(etcd_key_file)})
    assert code == 0, out


def test_an_older_clear_etcd_state_is_sealed_by_its_first_writer_and_compacted(
    fleet: Fleet, etcd_cluster: EtcdCluster, etcd_url: str
) -> None:
    from minidock.store.etcd import SCHEMA_VERSION, EtcdStore, EtcdWriter, Meta, generation_doc
    from minidock.store.etcd_client import put

    location = parse_location(etcd_url)
    assert not isinstance(location, Path)
    fleet.apply(location, 1, DB_SECRET)
    writer = EtcdWriter(location)  # what an older MiniDock wrote: schema 1, values in clear
    writer.acquire()
    try:
        store = writer.store()
        snapshot = store.snapshot()
        clear = codec.Codec(None)  # nothing sealed
        ops = [
            put(
                store.keys.generation(g.id),
                generation_doc(clear, g.id, g.applied_at, g.source_path, g.cluster),
            )
            for g in snapshot.generations
        ]
        old = Meta(**{**writer.meta.__dict__, "schema": 1})
        ops += [
            put(store.keys.controller, codec.dumps(snapshot.state).encode()),
            put(store.keys.meta, old.dumps().encode()),
        ]
        writer.fenced_txn(ops, old)
    finally:
        writer.release()
    prefix = "/" + etcd_url.split("/", 3)[3].partition("?")[0]
    listed = etcd_cluster.etcdctl("get", prefix, "--prefix", "--print-value-only")
    assert DB_SECRET in listed.stdout  # in clear, as an older MiniDock left it
    fleet.reconcile(location)  # the first writer seals it, then compacts the history
    listed = etcd_cluster.etcdctl("get", prefix, "--prefix", "--print-value-only")
    assert listed.returncode == 0, listed.stderr
    assert leaks(listed.stdout.encode()) == []
    reader = EtcdStore.open(location)
    try:
        assert reader.meta()[0].schema == SCHEMA_VERSION
        assert reader.load().services["db"].spec.secrets == (("DB_PASSWORD", DB_SECRET),)
    finally:
        reader.close()
    before = etcd_cluster.etcdctl("get", prefix + "/controller", "--rev=1")
    assert before.returncode != 0
    assert "compacted" in before.stderr
