"""Where the output goes wrong: a full disk, a reader that went away, a closed stdout.

Each is the environment, not a bug in evalkit: one sentence (or silence, for a
reader that has what it wanted) and the right exit code, never "internal error".
Real processes, since what matters is what the shell sees.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.cli import EXIT_USAGE

ROOT = Path(__file__).parent.parent
GOOD_SUITE = Path(__file__).parent / "data" / "suites" / "good.yaml"
EVALKIT = [sys.executable, "-m", "evalkit.cli"]
#: Every kind of command that prints: a document, a check, a report, the group's own text.
PRINTERS = [
    ["contract"], ["contract", "--markdown"], ["check", "--suite", str(GOOD_SUITE)],
    ["score", "--suite", str(ROOT / "suites" / "analyst"),
     "--runs", str(ROOT / "recordings" / "analyst" / "good"), "--json"],
    ["verify", str(ROOT / "recordings" / "analyst" / "good")],
    ["--help"], ["--version"], ["score", "--help"],
]


def unbuffered(flag: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": flag}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("flag", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", PRINTERS, ids=" ".join)
def test_a_full_disk_under_stdout_is_one_sentence_and_exit_two(args: list[str],
                                                                flag: str) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*EVALKIT, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              env=unbuffered(flag))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip() == "Error: cannot write the output: No space left on device"


def _little_room_left() -> None:
    """In the child: files stop growing past 1 KiB, as a disk with a little room left
    takes part of a write and refuses the rest (EFBIG here, not the signal)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


def _writing_no_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child under ``_little_room_left``: CPython writes a module's bytecode
    without checking that the whole of it was written, so a child that compiled a module
    there left a cache cut at 1 KiB, which every later import of the module failed on
    ("marshal data too short")."""
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.mark.parametrize("flag", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [PRINTERS[0], PRINTERS[1], PRINTERS[3]], ids=" ".join)
def test_a_disk_that_takes_part_of_the_output_is_no_success(tmp_path: Path, args: list[str],
                                                             flag: str) -> None:
    """Unbuffered, CPython took the part the disk accepted for the whole write: the output
    was cut at the first KiB and the command exited 0. (Each output here is longer.)"""
    out = tmp_path / "out.txt"
    with out.open("wb") as file:
        done = subprocess.run([*EVALKIT, *args], stdout=file, stderr=subprocess.PIPE,
                              text=True, env=_writing_no_bytecode(unbuffered(flag)),
                              preexec_fn=_little_room_left)
    assert out.stat().st_size == 1024  # it did fill what room there was
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip() == "Error: cannot write the output: File too large"


@pytest.mark.parametrize("flag", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["contract"], ["--help"]], ids=" ".join)
def test_a_reader_that_went_away_is_one_sentence_and_exit_2(args: list[str], flag: str) -> None:
    """Issue 31: a closed pipe is a write error like a full disk. ``--help`` is printed by
    click before any command runs; click's own answer to a closed pipe there was exit 1."""
    read, write = os.pipe()
    os.close(read)  # `| head -c 0`: gone before the first byte
    try:
        done = subprocess.run([*EVALKIT, *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=unbuffered(flag))
    finally:
        os.close(write)
    assert done.returncode == EXIT_USAGE
    assert done.stderr == ("Error: cannot write the output: the reader closed the pipe "
                           "before the output ended\n")


@pytest.mark.slow
def test_a_reader_that_leaves_half_way_through_a_long_output_is_exit_2(
        tmp_path: Path) -> None:
    """``evalkit sql … | head``: the reader leaves while a write far longer than a pipe
    holds is under way. CPython reports such a write done (the part that got through),
    which exited 0 with the rest of the output lost."""
    from tests._stream_builders import good_run, write_stream

    for key in range(60):
        write_stream(tmp_path / "runs" / f"m{key}" / "events.jsonl", good_run(text="x" * 4000))
    done = subprocess.run([*EVALKIT, "ingest", str(tmp_path / "runs")], capture_output=True)
    assert done.returncode == 0, done.stderr
    query = [*EVALKIT, "sql", str(tmp_path / "runs"), "SELECT * FROM events"]
    whole = subprocess.run(query, capture_output=True)
    assert whole.returncode == 0 and len(whole.stdout) > 4 * 65536  # longer than a pipe holds
    reading = subprocess.Popen(query, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reading.stdout is not None and reading.stderr is not None
    assert reading.stdout.read(100) == whole.stdout[:100]
    reading.stdout.close()  # `| head -c 100`
    assert reading.wait(60) == EXIT_USAGE
    assert reading.stderr.read().decode().startswith("Error: cannot write the output: the reader")


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_stdout_into_a_pipe_keeps_its_buffering(unbuffered: str) -> None:
    """The whole-writes stdout put under a pipe keeps Python's own choice: unbuffered
    (PYTHONUNBUFFERED=1), prose and diagnostics sharing a pipe stay in the order written;
    buffered, stdout comes at exit, as it would without evalkit."""
    code = ("import sys; from evalkit import cli; cli._whole_writes_to_stdout(); "
            "print('one'); sys.stderr.write('two\\n'); sys.stderr.flush(); print('three')")
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, check=True)
    expected = "one\ntwo\nthree\n" if unbuffered else "two\none\nthree\n"
    assert done.stdout == expected


@pytest.mark.slow
def test_a_closed_stdout_is_output_thrown_away(tmp_path: Path) -> None:
    command = " ".join([*EVALKIT, "check", "--suite", str(GOOD_SUITE)])
    done = subprocess.run(f"{command} >&-", shell=True, capture_output=True, text=True)
    assert done.returncode == 0
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("name", "content"), [
    ("notes.txt", "just a line of prose\n"), ("list.yaml", "- one\n- two\n"),
    ("image.yaml", b"\x89PNG\r\n\x1a\n\x00\x00"), ("broken.json", '{"missions": [}'),
], ids=["prose", "a-list", "binary", "broken-json"])
@pytest.mark.parametrize("command", ["check", "score"])
def test_a_file_that_is_not_a_suite_is_unreadable_input(tmp_path: Path, name: str,
                                                        content: str | bytes,
                                                        command: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    extra = ["--runs", str(tmp_path)] if command == "score" else []
    done = subprocess.run([*EVALKIT, command, "--suite", str(path), *extra],
                          capture_output=True, text=True)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.startswith(f"Error: suite {path} ") and done.stderr.count("\n") == 1
    assert done.stdout == ""
