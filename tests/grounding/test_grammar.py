"""The grounding grammar: what a skill's block may say, refused whole when it says it wrong."""

from __future__ import annotations

import pytest

from evalkit.errors import EvalkitError
from evalkit.grounding import CHECKS, Grammar, Plane, parse_grammar
from tests.grounding.conftest import ASSET_IDS


def refusal(mapping: object) -> str:
    with pytest.raises(EvalkitError) as caught:
        parse_grammar(mapping)
    message = caught.value.message
    assert "\n" not in message
    return message


def test_a_full_block_parses_with_defaults() -> None:
    grammar = parse_grammar({
        "identifier_pattern": ASSET_IDS,
        "number_pattern": r"\d[\d,]*(?:\.\d+)?",
        "ignore": ["2024", 3],
        "must_cite": {"identifiers": 1},
        "figures_from": ["read_asset"],
        "claim_table": True,
        "planes": {"compute": {"tools": ["run_python_code"], "claims": ["I computed"]}},
    })
    assert grammar.max_repairs == 1
    assert grammar.configured == CHECKS
    assert grammar.must_cite == {"identifiers": 1, "figures": 0, "claims": 0, "planes": 0}
    assert grammar.ignore == ("2024", "3") and grammar.figures_from == ("read_asset",)
    assert grammar.planes == (Plane("compute", ("run_python_code",), ("I computed",)),)
    assert grammar.identifier_re is not None and grammar.identifier_re.search("asset.7f3a")


def test_which_checks_a_block_configures() -> None:
    assert Grammar(identifier_pattern=ASSET_IDS).configured == ("identifiers",)
    assert Grammar(figures_from=("read_asset",)).configured == ("figures",)
    assert Grammar(number_pattern=r"\d+").configured == ("figures",)
    assert Grammar(claim_table=True).configured == ("claims",)
    assert Grammar(planes={"p": {"tools": ["t"], "claims": ["I ran"]}}).configured == ("planes",)


def test_must_cite_forms() -> None:
    both = {"identifier_pattern": ASSET_IDS, "number_pattern": r"\d+"}
    assert parse_grammar({**both, "must_cite": True}).must_cite == {"identifiers": 1,
                                                                    "figures": 1}
    assert parse_grammar({**both, "must_cite": ["figures"]}).must_cite == {"identifiers": 0,
                                                                          "figures": 1}
    assert parse_grammar({**both, "must_cite": {"figures": 3}}).minimum("figures") == 3
    assert parse_grammar({**both, "must_cite": False}).minimum("figures") == 0


def test_every_problem_is_refused_in_one_message() -> None:
    message = refusal({
        "identifier_pattern": "asset\\.(",
        "number_pattern": "x*",
        "max_repairs": -1,
        "must_cite": {"claims": 1},
        "colour": "blue",
        "claim_table": "yes",
    })
    assert message.startswith("grounding: 6 problems:")
    assert "unknown key 'colour'" in message
    assert "identifier_pattern /asset\\.(/ does not compile" in message
    assert "number_pattern /x*/ matches the empty string" in message
    assert "max_repairs must be a whole number" in message
    assert "claim_table must be true or false" in message
    assert "must_cite names claims, which this grammar does not configure" in message


def test_must_cite_naming_an_unconfigured_or_unknown_check_is_refused() -> None:
    assert "must_cite names figures, which this grammar does not configure" in refusal(
        {"identifier_pattern": ASSET_IDS, "must_cite": ["figures"]})
    assert "must_cite names 'sources', which is not a check" in refusal(
        {"identifier_pattern": ASSET_IDS, "must_cite": {"sources": 1}})
    assert "must_cite.identifiers must be a whole number" in refusal(
        {"identifier_pattern": ASSET_IDS, "must_cite": {"identifiers": True}})


@pytest.mark.parametrize(("block", "said"), [
    ("identifier_pattern: x", "must be a mapping"),
    ({}, "configures no check"),
    ({"max_repairs": 2}, "configures no check"),
    ({"identifier_pattern": 7}, "identifier_pattern must be a regular expression"),
    ({"figures_from": "read_asset"}, "figures_from must be a list"),
    ({"figures_from": []}, "figures_from is empty"),
    ({"identifier_pattern": ASSET_IDS, "ignore": [True]}, "ignore holds True"),
    ({"planes": {"compute": {"tools": ["t"]}}}, "planes.compute needs claims"),
    ({"planes": {"compute": {"tools": [], "claims": ["x"]}}}, "planes.compute.tools is empty"),
    ({"planes": {"compute": {"tools": ["t"], "claims": ["x"], "via": 1}}},
     "planes.compute: unknown key 'via'"),
    ({"planes": ["compute"]}, "planes must be a mapping"),
    ({"identifier_pattern": ASSET_IDS, "max_repairs": True}, "max_repairs must be"),
])
def test_single_problems(block: object, said: str) -> None:
    assert said in refusal(block)


def test_a_grammar_built_directly_is_checked_the_same_way() -> None:
    with pytest.raises(EvalkitError, match="does not compile"):
        Grammar(identifier_pattern="(")
    with pytest.raises(EvalkitError, match="does not configure"):
        Grammar(identifier_pattern=ASSET_IDS, must_cite=["figures"])
    assert Grammar(identifier_pattern=ASSET_IDS, max_repairs=0).max_repairs == 0
