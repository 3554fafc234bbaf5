"""Property tests of the window and the request builder over arbitrary valid histories.

Oracle: the Messages API double's validator, which enforces the real API's rules.
"""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent import media
from agent.context import TenantPrompt, build_request, context_block
from agent.tools.registry import REGISTRY
from agent.window import (
    Stored,
    estimate_tokens,
    first_safe_start,
    is_turn_start,
    last_safe_start,
    prune,
    prune_boundary,
    safe_start,
    select_window,
    to_api_messages,
    tool_result_text,
)
from replay.media_steps import png_bytes
from replay.messages_api import validate_request
from workers.compaction import pick_compactable, render_transcript

TENANT = TenantPrompt(name="Salão", timezone="America/Sao_Paulo", language="pt-BR",
                      instructions="Seja breve.", model="claude-sonnet-5-5")


@st.composite
def histories(draw: Any) -> list[Stored]:
    """Stored histories as a turn writes them: bursts of user texts, texts arriving mid-turn
    (folded in right after a round's tool results), tool rounds with parallel calls, empty text
    blocks, reactions.
    """
    messages: list[Stored] = []
    next_id = iter(range(1, 10_000))
    tool_ids = iter(range(1, 10_000))
    for _ in range(draw(_TURNS)):
        for _ in range(draw(_ONE_TO_THREE)):  # a burst
            text = draw(_TEXTS)
            photo = draw(_ATTACHED)  # a photo or PDF with it
            messages.append(_at(next(next_id), "user", [{"type": "text", "text": text}, *photo]))
        for _ in range(draw(_ROUNDS)):  # tool rounds
            uses = [{"type": "tool_use", "id": f"toolu_{next(tool_ids)}", "name": "list_services",
                     "input": {}} for _ in range(draw(_ONE_TO_THREE))]
            lead = draw(_LEADS)
            messages.append(_at(next(next_id), "assistant", lead + uses))
            results = [{"type": "tool_result", "tool_use_id": u["id"],
                        "content": "Free slots:\nTue: 09:00 julia, 09:30 julia"}
                       for u in uses]
            messages.append(_at(next(next_id), "user", results))
            for _ in range(draw(_MID_TURN)):  # arrived mid-turn, folded in
                messages.append(_at(next(next_id), "user", [{"type": "text",
                                                             "text": "ah, e a escova?"}]))
        messages.append(_at(next(next_id), "assistant", [{"type": "text", "text": "Feito!"}]))
    pending = draw(_ONE_TO_THREE)
    for _ in range(pending):
        messages.append(_at(next(next_id), "user", [{"type": "text", "text": "e amanhã?"}]))
    return messages


PHOTO_BYTES = png_bytes(40, 30)
PDF_BYTES = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n%%EOF"
PHOTO = media.stored_block(1, media.check_file(PHOTO_BYTES, "image/png"))
PDF = media.stored_block(2, media.check_file(PDF_BYTES, "application/pdf"))
# The strategies `histories` draws from, made once: built inside it, hypothesis made and
# validated about 50 of them per example (a third of the property's time), for the same draws.
_TURNS = st.integers(1, 8)
_ONE_TO_THREE = st.integers(1, 3)
_ROUNDS = st.integers(0, 3)
_MID_TURN = st.integers(0, 2)
_TEXTS = st.sampled_from(["oi", "[reaction 👍 to one of our messages]", "pode ser"])
_ATTACHED = st.sampled_from([[], [], [PHOTO], [PDF]])  # a photo or PDF with it, or none
_LEADS = st.sampled_from([[], [{"type": "text", "text": ""}],
                          [{"type": "text", "text": "Vou ver."}]])


def _load(media_file_id: int) -> bytes:
    return PHOTO_BYTES if media_file_id == 1 else PDF_BYTES


def _at(number: int, role: str, content: list[dict[str, Any]]) -> Stored:
    return Stored(number, role, content, position=number)


