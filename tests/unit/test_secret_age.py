"""Secrets from age-encrypted files (docs/secrets.md#from-an-age-encrypted-file), with real
age files made by Debian's `age` and `age-keygen` (scripts/engine.sh installs them), and
`minidock secrets edit` with a scripted $EDITOR."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minidock.cli import app
from minidock.spec import SpecError, load
from minidock.usecases import BadInput
from minidock.usecases.secrets import edit_age_file
from tests.unit.test_cli import invoke, one_line_error

HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'
DOCUMENT = "# prod\nDB_PASSWORD=s3cret-db\nAPI_TOKEN='tok en #1'\n"


def age(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["age", *argv], input=stdin, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """tmp_path with an age identity key.txt (0600), its recipients file and prod.age
    (DOCUMENT encrypted to it)."""
    key = tmp_path / "key.txt"
    subprocess.run(["age-keygen", "-o", str(key)], capture_output=True, check=True, timeout=60)
    key.chmod(0o600)
    public = subprocess.run(
        ["age-keygen", "-y", str(key)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    (tmp_path / "prod.age.recipients").write_text(public)
    age(
        "-e",
        "-R",
        str(tmp_path / "prod.age.recipients"),
        "-o",
        str(tmp_path / "prod.age"),
        stdin=DOCUMENT,
    )
    (tmp_path / "inventory.toml").write_text(HOST)
    return tmp_path


def cluster(root: Path, services: str) -> Path:
    path = root / "cluster.toml"
    path.write_text(f'cluster = "prod"\ninventory = "inventory.toml"\n\n{services}')
    return path


def source(key: str, extra: str = ', identity = "key.txt"') -> str:
    return f'{{ age_file = "prod.age", key = "{key}"{extra} }}'


def test_values_come_from_the_decrypted_dotenv_document(keys: Path) -> None:
    spec = cluster(
        keys,
        f'[services.db]\nimage = "postgres:16"\n'
        f"secrets = {{ DB_PASSWORD = {source('DB_PASSWORD')}, TOKEN = {source('API_TOKEN')} }}\n"
        f'[services.db.secret_files]\n"/run/secrets/db" = {source("DB_PASSWORD")}\n',
    )
    db = load(spec)[0].services[0]
    assert dict(db.secrets) == {"DB_PASSWORD": "s3cret-db", "TOKEN": "tok en #1"}
    assert db.secret_files[0].value == "s3cret-db"
    assert b"s3cret-db" not in (keys / "prod.age").read_bytes()  # really encrypted


def test_each_age_file_is_decrypted_once_per_load(
    keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = keys / "bin" / "age"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho run >> "{keys}/age.runs"\nexec /usr/bin/age "$@"\n')
    shim.chmod(0o700)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    spec = cluster(
        keys,
        f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {source("DB_PASSWORD")} }}\n'
        f'[services.api]\nimage = "api:1"\nsecrets = {{ B = {source("API_TOKEN")} }}\n',
    )
    load(spec)
    assert len((keys / "age.runs").read_text().splitlines()) == 1


def test_a_json_document_and_an_identity_from_a_command(keys: Path) -> None:
    cert = "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
    doc = json.dumps({"TLS_KEY": cert, "DB_PASSWORD": "j-s3cret"})
    age("-e", "-R", str(keys / "prod.age.recipients"), "-o", str(keys / "prod.age"), stdin=doc)
    by_command = ', identity_command = ["cat", "key.txt"]'
    spec = cluster(
        keys,
        f'[services.db]\nimage = "postgres:16"\n'
        f"secrets = {{ DB_PASSWORD = {source('DB_PASSWORD', by_command)} }}\n"
        f'[services.db.secret_files]\n"/run/secrets/tls.key" = {source("TLS_KEY")}\n',
    )
    db = load(spec)[0].services[0]
    assert db.secrets == (("DB_PASSWORD", "j-s3cret"),)
    assert db.secret_files[0].value == cert  # every byte kept


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (source("DB_PASWORD"), "A.key: DB_PASWORD is not a key of {root}/prod.age (did you mean"),
        ('{ age_file = "nope.age", key = "K", identity = "key.txt" }', "age file not found"),
        ('{ age_file = "prod.age", key = "K", identity = "no.txt" }', "age identity not found"),
        ('{ age_file = "prod.age", identity = "key.txt" }', 'give the key = "NAME" of the age'),
        (
            '{ age_file = "prod.age", key = "K", identity = "prod.age.recipients" }',
            'A.age_file: `age` exited 1: age: error: reading "{root}/prod.age.recipients"',
        ),
    ],
)
def test_bad_age_sources_are_one_line(keys: Path, value: str, expected: str) -> None:
    if "recipients" in value:
        (keys / "prod.age.recipients").chmod(0o600)  # as an identity file must be
    spec = cluster(keys, f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {value} }}\n')
    with pytest.raises(SpecError) as caught:
        load(spec)
    line = str(caught.value)
    assert expected.format(root=keys) in line
    assert "\n" not in line
    assert "report unexpected" not in line  # age's second line, a web address: left out
    assert "s3cret-db" not in line


def test_a_document_that_is_not_dotenv_is_one_line_naming_its_line(keys: Path) -> None:
    age(
        "-e",
        "-R",
        str(keys / "prod.age.recipients"),
        "-o",
        str(keys / "prod.age"),
        stdin="A=1\nthis is not a line\n",
    )
    spec = cluster(
        keys, f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {source("A")} }}\n'
    )
    with pytest.raises(SpecError) as caught:
        load(spec)
    assert str(caught.value).endswith(f"{keys}/prod.age line 2: not KEY=VALUE")


@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
def test_a_value_wrapped_onto_its_own_line_is_named_by_its_line_number_only(
    keys: Path, command: str
) -> None:
    """A password wrapped by an editor: its tail reads as a name without a value."""
    wrapped = "# prod\nDB_PASSWORD=s3cret-db-first-half\n\nwrappedS3cretTail\n"
    age("-e", "-R", str(keys / "prod.age.recipients"), "-o", str(keys / "prod.age"), stdin=wrapped)
    spec = cluster(
        keys, f'[services.db]\nimage = "postgres:16"\nsecrets = {{ A = {source("DB_PASSWORD")} }}\n'
    )
    state = [] if command == "validate" else ["--state", str(keys / "state")]
    line = one_line_error(invoke(command, str(spec), *state))
    assert line == (
        f"{spec}: services.db.secrets.A.age_file: {keys}/prod.age line 4: a line without `=`: "
        "write NAME=VALUE on one line (a long value may not wrap)"
    )
    assert "S3cret" not in line
    assert "s3cret" not in line


def test_a_compose_x_minidock_secret_from_an_age_file(keys: Path) -> None:
    compose = keys / "compose.yaml"
    compose.write_text(
        "name: prod\nx-minidock:\n  inventory: inventory.toml\n"
        "services:\n  db:\n    image: postgres:16\n    x-minidock:\n      secrets:\n"
        "        DB_PASSWORD: {age_file: prod.age, key: DB_PASSWORD, identity: key.txt}\n"
    )
    assert load(compose)[0].services[0].secrets == (("DB_PASSWORD", "s3cret-db"),)


def editor(root: Path, body: str) -> str:
    """A scripted $EDITOR: `body` runs with $1 the file, after it records the file's mode
    and its directory's."""
    path = root / "editor.sh"
    path.write_text(f'#!/bin/sh\nstat -c "%a %n" "$1" "$(dirname "$1")" > "{root}/seen"\n{body}\n')
    path.chmod(0o700)
    return str(path)


