"""The four checks, read against tool results: each verdict, and the ways figures used to leak."""

from __future__ import annotations

import json
import time

import pytest

from evalkit.contract import CHECK_VERDICTS, conforms
from evalkit.grounding import Evidence, Grammar, evidence_from_records, validate
from evalkit.planes.stub.data import ASSETS, RUNS
from tests.grounding.conftest import ASSET_IDS

TOOLS = ["fs", "run_python_code", "mcp.read_asset", "mcp.view_run", "mcp.echo", "mcp2.sum"]


def asset(asset_id: str) -> Evidence:
    return Evidence("mcp.read_asset", {"asset_id": asset_id}, True,
                    json.dumps(ASSETS[asset_id], ensure_ascii=False))


def python(code: str, output: str) -> Evidence:
    return Evidence("run_python_code", {"code": code}, True, output, code=True)


IDS = Grammar(identifier_pattern=ASSET_IDS)
FIGURES = Grammar(number_pattern=r"\d[\d,]*(?:\.\d+)?")
ALL_FIGURES = Grammar(figures_from=("read_asset", "run_python_code", "view_run", "echo", "sum"))


def row(report, check: str):
    return report.row(check).as_dict()


# --- identifiers -----------------------------------------------------------------------------

def test_identifiers_supported() -> None:
    report = validate("The final table is asset.7f3a; it supersedes asset.7f3b.", IDS,
                      [asset("asset.7f3a")], tools=TOOLS)
    r = row(report, "identifiers")
    assert (r["verdict"], r["considered"], r["unsupported"], r["grounded"]) == (
        "supported", 2, [], True)
    assert report.grounded and report.verified


def test_identifiers_unsupported_names_the_exact_token() -> None:
    report = validate("See asset.7f3a and asset.dead.", IDS, [asset("asset.7f3a")], tools=TOOLS)
    r = row(report, "identifiers")
    assert r["verdict"] == "unsupported" and r["unsupported"] == ["asset.dead"]
    assert "asset.dead" in r["detail"] and "\n" not in r["detail"]
    assert report.unsupported == ["asset.dead"] and not report.grounded and not report.verified


def test_identifiers_nothing_considered_is_not_verified() -> None:
    report = validate("Shipments rose.", IDS, [asset("asset.7f3a")], tools=TOOLS)
    assert row(report, "identifiers")["verdict"] == "nothing_considered"
    assert report.grounded and not report.verified
    assert report.silent == ["identifiers"]


def test_identifiers_unconfigured() -> None:
    report = validate("asset.dead", FIGURES, [], tools=TOOLS)
    r = row(report, "identifiers")
    assert r["verdict"] == "unconfigured" and r["configured"] is False and r["grounded"] is None


def test_a_failed_calls_typed_error_and_what_it_asked_about_are_evidence() -> None:
    failed = Evidence("mcp.read_asset", {"asset_id": "asset.0bad"}, False, "",
                      error="404 not found")
    grammar = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d+")
    report = validate("asset.0bad does not exist: the server answered 404.", grammar, [failed],
                      tools=TOOLS)
    assert report.grounded and report.verified


def test_a_code_tool_cannot_launder_an_identifier_by_printing_it() -> None:
    echo = python("print('asset.dead')", "asset.dead\n")
    report = validate("It is asset.dead.", IDS, [echo], tools=TOOLS)
    assert report.unsupported == ["asset.dead"]


# --- figures -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("said", "shown"), [
    ("12,481", "12481"), ("12481", "total 12,481 units"), ("338", "338.0"), ("338.0", "338"),
    ("338.00", '{"price": 338}'), ("4,218,578.0", "4218578"),
])
def test_figures_are_compared_by_value(said: str, shown: str) -> None:
    report = validate(f"The figure is {said}.", FIGURES, [Evidence("mcp.echo", {}, True, shown)])
    assert row(report, "figures")["verdict"] == "supported", (said, shown)


def test_figures_supported_and_unsupported_against_the_stub() -> None:
    evidence = [asset("asset.7f3a"), asset("asset.19c2")]
    good = validate("Q3 2024: 12,481 units at EUR 338 on average.", FIGURES, evidence)
    assert row(good, "figures")["verdict"] == "supported" and good.verified
    bad = validate("Q3 2024: 12,480 units at EUR 338 on average.", FIGURES, evidence)
    r = row(bad, "figures")
    assert r["verdict"] == "unsupported" and r["unsupported"] == ["12,480"]
    # this pattern reads the 3 of "Q3" too; the evidence is read with it as well, so it grounds
    assert r["considered"] == 4


def test_figures_nothing_considered_and_unconfigured() -> None:
    assert row(validate("No numbers here.", FIGURES, []), "figures")["verdict"] == \
        "nothing_considered"
    assert row(validate("12,480", IDS, []), "figures")["verdict"] == "unconfigured"


