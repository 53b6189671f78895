"""Configs (docs/configs.md): the spec's checks and their one-line errors, the spec hash
(content in, unchanged content changing nothing), the docker run mounts, and how a host
gets each file (content-addressed, written aside and renamed, checked)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidock.act.configs import ConfigPlaceError, ConfigPlacer
from minidock.commands.docker import CONFIG_DIR, ConfigMount, run_argv
from minidock.core.simulate import spec_diff
from minidock.model import ConfigFile, Service
from minidock.spec import SpecError, load_cluster
from minidock.ssh import Result

HEAD = 'cluster = "prod"\ninventory = "inventory.toml"\n[services.web]\nimage = "web:5"\n'


def load(tmp_path: Path, body: str) -> Service:
    path = tmp_path / "cluster.toml"
    path.write_text(HEAD + body)
    (service,) = load_cluster(path).services
    return service


def error(tmp_path: Path, body: str) -> str:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, body)
    text = str(caught.value)
    assert "\n" not in text
    return text.removeprefix(f"{tmp_path / 'cluster.toml'}: ")


def test_a_config_from_a_file_and_one_given_inline(tmp_path: Path) -> None:
    (tmp_path / "app.conf").write_text("a = 1\r\nb = 2\n")
    service = load(
        tmp_path,
        '[services.web.configs]\n"/etc/z.conf" = { content = "z" }\n'
        '"/etc/app/app.conf" = { file = "app.conf" }\n',
    )
    assert service.configs == (
        ConfigFile("/etc/app/app.conf", "a = 1\r\nb = 2\n"),  # as it is, line endings kept
        ConfigFile("/etc/z.conf", "z"),
    )
    assert service.configs[1].digest == hashlib.sha256(b"z").hexdigest()
    swapped = load(
        tmp_path,
        '[services.web.configs]\n"/etc/app/app.conf" = { file = "app.conf" }\n'
        '"/etc/z.conf" = { content = "z" }\n',
    )
    assert swapped.spec_hash() == service.spec_hash()  # sorted by path: file order is not hashed


BIG = "x" * (500 * 1024 + 1)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '"etc/app.conf" = { content = "" }',
            "services.web.configs.\"etc/app.conf\": 'etc/app.conf' must be an absolute path in "
            "the task, like /etc/app.conf",
        ),
        (
            '"/etc/../app.conf" = { content = "" }',
            "must be a plain path: write /app.conf",
        ),
        ('"/etc/app/" = { content = "" }', "must be a plain path: write /etc/app"),
        ('"/" = { content = "" }', "'/' must be an absolute path in the task"),
        ('"/etc/a,b" = { content = "" }', "may not hold a comma, quote or line break"),
        ('"/data" = { content = "" }', "/data collides with the volume at /data"),
        ('"/data/x.conf" = { content = "" }', None),  # a file inside a volume's directory
        ('"/srv/x" = { content = "" }', "/srv/x collides with the volume at /srv/x/cache"),
        (
            '"/etc/a" = { content = "" }\n"/etc/a/b" = { content = "" }',
            "/etc/a/b collides with the config at /etc/a",
        ),
        ('"/etc/a" = { file = "nope.conf" }', "config file not found: "),
        ('"/etc/a" = { file = "." }', "is a directory: name a file"),
        ('"/etc/a" = { file = "latin1.conf" }', "is not UTF-8 text (configs are text files)"),
        ('"/etc/a" = { file = "big.conf" }', "is 512001 bytes, over the 500 KiB limit"),
        (f'"/etc/a" = {{ content = "{BIG}" }}', "512001 bytes is over the 500 KiB limit"),
        ('"/etc/a" = { file = "x", content = "y" }', 'services.web.configs."/etc/a": '),
        ('"/etc/a" = { env = "X" }', 'services.web.configs."/etc/a": '),
        ('"/etc/a" = { writable = true }', "no source: give one of file, content or dir"),
        (
            '"/etc/a" = { content = "y", writable = true }',
            'services.web.configs."/etc/a".writable: a writable config is a file or a dir: not '
            "content",
        ),
        ('"/srv" = { dir = "sub", writable = true }', None),  # one mount: a volume inside it
        ('"/srv" = { dir = "sub" }', "/srv collides with the volume at /srv/x/cache"),
        (
            '"/etc/a" = { dir = "sub", writable = true }\n"/etc/a/b" = { content = "" }',
            "/etc/a/b collides with the writable copy at /etc/a",
        ),
    ],
)
def test_bad_configs_are_one_line_naming_the_key(
    tmp_path: Path, body: str, expected: str | None
) -> None:
    (tmp_path / "latin1.conf").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "big.conf").write_text(BIG)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("f\n")
    text = 'volumes = ["data:/data", "/srv/x/cache:/srv/x/cache"]\n[services.web.configs]\n'
    if expected is None:
        assert load(tmp_path, text + body).configs
    else:
        assert expected in error(tmp_path, text + body)


def with_configs(*pairs: tuple[str, str]) -> Service:
    return Service("web", "web:5", configs=tuple(ConfigFile(t, c) for t, c in pairs))


def test_the_content_is_in_the_spec_hash() -> None:
    plain = Service("web", "web:5")
    one = with_configs(("/etc/a", "1"))
    assert one.spec_hash() != plain.spec_hash()
    assert with_configs(("/etc/a", "1")).spec_hash() == one.spec_hash()  # unchanged: same
    assert with_configs(("/etc/a", "2")).spec_hash() != one.spec_hash()  # content
    assert with_configs(("/etc/b", "1")).spec_hash() != one.spec_hash()  # path in the task
    assert replace(plain, configs=()).spec_hash() == plain.spec_hash()


@given(st.dictionaries(st.sampled_from(["/a", "/b", "/c"]), st.text(max_size=20), min_size=1))
def test_the_hash_follows_every_content(contents: dict[str, str]) -> None:
    """The same contents hash alike; a change to any one changes the hash."""
    pairs = sorted(contents.items())
    loaded = with_configs(*pairs)
    assert with_configs(*pairs).spec_hash() == loaded.spec_hash()
    for target, _ in pairs:
        changed = with_configs(*[(t, c + "!" if t == target else c) for t, c in pairs])
        assert changed.spec_hash() != loaded.spec_hash()


def test_each_config_is_a_read_only_bind_mount_that_must_exist() -> None:
    argv, _ = run_argv(
        with_configs(("/etc/a", "1")),
        "prod",
        1,
        "t1",
        "h",
        configs=[ConfigMount("/root/x/d1", "/etc/a")],
    )
    at = argv.index("--mount")
    assert argv[at + 1] == "type=bind,source=/root/x/d1,target=/etc/a,readonly"
    assert "-v" not in argv
    copy = ConfigMount("/root/x/copies/c1", "/app", writable=True)
    argv, _ = run_argv(with_configs(("/app/a", "1")), "prod", 1, "t1", "h", configs=[copy])
    assert argv[argv.index("--mount") + 1] == "type=bind,source=/root/x/copies/c1,target=/app"


class FakeHost:
    """A host's shell for ConfigPlacer: a file system of paths to text, and each argv."""

    def __init__(self, home: str = "/home/deploy") -> None:
        self.home = home
        self.files: dict[str, str] = {}
        self.calls: list[list[str]] = []
        self.corrupt = False  # the host writes something else than it is sent

    async def sh(self, host: str, argv: Sequence[str], stdin: str | None) -> Result:
        self.calls.append(list(argv))
        match list(argv):
            case ["mkdir", "-p", "--", path]:
                assert path == CONFIG_DIR or path.startswith(f"{self.home}/{CONFIG_DIR}/copies")
            case ["realpath", "-e", "--", path]:
                return Result(0, f"{self.home}/{path}\n", "")
            case ["sha256sum", "--check", "--status", "-"]:
                assert stdin is not None
                good = True
                for line in stdin.splitlines():
                    digest, path = line.split("  ")
                    found = self.files.get(path)
                    good &= (
                        found is not None and hashlib.sha256(found.encode()).hexdigest() == digest
                    )
                return Result(0 if good else 1, "", "")
            case ["dd", of, "status=none"]:
                assert stdin is not None
                self.files[of.removeprefix("of=")] = stdin + ("!" if self.corrupt else "")
            case ["chmod", "0444", "--", _]:
                pass
            case ["mv", "-f", "--", source, target]:
                self.files[target] = self.files.pop(source)
            case ["test", "-d", path]:
                return Result(0 if any(f.startswith(f"{path}/") for f in self.files) else 1, "", "")
            case ["tar", "-x", "--no-same-owner", "-C", into, "-f", "-"]:
                assert stdin is not None
                with tarfile.open(fileobj=io.BytesIO(stdin.encode())) as tar:
                    for member in tar.getmembers():
                        assert member.mode == 0o666
                        data = tar.extractfile(member)
                        assert data is not None
                        self.files[f"{into}/{member.name}"] = data.read().decode()
            case ["chmod", "-R", "a+rwX", "--", _]:
                pass
            case ["mv", "-T", "--", source, target]:
                for name in [f for f in self.files if f.startswith(f"{source}/")]:
                    self.files[target + name.removeprefix(source)] = self.files.pop(name)
            case other:
                raise AssertionError(other)
        return Result(0, "", "")