def test_edit_decrypts_to_a_private_file_and_encrypts_the_change_in_place(
    keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDITOR", editor(keys, 'sed -i "s/s3cret-db/rotated-db/" "$1"'))
    file = keys / "prod.age"
    edited = edit_age_file(file, identity=str(keys / "key.txt"))
    assert edited.changed
    modes = (keys / "seen").read_text().split("\n")
    assert modes[0].startswith("600 ")
    assert modes[1].startswith("700 ")
    copy = Path(modes[0].split(" ", 1)[1])
    assert not copy.exists()
    assert not copy.parent.exists()
    assert b"rotated-db" not in file.read_bytes()
    plain = age("-d", "-i", str(keys / "key.txt"), str(file))
    assert plain == DOCUMENT.replace("s3cret-db", "rotated-db")
    assert sorted(p.name for p in keys.iterdir() if p.name.startswith(".")) == []  # no temp


def test_edit_without_a_change_writes_nothing_and_a_bad_document_is_refused(
    keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = keys / "prod.age"
    before = file.read_bytes()
    monkeypatch.setenv("EDITOR", editor(keys, "true"))
    assert not edit_age_file(file, identity=str(keys / "key.txt")).changed
    assert file.read_bytes() == before
    monkeypatch.setenv("EDITOR", editor(keys, 'echo "not a line" >> "$1"'))
    with pytest.raises(BadInput) as caught:
        edit_age_file(file, identity=str(keys / "key.txt"))
    assert "line 4: not KEY=VALUE: nothing was written" in str(caught.value)
    assert file.read_bytes() == before
    monkeypatch.setenv("EDITOR", editor(keys, "exit 1"))
    with pytest.raises(BadInput) as failed:
        edit_age_file(file, identity=str(keys / "key.txt"))
    assert str(failed.value) == f"the editor exited 1: {file} was left as it was"


def test_edit_needs_recipients_and_makes_a_new_file(
    keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = keys / "staging.age"
    monkeypatch.setenv("EDITOR", editor(keys, 'echo "DB_PASSWORD=new" > "$1"'))
    with pytest.raises(BadInput) as caught:
        edit_age_file(new, identity=str(keys / "key.txt"))
    assert f"{new}: no recipients to encrypt to: put one age recipient a line in " in str(
        caught.value
    )
    assert not new.exists()
    made = edit_age_file(
        new, identity=str(keys / "key.txt"), recipients=keys / "prod.age.recipients"
    )
    assert made.changed
    assert age("-d", "-i", str(keys / "key.txt"), str(new)) == "DB_PASSWORD=new\n"


def test_the_edit_command_line(keys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDITOR", editor(keys, 'sed -i "s/s3cret-db/cli-db/" "$1"'))
    file = keys / "prod.age"
    done = CliRunner().invoke(app, ["secrets", "edit", str(file), "-i", str(keys / "key.txt")])
    assert done.exit_code == 0, done.output
    assert done.output == f"{file}: encrypted to the recipients of {file}.recipients\n"
    assert "cli-db" in age("-d", "-i", str(keys / "key.txt"), str(file))
    wrong = CliRunner().invoke(app, ["secrets", "edit", str(file), "-i", str(keys / "nope")])
    assert wrong.exit_code == 2
    assert "age identity not found" in wrong.output
    assert "Traceback" not in wrong.output
