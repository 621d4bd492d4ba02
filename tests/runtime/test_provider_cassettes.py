"""Real provider bodies through the openai backend: what evalkit records of them.

The replies in ``tests/cassettes/openai/`` are gpt-4o's own, byte for byte
(their source and licence: that folder's README): a whole and a streamed
reply with two parallel tool calls, a whole and a streamed text reply, each
with its usage. vcrpy plays them back (``record_mode="none"``: never the
network, never a write) under the real ``openai`` SDK the backend drives,
matched on method and path only — the request evalkit builds is its own, not
the one the body once answered.

``evalkit mission`` runs in-process (click's runner), so vcrpy's patch of the
HTTP client holds, with one step allowed: the replies call tools no mission
offers, or answer in prose the json protocol cannot read, which is the
model's doing — ``reply_rejected``, charged to the model, never a transport
fault — and the run ends at its step budget. Each case checks the recorded
outcome, the fault class, the exit code, the usage and tool calls as the
provider sent them, and that the key is in no file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import vcr
from click.testing import CliRunner

from evalkit.eval.taxonomy import endpoint_down
from evalkit.runtime.command import EXIT_RAN, mission_command
from tests.runtime.conftest import read_jsonl

CASSETTES = Path(__file__).parent.parent / "cassettes" / "openai"
KEY = "sk-cassette-0123456789abcdefghijklmnopqrst"
MODEL = "gpt-4o-2024-08-06"
USAGE_TOOLS = {"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209,
               "reasoning_tokens": 0, "calls": 1}
CALLS = [("GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
         ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"})]


def play(tmp_path: Path, cassette: str, *flags: str) -> tuple[Any, list[dict], Path]:
    """``evalkit mission`` against the cassette; (click result, stream, run folder)."""
    source = CASSETTES / cassette
    before = source.read_bytes()
    events = tmp_path / "events.jsonl"
    recorder = vcr.VCR(record_mode="none", match_on=("method", "path"))
    with recorder.use_cassette(str(source)) as played:
        result = CliRunner().invoke(mission_command, [
            "what is the weather?", "--provider", "openai", "--model", MODEL,
            "--api-base", "https://api.openai.com/v1", "--events", str(events),
            "--mission-steps", "1", "--no-supervisor", "--unsandboxed", *flags],
            env={"EVALKIT_API_KEY": KEY, "EVALKIT_RUNS": str(tmp_path / "runs"),
                 "EVALKIT_AUDIT": "off", "EVALKIT_APPROVALS": "off", "EVALKIT_SANDBOX": "none"})
        assert played.play_count == 1 and played.all_played
    assert source.read_bytes() == before  # played back, never written
    records = read_jsonl(events)
    [run] = list((tmp_path / "runs").iterdir())
    assert KEY not in result.output
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path
    return result, records, run


def the_model_s_fault(result: Any, records: list[dict], run: Path) -> None:
    """A complete reply the mission cannot use: the model's fault, not the wire's."""
    assert result.exit_code == EXIT_RAN, result.output
    finished = records[-1]
    assert finished["event"] == "mission_finished" and finished["outcome"] == "budget_exhausted"
    assert finished["budget"] == {"which": "steps", "limit": 1, "spent": 1}
    assert not [r for r in records if r["event"] == "model_state" and r["state"] == "failed"]
    assert endpoint_down(run / "events.jsonl") is None  # no infrastructure failure
    assert [r["event"] for r in records].count("reply_rejected") >= 1


@pytest.mark.parametrize("cassette", ["tools-whole.yaml", "tools-streamed.yaml"])
def test_two_parallel_tool_calls_are_read_whole_and_charged_to_the_model(
        tmp_path: Path, cassette: str) -> None:
    flags = ["--protocol", "native"] + ([] if "streamed" in cassette else ["--no-stream"])
    result, records, run = play(tmp_path, cassette, *flags)
    the_model_s_fault(result, records, run)
    rejected = [r for r in records if r["event"] == "reply_rejected"]
    assert [(r["tool"], r["problem"]) for r in rejected] == [
        (name, f"no tool named {name!r} is offered") for name, _ in CALLS]
    assert rejected[0]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert records[-1]["usage"] == USAGE_TOOLS
    [call] = read_jsonl(run / "model.jsonl")
    sent = call["reply"]["tool_calls"]
    assert [(c["name"], json.loads(c["arguments"])) for c in sent] == CALLS
    assert [c["id"] for c in sent][0] in ("call_fdNz3vOBKYgOIpMdWotB9MjY",
                                          "call_JMW1whyEaYG438VE1OIflxA2")
    assert call["request"]["extra"]["stream"] is ("streamed" in cassette)
    assert call["reply"]["extras"] == {"finish_reason": "tool_calls"}


@pytest.mark.parametrize(("cassette", "usage"), [
    ("text-whole.yaml", {"prompt_tokens": 14, "completion_tokens": 37, "total_tokens": 51}),
    ("text-streamed.yaml", {"prompt_tokens": 14, "completion_tokens": 30, "total_tokens": 44}),
])
def test_a_prose_reply_is_the_model_s_not_the_wire_s(tmp_path: Path, cassette: str,
                                                     usage: dict[str, int]) -> None:
    """The json protocol asks for a JSON reply; gpt-4o answered in prose. A complete reply
    that breaks the protocol is a rejection charged to the model — it used to be the shape
    of reply a cut stream also produced, which is why completeness is checked first."""
    flags = [] if "streamed" in cassette else ["--no-stream"]
    result, records, run = play(tmp_path, cassette, *flags)
    the_model_s_fault(result, records, run)
    [call] = read_jsonl(run / "model.jsonl")
    assert call["reply"]["content"].startswith("I'm unable to provide real-time weather updates.")
    assert call["reply"]["tool_calls"] == []
    assert call["reply"]["extras"] == {"finish_reason": "stop"}
    assert records[-1]["usage"] == {**usage, "reasoning_tokens": 0, "calls": 1}


@pytest.mark.parametrize(("cassette", "source"), [
    ("text-streamed.yaml", "e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd"),
    ("tools-streamed.yaml", "f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b"),
])
def test_the_streamed_bodies_are_the_originals(cassette: str, source: str) -> None:
    """The source repository names each snapshot by the SHA-256 of its bytes (README)."""
    import hashlib

    import yaml

    data = yaml.safe_load((CASSETTES / cassette).read_text(encoding="utf-8"))
    body = data["interactions"][0]["response"]["body"]["string"]
    assert hashlib.sha256(body.encode("utf-8")).hexdigest() == source
