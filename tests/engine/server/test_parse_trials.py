"""Structured outputs at volume: hundreds of sampled trials through the official openai client's pydantic helpers
(`chat.completions.parse`, `chat.completions.stream`) and forced tool calls, against a real tiny replica.

The tiny model's weights are random, so at temperature 1.0 its constrained outputs wander over the whole schema:
every enum value, arrays of every length, optional fields both set and null (_assert_the_schema_was_covered). Each
trial must come back whole ("stop", never "length") and valid. max_tokens is the longest output the schema allows, so a
grammar that fails to close shows up as a failure rather than as a truncated object.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any, TypeVar

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam
from pydantic import BaseModel, Field

from tests.engine.server.live import LiveServer, make_engine

# Slow: ~80 s on a busy 2-core machine, half of it the openai client's stream helper (about 1 ms of Python per
# chunk, in this process beside the server) for 120 streamed trials of ~160 chunks each.
pytestmark = pytest.mark.slow

NUM_TRIALS = 120
CONCURRENCY = 64  # requests in flight: the engine batches them into one step
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Describe a person who has pets."}]
MAX_TAGS = 4


class Colour(enum.StrEnum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Address(BaseModel):
    road: str = Field(max_length=8)
    no: int = Field(ge=1, le=999)
    zip: str | None = Field(max_length=4)


class Pet(BaseModel):
    name: str = Field(min_length=1, max_length=5)
    colour: Colour
    age: int | None = Field(ge=0, le=30)


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=6)
    colour: Colour
    home: Address
    pets: list[Pet] = Field(min_length=1, max_length=3)  # at least one: a random model mostly closes an array at once
    tags: list[Annotated[str, Field(max_length=4)]] = Field(max_length=MAX_TAGS)
    nick: str | None = Field(max_length=5)
    vip: bool


class Booking(BaseModel):
    """A second function's arguments, so `required` has a choice to make."""

    guest: Address
    nights: int = Field(ge=1, le=14)
    rooms: list[Colour] = Field(min_length=1, max_length=2)


def _longest_json(value: Any) -> str:
    """The instance as the grammar writes it (one space after ':' and ','), every string character as a 6-byte
    \\uXXXX escape: more than a character of these strings can take (raw UTF-8, at most 4 bytes)."""
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=True)


LONGEST_PET = {"name": "é" * 5, "colour": "green", "age": 30}
LONGEST_ADDRESS = {"road": "é" * 8, "no": 999, "zip": "é" * 4}
LONGEST_PERSON = {
    "name": "é" * 6, "colour": "green", "home": LONGEST_ADDRESS, "pets": [LONGEST_PET] * 3,
    "tags": ["é" * 4] * MAX_TAGS, "nick": "é" * 5, "vip": False,
}  # fmt: skip
LONGEST_BOOKING = {"guest": LONGEST_ADDRESS, "nights": 14, "rooms": ["green"] * 2}
# Every token holds at least one byte of text (text-less special tokens are masked out), so an output of B bytes
# takes at most B tokens. A call is `{"name": ..., "arguments": ...}` between the hermes parser's markers.
PARSE_MAX_TOKENS = len(_longest_json(LONGEST_PERSON))
CALL_MAX_TOKENS = len("<tool_call>\n\n</tool_call>") + max(
    len(_longest_json({"name": name, "arguments": arguments}))
    for name, arguments in (("Person", LONGEST_PERSON), ("Booking", LONGEST_BOOKING))
)

TOOLS = [openai.pydantic_function_tool(Person), openai.pydantic_function_tool(Booking)]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
NAMED_BOOKING = {"type": "function", "function": {"name": "Booking"}}
T = TypeVar("T")