def test_a_timestamp_never_donates_digits() -> None:
    run = Evidence("mcp.view_run", {"run_id": "run.a1b2c3"}, True,
                   json.dumps({"started_at": RUNS["run.a1b2c3"]["started_at"]}))
    # 2024-10-02T09:14:03Z holds 14, 9, 3 and 2024; none of them grounds a figure
    for claim in ("It took 14 steps.", "It took 9 steps.", "There were 2024 units."):
        report = validate(claim, ALL_FIGURES, [run])
        assert not report.grounded, claim
    clock = Evidence("mcp.echo", {}, True, "Wed Oct  2 09:14:03 UTC 2024")
    assert not validate("It took 14 steps.", ALL_FIGURES, [clock]).grounded


def test_a_timestamp_in_the_answer_is_not_a_figure() -> None:
    report = validate("The run started at 2024-10-02T09:14:03Z, at 09:14 on Oct 2, 2024.",
                      ALL_FIGURES, [])
    assert row(report, "figures")["verdict"] == "nothing_considered"


def test_the_models_own_arguments_never_ground_a_figure() -> None:
    sent = Evidence("mcp.read_asset", {"asset_id": "asset.7f3a", "expect": 12480}, True,
                    json.dumps(ASSETS["asset.7f3a"]))
    report = validate("12,480 units", FIGURES, [sent])
    assert report.unsupported == ["12,480"]


def test_an_echo_through_a_code_tool_grounds_nothing() -> None:
    for code in ("print(12480)", "x = 12480\nprint(x)", "print(2+2, 12480)"):
        echo = python(code, "12480\n" if "2+2" not in code else "4 12480\n")
        report = validate("The total is 12480.", FIGURES, [echo])
        if "2+2" in code:  # it printed a figure it was not given: that result grounds
            assert report.grounded
        else:
            assert report.unsupported == ["12480"], code
    measured = python("import json; print(sum(r['units'] for r in rows))", "12481\n")
    assert validate("The total is 12481.", FIGURES, [measured]).grounded


def test_an_echo_of_print_2_plus_2_grounds_nothing() -> None:
    echo = python("print(2+2)", "2+2\n")
    assert validate("It is 2.", FIGURES, [echo]).unsupported == ["2"]


def test_figures_from_excludes_another_tools_output() -> None:
    grammar = Grammar(figures_from=("read_asset",))
    echoed = Evidence("mcp.echo", {"text": "x"}, True, "the total is 12480")
    report = validate("The total is 12480.", grammar, [asset("asset.7f3a"), echoed])
    r = row(report, "figures")
    assert r["unsupported"] == ["12480"] and "read_asset" in r["detail"]
    assert validate("The total is 12,481.", grammar, [asset("asset.7f3a"), echoed]).grounded
    exact = Grammar(figures_from=("mcp.read_asset",))
    assert validate("The total is 12,481.", exact, [asset("asset.7f3a")]).grounded


def test_a_failed_calls_error_grounds_a_status_code() -> None:
    failed = Evidence("mcp.read_asset", {"asset_id": "asset.0bad"}, False, "",
                      error="HTTP 404: unknown asset")
    assert validate("The server said 404.", FIGURES, [failed]).grounded


# --- claims -------------------------------------------------------------------------------------

CLAIMS = Grammar(claim_table=True)


def claims_answer(*claims: dict) -> str:
    return "Here is what I found.\n\n```claims\n" + json.dumps(list(claims)) + "\n```\n"


def test_claims_supported_by_path() -> None:
    report = validate(claims_answer({"path": "totals.units", "value": 12481},
                                    {"path": "rows[0].region", "value": "North"},
                                    {"path": "$.rows.3.units", "value": "1,758"}),
                      CLAIMS, [asset("asset.7f3a")])
    r = row(report, "claims")
    assert (r["verdict"], r["considered"]) == ("supported", 3) and report.verified


def test_claims_unsupported() -> None:
    report = validate(claims_answer({"path": "totals.units", "value": 12480},
                                    {"path": "totals.returns", "value": 3}),
                      CLAIMS, [asset("asset.7f3a")])
    r = row(report, "claims")
    assert r["verdict"] == "unsupported"
    assert r["unsupported"] == ["totals.units = 12480", "totals.returns = 3"]


def test_a_claims_block_that_does_not_parse_is_unsupported() -> None:
    report = validate("```claims\n[{path: x}]\n```", CLAIMS, [asset("asset.7f3a")])
    assert row(report, "claims")["verdict"] == "unsupported"
    assert report.unsupported[0].startswith("claims block: not JSON")


def test_claims_nothing_considered_and_unconfigured() -> None:
    assert row(validate("No table.", CLAIMS, []), "claims")["verdict"] == "nothing_considered"
    text = claims_answer({"path": "totals.units", "value": 1})
    assert row(validate(text, IDS, []), "claims")["verdict"] == "unconfigured"
    # with claims unconfigured, the block is just a code fence: not a claim either
    assert validate(text, FIGURES, []).grounded


# --- planes ----------------------------------------------------------------------------------

PLANES = Grammar(planes={
    "compute": {"tools": ["run_python_code"], "claims": ["I computed", "I calculated"]},
    "reading": {"tools": ["read_asset"], "claims": ["I read"]},
})


