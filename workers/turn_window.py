"""What a turn sends the model, read from the database: the window of stored messages (from a
safe start after the summary's end, old tool results pruned, agent/window.py), its photos and
PDFs inlined, the context block (system[1]) and the request builder with the tenant's catalogue.

`prepare` reads all of it in one transaction, so a compaction is seen whole or not at all;
`ensure_context_block` renders system[1] at a session's first turn; `dangling_rounds` finds the
tool rounds a crash left without results (workers/turns.py repairs them).
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from sqlmodel import Session

from agent import catalogue
from agent.context import TenantPrompt, build_request, opaque_user_id
from agent.loop import RequestBuilder
from agent.media import inline, stored_media_ids
from agent.timeline import timeline
from agent.tools.base import Tool
from agent.tools.handoff import closed_note
from agent.tools.registry import REGISTRY, tool_reply
from agent.window import (
    Block,
    Stored,
    find_dangling,
    prune,
    prune_boundary,
    select_window,
    to_api_messages,
    tool_result_text,
)
from core import clock
from core.settings import Settings
from storage import memory
from storage.db import session_scope
from storage.fact_keys import resolve_keys
from storage.media import load_files
from storage.models import Conversation, Message, Tenant
from workers.conversation_state import ConversationState
from workers.facts import render_context_block
from workers.runtime import Runtime

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Window:
    messages: list[Stored]
    context_block: str
    hard_cap: bool


@dataclass(frozen=True)
class Prepared:
    """A turn's first request, ready: the API messages (media inlined) and the builder that
    makes each round's request from them."""

    messages: list[dict[str, Any]]
    request_for: RequestBuilder
    hard_cap: bool


def prepare(runtime: Runtime, state: ConversationState, *, tools: Sequence[Tool],
            force_hard_cap: bool = False) -> Prepared:
    """`prepare_in` in a transaction of its own."""
    with session_scope(runtime.engine) as session:
        return prepare_in(session, runtime.settings, state, tools=tools,
                          force_hard_cap=force_hard_cap)


def prepare_in(session: Session, settings: Settings, state: ConversationState, *,
               tools: Sequence[Tool], force_hard_cap: bool = False,
               top: int | None = None, history: list[Message] | None = None) -> Prepared:
    """The window (`read_window`), its media inlined, and the request builder offering `tools`
    (`request_in`), read in `session`. `top`, `history`: what the caller read or placed in
    this transaction already (`read_window`)."""
    window = read_window(session, settings, state, force_hard_cap=force_hard_cap, top=top,
                         history=history)
    messages = inline_in(session, to_api_messages(window.messages))
    return Prepared(messages, request_in(session, settings, state, window.context_block,
                                         tools=tools), window.hard_cap)


def prepare_window(runtime: Runtime, state: ConversationState, *,
                   force_hard_cap: bool = False) -> Window:
    """`read_window` in a transaction of its own."""
    with session_scope(runtime.engine) as session:
        return read_window(session, runtime.settings, state, force_hard_cap=force_hard_cap)


def read_window(session: Session, settings: Settings, state: ConversationState, *,
                force_hard_cap: bool = False, top: int | None = None,
                history: list[Message] | None = None) -> Window:
    """The window of a turn: the messages after the summary's end (from a safe start, old tool
    results pruned, and lookups' results before the latest customer turn: agent/window.py
    LOOKUP_TOOLS) and the context block, from one read of the conversation row. The hard cap
    (context past `context_hard_cap_tokens`, or more messages than `max_window_messages`) reads
    only the tail. `top`: the history's last position when the caller knows it, else read;
    `history`: every message placed after the summary's end, in history order, when the
    caller holds them from this transaction (`history_after_summary` and those it placed
    since), else read."""
    keep, conversation_id = state.tenant.keep_messages, state.conversation_id
    conversation = session.get(Conversation, conversation_id)
    assert conversation is not None
    start = memory.position_of(session, conversation.summarized_until_id)
    pruned = memory.position_of(session, conversation.pruned_until_id)
    if top is None:
        top = memory.max_position(session, conversation_id)
    hard_cap = force_hard_cap or conversation.last_input_tokens > \
        settings.context_hard_cap_tokens or top - start > settings.max_window_messages
    rows = history if history is not None and not hard_cap else memory.window_rows(
        session, conversation_id, after_position=start, tail=keep * 4 + 32 if hard_cap else None)
    if hard_cap:
        log.warning("turn_hard_cap_window", forced=force_hard_cap)
    stored = timeline(rows)  # product and staff messages as context (agent/timeline.py)
    window = select_window(stored, summarized_until=start, keep=keep, hard_cap=hard_cap)
    pruned_window = prune(window, pruned_until=pruned,
                          lookups_until=prune_boundary(window, keep_user_turns=1))
    return Window(without_sent_replies(pruned_window), conversation.context_block, hard_cap)


