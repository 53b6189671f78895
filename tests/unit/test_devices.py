"""Devices and GPUs (issue 44, item 5): the keys read from TOML and Compose, their one-line
refusals, the docker argv each gives (recorded exactly), and the GPU ids a container's
label records as `docker inspect` shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minidock.commands.docker import gpus_args, run_argv, run_options_args
from minidock.commands.facts import parse_inspect
from minidock.model import Service
from minidock.spec import SpecError, load, load_inventory

CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n[services.ml]\nimage = "ml:1"\n'
HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'


def loaded(tmp_path: Path, body: str, hosts: str = HOST) -> Service:
    (tmp_path / "inventory.toml").write_text(hosts)
    (tmp_path / "cluster.toml").write_text(CLUSTER + body)
    return load(tmp_path / "cluster.toml")[0].services[0]


def test_the_keys_are_read_into_the_model(tmp_path: Path) -> None:
    ml = loaded(
        tmp_path,
        'devices = ["/dev/null:/dev/mydev", "/dev/fuse:/dev/fuse:rwm"]\nprivileged = true\n'
        'shm_size = "1g"\ntmpfs = ["/run:size=64m"]\npids_limit = 200\ngpus = 2\n',
    )
    assert (ml.devices, ml.privileged, ml.shm_size, ml.tmpfs, ml.pids_limit, ml.gpus) == (
        ("/dev/null:/dev/mydev", "/dev/fuse:/dev/fuse:rwm"), True, 1 << 30, ("/run:size=64m",),
        200, 2,
    )  # fmt: skip


def test_unset_keys_change_no_spec_hash(tmp_path: Path) -> None:
    assert loaded(tmp_path, "").spec_hash() == Service("ml", "ml:1").spec_hash()
    assert loaded(tmp_path, "gpus = 1\n").spec_hash() != Service("ml", "ml:1").spec_hash()


def test_the_inventory_gpus_are_a_count_or_the_ids(tmp_path: Path) -> None:
    (tmp_path / "i.toml").write_text(
        HOST + 'gpus = 2\n[[hosts]]\nname = "host2"\ngpus = ["GPU-8f1c", "3"]\n'
    )
    hosts = load_inventory(tmp_path / "i.toml").hosts
    assert [h.gpus for h in hosts] == [("0", "1"), ("GPU-8f1c", "3")]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("gpus = -1\n", "services.ml.gpus: must be at least 0, got -1"),
        ("pids_limit = 0\n", "services.ml.pids_limit: must be at least 1, got 0"),
        ('devices = ["dev/null"]\n', "services.ml.devices[0]: invalid device 'dev/null'"),
        ('tmpfs = ["run"]\n', "services.ml.tmpfs[0]: invalid tmpfs mount 'run': use '/PATH'"),
        ('shm_size = "lots"\n', "services.ml.shm_size: "),
    ],
)
def test_a_bad_value_is_one_line(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, body)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{tmp_path / 'cluster.toml'}: {expected}")


def test_a_bad_inventory_gpus_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "i.toml").write_text(HOST + 'gpus = ["a b"]\n')
    with pytest.raises(SpecError) as err:
        load_inventory(tmp_path / "i.toml")
    assert str(err.value).startswith(f"{tmp_path / 'i.toml'}: hosts[0].gpus")


def test_the_docker_run_flags_are_the_ones_docker_documents() -> None:
    ml = Service(
        "ml", "ml:1", devices=("/dev/null:/dev/mydev",), privileged=True, shm_size=1 << 30,
        tmpfs=("/run:size=64m",), pids_limit=200,
    )  # fmt: skip
    assert run_options_args(ml) == [
        "--device", "/dev/null:/dev/mydev", "--privileged", "--shm-size", "1073741824",
        "--tmpfs", "/run:size=64m", "--pids-limit", "200",
    ]  # fmt: skip


def test_a_gpu_task_is_given_its_ids_and_labelled_with_them() -> None:
    """Docker's documented form for NVIDIA: one id plain, several quoted (the flag's value
    is CSV: `--gpus '"device=0,2"'`)."""
    assert gpus_args(()) == []
    assert gpus_args(("1",)) == ["--label", "minidock.gpus=1", "--gpus", "device=1"]
    assert gpus_args(("0", "2")) == ["--label", "minidock.gpus=0,2", "--gpus", '"device=0,2"']
    argv, _ = run_argv(Service("ml", "ml:1", gpus=2), "prod", 1, "abc", "h", gpus=("GPU-a", "3"))
    assert argv[argv.index("--gpus") - 2 : argv.index("--gpus") + 2] == [
        "--label", "minidock.gpus=GPU-a,3", "--gpus", '"device=GPU-a,3"',
    ]  # fmt: skip


def test_the_ids_a_container_holds_are_read_from_its_label() -> None:
    raw = {
        "Id": "a" * 64, "Name": "/ml.1.abc", "Created": "2026-12-05T04:00:00.000000000Z",
        "Config": {"Image": "ml:1", "Labels": {
            "minidock.cluster": "prod", "minidock.service": "ml", "minidock.slot": "1",
            "minidock.task": "abc", "minidock.spec": "h", "minidock.gpus": "0,2",
        }},
        "State": {"Status": "running", "StartedAt": "2026-12-05T04:00:01.000000000Z",
                  "FinishedAt": "0001-01-01T00:00:00Z", "ExitCode": 0},
        "HostConfig": {},
    }  # fmt: skip
    (container,) = parse_inspect("host1", "prod", json.dumps([raw]))
    assert container.gpus == ("0", "2")
