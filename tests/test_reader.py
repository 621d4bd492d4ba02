"""The stream reader: envelopes or bare records, damage skipped and counted, never fatal."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.errors import EvalkitError
from evalkit.store.layout import resolve_events, resolve_relative
from evalkit.store.reader import parse_bytes, parse_text, read_stream
from tests._stream_builders import good_run, write_stream


def test_envelopes_and_bare_records_read_the_same(tmp_path):
    records = good_run()
    a = read_stream(write_stream(tmp_path / "a" / "events.jsonl", records, envelopes=True))
    b = read_stream(write_stream(tmp_path / "b" / "events.jsonl", records, envelopes=False))
    assert a.records == b.records == records
    assert a.skipped == b.skipped == 0


def test_torn_blank_and_non_object_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "events.jsonl"
    records = good_run()
    write_stream(path, records, tail='\n[1, 2]\n"text"\n{"seq": 9, "record": {"event": "ans')
    read = read_stream(path)
    assert read.records == records
    assert (read.blank, read.non_object, read.torn) == (1, 2, 1)
    assert read.lines == list(range(1, len(records) + 1))


def test_run_directory_resolution_rules(tmp_path):
    write_stream(tmp_path / "deep" / "runs" / "run_b" / "events.jsonl", good_run("mcp.echo"))
    write_stream(tmp_path / "deep" / "runs" / "run_a" / "events.jsonl", good_run("mcp.add"))
    read = read_stream(tmp_path / "deep")
    assert read.source.parts[-2] == "run_a"  # first sorted, two levels down
    write_stream(tmp_path / "deep" / "x" / "events.jsonl", good_run("mcp.fail"))
    assert read_stream(tmp_path / "deep").source.parts[-2] == "x"  # one level beats two
    write_stream(tmp_path / "deep" / "events.jsonl", good_run())
    assert read_stream(tmp_path / "deep").source == tmp_path / "deep" / "events.jsonl"


def test_what_a_path_resolves_to(tmp_path, monkeypatch):
    stream = write_stream(tmp_path / "k" / "events.jsonl", good_run())
    assert resolve_events(tmp_path / "k") == stream
    assert resolve_events(stream) == stream  # a file is itself
    assert resolve_events(tmp_path / "nope") is None
    assert resolve_events(stream / "below") is None  # a path through a file
    os.mkfifo(tmp_path / "fifo")
    assert resolve_events(tmp_path / "fifo") is None
    (tmp_path / "d" / "events.jsonl").mkdir(parents=True)  # a folder by the name
    assert resolve_events(tmp_path / "d") is None
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "events.jsonl").symlink_to(stream)
    assert resolve_events(tmp_path / "l") == tmp_path / "l" / "events.jsonl"

    listed = os.scandir  # a folder one may enter but not list (root lists anything)
    def unlistable(path):
        if os.fspath(path) in (os.fspath(tmp_path / "k"), os.fspath(tmp_path / "d")):
            raise PermissionError(13, "Permission denied")
        return listed(path)
    monkeypatch.setattr(os, "scandir", unlistable)
    assert resolve_events(tmp_path / "k") == stream
    assert resolve_events(tmp_path / "d") is None


def test_a_hidden_folder_is_not_looked_in_as_a_glob_would_not(tmp_path):
    """``*/events.jsonl`` in the spec is a glob, and ``*`` matches no hidden name: a
    half-written ``.partial`` copy beside a run is not that run's stream."""
    run = write_stream(tmp_path / "k" / "run_1" / "events.jsonl", good_run())
    write_stream(tmp_path / "k" / ".partial" / "events.jsonl", good_run()[:2])
    assert resolve_events(tmp_path / "k") == run
    write_stream(tmp_path / "h" / ".partial" / "events.jsonl", good_run())
    write_stream(tmp_path / "h" / "a" / ".b" / "events.jsonl", good_run())
    assert resolve_events(tmp_path / "h") is None
    own = write_stream(tmp_path / ".own" / "events.jsonl", good_run())
    assert resolve_events(tmp_path / ".own") == own  # a path given is a path, hidden or not
    for rels, found in ((["k/.partial/events.jsonl", "k/run_1/events.jsonl"],
                         "k/run_1/events.jsonl"),
                        (["k/.partial/events.jsonl"], None),
                        (["k/a/.b/events.jsonl"], None)):
        assert resolve_relative("k", rels) == found
        assert resolve_relative("k", iter(rels)) == found


def test_missing_path_and_empty_folder_are_one_sentence(tmp_path):
    with pytest.raises(EvalkitError, match="does not exist"):
        read_stream(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalkitError, match="no events.jsonl"):
        read_stream(tmp_path / "empty")


def test_binary_and_invalid_utf8_do_not_raise(tmp_path):
    path = tmp_path / "events.jsonl"
    good = json.dumps(good_run()[0]).encode()
    path.write_bytes(bytes(range(256)) + b"\n" + good + b"\n\xff\xfe{\"event\": \"answer\xff\"}\n")
    read = read_stream(path)
    assert read.records[0]["event"] == "mission_started"
    assert read.torn >= 1


@pytest.mark.slow
def test_a_fifty_megabyte_line_is_read_or_skipped_not_fatal(tmp_path):
    path = tmp_path / "events.jsonl"
    huge = json.dumps({"event": "tool_result", "output": "x" * (50 * 1024 * 1024)})
    path.write_text(huge + "\n" + huge[: 1024 * 1024] + "\n", encoding="utf-8")
    read = read_stream(path)
    assert len(read.records) == 1 and read.torn == 1


def test_json_orjson_refuses_is_read_as_the_grammar_allows(tmp_path):
    """A lone surrogate escape (a JavaScript writer cutting a string mid-emoji) and a
    number past a double's range are JSON: the line is read, not skipped as torn."""
    read = parse_text(tmp_path, "\n".join([
        '{"event": "answer", "text": "42 \\ud83d", "outcome": "answered"}',
        '{"event": "answer", "text": "\\ud83d\\ude00 \\udc00x", "\\ud800": 1}',
        '{"event": "mission_finished", "elapsed_s": 1e400, "steps": ' + "7" * 5000 + "}",
        '[1e400]', '{"event": "answer", "text": "\\ud83d", "n": NaN}']))
    assert read.records == [
        {"event": "answer", "text": "42 \ufffd", "outcome": "answered"},
        {"event": "answer", "text": "\U0001f600 \ufffdx", "\ufffd": 1},
        {"event": "mission_finished", "elapsed_s": None, "steps": None}]
    assert (read.non_object, read.torn) == (1, 1)
    assert parse_bytes(tmp_path, b'{"a": "\\ud83d"}\n').records == [{"a": "\ufffd"}]


def test_nan_and_infinity_are_not_json(tmp_path):
    read = parse_text(tmp_path, '{"event": "answer", "text": NaN}\n{"a": Infinity}\n')
    assert read.records == [] and read.torn == 2


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parses_without_raising(text):
    read = parse_text(None, text)
    assert len(read.records) + read.skipped == len(text.split("\n")) - (text.split("\n")[-1] == "")


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["event", "seq", "record", "x"]),
                                st.integers() | st.text(max_size=5), max_size=4), max_size=10))
def test_records_written_are_records_read(values):
    text = "".join(json.dumps(v) + "\n" for v in values)
    read = parse_text(None, text)
    assert len(read.records) == len(values)
