"""Recorded runs priced again offline, and cost in measure's statistics.

Re-pricing reads the recorded token totals and the run's model from its meta.json;
the recording's bytes never change. ``measure`` reports a mean cost per mission
with a bootstrap interval and the paired delta against the baseline.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner

import evalkit
from evalkit.cli import main
from evalkit.eval import measure, stats
from evalkit.pricing import parse
from evalkit.runtime import Bounds, Run, ScriptedBackend
from evalkit.runtime.tools import NoSandbox, ResultStore, ToolPlane
from evalkit.store.runstore import RunStore

USAGE = {"prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300}
ANSWER = {"content": json.dumps({"answer": "done"}), "usage": USAGE}


def prices(prompt: float, completion: float, model: str = "*") -> str:
    return (f"currency: USD\nas_of: 2026-12-01\nprices:\n  scripted:\n    '{model}': "
            f"{{prompt: {prompt}, cached_prompt: {prompt}, completion: {completion}, "
            f"reasoning: {completion}}}\n")


def recorded_run(tmp_path: Path) -> Path:
    """One priced run (2 per million prompt, 8 completion): 1000 x 2 + 300 x 8 = 0.0044."""
    pricing = parse(__import__("yaml").safe_load(prices(2, 8)))
    store = RunStore(tmp_path / "runs")
    work = tmp_path / "work"
    work.mkdir()
    results = ResultStore()
    with ToolPlane(root=work, results=results, sandbox=NoSandbox()) as plane:
        outcome = Run(ScriptedBackend([ANSWER], model="agent.yaml"), plane, bounds=Bounds(),
                      store=store, results=results, pricing=pricing).run("do it")
    return store.path_of(outcome.run_id)


def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text("name: priced\nmissions:\n  - key: k\n    flag: chaining\n    prompt: do it\n",
                    encoding="utf-8")
    return path


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_score_prices_a_recorded_run_again_and_leaves_its_bytes_alone(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    suite = suite_file(tmp_path)
    before = fingerprint(run)
    as_recorded = evalkit.score(suite, mapping={"k": run}, verify=False)
    assert as_recorded.verdicts[0].kpis["cost"] == 0.0044
    dearer = tmp_path / "dearer.yaml"
    dearer.write_text(prices(4, 10), encoding="utf-8")  # 1000 x 4 + 300 x 10 = 0.007
    repriced = evalkit.score(suite, mapping={"k": run}, verify=False, pricing=dearer)
    assert repriced.verdicts[0].kpis["cost"] == 0.007
    assert repriced.halves()["train"]["totals"]["mean_cost"] == 0.007
    assert fingerprint(run) == before


def test_score_pricing_on_the_command_line_and_an_unpriced_model(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    suite = suite_file(tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text(prices(4, 10, model="someone-else.yaml"), encoding="utf-8")
    result = CliRunner().invoke(main, ["score", "--suite", str(suite), "--map", f"k={run}",
                                                "--no-verify", "--json", "--pricing", str(other)])
    report = json.loads(result.output)
    assert report["verdicts"][0]["kpis"]["cost"] is None  # no price: unknown, never 0
    dearer = tmp_path / "dearer.yaml"
    dearer.write_text(prices(4, 10), encoding="utf-8")
    result = CliRunner().invoke(main, ["score", "--suite", str(suite), "--map", f"k={run}",
                                                "--no-verify", "--pricing", str(dearer)])
    assert "(cost 0.007)" in result.output and "mean cost 0.007" in result.output


def test_a_bad_pricing_file_for_score_is_one_sentence(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("currency: USD\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["score", "--suite", str(suite_file(tmp_path)), "--map",
                                                f"k={run}", "--pricing", str(bad)])
    assert result.exit_code == 2
    assert "has no 'prices' mapping" in result.output


def test_measure_reports_cost_per_mission_with_an_interval_and_the_paired_delta() -> None:
    keys = [f"m{i}" for i in range(8)]
    outcomes = {"direct": {"train": {k: ["fail", "fail"] for k in keys}},
                "grounding": {"train": {k: ["pass", "pass"] for k in keys}}}
    # the baseline's missions cost 0.001 .. 0.0017, the row's 0.002 more each
    costs = {"direct": {"train": {k: [0.001 + i / 10000] * 2 for i, k in enumerate(keys)}},
             "grounding": {"train": {k: [0.003 + i / 10000] * 2 for i, k in enumerate(keys)}}}
    costs["grounding"]["train"]["m7"] = [None, None]  # unpriced: left out, counted
    cells = measure.statistics(outcomes, ["train"], costs)
    base = cells["direct"]["train"]["cost"]
    assert base["mean"] == 0.00135 and base["missions"] == 8 and base["unknown"] == 0
    assert base["bootstrap"][0] <= 0.00135 <= base["bootstrap"][1]
    row = cells["grounding"]["train"]
    assert row["cost"]["missions"] == 7 and row["cost"]["unknown"] == 2
    assert row["cost_vs_baseline"]["delta"] == 0.002
    assert row["cost_vs_baseline"]["interval"] == [0.002, 0.002]
    assert row["cost_vs_baseline"]["excluded"] == ["m7"]
    assert cells["direct"]["train"]["cost_vs_baseline"] is None
    matrix = {"provenance": {"suite": "s", "repeat": 2, "split": "all", "date": "d"},
              "rows": [{"name": "direct", "question": "q", "status": "ran"},
                       {"name": "grounding", "question": "q", "status": "ran"}],
              "statistics": cells}
    text = measure.to_markdown(matrix)
    assert "| grounding | 0.0033 [" in text and "+0.002 [0.002, 0.002]" in text
    assert "**grounding**: better on quality, and costs more: +0.002 per mission" in text


def test_an_unpriced_measure_says_nothing_about_cost() -> None:
    assert stats.describe_cost({"m": [None, None]}) is None
    assert stats.compare_cost({"m": [None]}, {"m": [0.1]}) is None
    assert stats.quality_and_cost("better", {"delta": -0.1, "interval": [-0.2, -0.05]}) is None
    noisy = stats.quality_and_cost("better", {"delta": 0.1, "interval": [-0.1, 0.3]})
    assert noisy is not None and "may be noise" in noisy


def test_regrade_prices_the_replays_and_only_reads_the_recordings(tmp_path: Path) -> None:
    from evalkit.runtime.regrade import regrade

    run = recorded_run(tmp_path)  # recorded at 0.0044
    before = fingerprint(tmp_path / "runs")
    dearer = tmp_path / "dearer.yaml"
    dearer.write_text(prices(4, 10), encoding="utf-8")
    report = regrade(tmp_path / "runs", tmp_path / "out", jobs=1, pricing=dearer)
    [row] = report["runs"]
    assert row["error"] is None and row["cost"] == 0.007
    replayed = tmp_path / "out" / row["replay"]
    end = json.loads((replayed / "events.jsonl").read_text().splitlines()[-1])["record"]
    assert end["usage"]["cost"] == 0.007
    meta = json.loads((replayed / "meta.json").read_text())["meta"]
    assert meta["priced_as"] == ["scripted", "agent.yaml"]  # what score --pricing reads
    assert fingerprint(tmp_path / "runs") == before
    assert run.name in {p.name for p in (tmp_path / "runs").iterdir()}


def test_run_and_measure_pass_prices_and_budgets_to_the_built_in_agent_only(tmp_path) -> None:
    import pytest

    from evalkit.errors import EvalkitError
    from evalkit.eval.runner import Agent, Spending

    example = tmp_path / "p.yaml"
    example.write_text(prices(1, 1), encoding="utf-8")
    spending = Spending(example, 5000, 0.5)
    builtin = Agent(agents=tmp_path)
    assert spending.check(builtin) is not None
    assert spending.agent(builtin).extra == ("--pricing", str(example.resolve()), "--max-tokens",
                                             "5000", "--max-cost", "0.5")
    with pytest.raises(EvalkitError, match="put your agent's own budget flags on its spawn"):
        spending.check(Agent(spawn=("my-agent",)))
    with pytest.raises(EvalkitError, match="--max-cost needs prices"):
        Spending(None, None, 0.5).check(builtin)
    assert Spending(example).agent(Agent(spawn=("my-agent",))).spawn == ("my-agent",)
    from evalkit.eval.suite import Mission

    dear = Mission("k", "chaining", "p", max_cost=0.1)
    with pytest.raises(EvalkitError, match="mission 'k' sets max_cost"):
        Spending().check(builtin, [dear])
    assert Spending(example).check(builtin, [dear]) is not None
