"""Ownership of labs (issue 14): a `lab` command for a compose project that another lab
directory runs is refused (exit 2, one line naming the command that reaches that lab) and
never deletes a file of a lab it does not own. The engine is a fake at the lab's one seam
for local commands (`minidock.lab.fleet.run`); everything else is the real code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest
from typer.testing import CliRunner

from minidock.cli import app
from minidock.lab import local
from minidock.lab.directory import LabDir, LabHost, lab_command
from minidock.lab.errors import NotOwnedError
from minidock.lab.fleet import Lab
from minidock.lab.local import Process
from minidock.lab.ownership import Claim, refusal, takeover

PROJECT_LABEL = "label=com.docker.compose.project="


@dataclass
class FakeEngine:
    """Containers by compose project, each with the working dir compose recorded and its
    state; answers the lab's queries and records every command that would change
    something."""

    containers: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)  # by project; default running
    changes: list[list[str]] = field(default_factory=list)

    def add(self, project: str, lab_dir: Path, n: int = 2, state: str = "running") -> None:
        self.containers[project] = [(f"{project}-c{i}", str(lab_dir)) for i in range(n)]
        self.states[project] = state

    def run(self, argv: Sequence[str], **_: object) -> Process:
        argv = list(argv)
        project = next((a[len(PROJECT_LABEL) :] for a in argv if a.startswith(PROJECT_LABEL)), "")
        mine = self.containers.get(project, [])
        if argv[:3] == ["docker", "ps", "-a"] and "--format" in argv:
            state = self.states.get(project, "running")
            return Process(argv, 0, "".join(f"{state} {d}\n" for _, d in mine), "")
        if argv[:3] == ["docker", "ps", "-aq"]:
            return Process(argv, 0, "".join(f"{c}\n" for c, _ in mine), "")
        if argv[1:3] in (["volume", "ls"], ["network", "ls"]):
            return Process(argv, 0, "", "")
        self.changes.append(argv)
        if argv[0] == "docker-compose":
            self.containers.pop(argv[argv.index("-p") + 1], None)
        elif argv[:2] == ["docker", "rm"]:
            for name, items in self.containers.items():
                self.containers[name] = [c for c in items if c[0] not in argv]
        return Process(argv, 0, "", "")


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(local, "run", fake.run)
    monkeypatch.setattr(local, "engine_available", lambda: True)
    return fake


def make_lab_files(root: Path, project: str) -> dict[Path, bytes]:
    """A lab's files as `up` leaves them; returns every file under root with its bytes."""
    lab = LabDir(root, project)
    hosts = [LabHost(f"host{i}", 23000 + i, "a", f"{project}-host{i}") for i in (1, 2)]
    keys = {
        h.name: asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        for h in hosts
    }
    lab.ensure_key()
    lab.write_state(hosts, "caps", "minidock-lab/host:x")
    lab.write_inventory(hosts)
    lab.write_known_hosts(hosts, keys)
    lab.compose_path.write_text("{}\n")
    return files_under(root)


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def two_labs(tmp_path: Path, engine: FakeEngine) -> tuple[Path, Path]:
    """Lab A (project lab-a) and lab B (project lab-b), each running from its own root."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root, project in ((a, "lab-a"), (b, "lab-b")):
        make_lab_files(root, project)
        engine.add(project, root.resolve() / ".lab")
    return a, b


# -- another directory's compose project --------------------------------------------------------
@pytest.mark.parametrize(
    ("verb", "act"),
    [
        ("down", lambda lab: lab.down()),
        ("status", lambda lab: lab.status()),
        ("kill host1", lambda lab: lab.kill("host1")),
        ("kill host1 --mode pause", lambda lab: lab.kill("host1", "pause")),
        ("revive host1", lambda lab: lab.revive("host1")),
        ("up", lambda lab: lab.prepare(2)),
    ],
)
def test_a_command_for_another_roots_project_is_refused_and_changes_nothing(
    two_labs: tuple[Path, Path], engine: FakeEngine, verb: str, act: object
) -> None:
    """Issue 27 item 5: the line names the other checkout's lab as such and gives no
    command that operates it; the command it gives reaches this checkout's own lab."""
    a, b = two_labs
    before = files_under(a.parent)
    with pytest.raises(NotOwnedError) as refused:
        act(Lab(a, project="lab-b"))  # type: ignore[operator]
    message = str(refused.value)
    head = (
        f"compose project 'lab-b' belongs to another checkout's lab (in {b.resolve()}),"
        f" not to this one ({a})"
    )
    own = f"minidock lab --root {a} --project"
    if verb == "up":
        tail = f"this checkout's own lab takes another project name: `{own} NAME up`"
    else:
        tail = f"this checkout's lab is project 'lab-a': `{own} lab-a {verb}`"
    assert message == f"{head}; {tail}"
    assert f"--root {b}" not in message
    assert refused.value.exit_code == 2
    assert engine.changes == []
    assert files_under(a.parent) == before
    assert len(engine.containers["lab-a"]) == len(engine.containers["lab-b"]) == 2


