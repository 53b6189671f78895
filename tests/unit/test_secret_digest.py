"""The spec hash takes secrets through a keyed digest (docs/secrets.md#the-spec-hash): a
task's `minidock.spec` label is no oracle for a short secret; the same spec on a fresh
state adopts what it can; tasks an older MiniDock labelled roll once, saying so.

The use cases run against in-memory engines (tests.fakes.FakeDocker), as in test_usecases.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from minidock import usecases
from minidock.model import Cluster, Service
from minidock.spec import load
from minidock.store.codec import Codec
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import ExitCode, GenerationStored
from tests.unit.test_usecases import STACK, Setup, make_setup, run

PIN = "4821"
SECRET_STACK = STACK.replace(
    '[services.db]\nimage = "db:1"\n',
    '[services.db]\nimage = "db:1"\nsecrets = { PIN = { file = "pin" } }\n',
)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    made = make_setup(tmp_path)
    pin = tmp_path / "pin"
    pin.write_text(PIN + "\n")
    pin.chmod(0o600)
    made.file.write_text(SECRET_STACK)
    return made


def _labels(setup: Setup, service: str) -> dict[str, str]:
    """Each running task of `service`: its container id -> its minidock.spec label."""
    found = {}
    for doc in setup.docker.containers():
        labels: dict[str, str] = doc["Config"]["Labels"]
        if labels.get("minidock.service") == service and doc["State"]["Status"] == "running":
            found[doc["Id"]] = labels["minidock.spec"]
    return found


def _warnings(setup: Setup) -> list[str]:
    return [w for p in setup.reports if isinstance(p, GenerationStored) for w in p.warnings]


def test_a_label_and_the_spec_without_the_secret_recover_no_pin(setup: Setup) -> None:
    """Every 4-digit PIN tried against the label, the rest of the spec known: none
    matches. (An unsalted digest of the value, as before, gives the PIN back at once.)"""
    setup.converged()
    (label,) = set(_labels(setup, "db").values())
    cluster, _ = load(setup.file)  # the spec as an attacker has it: the PIN is guessed
    db = cluster.service("db")
    assert db is not None
    found = [
        pin
        for pin in (f"{n:04d}" for n in range(10_000))
        if replace(db, secrets=(("PIN", pin),)).spec_hash() == label
    ]
    assert found == []
    # the label is this spec's, PIN and all: with the state's key file, it is made again
    with SQLiteStore.open(setup.state) as store:
        keyed = store.keyed(cluster)
        stored = store.latest_generation()
    assert keyed.service("db").spec_hash() == label  # type: ignore[union-attr]
    assert stored is not None
    assert stored[1].service("db") == keyed.service("db")


def test_the_digest_key_is_the_states_and_a_changed_value_changes_the_hash(tmp_path: Path) -> None:
    db = Service("db", "db:1", secrets=(("PIN", "1234"),))
    with SQLiteStore.open(tmp_path / "a") as a, SQLiteStore.open(tmp_path / "b") as b:
        one = Cluster("c", "", "", (db,))
        assert a.keyed(one).services[0].spec_hash() == a.keyed(one).services[0].spec_hash()
        assert a.keyed(one).services[0].spec_hash() != b.keyed(one).services[0].spec_hash()
        other = Cluster("c", "", "", (replace(db, secrets=(("PIN", "1235"),)),))
        assert a.keyed(one).services[0].spec_hash() != a.keyed(other).services[0].spec_hash()
        plain = Cluster("c", "", "", (Service("web", "web:1"),))
        assert a.keyed(plain) == plain  # nothing secret: nothing digested, the hash as it was
        key = a.codec.box.digest_key if a.codec.box else b""
        assert a.codec.box is not None
        assert key != a.codec.box.key


def test_secret_looking_env_values_are_in_the_keyed_digest_not_in_clear() -> None:
    env = (("API_TOKEN", "42"), ("MODE", "fast"))
    svc = Service("web", "web:1", env=env).keyed(b"k" * 32)
    for guess in ("41", "42", "43"):
        unkeyed = Service("web", "web:1", env=(("API_TOKEN", guess), ("MODE", "fast")))
        assert unkeyed.spec_hash() != svc.spec_hash()
    assert replace(svc, env=(("API_TOKEN", "42"), ("MODE", "slow"))).spec_hash() != (
        svc.spec_hash()
    )
    assert svc.keyed(b"k" * 32) is svc  # keyed again with the same key: the same value


def test_the_same_spec_on_a_fresh_state_with_its_key_file_starts_and_stops_nothing(
    setup: Setup,
) -> None:
    """State lost, its key file kept (an etcd state's key file is never in the store; a
    directory's, from its backup): every label matches, nothing starts or stops."""
    setup.converged()
    before = {s: _labels(setup, s) for s in ("db", "web")}
    other = setup.root / "other-state"
    other.mkdir(mode=0o700)
    shutil.copy2(setup.state / "secrets.key", other / "secrets.key")
    outcome = run(
        usecases.apply(
            setup.file, other, setup.runtime(), setup.report, adopt=True, wait=True, timeout=60
        )
    )
    assert outcome.exit_code is ExitCode.OK
    assert {s: _labels(setup, s) for s in ("db", "web")} == before
    assert not [w for w in _warnings(setup) if "roll once" in w]


def test_the_same_spec_on_a_fresh_state_rolls_each_secret_bearing_service_once(
    setup: Setup,
) -> None:
    """State and key lost: a label made under the lost key cannot be checked against the
    secrets, so that service's tasks roll once (saying so); the others are adopted as they
    run, and the next apply starts and stops nothing."""
    setup.converged()
    web, db = _labels(setup, "web"), _labels(setup, "db")
    other = setup.root / "other-state"
    planned = run(usecases.plan(setup.file, other, setup.runtime(), adopt=True))
    assert {r.service.name for r in planned.plan.run} == {"db"}
    outcome = run(
        usecases.apply(
            setup.file, other, setup.runtime(), setup.report, adopt=True, wait=True, timeout=60
        )
    )
    assert outcome.exit_code is ExitCode.OK
    assert _labels(setup, "web") == web  # adopted as they ran
    rolled = _labels(setup, "db")
    assert len(rolled) == 1
    assert not rolled.keys() & db.keys()
    assert set(rolled.values()) != set(db.values())
    notes = [w for w in _warnings(setup) if "roll once" in w]
    assert len(notes) == 1
    assert "services.db: its adopted tasks roll once" in notes[0]
    assert PIN not in " ".join(_warnings(setup))
    setup.reports.clear()
    again = run(
        usecases.apply(setup.file, other, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert again.exit_code is ExitCode.OK
    assert _labels(setup, "db") == rolled
    assert _labels(setup, "web") == web


def test_tasks_an_older_minidock_labelled_roll_once_at_the_next_apply_saying_so(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state an older MiniDock wrote holds unkeyed digests, and its tasks' labels are
    theirs: passes keep them (nothing rolls until an apply); the plan shows the service
    re-keyed; the apply rolls it once with a warning line; then nothing more."""

    def unkeyed(self: Codec, cluster: Cluster) -> Cluster:
        return cluster

    with monkeypatch.context() as older:
        older.setattr(Codec, "keyed", unkeyed)
        setup.converged()
    web, db = _labels(setup, "web"), _labels(setup, "db")
    old_label = next(iter(db.values()))
    cluster, _ = load(setup.file)
    assert cluster.service("db").spec_hash() == old_label  # type: ignore[union-attr]
    run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    assert _labels(setup, "db") == db  # a pass alone rolls nothing
    planned = run(usecases.plan(setup.file, setup.state, setup.runtime()))
    assert planned.document is not None
    (change,) = (c for c in planned.document.services if c.name == "db")
    assert [(d.field, d.old) for d in change.diff] == [("secrets", "(same values)")]
    setup.reports.clear()
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    rolled = _labels(setup, "db")
    assert len(rolled) == 1
    assert not rolled.keys() & db.keys()
    assert old_label not in rolled.values()
    assert _labels(setup, "web") == web
    notes = [w for w in _warnings(setup) if "roll once" in w]
    assert len(notes) == 1
    assert "services.db: its tasks roll once" in notes[0]
    setup.reports.clear()
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    assert _labels(setup, "db") == rolled
    assert not _warnings(setup)


def test_a_state_migrated_to_another_key_rolls_secret_bearing_services_once(
    setup: Setup,
) -> None:
    """`state migrate` into a new directory, which makes its own key file: the hashes
    stay as stored (nothing rolls on the way), the next apply rolls db once, saying why."""
    setup.converged()
    web, db = _labels(setup, "web"), _labels(setup, "db")
    other = setup.root / "moved"
    run(usecases.migrate(setup.state, other, setup.runtime().clock))
    run(usecases.reconcile(other, setup.runtime(), setup.report))
    assert (_labels(setup, "web"), _labels(setup, "db")) == (web, db)
    outcome = run(
        usecases.apply(setup.file, other, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert outcome.exit_code is ExitCode.OK
    assert _labels(setup, "web") == web
    rolled = _labels(setup, "db")
    assert len(rolled) == 1
    assert not rolled.keys() & db.keys()
    notes = [w for w in _warnings(setup) if "roll once" in w]
    assert len(notes) == 1
    assert "under another state's key" in notes[0]
