"""The turn job: answer every unanswered customer message of one conversation, once.

`run_turn` is the thin RQ shell (token, lock, log context); `handle_turn` does the work:
take the pending messages into the history, build the request, run the tool loop (storing
every block as it happens), store the reply with its outbox rows and the "answered" marks in
one transaction, then send the outbox. A retried job resumes from what was stored.
"""

import functools
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import anthropic
import structlog
from rq.timeouts import JobTimeoutException
from sqlmodel import col, select

from agent import catalogue
from agent.context import TenantPrompt, build_request, opaque_user_id
from agent.errors import ContextWindowExceeded
from agent.loop import LoopOutcome, RequestBuilder, run_tool_loop
from agent.media import inline, is_media, stored_media_ids
from agent.timeline import timeline
from agent.tools.base import ToolContext
from agent.tools.handoff import STOPS_THE_TURN, closed_note, handoff_reply, with_note
from agent.tools.registry import REGISTRY, execute_tool
from agent.window import (
    Stored,
    find_dangling,
    prune,
    select_window,
    to_api_messages,
)
from core import clock, metrics
from core.faults import crash_point
from storage import contacts as contact_repo
from storage import failures, marks, memory, staff
from storage import messages as message_repo
from storage.conversations import inactivity_timeout, touch, with_staff
from storage.db import OUTAGE_ERRORS, is_outage, session_scope
from storage.errors import TurnFenced
from storage.fact_keys import resolve_keys
from storage.jobs import enqueue_turn
from storage.media import load_files
from storage.models import Contact, Conversation, Message, Tenant
from whatsapp.graph import split_text
from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed
from workers import outages, texts
from workers.choices import reply_parts
from workers.compaction import maybe_enqueue as maybe_enqueue_compaction
from workers.facts import render_context_block
from workers.jobs import (
    RETRY_POLICIES,
    call_model,
    connection_cause,
    record_call_usage,
    retry_later,
    run_coalesced,
)
from workers.media import drop_refused_media, resolve_media
from workers.outbox import flush_outbox
from workers.receipts import TypingIndicator
from workers.reminders import answer_taps
from workers.runtime import Runtime

log = structlog.get_logger(__name__)

RETRY = RETRY_POLICIES["turn"]


@dataclass(frozen=True)
class TurnState:
    tenant: Tenant
    contact: Contact
    conversation: Conversation


def run_turn(conversation_id: int, attempt: int = 1, outage: int = 0) -> str:
    """RQ job: one turn of `conversation_id`, fenced (storage/fences.py). `attempt` counts the
    provider's failures (workers.jobs.RETRY_POLICIES), `outage` the database or Redis outages
    (workers.jobs.OUTAGE_DELAYS). Returns what happened (for the job result)."""
    return run_coalesced(
        "turn", conversation_id, attempt, outage=outage, fence=True,
        handle=lambda rt, cid, n: measured_turn(rt, cid, attempt=n),
        reenqueue=_reenqueue)


def _reenqueue(runtime: Runtime, conversation_id: int, at: datetime, attempt: int,
               outage: int) -> object:
    return enqueue_turn(runtime.queue, runtime.settings.redis_prefix, conversation_id,
                        job_timeout=runtime.settings.turn_job_timeout, at=at, attempt=attempt,
                        outage=outage)


def measured_turn(runtime: Runtime, conversation_id: int, *, attempt: int = 1) -> str:
    """`handle_turn`, counted by outcome ("error" when it raised, "fenced" when it lost its
    lock, "outage" when the database or Redis failed) and timed (wall clock: the product's
    clock stands still in replays)."""
    started, outcome = time.monotonic(), "error"
    try:
        outcome = handle_turn(runtime, conversation_id, attempt=attempt)
        return outcome
    except TurnFenced:
        outcome = "fenced"
        raise
    except Exception as exc:
        outcome = "outage" if is_outage(exc) else "error"
        raise
    finally:
        metrics.record(runtime.redis, runtime.settings.redis_prefix,
                       metrics.inc("wagent_turns_total", {"outcome": outcome}),
                       metrics.observe("wagent_turn_duration_seconds",
                                       time.monotonic() - started))


