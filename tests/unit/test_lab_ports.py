"""The lab's port choice (minidock/lab/ports.py): one lab at a time on a machine chooses
its loopback ports, and none of them is one another container publishes."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from minidock.lab import ports
from minidock.lab.errors import LabError


def test_a_second_chooser_waits_until_the_first_has_let_go(tmp_path: Path) -> None:
    lock = tmp_path / "ports.lock"
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with ports.port_lock(lock):
            order.append("first in")
            first_in.set()
            release.wait(10)
            order.append("first out")

    def second() -> None:
        first_in.wait(10)
        with ports.port_lock(lock):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_in.wait(10)
    # the second thread is now at (or about to reach) the lock; it must not pass
    threads[1].join(0.3)
    assert threads[1].is_alive()
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["first in", "first out", "second in"]


def test_a_picked_port_is_neither_taken_nor_listened_on(monkeypatch: pytest.MonkeyPatch) -> None:
    listened = next(p for p in range(*ports.PORT_RANGE, 3) if all(map(free, (p, p + 1, p + 2))))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", listened))
        listener.listen()
        monkeypatch.setattr(ports, "PORT_RANGE", (listened, listened + 3))
        # of the three ports, one is listened on and one taken: the third, every time
        picks = {ports.pick_port({listened + 1}) for _ in range(20)}
        assert picks == {listened + 2}
        taken = {listened + 1}
        assert ports.pick_port(taken) == listened + 2
        assert taken == {listened + 1, listened + 2}  # the picked port is taken from now on
        with pytest.raises(LabError):
            ports.pick_port({listened + 1, listened + 2})


def free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_no_free_port_is_one_line_naming_the_range() -> None:
    with pytest.raises(LabError, match=r"no free port on 127\.0\.0\.1 in"):
        ports.pick_port(set(range(*ports.PORT_RANGE)))


def test_a_host_keeps_its_port_while_its_container_exists_unless_another_holds_it() -> None:
    taken: set[int] = set()
    assert ports.keep_or_pick(25000, True, taken) == 25000
    assert taken == {25000}
    other = ports.keep_or_pick(25000, True, taken)  # now held: a new one
    assert other != 25000
    assert taken == {25000, other}
    fresh = ports.keep_or_pick(26000, False, taken)  # its container is gone: any free one
    assert fresh not in (25000, other)
    assert taken == {25000, other, fresh}


def test_the_lock_file_is_readable_by_every_user_whatever_the_umask(tmp_path: Path) -> None:
    """Another user's lab on the machine opens the same lock (read-only: all an flock
    needs); a umask of 077 must not make it this user's alone."""
    lock = tmp_path / "ports.lock"
    old = os.umask(0o077)
    try:
        with ports.port_lock(lock):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644
