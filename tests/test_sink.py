from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.store.sink import EventSink, encode_line

RECORD = {"event": "answer", "text": "ünïcode ✓ — fine", "outcome": "answered"}


def test_fd_sink_through_a_real_pipe() -> None:
    read_fd, write_fd = os.pipe()
    sink = EventSink.open(f"fd:{write_fd}")
    sink.write(RECORD)
    sink.write({"event": "step_started", "index": 1})
    sink.close()  # closing an fd sink closes the fd, so the reader sees EOF
    with os.fdopen(read_fd, "rb") as reader:
        data = reader.read()
    lines = data.decode("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [RECORD, {"event": "step_started", "index": 1}]
    assert "ünïcode ✓" in lines[0]  # written as is, not \u-escaped
    assert sink.errors == 0 and sink.written == 2
    with pytest.raises(OSError):
        os.fstat(write_fd)


def test_each_line_is_flushed_before_write_returns() -> None:
    read_fd, write_fd = os.pipe()
    sink = EventSink.open(f"fd:{write_fd}")
    try:
        sink.write(RECORD)
        os.set_blocking(read_fd, False)
        assert os.read(read_fd, 65536).endswith(b"\n")
    finally:
        sink.close()
        os.close(read_fd)


def test_stdout_sink(capsys: pytest.CaptureFixture[str]) -> None:
    sink = EventSink.open("-")
    print("prose first")
    sink.write(RECORD)
    sink.close()
    print("still usable after close")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "prose first"
    assert json.loads(out[1]) == RECORD
    assert out[2] == "still usable after close"


def test_stdout_sink_in_a_real_process() -> None:
    code = ("from evalkit.store.sink import EventSink\n"
            "s = EventSink.open('-')\n"
            "s.write({'event': 'answer', 'text': 'é'})\n"
            "s.close()\n"
            "print('after')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    first, second = done.stdout.decode("utf-8").splitlines()
    assert json.loads(first) == {"event": "answer", "text": "é"}  # UTF-8 whatever the locale
    assert second == "after"


def test_path_sink_appends(tmp_path: Path) -> None:
    target = tmp_path / "events.jsonl"
    target.write_text('{"event": "earlier"}\n', encoding="utf-8")
    for index in range(2):
        sink = EventSink.open(str(target))
        sink.write({"event": "step_started", "index": index})
        sink.close()
    lines = target.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["earlier", "step_started", "step_started"]


def test_nan_becomes_null_instead_of_failing(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    sink = EventSink.open(str(target))
    sink.write({"event": "x", "values": [float("nan"), 1.5, {"inf": float("inf")}]})
    sink.close()
    text = target.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"event": "x", "values": [None, 1.5, {"inf": None}]}


def test_a_reader_that_went_away_does_not_raise() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    sink = EventSink.open(f"fd:{write_fd}")
    sink.write(RECORD)  # EPIPE
    sink.write(RECORD)  # dropped without touching the fd
    assert sink.errors == 2 and sink.written == 0
    sink.close()


def test_a_descriptor_closed_under_the_sink_does_not_raise() -> None:
    read_fd, write_fd = os.pipe()
    sink = EventSink.open(f"fd:{write_fd}")
    os.close(write_fd)
    os.close(read_fd)
    sink.write(RECORD)  # EBADF
    assert sink.errors == 1
    sink.close()


def test_a_full_disk_does_not_raise() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    sink = EventSink.open("/dev/full")
    sink.write(RECORD)  # ENOSPC
    assert sink.errors == 1
    sink.close()
    sink.write(RECORD)  # after close: dropped, counted
    assert sink.errors == 2


def test_a_pipe_closed_by_a_real_reader_process() -> None:
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"],
                              stdin=subprocess.PIPE)
    assert reader.stdin is not None
    sink = EventSink.open(f"fd:{os.dup(reader.stdin.fileno())}")
    reader.stdin.close()
    sink.write(RECORD)
    reader.wait(timeout=10)
    for _ in range(5):
        sink.write({"event": "answer", "text": "x" * 100_000})
    assert sink.errors >= 1
    sink.close()


@pytest.mark.parametrize("spec", ["fd:abc", "fd:-1", "fd:", "fd: 3", ""])
def test_bad_specs_are_refused_in_one_sentence(spec: str) -> None:
    with pytest.raises(EvalkitError) as caught:
        EventSink.open(spec)
    assert "event sink" in caught.value.message


def test_a_directory_or_unopened_fd_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="cannot open event sink"):
        EventSink.open(str(tmp_path))
    with pytest.raises(EvalkitError, match="not open"):
        EventSink.open("fd:987654")


def test_parallel_writers_never_interleave_lines(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    sink = EventSink.open(str(target))

    def worker(n: int) -> None:
        for i in range(200):
            sink.write({"event": "x", "who": n, "i": i, "pad": "y" * 500})

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 800
    assert all(json.loads(line)["event"] == "x" for line in lines)


def test_encode_line_canonical() -> None:
    assert encode_line({"b": 1, "a": "é"}, canonical=True) == '{"a":"é","b":1}\n'.encode()
    assert encode_line({"b": 1, "a": 2}) == b'{"b":1,"a":2}\n'


@pytest.mark.parametrize("canonical", [False, True])
def test_a_lone_surrogate_is_written_escaped_and_reads_back_exactly(canonical: bool) -> None:
    """UTF-8 cannot carry half an emoji; the line escapes it rather than fail the record."""
    record = {"event": "answer", "text": "cut \ud83d", "note": "é ✓"}
    line = encode_line(record, canonical=canonical)
    assert line.endswith(b"\n") and b"\\ud83d" in line and line.isascii()
    assert json.loads(line) == record
    assert encode_line({"text": "é ✓"}, canonical=canonical) == '{"text":"é ✓"}\n'.encode()
