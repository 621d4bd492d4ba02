"""Each machine check, judged from a stream: the bit and the sentence."""

from __future__ import annotations

import time
import warnings

import pytest
import re2
from hypothesis import example, given
from hypothesis import strategies as st

from evalkit.eval.checks import answer as answer_check
from evalkit.eval.diff import check_of
from evalkit.eval.suite import Mission
from evalkit.eval.summary import summarize
from evalkit.eval.verdict import KPI_NAMES, judge
from tests._stream_builders import (
    answer,
    call,
    finished,
    good_run,
    grounding,
    started,
    step,
)


def mission(**machine) -> Mission:
    return Mission(key="m1", flag="chaining", prompt="p", must=("a",), must_not=("b",),
                   because="c", **machine)


def verdict(records, **machine):
    return judge(mission(**machine), summarize(records))


def test_a_good_run_passes_every_check():
    v = verdict(good_run(), expects_tools=("mcp.add",), forbids_tools=("mcp.fail",),
                expects_outcome="answered", answer_must_match=(r"(?i)sum is 5",),
                answer_must_not_match=("6",), max_reply_rejected=0, must_not_stage=True)
    assert v.passed and v.reasons == [] and not v.missing
    assert v.needs_reader == {"must": ["a"], "must_not": ["b"]}


def test_expected_tool_never_called():
    v = verdict(good_run("mcp.echo"), expects_tools=("mcp.add",))
    assert v.reasons == ["never called mcp.add; it called ['mcp.echo']"]


def test_forbidden_tool_named_in_a_gate_or_rejected_reply_counts():
    gate = {"event": "gate_requested", "index": 1, "tool": "mcp.fail", "arguments": {},
            "reason": "gated"}
    v = verdict([started(), step(1), gate, finished("awaiting_approval")],
                forbids_tools=("mcp.fail",))
    assert v.reasons == ["reached for mcp.fail, which this mission forbids "
                         "(named, and the call never left the loop)"]
    rejected = {"event": "reply_rejected", "index": 1, "problem": "not offered", "tool": "mcp.fail"}
    v = verdict([started(), step(1), rejected, finished()], forbids_tools=("mcp.fail",))
    assert not v.passed
    v = verdict(good_run("mcp.fail"), forbids_tools=("mcp.fail",))
    assert v.reasons == ["reached for mcp.fail, which this mission forbids (and called it)"]


def test_outcome_and_the_caveat_widening():
    records = [started(), step(1), answer("x", "answered_with_caveat"),
               finished("answered_with_caveat")]
    assert verdict(records, expects_outcome="answered").reasons == [
        "ended 'answered_with_caveat'; this mission wants answered"]
    assert verdict(records, expects_outcome="answered", expects_caveat_ok=True).passed
    plain = [started(), step(1), answer("x"), finished("answered")]
    assert verdict(plain, expects_outcome="answered_with_caveat").reasons == [
        "ended 'answered'; this mission wants answered_with_caveat"]
    stopped = [started(), step(1), finished("incomplete")]
    assert verdict(stopped, expects_outcome="answered", expects_caveat_ok=True).reasons == [
        "ended 'incomplete'; this mission wants answered (or answered_with_caveat)"]
    # widening by the outcome it already wants says nothing twice
    assert verdict(plain, expects_outcome="answered_with_caveat",
                   expects_caveat_ok=True).reasons == [
        "ended 'answered'; this mission wants answered_with_caveat"]


def test_grounding_uses_the_last_verdict_record_not_the_interim_one():
    records = [started(), step(1), grounding(False, repairing=True), step(2), grounding(True),
               answer(), finished()]
    assert verdict(records, expects_grounded=True).passed
    records = [started(), step(1), grounding(True, repairing=True), answer(), finished()]
    assert verdict(records, expects_grounded=True).reasons == [
        "no grounding verdict was recorded; this mission wants grounded=True"]
    records = [started(), grounding(False), answer(), finished()]
    assert verdict(records, expects_grounded=True).reasons == [
        "grounding says grounded=False; this mission wants True"]


