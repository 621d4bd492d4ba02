"""check: every gradeability rule, each with a failing case and its exact sentence."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.eval import check as check_module
from evalkit.eval.check import CheckResult, check_path, check_suite
from evalkit.eval.suite import CAPABILITIES, Mission, Suite, SuiteError, load_suite

GOOD = Path(__file__).parent / "data" / "suites" / "good.yaml"
SEED = Path(__file__).parent / "data" / "suites" / "seed-style.yaml"
GOOD_DATA: dict[str, Any] = yaml.safe_load(GOOD.read_text())
VOCAB = ", ".join(CAPABILITIES)
TOOLS = "mcp.echo, mcp.add, mcp.cancel_job"


def good() -> dict[str, Any]:
    """A fresh, mutable copy of the good fixture's data."""
    return copy.deepcopy(GOOD_DATA)


def mission(data: dict[str, Any], key: str) -> dict[str, Any]:
    return next(m for m in data["missions"] if m["key"] == key)


def check_data(tmp_path: Path, data: dict[str, Any]) -> CheckResult:
    path = tmp_path / "suite-under-test.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return check_path(path)


def problems_after(tmp_path: Path, which: str, /, **changes: Any) -> list[str]:
    """The problems of the good suite after changing (or, with None, removing) mission fields."""
    data = good()
    target = mission(data, which)
    for name, value in changes.items():
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    return check_data(tmp_path, data).problems


# -- the clean suites ---------------------------------------------------------------


def test_good_suite_is_gradeable_with_the_exact_summary():
    result = check_path(GOOD)
    assert result.ok and result.problems == []
    assert result.summary == ("suite 'good' is gradeable: 12 missions, 4 held out (33%), "
                              "11 of 11 claimed flags captured")
    assert result.message == result.summary
    assert result.suite == load_suite(GOOD)


def test_seed_style_suite_is_gradeable():
    assert check_path(SEED).summary == ("suite 'seed-style' is gradeable: 8 missions, "
                                        "3 held out (38%), 3 of 3 claimed flags captured")


def test_check_suite_takes_a_loaded_suite():
    assert check_suite(load_suite(GOOD)).ok


# -- per mission --------------------------------------------------------------------


def test_empty_key(tmp_path):
    assert problems_after(tmp_path, "orient-1", key="  ") == [
        "mission #1 field 'key': is empty; every mission needs a key (it names its run directory)"]


def test_duplicate_key(tmp_path):
    assert problems_after(tmp_path, "chain-2", key="chain-1") == [
        "mission 'chain-1' field 'key': already used by mission #2; keys must be unique "
        "(each names a run directory)"]


def test_key_that_cannot_name_a_directory(tmp_path):
    assert problems_after(tmp_path, "chain-2", key="../chain-2") == [
        "mission '../chain-2' field 'key': '../chain-2' cannot name a run directory; "
        "avoid / \\ . and .."]


def test_flag_outside_the_vocabulary(tmp_path):
    assert problems_after(tmp_path, "chain-2", flag="teleport") == [
        f"mission 'chain-2' field 'flag': 'teleport' is not in the vocabulary ({VOCAB})"]


def test_vocabulary_extension_is_the_suite_s_vocabulary(tmp_path):
    data = good()
    data["vocabulary"] = ["reconciliation"]
    mission(data, "chain-2")["flag"] = "reconciliation"
    result = check_data(tmp_path, data)
    assert result.ok, result.problems
    assert result.summary.endswith("12 of 12 claimed flags captured")


@pytest.mark.parametrize("field, value, problem", [
    ("prompt", " ", "is empty; it is given verbatim as the objective"),
    ("must", None, "is missing or empty; write what a good answer shows, for the reader"),
    ("must", [""], "is missing or empty; write what a good answer shows, for the reader"),
    ("must_not", [], "is missing or empty; write what it must avoid, for the reader"),
    ("because", None, "is missing or empty; say why this mission exists"),
    ("because", "", "is missing or empty; say why this mission exists"),
])
def test_empty_reader_fields(tmp_path, field, value, problem):
    if value is None:
        data = good()
        del mission(data, "orient-1")[field]
        problems = check_data(tmp_path, data).problems
    else:
        problems = problems_after(tmp_path, "orient-1", **{field: value})
    assert problems == [f"mission 'orient-1' field '{field}': {problem}"]