def _request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The request, stored photos and PDFs inlined as a turn does (workers/turns.inline_media)."""
    return build_request(tenant=TENANT, tools=REGISTRY,
                         context=context_block(["preferred_name: Ana"], "Ana booked a haircut."),
                         messages=media.inline(messages, _load), max_tokens=512,
                         metadata_user_id="x")


@settings(max_examples=2000, deadline=None)
@given(histories(), st.integers(0, 40), st.integers(0, 80), st.integers(0, 80),
       st.booleans())
def test_every_window_is_a_valid_request_after_the_summary(
        history: list[Stored], keep: int, summarized: int, pruned: int, hard_cap: bool) -> None:
    """Over 2,000 histories: whatever the summary's end, the prune boundary and the hard cap,
    the request is valid (the double's rules), starts with a user text, and carries no
    message at or before the summary's end.
    """
    summarized = min(summarized, history[-1].position - 1)
    window = prune(select_window(history, summarized_until=summarized, keep=keep,
                                 hard_cap=hard_cap), pruned_until=pruned)
    messages = to_api_messages(window)
    assert messages, "the pending user messages always remain"
    assert all(m.position > summarized for m in window)
    assert messages[0]["role"] == "user"
    assert all(b["type"] in ("text", "image", "document") for b in messages[0]["content"])
    assert validate_request(_request(messages)) is None
    if hard_cap:
        after = [m for m in history if m.position > summarized]
        assert len(window) <= max(keep, 1) or window == after[last_safe_start(after):], \
            "the last keep messages, or the latest turn whole when it is longer"


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 40))
def test_every_safe_window_is_a_valid_request(history: list[Stored], keep: int) -> None:
    start = safe_start(history, keep)
    window = history[start:]
    messages = to_api_messages(window)
    assert messages, "the pending user messages always remain"
    assert messages[0]["role"] == "user"
    assert all(b["type"] in ("text", "image", "document") for b in messages[0]["content"])
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
    assert [t["name"] for t in first["tools"]] == sorted(
        t.name for t in REGISTRY if t.name != "remember_fact"), "no fact keys: no remember_fact"
    assert first["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral",
                                                                       "ttl": "1h"}
    assert "cache_control" not in second["messages"][0]["content"][-1]
    assert "not instructions" in first["system"][1]["text"]
    assert "Ana" in first["system"][1]["text"]
    assert messages[0]["content"][0].get("cache_control") is None, "input never mutated"


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 80), st.integers(0, 80))
def test_pruning_is_deterministic_and_keeps_pairs(history: list[Stored], a: int, b: int) -> None:
    low, high = sorted((a, b))
    once = prune(history, pruned_until=high)
    assert once == prune(history, pruned_until=high), "same input, same bytes"
    assert prune(once, pruned_until=high) == once, "once pruned, stays pruned"
    assert prune(prune(history, pruned_until=low), pruned_until=high) == once
    for before, after in zip(history, once, strict=True):
        ids = [x.get("tool_use_id") for x in before.content]
        assert ids == [x.get("tool_use_id") for x in after.content]
        if before.position > high:
            assert before == after
        else:  # a photo or PDF at or before the boundary is a note: never sent again
            assert not any(media.is_media(x) for x in after.content)
            assert len(before.content) == len(after.content)
    assert validate_request(_request(to_api_messages(once))) is None


def test_a_pruned_slot_list_says_what_was_there() -> None:
    history = [
        Stored(1, "user", [{"type": "text", "text": "horários?"}], 1),
        Stored(2, "assistant", [{"type": "tool_use", "id": "t1", "name": "find_available_slots",
                                 "input": {"service": "corte"}}], 2),
        Stored(3, "user", [{"type": "tool_result", "tool_use_id": "t1",
                            "content": "Tue: 09:00 julia, 09:30 julia, 10:00 ana"}], 3),
    ]
    pruned = prune(history, pruned_until=3)
    assert pruned[2].content == [{"type": "tool_result", "tool_use_id": "t1",
                                  "content": "result omitted: 3 slots listed"}]


def test_a_tool_result_reads_the_same_for_pruning_and_the_summariser() -> None:
    """One rule for a result's text: a string as it is, a list's texts one per line."""
    blocks = [{"type": "text", "text": "Tue 09:00 julia"},
              {"type": "text", "text": "Wed 10:00 ana"}]
    assert tool_result_text("ok") == "ok"
    assert tool_result_text(blocks) == "Tue 09:00 julia\nWed 10:00 ana"
    assert tool_result_text(None) == ""
    history = [
        Stored(1, "user", [{"type": "text", "text": "agenda?"}], 1),
        Stored(2, "assistant", [{"type": "tool_use", "id": "t1", "name": "list_appointments",
                                 "input": {}}], 2),
        Stored(3, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": blocks}], 3),
    ]
    assert render_transcript(history).endswith("Tool result: Tue 09:00 julia\nWed 10:00 ana")
    assert prune(history, pruned_until=3)[2].content[0]["content"] == \
        "result omitted: list_appointments returned 2 line(s)"


def test_prune_boundary_keeps_the_last_user_turns_whole() -> None:
    turn = [("user", "text"), ("assistant", "tool_use"), ("user", "tool_result"),
            ("assistant", "text")]
    history = []
    for n, (role, kind) in enumerate(turn * 3, 1):
        block: dict[str, Any] = ({"type": "text", "text": "x"} if kind == "text" else
                                 {"type": "tool_use", "id": f"t{n}", "name": "list_services",
                                  "input": {}} if kind == "tool_use" else
                                 {"type": "tool_result", "tool_use_id": f"t{n - 1}",
                                  "content": "ok"})
        history.append(Stored(n, role, [block], n))
    assert prune_boundary(history, keep_user_turns=2) == 4   # turns 2 and 3 stay whole
    assert prune_boundary(history, keep_user_turns=3) == 0
    assert prune_boundary(history, keep_user_turns=5) == 0


def _inside_a_burst(messages: list[Stored], index: int) -> bool:
    """`index` is a user message right after another user message: they merge into one API
    message, one turn of the customer's."""
    return 0 < index < len(messages) and messages[index].role == "user" \
        and messages[index - 1].role == "user"


@settings(max_examples=1000, deadline=None)
@given(histories(), st.integers(0, 40), st.integers(0, 60), st.integers(0, 80),
       st.integers(0, 5))
def test_no_start_fold_point_or_prune_boundary_falls_inside_a_burst(
        history: list[Stored], keep: int, cut: int, summarized: int, turns: int) -> None:
    """Over generated histories with bursts and folded mid-turn texts: the window's start (hard
    cap or not), the compaction's fold point and the prune boundary are never inside a run of
    consecutive customer messages, and every customer message goes to one side whole."""
    assert not _inside_a_burst(history, safe_start(history, keep))
    assert not _inside_a_burst(history, first_safe_start(history, cut))
    summarized = min(summarized, history[-1].position - 1)
    after = [m for m in history if m.position > summarized]
    for hard_cap in (False, True):
        window = select_window(history, summarized_until=summarized, keep=keep,
                               hard_cap=hard_cap)
        assert window, "the pending customer messages always remain"
        assert not _inside_a_burst(after, len(after) - len(window))
    plan = pick_compactable(after, keep=keep)
    if plan is not None:
        assert not _inside_a_burst(after, len(plan.covered))
        assert plan.kept[0].role == "user"
    boundary = prune_boundary(after, keep_user_turns=turns)
    index = next((i for i, m in enumerate(after) if m.position == boundary), -1)
    assert not _inside_a_burst(after, index + 1), "the boundary never cuts a burst"


BURST = ["nao, pode deixar quarta", "mas olha, a dor piorou muito hj, tipo 9 de 10",
         "o que eu faço?"]


def _conversation(*turns: tuple[list[str], str]) -> list[Stored]:
    messages: list[Stored] = []
    for texts, answer in turns:
        for text in texts:
            messages.append(_at(len(messages) + 1, "user", [{"type": "text", "text": text}]))
        messages.append(_at(len(messages) + 1, "assistant", [{"type": "text", "text": answer}]))
    return messages


def test_a_compaction_never_folds_part_of_a_burst() -> None:
    """The trial's case: three messages sent in a row are one turn. With the fold point on the
    third, the summary got the first two without the agent's answer; now the burst and its
    answer go to the summary together, or stay in the window together."""
    history = _conversation((["quero marcar uma consulta"], "Tem quarta às 10h."),
                            (BURST, "Com dor 9 de 10, procure um pronto-socorro agora."))
    assert safe_start(history, keep=2) == 2, "the burst's first message, never its third"
    plan = pick_compactable(history, keep=2)
    assert plan is not None
    assert [b["text"] for m in plan.kept for b in m.content] == [
        *BURST, "Com dor 9 de 10, procure um pronto-socorro agora."]
    later = history + _conversation((["ok, obrigada"], "Melhoras!"))[:2]
    plan = pick_compactable(later, keep=3)
    assert plan is not None
    folded = [b["text"] for m in plan.covered for b in m.content]
    assert folded[-4:] == [*BURST, "Com dor 9 de 10, procure um pronto-socorro agora."]
    assert [b["text"] for m in plan.kept for b in m.content] == ["ok, obrigada", "Melhoras!"]


def test_the_hard_cap_sends_a_long_pending_burst_whole() -> None:
    history = _conversation((["oi"], "Olá!")) + [
        _at(3 + i, "user", [{"type": "text", "text": text}]) for i, text in enumerate(BURST)]
    window = select_window(history, summarized_until=0, keep=1, hard_cap=True)
    assert [b["text"] for m in window for b in m.content] == BURST


def test_a_message_with_nothing_to_send_neither_starts_nor_joins_a_burst() -> None:
    """An edit that arrives before its original claims the original's wamid with an empty row
    (intake/follow_ups.py `follow_up`); that row is placed in the history but sends nothing, so the
    edit right after it is still the start of its turn, and the window is never empty."""
    history = _conversation((["oi"], "Olá!")) + [
        _at(3, "user", []),
        _at(4, "user", [{"type": "text", "text": "[the customer edited an earlier message "
                                                 "to:] quinta de manhã"}])]
    assert first_safe_start(history, 2) == 3
    assert select_window(history, summarized_until=2, keep=8, hard_cap=False) == history[3:]
    after_tool_use = [_at(1, "user", [{"type": "text", "text": "oi"}]),
                      _at(2, "assistant", [{"type": "tool_use", "id": "toolu_1",
                                            "name": "list_services", "input": {}}]),
                      _at(3, "user", [{"type": "text", "text": ""}]),
                      _at(4, "user", [{"type": "text", "text": "e amanhã?"}])]
    assert first_safe_start(after_tool_use, 1) == len(after_tool_use), \
        "an empty row between a tool_use and a text hides nothing: no start there"


def test_a_conversation_staff_opened_starts_with_the_staff_message_as_context() -> None:
    """Staff wrote first (a reply or an owner's echo before any customer message): the window
    starts with it, labelled, on the user side, merged with the customer's message."""
    from agent.timeline import stored

    class Row:
        def __init__(self, id: int, role: str, text: str, author: str | None) -> None:
            self.id, self.role, self.position, self.author = id, role, id, author
            self.content = [{"type": "text", "text": text}]
    history = [stored(Row(1, "assistant", "[equipe: Júlia] Oi!", "staff:Júlia")),
               stored(Row(2, "user", "oi", None))]
    messages = to_api_messages(select_window(history, summarized_until=0, keep=4,
                                             hard_cap=False))
    assert messages == [{"role": "user", "content": [
        {"type": "text", "text": "[equipe: Júlia] Oi!"}, {"type": "text", "text": "oi"}]}]
    assert validate_request(_request(messages)) is None


def test_a_customer_message_with_a_photo_is_a_turn_start_and_a_tool_result_never() -> None:
    photo = _at(1, "user", [{"type": "text", "text": "[Mon] quero esse corte"}, PHOTO])
    alone = _at(1, "user", [PHOTO])
    result = _at(1, "user", [{"type": "tool_result", "tool_use_id": "t", "content": "x"},
                             PHOTO])
    assert is_turn_start(photo) and is_turn_start(alone) and not is_turn_start(result)
    history = [photo, _at(2, "assistant", [{"type": "text", "text": "Lindo!"}])]
    assert first_safe_start(history) == 0
    assert to_api_messages(select_window(history, summarized_until=0, keep=4,
                                         hard_cap=False))[0]["content"][1] == PHOTO


def test_a_photo_counts_by_its_pixels_and_is_pruned_to_a_note() -> None:
    history = [_at(1, "user", [{"type": "text", "text": "oi"}, PHOTO]),
               _at(2, "assistant", [{"type": "text", "text": "Lindo!"}]),
               _at(3, "user", [{"type": "text", "text": "e amanhã?"}])]
    assert estimate_tokens(history[:1]) == 7 + media.image_tokens(40, 30)  # 2 for 40x30 px
    pruned = prune(history, pruned_until=1)
    note = pruned[0].content[1]
    assert note["type"] == "text" and note["text"].startswith(media.OMITTED_PREFIX)
    assert "40x30" in note["text"] and pruned[1:] == history[1:]
    assert media.inline(to_api_messages(history), lambda _: None)[0]["content"][1] == \
        media.omitted_note(PHOTO), "bytes gone: the note, never a broken block"
