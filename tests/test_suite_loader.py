"""The suite loader: shape problems refused all at once, everything else loaded for check."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.errors import EvalkitError
from evalkit.eval import suite_text
from evalkit.eval.suite import (
    CAPABILITIES,
    MISSION_FIELDS,
    SPLITS,
    Mission,
    Suite,
    SuiteError,
    load_suite,
)

DATA = Path(__file__).parent / "data" / "suites"
GOOD = DATA / "good.yaml"
SEED = DATA / "seed-style.yaml"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path) -> SuiteError:
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    return caught.value


MINIMAL = "missions:\n  - key: m1\n    flag: orientation\n    prompt: hello\n"


# -- the good fixture ----------------------------------------------------------


def test_good_fixture_loads_with_every_part():
    suite = load_suite(GOOD)
    assert suite.name == "good"
    assert suite.path == GOOD
    assert len(suite.missions) == 12
    assert {m.flag for m in suite.missions} == set(CAPABILITIES)
    assert suite.tools == ("mcp.echo", "mcp.add", "mcp.cancel_job")
    assert suite.assets["doc.beef"] == "the project plan, four steps"
    assert suite.identifier_pattern == r"\b(?:asset|doc)\.[0-9a-f]{4,}\b"
    assert suite.claimed_flags is None and suite.claimed == CAPABILITIES
    assert suite.vocabulary == CAPABILITIES
    assert suite.extras == {}
    # YAML reads the date as a date; it is stored as the text JSON would carry.
    assert suite.rubric_changes[0]["date"] == "2024-05-01"


def test_mission_and_split_helpers():
    suite = load_suite(GOOD)
    chain = suite.mission("chain-1")
    assert chain is not None and chain.expects_tools == ("mcp.add", "mcp.echo")
    assert suite.mission("nope") is None
    assert [m.key for m in suite.split_of("test")] == [
        "chain-2", "state-1", "disambiguation-1", "partial-1"]
    assert len(suite.split_of("train")) == 8
    with pytest.raises(ValueError):
        suite.split_of("all")
    assert SPLITS == ("train", "test")


def test_defaults_mean_not_checked(tmp_path):
    mission = load_suite(write(tmp_path / "s.yaml", MINIMAL)).missions[0]
    assert mission == Mission(key="m1", flag="orientation", prompt="hello")
    assert (mission.split, mission.must, mission.because, mission.flags) == ("train", (), "", ())
    assert mission.expects_tools is None and mission.expects_grounded is None
    assert mission.max_reply_rejected is None and mission.must_not_stage is False


def test_null_optional_fields_are_not_given(tmp_path):
    text = MINIMAL + "    expects_tools:\n    must:\n    split:\ntools:\n"
    suite = load_suite(write(tmp_path / "s.yaml", text))
    assert suite.missions[0] == Mission(key="m1", flag="orientation", prompt="hello")
    assert suite.tools is None


def test_mission_lines_are_known_for_yaml():
    lines = {m.key: m.line for m in load_suite(GOOD).missions}
    text = GOOD.read_text().splitlines()
    for key, line in lines.items():
        assert text[line - 1].strip() == f"- key: {key}"


def test_line_is_not_part_of_equality():
    assert Mission("k", "state", "p", line=3) == Mission("k", "state", "p", line=40)


# -- seed compatibility and the two formats -----------------------------------


def test_seed_style_suite_with_every_field_loads_unchanged():
    suite = load_suite(SEED)
    assert suite.claimed_flags == ("chaining", "boundary", "routing")
    assert suite.assets == {"run.4f2a": "", "run.77b0": ""}
    full = suite.mission("seed-chain")
    assert full == Mission(
        key="seed-chain",
        flag="chaining",
        prompt="Find run.4f2a and tell me when it started and how long it ran.",
        must=("start time", "duration"),
        must_not=("a duration the record does not hold",),
        because="two reads, the second needs the first",
        split="train",
        expects_tools=("mcp.search", "mcp.fetch_record"),
        forbids_tools=("mcp.cancel_job",),
        expects_outcome="answered",
        expects_caveat_ok=True,
        expects_grounded=True,
        answer_must_match=("(?i)started", r"\d+\s*(s|sec|min)"),
        answer_must_not_match=("(?i)as an ai",),
        max_reply_rejected=1,
        must_not_stage=True,
        flags=(),
    )
    raw = yaml.safe_load(SEED.read_text())["missions"][0]
    assert set(raw) == set(MISSION_FIELDS), "the fixture must use every field of the table"
    assert suite.mission("seed-gate").flags == ("--gate-tool", "mcp.cancel_job")
    assert suite.mission("seed-swarm").flags == ("--swarm",)


def test_an_unquoted_number_or_date_in_a_list_reads_as_its_text(tmp_path):
    path = write(tmp_path / "s.yaml", "missions:\n  - key: k\n    flag: state\n"
                 "    prompt: p\n    answer_must_match: [1284, 18.4, 2024-05-01, '007']\n")
    assert load_suite(path).missions[0].answer_must_match == ("1284", "18.4", "2024-05-01", "007")


def test_a_rubric_change_may_be_the_seed_harness_list_of_four(tmp_path):
    path = write(tmp_path / "s.yaml", "missions: []\nrubric_changes:\n"
                 "  - [2024-05-01, k1, tightened must, it passed a vague answer]\n"
                 "  - {date: 2024-06-01, key: k2, what: x, why: y}\n")
    assert load_suite(path).rubric_changes == (
        {"date": "2024-05-01", "key": "k1", "what": "tightened must",
         "why": "it passed a vague answer"},
        {"date": "2024-06-01", "key": "k2", "what": "x", "why": "y"})
    three = write(tmp_path / "t.yaml", "missions: []\nrubric_changes:\n  - [2024-05-01, k1, x]\n")
    assert "rubric change #1 (line 3): must be a mapping of date, key, what and why (or a list " \
        "of those four), not a list" in str(refused(three))


def test_json_and_yaml_load_identically(tmp_path):
    data = yaml.safe_load(GOOD.read_text())
    as_json = write(tmp_path / "good.json", json.dumps(data, default=str, indent=2))
    from_yaml, from_json = load_suite(GOOD), load_suite(as_json)
    for f in fields(Suite):
        if f.name != "path":
            assert getattr(from_json, f.name) == getattr(from_yaml, f.name), f.name
    # JSON borrows YAML's node tree for lines, so its missions know theirs too.
    assert all(m.line for m in from_json.missions)


def test_yml_extension_and_unknown_extension_read_as_yaml(tmp_path):
    assert load_suite(write(tmp_path / "a.yml", MINIMAL)).name == "a"
    assert load_suite(write(tmp_path / "b.txt", MINIMAL)).name == "b"


# -- directories and names ----------------------------------------------------


def test_directory_means_its_missions_file_and_its_name(tmp_path):
    pack = tmp_path / "analyst"
    write(pack / "suite.yaml", MINIMAL.replace("m1", "from-suite"))
    write(pack / "missions.yaml", MINIMAL)
    suite = load_suite(pack)
    assert suite.path == pack / "missions.yaml"
    assert suite.name == "analyst"
    assert suite.missions[0].key == "m1"
    # Given as a file, a suite without a name is named by its stem, as the spec says
    # (another implementation reading the same file calls it the same).
    assert load_suite(pack / "missions.yaml").name == "missions"
    assert load_suite(pack / "suite.yaml").name == "suite"


def test_directory_json_and_explicit_name(tmp_path):
    pack = tmp_path / "pack"
    write(pack / "missions.json", json.dumps({"name": "custom", **yaml.safe_load(MINIMAL)}))
    assert load_suite(pack).name == "custom"


def test_directory_without_suite_is_a_usage_error(tmp_path):
    error = refused(tmp_path)
    assert error.exit_code == 2
    assert str(error) == (f"no suite in folder {tmp_path}: expected one of "
                          "missions.yaml, missions.yml, missions.json, suite.yaml")


# -- one-sentence refusals ----------------------------------------------------


def test_missing_path_is_a_usage_error(tmp_path):
    error = refused(tmp_path / "nope.yaml")
    assert error.exit_code == 2
    assert str(error) == f"no suite at {tmp_path / 'nope.yaml'}: the path does not exist"
    assert error.problems == [str(error)]
    assert isinstance(error, EvalkitError)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file_is_a_usage_error(tmp_path):
    path = write(tmp_path / "s.yaml", MINIMAL)
    path.chmod(0)
    try:
        error = refused(path)
    finally:
        path.chmod(0o644)
    assert error.exit_code == 2 and "cannot read suite" in str(error)


@pytest.mark.parametrize("name, content, expected", [
    ("bad.yaml", "missions: [\n  - key: a\n", "is not valid YAML: "),
    ("bad.json", '{"missions": [}', "is not valid JSON: Expecting value (line 1, column 15)"),
    ("bin.yaml", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file, not YAML or JSON text"),
    ("latin.yaml", "name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 9)"),
    ("two.yaml", "a: 1\n---\nb: 2\n", "is not valid YAML: "),
    ("date.yaml", "name: 2024-13-45\n", "is not valid YAML: month must be in 1..12"),
])
def test_unparseable_files_get_one_sentence(tmp_path, name, content, expected):
    """A file that reads as no suite at all is unreadable input (exit 2, as a missing
    path is), not a suite with problems (1)."""
    error = refused(write(tmp_path / name, content))
    assert error.exit_code == 2
    assert expected in str(error)
    assert "\n" not in str(error) and "Traceback" not in str(error)


def test_bad_yaml_names_the_line(tmp_path):
    error = refused(write(tmp_path / "s.yaml", "missions:\n  - key: a\n   flag: b\n"))
    assert "(line 3, column" in str(error)


@pytest.mark.parametrize("name, content, kind", [
    ("flow.yaml", "[" * 100_000, "YAML"),
    ("compact.yaml", "- " * 50_000 + "x", "YAML"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "JSON"),
])
def test_deep_nesting_is_refused_not_a_crash(tmp_path, name, content, kind):
    # libyaml's C composer would overflow the C stack here and kill the process.
    path = write(tmp_path / name, content)
    assert str(refused(path)) == f"suite {path} is not valid {kind}: it nests too deeply"


@pytest.mark.parametrize("name, kind", [("big.yaml", "YAML"), ("big.json", "JSON")])
def test_an_integer_past_pythons_digit_limit_is_a_reason_about_the_file(tmp_path, name, kind):
    """Python's own message advises sys.set_int_max_str_digits(): advice for programmers."""
    path = write(tmp_path / name, '{"name": "s", "n": ' + "9" * 5000 + ', "missions": []}')
    assert str(refused(path)) == (f"suite {path} is not valid {kind}: it holds an integer of "
                                  "more than 4,300 digits, more than any field takes")