@pytest.mark.parametrize("field", ["expects_tools", "forbids_tools"])
def test_tool_not_served(tmp_path, field):
    assert problems_after(tmp_path, "chain-1", **{field: ["mcp.add", "mcp.mul"]}) == [
        f"mission 'chain-1' field '{field}': 'mcp.mul' is not a served tool ({TOOLS})"]


def test_tools_are_not_checked_when_the_suite_lists_none(tmp_path):
    data = good()
    del data["tools"]
    mission(data, "chain-1")["expects_tools"] = ["mcp.mul"]
    mission(data, "chain-1")["prompt"] = "Please echo it and add them up."
    assert check_data(tmp_path, data).ok


@pytest.mark.parametrize("prompt, named", [
    ("Call mcp.add on 2 and 3.", "'mcp.add'"),
    ("Please ADD 2 and 3.", "'mcp.add' (as 'ADD')"),
    ("(add) 2 and 3", "'mcp.add' (as 'add')"),
    ("Say it back: echo.", "'mcp.echo' (as 'echo')"),
    ("Use cancel_job on 7.", "'mcp.cancel_job' (as 'cancel_job')"),
])
def test_prompt_names_a_served_tool(tmp_path, prompt, named):
    assert problems_after(tmp_path, "orient-1", prompt=prompt) == [
        f"mission 'orient-1' field 'prompt': names the served tool {named}; "
        "write it as a person would, without tool names"]


@pytest.mark.parametrize("prompt", [
    "What is the address of the office?",      # 'add' inside a word
    "The echoes of last year, summarised.",
    "Compute x_add and add_x for me.",         # '_' is part of an identifier
    "Cancel job 7.",                           # not the identifier cancel_job
    "Open notes.add and read it.",             # after a dot: a file's name, as the seed reads it
    "Which files end in .echo or .ADD here?",
])
def test_tool_names_count_only_at_identifier_boundaries(tmp_path, prompt):
    assert problems_after(tmp_path, "orient-1", prompt=prompt) == []


def test_prompt_names_undeclared_data(tmp_path):
    problems = problems_after(
        tmp_path, "synthesis-1", prompt="Combine asset.00ff with asset.dead0 and doc.beef.")
    assert problems == [
        "mission 'synthesis-1' field 'prompt': names 'asset.dead0', which is neither a declared "
        "asset nor a tool; declare it under 'assets'"]


def test_a_tool_name_is_declared_data(tmp_path):
    data = good()
    data["identifier_pattern"] = r"\bmcp\.\w+"
    data["tools"].append("mcp.lookup_v2")
    data["missions"][0]["prompt"] = "Is mcp.lookup_v2 the tool I want, or mcp.other?"
    # mcp.lookup_v2 is a tool (so the prompt names a tool); mcp.other is undeclared.
    assert check_data(tmp_path, data).problems == [
        "mission 'orient-1' field 'prompt': names the served tool 'mcp.lookup_v2'; write it as a "
        "person would, without tool names",
        "mission 'orient-1' field 'prompt': names 'mcp.other', which is neither a declared "
        "asset nor a tool; declare it under 'assets'",
    ]


def test_unknown_split(tmp_path):
    assert problems_after(tmp_path, "orient-1", split="dev") == [
        "mission 'orient-1' field 'split': 'dev' is not a split; use train or test"]


def test_unknown_outcome(tmp_path):
    assert problems_after(tmp_path, "orient-1", expects_outcome="done") == [
        "mission 'orient-1' field 'expects_outcome': 'done' is not an outcome (answered, "
        "answered_with_caveat, awaiting_approval, budget_exhausted, incomplete)"]


