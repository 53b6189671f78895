"""The operator's use cases of issue 15, called directly over FakeDocker: `ps`, `logs`,
`exec`, `scale` and `push`. Typed outcomes, secrets masked on every line, nothing written
by the read-only ones; `scale` is a new generation of the stored spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from minidock import usecases
from minidock.store.sqlite import SQLiteStore
from minidock.usecases import BadInput, ExitCode, LogLine, PushProgress, UseCaseError
from tests.behaviour import Clock
from tests.fakes import FakeDocker, FakeEngine
from tests.unit.test_usecases import INVENTORY, STACK, FakeClock, Setup, make_setup, run

SECRET = "s3cr3t-token-value"
WBE = r"unknown service 'wbe' \(did you mean 'web'\?\); known services: db, web"
STACK_WITH_SECRET = STACK.replace(
    '[services.db]\nimage = "db:1"\n',
    f'[services.db]\nimage = "db:1"\nenv = {{ TOKEN = "{SECRET}" }}\n',
)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    up = make_setup(tmp_path)
    up.file.write_text(STACK_WITH_SECRET)
    up.converged()
    return up


def test_ps_lists_every_task_with_its_host_state_and_ports(setup: Setup) -> None:
    listed = run(usecases.ps(setup.state, setup.runtime()))
    assert listed.exit_code is ExitCode.OK
    assert [(t.service, t.slot, t.state) for t in listed.tasks] == [
        ("db", 1, "running"),
        ("web", 1, "running"),
        ("web", 2, "running"),
    ]
    web = [t for t in listed.tasks if t.service == "web"]
    assert all(t.ports == ("8080/tcp",) for t in web)
    assert len({t.host for t in web}) == 2
    assert listed.unreachable == ()
    only_db = run(usecases.ps(setup.state, setup.runtime(), "db"))
    assert [t.name for t in only_db.tasks] == [listed.tasks[0].name]


def test_ps_says_which_hosts_it_could_not_see(setup: Setup) -> None:
    setup.docker.down.add("host3")
    listed = run(usecases.ps(setup.state, setup.runtime()))
    assert [p.host for p in listed.unreachable] == ["host3"]
    assert "connection refused" in listed.unreachable[0].error


def test_ps_of_an_unknown_service_is_bad_input(setup: Setup) -> None:
    with pytest.raises(
        BadInput, match=r"unknown service 'wbe' \(did you mean 'web'\?\); known services: db, web"
    ):
        run(usecases.ps(setup.state, setup.runtime(), "wbe"))


def test_logs_prefix_each_line_with_its_task_and_mask_secrets(setup: Setup) -> None:
    setup.docker.logs = {"db": f"ready\ntoken is {SECRET}\n"}
    lines: list[LogLine] = []
    shown = run(usecases.logs("db", setup.state, setup.runtime(), lines.append, tail=10))
    (task,) = shown.tasks
    assert lines == [
        LogLine(task, "stdout", "ready"),
        LogLine(task, "stdout", "token is ***"),
    ]
    argv = next(c.argv for c in setup.executors[-1].calls if c.argv[1] == "logs")
    assert argv[2:4] == ["--tail", "10"]


def test_logs_of_one_slot_follow_all_tasks_and_since(setup: Setup) -> None:
    lines: list[LogLine] = []
    shown = run(
        usecases.logs(
            "web", setup.state, setup.runtime(), lines.append, slot=2, follow=True, since=600.0
        )
    )
    assert [n.split(".")[:2] for n in shown.tasks] == [["web", "2"]]
    argv = next(c.argv for c in setup.executors[-1].calls if c.argv[1] == "logs")
    assert argv[2:5] == ["--follow", "--since", "600s"]


def test_logs_of_a_slot_the_service_does_not_have_is_bad_input(setup: Setup) -> None:
    with pytest.raises(BadInput, match=r"^web has no slot 7; its slots: 1, 2$"):
        run(usecases.logs("web", setup.state, setup.runtime(), print, slot=7))


def test_logs_of_a_slot_without_tasks_is_a_one_line_failure(setup: Setup) -> None:
    setup.docker.down.update(("host1", "host2", "host3"))  # web.1's host among them
    with pytest.raises(UseCaseError, match=r"no task of web\.1 on the reachable hosts"):
        run(usecases.logs("web", setup.state, setup.runtime(), print, slot=1))


def test_exec_runs_in_the_lowest_running_slot_and_masks_its_output(setup: Setup) -> None:
    lines: list[LogLine] = []
    done = run(usecases.exec_task("db", ["env"], setup.state, setup.runtime(), lines.append))
    assert (done.exit_code, done.task.split(".")[:2]) == (0, ["db", "1"])
    assert [line.text for line in lines] == ["TOKEN=***"]
    echoed: list[LogLine] = []
    slot2 = run(
        usecases.exec_task("web.2", ["echo", "hi"], setup.state, setup.runtime(), echoed.append)
    )
    assert slot2.task.startswith("web.2.")
    assert [line.text for line in echoed] == ["hi"]


def test_exec_passes_the_commands_exit_status_through(setup: Setup) -> None:
    lines: list[LogLine] = []
    done = run(usecases.exec_task("web", ["nope"], setup.state, setup.runtime(), lines.append))
    assert done.exit_code == 126
    assert lines[0].stream == "stderr"


@pytest.mark.parametrize(
    ("target", "command", "error"),
    [
        (
            "wbe",
            ["true"],
            r"unknown service 'wbe' \(did you mean 'web'\?\); known services: db, web",
        ),
        (
            "wbe.1",
            ["true"],
            r"unknown service 'wbe' \(did you mean 'web'\?\); known services: db, web",
        ),
        ("web", [], "exec: give the command after --"),
    ],
)
def test_exec_refuses_bad_targets(
    setup: Setup, target: str, command: list[str], error: str
) -> None:
    with pytest.raises(BadInput, match=error):
        run(usecases.exec_task(target, command, setup.state, setup.runtime(), print))


def test_exec_in_a_slot_the_service_does_not_have_is_bad_input(setup: Setup) -> None:
    with pytest.raises(BadInput, match=r"^web has no slot 5; its slots: 1, 2$"):
        run(usecases.exec_task("web.5", ["true"], setup.state, setup.runtime(), print))


def test_scale_stores_a_generation_with_the_new_count_and_converges(setup: Setup) -> None:
    scaled = run(
        usecases.scale(
            "web", 1, setup.state, setup.runtime(), setup.report, wait=True, timeout=60.0
        )
    )
    assert (scaled.before, scaled.replicas, scaled.generation) == (2, 1, 2)
    assert scaled.exit_code is ExitCode.OK
    assert [n.split(".")[0] for n in setup.running()] == ["db", "web"]
    with SQLiteStore.open(setup.state) as store:
        latest = store.latest_generation()
        assert latest is not None
        gen, cluster = latest
        events = [e for _, e in store.events(limit=0)]
    assert gen == 2
    web = cluster.service("web")
    assert web is not None
    assert web.replicas == 1
    assert any(
        e.kind == "scale" and e.message == "scaled web from 2 to 1 as generation 2" for e in events
    )
    assert setup.file.read_text() == STACK_WITH_SECRET  # the file is the operator's


def _web_images(setup: Setup) -> list[str]:
    return sorted(
        doc["Config"]["Image"]
        for doc in setup.docker.containers()
        if doc["Config"]["Labels"].get("minidock.service") == "web" and doc["State"]["Running"]
    )


def _scaled(setup: Setup, replicas: int) -> None:
    done = run(
        usecases.scale(
            "web", replicas, setup.state, setup.runtime(), setup.report, wait=True, timeout=60.0
        )
    )
    assert done.exit_code is ExitCode.OK, done


def test_scale_after_a_rollback_scales_the_spec_that_runs(setup: Setup) -> None:
    # issue 43, break 8: scale re-admitted the file's spec with the new count, so after
    # `rollback web` (web:6 back to web:5) it rolled forward to web:6
    setup.file.write_text(STACK_WITH_SECRET.replace('"web:5"', '"web:6"'))
    assert setup.apply(wait=True, timeout=60.0).exit_code is ExitCode.OK
    back = run(
        usecases.rollback("web", setup.state, setup.runtime(), setup.report, wait=True, timeout=60)
    )
    assert back.exit_code is ExitCode.OK, back
    _scaled(setup, 3)
    assert _web_images(setup) == ["web:5"] * 3
    with SQLiteStore.open(setup.state) as store:
        latest = store.latest_generation()
        assert latest is not None
        web = latest[1].service("web")
        assert web is not None
        assert (web.image, web.replicas) == ("web:5", 3)  # the stored desired state runs
    again = run(usecases.reconcile(setup.state, setup.runtime(), setup.report))
    assert again.exit_code is ExitCode.OK
    assert _web_images(setup) == ["web:5"] * 3


def test_scale_after_an_automatic_rollback_keeps_its_count(setup: Setup) -> None:
    # issue 43, break 8: scale retried the image rolled back as failed, which failed again
    # and rolled back to the old count; the file applied again is still declined
    setup.file.write_text(STACK_WITH_SECRET.replace('"web:5"', '"web:broken"'))
    failed = setup.apply(wait=True, timeout=60.0)
    assert failed.exit_code is not ExitCode.OK
    _scaled(setup, 3)
    assert _web_images(setup) == ["web:5"] * 3
    again = setup.apply(wait=True, timeout=60.0)  # the failed spec, at its own count
    assert "applying it again changes nothing" in str(again)
    assert _web_images(setup) == ["web:5"] * 3


def test_scale_refuses_an_unknown_service_and_changes_nothing(setup: Setup) -> None:
    with pytest.raises(BadInput, match="unknown service 'wbe'"):
        run(usecases.scale("wbe", 3, setup.state, setup.runtime(), setup.report))
    with SQLiteStore.open(setup.state) as store:
        assert store.next_generation_id() == 2


def test_push_streams_to_hosts_that_lack_the_image_and_skips_the_others(setup: Setup) -> None:
    engine = FakeEngine("tool:9", size=8 << 20)
    runtime = dataclasses.replace(setup.runtime(), engine=lambda: engine)
    setup.docker.images = {"db:1", "web:5"}
    setup.docker.host_images["host2"] = {"tool:9"}
    seen: list[PushProgress] = []
    pushed = run(usecases.push("tool:9", setup.state, runtime, seen.append))
    assert pushed.exit_code is ExitCode.OK
    assert pushed.size == 8 << 20
    by_host = {p.host: p for p in pushed.pushed}
    assert by_host["host2"].skipped
    assert {h for h, p in by_host.items() if not p.skipped} == {"host1", "host3"}
    assert by_host["host1"].sent == 8 << 20
    assert engine.saves == ["tool:9", "tool:9"]
    assert {p.host for p in seen} == {"host1", "host3"}
    assert max(p.sent for p in seen if p.host == "host1") == 8 << 20
    assert all(p.total == 8 << 20 for p in seen)
    assert "tool:9" in setup.docker.host_images["host1"]


def test_push_to_named_hosts_from_an_inventory_file(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    clock = FakeClock()
    docker = FakeDocker(clock=Clock(clock.t), images=set())
    up = Setup(tmp_path, docker, clock)
    runtime = dataclasses.replace(up.runtime(), engine=lambda: FakeEngine("tool:9"))
    pushed = run(
        usecases.push(
            "tool:9",
            up.state,
            runtime,
            print,
            hosts=["host2"],
            inventory=tmp_path / "inventory.toml",
        )
    )
    assert [p.host for p in pushed.pushed] == ["host2"]
    assert not up.state.exists()  # no state read, none created
    with pytest.raises(BadInput, match="unknown host 'host9'; known hosts: host1, host2, host3"):
        run(
            usecases.push(
                "tool:9",
                up.state,
                runtime,
                print,
                hosts=["host9"],
                inventory=tmp_path / "inventory.toml",
            )
        )
    with pytest.raises(BadInput, match="image 'nope:1' is not in the controller's Docker engine"):
        run(
            usecases.push("nope:1", up.state, runtime, print, inventory=tmp_path / "inventory.toml")
        )
    with pytest.raises(BadInput, match="nothing applied yet"):
        run(usecases.push("tool:9", up.state, runtime, print))


def test_push_to_a_host_that_is_down_fails_that_host_only(setup: Setup) -> None:
    runtime = dataclasses.replace(setup.runtime(), engine=lambda: FakeEngine("tool:9"))
    setup.docker.images = {"db:1", "web:5"}
    setup.docker.down.add("host1")
    pushed = run(usecases.push("tool:9", setup.state, runtime, print))
    assert pushed.exit_code is ExitCode.FAILED
    assert [f.host for f in pushed.failed] == ["host1"]
    assert sorted(p.host for p in pushed.pushed) == ["host2", "host3"]


def test_logs_say_which_hosts_were_not_seen_when_no_task_is_found(setup: Setup) -> None:
    setup.docker.down.update({"host1", "host2", "host3"})
    with pytest.raises(UseCaseError) as err:
        run(usecases.logs("db", setup.state, setup.runtime(), print))
    assert str(err.value) == (
        "no task of db on the reachable hosts (not observed: host1, host2, host3)"
    )