def test_cli_down_with_the_other_labs_project_exits_2_with_one_line(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    a, _ = two_labs
    before = files_under(a.parent)
    result = CliRunner().invoke(app, ["lab", "--root", str(a), "--project", "lab-b", "down"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lab: compose project 'lab-b' belongs to another checkout's lab")
    assert files_under(a.parent) == before
    assert engine.changes == []


def test_cli_takes_the_project_from_minidock_lab_project(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    a, _ = two_labs
    result = CliRunner().invoke(
        app, ["lab", "--root", str(a), "down"], env={"MINIDOCK_LAB_PROJECT": "lab-b"}
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("lab: compose project 'lab-b' belongs to another checkout")
    assert engine.changes == []


# -- a root that holds another project's files ---------------------------------------------------
@pytest.mark.parametrize(
    ("verb", "act"),
    [
        ("down", lambda lab: lab.down()),
        ("status", lambda lab: lab.status()),
        ("kill host2", lambda lab: lab.kill("host2")),
        ("revive host2", lambda lab: lab.revive("host2")),
    ],
)
def test_a_command_for_a_project_that_is_not_this_roots_names_the_right_project(
    two_labs: tuple[Path, Path],
    engine: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
    act: object,
) -> None:
    a, _ = two_labs
    monkeypatch.chdir(a)
    before = files_under(a.parent)
    with pytest.raises(NotOwnedError) as refused:
        act(Lab(a))  # type: ignore[operator]  # the default project, minidock-lab
    assert str(refused.value) == (
        f"{a.resolve()} holds the lab of compose project 'lab-a', not 'minidock-lab':"
        f" use `minidock lab --project lab-a {verb}`"
    )
    assert engine.changes == []
    assert files_under(a.parent) == before


def test_with_the_default_project_running_from_another_root_this_roots_lab_is_named(
    two_labs: tuple[Path, Path], engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 item 10: the demo's lab (the default project) running from another
    checkout must not take the hint away from the lab of the root the operator stands in."""
    a, _ = two_labs
    demo = a.parent / "demo"
    make_lab_files(demo, "minidock-lab")
    engine.add("minidock-lab", demo.resolve() / ".lab")
    monkeypatch.chdir(a)
    before = files_under(a.parent)
    with pytest.raises(NotOwnedError) as refused:
        Lab(a).down()  # the default project, minidock-lab: the demo's
    message = str(refused.value)
    assert (
        f"compose project 'minidock-lab' belongs to another checkout's lab (in {demo.resolve()})"
        in message
    )
    assert message.endswith(
        "this checkout's lab is project 'lab-a': `minidock lab --project lab-a down`"
    )
    assert engine.changes == []
    assert files_under(a.parent) == before


def test_up_over_a_running_lab_of_another_project_is_refused(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    a, _ = two_labs
    before = files_under(a.parent)
    with pytest.raises(NotOwnedError, match="holds the lab of compose project 'lab-a', still"):
        Lab(a, project="lab-c").prepare(1)
    assert files_under(a.parent) == before
    assert engine.changes == []


def test_down_of_a_project_this_root_started_keeps_the_files_of_the_roots_own_lab(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    """`lab --project X up` in A, then a default `lab up` in A: X's containers are A's, but
    A's files now belong to the other project. `down` of X removes X's containers only."""
    a, _ = two_labs
    engine.add("lab-x", a.resolve() / ".lab")
    before = files_under(a.parent)
    Lab(a, project="lab-x").down()
    assert "lab-x" not in {p for p, items in engine.containers.items() if items}
    assert [argv[:2] for argv in engine.changes] == [["docker", "rm"]]
    assert files_under(a.parent) == before
    assert len(engine.containers["lab-a"]) == 2


# -- a lab's own down ----------------------------------------------------------------------------
def test_down_of_the_own_lab_removes_its_containers_and_files_but_keeps_the_key(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    a, b = two_labs
    b_files = files_under(b)
    lab = Lab(a, project="lab-a")
    lab.down()
    assert engine.changes[0][:1] == ["docker-compose"]
    assert engine.containers.get("lab-a", []) == []
    for gone in (lab.inventory_path, lab.known_hosts_path, lab.state_path):
        assert not gone.exists()
    assert lab.key_path.exists()
    assert files_under(b) == b_files
    lab.down()  # idempotent: nothing left, nothing refused


def test_down_without_lab_json_removes_the_files_when_the_containers_are_this_roots(
    two_labs: tuple[Path, Path], engine: FakeEngine
) -> None:
    a, _ = two_labs
    lab = Lab(a, project="lab-a")
    lab.state_path.unlink()
    lab.down()
    assert not lab.inventory_path.exists()
    assert not lab.known_hosts_path.exists()


# -- the rule, pure --------------------------------------------------------------------------------
def claim(**overrides: object) -> Claim:
    base: dict[str, object] = {
        "root": Path("/r/a"),
        "project": "p",
        "project_dirs": (),
        "recorded": "p",
        "recorded_runs": False,
    }
    return Claim(**{**base, **overrides})  # type: ignore[arg-type]


def test_refusal_rules() -> None:
    cwd = Path("/r/a")
    assert refusal(claim(), "down", cwd=cwd) is None
    assert refusal(claim(project_dirs=["/r/a/.lab"]), "kill", "host1", cwd=cwd) is None
    assert refusal(claim(recorded=None), "up", cwd=cwd) is None
    # files left by a lab that is gone: up may take the root over
    assert refusal(claim(recorded="q"), "up", cwd=cwd) is None
    assert refusal(claim(recorded="q", recorded_runs=True), "up", cwd=cwd) == (
        "/r/a holds the lab of compose project 'q', still running:"
        " `minidock lab --project q down` first, or use another --root"
    )
    assert refusal(claim(recorded="q"), "status", cwd=cwd) == (
        "/r/a holds the lab of compose project 'q', not 'p': use `minidock lab --project q status`"
    )
    running_b = claim(project_dirs=["/r/b/.lab"], live_dirs=["/r/b/.lab"])
    assert refusal(running_b, "up", cwd=cwd) == (
        "compose project 'p' belongs to another checkout's lab (in /r/b), not to this one"
        " (/r/a); this checkout's own lab takes another project name:"
        " `minidock lab --project NAME up`"
    )
    # the case: this checkout's lab is another project; another checkout runs p
    assert refusal(claim(recorded="ux", project_dirs=["/r/b/.lab"]), "status", cwd=cwd) == (
        "compose project 'p' belongs to another checkout's lab (in /r/b), not to this one"
        " (/r/a); this checkout's lab is project 'ux': `minidock lab --project ux status`"
    )
    # the project's containers come from two dirs, one of them ours: still refused
    mixed = claim(project_dirs=["/r/a/.lab", "/r/b/.lab"])
    assert refusal(mixed, "down", cwd=cwd) is not None
    assert not mixed.owns_files()
    assert claim(recorded=None, project_dirs=["/r/a/.lab"]).owns_files()
    assert not claim(recorded=None).owns_files()
    assert not claim(recorded="q", project_dirs=["/r/a/.lab"]).owns_files()


def test_up_takes_over_a_project_another_labs_stopped_containers_left() -> None:
    """A lab none of whose containers runs is gone (a reboot, an engine started on a copied
    disk: CI once found the demo's project left so by another checkout): `up` may replace
    it; every other command, and `up` while one of its containers runs or is paused, is
    still refused."""
    cwd = Path("/r/a")
    stopped = claim(recorded=None, project_dirs=["/r/b/.lab"], live_dirs=[])
    assert refusal(stopped, "up", cwd=cwd) is None
    for verb in ("down", "status", "kill", "revive", "load"):
        assert refusal(stopped, verb, cwd=cwd) is not None  # type: ignore[arg-type]
    running = claim(recorded=None, project_dirs=["/r/b/.lab"], live_dirs=["/r/b/.lab"])
    assert refusal(running, "up", cwd=cwd) is not None
    ours_runs = claim(project_dirs=["/r/a/.lab", "/r/b/.lab"], live_dirs=["/r/a/.lab"])
    assert refusal(ours_runs, "up", cwd=cwd) is None  # only ours runs: b's are leftovers


def test_takeover_names_the_roots_it_removes_and_nothing_without_them() -> None:
    assert takeover(claim(project_dirs=["/r/a/.lab"])) is None  # only this root's
    assert takeover(claim(project_dirs=["/r/b/.lab", "/r/c/.lab"])) == (
        "removed compose project 'p''s stopped containers, left by the lab in /r/b, /r/c"
        " (none of them ran)"
    )


@pytest.mark.parametrize("state", ["exited", "created", "dead"])
def test_up_removes_the_stopped_leftovers_of_another_root_and_names_them(
    tmp_path: Path, engine: FakeEngine, state: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_lab_files(b, "minidock-lab")
    engine.add("minidock-lab", b.resolve() / ".lab", state=state)
    before_b = files_under(b)
    lab = Lab(a, project="minidock-lab")
    lab._may_start(2)
    assert ["docker", "rm", "-f", "-v", "minidock-lab-c0", "minidock-lab-c1"] in engine.changes
    assert engine.containers["minidock-lab"] == []
    assert lab.notes == [
        "removed compose project 'minidock-lab''s stopped containers, left by the lab in"
        f" {b.resolve()} (none of them ran)"
    ]
    assert files_under(b) == before_b  # the other root's files are its own


@pytest.mark.parametrize("state", ["running", "paused", "restarting"])
def test_up_refuses_another_roots_lab_while_a_container_of_it_runs(
    tmp_path: Path, engine: FakeEngine, state: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    engine.add("minidock-lab", b.resolve() / ".lab", state=state)
    with pytest.raises(NotOwnedError, match="belongs to another checkout's lab"):
        Lab(a, project="minidock-lab")._may_start(2)
    assert engine.changes == []


def test_lab_command_shows_root_and_project_only_when_not_the_default(tmp_path: Path) -> None:
    assert lab_command("up", root=tmp_path, project="minidock-lab", cwd=tmp_path) == (
        "minidock lab up"
    )
    assert lab_command("down", root=tmp_path, project="x", cwd=tmp_path) == (
        "minidock lab --project x down"
    )
    elsewhere = tmp_path / "my lab"
    assert lab_command("status", root=elsewhere, project="minidock-lab", cwd=tmp_path) == (
        f"minidock lab --root '{elsewhere}' status"
    )