def test_negative_max_reply_rejected(tmp_path):
    assert problems_after(tmp_path, "protocol-1", max_reply_rejected=-1) == [
        "mission 'protocol-1' field 'max_reply_rejected': -1 is negative; use 0 or more"]
    assert problems_after(tmp_path, "protocol-1", max_reply_rejected=0) == []


@pytest.mark.parametrize("field", ["answer_must_match", "answer_must_not_match"])
def test_regex_that_does_not_compile(tmp_path, field):
    assert problems_after(tmp_path, "chain-2", **{field: ["ok", "(unclosed"]}) == [
        f"mission 'chain-2' field '{field}': pattern '(unclosed' does not compile: "
        "missing ), unterminated subpattern at position 0"]


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(\d+) and \1", "uses a backreference"),
    (r"(?P<n>\d+) and (?P=n)", "uses a named backreference"),
    (r"\d+(?= tests)", "uses lookahead"),
    (r"(?<!not )passed", "uses lookbehind"),
    (r"(?>a+)b", "uses an atomic group"),
    (r"a*+b", "uses a possessive quantifier"),
])
def test_a_regex_that_cannot_run_in_linear_time_is_refused_naming_it(tmp_path, pattern, why):
    assert problems_after(tmp_path, "chain-2", answer_must_match=["ok", pattern]) == [
        f"mission 'chain-2' field 'answer_must_match': pattern {pattern!r} {why}, which RE2 "
        "cannot match in linear time; rewrite it without"]


def test_an_up_to_repeat_re2_would_read_as_text_is_refused(tmp_path):
    assert problems_after(tmp_path, "chain-2", answer_must_not_match=[r"\d{,3}%"]) == [
        "mission 'chain-2' field 'answer_must_not_match': pattern '\\\\d{,3}%' writes a repeat "
        "as {,n}, which RE2 reads as literal text; write {0,n}"]
    for fine in (r"\{,3}", r"[{,3}]", r"x{0,3}"):  # escaped or in a class: text in both engines
        assert problems_after(tmp_path, "chain-2", answer_must_not_match=[fine]) == []


def test_python_s_end_of_text_is_refused_with_re2_s_spelling(tmp_path):
    assert problems_after(tmp_path, "chain-2", answer_must_match=[r"done\Z"]) == [
        "mission 'chain-2' field 'answer_must_match': pattern 'done\\\\Z' uses \\Z for the end "
        "of the text, which RE2 spells \\z; write \\z"]


def test_nested_quantifiers_are_fine_they_run_in_linear_time(tmp_path):
    assert problems_after(tmp_path, "chain-2", answer_must_match=["^(a|aa)+$"]) == []


def test_an_identifier_pattern_with_lookaround_is_refused(tmp_path):
    data = good()
    data["identifier_pattern"] = r"\basset\.(?=[0-9a-f])\w+"
    assert check_data(tmp_path, data).problems == [
        "suite field 'identifier_pattern': '\\\\basset\\\\.(?=[0-9a-f])\\\\w+' uses lookahead, "
        "which RE2 cannot match in linear time; rewrite it without"]


# -- mission CLI flags ---------------------------------------------------------------


@pytest.mark.parametrize("flags", [
    ["--swarm"],
    ["--gate-tool", "mcp.cancel_job"],
    ["--gate-tool=mcp.cancel_job", "--swarm"],
    ["--swarm-parallel", "2", "--no-supervisor", "--mission-steps", "0"],
    [],
])
def test_published_flags_pass(tmp_path, flags):
    assert problems_after(tmp_path, "routing-1", flags=flags) == []


@pytest.mark.parametrize("flags, problem", [
    (["--events", "-"], "'--events' is set by the harness itself, never by a mission"),
    (["--resume=run_x"], "'--resume' is set by the harness itself, never by a mission"),
    (["--teleport"], "'--teleport' is not a flag the agent publishes"),
    (["--teleport", "mars", "--swarm"], "'--teleport' is not a flag the agent publishes"),
    (["swarm"], "'swarm' is not a flag (a flag starts with --); values follow their flag"),
    (["--swarm", "4"], "'4' is not a flag (a flag starts with --); values follow their flag"),
    (["-s"], "'-s' is not a flag (a flag starts with --); values follow their flag"),
    (["--gate-tool"], "'--gate-tool' needs a value after it"),
    (["--swarm=yes"], "'--swarm' takes no value, but is given one in '--swarm=yes'"),
])
def test_bad_mission_flags(tmp_path, flags, problem):
    assert problems_after(tmp_path, "routing-1", flags=flags) == [
        f"mission 'routing-1' field 'flags': {problem}"]


