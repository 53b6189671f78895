"""A service's `backup` and `hooks.before_backup`, and the inventory's `[backup]`: what
loads, into which values, every error's one line, and a password that never reaches the
model's stored form."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from minidock.model import BackupPolicy, Cluster, Hook, Keep
from minidock.spec import SpecError, load
from minidock.spec.backup import password_value
from minidock.store.codec import Codec
from minidock.usecases.outcomes import BadInput
from minidock.usecases.repositories import repository_of

CLUSTER = 'cluster = "prod"\n'
DB = CLUSTER + '[services.db]\nimage = "postgres:16"\nvolumes = ["pgdata:/var/lib/data"]\n'
PASS = 'password = { file = "pass" }'
HOST = '[[hosts]]\nname = "host1"\n'


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("pass").write_text("s3cret-pass\n")
    Path("pass").chmod(0o600)
    Path("inventory.toml").write_text(HOST)
    return tmp_path


def _load(text: str, inventory: str = HOST) -> Cluster:
    Path("inventory.toml").write_text(inventory)
    Path("cluster.toml").write_text(text)
    return load("cluster.toml")[0]


BAD = [
    (
        DB + f'backup = {{ repository = "ftp://x/y", {PASS} }}\n',
        "services.db.backup.repository: unknown restic backend 'ftp:': give a directory, or "
        "a URL starting with one of local:, sftp:, rest:, s3:, b2:, azure:, gs:, swift:, rclone:",
    ),
    (
        CLUSTER + f'[services.web]\nimage = "web"\nbackup = {{ repository = "r", {PASS} }}\n',
        "services.web.backup: the service has no named volume to back up: give volumes = "
        '["NAME:/path"], or remove it',
    ),
    (
        CLUSTER + '[services.web]\nimage = "web"\nvolumes = ["/srv:/srv"]\n'
        'hooks = { before_backup = { command = ["sync"] } }\n',
        "services.web.hooks.before_backup: the service has no named volume to back up: give "
        'volumes = ["NAME:/path"], or remove it',
    ),
    (
        DB + 'hooks = { before_backup = { command = ["sync"], timeout = "0s" } }\n',
        "services.db.hooks.before_backup.timeout: must be greater than 0, got '0s'",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, schedule = "0 3 * *" }}\n',
        "services.db.backup.schedule: use five fields (minute hour day-of-month month "
        "day-of-week), e.g. '0 3 * * *'",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, timezone = "Europe/Paris" }}\n',
        "services.db.backup.timezone: timezone is for a schedule: add schedule or remove it",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, schedule = "0 3 * * *", '
        'timezone = "Mars/Olympus" }\n',
        "services.db.backup.timezone: unknown timezone 'Mars/Olympus': use an IANA name such "
        "as 'UTC' or 'Europe/Paris'",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, keep = {{ daily = 0 }} }}\n',
        "services.db.backup.keep.daily: must be at least 1, got 0",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, keep = {{ dayly = 7 }} }}\n',
        "services.db.backup.keep: unknown key 'dayly' (did you mean 'daily'?)",
    ),
    (
        DB + 'backup = { repository = "r", password = { file = "missing" } }\n',
        "services.db.backup.password.file: password file not found: {here}/missing",
    ),
    (
        DB + 'backup = { repository = "r", password = { env = "NO_SUCH_MINIDOCK_VAR" } }\n',
        "services.db.backup.password.env: NO_SUCH_MINIDOCK_VAR is not set in the "
        "controller's environment",
    ),
    (
        DB + 'backup = { repository = "r", password = { file = "pass", env = "X" } }\n',
        'services.db.backup.password: expected a table with one of file = "path", env = '
        '"NAME", command = [...] or age_file = "path"',
    ),
    (
        DB + 'backup = { repository = "r", password = { file = "empty" } }\n',
        "services.db.backup.password: the password is empty",
    ),
    (
        DB + f"backup = {{ {PASS} }}\n",
        "services.db.backup: no repository: give backup.repository here, or repository in "
        "the inventory's [backup] (inventory.toml)",
    ),
    (
        DB + 'backup = { repository = "r" }\n',
        "services.db.backup: no password: give backup.password here, or password in the "
        "inventory's [backup] (inventory.toml)",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, verify_schedule = "0 4 * * 0" }}\n',
        'services.db.backup.verify_schedule: a drill runs backup.verify: give verify = ["CMD", '
        "...] or remove it",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, verify = ["true"], '
        'verify_schedule = "0 4 * *" }\n',
        "services.db.backup.verify_schedule: use five fields (minute hour day-of-month month "
        "day-of-week), e.g. '0 3 * * *'",
    ),
    (
        DB + f'backup = {{ repository = "r", {PASS}, verify = [] }}\n',
        "services.db.backup.verify: must not be empty",
    ),
    (
        CLUSTER + '[services.job]\nimage = "x"\nvolumes = ["v:/v"]\nschedule = "0 3 * * *"\n'
        f'backup = {{ repository = "r", {PASS} }}\n',
        "services.job.backup: a job's runs keep no volume: back up the service whose task holds it",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_a_bad_backup_is_one_line_naming_file_field_and_fix(
    here: Path, text: str, expected: str
) -> None:
    Path("empty").write_text("\n")
    Path("empty").chmod(0o600)
    with pytest.raises(SpecError) as err:
        _load(text)
    assert str(err.value) == "cluster.toml: " + expected.replace("{here}", str(here))


def test_a_bad_inventory_backup_names_the_inventory(here: Path) -> None:
    with pytest.raises(SpecError) as err:
        _load(DB, HOST + '[backup]\nrepository = "gopher:x"\n')
    assert str(err.value).startswith(
        "inventory.toml: backup.repository: unknown restic backend 'gopher:'"
    )


def test_the_backup_key_into_the_model(here: Path) -> None:
    cluster = _load(
        DB + f'backup = {{ repository = "backups/restic", {PASS}, schedule = "0 3 * * *", '
        'timezone = "Europe/Paris", keep = { daily = 7, weekly = 4 }, stop = true }\n'
        'hooks = { before_backup = { command = ["sync"], timeout = "30s" } }\n'
    )
    db = cluster.service("db")
    assert db is not None
    assert db.backup is not None
    assert db.backup == BackupPolicy(
        repository=str(here / "backups" / "restic"),
        password_source=db.backup.password_source,
        schedule="0 3 * * *",
        timezone="Europe/Paris",
        keep=Keep(daily=7, weekly=4),
        stop=True,
    )
    assert db.backup.keep.rules() == (("daily", 7), ("weekly", 4))
    assert db.before_backup == Hook(("sync",), 30.0)
    assert password_value(db.backup) == "s3cret-pass"


@pytest.mark.parametrize(
    ("given", "repository"),
    [
        ("/srv/restic", "/srv/restic"),
        ("rel/dir", "{here}/rel/dir"),
        ("local:rel", "local:{here}/rel"),
        ("sftp:user@host:/srv/restic", "sftp:user@host:/srv/restic"),
        ("s3:s3.amazonaws.com/bucket", "s3:s3.amazonaws.com/bucket"),
        ("rest:https://user@host:8000/", "rest:https://user@host:8000/"),
    ],
)
def test_a_repository_is_a_directory_beside_the_file_or_a_backend_url(
    here: Path, given: str, repository: str
) -> None:
    cluster = _load(DB + f'backup = {{ repository = "{given}", {PASS} }}\n')
    db = cluster.service("db")
    assert db is not None
    assert db.backup is not None
    assert db.backup.repository == repository.replace("{here}", str(here))


def test_the_inventory_gives_the_repository_and_password_a_service_leaves_out(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / "inv").mkdir()
    (here / "inv" / "pw").write_text("from-inventory")
    (here / "inv" / "pw").chmod(0o600)
    Path("cluster.toml").write_text(
        'cluster = "prod"\ninventory = "inv/hosts.toml"\n[services.db]\nimage = "pg"\n'
        'volumes = ["pgdata:/data"]\nbackup = { keep = { last = 3 } }\n'
        '[services.other]\nimage = "pg"\nvolumes = ["o:/data"]\n'
        'backup = { repository = "/srv/own", password = { env = "OWN_PASS" } }\n'
    )
    (here / "inv" / "hosts.toml").write_text(
        HOST + '[backup]\nrepository = "repo"\npassword = { file = "pw" }\n'
    )
    monkeypatch.setenv("OWN_PASS", "own-pass")
    cluster, inventory = load("cluster.toml")
    db, other = cluster.service("db"), cluster.service("other")
    assert db is not None
    assert db.backup is not None
    assert other is not None
    assert other.backup is not None
    assert db.backup.repository == str(here / "inv" / "repo")  # beside the inventory
    assert password_value(db.backup) == "from-inventory"
    assert (other.backup.repository, password_value(other.backup)) == ("/srv/own", "own-pass")
    assert inventory.backup is not None
    assert inventory.backup.keep == Keep()


def test_the_password_is_read_again_at_each_backup_and_never_stored(here: Path) -> None:
    cluster = _load(DB + f'backup = {{ repository = "r", {PASS} }}\n')
    stored = Codec(None).dumps(cluster)
    assert "s3cret-pass" not in stored
    assert Codec(None).loads(stored, Cluster) == cluster
    db = cluster.service("db")
    assert db is not None
    assert db.backup is not None
    assert "s3cret-pass" not in repr(db)
    Path("pass").write_text("rotated\n")
    assert password_value(db.backup) == "rotated"
    os.remove("pass")
    with pytest.raises(SpecError) as err:
        password_value(db.backup)
    assert str(err.value) == (
        f"cluster.toml: services.db.backup.password.file: password file not found: {here}/pass"
    )


def test_the_backup_changes_no_task(here: Path) -> None:
    plain = _load(DB).service("db")
    backed = _load(
        DB + f'backup = {{ repository = "r", {PASS}, stop = true }}\n'
        'hooks = { before_backup = { command = ["sync"] } }\n'
    ).service("db")
    assert plain is not None
    assert backed is not None
    assert plain.spec_hash() == backed.spec_hash()


def test_a_compose_file_gives_backup_in_x_minidock(here: Path) -> None:
    Path("compose.yaml").write_text(
        "name: prod\nservices:\n  db:\n    image: postgres:16\n    volumes: ['pgdata:/data']\n"
        "    x-minidock:\n      backup: {repository: /srv/restic, password: {file: pass},"
        " keep: {daily: 7}}\n      hooks: {before_backup: {command: [sync]}}\n"
        "volumes:\n  pgdata: {}\n"
    )
    cluster = load("compose.yaml")[0]
    db = cluster.service("db")
    assert db is not None
    assert db.backup is not None
    assert (db.backup.repository, db.backup.keep) == ("/srv/restic", Keep(daily=7))
    assert db.before_backup == Hook(("sync",), 600.0)
    Path("compose.yaml").write_text(
        Path("compose.yaml")
        .read_text()
        .replace(
            "keep: {daily: 7}",
            "keep: {daily: 7}, verify: [test, -s, /data/PG_VERSION], verify_schedule: '0 4 * * 0'",
        )
    )
    db = load("compose.yaml")[0].service("db")
    assert db is not None
    assert db.backup is not None
    assert (db.backup.verify, db.backup.verify_schedule) == (
        ("test", "-s", "/data/PG_VERSION"),
        "0 4 * * 0",
    )
    Path("compose.yaml").write_text(
        Path("compose.yaml").read_text().replace("daily: 7", "daily: -1")
    )
    found = r"^compose\.yaml: services\.db\.x-minidock\.backup\.keep.*: must be at least 1"
    with pytest.raises(SpecError, match=found):
        load("compose.yaml")


def test_a_service_without_a_backup_key_backs_up_into_the_inventorys_repository(
    here: Path,
) -> None:
    Path("inventory.toml").write_text(HOST + '[backup]\nrepository = "/srv/r"\n' + PASS + "\n")
    Path("cluster.toml").write_text(DB)
    cluster, inventory = load("cluster.toml")
    db = cluster.service("db")
    assert db is not None
    policy, repo = repository_of(db, inventory)
    assert (policy.repository, repo.location, repo.password) == ("/srv/r", "/srv/r", "s3cret-pass")
    assert "s3cret-pass" not in repr(repo)
    Path("inventory.toml").write_text(HOST)
    cluster, inventory = load("cluster.toml")
    with pytest.raises(BadInput) as err:
        repository_of(db, inventory)
    assert str(err.value) == (
        "db has no backup repository: give it backup = { repository = ..., password = "
        "{ file = ... } }, or [backup] in the inventory"
    )
    Path("pass").unlink()
    with pytest.raises(BadInput, match=r"^cluster\.toml: .*password file not found"):
        repository_of(replace(db, backup=BackupPolicy("/srv/r", _source_of(here))), inventory)


def _source_of(here: Path) -> str:
    return json.dumps(
        {
            "source": {"file": str(here / "pass")},
            "base": str(here),
            "file": "cluster.toml",
            "at": "services.db.backup.password",
        }
    )


def test_restics_times_are_read_as_epoch_seconds() -> None:
    from minidock.usecases.repositories import epoch as _epoch

    assert _epoch("2026-12-03T03:00:04.405049187Z") == pytest.approx(1796266804.405049)
    assert _epoch("2026-12-03T04:00:04+01:00") == 1796266804.0
    assert _epoch("not a time") == 0.0


# -- on_host_loss = "restore": failover from backups ---------------------------------------------
RESTORES = DB + f'backup = {{ repository = "r", {PASS} }}\non_host_loss = "restore"\n'


def test_on_host_loss_restore_loads_with_restore_after_default_five_minutes(here: Path) -> None:
    db = _load(RESTORES).service("db")
    assert db is not None
    assert (db.on_host_loss, db.restore_after) == ("restore", 300.0)
    later = _load(RESTORES + 'restore_after = "10m"\n').service("db")
    assert later is not None
    assert later.restore_after == 600.0
    assert later.spec_hash() == db.spec_hash()  # a controller policy: no task changes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            CLUSTER + '[services.web]\nimage = "web"\non_host_loss = "restore"\n',
            "services.web.on_host_loss: restore is for a service with a named volume (its "
            'data): use "replace"',
        ),
        (
            DB + 'on_host_loss = "restore"\n',
            "services.db.on_host_loss: restore needs a backup to restore from: give backup = "
            "{ repository = ..., schedule = ... }",
        ),
        (
            DB + 'restore_after = "5m"\n',
            'services.db.restore_after: restore_after is for on_host_loss = "restore"',
        ),
        (
            RESTORES + 'restore_after = "0s"\n',
            "services.db.restore_after: must be greater than 0, got '0s'",
        ),
    ],
)
def test_a_bad_on_host_loss_restore_is_one_line(here: Path, text: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        _load(text)
    assert str(err.value) == "cluster.toml: " + expected


def test_a_compose_file_gives_on_host_loss_restore_in_x_minidock(here: Path) -> None:
    Path("compose.yaml").write_text(
        "name: prod\nservices:\n  db:\n    image: postgres:16\n    volumes: ['pgdata:/data']\n"
        "    x-minidock:\n      backup: {repository: /srv/restic, password: {file: pass}}\n"
        "      on_host_loss: restore\n      restore_after: 2m\nvolumes:\n  pgdata: {}\n"
    )
    db = load("compose.yaml")[0].service("db")
    assert db is not None
    assert (db.on_host_loss, db.restore_after) == ("restore", 120.0)
