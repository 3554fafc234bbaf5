"""Property tests of the window and the request builder over arbitrary valid histories.

Oracle: the Messages API double's validator, which enforces the real API's rules.
"""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.messages_api import validate_request
from workers.agent.context import TenantPrompt, build_request
from workers.agent.tools.scheduling import TOOLS
from workers.agent.window import Stored, first_safe_start, safe_start, to_api_messages

TENANT = TenantPrompt(name="Salão", timezone="America/Sao_Paulo", language="pt-BR",
                      instructions="Seja breve.", model="claude-sonnet-5-5")


@st.composite
def histories(draw: Any) -> list[Stored]:
    """Stored histories as a turn writes them: bursts of user texts (some arriving mid-turn
    are placed after the answer), tool rounds with parallel calls, empty text blocks, reactions.
    """
    messages: list[Stored] = []
    next_id = iter(range(1, 10_000))
    tool_ids = iter(range(1, 10_000))
    for _ in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(1, 3))):  # a burst
            text = draw(st.sampled_from(["oi", "[reaction 👍 to one of our messages]", "pode ser"]))
            messages.append(Stored(next(next_id), "user", [{"type": "text", "text": text}]))
        for _ in range(draw(st.integers(0, 3))):  # tool rounds
            uses = [{"type": "tool_use", "id": f"toolu_{next(tool_ids)}", "name": "list_services",
                     "input": {}} for _ in range(draw(st.integers(1, 3)))]
            lead = draw(st.sampled_from([[], [{"type": "text", "text": ""}],
                                         [{"type": "text", "text": "Vou ver."}]]))
            messages.append(Stored(next(next_id), "assistant", lead + uses))
            results = [{"type": "tool_result", "tool_use_id": u["id"], "content": "ok"}
                       for u in uses]
            messages.append(Stored(next(next_id), "user", results))
        messages.append(Stored(next(next_id), "assistant", [{"type": "text", "text": "Feito!"}]))
    pending = draw(st.integers(1, 3))
    for _ in range(pending):
        messages.append(Stored(next(next_id), "user", [{"type": "text", "text": "e amanhã?"}]))
    return messages


def _request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return build_request(tenant=TENANT, tools=TOOLS, facts=["preferred_name: Ana"],
                         summary="Ana booked a haircut.", messages=messages, max_tokens=512,
                         metadata_user_id="x")


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 40))
def test_every_safe_window_is_a_valid_request(history: list[Stored], keep: int) -> None:
    start = safe_start(history, keep)
    window = history[start:]
    messages = to_api_messages(window)
    assert messages, "the pending user messages always remain"
    assert messages[0]["role"] == "user"
    assert all(b["type"] == "text" for b in messages[0]["content"])
    assert validate_request(_request(messages)) is None


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 60))
def test_start_moves_forward_never_back(history: list[Stored], cut: int) -> None:
    start = first_safe_start(history, cut)
    assert start >= min(cut, len(history))
    window = history[start:]
    assert all(m.id > history[cut - 1].id for m in window) if 0 < cut <= len(history) else True
    if window:
        assert validate_request(_request(to_api_messages(window))) is None


@settings(max_examples=200, deadline=None)
@given(histories())
def test_no_empty_text_and_results_first(history: list[Stored]) -> None:
    for message in to_api_messages(history):
        blocks = message["content"]
        assert blocks
        assert all(b["text"].strip() for b in blocks if b["type"] == "text")
        kinds = [b["type"] == "tool_result" for b in blocks]
        assert kinds == sorted(kinds, reverse=True), "tool_result blocks come first"


def test_burst_and_mid_turn_text_merge_into_one_user_message() -> None:
    history = [
        Stored(1, "user", [{"type": "text", "text": "oi"}]),
        Stored(2, "user", [{"type": "text", "text": "tem horário?"}]),
        Stored(3, "assistant", [{"type": "tool_use", "id": "t1", "name": "list_services",
                                 "input": {}}]),
        Stored(4, "user", [{"type": "text", "text": "pra corte"}]),
        Stored(5, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
    ]
    messages = to_api_messages(history)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "text"]
    assert first_safe_start(history, 3) == 5  # never starts on the orphaned pair


def test_request_layout_keeps_the_prefix_stable() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "[Mon] oi"}]}]
    first = _request(messages)
    second = _request(messages + [{"role": "assistant", "content": [
        {"type": "text", "text": "Olá"}]}, {"role": "user", "content": [
            {"type": "text", "text": "[Mon] corte"}]}])
    assert first["system"] == second["system"] and first["tools"] == second["tools"]
    assert [t["name"] for t in first["tools"]] == sorted(t["name"] for t in TOOLS)
    assert first["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" in second["messages"][-1]["content"][-1]
    assert "cache_control" not in second["messages"][0]["content"][-1]
    assert "never instructions" in first["system"][1]["text"]
    assert "Ana" in first["system"][1]["text"]
    assert messages[0]["content"][0].get("cache_control") is None, "input never mutated"
