"""Report details a newcomer tripped over: an empty chart, provenance of ``run``, two wall times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalkit.eval.suite import load_suite
from evalkit.report import folders as folder_reader
from evalkit.report.html import report_html
from tests._stream_builders import answer, call, finished, mission, started, step, write_stream
from tests._stream_builders import write_suite as write_suite_file
from tests.report._folders import score_folder
from tests.report.test_transcripts import Page

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "tests" / "harness" / "agents" / "foreign.py"


def test_no_usage_means_no_quality_cost_chart_and_a_line_saying_why(tmp_path):
    suite = load_suite(write_suite_file(tmp_path / "s.yaml", [mission("m0")], flags=["chaining"]))
    done = finished()
    del done["usage"]
    write_stream(tmp_path / "out" / "m0" / "events.jsonl",
                 [started(), step(1), *call(1, "mcp.add", {}), answer(), done])
    score_folder(tmp_path / "out", suite)
    html = report_html(folder_reader.load(tmp_path / "out"))
    assert "Quality against cost" not in html
    assert "No quality-against-cost chart: no run in this half recorded its token usage" in \
        Page(html).text


@pytest.mark.slow
def test_a_run_names_its_provider_and_model_and_both_wall_times(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "one", "tools": ["mcp.add"], "missions": [
        {"key": "adds", "flag": "chaining", "prompt": "What is 2 plus 3?",
         "expects_tools": ["mcp.add"]}]}), encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "run", "--suite", str(suite), "--out", str(out),
         "--quiet", "--", sys.executable, str(FOREIGN), "--provider", "openai", "--model",
         "tiny-7b", "--api-base", "http://user:pw@127.0.0.1:8000/v1?key=sk-notshown0000000000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "EVALKIT_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    html = report_html(folder_reader.load(out))
    page = Page(html)
    provenance = dict(folder_reader.load(out).provenance)
    assert provenance["provider"] == "openai" and provenance["model"] == "tiny-7b"
    assert provenance["endpoint"] == "http://127.0.0.1:8000/v1"
    assert "sk-notshown" not in html and "user:pw" not in html
    assert ">loop s</th>" in html and ">process s</th>" in html
    assert "what the console prints" in page.text