def test_merge_keys_load_and_only_real_repeats_are_refused(tmp_path):
    text = ("missions:\n  - &base {key: m1, flag: state, prompt: p, must: [x]}\n"
            "  - <<: *base\n    key: m2\n")
    suite = load_suite(write(tmp_path / "s.yaml", text))
    assert suite.missions[1] == Mission(key="m2", flag="state", prompt="p", must=("x",))
    repeated = write(tmp_path / "r.yaml", text + "    key: m3\n")
    assert refused(repeated).problems == [
        "mission 'm3' field 'key' (line 5): is given more than once; keep one"]


@pytest.mark.slow
def test_a_large_json_suite_with_a_repeated_key_is_worded_as_a_small_one(tmp_path):
    """Above the fast path's size, orjson reads the suite; it would drop a repeat silently."""
    filler = [{"key": f"m{i}", "flag": "state", "prompt": "p" * 200, "must": ["x"]}
              for i in range(2000)]
    text = json.dumps({"missions": filler})
    assert len(text) > suite_text._FAST_PATH_FROM
    suite = load_suite(write(tmp_path / "big.json", text))
    assert len(suite.missions) == 2000
    repeated = text.replace('"flag": "state"', '"flag": "absence", "flag": "state"', 1)
    assert refused(write(tmp_path / "rep.json", repeated)).problems == [
        "mission 'm0' field 'flag' (line 1): is given more than once; keep one"]