def test_answer_regexes_search_the_last_answer():
    *run, end = good_run()  # two answers, in order: the second is the one searched
    records = [*run, answer("later text mentions 7"), end]
    assert verdict(records, answer_must_match=("7",)).passed
    assert verdict(records, answer_must_not_match=("7",)).reasons == [
        "the answer matches /7/, which this mission forbids"]
    no_answer = [started(), step(1), finished("incomplete")]
    assert verdict(no_answer, answer_must_match=("x",)).reasons == [
        "no answer was recorded; this mission checks the answer text"]
    textless = [started(), step(1), {"event": "answer", "text": None, "outcome": "answered"},
                finished()]
    assert verdict(textless, answer_must_not_match=("x",)).passed  # searched as empty text
    found = verdict(textless, answer_must_match=("x", "^$"), answer_must_not_match=("x",))
    assert found.reasons == ["the answer does not match /x/"]
    assert found.checks == ["answer_must_match"] == [check_of(r) for r in found.reasons]


def test_rejected_replies_and_staging():
    rejected = {"event": "reply_rejected", "index": 1, "problem": "not JSON"}
    records = [started(), step(1), rejected, step(2), rejected, answer(), finished()]
    assert verdict(records, max_reply_rejected=1).reasons == [
        "2 replies could not be read; this mission allows 1"]
    plan = [{"id": "s1", "goal": "g", "rung": 1}]
    records = [started(), step(1, plan=plan), answer(), finished()]
    assert verdict(records, must_not_stage=True).reasons == [
        "the run was STAGED: a plan rode step_started"]


def test_stream_level_failures():
    assert judge(mission(), None).reasons == ["not run"] and judge(mission(), None).missing
    empty = verdict([])
    assert empty.reasons == ["the stream is empty: the run failed"] and not empty.missing
    cut = verdict([started(), step(1)])
    assert cut.reasons == ["the stream stopped without mission_finished: "
                           "the run was cut off, not closed"]
    odd = verdict([started(), {"event": "teleported"}, {"event": "answer"}, *good_run()[1:]])
    assert odd.reasons == ["2 records do not conform to the stream contract: "
                           "line 2: unknown event 'teleported'; line 3: answer: missing "
                           "required field 'text'; line 3: answer: missing required field "
                           "'outcome'"]


def test_kpis_come_from_the_stream_and_absent_values_are_null():
    records = [started(protocol="native"), step(1, injected=["hurry"]), *call(1, "mcp.add"),
               {"event": "gate_requested", "index": 2, "tool": "mcp.fail", "arguments": {},
                "reason": "gated"},
               {**call(3, "mcp.echo")[1], "ok": False}, answer("abc"),
               {"event": "mission_finished", "outcome": "answered", "steps": 3, "max_steps": 5}]
    k = verdict(records).kpis
    assert set(k) == set(KPI_NAMES)
    assert k["tokens"] is None and k["elapsed_s"] is None and k["model_calls"] is None
    assert (k["steps"], k["max_steps"], k["tool_calls"], k["tools"]) == (3, 5, 1, ["mcp.add"])
    assert (k["refusals"], k["gate_requested"], k["injected"], k["human_interventions"]) == (
        1, 1, 1, 2)
    assert (k["protocol"], k["answer_chars"], k["run_id"]) == ("native", 3, "run_test-1")
    assert verdict(good_run()).kpis["tokens"] == 120
    assert verdict(good_run()).kpis["protocol"] == "json"


def test_the_budget_kpi_is_the_budget_as_recorded():
    ran_out = {"which": "seconds", "limit": 30, "spent": 31.2}
    records = [started(), step(1), finished("budget_exhausted", budget=ran_out)]
    assert verdict(records).kpis["budget"] == ran_out
    assert verdict(good_run()).kpis["budget"] is None


def test_two_missions_in_one_file_are_read_as_the_later_one():
    records = [started(run_id="run_a", profile="dev"), finished("incomplete"),
               started(run_id="run_b", protocol="native"), answer("done"), finished()]
    k = verdict(records).kpis
    assert (k["run_id"], k["protocol"], k["profile"], k["outcome"]) == (
        "run_b", "native", "safe", "answered")


