"""The Messages API double, driven by the real `anthropic` SDK over loopback."""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import anthropic
import pytest

from core.clock import FrozenClock
from replay.messages_api import MessagesDouble, count_tokens, validate_request

MODEL = "claude-sonnet-4-6"
KEY = "test-key"
BIG_SYSTEM = "You book appointments for a hair salon. " * 150  # ~1,500 tokens


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))


@pytest.fixture
async def double(clock: FrozenClock) -> AsyncIterator[MessagesDouble]:
    messages_double = MessagesDouble(clock=clock.now, api_key=KEY)
    await messages_double.start()
    yield messages_double
    await messages_double.stop()


@pytest.fixture
async def client(double: MessagesDouble) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=double.base_url, max_retries=0)
    yield sdk
    await sdk.close()


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text, **extra}]}


def cached_system(ttl: str | None = None, text: str = BIG_SYSTEM) -> list[dict[str, Any]]:
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl:
        control["ttl"] = ttl
    return [{"type": "text", "text": text, "cache_control": control}]


async def create(client: anthropic.AsyncAnthropic, **kwargs: Any) -> anthropic.types.Message:
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("max_tokens", 512)
    return await client.messages.create(**kwargs)


# -- scripted replies ----------------------------------------------------------------------------


async def test_text_reply_round_trips(double: MessagesDouble, client: anthropic.AsyncAnthropic):
    double.script("turn", [{"text": "Tuesday at 10 works."}])

    message = await create(client, messages=[user("Can I come Tuesday?")])

    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Tuesday at 10 works."
    assert message.stop_reason == "end_turn"
    assert message.id == "msg_double_0001"
    assert message.model == MODEL
    assert message._request_id == "req_double_0001"
    assert message.usage.output_tokens >= 1
    assert message.usage.cache_creation.ephemeral_5m_input_tokens == 0
    assert double.leftover() == {}
    [call] = double.calls
    assert (call.purpose, call.status) == ("turn", 200)
    assert call.request["messages"][0]["content"][0]["text"] == "Can I come Tuesday?"
    assert double.usage_totals()["output_tokens"] == message.usage.output_tokens


async def test_tool_shorthands_give_deterministic_ids(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script(
        "turn",
        [
            {
                "text": "Let me check.",
                "tools": [
                    {"tool": "find_slots", "input": {"day": "2026-03-03"}},
                    {"tool": "get_services", "input": {}},
                ],
            },
            {"tool": "book", "input": {"slot": "s1"}},
        ],
    )
    first = await create(client, messages=[user("Tuesday?")])
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use", "tool_use"]
    assert [block.id for block in first.content[1:]] == ["toolu_double_0001", "toolu_double_0002"]
    assert first.content[1].input == {"day": "2026-03-03"}

    results = [
        {"type": "tool_result", "tool_use_id": block.id, "content": "ok"}
        for block in first.content[1:]
    ]
    history = [
        user("Tuesday?"),
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": results},
    ]
    second = await create(client, messages=history)
    assert second.content[0].name == "book"
    assert second.content[0].id == "toolu_double_0003"
    assert double.leftover() == {}


async def test_sync_client_in_a_thread(double: MessagesDouble):
    double.script("turn", [{"text": "from a worker thread"}])

    def call() -> anthropic.types.Message:
        with anthropic.Anthropic(api_key=KEY, base_url=double.base_url, max_retries=0) as sdk:
            return sdk.messages.create(model=MODEL, max_tokens=64, messages=[user("hi")])

    message = await asyncio.to_thread(call)
    assert message.content[0].text == "from a worker thread"


async def test_purposes_have_separate_queues(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "turn reply"}])
    double.script("summary", [{"text": "summary reply"}])

    summary = await create(
        client, messages=[user("summarise")], extra_headers={"x-wagent-purpose": "summary"}
    )
    turn = await create(client, messages=[user("hi")])

    assert summary.content[0].text == "summary reply"
    assert turn.content[0].text == "turn reply"
    assert [call.purpose for call in double.calls] == ["summary", "turn"]