def handle_turn(runtime: Runtime, conversation_id: int, *, attempt: int = 1) -> str:
    """Answer the pending messages of a conversation; see the module docstring."""
    state = _load(runtime, conversation_id)
    if state is None:
        return "no_conversation"
    flush_outbox(runtime, conversation_id)
    now = clock.now()
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is not None and with_staff(conversation, now):
            held = staff.hold_for_staff(session, conversation_id, now=now)
            log.info("turn_skipped_with_staff", held=held)
            return "with_staff"  # staff answer: no model call, nothing sent or marked read
        if conversation is not None and not window_closed(state.contact.last_inbound_at, now) \
                and failures.reopen(session, conversation, now=now):  # after an apology
            _late_note(session, conversation, now)
        if not message_repo.pending_inbound(session, conversation_id):
            return "idle"
    resolve_media(runtime, conversation_id, language=state.tenant.language)  # before placing
    repair_dangling_tool_use(runtime, state)  # before new messages take their places
    ensure_context_block(runtime, state)
    with session_scope(runtime.engine) as session:
        last_position = message_repo.assign_positions(session, conversation_id)
        tapped = answer_taps(session, state.tenant, state.contact, state.conversation,
                             secret=runtime.settings.button_key(), now=now)  # reminders
        if window_closed(state.contact.last_inbound_at, now):
            outcome = _window_closed_turn(runtime, session, state, last_position, now)
        elif tapped and not message_repo.pending_inbound(session, conversation_id):
            outcome = "reminder_tap"  # answered without a model call
        else:
            outcome = ""
    if outcome:
        flush_outbox(runtime, conversation_id)
        return outcome
    hooks = _StoreHooks(runtime, state)
    hooks.typing.start()  # read receipt + "typing…" (workers/receipts.py), best effort
    try:
        outcome = _converse(runtime, state, hooks)
        reply, kind = _reply_text(outcome, state.tenant.language), outcome.kind
        if outcome.kind == "stopped":  # handed off: the customer gets the handoff text only
            with session_scope(runtime.engine) as session:
                reply, kind = handoff_reply(session, state.tenant, clock.now(),
                                            outcome.stopped_by), "handoff"
    except RETRY.transient as exc:
        last = not RETRY.may_retry(attempt, runtime)
        failed = _provider_failed(runtime, state, exc, attempt=attempt, last=last)
        if not last:
            return retry_later(runtime, "turn", conversation_id, attempt=attempt, exc=exc,
                               reenqueue=_reenqueue, event="turn")
        log.error("turn_provider_failed", attempts=attempt, error=type(exc).__name__,
                  cause=connection_cause(exc))
        if failed == "held":  # one apology per conversation per outage
            with session_scope(runtime.engine) as session:
                message_repo.mark_answered(
                    session, conversation_id, reason=failures.HELD_REASON, now=clock.now(),
                    up_to_position=max(last_position, hooks.folded_up_to))
            log.info("turn_done", kind="held", attempt=attempt)
            return "held"
        reply, kind = texts.text(state.tenant.language, "apology"), "apology"
    except anthropic.APIStatusError as exc:  # a 400 is our bug: never retried blindly
        log.error("turn_request_rejected", status=exc.status_code, request_id=exc.request_id,
                  error=str(exc)[:500])
        reply, kind = texts.text(state.tenant.language, "apology"), "apology"
    except ContextWindowExceeded:  # even the hard-capped window was too big
        log.error("turn_context_window_exceeded_twice")
        reply, kind = texts.text(state.tenant.language, "apology"), "apology"
    if attempt > 1 and kind != "apology":  # a retried turn answered
        with session_scope(runtime.engine) as session:
            failures.settle(session, conversation_id, provider="anthropic", purpose="turn",
                            outcome="recovered")
    _finish(runtime, state, reply, up_to_position=max(last_position, hooks.folded_up_to),
            offers=kind == "answered",  # an apology offers no choices
            author=marks.product_author(kind) if kind in ("apology", "handoff") else None,
            apology=kind == "apology")
    flush_outbox(runtime, conversation_id)
    if maybe_enqueue_compaction(runtime, conversation_id):
        log.info("compaction_enqueued")
    log.info("turn_done", kind=kind, attempt=attempt)
    return kind