@pytest.mark.parametrize("content, shape", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("- key: m1\n", "a list, not a mapping"),
    ("just words\n", "a string ('just words'), not a mapping"),
])
def test_document_must_be_a_mapping(tmp_path, content, shape):
    path = write(tmp_path / "s.yaml", content)
    error = refused(path)
    assert str(error) == (f"suite {path} must be a mapping of suite fields "
                          f"(name, missions, tools, ...); the document is {shape}")
    assert error.exit_code == 2


# -- shape problems, all at once ----------------------------------------------


TEN_MISTAKES = """\
name: broken
missons: []
tools: mcp.echo
missions:
  - key: m1
    flag: orientation
    prompt: hello
    flags: --swarm
    must: [fine, yes]
    expect_tools: [mcp.echo]
  - key: m2
    flag: state
    must_not_stage: "yes"
    max_reply_rejected: true
  - just a string
  - key: m4
    flag: boundary
    prompt: again
    prompt: twice
"""


def test_ten_mistakes_are_ten_problems_in_one_message(tmp_path):
    path = write(tmp_path / "broken.yaml", TEN_MISTAKES)
    error = refused(path)
    assert error.exit_code == 1
    assert error.problems == [
        "suite field 'missons' (line 2): unknown field; did you mean 'missions'?",
        "suite field 'tools' (line 3): must be a list of strings, not a string ('mcp.echo');"
        " write ['mcp.echo']",
        "mission 'm1' field 'flags' (line 8): must be a list of strings, not a string"
        " ('--swarm'); write ['--swarm']",
        "mission 'm1' field 'must' (line 9): item 2 must be a string, not a boolean (True)",
        "mission 'm1' field 'expect_tools' (line 10): unknown field;"
        " did you mean 'expects_tools'?",
        "mission 'm2' field 'must_not_stage' (line 13): must be true or false,"
        " not a string ('yes')",
        "mission 'm2' field 'max_reply_rejected' (line 14): must be an integer,"
        " not a boolean (True)",
        "mission 'm2' field 'prompt' (line 11): is missing; every mission needs key,"
        " flag and prompt",
        "mission #3 (line 15): must be a mapping of mission fields, not a string"
        " ('just a string')",
        "mission 'm4' field 'prompt' (line 19): is given more than once; keep one",
    ]
    message = str(error).splitlines()
    assert message[0] == f"suite {path} cannot be loaded (10 problems):"
    assert message[1:] == [f"  - {p}" for p in error.problems]


