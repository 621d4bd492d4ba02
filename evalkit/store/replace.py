"""Files replaced whole: nothing already written is ever left half rewritten.

Every file evalkit derives and rewrites (reports, ``regrade.json``, the
matrix, a run's ``meta.json``, a capture's scrubbed ``stdout.txt``) goes
through ``replace_file``. Written in place, a full disk, a ^C or a ``kill``
half way through would leave half a file where a whole one was, and the
whole one is gone. Written to a temporary sibling renamed over it, a reader
sees the old file or the new one, never a mix, and a failed write takes
only the temporary file with it.

This module imports nothing of evalkit, so every layer may use it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


@dataclass(frozen=True)
class FileSlice:
    """``length`` bytes of ``path`` from ``start``: where a fan-out's worker wrote one
    run of verdicts among the others it rendered."""

    path: Path
    start: int
    length: int


#: A piece of a file's content: bytes, or a slice of a file whose bytes go there (a
#: fan-out's workers write their verdicts to files, so a million of them are never all
#: in memory).
Part = bytes | memoryview | FileSlice

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BLOCK = 2**20


def write_parts(stream: BinaryIO, parts: Sequence[Part]) -> None:
    """Write the parts one after another; slices of files are copied a megabyte at a
    time, and a run of slices of one file reads it through one open handle."""
    source: BinaryIO | None = None
    try:
        for part in parts:
            if isinstance(part, FileSlice):
                if source is None or source.name != str(part.path):
                    if source is not None:
                        source.close()
                    source = open(part.path, "rb")  # noqa: SIM115 - kept open across slices
                source.seek(part.start)
                _copy(source, stream, part)
            else:
                stream.write(part)
    finally:
        if source is not None:
            source.close()


def _copy(source: BinaryIO, stream: BinaryIO, part: FileSlice) -> None:
    left = part.length
    while left:
        block = source.read(min(left, _BLOCK))
        if not block:
            raise OSError(f"{part.path} ends before the {part.length} bytes from "
                          f"{part.start} that were written there")
        stream.write(block)
        left -= len(block)


def joined(parts: Sequence[Part]) -> bytes:
    """The parts' bytes, one after another, in memory."""
    if all(isinstance(part, (bytes, memoryview)) for part in parts):
        return b"".join(parts)  # type: ignore[arg-type]  # one copy, into the right size
    out = io.BytesIO()
    write_parts(out, parts)
    return out.getvalue()


def replace_files(files: Sequence[tuple[Path, str | bytes | memoryview | Sequence[Part]]]
                  ) -> list[Path]:
    """Make each content the whole of its path, or leave every path as it was.

    Files that belong together (a report's ``report.json`` and ``report.md``) must
    not end up one new and one old because the second could not be written. Every
    temporary is written before any is renamed, so a full disk or ^C while writing
    leaves all the files as they were; only a rename can still fail, and a caller
    that checked each path is a regular file or absent has ruled out what makes one
    fail (a folder in the way).
    """
    written: list[tuple[Path, Path]] = []
    try:
        for path, content in files:
            tmp = _temporary(path)
            written.append((tmp, path))
            with open(tmp, "wb", opener=_create) as out:
                write_parts(out, _parts(content))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise
    return [path for path, _ in files]


def _parts(content: str | bytes | memoryview | Sequence[Part]) -> Sequence[Part]:
    if isinstance(content, str):
        return [content.encode("utf-8")]
    if isinstance(content, (bytes, memoryview)):
        return [content]
    return content


def _temporary(path: Path) -> Path:
    """``.NAME.PID.tmp`` beside ``path`` (see ``replace_file``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def replace_file(path: Path, content: str | bytes | memoryview | Sequence[Part], *,
                 fsync: bool = False) -> Path:
    """Make ``content`` (text is UTF-8) the whole of ``path``, or leave ``path`` as it was.

    The temporary sibling is ``.NAME.PID.tmp``: hidden from globs such as
    ``*.json``, and one per process and path, so concurrent processes never
    share one (two threads of one process must not replace the same path at
    once). Only a ``kill -9`` mid-write can leave it behind.

    ``fsync`` makes the new content survive a power cut too (the file before
    the rename, the folder after it): for a run's own record, at the cost of a
    disk flush per call.
    """
    tmp = _temporary(path)
    try:
        with open(tmp, "wb", opener=_create) as out:
            write_parts(out, _parts(content))
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        folder = os.open(path.parent, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return path


def _create(path: str, flags: int) -> int:
    """Mode 0o666 less the umask, like any file the user's own tools make: a report
    or ``meta.json`` is read by people and programs other than its writer."""
    return os.open(path, flags | _CLOEXEC, 0o666)
