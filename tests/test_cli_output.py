"""Where the output goes wrong: a full disk, a reader that went away, a closed stdout.

Each is the environment, not a bug in evalkit: one sentence (or silence, for a
reader that has what it wanted) and the right exit code, never "internal error".
Real processes, since what matters is what the shell sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.cli import EXIT_PIPE_CLOSED, EXIT_USAGE

GOOD_SUITE = Path(__file__).parent / "data" / "suites" / "good.yaml"
EVALKIT = [sys.executable, "-m", "evalkit.cli"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["contract"], ["check", "--suite", str(GOOD_SUITE)]])
def test_a_full_disk_under_stdout_is_one_sentence_and_exit_two(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*EVALKIT, *args], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == "Error: cannot write the output: No space left on device"


def test_a_reader_that_went_away_ends_it_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -c 0`: gone before the first byte
    try:
        done = subprocess.run([*EVALKIT, "contract"], stdout=write, stderr=subprocess.PIPE,
                              text=True)
    finally:
        os.close(write)
    assert done.returncode == EXIT_PIPE_CLOSED
    assert done.stderr == ""


def test_a_closed_stdout_is_output_thrown_away(tmp_path: Path) -> None:
    command = " ".join([*EVALKIT, "check", "--suite", str(GOOD_SUITE)])
    done = subprocess.run(f"{command} >&-", shell=True, capture_output=True, text=True)
    assert done.returncode == 0
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
