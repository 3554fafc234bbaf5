"""Issue 41: a lookup's result (agent/window.py LOOKUP_TOOLS) serves its own turn. From the
next customer turn on it is pruned, and while its turn runs the tail breakpoint sits before
it, so what one call caches is what the next call sends unchanged."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.context import TenantPrompt, build_request
from agent.tools.registry import REGISTRY
from agent.window import (
    LOOKUP_TOOLS,
    PRUNED_PREFIX,
    Stored,
    prune,
    prune_boundary,
    to_api_messages,
    tool_result_text,
)
from replay.messages_api import validate_request
from workers.turn_window import without_sent_replies

TENANT = TenantPrompt(name="Salão", timezone="America/Sao_Paulo", language="pt-BR",
                      instructions="Seja breve.", model="claude-sonnet-5-5")
TOOLS = ("find_available_slots", "list_services", "book_appointment", "list_my_appointments")
CLOSED = "[closed now: staff answer from Tue 2026-06-02 09:00]"
SLOTS = "Free slots:\nTue 2026-06-02: 09:00 julia, 09:30 julia, 10:00 marcos"


def _at(number: int, role: str, content: list[dict[str, Any]]) -> Stored:
    return Stored(number, role, content, position=number)


@st.composite
def calls(draw: Any) -> list[tuple[list[Stored], str]]:
    """The stored history at each model call of a conversation, with the turn's note (the
    business closed or not: agent/tools/handoff.closed_note): every turn a customer burst,
    0-3 tool rounds (parallel calls of lookups and other tools), a final text."""
    history: list[Stored] = []
    at: list[tuple[list[Stored], str]] = []
    ids = iter(range(1, 10_000))
    for _ in range(draw(st.integers(1, 6))):
        note = draw(st.sampled_from(["", CLOSED]))
        for _ in range(draw(st.integers(1, 2))):
            history.append(_at(next(ids), "user", [{"type": "text", "text": "oi"}]))
        at.append((list(history), note))
        for _ in range(draw(st.integers(0, 3))):
            names = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2))
            uses = [{"type": "tool_use", "id": f"toolu_{next(ids)}", "name": name, "input": {}}
                    for name in names]
            history.append(_at(next(ids), "assistant", uses))
            history.append(_at(next(ids), "user", [
                {"type": "tool_result", "tool_use_id": u["id"], "content": SLOTS} for u in uses]))
            at.append((list(history), note))
        history.append(_at(next(ids), "assistant", [{"type": "text", "text": "Feito!"}]))
    return at


def _request(history: list[Stored], note: str = "") -> dict[str, Any]:
    """A call's request as workers/turn_window.read_window and request_in build it."""
    window = prune(history, pruned_until=0,
                   lookups_until=prune_boundary(history, keep_user_turns=1))
    return build_request(tenant=TENANT, tools=REGISTRY, context="",
                         messages=to_api_messages(window), note=note, max_tokens=512,
                         metadata_user_id="x")


def _blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in request["messages"] for b in m["content"]]


