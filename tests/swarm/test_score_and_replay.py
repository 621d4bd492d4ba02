"""Swarm runs as the scorer and the replay see them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.eval.summary import summarize
from evalkit.runtime.backends import Reply
from evalkit.runtime.mission import MissionSettings, launch
from evalkit.runtime.replay import RecordingExhausted, ReplayBackend
from evalkit.store.reader import read_stream
from tests._stream_builders import mission as suite_mission
from tests._stream_builders import padded, write_suite
from tests.swarm.conftest import (
    DIRECT,
    REVENUE_PLAN,
    S1,
    S2,
    S3,
    SYNTHESIS,
    Lab,
    route,
)

STAGED = [route("plan"), REVENUE_PLAN, *S1, *S2, *S3, SYNTHESIS]
#: Fields that name or time a run rather than say what happened in it.
ID_FIELDS = ("run_id", "elapsed_s", "audit_ref", "approval_id")


def without_ids(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ID_FIELDS} for r in records]


@pytest.mark.slow
def test_score_reads_a_swarm_stream_staged_or_not(lab: Lab) -> None:
    runs = lab.root / "scored"
    common = {"expects_tools": ["mcp.read_asset", "mcp.multiply"],
              "answer_must_match": ["4,218,578"], "expects_outcome": "answered"}
    missions = [suite_mission("staged-refused", must_not_stage=True, **common),
                suite_mission("staged-allowed", **common),
                suite_mission("direct-refused", must_not_stage=True, **common),
                *[suite_mission(f"h{i}", split="test") for i in range(3)]]
    suite = write_suite(lab.root / "suite.yaml", padded(missions, flag=missions[0]["flag"]),
                        tools=["mcp.read_asset", "mcp.multiply", "mission_result"],
                        flags=[missions[0]["flag"]])
    for key, items in (("staged-refused", STAGED), ("staged-allowed", STAGED),
                       ("direct-refused", [route("direct"), *DIRECT])):
        done = lab.mission(items, events=runs / key / "events.jsonl")
        assert done.records[-1]["outcome"] == "answered"
    result = CliRunner().invoke(main, ["score", "--suite", str(suite), "--runs", str(runs),
                                       "--split", "train", "--json"])
    verdicts = {v["key"]: v for v in json.loads(result.stdout)["verdicts"]}
    refused = verdicts["staged-refused"]
    assert refused["passed"] is False
    assert refused["reasons"] == ["the run was STAGED: a plan rode step_started"]
    assert refused["kpis"]["staged"] is True
    assert verdicts["staged-allowed"]["passed"] is True
    assert verdicts["staged-allowed"]["kpis"]["tools"] == ["mcp.read_asset", "mcp.multiply"]
    assert verdicts["direct-refused"]["passed"] is True
    assert verdicts["direct-refused"]["kpis"]["staged"] is False


@pytest.mark.slow
def test_a_replay_of_a_staged_run_reproduces_its_stream(lab: Lab) -> None:
    original = lab.mission(STAGED)
    events = lab.root / "replayed.jsonl"
    result = CliRunner().invoke(main, ["replay", original.records[0]["run_id"],
                                       "--events", str(events), "--quiet"], env=lab.env())
    assert result.exit_code == 0, result.output
    replayed = [json.loads(line) for line in events.read_text().splitlines()]
    assert without_ids(replayed) == without_ids(original.records)
    assert replayed[0]["run_id"] != original.records[0]["run_id"]
    run_dir = lab.runs / replayed[0]["run_id"]
    meta = json.loads((run_dir / "meta.json").read_text())["meta"]
    assert meta["drift"] == {"first": None, "calls": 9, "served": 9, "recorded": 9}
    assert meta["swarm"] == original.meta["swarm"]
    assert meta["flags"]["swarm"] is True and meta["replay_of"] == original.records[0]["run_id"]
    calls = [json.loads(line) for line in (run_dir / "model.jsonl").read_text().splitlines()]
    assert [(c["kind"], c["request"]["messages"], c["reply"]) for c in calls] == [
        (c["kind"], c["request"]["messages"], c["reply"]) for c in original.model_calls]


@pytest.mark.slow
def test_a_replay_of_a_direct_routed_run_reproduces_it(lab: Lab) -> None:
    original = lab.mission([route("direct"), *DIRECT])
    replayed = _replay(lab, original.records[0]["run_id"])
    assert without_ids(replayed) == without_ids(original.records)


@pytest.mark.slow
def test_a_replay_of_a_parallel_run_gives_each_branch_its_own_turns(lab: Lab) -> None:
    """However the parallel lanes happened to share the script, the replay serves each lane
    the turns it was recorded getting (model.jsonl names the branch of every call)."""
    original = lab.mission([route("plan"), REVENUE_PLAN, S1[0], S2[0], S1[1], S2[1], *S3,
                            SYNTHESIS], "--swarm-parallel", "2")
    assert original.records[-1]["outcome"] == "answered"
    replayed = _replay(lab, original.records[0]["run_id"], drift=None)

    def lanes(records: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
        out: dict[Any, list[dict[str, Any]]] = {}
        for record in without_ids(records):  # interleaving, indexes and handles may differ
            out.setdefault(record.get("branch"), []).append(
                {k: v for k, v in record.items() if k not in ("index", "handle")})
        return out

    assert lanes(replayed) == lanes(original.records)
    assert replayed[-1]["outcome"] == "answered"


def _replay(lab: Lab, run_id: str, *, drift: bool | None = False) -> list[dict[str, Any]]:
    """Replay ``run_id``; ``drift`` False: none may be seen (None: handles may have moved)."""
    settings = MissionSettings(objective="", replay=run_id, root=lab.root / "work",
                               sandbox="none")
    launched = launch(settings, environ=lab.env())
    assert launched.outcome.error is None, launched.outcome.error
    if drift is False:
        assert launched.notes["drift"]["first"] is None
    return read_stream(lab.runs / launched.outcome.run_id).records


def _line(call: int, kind: str, branch: str | None, content: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"provider": "scripted"}
    if branch is not None:
        extra["branch"] = branch
    return {"call": call, "kind": kind, "request": {"messages": [], "extra": extra},
            "reply": {"content": content, "tool_calls": [], "usage": None}}


def test_replay_serves_each_branch_its_recorded_turns_in_any_order() -> None:
    recorded = [_line(1, "plain", None, "triage"), _line(2, "plain", None, "plan"),
                _line(3, "mission", "s1", "s1-a"), _line(4, "mission", "s2", "s2-a"),
                _line(5, "mission", "s2", "s2-b"), _line(6, "mission", "s1", "s1-b"),
                _line(7, "mission", None, "synthesis")]
    backend = ReplayBackend(recorded)
    s1, s2 = backend.for_branch("s1"), backend.for_branch("s2")

    def ask(model: Any, kind: str = "mission") -> str | None:
        reply: Reply = model.complete([], None, kind=kind)
        return reply.content

    assert [ask(backend, "plain"), ask(backend, "plain")] == ["triage", "plan"]
    assert [ask(s2), ask(s2), ask(s1), ask(s1)] == ["s2-a", "s2-b", "s1-a", "s1-b"]
    assert s1.remaining("mission") == 0 and backend.remaining("mission") == 1
    assert ask(backend) == "synthesis"
    try:
        ask(s1)
    except RecordingExhausted as exc:
        assert exc.recorded == 2
    else:  # pragma: no cover
        raise AssertionError("a branch past its recorded turns must run off the end")
    # A branch the recording never named is served the kind's next unserved call in order:
    # a recording made without --swarm replays its turns on the direct branch.
    plain = ReplayBackend([_line(1, "mission", None, "a"), _line(2, "mission", None, "b")])
    direct = plain.for_branch("direct")
    assert [ask(direct), ask(plain)] == ["a", "b"]
    assert direct.remaining("mission") == 0


@pytest.mark.slow
def test_a_direct_routed_swarm_run_scores_like_a_plain_one(lab: Lab) -> None:
    plain = lab.mission(DIRECT, swarm=False)
    routed = lab.mission([route("direct"), *DIRECT])
    a, b = summarize(plain.records), summarize(routed.records)
    for field in ("outcome", "answered", "answer", "tools_called", "staged", "grounded",
                  "steps", "nonconforming"):
        assert getattr(a, field) == getattr(b, field), field
    assert b.model_calls == a.model_calls + 1  # the triage call


def test_the_measure_swarm_row_now_runs_instead_of_being_refused(lab: Lab) -> None:
    """measure's probe skips a row the agent refuses at startup; --swarm is no longer refused."""
    from evalkit.eval.measure import ROWS

    assert ROWS["swarm"].flags == ("--swarm",)
    done = lab.mission([route("direct"), *DIRECT])
    assert done.exit_code == 0 and "not available" not in done.output
    assert done.records[-1]["outcome"] == "answered"