def without_sent_replies(messages: list[Stored]) -> list[Stored]:
    """`messages` without the stored copy of a reply a tool carried (issue 41: an offer's
    body, a booking's sent `reply`): the assistant text right after the round whose call
    carried it, the same text. The call's input and its result ("Your reply was sent.") say
    it was sent, so the copy would be paid twice on every call; it never reached a request
    before the next turn, so leaving it out changes no cached prefix. Applied after the
    window's boundaries are found (it merges the round's results with the next message)."""
    kept: list[Stored] = []
    for index, message in enumerate(messages):
        if index >= 2 and _sent_by_the_round(messages[index - 2], messages[index - 1], message):
            continue
        kept.append(message)
    return kept


def _sent_by_the_round(uses: Stored, results: Stored, text: Stored) -> bool:
    """`text` (an assistant message of text only) is the reply a call of `uses` carried, as
    `results` say (agent/tools/registry.tool_reply)."""
    if text.role != "assistant" or uses.role != "assistant" or results.role != "user" or any(
            b.get("type") != "text" for b in text.content):
        return False
    said = "\n".join(str(b.get("text", "")) for b in text.content).strip()
    answers = {b.get("tool_use_id"): b for b in results.content if b.get("type") == "tool_result"}
    return any(tool_reply(use, tool_result_text(answers[use.get("id")].get("content"))) == said
               for use in uses.content if use.get("type") == "tool_use"
               and use.get("id") in answers and not answers[use.get("id")].get("is_error"))


def inline_media(runtime: Runtime, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`inline_in` in a transaction of its own, only when a message holds a stored file."""
    if not _media_ids(messages):
        return messages
    with session_scope(runtime.engine) as session:
        return inline_in(session, messages)


def inline_in(session: Session, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages' stored photos and PDFs as base64 blocks, read in one query
    (agent/media.py); one whose bytes are gone becomes a note."""
    ids = _media_ids(messages)
    if not ids:
        return messages
    return inline(messages, load_files(session, ids).get)


def _media_ids(messages: list[dict[str, Any]]) -> list[int]:
    return [i for m in messages if isinstance(m["content"], list)
            for i in stored_media_ids(m["content"])]


def turn_request(runtime: Runtime, state: ConversationState, context_block: str, *,
                 tools: Sequence[Tool] = REGISTRY) -> RequestBuilder:
    """`request_in` in a transaction of its own."""
    with session_scope(runtime.engine) as session:
        return request_in(session, runtime.settings, state, context_block, tools=tools)


def request_in(session: Session, settings: Settings, state: ConversationState,
               context_block: str, *, tools: Sequence[Tool]) -> RequestBuilder:
    """The turn's request builder: `context.build_request` with this turn's tenant (its
    catalogue rebuilt for the tenant's today: agent/catalogue.py), `tools` (the turn's
    registry: workers/turns.py) and `context_block`, applied to each round's messages."""
    today = clock.now().astimezone(ZoneInfo(state.tenant.timezone)).date()
    tenant = replace(tenant_prompt(state.tenant), catalogue=catalogue.catalogue_text(
        catalogue.load(session, state.tenant, today)),
        model=state.model or state.tenant.agent_model)  # over budget: workers/budgets.py
    closed = closed_note(session, state.tenant, clock.now())  # agent/tools/handoff.py
    user_id = opaque_user_id(state.tenant_id, state.contact_id)
    max_tokens = settings.max_output_tokens

    def request_for(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return build_request(tenant=tenant, tools=tools, context=context_block,
                             messages=messages, note=closed, max_tokens=max_tokens,
                             metadata_user_id=user_id)
    return request_for


def tenant_prompt(tenant: Tenant) -> TenantPrompt:
    """The tenant's part of system[0], its catalogue left empty."""
    return TenantPrompt(name=tenant.name, timezone=tenant.timezone, language=tenant.language,
                        instructions=tenant.instructions, model=tenant.agent_model,
                        fact_keys=tuple(sorted(resolve_keys(tenant.fact_keys))))


def ensure_context_block(session: Session, conversation: Conversation) -> None:
    """At the session's first turn, render system[1] from the contact's facts (a new session
    has no summary). From then on it changes only at compaction (ARCHITECTURE.md, Context
    block). `conversation` is attached to `session`."""
    if conversation.context_built:
        return
    conversation.context_block = render_context_block(session, conversation.contact_id,
                                                      conversation.summary)
    conversation.context_built = True
    session.add(conversation)


def dangling_rounds(session: Session, conversation: Conversation
                    ) -> list[tuple[int, list[Block]]]:
    """The tool rounds after the summary's end stored without their results
    (`dangling_in` of `history_after_summary`)."""
    return dangling_in(history_after_summary(session, conversation))


def history_after_summary(session: Session, conversation: Conversation) -> list[Message]:
    """The messages placed after the summary's end, in history order."""
    assert conversation.id is not None
    start = memory.position_of(session, conversation.summarized_until_id)
    return memory.window_rows(session, conversation.id, after_position=start)


def dangling_in(rows: list[Message]) -> list[tuple[int, list[Block]]]:
    """The tool rounds of `rows` (history order) stored without their results: (history
    position of the tool_use message, its tool_use blocks), last first (inserting results
    from the end keeps the earlier positions valid)."""
    stored = timeline(rows)
    return [(stored[index].position, uses)  # a reminder inside a round: user side
            for index, uses in reversed(find_dangling(stored))]