def test_missing_key_is_named_by_index(tmp_path):
    text = "missions:\n  - flag: state\n    prompt: p\n  - key: 7\n    flag: state\n    prompt: p\n"
    assert refused(write(tmp_path / "s.yaml", text)).problems == [
        "mission #1 field 'key' (line 2): is missing; every mission needs key, flag and prompt",
        "mission #2 field 'key' (line 4): must be a string, not an integer (7); quote it",
    ]


def test_required_field_without_a_value(tmp_path):
    text = "missions:\n  - key: m1\n    flag: state\n    prompt:\n"
    assert refused(write(tmp_path / "s.yaml", text)).problems == [
        "mission 'm1' field 'prompt' (line 2): has no value; every mission needs key, flag"
        " and prompt",
    ]


@pytest.mark.parametrize("text, problem", [
    ("name: x\n", "suite field 'missions': missing; a suite is a list of missions under 'missions'"),
    ("missions: {key: m1}\n",
     "suite field 'missions' (line 1): must be a list of missions, not a mapping"),
    ("missions: []\nassets: 5\n", "suite field 'assets' (line 2): must be a mapping of id to"
     " description or a list of ids, not an integer (5)"),
    ("missions: []\nassets: {12: x}\n",
     "suite field 'assets' (line 2): asset id an integer (12) must be a string; quote it"),
    ("missions: []\nassets: {a: [x]}\n",
     "suite field 'assets' (line 2): the description of 'a' must be a string, not a list"),
    ("missions: []\nrubric_changes: {date: x}\n", "suite field 'rubric_changes' (line 2):"
     " must be a list of {date, key, what, why}, not a mapping"),
    ("missions: []\nrubric_changes: [x]\n", "rubric change #1 (line 2): must be a mapping of"
     " date, key, what and why (or a list of those four), not a string ('x')"),
    ("missions: []\nrubric_changes:\n  - {key: 5}\n",
     "rubric change #1 field 'key' (line 3): must be a string, not an integer (5)"),
    ("missions: []\nidentifier_pattern: [x]\n",
     "suite field 'identifier_pattern' (line 2): must be a string, not a list"),
    ("missions: []\nflags: routing\n", "suite field 'flags' (line 2): must be a list of"
     " strings, not a string ('routing'); write ['routing']"),
    ("missions: []\nskill: [a]\n", "suite field 'skill' (line 2): must be a string, not a list"),
    ("missions: []\ncolour: blue\n", "suite field 'colour' (line 2): unknown field; known"
     " fields: name, missions, tools, assets, identifier_pattern, flags, rubric_changes,"
     " vocabulary, agent_flags, skill, agents, plane, profile, fixtures, description,"
     " fixture_for, serve, serve_port, judge"),
    ("missions: []\nname: a\nname: b\n", "suite field 'name' (line 3): is given more than"
     " once; keep one"),
])
def test_top_level_shape_problems(tmp_path, text, problem):
    assert refused(write(tmp_path / "s.yaml", text)).problems == [problem]