def test_agent_flags_replace_evalkit_s_flags(tmp_path):
    data = good()
    data["agent_flags"] = ["--fanout", "--tenant NAME", "--region=R", "--gate-tool"]
    mission(data, "routing-1")["flags"] = ["--fanout", "--tenant", "acme", "--region", "eu"]
    assert check_data(tmp_path, data).problems == []
    # --swarm is evalkit's, not this agent's; --gate-tool keeps its value from the contract.
    mission(data, "routing-1")["flags"] = ["--swarm", "--gate-tool", "mcp.cancel_job"]
    assert check_data(tmp_path, data).problems == [
        "mission 'routing-1' field 'flags': '--swarm' is not a flag the agent publishes"]
    data["agent_flags"].append("--events")
    mission(data, "routing-1")["flags"] = ["--events", "-"]
    assert check_data(tmp_path, data).problems == [
        "mission 'routing-1' field 'flags': '--events' is set by the harness itself, "
        "never by a mission"]


# -- suite level --------------------------------------------------------------------


def test_identifier_pattern_that_does_not_compile(tmp_path):
    data = good()
    data["identifier_pattern"] = "[a-"
    assert check_data(tmp_path, data).problems == [
        "suite field 'identifier_pattern': '[a-' does not compile: "
        "unterminated character set at position 0"]


def test_claimed_flag_outside_the_vocabulary(tmp_path):
    data = good()
    data["flags"] = ["chaining", "teleport"]
    result = check_data(tmp_path, data)
    assert result.problems == [
        f"suite field 'flags': 'teleport' is not in the vocabulary ({VOCAB})"]


def test_claimed_flag_no_mission_captures(tmp_path):
    data = good()
    data["flags"] = ["chaining", "routing"]
    data["missions"] = [m for m in data["missions"] if m["flag"] != "routing"]
    result = check_data(tmp_path, data)
    assert "suite field 'flags': no mission captures 'routing', claimed" in result.problems


def test_absent_claim_means_the_whole_vocabulary(tmp_path):
    data = good()
    data["missions"] = [m for m in data["missions"] if m["flag"] != "absence"]
    assert check_data(tmp_path, data).problems == [
        "suite field 'flags': no mission captures 'absence', in the vocabulary, which a suite "
        "without 'flags' claims whole"]


@pytest.mark.parametrize("field", ["flags", "vocabulary"])
def test_a_refused_flags_or_vocabulary_is_one_problem_not_a_claim_of_every_flag(
        tmp_path, field):
    """A ``flags`` that is not a list was read as no ``flags`` (claiming the whole
    vocabulary), so a "no mission captures" problem followed for every flag no
    mission has; a refused ``vocabulary`` made each claimed extension flag "not in
    the vocabulary" as well."""
    data = good()
    data["missions"] = [m for m in data["missions"] if m["flag"] != "absence"]
    data["flags"] = sorted({m["flag"] for m in data["missions"]}) + ["custom"]
    data["vocabulary"] = ["custom"]
    data[field] = "custom"  # a bare string where a list belongs
    with pytest.raises(SuiteError) as refused:
        check_data(tmp_path, data)
    assert len(refused.value.problems) == 1, refused.value.problems
    assert refused.value.problems[0].startswith(f"suite field {field!r}")


def test_a_narrow_claim_is_counted_in_the_summary(tmp_path):
    data = good()
    data["flags"] = ["chaining", "state", "boundary"]
    data["name"] = "narrow"
    assert check_data(tmp_path, data).summary == (
        "suite 'narrow' is gradeable: 12 missions, 4 held out (33%), "
        "3 of 3 claimed flags captured")


