"""Prices as data: what a model call cost, from a pricing file and the tokens it reported.

Prices move and differ per account, so evalkit ships no price list: a
deployment writes its own file (``evalkit/data/pricing.example.yaml`` shows
the shape) and names it with ``--pricing FILE`` or ``EVALKIT_PRICING``. The
runtime prices each call as it happens; ``score``/``regrade --pricing``
price recorded runs again offline from their recorded token counts, so a
price change never means rewriting a recording.

Nothing is guessed. A call whose model has no entry, or whose provider did
not report prompt and completion tokens, costs ``None`` (written ``null``),
never 0: zero would claim the call was free.

This module sits at the top of the package, beside ``contract``: the runtime
(which prices as it runs) and the scorer (which re-prices offline) both read
it, and neither may import the other.

The file::

    currency: USD            # one currency per file: costs are summed
    as_of: 2026-12-01        # the date the prices were read (an entry may give its own)
    prices:
      openai:                # provider, as the run reports it
        gpt-4o-mini:         # model, as the run reports it; "*" = every model of it
          prompt: 0.15       # per million prompt tokens not served from a cache
          cached_prompt: 0.075
          completion: 0.60   # per million completion tokens that are not reasoning
          reasoning: 0.60

The arithmetic follows how OpenAI-shaped usage counts: ``prompt_tokens``
includes ``cached_tokens`` and ``completion_tokens`` includes
``reasoning_tokens``, so the cached and reasoning parts are taken out of
their totals and billed at their own price. A provider that reports no
cached or reasoning tokens had none.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError

#: The environment variable a mission reads when ``--pricing`` is not given.
PRICING_ENV = "EVALKIT_PRICING"
#: The example file evalkit ships (prices for the stub suites' scripted models only).
EXAMPLE = Path(__file__).parent / "data" / "pricing.example.yaml"
#: The four per-million prices every entry states, in the order they are billed.
PRICE_FIELDS: tuple[str, ...] = ("prompt", "cached_prompt", "completion", "reasoning")
#: The model name that prices every model of a provider, when the file says so.
ANY_MODEL = "*"
#: Decimal places a cost is rounded to: far below any currency's smallest unit, and
#: enough that the float sum of a few terms prints as the arithmetic gives it.
PLACES = 10


@dataclass(frozen=True)
class Price:
    """One model's prices per million tokens, with the currency and date they hold for."""

    prompt: float
    cached_prompt: float
    completion: float
    reasoning: float
    currency: str
    as_of: str

    def cost(self, usage: Mapping[str, Any] | None) -> float | None:
        """What one call (or a run's totals) cost; None when the tokens were not reported."""
        prompt = _count(usage, "prompt_tokens")
        completion = _count(usage, "completion_tokens")
        if prompt is None or completion is None:
            return None
        cached = min(_count(usage, "cached_tokens") or 0, prompt)
        reasoning = min(_count(usage, "reasoning_tokens") or 0, completion)
        total = ((prompt - cached) * self.prompt + cached * self.cached_prompt
                 + (completion - reasoning) * self.completion + reasoning * self.reasoning)
        return round(total / 1_000_000, PLACES)


@dataclass(frozen=True)
class Pricing:
    """A loaded pricing file: ``price(provider, model)`` and ``cost(provider, model, usage)``."""

    prices: Mapping[tuple[str, str], Price]
    currency: str
    source: str

    def price(self, provider: str | None, model: str | None) -> Price | None:
        """The model's entry, else its provider's ``"*"`` entry, else None (not priced)."""
        if not provider:
            return None
        found = self.prices.get((provider, model)) if model else None
        return found or self.prices.get((provider, ANY_MODEL))

    def cost(self, provider: str | None, model: str | None,
             usage: Mapping[str, Any] | None) -> float | None:
        """The cost of ``usage`` at this model's prices; None when it cannot be known."""
        price = self.price(provider, model)
        return None if price is None else price.cost(usage)

    def describe(self) -> dict[str, Any]:
        """What a recording or report notes about the prices it used."""
        return {"source": self.source, "currency": self.currency,
                "as_of": sorted({p.as_of for p in self.prices.values()})}