def test_json_problems_name_lines_too(tmp_path):
    text = '{\n  "missions": [\n    {"key": "m1", "flag": "state", "prompt": "p",\n' \
           '     "flags": "--swarm"}\n  ]\n}\n'
    assert refused(write(tmp_path / "s.json", text)).problems == [
        "mission 'm1' field 'flags' (line 4): must be a list of strings, not a string"
        " ('--swarm'); write ['--swarm']",
    ]


# -- what the loader leaves to check ------------------------------------------


def test_ungradeable_but_well_shaped_suites_load(tmp_path):
    text = """\
flags: [teleport]
identifier_pattern: '('
rubric_changes: [{key: ghost}]
missions:
  - {key: m1, flag: teleport, prompt: "", split: dev, expects_outcome: done,
     max_reply_rejected: -1, answer_must_match: ['('], flags: [--events, x]}
  - {key: m1, flag: state, prompt: p}
  - {key: "", flag: state, prompt: p}
"""
    suite = load_suite(write(tmp_path / "s.yaml", text))
    assert [m.key for m in suite.missions] == ["m1", "m1", ""]
    assert suite.missions[0].max_reply_rejected == -1
    assert suite.claimed_flags == ("teleport",)


# -- evalkit's own top-level keys ----------------------------------------------


def test_evalkit_extras_are_kept_and_resolved(tmp_path):
    text = MINIMAL + """\
vocabulary: [reconciliation, orientation]
agent_flags: [--verbose, --tenant NAME]
skill: skills/SKILL.md
agents: agents
fixtures: data
plane: stub
profile: dev
description: a domain suite
"""
    path = write(tmp_path / "domain.yaml", text)
    suite = load_suite(path)
    assert suite.vocabulary == (*CAPABILITIES, "reconciliation")
    assert suite.agent_flags == ("--verbose", "--tenant NAME")
    assert suite.extras["plane"] == "stub" and suite.extras["profile"] == "dev"
    assert suite.extras["description"] == "a domain suite"
    assert suite.resolve("skill") == tmp_path / "skills" / "SKILL.md"
    assert suite.resolve("fixtures") == tmp_path / "data"
    assert load_suite(write(tmp_path / "plain.yaml", MINIMAL)).resolve("skill") is None


def test_assets_as_list_have_empty_descriptions(tmp_path):
    suite = load_suite(write(tmp_path / "s.yaml", MINIMAL + "assets: [a.1, b.2]\n"))
    assert suite.assets == {"a.1": "", "b.2": ""}


# -- never anything but a Suite or a SuiteError --------------------------------


def _load_or_refuse(path: Path) -> None:
    try:
        result = load_suite(path)
    except SuiteError as error:
        assert str(error) and error.problems
        assert error.exit_code in (1, 2)
    else:
        assert isinstance(result, Suite)


_HYPO = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@_HYPO
@given(raw=st.binary(max_size=400), suffix=st.sampled_from([".yaml", ".json", ".txt"]))
def test_arbitrary_bytes_load_or_refuse(tmp_path, raw, suffix):
    _load_or_refuse(write(tmp_path / f"fuzz{suffix}", raw))


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=12))
_ANY = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
_MISSION = st.dictionaries(
    st.sampled_from([*MISSION_FIELDS, "bogus"]),
    st.one_of(_ANY, st.sampled_from(CAPABILITIES), st.lists(st.text(max_size=6), max_size=3)),
    max_size=8)
_SUITE = st.fixed_dictionaries({"missions": st.one_of(st.lists(_MISSION, max_size=4), _ANY)},
                               optional={"name": _ANY, "tools": _ANY, "assets": _ANY,
                                         "flags": _ANY, "rubric_changes": _ANY,
                                         "vocabulary": _ANY, "agent_flags": _ANY})


@pytest.mark.slow
@_HYPO
@given(data=st.one_of(_ANY, _SUITE), as_json=st.booleans())
def test_arbitrary_structures_load_or_refuse(tmp_path, data, as_json):
    if as_json:
        path = write(tmp_path / "fuzz.json", json.dumps(data))
    else:
        path = write(tmp_path / "fuzz.yaml", yaml.safe_dump(data, allow_unicode=True))
    _load_or_refuse(path)


def test_loading_a_suite_leaves_the_garbage_collector_as_it_was():
    """A library call has no global side effects: nothing frozen, nothing switched off."""
    import gc

    frozen, enabled = gc.get_freeze_count(), gc.isenabled()
    load_suite(GOOD)
    assert (gc.get_freeze_count(), gc.isenabled()) == (frozen, enabled)