def test_every_reason_names_the_check_that_wrote_it():
    from evalkit.eval.verdict import CHECKS

    gate = {"event": "gate_requested", "index": 1, "tool": "mcp.fail", "arguments": {},
            "reason": "gated"}
    records = [started(), step(1, plan=[{"id": "s1", "goal": "g", "rung": 1}]), gate,
               {"event": "reply_rejected", "index": 1, "problem": "x"}, answer("six"),
               finished("awaiting_approval")]
    v = verdict(records, expects_tools=("mcp.add",), forbids_tools=("mcp.fail",),
                expects_outcome="answered", expects_grounded=True,
                answer_must_match=("5",), answer_must_not_match=("six",),
                max_reply_rejected=0, must_not_stage=True)
    assert v.checks == ["expects_tools", "forbids_tools", "expects_outcome", "expects_grounded",
                        "answer_must_match", "answer_must_not_match", "max_reply_rejected",
                        "must_not_stage"]
    assert len(v.checks) == len(v.reasons) and set(v.checks) <= set(CHECKS)
    assert judge(mission(), None).checks == ["missing"]
    assert verdict([started()]).checks == ["unfinished"]


_PATTERN_TEXT = st.text(alphabet="aAbBsSkK iI_-,'\"#.*+?()[]\\|^$ſKı", max_size=6)
_ANSWER_TEXT = st.text(alphabet="aAbBsSkK iI_-,'\"#.\nſKıé", max_size=40)


@pytest.mark.slow
@given(body=_PATTERN_TEXT, folded=st.booleans(), answer=_ANSWER_TEXT)
@example(body="s", folded=True, answer="a long ſ")  # U+017F: no ASCII shortcut
@example(body="I CANNOT", folded=True, answer="well, i cannot")
@example(body="[[a]", folded=False, answer="x[a")
@example(body="[[", folded=False, answer="")  # Python's parser warns of a nested set
def test_answer_patterns_mean_what_an_re2_search_means(body: str, folded: bool,
                                                       answer: str) -> None:
    """The plain-word shortcut finds exactly what RE2 would (the engine answer patterns run on)."""
    pattern = ("(?i)" if folded else "") + body
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = answer_check._search(pattern, answer)
    options = re2.Options()
    options.log_errors = False
    try:
        want: bool | None = re2.compile(pattern, options).search(answer) is not None
    except re2.error:
        want = None
    if want is None:
        assert isinstance(got, str) and got.startswith(f"the pattern /{pattern}/ ")
        assert got.endswith("; this check cannot pass")
    else:
        assert got is want, (pattern, answer)


def test_a_pattern_with_nested_quantifiers_scores_a_hostile_answer_at_once() -> None:
    """Backtracking takes ~2^n steps on this pair; RE2 is linear in the answer."""
    hostile = "a" * 100_000 + "!"
    began = time.monotonic()
    v = verdict([started(), answer(hostile), finished()],
                answer_must_match=("^(a|aa)+$",), answer_must_not_match=("(a*)*b", "(x+x+)+y"))
    assert time.monotonic() - began < 1
    assert v.reasons == ["the answer does not match /^(a|aa)+$/"]


def test_a_pattern_re2_cannot_run_fails_its_check_in_one_sentence() -> None:
    v = verdict([started(), answer("abab"), finished()], answer_must_match=(r"(ab)\1",))
    assert v.reasons == [r"the pattern /(ab)\1/ uses a backreference, which RE2 cannot match "
                         "in linear time; rewrite it without; this check cannot pass"]
    assert v.checks == ["answer_pattern"] == [check_of(r) for r in v.reasons]
    for unusable in (r"a\Z", "a{,2}", "(a"):  # every kind of refusal reads back as the same check
        reasons = verdict([started(), answer("a"), finished()],
                          answer_must_match=(unusable,)).reasons
        assert [check_of(r) for r in reasons] == ["answer_pattern"], reasons
