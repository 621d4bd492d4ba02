"""Replay compares tool arguments by meaning, not by the key order they were written in."""

from __future__ import annotations

import pytest

from tests.replay.conftest import Lab, without_ids

#: Arguments as a model might write them: keys not in sorted order, in text and as a mapping.
UNSORTED = [
    {"tool_calls": [{"name": "mcp_echo", "arguments": '{"text": "five", "b": 1, "a": 2}',
                     "id": "c1"},
                    {"name": "mcp_add", "arguments": {"b": 3, "a": 2}, "id": "c2"}]},
    {"tool_calls": [{"name": "mission_answer", "arguments": '{"text": "5"}', "id": "c3"}]},
]


@pytest.mark.slow
def test_a_native_recording_with_unsorted_arguments_replays_without_drift(lab: Lab) -> None:
    """The model log writes a reply's arguments with sorted keys, so the replayed turn is
    echoed back to the model in another order than the live one was: the same call."""
    original = lab.record(UNSORTED, protocol="native")
    replayed = lab.replay(original.launched.outcome.run_id)
    assert replayed.meta["drift"]["first"] is None, replayed.meta["drift"]
    assert without_ids(replayed.records) == without_ids(original.records)


@pytest.mark.slow
def test_a_changed_argument_value_is_still_drift(lab: Lab) -> None:
    """Meaning is compared, not ignored: a different value is a different call."""
    original = lab.record(UNSORTED, protocol="native")
    model_log = original.run_dir / "model.jsonl"
    text = model_log.read_text(encoding="utf-8")
    assert '\\"text\\": \\"five\\"' in text
    # the first reply's argument value changes; the replay echoes the changed call back
    model_log.write_text(text.replace('\\"text\\": \\"five\\"', '\\"text\\": \\"six\\"', 1),
                         encoding="utf-8")
    replayed = lab.replay(original.run_dir)
    first = replayed.meta["drift"]["first"]
    assert first is not None and first["call"] == 2 and "tool_calls" in first["detail"]