def _split_suite(total: int, held: int) -> dict[str, Any]:
    base = mission(good(), "orient-1")
    missions = [dict(base, key=f"m{i}", split="test" if i < held else "train")
                for i in range(total)]
    return {"name": "split", "flags": ["orientation"], "missions": missions}


@pytest.mark.parametrize("total, held, problems", [
    (12, 3, []),                                   # 25% exactly
    (10, 4, []),                                   # 40% exactly
    (8, 3, []),                                    # 37.5%
    (12, 2, ["suite field 'missions': only 2 test missions; hold out at least 3 with split: "
             "test", "suite field 'missions': 2 of 12 missions held out (17%); the test share "
             "must be 25% to 40%"]),
    (5, 3, ["suite field 'missions': 3 of 5 missions held out (60%); the test share must be "
            "25% to 40%"]),
    (13, 3, ["suite field 'missions': 3 of 13 missions held out (23%); the test share must be "
             "25% to 40%"]),
    (6, 1, ["suite field 'missions': only 1 test mission; hold out at least 3 with split: "
            "test", "suite field 'missions': 1 of 6 missions held out (17%); the test share "
            "must be 25% to 40%"]),
    (0, 0, ["suite field 'flags': no mission captures 'orientation', claimed",
            "suite field 'missions': only 0 test missions; hold out at least 3 with split: "
            "test"]),
])
def test_held_out_share(tmp_path, total, held, problems):
    """The rule's words, as a suite of 8 missions or more (or --strict) is refused with;
    below 8 missions the same words are warnings and the suite is gradeable."""
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(_split_suite(total, held), sort_keys=False), encoding="utf-8")
    assert check_path(path, strict=True).problems == problems
    lenient = check_path(path)
    if total < 8:
        assert lenient.problems == [] and len(lenient.warnings) == len(problems)
    else:
        assert lenient.problems == problems and lenient.warnings == []


def test_clean_summary_rounds_the_share(tmp_path):
    assert check_data(tmp_path, _split_suite(8, 3)).summary == (
        "suite 'split' is gradeable: 8 missions, 3 held out (38%), 1 of 1 claimed flags captured")


@pytest.mark.parametrize("change, problems", [
    ({"date": "2024-05-01", "key": "chain-1", "what": "x"},
     ["rubric change #2 field 'why': is missing or empty; a change says date, key, what and why"]),
    ({"date": "", "key": "chain-1", "what": "x", "why": " "},
     ["rubric change #2 field 'date': is missing or empty; a change says date, key, what and why",
      "rubric change #2 field 'why': is missing or empty; a change says date, key, what and why"]),
])
def test_incomplete_rubric_change(tmp_path, change, problems):
    data = good()
    data["rubric_changes"].append(change)
    assert check_data(tmp_path, data).problems == problems


@pytest.mark.parametrize("key", ["ghost", "*"])
def test_a_rubric_change_may_name_a_mission_that_is_gone_or_all(tmp_path, key):
    """A ledger outlives the missions it speaks of (renamed, removed), and ``*`` is
    a change to every mission: the spec refuses only an incomplete change."""
    data = good()
    data["rubric_changes"].append({"date": "2024-05-01", "key": key, "what": "x", "why": "y"})
    assert check_data(tmp_path, data).problems == []


# -- all at once, and the path contract --------------------------------------------


