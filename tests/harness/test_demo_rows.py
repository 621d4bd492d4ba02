"""The shipped demo measures mechanisms, not the shape of its scripts (issue 32 item 8).

``measure`` over suites/stub with its good scripted agents: the swarm row runs
scripts that answer the triage call and stage the multi-read missions, the
native row scripts that speak function calls and finish with
``mission_answer``. Each row then passes what the direct loop passes, and fails
only the missions that expect a grounding verdict, which no row without
grounding can give: that is said beside the row. A suite whose scripts are only
written for the direct loop has those rows skipped with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.conftest import STUB_SUITE, invoke, read_json

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "suites" / "stub"
GROUNDED = ["chaining", "disambiguation", "synthesis"]  # expects_grounded: true
STAGED = {"absence", "chaining", "disambiguation", "partial", "synthesis"}

#: One worker runs the module (``--dist loadgroup``): the measure of ``demo`` is made once,
#: not once in each worker that is handed one of its tests.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo_rows")]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _model_log(mission: Path) -> list[dict]:
    (log,) = mission.glob("runs/*/model.jsonl")
    return _lines(log)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "m"
    result = invoke("measure", "--suite", STUB, "--out", out, "--config", "swarm",
                    "--config", "native", "--jobs", "2", "--quiet")
    assert result.exit_code == 0, result.output + result.stderr
    return out


def test_each_row_passes_what_direct_passes_and_fails_only_the_grounded_missions(demo):
    matrix = read_json(demo / "matrix.json")
    assert [r["status"] for r in matrix["rows"]] == ["ran", "ran", "ran"]
    for row in ("direct", "swarm", "native"):
        report = read_json(demo / row / "rep1" / "report.json")
        failed = {v["key"]: v["reasons"] for v in report["verdicts"] if not v["passed"]}
        assert sorted(failed) == GROUNDED, (row, failed)
        for reasons in failed.values():
            assert reasons == ["no grounding verdict was recorded; this mission wants "
                               "grounded=True"], (row, reasons)
        assert all(v["kpis"]["reply_rejected"] == 0 for v in report["verdicts"]), row
    for half in ("train", "test"):
        for row in ("swarm", "native"):
            vs = matrix["statistics"][row][half]["vs_baseline"]
            assert (vs["baseline_only"], vs["row_only"], vs["verdict"]) == (
                0, 0, "no detectable difference")


def test_the_swarm_row_triages_every_mission_and_stages_the_multi_read_ones(demo):
    for mission in sorted((demo / "swarm" / "rep1").iterdir()):
        if not (mission / "events.jsonl").is_file():
            continue
        log = _model_log(mission)
        first = log[0]
        assert first["kind"] == "plain" and "route" in first["reply"]["content"], mission.name
        events = _lines(mission / "events.jsonl")
        plans = [e for e in events if e.get("event") == "step_started" and e.get("plan")]
        branches = {e["branch"] for e in events if e.get("branch") not in (None, "direct")}
        if mission.name in STAGED:
            assert len(plans) == 1 and len(branches) >= 2, mission.name
            # The tools ran in the lanes, the answer came from the synthesis on the main line.
            calls = [e for e in events if e.get("event") == "tool_call"]
            assert calls and all(e.get("branch", "").startswith("s") for e in calls)
            (answer,) = [e for e in events if e.get("event") == "answer"]
            assert "branch" not in answer
        else:
            assert plans == [] and branches == set(), mission.name


def test_the_native_row_calls_functions_and_answers_through_mission_answer(demo):
    for mission in sorted((demo / "native" / "rep1").iterdir()):
        if not (mission / "events.jsonl").is_file():
            continue
        calls = [c for c in _model_log(mission) if c["kind"] == "mission"]
        assert calls and all(c["request"]["extra"]["protocol"] == "native" for c in calls)
        assert all(c["reply"]["tool_calls"] for c in calls), mission.name
        if mission.name != "boundary":  # stopped at the gate, before any answer
            last = calls[-1]["reply"]["tool_calls"]
            assert [t["name"] for t in last] == ["mission_answer"], mission.name
    chaining = _model_log(demo / "native" / "rep1" / "chaining")
    assert len(chaining[0]["reply"]["tool_calls"]) == 2  # both reads in one turn


def test_the_rows_without_grounding_say_so_beside_the_row(demo):
    matrix = read_json(demo / "matrix.json")
    said = ("grounding removed: chaining, disambiguation, synthesis expect a grounded answer "
            "and fail here by construction")
    assert {r["name"]: r.get("caveat") for r in matrix["rows"]} == {
        "direct": said, "swarm": said, "native": said}
    direct = next(line for line in (demo / "matrix.md").read_text().splitlines()
                  if line.startswith("| direct | The baseline"))
    assert direct.endswith(f"| ran; {said} |")
    result = invoke("report", demo, "-o", demo / "report.html")
    assert result.exit_code == 0, result.output
    page = (demo / "report.html").read_text()
    kpis = page[page.index('id="kpis-train"'):]
    kpis = kpis[:kpis.index("</tbody>")]
    assert kpis.count(f'<div class="small caveat">{said}</div>') == 3


def test_a_suite_with_only_direct_loop_scripts_skips_the_rows_it_cannot_honour(tmp_path):
    out = tmp_path / "m"
    result = invoke("measure", "--suite", STUB_SUITE, "--out", out, "--split", "test",
                    "--config", "swarm", "--config", "native", "--jobs", "2", "--quiet")
    assert result.exit_code == 0, result.output + result.stderr
    rows = {r["name"]: r for r in read_json(out / "matrix.json")["rows"]}
    for name, flag in (("swarm", "--swarm"), ("native", "--protocol native")):
        assert rows[name]["status"] == "skipped"
        reason = rows[name]["reason"]
        assert "written for the json direct loop" in reason and flag in reason
        assert f"agents/{name}/<key>.yaml" in reason
        assert f"note: row {name!r} skipped: {reason}" in result.stderr
        assert not (out / name / "rep1").exists()
    assert rows["direct"]["status"] == "ran"


def test_a_variant_with_no_shaped_scripts_skips_the_row_rather_than_run_it_empty(tmp_path):
    out = tmp_path / "m"
    result = invoke("measure", "--suite", STUB, "--out", out, "--split", "test", "--agent",
                    "bad", "--config", "native", "--jobs", "2", "--quiet")
    assert result.exit_code == 0, result.output + result.stderr
    native = next(r for r in read_json(out / "matrix.json")["rows"] if r["name"] == "native")
    assert native["status"] == "skipped" and "no <key>.bad.yaml" in native["reason"]
