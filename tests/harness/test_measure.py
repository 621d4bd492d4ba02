"""`evalkit measure`: the matrix as data, repeats, skipped rows, statistics checked by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from evalkit.errors import EvalkitError
from evalkit.eval.measure import MATRIX, assemble, derive_manifest, select, split_manifest
from evalkit.eval.suite import load_suite
from tests._disk import fills_on, leftovers
from tests.harness.conftest import FOREIGN, STUB_SUITE, foreign_suite, invoke, read_json

T, F = True, False

#: One worker runs the module (``--dist loadgroup``): the matrix of ``measured`` is made
#: once, not once in each worker that is handed one of the tests that read it.
pytestmark = pytest.mark.xdist_group("measure")

#: The foreign agent, started without the ``site`` module: it imports only the standard
#: library, and ``site`` (the .pth files, the editable install's finder) is about a third
#: of what each of the ~150 spawns in this module costs. What it is given is unchanged.
AGENT = [FOREIGN[0], "-S", *FOREIGN[1:]]


#: Pass/fail per row, mission and repeat for the foreign agent (see agents/foreign.py).
TABLE = {
    "direct": {**{f"t{i}": [T, T, T] for i in range(6)}, "t6": [T, F, T], "t7": [F, F, F],
               **{f"h{i}": [T, T, T] for i in range(4)}},
    "swarm": {**{f"t{i}": [F, F, F] for i in range(7)}, "t7": [F, T, F],
              **{f"h{i}": [T, T, T] for i in range(4)}},
    "native": {**{f"t{i}": [T, T, T] for i in range(8)},
               **{f"h{i}": [T, T, T] for i in range(3)}, "h3": [F, F, F]},
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One matrix (direct, swarm, native; repeat 3) shared by the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("measured")
    table = tmp_path / "table.json"
    table.write_text(json.dumps(TABLE))
    suite = foreign_suite(tmp_path / "sums.yaml", train=8, test=4)
    out = tmp_path / "matrix"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FOREIGN_TABLE", str(table))
        result = invoke("measure", "--suite", suite, "--out", out, "--config", "swarm",
                        "--config", "native", "--repeat", "3", "--jobs", "4", "--", *AGENT)
    assert result.exit_code == 0, result.output + result.stderr
    return suite, out


@pytest.mark.slow
def test_runs_land_per_row_and_rep_and_matrix_json_holds_provenance_rows_and_reports(
        measured: tuple[Path, Path]) -> None:
    _, out = measured
    matrix = read_json(out / "matrix.json")
    assert matrix["format"] == "evalkit-matrix" and matrix["version"] == 1
    assert matrix["baseline"] == "direct"
    p = matrix["provenance"]
    assert p["repeat"] == 3 and p["suite"] == "sums" and p["split"] == "all"
    assert {"commit", "date", "provider", "model", "endpoint", "bounds"} <= set(p)
    assert p["bounds"]["timeout_s"] == 600.0
    rows = {row["name"]: row for row in matrix["rows"]}
    assert list(rows) == ["direct", "swarm", "native"]
    assert rows["swarm"]["delta"]["flags"] == ["--swarm"]
    assert rows["native"]["delta"]["flags"] == ["--protocol", "native"]
    for name, row in rows.items():
        assert row["status"] == "ran" and row["question"]
        assert row["reps"] == [f"{name}/rep{n}" for n in (1, 2, 3)]
        for rep, report in zip(row["reps"], row["reports"], strict=True):
            assert report == f"{rep}/report.json"
            assert (out / report).is_file() and (out / rep / "report.md").is_file()
            assert (out / rep / "t0" / "events.jsonl").is_file()
            assert (out / rep / "h3" / "command.json").is_file()
    argv = read_json(out / "swarm" / "rep2" / "t3" / "command.json")["argv"]
    assert argv[-1] == "--swarm"
    assert "## train" in (out / "matrix.md").read_text()


@pytest.mark.slow
def test_statistics_match_hand_computed_values(measured: tuple[Path, Path]) -> None:
    _, out = measured
    s = read_json(out / "matrix.json")["statistics"]
    direct = s["direct"]["train"]
    # 6 missions x 3 passes + t6 (2 of 3) + t7 (0 of 3) = 20 of 24 tries.
    assert direct["counts"] == {"pass": 20, "fail": 4, "missing": 0, "infra": 0}
    assert direct["rate"] == {"passed": 20, "n": 24, "value": 0.8333,
                              "wilson": [0.6415, 0.9332]}
    assert direct["rate_without_infra"] == direct["rate"]
    lo, hi = direct["bootstrap"]
    assert lo <= 0.8333 <= hi
    # pass@k: t0-t5 certain, t6 (c=2 of n=3) certain for k>=2, t7 never: 7/8.
    assert direct["pass_at_k"] == {"1": 0.8333, "2": 0.875, "3": 0.875}
    # pass^2: t6 gives C(2,2)/C(3,2) = 1/3, so (6 + 1/3) / 8; pass^3: 6/8.
    assert direct["pass_hat_k"] == {"1": 0.8333, "2": 0.7917, "3": 0.75}
    assert direct["stability"] == {"stable_pass": 6, "stable_fail": 1, "flaky": 1, "infra": 0}
    assert direct["per_mission"]["t6"] == {"tries": 3, "passed": 2, "infra": 0,
                                           "stability": "flaky"}
    assert direct["vs_baseline"] is None

    swarm = s["swarm"]["train"]
    assert swarm["rate"] == {"passed": 1, "n": 24, "value": 0.0417, "wilson": [0.0074, 0.2024]}
    # t7 passed 1 of 3: pass@2 = 1 - C(2,2)/C(3,2) = 2/3, over 8 missions.
    assert swarm["pass_at_k"] == {"1": 0.0417, "2": 0.0833, "3": 0.125}
    assert swarm["pass_hat_k"]["3"] == 0.0
    assert swarm["stability"] == {"stable_pass": 0, "stable_fail": 7, "flaky": 1, "infra": 0}
    # Majority per mission: direct passes t0-t6, swarm none; 7 discordant, all one way.
    # McNemar: 2 * (1/2)^7 = 0.015625; delta -7/8; Wald + 1/n: -0.875 -/+ (1.96*sqrt(7-49/8)/8+1/8).
    assert swarm["vs_baseline"] == {
        "missions": 8, "baseline_only": 7, "row_only": 0, "delta": -0.875,
        "interval": [-1.0, -0.5208], "p_value": 0.015625, "verdict": "worse",
        "pairing": "mission-majority", "excluded": [], "baseline_rate": 0.875, "row_rate": 0.0}

    native = s["native"]["train"]
    assert native["vs_baseline"]["verdict"] == "no detectable difference"
    assert (native["vs_baseline"]["baseline_only"], native["vs_baseline"]["row_only"]) == (0, 1)
    assert native["vs_baseline"]["p_value"] == 1.0
    assert native["vs_baseline"]["interval"] == [-0.2292, 0.4792]

    # The held-out half is its own cell, never blended.
    assert s["direct"]["test"]["rate"]["wilson"] == [0.7575, 1.0]
    assert s["native"]["test"]["rate"] == {"passed": 9, "n": 12, "value": 0.75,
                                           "wilson": [0.4677, 0.9111]}
    assert s["native"]["test"]["vs_baseline"]["delta"] == -0.25
    assert s["native"]["test"]["vs_baseline"]["interval"] == [-0.9243, 0.4243]
    assert s["swarm"]["test"]["vs_baseline"]["interval"] == [-0.25, 0.25]


@pytest.mark.slow
def test_any_rep_is_rederived_offline_by_score_and_the_matrix_by_rescore(
        measured: tuple[Path, Path]) -> None:
    suite, out = measured
    result = invoke("score", "--suite", suite, "--runs", out / "swarm" / "rep2", "--json",
                    "--allow-failures")
    assert result.exit_code == 0, result.stderr
    offline = json.loads(result.stdout)
    kept = read_json(out / "swarm" / "rep2" / "report.json")
    for verdict in kept["verdicts"]:
        del verdict["category"], verdict["infra"]
    for half in kept["halves"].values():
        del half["categories"]
    assert offline == kept
    before = read_json(out / "matrix.json")
    result = invoke("measure", "--suite", suite, "--out", out, "--rescore")
    assert result.exit_code == 0, result.stderr
    after = read_json(out / "matrix.json")
    assert after["statistics"] == before["statistics"] and after["rows"] == before["rows"]
    assert "rescored" in after["provenance"]
    # every rep was sealed when its missions were done, and still verifies
    assert all((out / row / "rep1" / "manifest.json").is_file() for row in ("direct", "swarm"))
    checked = invoke("verify", out)
    assert checked.exit_code == 0, checked.output
    assert not any(line.startswith(("tampered", "unsigned")) for line in
                   checked.output.splitlines()), checked.output


@pytest.mark.slow
def test_a_one_mission_difference_at_repeat_1_is_no_detectable_difference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"direct": {f"t{i}": [T] for i in range(5)} | {f"h{i}": [T] for i in range(3)},
             "native": {f"t{i}": [T] for i in range(5)} | {f"h{i}": [T] for i in range(3)}}
    table["native"]["t0"] = [F]
    (tmp_path / "table.json").write_text(json.dumps(table))
    monkeypatch.setenv("FOREIGN_TABLE", str(tmp_path / "table.json"))
    out = tmp_path / "m"
    result = invoke("measure", "--suite", foreign_suite(tmp_path / "s.yaml"), "--out", out,
                    "--config", "native", "--", *AGENT)
    assert result.exit_code == 0, result.stderr
    vs = read_json(out / "matrix.json")["statistics"]["native"]["train"]["vs_baseline"]
    assert (vs["baseline_only"], vs["row_only"], vs["p_value"]) == (1, 0, 1.0)
    assert vs["verdict"] == "no detectable difference"
    cell = read_json(out / "matrix.json")["statistics"]["native"]["train"]
    assert cell["bootstrap"] is None and cell["pass_at_k"] == {"1": 0.8}


@pytest.mark.slow
def test_rows_the_agent_or_the_manifest_cannot_honour_are_skipped_with_the_reason(
        tmp_path: Path) -> None:
    out = tmp_path / "m"
    suite = foreign_suite(tmp_path / "s.yaml")
    result = invoke("measure", "--suite", suite, "--out", out, "--jobs", "2", "--",
                    *AGENT, "--refuse", "--swarm")
    assert result.exit_code == 0, result.stderr
    rows = {row["name"]: row for row in read_json(out / "matrix.json")["rows"]}
    assert [r.name for r in MATRIX] == list(rows)
    assert rows["swarm"]["status"] == "skipped"
    assert "--swarm is not available yet" in rows["swarm"]["reason"]
    assert rows["swarm"]["reps"] == [] and not (out / "swarm" / "rep1").exists()
    assert (out / "swarm" / "probe" / "t0" / "stderr.txt").is_file()  # the evidence is kept
    for name in ("grounding", "must-cite", "claim-table", "planes"):
        assert rows[name]["status"] == "skipped"
        assert "no skill manifest" in rows[name]["reason"]
    assert rows["direct"]["status"] == rows["native"]["status"] == "ran"
    stats = read_json(out / "matrix.json")["statistics"]
    assert set(stats) == {"direct", "native"}  # nothing is reported under a false name
    assert "row 'swarm' skipped" in result.stderr
    # The probe run of a row that ran is kept as its first mission of rep 1, not run twice.
    assert read_json(out / "native" / "rep1" / "report.json")["verdicts"][0]["key"] == "t0"
    assert len(list((out / "native" / "rep1").glob("*/command.json"))) == 8


MANIFEST = """---
name: analyst
allowed_tools: [mcp.add]
grounding:
  identifier_pattern: '\\bcase t\\d\\b'
  figures_from: [mcp.add]
  must_cite: {figures: 1}
