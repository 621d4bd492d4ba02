"""Each fast path of the JSONL fold equals the slow path it stands in for.

Scoring folds every record of every run, so the hot spots take shortcuts:
``conforms`` answers a well-formed record in one pass, the reader lets orjson
read bytes, the fold keys a tool result by orjson's text instead of the stdlib
encoder's hash, the stagnation watch keeps running tallies instead of
recounting its window. Each is held here to the answer of the plain code, on
values built to hit its edges.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit import contract, signals
from evalkit.eval.summary import (
    _same_in_orjson,
    call_text,
    first_firing,
    summarize,
)
from evalkit.store.layout import resolve_relative
from evalkit.store.reader import parse_bytes, parse_text
from tests._stream_builders import call

# --- conforms: the one-pass test never hides a problem the full check finds ---------

_ALL_FIELDS = sorted({f for fields in contract.FIELDS.values() for f in fields})
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.floats(), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2))


@st.composite
def _records(draw: st.DrawFn) -> Any:
    record: dict[Any, Any] = {}
    event = draw(st.one_of(st.sampled_from(contract.EVENTS), _ODD))
    if draw(st.integers(0, 9)):
        record["event"] = event
    required = contract.FIELDS.get(event, ()) if isinstance(event, str) else ()
    complete = draw(st.booleans())
    for field in (*required, *draw(st.lists(st.sampled_from(_ALL_FIELDS), max_size=4))):
        if complete or draw(st.booleans()):
            record[field] = draw(_ODD)
    version = draw(st.sampled_from([None, 1, 1.0, True, 2, "1", -1]))
    if version is not None:
        record["schema_version"] = version
    wrap = draw(st.sampled_from(["dict", "dict", "proxy", "subclass", "list"]))
    if wrap == "proxy":
        return MappingProxyType(record)
    if wrap == "subclass":
        return type("Record", (dict,), {})(record)
    return list(record) if wrap == "list" else record


@pytest.mark.slow
@settings(max_examples=400)
@given(record=_records())
def test_conforms_equals_the_full_check(record: Any) -> None:
    assert contract.conforms(record) == contract._problems(record)


# --- the reader: bytes straight to orjson read as the decoded text does --------------

_LINES = st.sampled_from([
    b'{"event": "step_started", "index": 1}',
    b'{"seq": 1, "at": "t", "record": {"event": "answer", "text": "caf\xc3\xa9", "outcome": "x"}}',
    b'{"seq": 2, "record": [1]}', b'{"seq": 3, "event": "answer", "record": {}}',
    b'{"event": "answer", "text": "bad \xff byte"}', b'{"a": "\xed\xa0\x80"}', b'"\xc3"',
    b"", b"   ", b"\t\r", b"\xc2\xa0", b"\xe2\x80\xa8", b"\x1c", b'{"a": 1}\r', b"\xef\xbb\xbf{}",
    b"[1, 2]", b"3", b"null", b'"text"', b'{"event": "ans', b"\xff\xfe", b"NaN", b'{"a": NaN}',
    b'{"n": 123456789012345678901234567890}', b'"\\ud800"', b'{"x": "\\ud83d\\ude00"}',
])


@pytest.mark.slow
@given(lines=st.lists(st.one_of(_LINES, st.binary(max_size=12)), max_size=8),
       newline=st.booleans())
def test_parse_bytes_reads_as_parse_text_of_the_decoded_bytes(lines: list[bytes],
                                                               newline: bool) -> None:
    data = b"\n".join(lines) + (b"\n" if newline else b"")
    fast, slow = parse_bytes(None, data), parse_text(None, data.decode("utf-8", "replace"))
    assert (fast.records, fast.lines, fast.blank, fast.torn, fast.non_object) == \
        (slow.records, slow.lines, slow.blank, slow.torn, slow.non_object)


# --- a tool result's key: orjson's text is the stdlib encoder's text -------------------

_ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates too
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70),
    st.floats(), st.floats(min_value=-1e-3, max_value=1e-3), st.floats(min_value=1e15),
    st.text(_ANY_CHAR), st.text(max_size=4),
    st.builds(type("Text", (str,), {}), st.text(max_size=3)),
    st.builds(type("Number", (int,), {}), st.integers(-3, 3)),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(_ANY_CHAR, max_size=3),
                        inner, max_size=3),
        st.dictionaries(st.one_of(st.integers(-2, 2), st.booleans(), st.text(max_size=2)),
                        inner, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=400)
@given(parts=st.dictionaries(st.sampled_from(["tool", "arguments", "ok", "exit_code", "output",
                                              "error", "handle"]), _VALUES))
@pytest.mark.slow
def test_call_text_is_the_canonical_text(parts: dict[str, Any]) -> None:
    assert _outcome(call_text, parts) == _outcome(signals.canonical, parts)


def _outcome(read: Any, record: Mapping[str, Any]) -> tuple[str, Any]:
    """What ``read(record)`` gives, or the error it raises (keys of mixed types cannot
    be sorted, and a fingerprint has always raised on them)."""
    try:
        return "text", read(record)
    except TypeError as exc:
        return "raises", type(exc)


@settings(max_examples=1000)
@given(value=st.one_of(st.floats(), st.floats(min_value=-1e-3, max_value=1e-3),
                       st.floats(min_value=1e-12, max_value=1e-2)))
@pytest.mark.slow
def test_floats_orjson_may_write_are_written_as_the_stdlib_does(value: float) -> None:
    import orjson

    if _same_in_orjson(value):
        assert orjson.dumps(value).decode() == json.dumps(value)


# --- the stagnation watch: running tallies fire as recounting the window does ---------


class _Recount(signals.Watch):
    """The checks as first written: the whole window recounted at every step."""

    def _check(self, step: signals.Step) -> signals.Firing | None:
        w, t = self.window, self.thresholds
        counts = Counter(fp for s in w for fp in s.results)
        if counts and max(counts.values()) >= t["repeat"]:
            return signals.Firing("repeat", step.index, t["repeat"])
        if _trailing(w, lambda s: s.rejected > 0 and s.calls == 0) >= t["rejected"]:
            return signals.Firing("rejected", step.index, t["rejected"])
        if self._oscillates(t["oscillation"]):
            return signals.Firing("oscillation", step.index, t["oscillation"])
        if _trailing(w, lambda s: not s.fresh) >= t["idle"]:
            return signals.Firing("idle", step.index, t["idle"])
        return None


def _trailing(steps: list[signals.Step], test: Any) -> int:
    n = 0
    for step in reversed(steps):
        if not test(step):
            break
        n += 1
    return n


_CALLS = st.sampled_from([("mcp.echo", {"text": "a"}, "a"), ("mcp.echo", {"text": "b"}, "b"),
                          ("mcp.add", {"a": 1, "b": 2.5}, "3.5"), ("mcp.add", {"a": 1}, 1)])
_STEP = st.one_of(st.lists(_CALLS, max_size=2), st.just("rejected"), st.just("call+rejected"))
_REVIEW = st.one_of(st.none(), st.fixed_dictionaries({
    "signal": st.sampled_from([*signals.SIGNALS, "other"]),
    "verdict": st.sampled_from([*signals.VERDICTS, None]),
}, optional={"threshold": st.one_of(st.integers(-1, 9), st.booleans(), st.text(max_size=1))}))


@st.composite
def _streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 24))):
        started: dict[str, Any] = {"event": "step_started", "index": index}
        review = draw(_REVIEW)
        if review is not None:
            started["review"] = review
        records.append(started)
        shape = draw(_STEP)
        calls = shape if isinstance(shape, list) else [draw(_CALLS)] if shape == "call+rejected" else []
        for tool, arguments, output in calls:
            records.extend(call(index, tool, arguments, output=output))
        if shape in ("rejected", "call+rejected"):
            records.append({"event": "reply_rejected", "index": index, "problem": "p"})
        if draw(st.integers(0, 9)) == 0:
            records[-1]["branch"] = draw(st.sampled_from(["direct", "b1"]))
    return records


@settings(max_examples=300, deadline=None)
@given(records=_streams(), thresholds=st.dictionaries(st.sampled_from(signals.SIGNALS),
                                                      st.integers(-1, 6), max_size=2))
@pytest.mark.slow
def test_running_tallies_fire_as_recounting_does(records: list[dict[str, Any]],
                                                 thresholds: dict[str, int]) -> None:
    fast, slow = signals.Watch(thresholds), _Recount(thresholds)
    for record in records:
        fast.feed(record)
        slow.feed(record)
    fast.boundary()
    slow.boundary()
    assert fast.firings == slow.firings


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(records=_streams())
def test_the_fold_finds_the_stagnation_the_watch_finds(records: list[Mapping[str, Any]]) -> None:
    assert (summarize(records).stagnation, summarize(records).stagnation_step) == \
        first_firing(signals.stagnation(records))


_SEGMENT = st.sampled_from(["k", "k2", "run_1", "events.jsonl", "x", "", "..", "k.events.jsonl",
                           ".partial", ".k"])


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(["k", "k2", "k/x"]),
       parts=st.lists(_SEGMENT, min_size=1, max_size=5))
def test_one_candidate_resolves_as_the_general_rule_does(key: str, parts: list[str]) -> None:
    rel = "/".join(parts)
    # A list of one takes the short path; any other iterable walks the general rule.
    assert resolve_relative(key, [rel]) == resolve_relative(key, iter([rel]))


# --- _distinct: the short-list scan gives what the dict gives ----------------------

@pytest.mark.slow
@given(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "mcp.add", "fs", "A"])),
                max_size=40))
@settings(max_examples=300)
def test_distinct_tools_keep_first_seen_order_without_none(items: list[str | None]) -> None:
    from evalkit.eval.verdict import distinct as _distinct

    expected = [item for item in dict.fromkeys(items) if item is not None]
    assert _distinct(tuple(items)) == expected