def test_every_problem_is_reported_at_once(tmp_path):
    data = good()
    mission(data, "orient-1").update(flag="teleport", split="dev")
    mission(data, "chain-1").update(prompt="Use mcp.add.", expects_tools=["mcp.mul"])
    mission(data, "protocol-1").update(max_reply_rejected=-2, flags=["--events", "-"])
    data["identifier_pattern"] = "("
    data["name"] = "many"
    result = check_data(tmp_path, data)
    assert not result.ok
    assert result.problems == [
        f"mission 'orient-1' field 'flag': 'teleport' is not in the vocabulary ({VOCAB})",
        "mission 'orient-1' field 'split': 'dev' is not a split; use train or test",
        f"mission 'chain-1' field 'expects_tools': 'mcp.mul' is not a served tool ({TOOLS})",
        "mission 'chain-1' field 'prompt': names the served tool 'mcp.add'; write it as a "
        "person would, without tool names",
        "mission 'protocol-1' field 'max_reply_rejected': -2 is negative; use 0 or more",
        "mission 'protocol-1' field 'flags': '--events' is set by the harness itself, never by "
        "a mission",
        "suite field 'identifier_pattern': '(' does not compile: missing ), unterminated "
        "subpattern at position 0",
        "suite field 'flags': no mission captures 'orientation', in the vocabulary, which a "
        "suite without 'flags' claims whole",
    ]
    assert result.summary == "suite 'many' cannot be graded: 8 problems"
    lines = result.message.splitlines()
    assert lines[0] == "suite 'many' cannot be graded: 8 problems:"
    assert lines[1:] == [f"  - {p}" for p in result.problems]


def test_a_suite_that_cannot_load_is_also_checked_as_far_as_it_loaded(tmp_path):
    data = good()
    mission(data, "chain-1")["colour"] = "blue"  # a loading problem: chain-1 is left out
    mission(data, "state-1").update(flag="teleport")
    mission(data, "protocol-1").update(max_reply_rejected=-1, flags=["--resume"])
    data["missions"].append({**mission(data, "routing-1"), "key": ""})
    with pytest.raises(SuiteError) as refused:
        check_data(tmp_path, data)
    lines = refused.value.message.splitlines()
    assert lines[0].endswith("cannot be loaded (1 problem):")
    assert lines[1].startswith("  - mission 'chain-1' field 'colour' (line ")
    assert lines[2:] == [
        "and what did load cannot be graded (4 problems):",
        f"  - mission 'state-1' field 'flag': 'teleport' is not in the vocabulary ({VOCAB})",
        "  - mission 'protocol-1' field 'max_reply_rejected': -1 is negative; use 0 or more",
        "  - mission 'protocol-1' field 'flags': '--resume' is set by the harness itself, "
        "never by a mission",
        # numbered by its place in the file, though chain-1 before it did not load
        "  - mission #13 field 'key': is empty; every mission needs a key (it names its run "
        "directory)",
    ]
    assert refused.value.problems == [lines[1][4:], *(line[4:] for line in lines[3:])]
    assert refused.value.exit_code == 1


def test_rules_that_count_missions_wait_until_every_mission_loads(tmp_path):
    data = good()
    for key in ("chain-2", "state-1"):  # two of the four held out do not load
        mission(data, key)["colour"] = "blue"
    data["rubric_changes"][0]["key"] = "chain-2"
    with pytest.raises(SuiteError) as refused:
        check_data(tmp_path, data)
    assert len(refused.value.problems) == 2  # no "only 2 test missions"
    assert "graded" not in refused.value.message


def test_check_path_propagates_loader_errors_with_exit_codes(tmp_path):
    with pytest.raises(SuiteError) as missing:
        check_path(tmp_path / "absent.yaml")
    assert missing.value.exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("missions: {}\n")
    with pytest.raises(SuiteError) as malformed:
        check_path(bad)
    assert malformed.value.exit_code == 1


# -- any suite, and the tool-name filter ------------------------------------

_TOOLS = st.sampled_from(["mcp.add", "mcp.echo", "fs", "Add", "ſtep", "K.kelvin", "step", "-", "a-b",
                          "x.y.z", "İstanbul", "run_python_code", ".", "mcp.", "é"])
_PIECES = st.sampled_from(["add", "ADD", "Mcp.Add", "address", "fs", "_fs", "step", "ſtep", "STEP", "kelvin",
                           "\u212a", "a-b", "y.z", "istanbul", "İstanbul", "-", ".", "asset.beef", "é",
                           " ", ",", "\n", "run_python_code", "mcp", "0"])