@pytest.fixture(scope="module")
def live_server(tiny_model_dir) -> Iterator[LiveServer]:
    """Overrides conftest's: room for a whole round of concurrent trials in one batch, and a tool-call parser (the
    plain tiny template does not render tools, which a forced call does not need)."""
    # KV room for every trial in flight at its longest (64 tokens of prompt, 16 per block): none is preempted.
    num_kv_blocks = CONCURRENCY * -(-(64 + max(PARSE_MAX_TOKENS, CALL_MAX_TOKENS)) // 16)
    engine = make_engine(tiny_model_dir, max_num_seqs=CONCURRENCY, num_kv_blocks=num_kv_blocks)
    server = LiveServer(engine, tool_call_parser="hermes").start()
    yield server
    server.stop()


async def _run_trials(live_server: LiveServer, trial: Callable[[openai.AsyncOpenAI, int], Awaitable[T]]) -> list[T]:
    """Run NUM_TRIALS trials (seeds 0..NUM_TRIALS-1), CONCURRENCY at a time, and return their results. Every trial
    runs even when one fails; then the failures are counted and the first is raised."""
    gate = asyncio.Semaphore(CONCURRENCY)
    async with openai.AsyncOpenAI(
        base_url=live_server.url + "/v1", api_key="unused", max_retries=0, timeout=120
    ) as client:

        async def gated(seed: int) -> T:
            async with gate:
                return await trial(client, seed)

        outcomes = await asyncio.gather(*(gated(seed) for seed in range(NUM_TRIALS)), return_exceptions=True)
    failures = [(seed, outcome) for seed, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    if failures:
        seed, error = failures[0]
        raise AssertionError(f"{len(failures)} of {NUM_TRIALS} trials failed; the first (seed {seed}): {error!r}")
    return [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]


def _assert_the_schema_was_covered(people: list[Person]) -> None:
    """Random weights at temperature 1.0 reach every branch of the schema: the trials tested all of it."""
    assert {p.colour for p in people} == set(Colour)
    assert any(len(p.pets) > 1 for p in people)
    assert {p.nick is None for p in people} == {True, False}
    assert {pet.age is None for p in people for pet in p.pets} == {True, False}
    assert {p.home.zip is None for p in people} == {True, False}
    assert {len(p.tags) for p in people} >= {0, MAX_TAGS}  # empty and full


async def test_parse_returns_a_valid_object_every_time(live_server, model):
    async def trial(client: openai.AsyncOpenAI, seed: int) -> Person:
        completion = await client.chat.completions.parse(
            model=model, messages=MESSAGES, response_format=Person, max_tokens=PARSE_MAX_TOKENS, temperature=1.0,
            seed=seed,
        )  # fmt: skip
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.finish_reason
        assert isinstance(choice.message.parsed, Person), choice.message.content
        return choice.message.parsed

    _assert_the_schema_was_covered(await _run_trials(live_server, trial))


async def test_streamed_parse_returns_a_valid_object_every_time(live_server, model):
    async def trial(client: openai.AsyncOpenAI, seed: int) -> Person:
        async with client.chat.completions.stream(
            model=model, messages=MESSAGES, response_format=Person, max_tokens=PARSE_MAX_TOKENS, temperature=1.0,
            seed=seed,
        ) as stream:  # fmt: skip
            completion = await stream.get_final_completion()
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.finish_reason
        assert isinstance(choice.message.parsed, Person), choice.message.content
        return choice.message.parsed

    _assert_the_schema_was_covered(await _run_trials(live_server, trial))


@pytest.mark.parametrize("tool_choice", ["required", NAMED_BOOKING], ids=["required", "named"])
async def test_forced_call_arguments_validate_every_time(live_server, model, tool_choice):
    allowed = set(SCHEMAS) if tool_choice == "required" else {"Booking"}

    async def trial(client: openai.AsyncOpenAI, seed: int) -> str:
        completion = await client.chat.completions.create(
            model=model, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, max_tokens=CALL_MAX_TOKENS,
            temperature=1.0, seed=seed,
        )  # fmt: skip
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls", choice.finish_reason
        (call,) = choice.message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall) and call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        return call.function.name

    names = await _run_trials(live_server, trial)
    assert set(names) == allowed  # `required` picked each function in some trials