async def test_full_response_body_passes_through(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script(
        "facts",
        [{"content": [{"type": "text", "text": "cut"}], "stop_reason": "max_tokens"}],
    )
    message = await create(
        client, messages=[user("facts?")], extra_headers={"x-wagent-purpose": "facts"}
    )
    assert message.stop_reason == "max_tokens"
    assert message.stop_sequence is None
    assert message.id.startswith("msg_double_")


# -- errors --------------------------------------------------------------------------------------


async def test_temperature_is_rejected(double: MessagesDouble, client: anthropic.AsyncAnthropic):
    double.script("turn", [{"text": "never sent"}])
    with pytest.raises(anthropic.BadRequestError) as caught:
        await create(client, messages=[user("hi")], extra_body={"temperature": 1.0})
    assert caught.value.status_code == 400
    assert "temperature: Extra inputs are not permitted" in str(caught.value)
    assert caught.value.request_id is not None
    assert double.api_errors == 1
    assert double.leftover() == {"turn": 1}


TOOL_USE = {"type": "tool_use", "id": "toolu_x", "name": "find_slots", "input": {}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_x", "content": "none"}


def _five_breakpoints() -> dict[str, Any]:
    marked = {"cache_control": {"type": "ephemeral"}}
    return {
        "system": [{"type": "text", "text": f"part {i}", **marked} for i in range(3)],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a", **marked},
                    {"type": "text", "text": "b", **marked},
                ],
            }
        ],
    }


INVALID_REQUESTS: dict[str, tuple[dict[str, Any], str]] = {
    "orphan tool_result": (
        {
            "messages": [
                user("hi"),
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [TOOL_RESULT]},
            ]
        },
        "unexpected `tool_use_id` found in `tool_result` blocks",
    ),
    "tool_use without result": (
        {"messages": [user("hi"), {"role": "assistant", "content": [TOOL_USE]}, user("well?")]},
        "`tool_use` ids were found without `tool_result` blocks immediately after",
    ),
    "empty text block": (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
        "text content blocks must be non-empty",
    ),
    "whitespace text block": (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "  \n"}]}]},
        "text content blocks must contain non-whitespace text",
    ),
    "fifth breakpoint": (
        _five_breakpoints(),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    "text before results after merging": (
        {
            "messages": [
                user("hi"),
                {"role": "assistant", "content": [TOOL_USE]},
                user("also this"),
                {"role": "user", "content": [TOOL_RESULT]},
            ]
        },
        "`tool_result` block(s) at the beginning of this message",
    ),
    "prefill": (
        {"messages": [user("hi"), {"role": "assistant", "content": "Sure"}]},
        "does not support assistant message prefill",
    ),
}


