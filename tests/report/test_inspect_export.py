"""`evalkit export inspect`: Inspect AI eval logs, read back with Inspect's own reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.conftest import invoke

read_eval_log = pytest.importorskip("inspect_ai.log").read_eval_log

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings" / "stub"


@pytest.mark.slow
def test_one_log_per_suite_run_with_samples_messages_tool_calls_and_scores(
        tmp_path: Path) -> None:
    out = tmp_path / "logs"
    result = invoke("export", "inspect", RECORDINGS, "--out", out)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["stub_bad.eval", "stub_good.eval"]
    for variant in ("good", "bad"):
        report = json.loads((RECORDINGS / variant / "report.json").read_text())
        log = read_eval_log(str(out / f"stub_{variant}.eval"))
        assert log.status == "success" and log.eval.task == "stub"
        verdicts = {v["key"]: v for v in report["verdicts"]}
        assert sorted(s.id for s in log.samples) == sorted(verdicts)
        passed = sum(v["passed"] for v in verdicts.values())
        assert log.results.scores[0].metrics["accuracy"].value == passed / len(verdicts)
        for sample in log.samples:
            verdict = verdicts[sample.id]
            score = sample.scores["evalkit"]
            assert score.value == ("C" if verdict["passed"] else "I")
            assert score.explanation == ("; ".join(verdict["reasons"]) or "passed")
            assert sample.messages[0].role == "user" and sample.messages[0].text == sample.input
            assert sample.metadata["split"] == verdict["split"]
    good = {s.id: s for s in read_eval_log(str(out / "stub_good.eval")).samples}
    chaining = good["chaining"]
    assert chaining.input == "What was the Q3 2024 revenue in EUR?"
    calls = [c for m in chaining.messages if m.role == "assistant" for c in m.tool_calls or []]
    assert [c.function for c in calls] == ["mcp.read_asset", "mcp.read_asset", "mcp.multiply"]
    assert calls[2].arguments == {"a": 12481, "b": 338.0}
    results = [m for m in chaining.messages if m.role == "tool"]
    assert [m.tool_call_id for m in results] == [c.id for c in calls]
    assert '"result": 4218578.0' in results[2].text
    assert chaining.output.completion.startswith("Q3 2024 revenue was EUR 4,218,578.0")
    assert chaining.messages[-1].text == chaining.output.completion


@pytest.mark.slow
def test_model_usage_is_the_runs_recorded_tokens(folders: dict, tmp_path: Path) -> None:
    out = tmp_path / "logs"
    result = invoke("export", "inspect", folders["measure"], "--out", out)
    assert result.exit_code == 0, result.stderr
    # one log per rep of each row that ran (3 rows x 3 reps)
    assert len(list(out.glob("*.eval"))) == 9
    log = read_eval_log(str(out / "suite_swarm_rep1.eval"))
    report = json.loads((folders["measure"] / "swarm" / "rep1" / "report.json").read_text())
    verdicts = {v["key"]: v for v in report["verdicts"]}
    assert sorted(s.id for s in log.samples) == sorted(verdicts)
    for sample in log.samples:
        (usage,) = sample.model_usage.values()
        assert usage.total_tokens == verdicts[sample.id]["kpis"]["tokens"] == 160
    (total,) = log.stats.model_usage.values()
    assert total.total_tokens == 160 * len(log.samples)
    # the run that never happened is a sample scored I, with its reason
    never = {s.id: s for s in read_eval_log(str(out / "suite_native_rep3.eval")).samples}["h2"]
    assert never.scores["evalkit"].value == "I" and never.scores["evalkit"].metadata["missing"]
    assert never.model_usage == {}


@pytest.mark.parametrize(("args", "said"), [
    (["/nowhere"], "Error: no runs at /nowhere"),
    ([str(ROOT / "suites")], "Error: no score report under"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path, args: list[str], said: str) -> None:
    result = invoke("export", "inspect", *args, "--out", tmp_path / "logs")
    assert result.exit_code == 2
    assert result.stderr.startswith(said) and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "logs").exists()


def test_an_out_folder_holding_anything_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    result = invoke("export", "inspect", RECORDINGS, "--out", tmp_path)
    assert result.exit_code == 2 and "already exists and is not empty" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_without_the_inspect_extra_the_command_names_it_in_one_sentence(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    # a finder that says inspect_ai is not installed, as in a base install
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Gone:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'inspect_ai':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Gone())\n")
    done = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "export", "inspect", str(RECORDINGS),
         "--out", str(tmp_path / "logs")], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": f"{hide}{os.pathsep}{ROOT}"})
    assert done.returncode == 2
    assert done.stderr == ("Error: export inspect needs the inspect extra: "
                           "pip install 'evalkit[inspect]'\n")
    assert not (tmp_path / "logs").exists()
