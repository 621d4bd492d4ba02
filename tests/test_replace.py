"""Files replaced whole: the old content or the new, never half of one."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

import pytest

from evalkit.store import replace
from evalkit.store.replace import replace_file
from tests._disk import fills_on, leftovers


def test_text_bytes_and_parts_become_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "out.md"
    path.write_text("an older and much longer file\n" * 100)
    assert replace_file(path, "é\n") == path
    assert path.read_bytes() == "é\n".encode()
    replace_file(path, b"\x00raw")
    assert path.read_bytes() == b"\x00raw"
    piece = tmp_path / "piece"
    piece.write_bytes(b"copied " * 500_000)  # more than one copy chunk
    whole = replace.FileSlice(piece, 0, piece.stat().st_size)
    replace_file(path, [b"head ", memoryview(b"mid "), whole, b"tail"])
    assert path.read_bytes() == b"head mid " + b"copied " * 500_000 + b"tail"
    assert leftovers(tmp_path) == []


def test_a_disk_that_fills_half_way_leaves_the_old_file_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(b'{"old": true}\n')
    fills_on(monkeypatch, "report.json")
    with pytest.raises(OSError) as failed:
        replace_file(path, b'{"new": "a much longer report than ten bytes"}\n')
    assert failed.value.errno == errno.ENOSPC
    assert path.read_bytes() == b'{"old": true}\n'
    assert leftovers(tmp_path) == []


def test_an_interrupt_mid_write_leaves_the_old_file_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "matrix.md"
    path.write_bytes(b"old\n")

    def interrupted(stream: BinaryIO, parts: object) -> None:
        stream.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(replace, "write_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replace_file(path, "new\n")
    assert path.read_bytes() == b"old\n"
    assert leftovers(tmp_path) == []


def test_a_temporary_file_left_by_a_killed_process_of_the_same_id_is_overwritten(
        tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    stale = tmp_path / f".meta.json.{os.getpid()}.tmp"
    stale.write_bytes(b"a longer half-written file from a process killed with -9")
    replace_file(path, b"{}\n")
    assert path.read_bytes() == b"{}\n"
    assert leftovers(tmp_path) == []


def test_the_file_gets_the_mode_any_new_file_would(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        replace_file(tmp_path / "a", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o640


def test_fsync_flushes_the_file_and_its_folder(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[int, int]] = []  # (inode, size) of what was flushed
    real = os.fsync

    def fsync(fd: int) -> None:
        found = os.fstat(fd)
        synced.append((found.st_ino, found.st_size if stat.S_ISREG(found.st_mode) else -1))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "meta.json"
    replace_file(path, b"fast")
    assert synced == []
    replace_file(path, b"durable", fsync=True)
    assert path.read_bytes() == b"durable"
    # the new content before the rename, then the folder that now names it
    assert synced == [(path.stat().st_ino, len(b"durable")), (tmp_path.stat().st_ino, -1)]


# -- parts: bytes, files and slices of files -------------------------------------------

def _scratch(tmp_path: Path) -> tuple[list[replace.Part], bytes]:
    """Parts as a fan-out's stitch makes them (slices of two workers' files, interleaved,
    one longer than a copy block), and the bytes they stand for."""
    one, two = tmp_path / "0.json", tmp_path / "1.json"
    one.write_bytes(b"a" * 10 + b"B" * (3 * 2**20) + b"c" * 7)
    two.write_bytes(b"xyz" * 1000)
    parts: list[replace.Part] = [
        b"head ", replace.FileSlice(one, 0, 10), b",", replace.FileSlice(two, 3, 30),
        replace.FileSlice(one, 10, 3 * 2**20), memoryview(b"|"), replace.FileSlice(two, 0, 3000),
        replace.FileSlice(one, 10 + 3 * 2**20, 7), b" tail"]
    want = (b"head " + b"a" * 10 + b"," + b"xyz" * 10 + b"B" * (3 * 2**20) + b"|"
            + b"xyz" * 1000 + b"c" * 7 + b" tail")
    return parts, want


def _through_a_pipe(parts: list[replace.Part]) -> bytes:
    import threading

    read, write = os.pipe()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(os.fdopen(read, "rb").read()))
    reader.start()
    with os.fdopen(write, "wb") as stream:
        replace.write_parts(stream, parts)
    reader.join()
    return got[0]


def test_slices_of_files_are_written_alike_to_a_file_a_pipe_and_memory(tmp_path: Path) -> None:
    parts, want = _scratch(tmp_path)
    out = tmp_path / "report.json"
    with open(out, "wb") as stream:
        replace.write_parts(stream, parts)
    assert out.read_bytes() == want
    assert replace.joined(parts) == want
    assert _through_a_pipe(parts) == want
    replace_file(out, parts[1:3])
    assert out.read_bytes() == b"a" * 10 + b","


def test_a_scratch_file_shorter_than_its_slice_is_an_error_never_a_short_report(
        tmp_path: Path) -> None:
    _scratch(tmp_path)
    short = [b"head ", replace.FileSlice(tmp_path / "1.json", 2990, 20)]  # 10 bytes are there
    with pytest.raises(OSError, match="ends before the 20 bytes from 2990"):
        replace.joined(short)
    (tmp_path / "out").write_bytes(b"kept")
    with pytest.raises(OSError, match="ends before the 20 bytes from 2990"):
        replace_file(tmp_path / "out", short)
    assert (tmp_path / "out").read_bytes() == b"kept"
    assert leftovers(tmp_path) == []