def test_planes_supported() -> None:
    report = validate("I computed the total and I read the memo.", PLANES,
                      [python("print(1)", "1"), asset("asset.5d0e")])
    r = row(report, "planes")
    assert (r["verdict"], r["considered"]) == ("supported", 2)


def test_planes_unsupported_without_a_dispatched_tool_of_the_plane() -> None:
    report = validate("I calculated the total from the memo.", PLANES, [asset("asset.5d0e")])
    r = row(report, "planes")
    assert r["verdict"] == "unsupported" and r["unsupported"] == ["I calculated"]


def test_planes_nothing_considered_and_unconfigured() -> None:
    assert row(validate("The total is known.", PLANES, []), "planes")["verdict"] == \
        "nothing_considered"
    assert row(validate("I computed it.", IDS, []), "planes")["verdict"] == "unconfigured"


# --- what is never a claim -------------------------------------------------------------------

def test_code_fences_are_not_claims() -> None:
    text = "It is asset.7f3a.\n\n```python\nprint('asset.dead', 99999)\n```\n"
    grammar = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d+")
    report = validate(text, grammar, [asset("asset.7f3a")])
    assert report.grounded and row(report, "identifiers")["considered"] == 1


def test_an_unclosed_fence_hides_nothing() -> None:
    report = validate("```\nasset.dead", IDS, [])
    assert report.unsupported == ["asset.dead"]


def test_tool_names_are_never_claims() -> None:
    grammar = Grammar(identifier_pattern=r"\b[a-z0-9]+\.[a-z_0-9]+\b", number_pattern=r"\d+")
    report = validate("I used mcp.read_asset and mcp2.sum.", grammar, [], tools=TOOLS)
    assert row(report, "identifiers")["considered"] == 0
    assert row(report, "figures")["considered"] == 0


def test_ignore_literals_are_skipped() -> None:
    grammar = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d[\d,]*",
                      ignore=("asset.0000", "2024", "ISO 9001"))
    report = validate("asset.0000 is a placeholder; in 2024, per ISO 9001.", grammar, [])
    assert report.silent == ["identifiers", "figures"] and report.grounded


def test_list_markers_are_numbering_not_figures() -> None:
    report = validate("1. the total is 12,481\n2. the price is 338", FIGURES,
                      [asset("asset.7f3a"), asset("asset.19c2")])
    assert row(report, "figures")["considered"] == 2 and report.grounded


# --- the record -------------------------------------------------------------------------------

def test_the_record_fields_and_rows() -> None:
    grammar = Grammar(identifier_pattern=ASSET_IDS, figures_from=("read_asset",),
                      must_cite={"identifiers": 2})
    report = validate("The total is 12,481.", grammar, [asset("asset.7f3a")], tools=TOOLS)
    record = report.record(repairs=0, repairing=False, caveat=report.caveat())
    assert conforms(record) == []
    assert record["ran"] is True and record["grounded"] is False and record["verified"] is False
    assert record["silent"] == ["identifiers"] and record["uncited"] == ["identifiers"]
    assert record["unsupported"] == []
    assert "at least 2" in record["caveat"]
    assert [r["check"] for r in record["checks"]] == ["identifiers", "figures", "claims", "planes"]
    for r in record["checks"]:
        assert set(r) == {"check", "configured", "grounded", "verdict", "considered",
                          "minimum", "unsupported", "detail", "advisory"}
        assert r["verdict"] in CHECK_VERDICTS and r["advisory"] is False
    assert record["checks"][0]["minimum"] == 2


def test_verified_needs_something_considered_across_the_configured_checks() -> None:
    grammar = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d[\d,]*")
    report = validate("The total is 12,481.", grammar, [asset("asset.7f3a")])
    assert report.grounded and report.verified and report.silent == ["identifiers"]


def test_evidence_from_stream_records() -> None:
    records = [
        {"event": "tool_result", "index": 0, "tool": "run_python_code",
         "arguments": {"code": "print(12480)"}, "ok": True, "exit_code": 0,
         "output": "12480\n", "error": None, "handle": "r1", "truncated": False},
        {"event": "answer", "text": "x", "outcome": "answered"},
    ]
    [item] = evidence_from_records(records, code_tools={"run_python_code"})
    assert item.code and item.handle == "r1"
    assert validate("12480", FIGURES, [item]).unsupported == ["12480"]
    assert validate("12480", FIGURES, evidence_from_records(records)).grounded


# --- a grammar's patterns run on the model's text in linear time ----------------------------

def test_a_hostile_answer_cannot_stall_a_nested_quantifier_grammar() -> None:
    """``(a|aa)+!`` backtracks ~2^n times on a long run of a's in Python's re; not in RE2."""
    grammar = Grammar(identifier_pattern=r"\b(a|aa)+!", number_pattern=r"(\d+)+x")
    hostile = "a" * 50_000 + " " + "1" * 50_000
    began = time.monotonic()
    report = validate(hostile, grammar, [Evidence("mcp.echo", {}, True, hostile)], tools=TOOLS)
    assert time.monotonic() - began < 2
    assert row(report, "identifiers")["verdict"] == "nothing_considered"