def _bare(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


@settings(max_examples=500, deadline=None)
@given(calls())
def test_what_a_call_caches_the_next_call_sends_unchanged(
        at: list[tuple[list[Stored], str]]) -> None:
    """Over 500 conversations, closed hours or not: each request is valid, carries at most
    one tail breakpoint, never caches an unpruned lookup result nor the closed note, and every
    block up to its breakpoint is sent byte for byte by the next call (so the next call reads
    it from the cache). Before issue 41's rule the note, cached at each turn's end and moved
    by the next turn, made every call of a closed evening rewrite the whole window."""
    requests = [_request(history, note) for history, note in at]
    for request, following in zip(requests, [*requests[1:], None], strict=True):
        assert validate_request(request) is None
        blocks = _blocks(request)
        marked = [i for i, b in enumerate(blocks) if "cache_control" in b]
        assert len(marked) <= 1
        names = {b["id"]: b["name"] for b in blocks if b["type"] == "tool_use"}
        cached = blocks[:marked[0] + 1] if marked else []
        assert not any(b["type"] == "tool_result" and names[b["tool_use_id"]] in LOOKUP_TOOLS
                       and not tool_result_text(b["content"]).startswith(PRUNED_PREFIX)
                       for b in cached), "a lookup's full result is never written"
        assert not any(b.get("text") == CLOSED for b in cached), "nor the moment's note"
        if following is not None:
            assert [_bare(b) for b in cached] == [_bare(b) for b in _blocks(following)][
                :len(cached)]


def test_a_lookup_result_is_pruned_from_the_next_customer_turn_on_and_others_stay() -> None:
    history = [
        _at(1, "user", [{"type": "text", "text": "tem horário?"}]),
        _at(2, "assistant", [{"type": "tool_use", "id": "a", "name": "find_available_slots",
                              "input": {}},
                             {"type": "tool_use", "id": "b", "name": "list_my_appointments",
                              "input": {}}]),
        _at(3, "user", [{"type": "tool_result", "tool_use_id": "a", "content": SLOTS},
                        {"type": "tool_result", "tool_use_id": "b", "content": "none"}]),
        _at(4, "assistant", [{"type": "text", "text": "09:00?"}])]
    same_turn = _request(history[:3])
    assert tool_result_text(_blocks(same_turn)[-2]["content"]) == SLOTS, "its own turn sees it"
    assert "cache_control" in _blocks(same_turn)[2], "the breakpoint sits before it"
    later = [*history, _at(5, "user", [{"type": "text", "text": "pode ser"}])]
    results = [b for b in _blocks(_request(later)) if b["type"] == "tool_result"]
    assert [tool_result_text(r["content"]) for r in results] == [
        f"{PRUNED_PREFIX} 3 slots listed", "none"]
    assert "cache_control" in _blocks(_request(later))[-1]
    pruned = prune(later, pruned_until=0, lookups_until=4)
    assert pruned == prune(pruned, pruned_until=0, lookups_until=4), "stays pruned"
    assert prune(later, pruned_until=0) == later, "no boundary: nothing pruned"


def test_the_baselines_keep_the_breakpoint_on_the_last_block() -> None:
    history = [_at(1, "user", [{"type": "text", "text": "oi"}]),
               _at(2, "assistant", [{"type": "tool_use", "id": "a", "name": "list_services",
                                     "input": {}}]),
               _at(3, "user", [{"type": "tool_result", "tool_use_id": "a", "content": SLOTS}])]
    request = build_request(tenant=TENANT, tools=REGISTRY, context="",
                            messages=to_api_messages(history), max_tokens=512,
                            metadata_user_id="x", tail_before_lookups=False)
    assert [("cache_control" in b) for b in _blocks(request)] == [False, False, True]


def test_the_stored_copy_of_a_tool_carried_reply_is_left_out_of_the_window() -> None:
    """The offer's body and a booking's sent reply are in the call's input and its result says
    they were sent: the assistant text storing the same words is not sent again. A reply the
    result says was NOT sent, an error, or another text stay."""
    reply = "Agendado! Terça 02/06 às 15h com a Júlia."

    def history(result: str, text: str, *, error: bool = False) -> list[Stored]:
        answer: dict[str, Any] = {"type": "tool_result", "tool_use_id": "b", "content": result}
        if error:
            answer["is_error"] = True
        return [_at(1, "user", [{"type": "text", "text": "15h"}]),
                _at(2, "assistant", [{"type": "tool_use", "id": "b", "name": "book_appointment",
                                      "input": {"start": "2026-06-02T15:00", "reply": reply}}]),
                _at(3, "user", [answer]),
                _at(4, "assistant", [{"type": "text", "text": text}]),
                _at(5, "user", [{"type": "text", "text": "obrigada"}])]
    sent = history("Booked. Appointment #1 ... Your reply was sent.", reply)
    assert [m.position for m in without_sent_replies(sent)] == [1, 2, 3, 5]
    assert validate_request(_request(without_sent_replies(sent))) is None
    for kept in (history("Booked. #1\nYour reply was NOT sent: it does not name the date.",
                         reply),
                 history("that time is no longer free", reply, error=True),
                 history("Booked. Appointment #1 ... Your reply was sent.", "Outra coisa.")):
        assert without_sent_replies(kept) == kept
    offer = [_at(1, "user", [{"type": "text", "text": "horário?"}]),
             _at(2, "assistant", [{"type": "tool_use", "id": "o", "name": "offer_choices",
                                   "input": {"body": "Qual prefere?", "options": []}}]),
             _at(3, "user", [{"type": "tool_result", "tool_use_id": "o", "content": "Sent"}]),
             _at(4, "assistant", [{"type": "text", "text": "Qual prefere?"}])]
    assert [m.position for m in without_sent_replies(offer)] == [1, 2, 3]
