"""What an LLM call costs: USD per million tokens, input and output, per model.

The built-in figures are the providers' public list prices as of 2025-11 (openai.com/api/pricing,
anthropic.com/pricing), without batch or cache discounts. Prices change: check them, and put
yours in a JSON file, which overrides and extends these:

    {"gpt-4.1": {"input_per_mtok": 2.0, "output_per_mtok": 8.0}}

A model served from a URL (vLLM, Ollama...) has no built-in price; the caller loads the table
with builtin=False for it, so that a local model that happens to be named "gpt-4o" costs what
the user's file says, or nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kernforge.errors import UserError

FILE_FORM = '{"model-name": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, ...}'


@dataclass(frozen=True)
class Price:
    input_per_mtok: float  # USD per million prompt tokens
    output_per_mtok: float  # USD per million completion tokens


# Keys are matched as prefixes of the model name (longest first), so dated snapshots such as
# "gpt-4.1-2025-04-14" or "claude-sonnet-4-5-20250929" find their family.
BUILTIN_PRICES: dict[str, Price] = {
    "gpt-5": Price(1.25, 10.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "gpt-5-nano": Price(0.05, 0.40),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-4o": Price(2.50, 10.0),
    "gpt-4o-mini": Price(0.15, 0.60),
    "o3": Price(2.0, 8.0),
    "o3-mini": Price(1.10, 4.40),
    "o3-pro": Price(20.0, 80.0),
    "o4-mini": Price(1.10, 4.40),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4": Price(15.0, 75.0),  # also claude-opus-4-1
    "claude-sonnet-4": Price(3.0, 15.0),  # also claude-sonnet-4-5
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.80, 4.0),
}


def load_prices(path: Path | None, builtin: bool = True) -> dict[str, Price]:
    """The built-in table (unless builtin is False) updated with the user's JSON file."""
    table = dict(BUILTIN_PRICES) if builtin else {}
    if path is not None:
        table.update(_read_price_file(Path(path)))
    return table


def price_for(model: str, table: dict[str, Price]) -> Price | None:
    """The exact entry, else the longest key the model name starts with, else None."""
    if model in table:
        return table[model]
    prefixes = [key for key in table if model.startswith(key)]
    return table[max(prefixes, key=len)] if prefixes else None


def cost_usd(price: Price, prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6


def _read_price_file(path: Path) -> dict[str, Price]:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read the prices file {path} ({e.strerror}): "
                        f"give a JSON file of the form {FILE_FORM}") from None
    except ValueError as e:
        raise UserError(f"the prices file {path} is not JSON ({e}): "
                        f"expected {FILE_FORM}") from None
    if not isinstance(data, dict):
        raise UserError(f"the prices file {path} is not a JSON object: expected {FILE_FORM}")
    return {model: _price(path, model, entry) for model, entry in data.items()}


def _price(path: Path, model: str, entry: object) -> Price:
    fields = ("input_per_mtok", "output_per_mtok")
    if (not isinstance(entry, dict) or set(entry) != set(fields)
            or not all(_is_amount(entry[f]) for f in fields)):
        raise UserError(f"the prices file {path} has a bad entry for '{model}': "
                        f"expected {FILE_FORM} with amounts in USD >= 0")
    return Price(float(entry["input_per_mtok"]), float(entry["output_per_mtok"]))


def _is_amount(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
