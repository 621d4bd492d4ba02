"""The ``fs`` built-in: rooted at the mission root, escapes refused as ordinary results."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evalkit.runtime.tools import ResultStore, ToolPlane, ToolResult


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "note.txt").write_text("inside\n")
    (root / "sub" / "deep.txt").write_text("deeper\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read\n")
    return outside


@pytest.fixture
def plane(root: Path) -> ToolPlane:
    return ToolPlane(root, ResultStore())


def fs(plane: ToolPlane, **arguments: object) -> ToolResult:
    return plane.dispatch("fs", dict(arguments))


def refused(result: ToolResult, says: str) -> bool:
    return not result.ok and result.exit_code == 1 and says in (result.error or "")


def test_read_list_write(plane: ToolPlane, root: Path) -> None:
    assert fs(plane, action="read", path="note.txt").output == "inside\n"
    assert fs(plane, action="list").output == "note.txt\nsub/"
    assert fs(plane, action="list", path="sub").output == "deep.txt"
    wrote = fs(plane, action="write", path="new/dir/out.txt", content="héllo")
    assert wrote.ok and wrote.output == "wrote 6 bytes to new/dir/out.txt"
    assert (root / "new" / "dir" / "out.txt").read_text() == "héllo"
    assert fs(plane, action="read", path="sub/../note.txt").output == "inside\n"


def test_ordinary_failures(plane: ToolPlane) -> None:
    assert refused(fs(plane, action="read", path="missing.txt"), "no such file")
    assert refused(fs(plane, action="read", path="sub"), "is a directory")
    assert refused(fs(plane, action="list", path="note.txt"), "is a file")
    assert refused(fs(plane, action="write", path="x.txt"), "needs 'content'")
    assert refused(fs(plane, action="write", path="sub", content="x"), "is a directory")


def test_schema_rejects_bad_arguments(plane: ToolPlane) -> None:
    for arguments, says in [
        ({"path": "x"}, "'action' is a required property"),
        ({"action": "delete"}, "'delete' is not one of"),
        ({"action": "read", "path": 3}, "3 is not of type 'string'"),
        ({"action": "read", "mode": "r"}, "Additional properties are not allowed"),
    ]:
        result = plane.dispatch("fs", arguments)
        assert not result.ok and result.exit_code is None
        assert result.error.startswith("invalid arguments for fs:") and says in result.error


@pytest.mark.parametrize("path", ["/etc/passwd", "/"])
def test_absolute_paths_are_refused(plane: ToolPlane, path: str) -> None:
    assert refused(fs(plane, action="read", path=path), "absolute path refused")


def test_absolute_path_into_the_root_is_refused_too(plane: ToolPlane, root: Path) -> None:
    assert refused(fs(plane, action="read", path=str(root / "note.txt")), "absolute path refused")


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "sub/../../outside/secret.txt"])
def test_dotdot_out_of_the_root_is_refused(plane: ToolPlane, outside: Path, path: str) -> None:
    assert refused(fs(plane, action="read", path=path), "through '..'")
    assert refused(fs(plane, action="list", path=path), "through '..'")


def test_dotdot_write_out_is_refused_and_writes_nothing(plane: ToolPlane, outside: Path) -> None:
    result = fs(plane, action="write", path="../outside/planted.txt", content="x")
    assert refused(result, "through '..'")
    assert not (outside / "planted.txt").exists()


def test_symlinked_file_out_of_the_root_is_refused(plane: ToolPlane, root: Path,
                                                   outside: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    assert refused(fs(plane, action="read", path="link.txt"), "through a symlink")
    assert refused(fs(plane, action="write", path="link.txt", content="x"), "through a symlink")
    assert (outside / "secret.txt").read_text() == "do not read\n"


def test_symlinked_parent_dir_out_of_the_root_is_refused(plane: ToolPlane, root: Path,
                                                         outside: Path) -> None:
    (root / "door").symlink_to(outside, target_is_directory=True)
    assert refused(fs(plane, action="read", path="door/secret.txt"), "through a symlink")
    assert refused(fs(plane, action="list", path="door"), "through a symlink")
    result = fs(plane, action="write", path="door/planted.txt", content="x")
    assert refused(result, "through a symlink")
    assert not (outside / "planted.txt").exists()


def test_dangling_symlink_out_of_the_root_cannot_be_written_through(
        plane: ToolPlane, root: Path, outside: Path) -> None:
    (root / "trap").symlink_to(outside / "not-yet.txt")
    assert refused(fs(plane, action="write", path="trap", content="x"), "through a symlink")
    assert not (outside / "not-yet.txt").exists()


def test_symlink_that_stays_inside_is_followed(plane: ToolPlane, root: Path) -> None:
    (root / "alias.txt").symlink_to(root / "sub" / "deep.txt")
    assert fs(plane, action="read", path="alias.txt").output == "deeper\n"
    listing = fs(plane, action="list").output.splitlines()
    assert f"alias.txt -> {os.readlink(root / 'alias.txt')}" in listing


# -- what is not a regular file or a folder is refused at once --------------------------

def _at_once(call: Callable[[], ToolResult], seconds: float = 5.0) -> ToolResult:
    """``call()``'s result, failing the test (not hanging it) if it blocks."""
    done: list[ToolResult] = []
    worker = threading.Thread(target=lambda: done.append(call()), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert done, f"the fs call was still blocked after {seconds:g} s"
    assert time.monotonic() - started < 1.0
    return done[0]


def test_reading_a_fifo_with_no_writer_is_refused_at_once(plane: ToolPlane, root: Path) -> None:
    os.mkfifo(root / "pipe")
    result = _at_once(lambda: fs(plane, action="read", path="pipe"))
    assert refused(result, "'pipe' is a FIFO (named pipe); only regular files and folders are opened")


def test_writing_a_fifo_with_no_reader_is_refused_at_once(plane: ToolPlane, root: Path) -> None:
    os.mkfifo(root / "pipe")
    result = _at_once(lambda: fs(plane, action="write", path="pipe", content="x"))
    assert refused(result, "'pipe' is a FIFO (named pipe)")


def test_writing_a_fifo_someone_reads_writes_nothing_into_it(plane: ToolPlane,
                                                            root: Path) -> None:
    os.mkfifo(root / "pipe")
    reader = os.open(root / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = _at_once(lambda: fs(plane, action="write", path="pipe", content="planted"))
        assert refused(result, "'pipe' is a FIFO (named pipe)")
        assert os.read(reader, 100) == b""  # nothing was written into it
    finally:
        os.close(reader)


def test_listing_a_fifo_is_refused_and_a_folder_holding_one_lists(plane: ToolPlane,
                                                                  root: Path) -> None:
    os.mkfifo(root / "sub" / "pipe")
    assert refused(_at_once(lambda: fs(plane, action="list", path="sub/pipe")), "is a FIFO")
    assert _at_once(lambda: fs(plane, action="list", path="sub")).output == "deep.txt\npipe"


def test_a_socket_is_refused_for_read_and_write(plane: ToolPlane, root: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(root / "sock"))
        listening.listen()
        assert refused(_at_once(lambda: fs(plane, action="read", path="sock")), "is a socket")
        assert refused(_at_once(lambda: fs(plane, action="write", path="sock", content="x")),
                       "is a socket")


def test_a_link_to_a_fifo_inside_the_root_is_refused_too(plane: ToolPlane, root: Path) -> None:
    os.mkfifo(root / "pipe")
    (root / "alias").symlink_to(root / "pipe")
    assert refused(_at_once(lambda: fs(plane, action="read", path="alias")), "is a FIFO")
