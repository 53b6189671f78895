"""The lab's images built side by side (minidock.lab.builds): the start order, the bound on
builds at once, waiting for one build while the others go on, errors; and the image sets
`lab up --images`, `lab build` and `lab load` name. The builds are fakes gated by events:
nothing here runs Docker or mmdebstrap."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncssh
import pytest
from typer.testing import CliRunner

from minidock.cli import app
from minidock.lab import builds, fleet, images, local
from minidock.lab.builds import HOST, Builds, build_order, workers_for
from minidock.lab.errors import BadInputError, LabError
from minidock.lab.fleet import Lab
from minidock.lab.local import Process

WAIT = 30.0  # a bound on waits for the other thread, so a broken build fails, never hangs


class Gated:
    """Fake builds: each records that it started, then waits for its gate."""

    def __init__(self, *names: str) -> None:
        self.gates = {name: threading.Event() for name in names}
        self.started: list[str] = []
        self.finished: list[str] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def job(self, name: str, fail: bool = False) -> Callable[[], dict[str, float]]:
        def build() -> dict[str, float]:
            with self._lock:
                self.started.append(name)
                self.running += 1
                self.most = max(self.most, self.running)
                self._changed.notify_all()
            try:
                assert self.gates[name].wait(WAIT), f"{name} never released"
                if fail:
                    raise LabError(f"building {name} failed")
                with self._lock:
                    self.finished.append(name)
                return {f"minidock-lab/{name}:x": 1.0}
            finally:
                with self._lock:
                    self.running -= 1

        return build

    def jobs(self, *names: str) -> dict[str, Callable[[], dict[str, float]]]:
        return {name: self.job(name) for name in names}

    def wait_started(self, count: int) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.started) >= count, WAIT)
            return list(self.started)


def test_the_host_image_starts_first_then_the_cheapest() -> None:
    cost = {HOST: 30.0, "workloads": 1.0, "ingress": 25.0, "names": 25.0}
    assert build_order(["names", "ingress", HOST, "workloads"], cost) == [
        HOST,
        "workloads",
        "ingress",  # a tie goes by name
        "names",
    ]
    assert build_order(["names", "workloads", "names"], cost) == ["workloads", "names"]
    assert build_order(["other", "ingress"], cost) == ["ingress", "other"]  # unknown: last


def test_one_build_a_core_and_never_more_than_there_are() -> None:
    assert workers_for(4, cpus=2) == 2
    assert workers_for(1, cpus=2) == 1
    assert workers_for(0, cpus=2) == 1
    assert workers_for(3, cpus=8) == 3


def test_at_most_workers_run_at_once_started_in_order() -> None:
    fake = Gated("a", "b", "c", "d")
    with Builds(fake.jobs("a", "b", "c", "d"), workers=2) as running:
        assert fake.wait_started(2) == ["a", "b"]
        assert fake.started == ["a", "b"]  # c waits for a free worker
        fake.gates["b"].set()
        running.wait("b")
        assert fake.wait_started(3) == ["a", "b", "c"]
        for gate in fake.gates.values():
            gate.set()
        assert running.wait_all() == {f"minidock-lab/{n}:x": 1.0 for n in "abcd"}
    assert fake.most == 2


def test_waiting_for_the_host_image_leaves_the_others_building() -> None:
    fake = Gated(HOST, "ingress")
    with Builds(fake.jobs(HOST, "ingress"), workers=2) as running:
        fake.gates[HOST].set()
        assert running.wait(HOST) == {"minidock-lab/host:x": 1.0}
        assert fake.wait_started(2) == [HOST, "ingress"]
        assert fake.running == 1  # the ingress image is still building
        assert running.wait("names") == {}  # not started here: nothing to wait for
        fake.gates["ingress"].set()
    assert fake.running == 0  # leaving waited for it


def test_a_failed_build_is_raised_after_the_others_finished() -> None:
    fake = Gated("a", "b")
    for gate in fake.gates.values():
        gate.set()
    jobs = {"a": fake.job("a", fail=True), "b": fake.job("b")}
    with Builds(jobs, workers=1) as running:
        with pytest.raises(LabError, match="building a failed"):
            running.wait_all()
        assert fake.started == ["a", "b"]  # b built all the same
        assert running.wait("b") == {"minidock-lab/b:x": 1.0}
        with pytest.raises(LabError, match="building a failed"):
            running.wait("a")


def test_start_builds_starts_the_host_image_then_the_sets_cheapest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Gated(*builds.build_order([HOST, *images.SET_NAMES], images.BUILD_COST))
    for gate in fake.gates.values():
        gate.set()
    monkeypatch.setattr(images, "JOBS", fake.jobs(*fake.gates))
    with images.start_builds(["names", "ingress", "workloads"]) as running:
        assert running.names == [HOST, "workloads", "ingress", "names"]
    with images.start_builds(["ingress"], host=False) as running:
        assert running.names == ["ingress"]
    assert images.build_images(["workloads"]) == {
        "minidock-lab/host:x": 1.0,
        "minidock-lab/workloads:x": 1.0,
    }


def test_image_sets() -> None:
    assert images.parse_sets("all", option="--images") == images.SET_NAMES
    assert images.parse_sets("workloads, ingress,workloads", option="--images") == (
        "workloads",
        "ingress",
    )
    assert images.set_images(["ingress", "workloads"]) == (
        images.PROXY_IMAGE,
        *images.WORKLOAD_IMAGES,
    )
    # every image `lab up` loads by default is in one set
    assert sorted(images.set_images(images.SET_NAMES)) == sorted(images.HOST_IMAGES)
    for text, problem in (("web", "unknown image set 'web'"), (",", "no image set named")):
        with pytest.raises(BadInputError) as refused:
            images.parse_sets(text, option="--images")
        assert str(refused.value) == (
            f"--images: {problem}: use all, or some of workloads, ingress, names"
        )
        assert refused.value.exit_code == 2


@pytest.mark.parametrize(
    "args",
    [["up", "--images", "workloads,bogus"], ["build", "bogus"], ["load", "ingress", "bogus"]],
)
def test_an_unknown_image_set_is_one_line_exit_2_before_any_docker(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_docker(*_: object, **__: object) -> None:
        raise AssertionError("ran a local command")

    monkeypatch.setattr("minidock.lab.local.run", no_docker)
    result = CliRunner().invoke(app, ["lab", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"lab: {'--images' if args[0] == 'up' else 'IMAGE_SETS'}: unknown image set 'bogus':"
        " use all, or some of workloads, ingress, names"
    ]


# -- lab up: the containers start on the host image alone ---------------------------------------
def test_lab_up_starts_the_hosts_while_the_proxy_image_builds_and_loads_each_set_once_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ingress image's build is held until `docker-compose up` ran: were `up` to wait
    for every build first, it would fail. The workloads are loaded before it, the ingress
    set only after its build, and the names set, not asked for, is neither built nor loaded."""
    fake = Gated(HOST, "workloads", "ingress", "names")
    fake.gates[HOST].set()
    fake.gates["workloads"].set()
    monkeypatch.setattr(images, "JOBS", fake.jobs(*fake.gates))
    events: list[str] = []

    def run(argv: Sequence[str], **_: object) -> Process:
        if argv[0] == "docker-compose" and "up" in argv:
            events.append("compose up")
            fake.gates["ingress"].set()
        return Process(argv, 0, "", "")

    monkeypatch.setattr(local, "run", run)
    monkeypatch.setattr(local, "engine_available", lambda: True)
    monkeypatch.setattr(fleet, "pebble_installed", lambda: False)
    monkeypatch.setenv("MINIDOCK_LAB_DIND", "caps")
    lab = Lab(tmp_path, "p")
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()

    def load(host: str, wanted: Sequence[str] = ()) -> list[str]:
        kind = "ingress" if images.PROXY_IMAGE in wanted else "workloads"
        events.append(f"load {kind} into {host}, built: {kind in fake.finished}")
        return list(wanted)

    monkeypatch.setattr(lab, "exec", lambda *_, **__: None)
    monkeypatch.setattr(lab, "read_host_key", lambda *_, **__: key)
    monkeypatch.setattr(lab, "container_addresses", dict)
    monkeypatch.setattr(lab, "wait_docker", lambda *_, **__: None)
    monkeypatch.setattr(lab, "wait_ready", lambda *_, **__: None)
    monkeypatch.setattr(lab, "load_images", load)
    hosts = lab.up(2, sets=["ingress", "workloads"])
    assert [h.name for h in hosts] == ["host1", "host2"]
    assert fake.started[:2] == [HOST, "workloads"]
    assert "names" not in fake.started
    assert events[0] == "compose up"
    assert sorted(events[1:3]) == [f"load workloads into host{i}, built: True" for i in (1, 2)]
    assert sorted(events[3:]) == [f"load ingress into host{i}, built: True" for i in (1, 2)]
    assert {"build minidock-lab/host:x", "build minidock-lab/ingress:x"} <= set(lab.timings)
