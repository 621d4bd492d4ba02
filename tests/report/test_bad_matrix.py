"""`evalkit report` on a measure folder whose matrix.json is damaged: one sentence naming
the file, the row, the half and the field, exit 2 — never exit 3, never a traceback.

A cell of ``"n": "many"`` was an ``int()`` ValueError in the KPI table (exit 3); a
p-value of 7 or a reversed interval was drawn as if ``measure`` had computed it.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.report.test_bad_input import _VALUES, charts_drawn_once, invoke, refused

#: One worker runs the module (``--dist loadgroup``): the measure folder, and each chart
#: its reports draw, are made once, not once in each worker handed some of its tests.
pytestmark = pytest.mark.xdist_group("bad_matrix")


@pytest.fixture(scope="module", autouse=True)
def _charts_once() -> Iterator[None]:
    """Every test renders a report of the same measure folder, most with the same KPIs:
    its charts are drawn once per distinct input (``charts_drawn_once``)."""
    with charts_drawn_once():
        yield


@pytest.fixture(scope="module")
def good(folders) -> dict[str, Any]:
    """The measure fixture's matrix.json, its reps named by absolute path.

    A damaged copy then needs only its own matrix.json in a folder of its own: the
    reports it names are the fixture's, read where they are.
    """
    matrix = json.loads((folders["measure"] / "matrix.json").read_text(encoding="utf-8"))
    for row in matrix["rows"]:
        row["reps"] = [str(folders["measure"] / rel) for rel in row["reps"]]
    return matrix


def _write(matrix: Any, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "matrix.json").write_text(json.dumps(matrix), encoding="utf-8")
    return folder


def _at(*path: Any, value: Any = None, drop: bool = False) -> Callable[[dict], dict]:
    """A damage: the field at ``path`` set to ``value`` (or removed), on a copy."""
    def damage(matrix: dict[str, Any]) -> dict[str, Any]:
        damaged = copy.deepcopy(matrix)
        holder = damaged
        for step in path[:-1]:
            holder = holder[step]
        if drop:
            del holder[path[-1]]
        else:
            holder[path[-1]] = value
        return damaged
    return damage


CELL = ("statistics", "swarm", "train")
TRAIN = "the statistics of row 'swarm' (train half)"

#: name -> (damage, what the sentence must say)
DAMAGE: dict[str, tuple[Callable[[dict], dict], str]] = {
    "n many": (_at(*CELL, "rate", "n", value="many"), f'{TRAIN} have rate.n "many", not a whole'),
    "cell a list": (_at("statistics", "swarm", "test", value=[1, 2]),
                    "the statistics of row 'swarm' (test half) are [1, 2], not an object"),
    "row of statistics a string": (_at("statistics", "native", value="x"),
                                   "the statistics of row 'native' are \"x\", not an object"),
    "statistics a list": (_at("statistics", value=[]), "its statistics is [], not an object"),
    "counts a string": (_at(*CELL, "counts", value="x"), f'{TRAIN} have counts "x", not an object'),
    "no counts.infra": (_at(*CELL, "counts", "infra", drop=True), f"{TRAIN} have no counts.infra"),
    "rate a number": (_at(*CELL, "rate", value=0.5), f"{TRAIN} have rate 0.5, not an object"),
    "repeat -1": (_at(*CELL, "repeat", value=-1), f"{TRAIN} have repeat -1, not a whole number"),
    "missions huge": (_at(*CELL, "missions", value=10**400), f"{TRAIN} have missions 1000"),
    "missions 1e308": (_at(*CELL, "missions", value=1e308), f"{TRAIN} have missions 1e+308"),
    "value NaN": (_at(*CELL, "rate", "value", value=float("nan")),
                  f"{TRAIN} have rate.value NaN, not null or a number from 0 to 1"),
    "wilson strings": (_at(*CELL, "rate", "wilson", value=["a", "b"]),
                       f'{TRAIN} have rate.wilson ["a", "b"], not null or a [low, high] pair'),
    "passed over n": (_at(*CELL, "rate_without_infra", "passed", value=99),
                      f"{TRAIN} have rate_without_infra.passed 99, more than its n 15"),
    "bootstrap reversed": (_at(*CELL, "bootstrap", value=[0.9, 0.1]),
                           f"{TRAIN} have bootstrap [0.9, 0.1], not null or a [low, high]"),
    "pass_at_k 2": (_at(*CELL, "pass_at_k", "3", value=2),
                    f"{TRAIN} have pass_at_k['3'] 2, not null or a number from 0 to 1"),
    "no pass_hat_k for the repeat": (_at(*CELL, "pass_hat_k", "3", drop=True),
                                     f"{TRAIN} have no pass_hat_k['3'] for its repeat 3"),
    "stability unknown": (_at(*CELL, "per_mission", "t2", "stability", value="sometimes"),
                          f"{TRAIN} have per_mission['t2'].stability \"sometimes\", not one of"),
    "stability a list": (_at(*CELL, "per_mission", "t2", "stability", value=[]),
                         f"{TRAIN} have per_mission['t2'].stability [], not one of"),
    "vs_baseline a list": (_at(*CELL, "vs_baseline", value=[]),
                           f"{TRAIN} have vs_baseline [], not null or an object"),
    "p_value 7": (_at(*CELL, "vs_baseline", "p_value", value=7),
                  f"{TRAIN} have vs_baseline.p_value 7, not a number from 0 to 1"),
    "no interval": (_at(*CELL, "vs_baseline", "interval", drop=True),
                    f"{TRAIN} have no vs_baseline.interval"),
    "verdict 1": (_at(*CELL, "vs_baseline", "verdict", value=1),
                  f"{TRAIN} have vs_baseline.verdict 1, not a string"),
    "a line separator in the value": (_at(*CELL, "vs_baseline", "verdict", value=["\u2028"]),
                                      f'{TRAIN} have vs_baseline.verdict ["\\u2028"], not a'),
    "rows a dict": (_at("rows", value={}), "it has rows {}, not a list of rows"),
    "row name 5": (_at("rows", 1, "name", value=5), "rows[1] has name 5, not a row's name"),
    "rows named twice": (_at("rows", 2, "name", value="swarm"),
                         "rows[1] and rows[2] are both named 'swarm'"),
    "reps a string": (_at("rows", 1, "reps", value="swarm/rep1"),
                      "rows[1] (row 'swarm') has reps \"swarm/rep1\", not a list of folders"),
    "status done": (_at("rows", 0, "status", value="done"),
                    "rows[0] (row 'direct') has status \"done\", not 'ran' or 'skipped'"),
    "baseline 5": (_at("baseline", value=5), "its baseline is 5, not a row's name"),
    "provenance repeat": (_at("provenance", "repeat", value="three"),
                          'its provenance has repeat "three", not a whole number'),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_matrix_json_is_refused_naming_the_file_and_field(good, tmp_path, name):
    damage, said = DAMAGE[name]
    folder = _write(damage(good), tmp_path / "measure")
    line = refused(invoke("report", folder, "-o", tmp_path / "r.html"))
    assert f"{folder / 'matrix.json'} is not a measure matrix evalkit reads: " in line, line
    assert said in line, line
    assert not (tmp_path / "r.html").exists()


ABSENT = {
    "no statistics": _at("statistics", drop=True),
    "statistics null": _at("statistics", value=None),
    "a row without statistics": _at("statistics", "native", drop=True),
    "a half without statistics": _at("statistics", "swarm", "test", drop=True),
    "a half's statistics null": _at("statistics", "swarm", "test", value=None),
    "no bootstrap (repeat 1)": _at(*CELL, "bootstrap", value=None),
    "vs_baseline null": _at(*CELL, "vs_baseline", value=None),
    "no pairing or excluded": lambda m: _at(*CELL, "vs_baseline", "pairing", drop=True)(
        _at(*CELL, "vs_baseline", "excluded", drop=True)(m)),
    "no provenance": _at("provenance", drop=True),
    "no baseline": _at("baseline", drop=True),
}


@pytest.mark.parametrize("name", ["as written", *sorted(ABSENT)])
def test_a_good_matrix_and_what_measure_may_leave_out_still_render(good, tmp_path, name):
    matrix = good if name == "as written" else ABSENT[name](good)
    folder = _write(matrix, tmp_path / "measure")
    result = invoke("report", folder, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "swarm" in page and "Paired comparison" in page


def test_the_measure_fixture_folder_itself_renders(folders, tmp_path):
    result = invoke("report", folders["measure"], "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "matrix.json" in (tmp_path / "r.html").read_text(encoding="utf-8")


# -- any JSON in matrix.json's statistics: exit 0 or 2, never a crash -----------------------

#: Where a damaged matrix differs from a good one: mostly the statistics, at every depth.
_PLACES = st.sampled_from([
    ("statistics",), ("statistics", "direct"), ("statistics", "swarm"),
    CELL, ("statistics", "native", "test"), ("statistics", "direct", "train"),
    (*CELL, "rate"), (*CELL, "rate_without_infra"), (*CELL, "counts"), (*CELL, "pass_at_k"),
    (*CELL, "pass_hat_k"), (*CELL, "per_mission"), (*CELL, "per_mission", "t2"),
    (*CELL, "vs_baseline"), ("statistics", "native", "test", "vs_baseline"),
    (), ("rows", 1), ("provenance",)])
_FIELDS = st.sampled_from([
    "direct", "swarm", "native", "train", "test", "missions", "repeat", "trials", "counts",
    "pass", "fail", "missing", "infra", "rate", "rate_without_infra", "passed", "n", "value",
    "wilson", "bootstrap", "pass_at_k", "pass_hat_k", "1", "2", "3", "stability",
    "per_mission", "t2", "vs_baseline", "baseline_only", "row_only", "delta", "interval",
    "p_value", "verdict", "pairing", "excluded", "statistics", "rows", "baseline", "name",
    "status", "reps", "question", "reason"])


@st.composite
def _damaged(draw, good: dict[str, Any]) -> dict[str, Any]:
    """A good matrix with a few values replaced by any JSON, removed, or copied elsewhere."""
    matrix = copy.deepcopy(good)
    for _ in range(draw(st.integers(1, 3))):
        holder: Any = matrix
        for step in draw(_PLACES):
            holder = holder.get(step) if isinstance(holder, dict) else (
                holder[step] if isinstance(holder, list) and isinstance(step, int)
                and step < len(holder) else None)  # an earlier damage may have made a list
        if not isinstance(holder, dict):
            continue
        name, how = draw(_FIELDS), draw(st.sampled_from(["set", "drop", "copy"]))
        if how == "drop":
            holder.pop(name, None)
        elif how == "copy" and holder:
            holder[name] = copy.deepcopy(holder[draw(st.sampled_from(sorted(holder)))])
        else:
            holder[name] = draw(_VALUES)
    return matrix


@pytest.mark.slow  # 60 whole reports rendered: a fuzzer, not the unit tier
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_damage_to_matrix_json_gives_exit_0_or_2_never_a_crash(good, data):
    """The report renders the matrix, or refuses it in one sentence: never exit 3."""
    damaged = data.draw(_damaged(good))
    with tempfile.TemporaryDirectory() as tmp:
        folder = _write(damaged, Path(tmp) / "measure")
        result = invoke("report", folder, "-o", Path(tmp) / "r.html")
        assert result.exit_code in (0, 2), (result.output, damaged)
        assert "Traceback" not in result.output and "internal error" not in result.output
        if result.exit_code == 2:
            refused(result)


def test_a_row_delta_nested_hundreds_deep_still_renders(good, tmp_path):
    """A row's change from the baseline is spelled out a few levels deep, then "…", as
    provenance is: nested 900 deep it was a RecursionError in the page (exit 3)."""
    matrix = copy.deepcopy(good)
    matrix["rows"][1]["delta"] = {"flags": json.loads("[" * 900 + "]" * 900)}
    folder = _write(matrix, tmp_path / "measure")
    result = invoke("report", folder, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "flags: …" in (tmp_path / "r.html").read_text(encoding="utf-8")
