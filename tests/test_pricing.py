"""Prices as data: the loader's arithmetic checked by hand, nothing guessed, one-sentence errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.pricing import EXAMPLE, load, parse

PLANTED = {"currency": "EUR", "as_of": "2026-11-30", "prices": {"acme": {
    "m1": {"prompt": 2.0, "cached_prompt": 0.5, "completion": 8.0, "reasoning": 16.0},
    "*": {"prompt": 1.0, "cached_prompt": 1.0, "completion": 1.0, "reasoning": 1.0,
          "as_of": "2026-10-01"}}}}


def test_planted_prices_give_the_cost_worked_out_by_hand() -> None:
    pricing = parse(PLANTED)
    usage = {"prompt_tokens": 1000, "completion_tokens": 300, "cached_tokens": 400,
             "reasoning_tokens": 100}
    # 600 uncached x 2 + 400 cached x 0.5 + 200 plain completion x 8 + 100 reasoning x 16,
    # per million: (1200 + 200 + 1600 + 1600) / 1e6
    assert pricing.cost("acme", "m1", usage) == 0.0046
    assert pricing.cost("acme", "m1", {"prompt_tokens": 1_000_000, "completion_tokens": 0}) == 2.0
    assert pricing.currency == "EUR"


def test_a_provider_wildcard_prices_its_other_models_and_an_exact_entry_wins() -> None:
    pricing = parse(PLANTED)
    usage = {"prompt_tokens": 500_000, "completion_tokens": 500_000}
    assert pricing.cost("acme", "anything", usage) == 1.0
    assert pricing.price("acme", "anything").as_of == "2026-10-01"
    assert pricing.price("acme", "m1").as_of == "2026-11-30"


def test_an_unpriced_model_or_unreported_tokens_cost_null_never_zero() -> None:
    pricing = parse({"currency": "USD", "as_of": "2026-01-01", "prices": {"openai": {
        "gpt-x": {"prompt": 1, "cached_prompt": 1, "completion": 1, "reasoning": 1}}}})
    assert pricing.cost("scripted", "a.yaml", {"prompt_tokens": 5, "completion_tokens": 5}) is None
    assert pricing.cost("openai", "gpt-y", {"prompt_tokens": 5, "completion_tokens": 5}) is None
    assert pricing.cost("openai", "gpt-x", {"calls": 3}) is None
    assert pricing.cost("openai", "gpt-x", None) is None
    assert pricing.cost("openai", "gpt-x", {"prompt_tokens": 5}) is None


def test_the_shipped_example_prices_the_scripted_agents() -> None:
    pricing = load(EXAMPLE)
    assert pricing.price("scripted", "chaining.yaml") is not None
    assert pricing.price("openai", "some-real-model") is None  # no price list is shipped


@pytest.mark.parametrize(("text", "said"), [
    ("prices: [", "is not YAML"),
    ("- 1", "must be a mapping with a 'prices' key"),
    ("currency: USD\nas_of: 2026-01-01\n", "has no 'prices' mapping"),
    ("currency: USD\nas_of: 2026-01-01\nprices:\n  p:\n    m: {prompt: 1, completion: 1, "
     "cached_prompt: 1}\n", "p/m gives no reasoning price"),
    ("currency: USD\nas_of: 2026-01-01\nprices:\n  p:\n    m: {prompt: -1, completion: 1, "
     "cached_prompt: 1, reasoning: 1}\n", "prompt is -1, not a price"),
    ("as_of: 2026-01-01\nprices:\n  p:\n    m: {prompt: 1, completion: 1, cached_prompt: 1, "
     "reasoning: 1}\n", "has no currency"),
    ("currency: USD\nprices:\n  p:\n    m: {prompt: 1, completion: 1, cached_prompt: 1, "
     "reasoning: 1}\n", "has no as_of date"),
    ("currency: USD\nas_of: 2026-01-01\nprices:\n  p:\n    m: {prompt: 1, completion: 1, "
     "cached_prompt: 1, reasoning: 1}\n    n: {prompt: 1, completion: 1, cached_prompt: 1, "
     "reasoning: 1, currency: EUR}\n", "mixes currencies (EUR, USD)"),
    ("currency: USD\nas_of: 2026-01-01\nprice: {}\n", "unknown key(s) price"),
])
def test_a_bad_pricing_file_is_one_sentence(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(EvalkitError) as raised:
        load(path)
    assert said in raised.value.message
    assert "\n" not in raised.value.message


def test_a_missing_pricing_file_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="cannot read the pricing file"):
        load(tmp_path / "nope.yaml")