def place(fake: FakeHost, configs: Sequence[ConfigFile], task: str = "t1") -> list[ConfigMount]:
    placer = ConfigPlacer(fake.sh, "prod")
    return asyncio.run(placer.place("host1", configs, task, "web"))


def test_a_host_gets_each_config_by_digest_written_aside_then_renamed() -> None:
    fake = FakeHost()
    config = ConfigFile("/etc/a", "one\n")
    path = f"/home/deploy/.minidock/configs/{config.digest}"
    assert place(fake, [config]) == [ConfigMount(path, "/etc/a")]
    assert fake.files == {path: "one\n"}
    renames = [c for c in fake.calls if c[0] == "mv"]
    assert renames == [["mv", "-f", "--", f"{path}.t1.tmp", path]]
    fake.calls.clear()
    assert place(fake, [config], "t2") == [
        ConfigMount(path, "/etc/a")
    ]  # there already: not written
    assert [c[0] for c in fake.calls] == ["mkdir", "realpath", "sha256sum"]


def test_a_wrong_file_on_the_host_is_replaced_and_a_bad_upload_refused() -> None:
    fake = FakeHost()
    config = ConfigFile("/etc/a", "one\n")
    path = f"/home/deploy/.minidock/configs/{config.digest}"
    fake.files[path] = "tampered"
    place(fake, [config])
    assert fake.files[path] == "one\n"
    fake = FakeHost()
    fake.corrupt = True
    with pytest.raises(ConfigPlaceError, match="the file on the host has another sha256"):
        place(fake, [config])
    assert path not in fake.files


