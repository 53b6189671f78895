"""Secret files (docs/secrets.md): the spec's checks and their one-line errors (no value
ever shown), the spec hash (a changed secret rolls out, the hash reveals nothing), the
masker (whole and line by line), the plan's diff (paths only), the tar stream copied into a
created task (byte for byte, owner and mode kept), and the order of the acts: create, copy,
start, with a failed copy removing the task."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidock.commands.docker import secret_files_argv, secret_files_tar
from minidock.core.simulate import spec_diff
from minidock.model import SecretFile, Service, secret_values
from tests.fakes import FakeDocker, fail
from tests.unit.test_configs import error, load
from tests.unit.test_workloads import acts, calls, go, inventory, run_of

KEY = "-----BEGIN KEY-----\nMIIEvQ-secret-line\n-----END KEY-----\n"


def secret(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    os.chmod(path, mode)


def test_a_secret_file_from_a_file_and_one_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret(tmp_path / "tls.key", KEY)
    monkeypatch.setenv("API_TOKEN", "tok-51")
    service = load(
        tmp_path,
        '[services.web.secret_files]\n"/run/secrets/token" = { env = "API_TOKEN" }\n'
        '"/etc/tls/key.pem" = { file = "tls.key", uid = 999, gid = 998, mode = "0400" }\n',
    )
    assert service.secret_files == (
        SecretFile("/etc/tls/key.pem", KEY, 999, 998, 0o400),  # as it is: newlines kept
        SecretFile("/run/secrets/token", "tok-51", 0, 0, 0o444),  # Compose's defaults
    )
    assert "tok-51" not in repr(service)
    assert KEY not in repr(service.secret_files)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '"/run/x" = "hunter2"',
            'services.web.secret_files."/run/x": expected a table, got a string',
        ),
        (
            '"/run/x" = { file = "ok.key", env = "API_TOKEN" }',
            'services.web.secret_files."/run/x": expected a table with one of file = "path", '
            'env = "NAME", command = [...] or age_file = "path"',
        ),
        (
            '"run/x" = { file = "ok.key" }',
            "services.web.secret_files.\"run/x\": 'run/x' must be an absolute path in the "
            "task, like /etc/app.conf",
        ),
        (
            '"/data/pw" = { file = "ok.key" }',
            'services.web.secret_files."/data/pw": /data/pw collides with the volume at /data',
        ),
        (
            '"/etc/app.conf" = { file = "ok.key" }',
            'services.web.secret_files."/etc/app.conf": /etc/app.conf collides with the '
            "config at /etc/app.conf",
        ),
        (
            '"/run/x" = { file = "ok.key", mode = "0664" }',
            'services.web.secret_files."/run/x".mode: 0664 lets others write the secret: '
            "give one like 0440",
        ),
        (
            '"/run/x" = { file = "ok.key", mode = "999" }',
            "services.web.secret_files.\"/run/x\".mode: invalid file mode '999': use octal "
            'digits in quotes, like "0440"',
        ),
        (
            '"/run/x" = { file = "open.key" }',
            'services.web.secret_files."/run/x".file: TMP/open.key is writable by every '
            "user: chmod 600 TMP/open.key",
        ),
        (
            '"/run/x" = { file = "binary.key" }',
            'services.web.secret_files."/run/x".file: TMP/binary.key is not UTF-8 text '
            "(secret files are text: store a binary one base64)",
        ),
        (
            '"/run/x" = { env = "NOT_SET_ANYWHERE" }',
            'services.web.secret_files."/run/x".env: NOT_SET_ANYWHERE is not set in the '
            "controller's environment",
        ),
    ],
)
def test_bad_secret_files_are_one_line_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expected: str
) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    monkeypatch.setenv("API_TOKEN", "tok-51")
    secret(tmp_path / "ok.key", "hunter2")
    secret(tmp_path / "open.key", "hunter2", 0o646)
    (tmp_path / "binary.key").write_bytes(b"\xff\xfehunter2")
    os.chmod(tmp_path / "binary.key", 0o600)
    extra = 'volumes = ["data:/data"]\nconfigs = { "/etc/app.conf" = { content = "x" } }\n'
    message = error(tmp_path, extra + f"[services.web.secret_files]\n{body}\n")
    assert message == expected.replace("TMP", str(tmp_path))
    assert "hunter2" not in message


def test_a_read_only_task_cannot_take_secret_files(tmp_path: Path) -> None:
    secret(tmp_path / "ok.key", "x")
    body = 'read_only = true\nsecret_files = { "/run/x" = { file = "ok.key" } }\n'
    assert error(tmp_path, body).startswith(
        "services.web.read_only: a read-only task cannot be given secret_files"
    )


def test_the_secrets_are_in_the_spec_hash_and_nothing_shows_them() -> None:
    plain = Service(name="web", image="web:5")
    one = Service(name="web", image="web:5", secret_files=(SecretFile("/run/x", "a"),))
    assert plain.spec_hash() == Service(name="web", image="web:5", secret_files=()).spec_hash()
    variants = [
        one,
        Service(name="web", image="web:5", secret_files=(SecretFile("/run/x", "b"),)),
        Service(name="web", image="web:5", secret_files=(SecretFile("/run/y", "a"),)),
        Service(name="web", image="web:5", secret_files=(SecretFile("/run/x", "a", uid=1),)),
        Service(name="web", image="web:5", secret_files=(SecretFile("/run/x", "a", mode=0o400),)),
    ]
    hashes = {s.spec_hash() for s in [plain, *variants]}
    assert len(hashes) == 6  # each change rolls out
    (change,) = spec_diff(one, variants[1])
    assert (change.field, change.old, change.new) == ("secret_files", "/run/x", "~/run/x")


def test_a_secret_file_is_masked_whole_and_line_by_line() -> None:
    service = Service(name="web", image="web:5", secret_files=(SecretFile("/k", KEY),))
    assert set(secret_values(service)) == {
        KEY.strip(),
        "-----BEGIN KEY-----",
        "MIIEvQ-secret-line",
        "-----END KEY-----",
    }


@settings(deadline=None)  # a loaded machine; the property is about bytes, not speed
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"/[a-z0-9._-]{1,40}(/[a-z0-9._-]{1,40}){0,3}", fullmatch=True),
            st.text(max_size=300),
            st.integers(0, 65535),
            st.integers(0, 65535),
            st.integers(0, 0o777),
        ),
        max_size=4,
        unique_by=lambda f: f[0],
    )
)
def test_the_tar_stream_is_each_file_byte_for_byte_with_its_owner_and_mode(
    given_files: list[tuple[str, str, int, int, int]],
) -> None:
    files = [SecretFile(*f) for f in given_files]
    stream = secret_files_tar(files).encode()  # text on stdin: the same bytes
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [f.target.lstrip("/") for f in files]
        for member, f in zip(members, files, strict=True):
            assert member.isfile()  # no directory entries: Docker leaves existing ones alone
            assert (member.uid, member.gid, member.mode) == (f.uid, f.gid, f.mode)
            data = tar.extractfile(member)
            assert data is not None
            assert data.read() == f.value.encode()


def test_a_task_with_secret_files_is_created_given_them_then_started() -> None:
    docker = FakeDocker()
    a = acts(docker, inventory("h1"))
    files = (SecretFile("/run/secrets/db", "pw\n", 70, 70, 0o400),)
    go(a, run_of(Service(name="db", image="web:5", secret_files=files)))
    tail = calls(a)[-3:]
    assert [c.argv[1:3] for c in tail] == [["create", "--name"], ["cp", "-a"], ["start", "db.1.t1"]]
    assert tail[1].argv == secret_files_argv("db.1.t1") == [
        "docker", "cp", "-a", "-", "db.1.t1:/",
    ]  # fmt: skip
    assert tail[1].input == secret_files_tar(files)
    assert all("pw" not in arg for c in calls(a) for arg in c.argv)
    (doc,) = docker.containers("h1")
    assert doc["Files"] == {"/run/secrets/db": ("pw\n", 70, 70, 0o400)}
    assert doc["State"]["Status"] == "running"


def test_a_failed_copy_removes_the_created_task_and_is_a_failed_start() -> None:
    docker = FakeDocker()
    handler = docker.handler

    def refusing(host, argv, input):  # type: ignore[no-untyped-def]
        if argv[1] == "cp":
            return fail("Error response from daemon: no space left on device")
        return handler(host, argv, input)

    docker.handler = refusing  # type: ignore[method-assign]
    a = acts(docker, inventory("h1"))
    go(a, run_of(Service(name="db", image="web:5", secret_files=(SecretFile("/s", "pw"),))))
    assert docker.containers("h1") == []
    (line,) = a.failures
    assert line.startswith("run db.1.t1 on h1: copying its secret files failed: ")
    assert a.outcomes  # backoff and crash-loop counting as for any failed start