def _converse(runtime: Runtime, state: TurnState, hooks: "_StoreHooks") -> LoopOutcome:
    try:
        return _sized_loop(runtime, state, hooks)
    except anthropic.BadRequestError as exc:  # a photo or PDF the API could not open:
        if not drop_refused_media(runtime, _id(state.conversation), exc):  # workers/media.py
            raise
        log.warning("turn_media_refused_retrying_without_it")
        return _sized_loop(runtime, state, hooks)


def _sized_loop(runtime: Runtime, state: TurnState, hooks: "_StoreHooks") -> LoopOutcome:
    try:
        return _run_loop(runtime, state, hooks, hard_cap=False)
    except ContextWindowExceeded:
        log.warning("turn_context_window_exceeded_retrying_with_safe_window")
        return _run_loop(runtime, state, hooks, hard_cap=True)


def _run_loop(runtime: Runtime, state: TurnState, hooks: "_StoreHooks", *,
              hard_cap: bool) -> LoopOutcome:
    window = prepare_window(runtime, state, force_hard_cap=hard_cap)
    messages = inline_media(runtime, to_api_messages(window.messages))
    create = functools.partial(_create, runtime, hooks.typing)
    return run_tool_loop(create, request_for=turn_request(runtime, state, window.context_block),
                         messages=messages,
                         execute=functools.partial(_execute, runtime, state), hooks=hooks,
                         max_rounds=runtime.settings.turn_max_rounds,
                         fatal=(JobTimeoutException, TurnFenced, *OUTAGE_ERRORS),
                         stop_after=STOPS_THE_TURN)


def inline_media(runtime: Runtime, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The window's stored photos and PDFs as base64 blocks, read in one query (agent/media.py);
    one whose bytes are gone becomes a note."""
    ids = [i for m in messages if isinstance(m["content"], list)
           for i in stored_media_ids(m["content"])]
    if not ids:
        return messages
    with session_scope(runtime.engine) as session:
        files = load_files(session, ids)
    return inline(messages, files.get)


def _create(runtime: Runtime, typing: TypingIndicator, **request: Any) -> Any:
    typing.keep_alive()  # again past 20 s: Meta clears it after 25 s
    crash_point("before_model_call")
    return call_model(runtime, "turn", **request)


@dataclass(frozen=True)
class Window:
    messages: list[Stored]
    context_block: str
    hard_cap: bool


def prepare_window(runtime: Runtime, state: TurnState, *,
                   force_hard_cap: bool = False) -> Window:
    """Read the window of a turn: the messages after the summary's end (from a safe start,
    old tool results pruned) and the context block, from one read of the conversation row, so
    a compaction is seen whole or not at all. The hard cap (context past
    `context_hard_cap_tokens`, or more messages than `max_window_messages`) reads only the tail.
    """
    settings, keep = runtime.settings, state.tenant.keep_messages
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, _id(state.conversation))
        assert conversation is not None
        start = memory.position_of(session, conversation.summarized_until_id)
        pruned = memory.position_of(session, conversation.pruned_until_id)
        hard_cap = force_hard_cap or conversation.last_input_tokens > \
            settings.context_hard_cap_tokens or memory.max_position(
                session, _id(conversation)) - start > settings.max_window_messages
        rows = memory.window_rows(session, _id(conversation), after_position=start,
                                  tail=keep * 4 + 32 if hard_cap else None)
        context_block = conversation.context_block
    if hard_cap:
        log.warning("turn_hard_cap_window", forced=force_hard_cap)
    stored = timeline(rows)  # product and staff messages as context (agent/timeline.py)
    window = select_window(stored, summarized_until=start, keep=keep, hard_cap=hard_cap)
    return Window(prune(window, pruned_until=pruned), context_block, hard_cap)


def turn_request(runtime: Runtime, state: TurnState, context_block: str) -> RequestBuilder:
    """The turn's request builder: `context.build_request` with this turn's tenant, the tool
    registry and `context_block`, applied to each round's messages."""
    tenant, max_tokens = _prompt(state.tenant), runtime.settings.max_output_tokens
    with session_scope(runtime.engine) as session:  # the daily rebuild: agent/catalogue.py
        today = clock.now().astimezone(ZoneInfo(state.tenant.timezone)).date()
        tenant = replace(tenant, catalogue=catalogue.catalogue_text(
            catalogue.load(session, state.tenant, today)))
        closed = closed_note(session, state.tenant, clock.now())  # handoff.py, issue 42
    user_id = opaque_user_id(_id(state.tenant), _id(state.contact))

    def request_for(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return build_request(tenant=tenant, tools=REGISTRY, context=context_block,
                             messages=with_note(messages, closed), max_tokens=max_tokens,
                             metadata_user_id=user_id)
    return request_for


def repair_dangling_tool_use(runtime: Runtime, state: TurnState) -> int:
    """A previous attempt died between storing a tool_use and its results, and the customer may
    have written since: run (or replay: effects are keyed on the tool_use id) the missing tools
    and place their results right after the tool_use, so every request stays valid.
    Returns how many tool rounds were repaired.
    """
    conversation_id = _id(state.conversation)
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, conversation_id)
        assert conversation is not None
        start = memory.position_of(session, conversation.summarized_until_id)
        rows = memory.window_rows(session, conversation_id, after_position=start)
    stored = timeline(rows)  # a reminder stored between a tool_use and its results: user side
    dangling = find_dangling(stored)
    for index, uses in reversed(dangling):  # from the end: earlier positions stay valid
        results = []
        for block in uses:
            text, is_error = _execute(runtime, state, block)
            result = {"type": "tool_result", "tool_use_id": block["id"], "content": text}
            results.append({**result, "is_error": True} if is_error else result)
        with session_scope(runtime.engine) as session:
            memory.insert_after(session, Message(
                tenant_id=_id(state.tenant), conversation_id=conversation_id, role="user",
                direction="internal", content=results, received_at=clock.now(),
                starts_turn=False, answered_at=clock.now()), position=stored[index].position)
        log.warning("tool_round_repaired", tools=len(uses))
    return len(dangling)


