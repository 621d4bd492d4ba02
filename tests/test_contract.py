"""The contract as data: conforms(), its isolation, and CONTRACT.md agreeing with it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit import contract
from evalkit.contract_doc import render

ROOT = Path(__file__).resolve().parents[1]


def minimal(event: str) -> dict:
    record = {"event": event, **{f: None for f in contract.FIELDS[event]}}
    if "schema_version" in record:
        record["schema_version"] = 1
    return record


@pytest.mark.parametrize("event", contract.EVENTS)
def test_every_event_with_its_required_fields_conforms(event):
    record = minimal(event)
    assert contract.conforms(record) == []


@pytest.mark.parametrize("event", contract.EVENTS)
def test_each_missing_required_field_is_named(event):
    for field in contract.FIELDS[event]:
        record = minimal(event)
        del record[field]
        assert contract.conforms(record) == [f"{event}: missing required field '{field}'"]


def test_problems_for_the_shapes_the_spec_names():
    assert contract.conforms([1]) == ["not a mapping: list"]
    assert contract.conforms({"tool": "x"}) == ["no 'event' field"]
    assert contract.conforms({"event": "teleported"}) == ["unknown event 'teleported'"]
    started = minimal("mission_started") | {"schema_version": 2}
    assert contract.conforms(started) == ["schema_version is 2, not 1"]
    assert contract.conforms(minimal("answer") | {"schema_version": True}) == [
        "schema_version is True, not 1"]


def test_extra_keys_and_wrong_types_are_not_problems():
    record = {"event": "answer", "text": 5, "outcome": ["x"], "extra": {"deep": 1}, "branch": "s1"}
    assert contract.conforms(record) == []


@pytest.mark.slow
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20))
def test_conforms_never_raises(value):
    assert isinstance(contract.conforms(value), list)


def test_outcomes_are_the_closed_five():
    assert contract.OUTCOMES == ("answered", "answered_with_caveat", "awaiting_approval",
                                 "budget_exhausted", "incomplete")
    assert set(contract.OUTCOME_MEANINGS) == set(contract.OUTCOMES)


def test_contract_module_imports_only_the_standard_library():
    tree = ast.parse((ROOT / "evalkit" / "contract.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_contract_md_is_the_rendering_of_contract_py():
    assert (ROOT / "CONTRACT.md").read_text(encoding="utf-8") == render(), (
        "CONTRACT.md is stale: run `evalkit contract --markdown > CONTRACT.md`")


def test_contract_md_events_table_matches_the_data():
    """Read the table back independently of render(), so a bug in render() shows too."""
    text = (ROOT / "CONTRACT.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \|$", text, flags=re.M)
    table = {e: (re.findall(r"`(\w+)`", req), re.findall(r"`(\w+)`", opt))
             for e, req, opt in rows if e in contract.FIELDS}
    assert list(table) == list(contract.EVENTS)
    for event, (required, optional) in table.items():
        assert tuple(required) == contract.FIELDS[event]
        assert tuple(optional) == contract.OPTIONAL[event]
    for flag in contract.flag_names():
        assert f"| `{flag}` |" in text


def test_evalkit_contract_prints_the_contract_as_json():
    out = subprocess.run([sys.executable, "-m", "evalkit.cli", "contract"], capture_output=True,
                         text=True, check=True).stdout
    data = json.loads(out)
    assert data["schema_version"] == 1
    assert data["events"] == list(contract.EVENTS)
    assert [f["flag"] for f in data["cli_flags"]] == list(contract.flag_names())
    assert set(contract.harness_flags()) >= {"--events", "--resume"}


def test_every_required_field_has_a_type_and_only_those() -> None:
    for event in contract.EVENTS:
        assert set(contract.TYPES[event]) == set(contract.FIELDS[event]), event
        for types in contract.TYPES[event].values():
            assert types and set(types) <= set(contract.JSON_TYPES)


@pytest.mark.parametrize(("value", "name"), [
    (None, "null"), (True, "boolean"), (3, "integer"), (2.5, "number"), ("x", "string"),
    ([1], "array"), ({"a": 1}, "object"), ((1,), "other")])
def test_json_type_names_a_decoded_value(value, name) -> None:
    assert contract.json_type(value) == name
