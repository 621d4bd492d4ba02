"""Transcripts in the HTML report: what the agent did, read back from its recordings.

The page is parsed (html.parser), not grepped, so a planted tool call is found
as text a person sees, a planted ``<script>`` as text rather than markup, and a
planted key nowhere at all.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evalkit.eval.suite import load_suite
from evalkit.report import folders as folder_reader
from evalkit.report import transcript as transcript_mod
from evalkit.report.html import report_html
from tests._stream_builders import (
    answer,
    call,
    finished,
    grounding,
    mission,
    started,
    step,
    write_stream,
    write_suite,
)
from tests.report._folders import make_suite, measure_folder, score_folder

KEY = "sk-" + "Zq7" * 12  # an OpenAI-shaped key a careless agent echoed into a tool output


class Page(HTMLParser):
    """The visible text of a page, the ids of its elements, and every script it carries."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.scripts: list[str] = []
        self.ids: dict[str, dict[str, str | None]] = {}
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if found.get("id"):
            self.ids[found["id"]] = found
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.scripts if self._in_script else self.texts).append(data)

    @property
    def text(self) -> str:
        return " ".join(self.texts)


def _suite(path: Path, n: int = 2) -> Path:
    missions = [mission(f"m{i}", expects_tools=["mcp.add"]) for i in range(n)]
    return write_suite(path, missions, flags=["chaining"])


def _run(tmp_path: Path, records: dict[str, list[dict]], n: int = 2) -> Path:
    suite = load_suite(_suite(tmp_path / "suite.yaml", n))
    out = tmp_path / "out"
    for key, recs in records.items():
        write_stream(out / key / "events.jsonl", recs)
    score_folder(out, suite)
    return out


def _page(folder: Path) -> Page:
    return Page(report_html(folder_reader.load(folder)))


@pytest.mark.slow
def test_a_tool_call_its_result_grounding_and_the_answer_are_shown(tmp_path):
    records = {
        "m0": [started(objective="find the planted sum"), step(1),
               *call(1, "mcp.add", {"a": 40, "b": 2}, output="PLANTED-RESULT-42"),
               step(2), grounding(True), answer("The sum is PLANTED-ANSWER."), finished()],
        "m1": [started(), step(1), *call(1, "mcp.echo", {"text": "hi"}, output="hi"),
               answer("no sum"), finished()],
    }
    page = _page(_run(tmp_path, records))
    text = page.text
    assert "find the planted sum" in text
    assert "called mcp.add" in text and "PLANTED-RESULT-42" in text
    assert '"a": 40' in text  # the arguments, as JSON
    assert "grounding: grounded" in text
    assert "PLANTED-ANSWER" in text
    # The failed mission's transcript carries the verdict and its reason.
    failed = [i for i, a in page.ids.items() if a.get("data-key") == "m1"]
    assert failed and page.ids[failed[0]]["data-status"] == "fail"
    assert "never called mcp.add" in text
    # The missions table links each cell to the transcript it summarises.
    assert f'href="#{failed[0]}"' in report_html(folder_reader.load(tmp_path / "out"))


def test_supervisor_gates_and_rejected_replies_are_shown(tmp_path):
    records = {
        "m0": [started(), step(0),
               {"event": "reply_rejected", "index": 0, "problem": "no tool named 'x'", "tool": "x"},
               step(1, injected=["you repeated yourself; try another way"]),
               {"event": "gate_requested", "index": 1, "tool": "mcp.cancel_job",
                "arguments": {"job": "j1"}, "reason": "gated by the profile",
                "approval_id": "ap_1"},
               finished("awaiting_approval")],
    }
    text = _page(_run(tmp_path, records, n=1)).text
    assert "reply rejected (it named x): no tool named 'x'" in text
    assert "the supervisor spoke in" in text and "you repeated yourself" in text
    assert "gate: mcp.cancel_job needs approval (ap_1): gated by the profile" in text
    assert "outcome awaiting_approval" in text


def test_markup_in_a_recording_is_text_and_a_key_never_shows(tmp_path):
    planted = f"<script>alert('x')</script> token {KEY}"
    records = {"m0": [started(), step(1), *call(1, "mcp.add", {"note": KEY}, output=planted),
                      answer(f"done {KEY}"), finished()]}
    html = report_html(folder_reader.load(_run(tmp_path, records, n=1)))
    page = Page(html)
    assert "<script>alert('x')</script>" in page.text  # shown, as text
    assert not any("alert(" in s for s in page.scripts)
    assert KEY not in html
    assert "[REDACTED]" in page.text


