"""Shared pytest setup: options for the lab fleet, the `integration` marker applied to
everything under tests/integration (those tests need a Docker engine and fail without one;
unit tests never touch the engine), and the session's real etcd clusters (tests/etcd.py),
which unit and integration tests share.

No test reads the real user's SSH config: $MINIDOCK_SSH_CONFIG is "none" for the whole
session (and every `minidock` subprocess it starts); tests of the SSH config name their
own files. Every etcd state of the session is sealed with one key file, as each
controller of an etcd state is given one: $MINIDOCK_KEY_FILE (docs/ha.md)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from minidock.store.sealing import KEY_ENV
from tests.etcd import EtcdCluster, make_tls

# No hypothesis deadline for any property: a deadline is a timed assertion, and on a
# 2-core machine running the lab beside the unit tests an example takes 200 ms to 400 ms
# that takes 20 ms when quiet (test_compose's template property failed so under load).
# Derandomized: every run of the suite draws the same examples, so a landing is never lost
# to an example no earlier run drew (test_whole_decision found one on a helper's run, that
# run only). The search for new ones is its own run: MINIDOCK_HYPOTHESIS=explore draws at
# random, and `--hypothesis-seed=N` picks the draw (docs/testing.md, "Properties").
settings.register_profile("minidock", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None, derandomize=False)
settings.load_profile(os.environ.get("MINIDOCK_HYPOTHESIS", "minidock"))

TESTS_DIR = Path(__file__).parent
INTEGRATION_DIR = TESTS_DIR / "integration"

# The order files run in. scripts/test.sh gives pytest-xdist's two workers a file at a time,
# the next one when a worker is almost done with its own (`--dist loadfile
# --no-loadscope-reorder`), so a long file taken last keeps one worker busy while the other
# has nothing left. Longest first, then: the lab tests before the unit tests, the files
# measured slowest first (seconds of worker time in a whole run, halved: measured at load
# 11 to 16 in one run of 2026-12-05, about twice a quiet run's; docs/testing.md "Suite time"),
# the others most tests first (xdist's own order). The unit files, short, fill the end.
SLOWEST_FILES = {
    "integration/test_conformance.py": 323,
    "integration/test_ingress.py": 289,
    "integration/test_rollout.py": 264,
    "integration/test_trust.py": 221,
    "integration/test_converge.py": 214,
    "integration/test_backups.py": 202,
    "integration/test_supervise.py": 183,
    "integration/test_workloads.py": 165,
    "integration/test_workloads_core.py": 104,
    "integration/test_names.py": 98,
    "integration/test_kill9.py": 83,
    "integration/test_autoscale.py": 80,  # measured at -n 0 on a quiet lab (63 to 77 s call)
    "integration/test_hooks.py": 83,
    "integration/test_jobs.py": 77,
    "integration/test_ha.py": 72,
    "integration/test_tutorial.py": 71,
    "integration/test_truth.py": 70,
    "integration/test_compose.py": 68,
    "integration/test_operations.py": 68,
    "integration/test_clusters.py": 66,
    "integration/test_bastion.py": 62,
    "integration/test_faults.py": 60,
}


def pytest_configure(config: pytest.Config) -> None:
    os.environ["MINIDOCK_SSH_CONFIG"] = "none"


@pytest.fixture(scope="session", autouse=True)
def etcd_key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """$MINIDOCK_KEY_FILE for the session (made on first use by the first etcd store)."""
    path = tmp_path_factory.mktemp("keys") / "etcd-secrets.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(path))
        yield path


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("minidock lab")
    group.addoption(
        "--lab-hosts",
        type=int,
        default=4,
        help="hosts in the integration tests' lab fleet (default 4: zones a, a, b, c)",
    )
    group.addoption(
        "--keep-lab",
        action="store_true",
        help="leave the lab fleet running after the session (the next session removes it)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)
    tests_in = Counter(item.path for item in items)
    items.sort(key=lambda item: _run_order(item.path, tests_in[item.path]))  # stable


def _run_order(path: Path, tests: int) -> tuple[bool, float, int]:
    """Where a file's tests go in the run (SLOWEST_FILES); a file's own order is kept."""
    lab = INTEGRATION_DIR in path.parents
    return (not lab, -SLOWEST_FILES.get(path.relative_to(TESTS_DIR).as_posix(), 0), -tests)


# -- etcd: one three-member cluster for the session, each test under its own prefix ----------
@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """Three etcd members on free 127.0.0.1 ports (tests/etcd.py), shared by every test
    that needs etcd; a test that stops members has them started again by `etcd_url`."""
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"), size=3)
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.close()
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.close()


@pytest.fixture
def etcd_url(etcd_cluster: EtcdCluster) -> str:
    """A state URL on the session's cluster under a prefix of this test's own, every
    member running; the lease TTL is etcd's shortest (2s) so expiry tests are quick."""
    etcd_cluster.ensure_all()
    return etcd_cluster.url(ttl="2s")


SECURE_USER, SECURE_PASSWORD = "minidock", "pa55-w0rd"


@pytest.fixture(scope="session")
def etcd_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """One etcd member serving TLS with client certificates and password auth: user
    `minidock` may read and write keys under /secure/ only."""
    root = tmp_path_factory.mktemp("etcd-secure")
    cluster = EtcdCluster(root / "member", size=1, tls=make_tls(root / "tls"))
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.close()
        pytest.fail(str(exc), pytrace=False)
    for args in (
        ("user", "add", "root", "--new-user-password=root-pw"),
        ("role", "add", "minidock"),
        ("role", "grant-permission", "minidock", "--prefix=true", "readwrite", "/secure/"),
        ("user", "add", SECURE_USER, f"--new-user-password={SECURE_PASSWORD}"),
        ("user", "grant-role", SECURE_USER, "minidock"),
        ("auth", "enable"),
    ):
        done = cluster.etcdctl(*args)
        assert done.returncode == 0, done.stderr
    yield cluster
    cluster.close()