def _execute(runtime: Runtime, state: TurnState, block: dict[str, Any]) -> tuple[str, bool]:
    ctx = ToolContext(engine=runtime.engine, tenant_id=_id(state.tenant),
                      contact_id=_id(state.contact), conversation_id=_id(state.conversation),
                      timezone=ZoneInfo(state.tenant.timezone), now=clock.now(),
                      tool_use_id=str(block["id"]),
                      source_message_id=_latest_customer_message(runtime, state))
    text, is_error = execute_tool(ctx, str(block.get("name")), block.get("input"),
                                  tools=REGISTRY)
    log.info("tool_called", tool=block.get("name"), is_error=is_error)
    return text, is_error


def _latest_customer_message(runtime: Runtime, state: TurnState) -> int | None:
    with session_scope(runtime.engine) as session:
        found = session.exec(select(Message.id).where(
            Message.conversation_id == _id(state.conversation), Message.direction == "inbound",
            col(Message.position).is_not(None)).order_by(col(Message.position).desc())).first()
    return int(found) if found is not None else None


def ensure_context_block(runtime: Runtime, state: TurnState) -> None:
    """At the session's first turn, render system[1] from the contact's facts (a new session
    has no summary). From then on it changes only at compaction (ARCHITECTURE.md, Context block)."""
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, _id(state.conversation))
        assert conversation is not None
        if conversation.context_built:
            return
        conversation.context_block = render_context_block(session, conversation.contact_id,
                                                          conversation.summary)
        conversation.context_built = True
        session.add(conversation)


