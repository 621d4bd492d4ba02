"""Cost on every call and on the run, and token/cost budgets that stop a scripted mission.

The model is scripted with the usage a provider would report; the loop, the
plane, the store and the stream are real. Prices are planted, so each cost
below is worked out by hand in its comment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from evalkit.pricing import parse
from evalkit.runtime import Bounds
from evalkit.runtime.command import mission_command
from tests.grounding.conftest import review

PRICES = parse({"currency": "USD", "as_of": "2026-12-01", "prices": {"scripted": {"*": {
    "prompt": 2.0, "cached_prompt": 0.5, "completion": 8.0, "reasoning": 16.0}}}})
#: 600 uncached x 2 + 400 cached x 0.5 + 200 completion x 8 + 100 reasoning x 16, per million.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300,
         "prompt_tokens_details": {"cached_tokens": 400},
         "completion_tokens_details": {"reasoning_tokens": 100}}
ONE_CALL = 0.0046
BAD = "Let me think about it first."  # not JSON: a rejected reply, a turn spent


def said(text: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"content": text, "usage": usage if usage is not None else USAGE}


def answer(text: str = "done", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return said(json.dumps({"answer": text}), usage)


def finished(done) -> dict[str, Any]:
    return done.records[-1]


def test_each_call_and_the_run_carry_the_cost_worked_out_by_hand(mission) -> None:
    done = mission([said(BAD), answer()], mcp=False, pricing=PRICES)
    assert [c["reply"]["usage"]["cost"] for c in done.model_calls] == [ONE_CALL, ONE_CALL]
    assert done.events("reply_rejected")[0]["usage"]["cost"] == ONE_CALL
    assert done.events("answer")[0]["usage"]["cost"] == ONE_CALL
    usage = finished(done)["usage"]
    assert usage["cost"] == 0.0092 and usage["total_tokens"] == 2600
    assert usage["cached_tokens"] == 800 and usage["reasoning_tokens"] == 200
    meta = json.loads((done.run_dir / "meta.json").read_text())["meta"]
    assert meta["pricing"]["currency"] == "USD"


def test_an_unpriced_model_costs_null_not_zero(mission) -> None:
    elsewhere = parse({"currency": "USD", "as_of": "2026-12-01", "prices": {"openai": {
        "gpt-x": {"prompt": 1, "cached_prompt": 1, "completion": 1, "reasoning": 1}}}})
    done = mission([answer()], mcp=False, pricing=elsewhere)
    assert done.model_calls[0]["reply"]["usage"]["cost"] is None
    assert "cost" in finished(done)["usage"] and finished(done)["usage"]["cost"] is None


def test_a_call_that_reported_no_tokens_makes_the_run_cost_unknown(mission) -> None:
    done = mission([said(BAD), answer(usage={})], mcp=False, pricing=PRICES)
    assert finished(done)["usage"]["cost"] is None  # never the 0.0046 of the call that said


def test_without_prices_no_cost_is_written(mission) -> None:
    done = mission([answer()], mcp=False)
    assert "cost" not in finished(done)["usage"]
    assert "cost" not in done.model_calls[0]["reply"]["usage"]


def test_a_reply_that_crosses_the_token_budget_ends_the_run_there(mission) -> None:
    done = mission([said(BAD), answer()], mcp=False, bounds=Bounds(tokens=1000))
    end = finished(done)
    assert end["outcome"] == "budget_exhausted"
    assert end["budget"] == {"which": "tokens", "limit": 1000, "spent": 1300}
    assert len(done.model_calls) == 1  # recorded, and nothing after it
    assert done.events("reply_rejected") == []  # its content was not acted on


def test_a_call_whose_prompt_alone_would_cross_is_not_made(mission) -> None:
    done = mission([answer()], mcp=False, bounds=Bounds(tokens=10))
    end = finished(done)
    assert (end["outcome"], end["budget"]["which"], end["budget"]["spent"]) == (
        "budget_exhausted", "tokens", 0)
    assert end["budget"]["estimate"] > 10  # the system prompt alone is far past 10 tokens
    assert done.model_calls == []


def test_a_reply_that_crosses_the_cost_budget_ends_the_run(mission) -> None:
    done = mission([said(BAD), answer()], mcp=False, pricing=PRICES,
                   bounds=Bounds(cost=0.004))
    end = finished(done)
    assert end["outcome"] == "budget_exhausted"
    assert end["budget"] == {"which": "cost", "limit": 0.004, "spent": ONE_CALL}
    assert end["usage"]["cost"] == ONE_CALL


def test_the_next_call_is_refused_when_its_estimated_cost_would_cross(mission) -> None:
    # After one call 0.0046 is spent; the second call's prompt is estimated at some
    # hundreds of tokens x 2 per million, which takes the run past 0.0047.
    done = mission([said(BAD), answer()], mcp=False, pricing=PRICES,
                   bounds=Bounds(cost=0.0047))
    end = finished(done)
    assert end["budget"]["which"] == "cost" and end["budget"]["spent"] == ONE_CALL
    assert ONE_CALL + end["budget"]["estimate"] > 0.0047
    assert len(done.model_calls) == 1


def test_the_supervisors_review_call_counts_toward_the_budget(mission) -> None:
    small = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    big = {"prompt_tokens": 5000, "completion_tokens": 100, "total_tokens": 5100}
    done = mission([said(BAD, small), said(BAD, small), said(BAD, small),
                    said(review("nudge", "Write JSON."), big), answer(usage=small)],
                   mcp=False, bounds=Bounds(tokens=3000))
    assert [c["kind"] for c in done.model_calls] == ["mission"] * 3 + ["plain"]
    end = finished(done)
    assert end["outcome"] == "budget_exhausted"
    assert end["budget"] == {"which": "tokens", "limit": 3000, "spent": 45 + 5100}


def write(path: Path, items: list[Any]) -> Path:
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def test_max_cost_without_prices_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    script = write(tmp_path / "s.json", [answer()])
    result = CliRunner().invoke(mission_command, ["x", "--script", str(script),
                                                  "--max-cost", "0.5"],
                                env={"EVALKIT_RUNS": "off", "EVALKIT_PRICING": None})
    assert result.exit_code == 2
    assert result.output.strip() == ("Error: --max-cost needs prices: give --pricing FILE "
                                     "(or set EVALKIT_PRICING)")


def test_max_cost_with_no_price_for_the_model_is_refused(tmp_path: Path) -> None:
    script = write(tmp_path / "s.json", [answer()])
    prices = tmp_path / "p.yaml"
    prices.write_text("currency: USD\nas_of: 2026-12-01\nprices:\n  openai:\n    m: {prompt: 1, "
                      "cached_prompt: 1, completion: 1, reasoning: 1}\n", encoding="utf-8")
    result = CliRunner().invoke(mission_command, ["x", "--script", str(script), "--max-cost",
                                                  "0.5", "--pricing", str(prices)],
                                env={"EVALKIT_RUNS": "off"})
    assert result.exit_code == 2
    assert "has no price for scripted/s.json" in result.output


def test_the_cli_prices_from_the_environment_and_stops_at_max_tokens(tmp_path: Path) -> None:
    script = write(tmp_path / "s.json", [said(BAD), answer()])
    prices = tmp_path / "p.yaml"
    prices.write_text("currency: USD\nas_of: 2026-12-01\nprices:\n  scripted:\n    s.json: "
                      "{prompt: 2, cached_prompt: 0.5, completion: 8, reasoning: 16}\n",
                      encoding="utf-8")
    events = tmp_path / "e.jsonl"
    result = CliRunner().invoke(mission_command, ["x", "--script", str(script), "--events",
                                                  str(events), "--max-tokens", "2500"],
                                env={"EVALKIT_RUNS": "off", "EVALKIT_PRICING": str(prices)})
    assert result.exit_code == 0, result.output
    end = json.loads(events.read_text().splitlines()[-1])
    assert end["budget"] == {"which": "tokens", "limit": 2500, "spent": 2600}
    assert end["usage"]["cost"] == 0.0092