_PROMPTS = st.one_of(st.lists(_PIECES, max_size=8).map("".join), st.text(max_size=10))
#: Per field, a value every rule accepts and values that break one.
_FIELDS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "key": ("m1", st.sampled_from(["m1", "", " ", ".", "..", "a/b", "a\\b", "a\0b"])),
    "flag": ("state", st.sampled_from(["state", "nope", "domain"])),
    "prompt": ("Find it.", _PROMPTS),
    "must": (("x",), st.lists(st.sampled_from(["", " ", "x"]), max_size=2).map(tuple)),
    "must_not": (("y",), st.lists(st.sampled_from(["", " ", "x"]), max_size=2).map(tuple)),
    "because": ("why", st.sampled_from(["why", "", " "])),
    "split": ("test", st.sampled_from(["train", "test", "dev"])),
    "expects_tools": (None, st.none() | st.lists(_TOOLS, max_size=2).map(tuple)),
    "forbids_tools": (None, st.none() | st.lists(_TOOLS, max_size=2).map(tuple)),
    "expects_outcome": (None, st.none() | st.sampled_from(["answered", "bogus"])),
    "answer_must_match": (("(?i)a",), st.none() | st.lists(st.sampled_from(["x", "(", "a{2}"]),
                                                          max_size=2).map(tuple)),
    "max_reply_rejected": (None, st.none() | st.integers(-2, 2)),
    "flags": ((), st.lists(st.sampled_from(["--seed", "1", "--events", "--x=2", "--x", "v", "--"]),
                           max_size=3).map(tuple)),
}


@st.composite
def _missions(draw: st.DrawFn) -> Mission:
    """A mission with up to two fields drawn from the breaking values, the rest good."""
    broken = set(draw(st.lists(st.sampled_from(sorted(_FIELDS)), max_size=2)))
    return Mission(**{name: draw(bad) if name in broken else good_value
                      for name, (good_value, bad) in _FIELDS.items()})


@st.composite
def _suites(draw: st.DrawFn) -> Suite:
    return Suite(
        name="s", path=Path("s.yaml"), missions=tuple(draw(st.lists(_missions(), max_size=5))),
        tools=draw(st.none() | st.lists(_TOOLS, max_size=5).map(tuple)),
        assets=draw(st.sampled_from([{}, {"asset.beef": ""}])),
        identifier_pattern=draw(st.none() | st.sampled_from([r"\basset\.[a-z]+", "(", r"\w*"])),
        vocabulary=CAPABILITIES + (("domain",) if draw(st.booleans()) else ()),
        extras=draw(st.sampled_from([{}, {"agent_flags": ("--seed", "--x VALUE")}])))


_HYPO = settings(max_examples=300, deadline=None)


@pytest.mark.slow
@_HYPO
@given(suite=_suites())
def test_any_suite_is_checked_into_sentences_naming_where(suite):
    """Whatever a mission holds, check answers with sentences, each naming its place."""
    result = check_suite(suite)
    places = ("mission ", "suite field ", "rubric change ")
    assert all(p.startswith(places) for p in result.problems)
    assert (result.problems, result.summary) == (check_suite(suite).problems,
                                                 check_suite(suite).summary)



@pytest.mark.slow
@_HYPO
@given(tools=st.lists(_TOOLS, min_size=1, max_size=5), prompt=_PROMPTS)
def test_the_tool_word_filter_never_hides_a_tool(tools, prompt):
    names = check_module._ToolNames.of(tools)
    assert names is not None
    assert names.named(prompt) == dataclasses.replace(names, words=None).named(prompt)


@pytest.mark.parametrize("tools, prompt, named", [
    (("mcp.kelvin",), "Ask \u212aelvin.", [("mcp.kelvin", "\u212aelvin")]),  # Kelvin sign ~ k
    (("mcp.Step",), "one STEP", [("mcp.Step", "STEP")]),
    (("mcp.step",), "One steps.", []),
    (("-",), "a - b", [("-", "-")]),                                         # no word to filter on
])
def test_tool_names_match_as_the_regex_does(tools, prompt, named):
    found = check_module._ToolNames.of(tools)
    assert found is not None and found.named(prompt) == named