@pytest.mark.parametrize("case", list(INVALID_REQUESTS))
async def test_invalid_requests_get_400(
    case: str, double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    request, expected = INVALID_REQUESTS[case]
    double.script("turn", [{"text": "never sent"}])
    with pytest.raises(anthropic.BadRequestError) as caught:
        await create(client, **request)
    assert expected in str(caught.value)
    assert caught.value.type == "invalid_request_error"
    assert double.api_errors == 1
    assert double.calls[-1].status == 400
    assert double.calls[-1].response["type"] == "error"
    assert double.leftover() == {"turn": 1}


async def test_injected_overload(double: MessagesDouble, client: anthropic.AsyncAnthropic):
    double.script("turn", [{"text": "after the storm"}])
    double.fail("turn", 529)

    with pytest.raises(anthropic.OverloadedError):
        await create(client, messages=[user("hi")])
    message = await create(client, messages=[user("hi")])

    assert message.content[0].text == "after the storm"
    assert double.api_errors == 0
    assert [call.status for call in double.calls] == [529, 200]


async def test_injected_rate_limit_repeats(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.fail("summary", 429, times=2)
    for _ in range(2):
        with pytest.raises(anthropic.RateLimitError):
            await create(
                client, messages=[user("hi")], extra_headers={"x-wagent-purpose": "summary"}
            )
    with pytest.raises(anthropic.InternalServerError):  # no failure left, nothing scripted
        await create(client, messages=[user("hi")], extra_headers={"x-wagent-purpose": "summary"})


async def test_unscripted_call(double: MessagesDouble, client: anthropic.AsyncAnthropic):
    with pytest.raises(anthropic.InternalServerError) as caught:
        await create(client, messages=[user("hi")])
    assert "unscripted call for purpose turn" in str(caught.value)
    assert double.unscripted_calls == 1
    assert double.api_errors == 0


async def test_wrong_key_is_401(double: MessagesDouble):
    sdk = anthropic.AsyncAnthropic(api_key="wrong", base_url=double.base_url, max_retries=0)
    try:
        with pytest.raises(anthropic.AuthenticationError):
            await create(sdk, messages=[user("hi")])
    finally:
        await sdk.close()


async def test_missing_version_header_is_400(double: MessagesDouble):
    body = {"model": MODEL, "max_tokens": 5, "messages": [user("hi")]}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{double.base_url}/v1/messages", json=body, headers={"x-api-key": KEY}
        ) as response:
            payload = await response.json()
            assert response.status == 400
            assert response.headers["request-id"] == payload["request_id"]
    assert payload["error"]["type"] == "invalid_request_error"
    assert "anthropic-version" in payload["error"]["message"]
    assert double.api_errors == 1


# -- cache model ---------------------------------------------------------------------------------


async def test_identical_calls_read_what_the_first_wrote(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "one"}, {"text": "two"}])

    first = await create(client, system=cached_system(), messages=[user("hi")])
    second = await create(client, system=cached_system(), messages=[user("hi")])

    assert first.usage.cache_creation_input_tokens > 1024
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == (
        first.usage.cache_creation_input_tokens
    )
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens
    totals = double.usage_totals()
    assert totals["cache_read_input_tokens"] == second.usage.cache_read_input_tokens


@pytest.mark.parametrize(("ttl", "survives"), [(None, False), ("1h", True)])
async def test_ttl_is_measured_on_the_product_clock(
    ttl: str | None,
    survives: bool,
    clock: FrozenClock,
    double: MessagesDouble,
    client: anthropic.AsyncAnthropic,
):
    double.script("turn", [{"text": "one"}, {"text": "two"}])
    first = await create(client, system=cached_system(ttl), messages=[user("hi")])
    if ttl == "1h":
        assert first.usage.cache_creation.ephemeral_1h_input_tokens > 0

    clock.advance(timedelta(minutes=6))
    second = await create(client, system=cached_system(ttl), messages=[user("hi")])

    expected_read = first.usage.cache_creation_input_tokens if survives else 0
    assert second.usage.cache_read_input_tokens == expected_read


async def test_a_hit_refreshes_the_entry(
    clock: FrozenClock, double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "a"}, {"text": "b"}, {"text": "c"}])
    first = await create(client, system=cached_system(), messages=[user("hi")])
    for _ in range(2):
        clock.advance(timedelta(minutes=4))
        later = await create(client, system=cached_system(), messages=[user("hi")])
        assert later.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


async def test_growing_conversation_reads_the_previous_prefix(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "Which day?"}, {"text": "Booked."}])
    marked = {"cache_control": {"type": "ephemeral"}}

    first = await create(client, system=cached_system(), messages=[user("A haircut", **marked)])
    first_prefix = first.usage.cache_creation_input_tokens
    grown = [
        user("A haircut"),
        {"role": "assistant", "content": "Which day?"},
        user("Tuesday", **marked),
    ]
    second = await create(client, system=cached_system(), messages=grown)

    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.input_tokens == 0
    assert second.usage.cache_read_input_tokens == first_prefix
    assert second.usage.cache_creation_input_tokens > 0
    assert second.usage.input_tokens == 0


async def test_automatic_caching_moves_with_the_conversation(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "Which day?"}, {"text": "Booked."}])
    auto = {"type": "ephemeral"}
    history = [user(BIG_SYSTEM)]

    first = await create(client, messages=history, cache_control=auto)
    history += [{"role": "assistant", "content": "Which day?"}, user("Tuesday")]
    second = await create(client, messages=history, cache_control=auto)

    assert first.usage.cache_creation_input_tokens > 1024
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


