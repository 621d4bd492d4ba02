from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from evalkit.store import layout
from evalkit.store.emitter import Emitter
from evalkit.store.runstore import RunStore, RunWriter
from evalkit.store.sink import EventSink

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


class CheckingSink(EventSink):
    """A sink that asserts, at write time, that the run store already has the record."""

    def __init__(self, writer: RunWriter) -> None:
        super().__init__("test", None, owns_fd=False)
        self.writer = writer
        self.seen: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        recorded = read_lines(self.writer.path / layout.EVENTS_FILE)
        assert recorded[-1]["record"] == record
        self.seen.append(record)


def test_records_reach_the_store_before_the_sink(tmp_path: Path) -> None:
    with RunStore(tmp_path).create({}) as writer:
        sink = CheckingSink(writer)
        emitter = Emitter(sink, writer)
        for index in range(3):
            emitter.emit({"event": "step_started", "index": index})
    assert [r["index"] for r in sink.seen] == [0, 1, 2]
    assert emitter.emitted == 3


def test_parallel_emits_form_one_sequence_in_both_places(tmp_path: Path) -> None:
    sink_path = tmp_path / "sink.jsonl"
    sink = EventSink.open(str(sink_path))
    with RunStore(tmp_path / "runs").create({}) as writer:
        emitter = Emitter(sink, writer)

        def branch(name: str) -> None:
            for i in range(100):
                emitter.emit({"event": "step_started", "index": i, "branch": name})

        threads = [threading.Thread(target=branch, args=(f"b{n}",)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    sink.close()
    recorded = read_lines(writer.path / layout.EVENTS_FILE)
    streamed = read_lines(sink_path)
    assert [e["seq"] for e in recorded] == list(range(1, 601))
    assert [e["record"] for e in recorded] == streamed
    assert emitter.emitted == 600


def test_free_text_is_scrubbed_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_TEST_API_KEY", "env-secret-value-123")
    read_fd, write_fd = os.pipe()
    sink = EventSink.open(f"fd:{write_fd}")
    record = {"event": "answer", "text": f"use {SECRET} or env-secret-value-123",
              "outcome": "answered", "usage": {"prompt_tokens": 5}}
    with RunStore(tmp_path).create({}) as writer:
        emitted = Emitter(sink, writer).emit(record)
    sink.close()
    with os.fdopen(read_fd, "rb") as reader:
        streamed = reader.read().decode("utf-8")
    assert emitted == {"event": "answer", "text": "use [REDACTED] or [REDACTED]",
                       "outcome": "answered", "usage": {"prompt_tokens": 5}}
    assert record["text"].startswith(f"use {SECRET}")  # the caller's dict is untouched
    assert json.loads(streamed) == emitted
    assert read_lines(writer.path / layout.EVENTS_FILE)[0]["record"] == emitted
    for secret in (SECRET, "env-secret-value-123"):
        assert secret not in streamed
        assert secret not in (writer.path / layout.EVENTS_FILE).read_text("utf-8")


def test_either_end_may_be_absent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert Emitter(None, None).emit({"event": "x"}) == {"event": "x"}
    Emitter(EventSink.open("-"), None).emit({"event": "to stdout"})
    assert json.loads(capsys.readouterr().out) == {"event": "to stdout"}
    with RunStore(tmp_path).create({}) as writer:
        Emitter(None, writer).emit({"event": "to the store"})
    assert read_lines(writer.path / layout.EVENTS_FILE)[0]["record"] == {"event": "to the store"}


def test_a_dead_sink_does_not_stop_the_recording(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    sink = EventSink.open(f"fd:{write_fd}")
    with RunStore(tmp_path).create({}) as writer:
        emitter = Emitter(sink, writer)
        for index in range(3):
            emitter.emit({"event": "step_started", "index": index})
    sink.close()
    assert sink.errors == 3
    assert len(read_lines(writer.path / layout.EVENTS_FILE)) == 3