def test_the_model_log_beside_the_stream_gives_the_replies(tmp_path):
    run_id = "run_20260101-000000-abcd1234"
    records = {"m0": [started(run_id=run_id), step(1), *call(1, "mcp.add", {"a": 1}),
                      answer(), finished()]}
    out = _run(tmp_path, records, n=1)
    log = out / "m0" / "runs" / run_id / "model.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"call": 1, "kind": "mission", "reply": {
        "content": '{"tool": "mcp.add", "arguments": {"a": 1}} PLANTED-REPLY',
        "tool_calls": [], "usage": None}}) + "\n", encoding="utf-8")
    text = _page(out).text
    assert "the model's replies (1" in text and "PLANTED-REPLY" in text


def test_a_long_stream_and_a_long_output_are_cut_with_a_count(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript_mod, "MAX_ENTRIES", 5)
    many = [r for i in range(10) for r in (step(i + 2), *call(i + 2, "mcp.add", {"i": i}))]
    recs = [started(), step(1), *call(1, "mcp.add", {}, output="y" * 5000 + "TAIL-NOT-SHOWN"),
            *many, answer(), finished()]
    text = _page(_run(tmp_path, {"m0": recs}, n=1)).text
    entries = len(transcript_mod.entries_of(recs))
    assert f"{entries - 5} more records not shown" in text
    assert "y" * transcript_mod.MAX_TEXT in text and "TAIL-NOT-SHOWN" not in text
    assert f"{5014 - transcript_mod.MAX_TEXT:,} more characters not shown" in text
    assert "5,014 bytes" in text


@pytest.mark.slow
def test_a_large_measure_stays_within_its_budget(tmp_path):
    """6 rows x 3 repeats x 50 missions, each run with a 6 KB tool output: under 5 MB."""
    suite = make_suite(tmp_path / "suite.yaml", train=35, test=15)
    rows = {name: (lambda key, rep: "pass") for name in
            ("direct", "swarm", "native", "grounding", "must-cite", "planes")}
    folder = measure_folder(tmp_path / "measure", suite, rows, repeat=3, statistics=False)
    for events in folder.rglob("events.jsonl"):  # a long tool output in every run
        lines = events.read_text(encoding="utf-8").splitlines()
        lines = [line.replace('"output": "5"', '"output": "' + "z" * 6000 + '"')
                 .replace('"output":"5"', '"output":"' + "z" * 6000 + '"') for line in lines]
        events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    html = report_html(folder_reader.load(folder))
    page = Page(html)
    assert len(html.encode()) < 5_000_000
    assert sum(1 for a in page.ids.values() if a.get("data-status")) == 900
    assert "more characters not shown" in page.text
    assert "left in each run's model.jsonl" in page.text


def test_an_infrastructure_failure_shows_what_the_agent_printed(tmp_path):
    out = _run(tmp_path, {"m0": [started(), step(1), *call(1, "mcp.add", {}), answer(),
                                 finished()]})
    folder = out / "m1"
    folder.mkdir()
    (folder / "command.json").write_text(json.dumps({"key": "m1", "exit_code": 1,
                                                     "spawn_error": None}), encoding="utf-8")
    (folder / "stderr.txt").write_text("bwrap: No permissions to create new namespace\n",
                                       encoding="utf-8")
    text = _page(out).text
    assert "bwrap: No permissions to create new namespace" in text


def test_a_report_away_from_its_runs_says_where_to_look(tmp_path):
    """A ``score --report`` folder holds verdicts, not recordings: each transcript says so."""
    runs = _run(tmp_path, {"m0": [started(), step(1), *call(1, "mcp.add", {}), answer(),
                                  finished()]}, n=1)
    elsewhere = tmp_path / "report-only"
    elsewhere.mkdir()
    (elsewhere / "report.json").write_bytes((runs / "report.json").read_bytes())
    text = _page(elsewhere).text
    assert "the recording (m0/events.jsonl) is not beside this report" in text
    assert "no recording shown" in text and str(tmp_path) not in text