class _StoreHooks:
    """Persist each intermediate message and each call's usage as soon as it exists."""

    def __init__(self, runtime: Runtime, state: TurnState) -> None:
        self.runtime, self.state = runtime, state
        self.typing = TypingIndicator(runtime, state.tenant, state.contact, state.conversation)
        self.folded_up_to = 0  # history position of the last customer message folded in

    def on_response(self, response: Any) -> None:
        record_usage(self.runtime, self.state, response, purpose="turn")

    def on_assistant(self, content: list[dict[str, Any]]) -> None:
        self._append("assistant", content)

    def on_tool_results(self, content: list[dict[str, Any]]) -> None:
        crash_point("after_tool_before_store")
        self._append("user", content)

    def fold_new_messages(self) -> list[dict[str, Any]]:
        conversation_id = _id(self.state.conversation)
        resolve_media(self.runtime, conversation_id, language=self.state.tenant.language)
        with session_scope(self.runtime.engine) as session:
            before = memory.max_position(session, conversation_id)
            top = message_repo.assign_positions(session, conversation_id)
            if top == before:
                return []
            rows = memory.window_rows(session, conversation_id, after_position=before)
        self.folded_up_to = top
        log.info("turn_folded_new_messages", count=len(rows))
        blocks = [b for m in rows for b in m.content
                  if b.get("type") == "text" or is_media(b)]  # a photo sent mid-turn too
        return inline_media(self.runtime, [{"role": "user", "content": blocks}])[0]["content"]

    def _append(self, role: str, content: list[dict[str, Any]]) -> None:
        with session_scope(self.runtime.engine) as session:
            message_repo.append(session, tenant_id=_id(self.state.tenant),
                                conversation_id=_id(self.state.conversation), role=role,
                                direction="internal", content=content, now=clock.now())


def record_usage(runtime: Runtime, state: TurnState, response: Any, *, purpose: str) -> int:
    """Store the four usage counters of one call; the conversation keeps the context size
    (input + cache creation + cache read) as `last_input_tokens`. Returns that size.
    """
    row = record_call_usage(runtime, tenant_id=_id(state.tenant),
                            conversation_id=_id(state.conversation), response=response,
                            purpose=purpose)
    total = row.input_tokens + row.cache_creation_input_tokens + row.cache_read_input_tokens
    with session_scope(runtime.engine) as session:
        if purpose == "turn":
            conversation = session.get(Conversation, _id(state.conversation))
            assert conversation is not None
            conversation.last_input_tokens = total
            session.add(conversation)
    log.info("claude_call", purpose=purpose, request_id=row.request_id, context_tokens=total,
             cache_read=row.cache_read_input_tokens, output_tokens=row.output_tokens)
    return total


def _reply_text(outcome: LoopOutcome, language: str) -> str:
    if outcome.kind == "refusal":
        return texts.text(language, "refusal")
    return outcome.final_text or texts.text(language, "fallback")


def _provider_failed(runtime: Runtime, state: TurnState, exc: BaseException, *,
                     attempt: int, last: bool) -> str:
    """Store attempt `attempt` of a failed call (storage/failures.py) and mark the provider
    down (workers/outages.py). On the `last` attempt: "held" when the conversation already
    got the apology in this outage (within storage/failures.RECOVER_WITHIN), else "apology";
    "retrying" before."""
    now = clock.now()
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, _id(state.conversation))
        outcome = "retrying"
        if last:
            outcome = "held" if conversation is not None and \
                failures.may_recover(conversation, now) else "apology"  # an older: again
        failures.record(session, tenant_id=_id(state.tenant),
                        conversation_id=_id(state.conversation), provider="anthropic",
                        purpose="turn", status=getattr(exc, "status_code", None),
                        attempt=attempt, now=now, outcome=outcome)
    outages.provider_failed(runtime)
    return outcome


LATE_NOTE = ("[the assistant could not answer the customer's messages above (a provider "
             "outage) and they got an apology: answer them now]")


def _late_note(session: Any, conversation: Conversation, now: datetime) -> None:
    """The messages an apology covered are answered again: when the history ends with the
    apology (an assistant message), a note of the product's follows it, so the request ends
    with a user message and the model knows why it answers late."""
    last = session.exec(select(Message.role).where(
        Message.conversation_id == conversation.id, col(Message.position).is_not(None))
        .order_by(col(Message.position).desc())).first()
    if last == "assistant":
        message_repo.append(session, tenant_id=conversation.tenant_id,
                            conversation_id=_id(conversation), role="user",
                            direction="internal",
                            content=[{"type": "text", "text": LATE_NOTE}], now=now)


