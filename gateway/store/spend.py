"""Money as integers: what a request costs and what a budget in US dollars allows, the same in both stores and the
request path.

Prices are configured in USD per million tokens (`models.<name>.price`). One USD per million tokens is one
micro-dollar per token, so a price kept in nano-dollars per token (USD per million tokens x 1000, an integer to
$0.001 per million tokens) makes every cost an exact integer sum; costs are then rounded up to whole micro-dollars,
the unit of every counter (Redis' HINCRBY takes integers, and the Lua scripts add them in doubles, exact below
2**53, i.e. $9 billion). A request is never charged less than its tokens cost: at most one micro-dollar more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NANO_PER_MICRO = 1_000
MICRO_PER_USD = 1_000_000
MAX_USD = 1e9
"""Largest budget the admin API takes (1e15 micro-dollars: exact in the scripts' doubles)."""
MAX_USD_PER_MTOK = 1e6
"""Largest price a config takes: a request's cost stays far below 2**53 micro-dollars."""


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price in nano-dollars per token (= USD per million tokens x 1000)."""

    input_nano_usd: int = 0
    cached_input_nano_usd: int = 0
    """Prompt tokens the replica served from its prefix cache (usage.prompt_tokens_details.cached_tokens)."""
    output_nano_usd: int = 0


FREE = Price()
"""A model without a configured price: its tokens count, its cost is zero."""


def nano_usd_per_token(usd_per_mtok: float) -> int:
    return round(usd_per_mtok * NANO_PER_MICRO)


def micro_usd(usd: float) -> int:
    """A dollar amount (a budget) in whole micro-dollars, rounded to nearest; admit.lua computes the same."""
    return math.floor(usd * MICRO_PER_USD + 0.5)


def usd(micro: int) -> float:
    return micro / MICRO_PER_USD


def cost_micro_usd(price: Price, input_tokens: int, cached_tokens: int, output_tokens: int) -> int:
    """What a request used costs, rounded up to a whole micro-dollar; `cached_tokens` are part of `input_tokens`."""
    cached = min(max(cached_tokens, 0), input_tokens)
    nano = (
        (input_tokens - cached) * price.input_nano_usd
        + cached * price.cached_input_nano_usd
        + output_tokens * price.output_nano_usd
    )
    return -(-nano // NANO_PER_MICRO)


def worst_cost_micro_usd(price: Price, prompt_tokens: int, reserved_out: int) -> int:
    """What admission reserves against money budgets: no prompt token cached (unless cached ones cost more), every
    reserved output token generated. Settlement replaces it with the actual cost."""
    per_prompt_token = max(price.input_nano_usd, price.cached_input_nano_usd)
    return -(-(prompt_tokens * per_prompt_token + reserved_out * price.output_nano_usd) // NANO_PER_MICRO)
