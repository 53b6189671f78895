"""minidock.commands.tarnames: a volume's tar stream renamed between Docker's `cp` form
(`data/f`) and Podman's `volume export/import` form (`f`), chunk by chunk: the names
change and nothing else (data, owners, modes, links, long names, pax records), in every
format a tar may come in, however the stream is cut."""

from __future__ import annotations

import io
import tarfile

import pytest

from minidock.commands.tarnames import Renamer, TarError, out_of, under

USTAR = tarfile.USTAR_FORMAT
LONG = "d" * 60 + "/" + "e" * 60 + "/" + "f" * 70  # over 100 bytes: a long-name header
FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.uid, info.gid, info.mode, info.mtime = 999, 998, 0o640, 1_700_000_000
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def archive(members: list[tuple[tarfile.TarInfo, bytes]], form: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=form) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def renamed(stream: bytes, renamer: Renamer, cut: int) -> bytes:
    out = b"".join(renamer.feed(stream[at : at + cut]) for at in range(0, len(stream), cut))
    renamer.close()
    return out


def read(stream: bytes) -> list[tuple[str, str, int, int, int, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as tar:
        return [
            (
                m.name,
                m.linkname,
                m.uid,
                m.mode,
                m.mtime,
                (tar.extractfile(m) or io.BytesIO()).read() if m.isfile() else b"",
            )
            for m in tar.getmembers()
        ]


def exported(form: int) -> bytes:
    """What Podman's `volume export` gives: the volume's contents, no top entry."""
    return archive(
        [
            (member("f"), b"hello\n" * 300),
            (member("sub/", tarfile.DIRTYPE, mode=0o700), b""),
            (member("sub/g"), b"x"),
            (member("hard", tarfile.LNKTYPE, linkname="f"), b""),
            (member("link", tarfile.SYMTYPE, linkname="/etc/passwd"), b""),
            (member(LONG), b"long"),
        ]
        # a hard link's long target: a pax or GNU record (ustar has no room for it)
        + ([(member("long-hard", tarfile.LNKTYPE, linkname=LONG), b"")] if form != USTAR else []),
        form,
    )


@pytest.mark.parametrize("form", FORMATS.values(), ids=FORMATS.keys())
@pytest.mark.parametrize("cut", [1, 7, 512, 1 << 20])
def test_an_exported_volume_goes_under_the_paths_last_name_as_docker_cp_streams_it(
    form: int, cut: int
) -> None:
    renamer = Renamer(under("data"))
    before, after = read(exported(form)), read(renamed(exported(form), renamer, cut))
    assert [m[0] for m in after] == [f"data/{m[0].rstrip('/')}" for m in before]
    hard_links = {m[0]: m[1] for m in after if m[0].endswith("hard")}
    assert hard_links == {"data/hard": "data/f"} | (
        {"data/long-hard": f"data/{LONG}"} if form != USTAR else {}
    )
    assert [m[1:] for m in after if "hard" not in m[0]] == [
        m[1:] for m in before if "hard" not in m[0]
    ]  # symbolic links' targets, owners, modes, times, data: as they were
    assert renamer.members == len(before)
    assert renamer.file_bytes == len(b"hello\n" * 300) + 1 + 4


@pytest.mark.parametrize("form", FORMATS.values(), ids=FORMATS.keys())
@pytest.mark.parametrize("cut", [3, 1000])
def test_a_cp_stream_comes_out_of_its_top_for_volume_import_the_top_left_out(
    form: int, cut: int
) -> None:
    stream = archive(
        [
            (member("data/", tarfile.DIRTYPE, mode=0o700), b""),
            (member("data/f"), b"hello"),
            (member("data/hard", tarfile.LNKTYPE, linkname="data/f"), b""),
            (member(f"data/{LONG}"), b"long"),
        ],
        form,
    )
    after = read(renamed(stream, Renamer(out_of("data")), cut))
    assert [(m[0], m[1], m[5]) for m in after] == [
        ("f", "", b"hello"),
        ("hard", "f", b""),
        (LONG, "", b"long"),
    ]


def test_the_two_renames_undo_each_other() -> None:
    stream = exported(USTAR)
    there = renamed(stream, Renamer(under("data")), 4096)
    back = renamed(there, Renamer(out_of("data")), 4096)
    assert read(back) == read(stream)


def test_pax_records_other_than_the_names_are_kept() -> None:
    info = member("f", pax_headers={"SCHILY.xattr.user.note": "kept", "path": "f"})
    stream = archive([(info, b"x")], tarfile.PAX_FORMAT)
    out = renamed(stream, Renamer(under("data")), 100)
    with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tar:
        (got,) = tar.getmembers()
    assert got.name == "data/f"
    assert got.pax_headers["SCHILY.xattr.user.note"] == "kept"


def test_an_empty_volume_streams_the_end_of_archive_alone() -> None:
    empty = bytes(1024)  # Podman's `volume export` of an empty volume
    renamer = Renamer(under("data"))
    assert renamed(empty, renamer, 300) == empty
    assert (renamer.members, renamer.file_bytes) == (0, 0)


def test_a_name_outside_the_top_is_refused() -> None:
    stream = archive([(member("elsewhere/f"), b"x")], USTAR)
    with pytest.raises(TarError, match="outside data/"):
        renamed(stream, Renamer(out_of("data")), 512)


def test_a_stream_cut_inside_a_member_is_refused() -> None:
    stream = archive([(member("f"), b"x" * 2000)], USTAR)
    with pytest.raises(TarError, match="ended inside a member"):
        renamed(stream[:1024], Renamer(under("data")), 512)


def test_a_size_given_by_a_pax_record_is_the_members_size() -> None:
    """A file over 8 GiB has its size in a pax record (the header's field cannot hold it):
    the renamer passes that many bytes as the member's data, not the header's number."""
    info = member("big", pax_headers={"size": "3000"})
    stream = bytearray(archive([(info, b"b" * 3000), (member("next"), b"n")], tarfile.PAX_FORMAT))
    at = stream.index(b"big\0")  # the member's own header, after its pax header
    header = bytearray(stream[at : at + 512])
    header[124:136] = b"00000000000\0"  # as a writer leaves it when the pax record says it
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    stream[at : at + 512] = header
    after = read(renamed(bytes(stream), Renamer(under("data")), 700))
    assert [(m[0], m[5]) for m in after] == [("data/big", b"b" * 3000), ("data/next", b"n")]


def test_many_small_files_in_one_chunk_all_come_through() -> None:
    members = [(member(f"f{n}"), b"%d" % n) for n in range(2000)]
    stream = archive(members, tarfile.USTAR_FORMAT)
    after = read(renamed(stream, Renamer(under("data")), len(stream)))
    assert [(m[0], m[5]) for m in after] == [(f"data/f{n}", b"%d" % n) for n in range(2000)]
