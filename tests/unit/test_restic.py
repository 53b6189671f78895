"""The restic adapter against Debian's real restic, on a repository in a temporary
directory: made when missing, a stream saved as one snapshot and dumped back byte for byte,
a failed stream leaving no snapshot, retention, a wrong password, and a password that is
on no command line."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from minidock import restic
from minidock.model import Keep
from minidock.restic import Repository, ResticError

pytestmark = pytest.mark.skipif(not restic.restic_available(), reason="needs Debian's restic")

PASSWORD = "pw-7c1e-not-on-argv"
TAGS = {"cluster": "prod", "service": "db", "slot": "1", "volume": "data", "generation": "3"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    """One repository for the module (each restic command derives its key: about 0.5 s of
    CPU); each test tags its snapshots with its own service."""
    made = Repository(str(tmp_path_factory.mktemp("restic") / "repo"), PASSWORD)
    assert _run(restic.ensure(made)) is True
    assert _run(restic.ensure(made)) is False  # there now
    return made


def _run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def _feeding(data: bytes, step: int = 65536) -> Callable[[restic.Write], Awaitable[None]]:
    async def feed(write: restic.Write) -> None:
        for i in range(0, len(data), step):
            await write(data[i : i + step])

    return feed


async def _dumped(repo: Repository, snapshot: str, filename: str) -> bytes:
    return b"".join([chunk async for chunk in restic.dump(repo, snapshot, filename)])


def test_a_stream_is_one_snapshot_tagged_and_dumped_back_byte_for_byte(repo: Repository) -> None:
    data = os.urandom(300_000) + b"tail"
    saved = _run(restic.backup(repo, "data.tar", TAGS, "host1", _feeding(data)))
    assert isinstance(saved, restic.Saved)
    assert saved.size == len(data)
    found = _run(restic.snapshots(repo, {"service": "db", "slot": "1"}))
    assert isinstance(found, list)
    assert [s.short_id for s in found] == [saved.snapshot[:8]]
    snap = found[0]
    assert (snap.hostname, snap.filename, snap.tag("generation")) == ("host1", "/data.tar", "3")
    assert dict(snap.tags) == TAGS
    assert _run(restic.snapshots(repo, {"service": "db", "slot": "9"})) == []
    assert _run(_dumped(repo, snap.id, snap.filename)) == data


def test_a_stream_that_fails_saves_no_snapshot(repo: Repository) -> None:

    async def broken(write: restic.Write) -> None:
        await write(b"x" * 100_000)
        raise OSError("the host went away")

    with pytest.raises(OSError, match="went away"):
        _run(restic.backup(repo, "data.tar", {**TAGS, "service": "broken"}, "host1", broken))
    assert _run(restic.snapshots(repo, {"service": "broken"})) == []


def test_forget_keeps_what_the_rules_keep_in_the_tagged_group_only(repo: Repository) -> None:
    tags = {**TAGS, "service": "kept"}
    ids = [
        _run(restic.backup(repo, "d.tar", {**tags, "generation": str(g)}, "h", _feeding(b"%d" % g)))
        for g in range(2)
    ]
    other = _run(restic.backup(repo, "d.tar", {**tags, "slot": "2"}, "h", _feeding(b"o")))
    removed = _run(restic.forget(repo, Keep(last=1), {"service": "kept", "slot": "1"}))
    assert isinstance(removed, list)
    assert [r[:8] for r in removed] == [ids[0].snapshot[:8]]  # type: ignore[attr-defined]
    left = _run(restic.snapshots(repo, {"service": "kept"}))
    assert isinstance(left, list)
    assert sorted(s.short_id for s in left) == sorted(
        s.snapshot[:8]  # type: ignore[attr-defined]
        for s in (ids[1], other)
    )
    assert _run(restic.forget(repo, Keep(), TAGS)) == []  # no rule: nothing forgotten


def test_a_wrong_password_is_one_line(repo: Repository) -> None:
    wrong = Repository(repo.location, "wrong-one")
    with pytest.raises(ResticError) as err:
        _run(restic.snapshots(wrong))
    assert str(err.value) == "restic snapshots failed (exit 1): wrong password or no key found"
    with pytest.raises(ResticError, match=r"^restic cat failed .*wrong password"):
        _run(restic.ensure(wrong))


def test_the_password_is_on_no_command_line(repo: Repository) -> None:
    seen: list[bytes] = []
    ours: list[bytes] = []  # restic processes this test started (other tests may run restic too)

    async def feed(write: restic.Write) -> None:
        """Every command line this process and its descendants have while restic runs (the
        machine's other processes are other tests' and other sessions': one of them, not
        this test's, once failed it in a full unit run beside other work), looked at until
        restic's own is among them: the write can land in the pipe before the forked child
        has exec'd restic (a full unit run failed it so, `ours` empty)."""
        await write(b"some data")
        for _ in range(100):  # the pipe takes the write before the child's exec of restic
            scan()  # (its command line is still the forked worker's): look until it has
            if ours:
                return
            await asyncio.sleep(0.05)

    def scan() -> None:
        parents: dict[int, int] = {}
        lines: dict[int, bytes] = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                ppid = next(ln for ln in status.splitlines() if ln.startswith("PPid:"))
                parents[int(pid)], lines[int(pid)] = int(ppid.split()[1]), cmdline
        for pid, cmdline in lines.items():
            up = pid
            while up > 1 and up != os.getpid():
                up = parents.get(up, 0)
            if up == os.getpid():
                seen.append(cmdline)
                if parents[pid] == os.getpid() and cmdline.startswith(b"restic\0backup"):
                    ours.append(cmdline)

    _run(restic.backup(repo, "d.tar", TAGS, "h", feed))
    assert len(ours) == 1
    assert b"--stdin" in ours[0]
    assert not any(PASSWORD.encode() in c for c in seen)
    assert not any(repo.location.encode() in c for c in ours)  # the repository: env too


def test_a_dump_is_read_ahead_while_its_consumer_is_busy(repo: Repository) -> None:
    """restic is not held up by a consumer busy with a chunk (the SSH stream sending it):
    its pipe holds 1 MiB and up to 2 MiB more is read ahead, so a dump of 2.5 MiB ends
    while the first chunk is still held; the rest then comes byte for byte."""
    data = os.urandom(5 << 19)
    saved = _run(
        restic.backup(repo, "ahead.tar", {**TAGS, "service": "ahead"}, "h", _feeding(data))
    )
    assert isinstance(saved, restic.Saved)

    async def scenario() -> tuple[bytes, bool]:
        stream = restic.dump(repo, saved.snapshot, "/ahead.tar")
        first = await anext(stream)
        dumping = [pid for pid in _children() if _cmdline(pid).startswith(b"restic\0dump")]
        assert len(dumping) == 1
        for _ in range(600):  # restic ends with nothing more taken (bound: 60 s)
            if dumping[0] not in _children():
                break
            await asyncio.sleep(0.1)
        ended = dumping[0] not in _children()
        rest = b"".join([chunk async for chunk in stream])
        return first + rest, ended

    dumped, ended_alone = asyncio.run(scenario())  # type: ignore[arg-type]
    assert dumped == data
    assert ended_alone


def _children() -> list[str]:
    """Our living children's pids (an exited one that is not reaped yet counts as gone)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if f"\nPPid:\t{os.getpid()}\n" in status and "\nState:\tZ" not in status:
            found.append(pid)
    return found


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_dumps_first_chunk_holds_a_whole_tar_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore judges the snapshot by the tar header in its first chunk: however restic's
    writes come, that chunk holds the first 512 bytes (here a restic that writes 2 bytes,
    waits, then the rest)."""
    fake = tmp_path / "restic"
    fake.write_text("#!/bin/sh\nprintf ab\nsleep 0.3\nhead -c 1000 /dev/zero\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    async def chunks() -> list[bytes]:
        return [c async for c in restic.dump(Repository("/nowhere", "pw"), "s", "/f.tar")]

    got = asyncio.run(chunks())
    assert len(got[0]) >= 512
    assert b"".join(got) == b"ab" + bytes(1000)