def test_a_plan_names_the_changed_paths_never_the_contents() -> None:
    old = with_configs(("/etc/a", "secret-ish one"), ("/etc/b", "same"))
    new = with_configs(("/etc/a", "secret-ish two"), ("/etc/b", "same"), ("/etc/c", "new"))
    (change,) = spec_diff(old, new)
    assert (change.field, change.old, change.new) == (
        "configs",
        "/etc/a, /etc/b",
        "+/etc/c ~/etc/a",
    )


def test_a_writable_copy_is_unpacked_aside_checked_opened_and_renamed_once() -> None:
    fake = FakeHost()
    files = (ConfigFile("/app/a.py", "a\n", "/app"), ConfigFile("/app/lib/b.py", "b\n", "/app"))
    single = ConfigFile("/etc/app.ini", "debug = 1\n", "/etc/app.ini")
    mounts = place(fake, [*files, single])
    root = "/home/deploy/.minidock/configs/copies"
    (app, ini) = mounts
    assert (app.target, app.writable, ini.target, ini.writable) == (
        "/app",
        True,
        "/etc/app.ini",
        True,
    )
    assert app.source.startswith(f"{root}/")
    assert ini.source.endswith("/app.ini")
    assert fake.files == {
        f"{app.source}/a.py": "a\n",
        f"{app.source}/lib/b.py": "b\n",
        ini.source: "debug = 1\n",
    }  # no read-only config files: the copy is the only file on the host
    steps = [c[:2] for c in fake.calls if c[0] in ("tar", "sha256sum", "chmod", "mv")]
    assert steps[:4] == [["tar", "-x"], ["sha256sum", "--check"], ["chmod", "-R"], ["mv", "-T"]]
    fake.files[f"{app.source}/a.py"] = "written by the task\n"
    fake.calls.clear()
    assert place(fake, [*files, single], "t2") == mounts  # there: used with its writes
    assert fake.files[f"{app.source}/a.py"] == "written by the task\n"
    assert {c[0] for c in fake.calls} == {"mkdir", "realpath", "test"}
    changed = [replace(files[0], content="a2\n"), files[1]]
    (moved,) = place(fake, changed, "t3")
    assert moved.source != app.source
    assert fake.files[f"{moved.source}/a.py"] == "a2\n"


def test_a_writable_copy_is_its_services_own_and_a_bad_upload_refused() -> None:
    fake = FakeHost()
    config = ConfigFile("/app/a.py", "a\n", "/app")
    (web,) = place(fake, [config])
    other = asyncio.run(ConfigPlacer(fake.sh, "prod").place("host1", [config], "t1", "worker"))
    assert other[0].source != web.source  # another service's copy: its own writes
    fake = FakeHost()
    original = fake.sh

    async def corrupting(host: str, argv: Sequence[str], stdin: str | None) -> Result:
        if argv[0] == "tar":
            return Result(0, "", "")  # unpacked nothing: the check finds no file
        return await original(host, argv, stdin)

    fake.sh = corrupting  # type: ignore[method-assign]
    with pytest.raises(ConfigPlaceError, match="a file on the host has another sha256"):
        place(fake, [config])
