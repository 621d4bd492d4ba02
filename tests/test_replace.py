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
    replace_file(path, [b"head ", memoryview(b"mid "), piece, b"tail"])
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
