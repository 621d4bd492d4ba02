"""Suite JSON as the loader reads it: exactly what ``json.loads`` reads, repeated keys refused.

A large JSON suite is read by ``strict_json`` (orjson, with a check for repeated
keys) rather than composed as YAML; these hold it to the standard library's
reading of any JSON text, however it is spelled.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from evalkit.eval import strict_json


def _space() -> st.SearchStrategy[str]:
    return st.sampled_from(["", " ", "\n  ", "\t"])


#: JSON texts as any writer might spell them: escapes of every kind, keys that repeat
#: (some spelled with different escapes), numbers orjson and json read apart.
_KEYS = st.sampled_from(['"a"', '"b"', '"\\u0061"', '"a\\""', '"a\\\\"', '"\\\\\\""', '"é"'])
_SCALARS = st.one_of(
    st.text(max_size=8).map(lambda s: json.dumps(s)),
    st.text(max_size=8).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from(['"\\ud800"', '"\\\\"', '"\\"\\\\\\""', '"\\/"', "NaN", "-Infinity",
                     "1e400", "-0", "0.5", "true", "false", "null",
                     "1234567890123456789", "123456789012345678901234567890"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_JSON_TEXT = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(st.tuples(_space(), inner), max_size=4).map(
        lambda items: "[" + ",".join(s + v for s, v in items) + "]"),
    st.lists(st.tuples(_KEYS, _space(), inner), max_size=4).map(
        lambda items: "{" + ",".join(f"{k}:{s}{v}" for k, s, v in items) + "}"),
), max_leaves=12)


def _typed(value):
    """A value with every type spelled out (1, 1.0 and True are equal in Python)."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(text=_JSON_TEXT)
@example(text='{"a\\\\":1,"a\\u005c":2}')  # one key spelled two ways
@example(text='[{"k":"\\\\\\"", "k":"x"}]')  # a repeat after an escaped backslash and quote
@example(text='{"n": 123456789012345678901234567890}')  # orjson: a float
def test_suite_json_is_read_exactly_as_json_with_repeats_refused(text: str) -> None:
    def refuse_repeats(pairs):
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("repeated")
        return out

    try:
        want = json.loads(text, object_pairs_hook=refuse_repeats)
    except (ValueError, RecursionError):
        want = None
    got = strict_json.loads(text.encode("utf-8", "surrogatepass"))
    assert _typed(got) == _typed(want), text


def test_a_plain_run_of_missions_is_parsed_by_orjson() -> None:
    missions = [{"key": f"k{i}", "flag": "state", "prompt": "p }, { q", "must": ["a"],
                 "must_not": ["b"], "because": "c\u00e9"} for i in range(20)]
    run = json.dumps(missions, indent=2, ensure_ascii=False).encode()
    assert strict_json._fast(run) == json.loads(run)
    repeated = run.replace(b'"flag"', b'"flag": "x", "flag"', 1)
    assert strict_json._fast(repeated) is strict_json._UNSURE
    assert strict_json.loads(repeated) is None