def load(path: str | os.PathLike[str]) -> Pricing:
    """Read and check a pricing file; anything wrong is one sentence naming the place."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvalkitError(f"cannot read the pricing file {target}: "
                           f"{exc.strerror or exc}") from None
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise EvalkitError(f"the pricing file {target} is not YAML{at}") from None
    return parse(data, str(target))


def parse(data: Any, source: str = "<pricing>") -> Pricing:
    """A pricing file's parsed contents, checked (see the module's docstring for the shape)."""
    if not isinstance(data, dict):
        raise EvalkitError(f"the pricing file {source} must be a mapping with a 'prices' key")
    unknown = sorted(set(map(str, data)) - {"currency", "as_of", "prices"})
    if unknown:
        raise EvalkitError(f"the pricing file {source} has unknown key(s) {', '.join(unknown)}: "
                           "use currency, as_of and prices")
    table = data.get("prices")
    if not isinstance(table, dict) or not table:
        raise EvalkitError(f"the pricing file {source} has no 'prices' mapping of provider -> "
                           "model -> prices")
    prices: dict[tuple[str, str], Price] = {}
    for provider, models in table.items():
        if not isinstance(models, dict) or not models:
            raise EvalkitError(f"the pricing file {source}: provider {provider!r} must map "
                               "model names to their prices")
        for model, entry in models.items():
            prices[(str(provider), str(model))] = _price(
                entry, f"{provider}/{model}", data, source)
    currencies = sorted({p.currency for p in prices.values()})
    if len(currencies) > 1:
        raise EvalkitError(f"the pricing file {source} mixes currencies ({', '.join(currencies)}); "
                           "a run's costs are summed, so give one currency per file")
    return Pricing(prices, currencies[0], source)


def _price(entry: Any, name: str, top: Mapping[str, Any], source: str) -> Price:
    where = f"the pricing file {source}: {name}"
    if not isinstance(entry, dict):
        raise EvalkitError(f"{where} must be a mapping of {', '.join(PRICE_FIELDS)}")
    unknown = sorted(set(map(str, entry)) - {*PRICE_FIELDS, "currency", "as_of"})
    if unknown:
        raise EvalkitError(f"{where} has unknown key(s) {', '.join(unknown)}")
    values = {}
    for field in PRICE_FIELDS:
        value = entry.get(field)
        if value is None:
            raise EvalkitError(f"{where} gives no {field} price (every entry states "
                               f"{', '.join(PRICE_FIELDS)}: nothing is guessed)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or value != value or value == float("inf"):
            raise EvalkitError(f"{where}: {field} is {value!r}, not a price of 0 or more "
                               "per million tokens")
        values[field] = float(value)
    currency = entry.get("currency", top.get("currency"))
    if not isinstance(currency, str) or not currency.strip():
        raise EvalkitError(f"{where} has no currency (give currency: at the top or in the entry)")
    as_of = entry.get("as_of", top.get("as_of"))
    if isinstance(as_of, (datetime.date, datetime.datetime)):
        as_of = as_of.isoformat()[:10]
    if not isinstance(as_of, str) or not _is_date(as_of):
        raise EvalkitError(f"{where} has no as_of date (YYYY-MM-DD, at the top or in the entry)")
    return Price(currency=currency.strip(), as_of=as_of, **values)


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _count(usage: Mapping[str, Any] | None, name: str) -> int | float | None:
    if not isinstance(usage, Mapping):
        return None
    value = usage.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return value


def from_env(env: Mapping[str, str] | None = None) -> Pricing | None:
    """The pricing file ``EVALKIT_PRICING`` names, loaded; None when it names none."""
    named = (os.environ if env is None else env).get(PRICING_ENV)
    return load(named) if named else None


__all__ = ["ANY_MODEL", "EXAMPLE", "PRICE_FIELDS", "PRICING_ENV", "Price", "Pricing",
           "from_env", "load", "parse"]