async def test_short_prefix_caches_nothing(
    double: MessagesDouble, client: anthropic.AsyncAnthropic
):
    double.script("turn", [{"text": "one"}, {"text": "two"}])
    for _ in range(2):
        message = await create(client, system=cached_system(text="Short."), messages=[user("hi")])
        assert message.usage.cache_creation_input_tokens == 0
        assert message.usage.cache_read_input_tokens == 0
        assert message.usage.input_tokens > 0


async def test_a_different_model_misses(double: MessagesDouble, client: anthropic.AsyncAnthropic):
    double.script("turn", [{"text": "one"}, {"text": "two"}])
    await create(client, system=cached_system(), messages=[user("hi")])
    other = await create(
        client, model="claude-haiku-4-5", system=cached_system(), messages=[user("hi")]
    )
    assert other.usage.cache_read_input_tokens == 0


async def test_lookback_is_twenty_blocks(clock: FrozenClock):
    double = MessagesDouble(clock=clock.now, min_cacheable_tokens=1)
    marked = {"cache_control": {"type": "ephemeral"}}
    start = {"model": MODEL, "max_tokens": 5, "messages": [user("start", **marked)]}

    def grown(notes: int) -> dict[str, Any]:
        blocks = [{"type": "text", "text": f"note {i}"} for i in range(notes)]
        blocks[-1] = {**blocks[-1], **marked}
        later = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": blocks}]
        return {"model": MODEL, "max_tokens": 5, "messages": [user("start"), *later]}

    first = double.cache.account(start)
    near = double.cache.account(grown(18))  # breakpoint at 19 looks back to position 0
    double.cache.clear()
    double.cache.account(start)
    far = double.cache.account(grown(19))  # breakpoint at 20 looks back to position 1 only

    assert near["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert far["cache_read_input_tokens"] == 0


# -- pure functions ------------------------------------------------------------------------------


def test_count_tokens_ignores_cache_control():
    block = {"type": "text", "text": "abcd"}  # '{"text":"abcd","type":"text"}' is 29 bytes
    assert count_tokens(block) == 8
    assert count_tokens({**block, "cache_control": {"type": "ephemeral"}}) == 8
    assert count_tokens({"type": "text", "text": "é"}) == 7  # 27 UTF-8 bytes: é is two


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"top_k": 5}, "top_k: Extra inputs are not permitted"),
        ({"betas": ["x"]}, "betas: Extra inputs are not permitted"),
        ({"stream": True}, "stream"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"model": None}, "model"),
        ({"messages": []}, "at least one message"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message"),
        ({"messages": [{"role": "system", "content": "hi"}]}, "role"),
        ({"tools": [{"name": "a"}, {"name": "a"}]}, "Tool names must be unique."),
        ({"system": [{"type": "image"}]}, "system.0.type"),
        ({"cache_control": {"type": "persistent"}}, "cache_control.type"),
        ({"cache_control": {"type": "ephemeral", "ttl": "2h"}}, "ttl"),
        (
            {
                "system": [
                    {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                    {
                        "type": "text",
                        "text": "b",
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    },
                ]
            },
            "ttl='1h' must not come after",
        ),
    ],
)
def test_validate_request_rejects(change: dict[str, Any], expected: str):
    body = {"model": MODEL, "max_tokens": 10, "messages": [user("hi")], **change}
    problem = validate_request(body)
    assert problem is not None
    assert expected in problem


def test_validate_request_accepts_a_full_tool_exchange():
    body = {
        "model": MODEL,
        "max_tokens": 10,
        "system": "You book appointments.",
        "tools": [{"name": "find_slots", "input_schema": {"type": "object"}}],
        "messages": [
            user("Tuesday?"),
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, TOOL_USE]},
            {"role": "user", "content": [TOOL_RESULT, {"type": "text", "text": "thanks"}]},
        ],
        "cache_control": {"type": "ephemeral"},
    }
    assert validate_request(body) is None