def test_a_mission_that_does_not_load_still_has_its_other_fields_checked(tmp_path):
    """Ten mistakes, ten problems in one message: a prompt that is a number keeps
    mission 'a' out of the suite, and its flag, split, outcome and repeated key are
    named all the same; the bad field itself is named once, by the loader."""
    path = tmp_path / "s.yaml"
    path.write_text("""\
name: s
bogus_top: 1
missions:
  - {key: a, flag: nosuchflag, prompt: 5, must: [x], must_not: [y], because: z, split: neither, expects_outcome: exploded}
  - {key: a, flag: chaining, prompt: p, must: [], must_not: [y], because: z, answer_must_match: ['(unclosed'], max_reply_rejected: -3}
  - {key: c, flag: chaining, prompt: p, must: notalist, must_not: [y], because: z}
""")
    with pytest.raises(SuiteError) as refused:
        check_path(path, strict=True)  # strict: the empty 'must' of a 3-mission suite counts
    problems = refused.value.problems
    assert len(problems) == 10, problems
    for said in ("'bogus_top'", "'prompt' (line 4): must be a string", "'nosuchflag' is not in",
                 "'neither' is not a split", "'exploded' is not an outcome",
                 "field 'key': already used by mission #1", "field 'must': is missing or empty",
                 "-3 is negative", "'(unclosed' does not compile", "'must' (line 6): must be a list"):
        assert sum(said in p for p in problems) == 1, (said, problems)
    assert not any("field 'prompt': is empty" in p for p in problems)  # said once, by the loader


#: Checks a suite as ``check`` does with shares of 256 missions, a worker process from
#: 1,000, in a fresh process (forking is refused in one running other threads, as a test
#: worker may be); prints the problems and the processes that looked at the shares.
_SHARED_OUT = """
import json, os, sys
from evalkit.eval import check
check.SHARE, check.PER_WORKER = 256, 1_000
share = check._share_problems
def noting(job, span):
    with open(sys.argv[2], "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    return share(job, span)
check._share_problems = noting
print(json.dumps({"problems": check.check_path(sys.argv[1]).problems, "pid": os.getpid()}))
"""


@pytest.mark.slow
def test_a_large_suite_checked_in_shares_over_processes_says_what_one_process_says(
        tmp_path, monkeypatch):
    """3,000 missions are looked at by worker processes (``evalkit.parallel``), 256 at a
    time (a suite this small is shared out only from 10,000 missions on); planted
    problems in several shares come back in file order, and a key used twice across
    shares is named at its second use — the same problems, to the byte, as when one
    process looks at them all."""
    base = good()["missions"][0]
    missions = [{**base, "key": f"m{i:05d}"} for i in range(3_000)]
    missions[5]["flag"] = "nosuchflag"
    missions[700]["split"] = "neither"
    missions[1_500]["key"] = "m00010"
    missions[2_047]["answer_must_match"] = ["(unclosed"]
    missions[2_998]["flag"] = "alsonot"
    path = tmp_path / "large.json"
    path.write_text(json.dumps({**good(), "missions": missions}, default=str),
                    encoding="utf-8")

    done = subprocess.run([sys.executable, "-c", _SHARED_OUT, str(path), str(tmp_path / "pids")],
                          capture_output=True, text=True, timeout=120, check=True)
    shared_out = json.loads(done.stdout)
    pids = {int(pid) for pid in (tmp_path / "pids").read_text().split()}
    assert len(pids) == 2 and shared_out["pid"] not in pids  # two workers, not the parent
    monkeypatch.setattr(check_module.parallel, "can_fork", lambda: False)
    assert check_path(path).problems == shared_out["problems"]

    said = [p for p in shared_out["problems"] if p.startswith("mission ")]
    assert [(p.split(" field ")[0], p.split("'")[3]) for p in said] == [
        ("mission 'm00005'", "flag"), ("mission 'm00700'", "split"),
        ("mission 'm00010'", "key"), ("mission 'm02047'", "answer_must_match"),
        ("mission 'm02998'", "flag")]
    assert "already used by mission #11;" in said[2]