---
Body text stays as written.
"""


@pytest.mark.slow
def test_grounding_rows_write_a_manifest_variant_and_repoint_skill(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_text(MANIFEST)
    suite = foreign_suite(tmp_path / "s.yaml", skill="SKILL.md")
    out = tmp_path / "m"
    result = invoke("measure", "--suite", suite, "--out", out, "--split", "test", "--config",
                    "grounding", "--config", "must-cite", "--config", "claim-table",
                    "--config", "planes", "--", *AGENT)
    assert result.exit_code == 0, result.stderr
    grounding = {}
    for row in ("direct", "grounding", "must-cite", "claim-table"):
        front, body = split_manifest((out / row / "skill.md").read_text())
        assert body == "Body text stays as written.\n" and front["name"] == "analyst"
        grounding[row] = front.get("grounding")
        said = json.loads((out / row / "rep1" / "h0" / "stdout.txt").read_text().splitlines()[0])
        assert said["argv"][said["argv"].index("--skill") + 1] == str(
            (out / row / "skill.md").resolve())
    base = {"identifier_pattern": "\\bcase t\\d\\b", "figures_from": ["mcp.add"]}
    assert grounding == {"direct": None, "grounding": base,
                         "must-cite": {**base, "must_cite": {"figures": 1}},
                         "claim-table": {**base, "claim_table": True}}
    rows = {row["name"]: row for row in read_json(out / "matrix.json")["rows"]}
    assert rows["grounding"]["delta"]["skill"] == "grounding/skill.md"
    assert rows["planes"]["status"] == "skipped" and "no planes" in rows["planes"]["reason"]
    assert not (out / "planes").exists()


def test_the_matrix_is_data() -> None:
    names = [row.name for row in MATRIX]
    assert names[0] == "direct" and {"swarm", "native", "grounding", "must-cite",
                                     "claim-table"} <= set(names)
    assert all(row.question.endswith(("?", ".")) for row in MATRIX)
    assert [r.name for r in select(["native"])] == ["direct", "native"]
    assert [r.name for r in select([])] == names
    with pytest.raises(EvalkitError, match="unknown --config 'fast'"):
        select(["fast"])


def test_manifest_variants_edit_only_the_grounding_block() -> None:
    text, why = derive_manifest("no frontmatter at all\n", "basic")
    assert text is None and "no grounding: block" in why
    stripped, _ = derive_manifest(MANIFEST, "strip")
    assert "grounding" not in yaml.safe_load(stripped.split("---")[1])
    cited, _ = derive_manifest(MANIFEST.replace("  must_cite: {figures: 1}\n", ""), "must_cite")
    assert split_manifest(cited)[0]["grounding"]["must_cite"] is True
    with pytest.raises(EvalkitError, match="never closes"):
        split_manifest("---\nname: x\n")


@pytest.mark.slow
def test_measure_over_the_built_in_runtime_and_scripted_agents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m"
    result = invoke("measure", "--suite", STUB_SUITE, "--out", out, "--split", "test",
                    "--config", "native", "--config", "swarm", "--jobs", "3")
    assert result.exit_code == 0, result.output + result.stderr
    matrix = read_json(out / "matrix.json")
    rows = {row["name"]: row for row in matrix["rows"]}
    assert matrix["provenance"]["provider"] == "scripted"
    # The progress total is the whole plan from the first line on (it grew as rows started).
    counts = re.findall(r"^\[(\d+)/(\d+)\] ", result.stderr, re.MULTILINE)
    ran = sum(3 for row in rows.values() if row["status"] == "ran")
    assert counts == [(str(k), str(ran)) for k in range(1, ran + 1)], result.stderr
    stats = matrix["statistics"]
    assert stats["direct"]["test"]["counts"]["pass"] == 3
    # This suite's scripts are written for the json direct loop only (no agents/swarm/ or
    # agents/native/): those rows are skipped with the reason, never run as a false finding.
    assert [rows[name]["status"] for name in ("swarm", "native")] == ["skipped", "skipped"]
    assert set(stats) == {"direct"}
    assert "skipped: the suite's scripted agents are written for the json direct loop" in (
        out / "matrix.md").read_text()
    assert "grounding" not in split_manifest((out / "direct" / "skill.md").read_text())[0]


@pytest.mark.parametrize("name", ["matrix.json", "matrix.md"])
def test_a_matrix_rewritten_onto_a_full_disk_is_left_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    suite = load_suite(foreign_suite(tmp_path / "sums.yaml"))
    out = tmp_path / "matrix"
    out.mkdir()
    provenance = {"suite": "sums", "repeat": 1, "split": "all", "date": "then"}
    assemble(suite, out, provenance, [], "all", write=lambda report, folder: None)
    before = {pair: (out / pair).read_bytes() for pair in ("matrix.json", "matrix.md")}
    fills_on(monkeypatch, name)
    with pytest.raises(OSError, match="No space left"):
        assemble(suite, out, {**provenance, "date": "now", "rescored": "now"}, [], "all",
                 write=lambda report, folder: None)
    # The pair is replaced together: neither is new beside an old other.
    assert {pair: (out / pair).read_bytes() for pair in before} == before
    assert leftovers(out) == []