def _finish(runtime: Runtime, state: TurnState, reply: str, *, up_to_position: int,
            offers: bool = False, author: str | None = None, apology: bool = False) -> bool:
    """Store the reply, its outbox rows and the answered marks in one transaction.

    `offers`: the reply may carry the choices of this turn's `offer_choices` (workers/choices.py).
    Compare-and-set on the answered marks: if another worker answered these messages meanwhile
    (a lock lost to a Redis flush, then the reconciler), this reply is dropped, never sent as a
    second answer. Returns False then.
    """
    now = clock.now()
    to, recipient = contact_repo.address(state.contact)
    with session_scope(runtime.engine) as session:
        if not message_repo.mark_answered(session, _id(state.conversation),
                                          up_to_position=up_to_position, now=now,
                                          reason=failures.APOLOGY_REASON if apology else None):
            log.warning("turn_reply_dropped_already_answered")
            return False
        kind, parts = reply_parts(session, _id(state.conversation), reply,  # a list, buttons
                                  state.tenant.language) if offers else ("text", split_text(reply))
        message = message_repo.append(
            session, tenant_id=_id(state.tenant), conversation_id=_id(state.conversation),
            role="assistant", direction="outbound", content=[{"type": "text", "text": reply}],
            now=now, author=author)
        message_repo.add_outbound(session, message=message, parts=parts, to=to,
                                  recipient=recipient, now=now, kind=kind)
        conversation = session.get(Conversation, _id(state.conversation))
        assert conversation is not None
        touch(conversation, now=now, inactivity_timeout=inactivity_timeout(
            state.tenant.inactivity_timeout_minutes))
        if apology:  # one apology per conversation per outage (storage/failures.py)
            conversation.outage_state, conversation.outage_at = failures.APOLOGIZED, now
        else:
            failures.after_reply(session, conversation, now=now)
        session.add(conversation)
    return True


WINDOW_CLOSED_REASON = (f"not answered: {SERVICE_WINDOW_CLOSED} "
                        "(WhatsApp customer service window)")


def _window_closed_turn(runtime: Runtime, session: Any, state: TurnState, last_position: int,
                        now: datetime) -> str:
    """Too late for a free-form reply (a backlog, a retry a day later): nothing is sent to find
    out. The messages record why; the tenant's approved follow-up template goes out instead
    when it has one, else the customer is recorded as not reachable.
    """
    conversation_id = _id(state.conversation)
    message_repo.mark_answered(session, conversation_id, up_to_position=last_position, now=now,
                               reason=WINDOW_CLOSED_REASON)
    template = state.tenant.followup_template
    if not template:
        log.warning("turn_refused_window_closed_customer_unreachable")
        return "window_closed"
    to, recipient = contact_repo.address(state.contact)
    message = message_repo.append(
        session, tenant_id=_id(state.tenant), conversation_id=conversation_id, role="assistant",
        direction="outbound", content=[{"type": "text", "text": f"[follow-up template "
                                        f"{template}: the reply window had closed]"}],
        now=now, author=marks.product_author("template"))
    # its delivery state, not this text, says whether it went out
    message_repo.add_outbound(session, message=message, parts=[template], to=to,
                              recipient=recipient, now=now, kind="template")
    log.warning("turn_window_closed_template_queued")
    return "window_closed_template"


def _load(runtime: Runtime, conversation_id: int) -> TurnState | None:
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is None:
            return None
        tenant = session.get(Tenant, conversation.tenant_id)
        contact = session.get(Contact, conversation.contact_id)
        assert tenant is not None and contact is not None
        return TurnState(tenant=tenant, contact=contact, conversation=conversation)


def _prompt(tenant: Tenant) -> TenantPrompt:
    return TenantPrompt(name=tenant.name, timezone=tenant.timezone, language=tenant.language,
                        instructions=tenant.instructions, model=tenant.agent_model,
                        fact_keys=tuple(sorted(resolve_keys(tenant.fact_keys))))


def _id(row: Any) -> int:
    assert row.id is not None
    return int(row.id)
