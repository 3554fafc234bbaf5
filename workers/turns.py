"""The turn job: answer every unanswered customer message of one conversation, once.

`run_turn` is the thin RQ shell (token, lock, log context); `handle_turn` tells the turn as a
story of named steps:

1. before the model (`_before_model`, one transaction): load the conversation
   (workers/conversation_state.py), hold the messages while staff answer, reopen what an
   apology covered, stop when nothing waits; render the context block at a session's first turn;
   then the month's model budget (workers/budgets.py) picks the turn's model, or the handoff;
2. repair what a crashed attempt left: media to resolve, a tool round without results;
3. place the new messages (`_place_in`): answer reminder taps, refuse a turn whose 24-hour
   window closed, else prepare the window and request (workers/turn_window.py); in step 1's
   transaction when steps 1 and 2 have nothing to do in between (`_Ready.places_at_once`),
   else in one of its own (`_place`); over budget with `handoff`: the handoff text, no model
   call (`_budget_handoff`);
4. converse (`_converse_or_apologise`): the tool loop, storing every block as it happens; any
   failure ends in the one apology (or a retry later, or held while the provider is down);
5. finish (`_finish_turn`): the reply with its outbox rows and the "answered" marks in one
   transaction, then the sends and the compaction trigger.

A retried job resumes from what was stored. `Outcome` names what happened.
"""

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

import anthropic
import structlog
from rq.timeouts import JobTimeoutException
from sqlmodel import Session, col, select, update

from agent.errors import ContextWindowExceeded
from agent.loop import LoopOutcome, run_tool_loop
from agent.media import is_media
from agent.tools.base import ToolContext
from agent.tools.choices import OFFER_CHOICES
from agent.tools.handoff import STOPS_THE_TURN, handoff_reply
from agent.tools.registry import REGISTRY, execute_in, execute_tool
from agent.window import Block
from core import clock, metrics
from core.faults import crash_point
from storage import contacts as contact_repo
from storage import failures, marks, memory, staff, threads
from storage import messages as message_repo
from storage.budgets import budget_micro_usd
from storage.conversations import inactivity_timeout, touch_values, with_staff
from storage.db import OUTAGE_ERRORS, is_outage, read_scope, session_scope
from storage.errors import TurnFenced
from storage.jobs import enqueue_turn
from storage.models import Conversation, Message, Usage
from whatsapp.graph import split_text
from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed
from workers import budgets, outages, texts
from workers.call_slots import TenantCallsBusy
from workers.choices import reply_parts
from workers.compaction import maybe_enqueue as maybe_enqueue_compaction
from workers.conversation_state import ConversationState, load_state
from workers.jobs import (
    RETRY_POLICIES,
    call_model,
    connection_cause,
    pause_tenant,
    record_usage_metrics,
    retry_later,
    run_coalesced,
    store_usage,
    usage_row,
)
from workers.media import drop_refused_media, resolve_media
from workers.outbox import flush_outbox
from workers.receipts import TypingIndicator
from workers.reminders import answer_taps
from workers.runtime import Runtime
from workers.turn_window import (
    Prepared,
    dangling_in,
    ensure_context_block,
    history_after_summary,
    inline_in,
    prepare,
    prepare_in,
)
from workers.waitlist import answer_offer_taps

log = structlog.get_logger(__name__)

RETRY = RETRY_POLICIES["turn"]

TurnState = ConversationState  # the turn's state: the three rows and their ids as ints


class Outcome(StrEnum):
    """What a turn did: the job's result, the `outcome` label of wagent_turns_total and the
    `kind` of the `turn_done` log line."""

    NO_CONVERSATION = "no_conversation"
    WITH_STAFF = "with_staff"  # staff answer: held, no model call
    NOT_OURS = "not_ours"  # another sender holds the thread, or not allowlisted (issue 45)
    IDLE = "idle"  # nothing waited
    WINDOW_CLOSED = "window_closed"  # 24-hour window closed, no follow-up template
    WINDOW_CLOSED_TEMPLATE = "window_closed_template"
    REMINDER_TAP = "reminder_tap"  # taps answered without a model call
    RETRY_SCHEDULED = "retry_scheduled"  # the provider failed; a later attempt is enqueued
    FAILED = "failed"
    HELD = "held"  # the provider is still down and the apology was already sent
    APOLOGY = "apology"
    HANDOFF = "handoff"
    ANSWERED = "answered"  # agent/loop.py LoopOutcome.kind from here on
    REFUSAL = "refusal"
    TRUNCATED = "truncated"
    EMPTY = "empty"
    MAX_ROUNDS = "max_rounds"


@dataclass(frozen=True)
class Reply:
    """What the customer gets at the end of a turn, and which outcome it is."""

    text: str
    outcome: Outcome


@dataclass(frozen=True)
class _Ready:
    """What the steps before the model hand on: the loaded state, the turn's time, and the tool
    rounds to repair (workers/turn_window.dangling_in); `media`: whether a pending message
    holds media still to fetch (workers/media.py)."""

    state: ConversationState
    now: datetime
    dangling: list[tuple[int, list[Block]]]
    media: bool = True
    placed: "_Placed | None" = None  # placed in the checks' transaction (`places_at_once`)

    def places_at_once(self) -> bool:
        """Nothing needs doing between the checks and the placing (no media to fetch, no
        tool round to repair, no budget to read: workers/budgets.py), so the checks'
        transaction places the messages too: one transaction, one fence check, fewer reads."""
        return not self.media and not self.dangling \
            and budget_micro_usd(self.state.tenant) is None


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
    lock, "outage" when the database or Redis failed, "deferred" when its tenant's model call
    slots were all taken) and timed (wall clock: the product's
    clock stands still in replays). Returns the outcome's value."""
    started, outcome = time.monotonic(), "error"
    try:
        outcome = handle_turn(runtime, conversation_id, attempt=attempt).value
        return outcome
    except TurnFenced:
        outcome = "fenced"
        raise
    except TenantCallsBusy:  # run_coalesced defers it
        outcome = "deferred"
        raise
    except Exception as exc:
        outcome = "outage" if is_outage(exc) else "error"
        raise
    finally:
        metrics.record(runtime.redis, runtime.settings.redis_prefix,
                       metrics.inc("wagent_turns_total", {"outcome": outcome}),
                       metrics.observe("wagent_turn_duration_seconds",
                                       time.monotonic() - started))


def handle_turn(runtime: Runtime, conversation_id: int, *, attempt: int = 1) -> Outcome:
    """Answer the pending messages of a conversation; see the module docstring."""
    flush_outbox(runtime, conversation_id)  # an earlier reply's unsent parts go first
    ready = _before_model(runtime, conversation_id)
    if isinstance(ready, Outcome):
        return ready
    state, budget, placed = ready.state, budgets.UNDER_BUDGET, ready.placed
    if placed is None:  # placed in a transaction of its own, after what must come first
        state, budget, placed = _repair_and_place(runtime, ready)
    if isinstance(placed.next, Outcome):  # answered without the model
        flush_outbox(runtime, conversation_id)
        return placed.next
    hooks = _StoreHooks(runtime, state, placed.next, placed.source)
    try:
        return _answer(runtime, state, hooks, placed.last_position, budget.handoff,
                       attempt=attempt)
    finally:
        hooks.settle_usage()  # a usage row no transaction of the turn took: alone


def _repair_and_place(runtime: Runtime, ready: "_Ready"
                      ) -> "tuple[ConversationState, budgets.Decision, _Placed]":
    """The steps between the checks and the placing when the checks' transaction could not
    place (`_Ready.places_at_once`): the month's model budget, the pending media, the tool
    rounds to repair; then `_place`."""
    conversation_id = ready.state.conversation_id
    budget = budgets.decide(runtime, ready.state.tenant, now=ready.now,
                            conversation_id=conversation_id)  # the month's model budget
    state = replace(ready.state, model=budget.model) if budget.model else ready.state
    if ready.media:  # before placing
        resolve_media(runtime, conversation_id, language=state.tenant.language)
    repair_dangling_tool_use(runtime, state, ready.dangling)  # before new messages are placed
    return state, budget, _place(runtime, state, ready.now)


def _answer(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks",
            last_position: int, handoff: bool, *, attempt: int) -> Outcome:
    """The placed turn's reply (the handoff when over the budget and the tenant chose it,
    else the conversation with the model), stored and sent."""
    if handoff:  # over the month's budget, the tenant chose the handoff
        return _finish_turn(runtime, state, hooks, _budget_handoff(runtime, state),
                            attempt=attempt, up_to_position=last_position)
    hooks.typing.start()  # read receipt + "typing…" (workers/receipts.py), best effort
    reply = _converse_or_apologise(runtime, state, hooks, attempt=attempt,
                                   last_position=last_position)
    if isinstance(reply, Outcome):  # a retry later, or held
        return reply
    return _finish_turn(runtime, state, hooks, reply, attempt=attempt,
                        up_to_position=max(last_position, hooks.folded_up_to))


def _before_model(runtime: Runtime, conversation_id: int) -> "_Ready | Outcome":
    """The checks before any model call, in one transaction: the conversation exists, staff do
    not hold it, an apology's messages are answered again (storage/failures.reopen), something
    waits; then the context block of a session's first turn and the tool rounds to repair."""
    now = clock.now()
    with session_scope(runtime.engine) as session:
        state = load_state(session, conversation_id)
        if state is None:
            return Outcome.NO_CONVERSATION
        if with_staff(state.conversation, now):
            held = staff.hold_for_staff(session, conversation_id, now=now)
            log.info("turn_skipped_with_staff", held=held)
            return Outcome.WITH_STAFF  # no model call, nothing sent or marked read
        skip = threads.why_not_answered(state.tenant, state.contact, now)
        if skip is not None:  # Meta's agent holds the thread, or not allowlisted (issue 45)
            message_repo.assign_positions(session, conversation_id)
            message_repo.mark_received_answered(session, conversation_id, up_to=now,
                                                reason=skip)
            log.info("turn_skipped_not_ours", reason=skip)
            return Outcome.NOT_OURS  # no model call, nothing sent or marked read
        if not window_closed(state.contact.last_inbound_at, now) \
                and failures.reopen(session, state.conversation, now=now):  # after an apology
            _late_note(session, state, now)
        pending = message_repo.pending_inbound(session, conversation_id)
        if not pending:
            return Outcome.IDLE
        ensure_context_block(session, state.conversation)
        history = history_after_summary(session, state.conversation)
        ready = _Ready(state, now, dangling_in(history),
                       media=any(_pending_media(m.media) for m in pending))
        if not ready.places_at_once():
            return ready
        return replace(ready, placed=_place_in(session, runtime, state, now, pending=pending,
                                               history=history))


LATE_NOTE = ("[the assistant could not answer the customer's messages above (a provider "
             "outage) and they got an apology: answer them now]")


def _late_note(session: Session, state: ConversationState, now: datetime) -> None:
    """The messages an apology covered are answered again: when the history ends with the
    apology, a note of the product's follows it, so the model knows why it answers late (the
    window would end the request on the user side anyway: agent/timeline.py,
    agent/window.to_api_messages; the note's words are what it adds)."""
    last = session.exec(select(Message.role).where(
        Message.conversation_id == state.conversation_id, col(Message.position).is_not(None))
        .order_by(col(Message.position).desc())).first()
    if last == "assistant":
        message_repo.append(session, tenant_id=state.tenant_id,
                            conversation_id=state.conversation_id, role="user",
                            direction="internal",
                            content=[{"type": "text", "text": LATE_NOTE}], now=now)


@dataclass
class _Placed:
    """What `_place` hands on: the last history position placed, the turn's end without the
    model or its prepared first request, and the latest customer message placed."""

    last_position: int
    next: "Outcome | Prepared"
    source: "_Source"


@dataclass
class _Source:
    """The customer message the turn's tool calls answer (ToolContext.source_message_id): the
    latest one placed in the history, moved on as messages are folded in mid-turn."""

    message_id: int | None
    wamid: str | None = None  # its wamid, when the turn placed it (workers/receipts.py)


def _place(runtime: Runtime, state: ConversationState, now: datetime) -> _Placed:
    """`_place_in` in a transaction of its own."""
    with session_scope(runtime.engine) as session:
        return _place_in(session, runtime, state, now)


def _place_in(session: Session, runtime: Runtime, state: ConversationState, now: datetime,
              *, pending: list[Message] | None = None,
              history: list[Message] | None = None) -> _Placed:
    """Give the pending messages their history positions and answer reminder taps; then, in
    the same transaction, the turn's end without the model (window closed, only taps) or its
    prepared first request. `pending`, `history`: the pending customer messages and the
    history after the summary when this transaction read them already
    (storage/messages.pending_inbound, workers/turn_window.history_after_summary)."""
    last_position, placed = message_repo.place_waiting(session, state.conversation_id)
    pending = _still_pending(session, state.conversation_id, pending, placed)
    tapped = answer_taps(session, state.tenant, state.contact, state.conversation,
                         secret=runtime.settings.button_key(), now=now,
                         pending=pending)  # reminders
    pending = [m for m in pending if m.answered_at is None]
    tapped += answer_offer_taps(session, state.tenant, state.contact, state.conversation,
                                secret=runtime.settings.button_key(), now=now,
                                pending=pending)  # waitlist
    if window_closed(state.contact.last_inbound_at, now):
        return _Placed(last_position,
                       _window_closed_turn(session, state, last_position, now), _Source(None))
    if tapped and not any(m.answered_at is None for m in pending):
        return _Placed(last_position, Outcome.REMINDER_TAP, _Source(None))
    source = _Source(_latest_placed(placed) or
                     _latest_customer_message(session, state.conversation_id),
                     _latest_wamid(placed))
    return _Placed(last_position, prepare_in(  # a tap's answer moved the top, if any
        session, runtime.settings, state, tools=REGISTRY, top=None if tapped else last_position,
        history=None if tapped or history is None else history + placed), source)


def _latest_wamid(placed: list[Message]) -> str | None:
    """The wamid of the latest customer message among those just placed, None without one."""
    return next((m.wamid for m in reversed(placed) if m.direction == "inbound" and m.wamid),
                None)


def _still_pending(session: Session, conversation_id: int, pending: list[Message] | None,
                   placed: list[Message]) -> list[Message]:
    """The pending customer messages: read, or those read before in this transaction and
    any just placed that arrived since (on PostgreSQL each statement sees the latest
    commits), oldest first."""
    if pending is None:
        return message_repo.pending_inbound(session, conversation_id)
    known = {m.id for m in pending}
    arrived = [m for m in placed if m.direction == "inbound" and m.starts_turn
               and m.answered_at is None and m.id not in known]
    return sorted(pending + arrived, key=lambda m: m.id or 0)


def _latest_placed(placed: list[Message]) -> int | None:
    """The latest customer message among those just placed (they follow every other)."""
    return next((m.id for m in reversed(placed) if m.direction == "inbound"), None)


def _converse_or_apologise(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks",
                           *, attempt: int, last_position: int) -> "Reply | Outcome":
    """The model's reply; when the provider failed for the last time, when it refused the
    request (a 400 is our bug: never retried blindly) or when even the hard-capped window was
    too big, the one apology. A failure with attempts left schedules the next (`Outcome`)."""
    try:
        return _reply_of(runtime, state, _converse(runtime, state, hooks))
    except RETRY.transient as exc:
        later = _after_provider_failure(runtime, state, hooks, exc, attempt=attempt,
                                        last_position=last_position)
        if later is not None:
            return later
    except anthropic.APIStatusError as exc:
        log.error("turn_request_rejected", status=exc.status_code, request_id=exc.request_id,
                  error=str(exc)[:500])
    except ContextWindowExceeded:
        log.error("turn_context_window_exceeded_twice")
    return Reply(texts.text(state.tenant.language, "apology"), Outcome.APOLOGY)


def _reply_of(runtime: Runtime, state: ConversationState, outcome: LoopOutcome) -> Reply:
    """What the customer gets for the loop's `outcome`. What the model wrote (its answer, a
    handoff's `message`) is disarmed (storage/marks.py `disarm`): the model can never pose as
    staff with `[equipe: NAME]`, a mark only staff messages carry (their `author`)."""
    if outcome.kind == "stopped":  # handed off: the customer gets the handoff text only
        with session_scope(runtime.engine) as session:
            return Reply(marks.disarm(handoff_reply(session, state.tenant, clock.now(),
                                                    outcome.stopped_by)), Outcome.HANDOFF)
    if outcome.kind == "refusal":
        return Reply(texts.text(state.tenant.language, "refusal"), Outcome.REFUSAL)
    return Reply(marks.disarm(outcome.final_text) or texts.text(state.tenant.language,
                                                                 "fallback"),
                 Outcome(outcome.kind))


BUDGET_HANDOFF_REASON = "monthly model budget reached"  # staff read it (staff_reason)


def _budget_handoff(runtime: Runtime, state: ConversationState) -> Reply:
    """A turn over the month's model budget whose tenant chose `handoff`: staff take the
    conversation as after the handoff_to_human tool (storage/staff.start_handoff: the staff
    hold, `handoff.requested`, the Atendimento page) and the customer gets the handoff text
    (agent/tools/handoff.handoff_reply: the tenant's, with when staff answer)."""
    now = clock.now()
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, state.conversation_id)
        assert conversation is not None
        staff.start_handoff(session, conversation, state.tenant, reason=BUDGET_HANDOFF_REASON,
                            summary="the agent is paused until the budget allows it",
                            now=now)
        return Reply(handoff_reply(session, state.tenant, now), Outcome.HANDOFF)


def _after_provider_failure(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks",
                            exc: BaseException, *, attempt: int,
                            last_position: int) -> Outcome | None:
    """A transient provider failure, stored: the next attempt scheduled while one is left;
    on the last, the messages held when this conversation already got the apology in this
    outage (`Outcome.HELD`), else None (the apology goes out)."""
    last = not RETRY.may_retry(attempt, runtime)
    pause_tenant(runtime, state.tenant_id, exc)  # a 429 slows this tenant's other turns
    failed = _provider_failed(runtime, state, exc, attempt=attempt, last=last)
    if not last:
        return Outcome(retry_later(runtime, "turn", state.conversation_id, attempt=attempt,
                                   exc=exc, reenqueue=_reenqueue, event="turn"))
    log.error("turn_provider_failed", attempts=attempt, error=type(exc).__name__,
              cause=connection_cause(exc))
    if failed != "held":
        return None
    with hooks.scope() as session:  # one apology per conversation per outage
        message_repo.mark_answered(
            session, state.conversation_id, reason=failures.HELD_REASON, now=clock.now(),
            up_to_position=max(last_position, hooks.folded_up_to))
        hooks.write_context_tokens(session)
    log.info("turn_done", kind=Outcome.HELD.value, attempt=attempt)
    return Outcome.HELD


def _finish_turn(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks",
                 reply: Reply, *, attempt: int, up_to_position: int) -> Outcome:
    """Store the reply (`_finish`), send it, and trigger a compaction when it pays."""
    outcome = reply.outcome
    product = outcome in (Outcome.APOLOGY, Outcome.HANDOFF)
    _finish(runtime, state, reply.text, up_to_position=up_to_position,
            offers=outcome is Outcome.ANSWERED and hooks.offered,  # not an apology
            author=marks.product_author(outcome.value) if product else None,
            apology=outcome is Outcome.APOLOGY,
            settle=attempt > 1 and outcome is not Outcome.APOLOGY,  # a retried turn answered
            context_tokens=hooks.context_tokens, scope=hooks.scope)
    flush_outbox(runtime, state.conversation_id)
    if maybe_enqueue_compaction(runtime, state.conversation_id, tenant=state.tenant,
                                last_input_tokens=hooks.latest_tokens):
        log.info("compaction_enqueued")
    log.info("turn_done", kind=outcome.value, attempt=attempt)
    return outcome


def _converse(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks") -> LoopOutcome:
    try:
        return _sized_loop(runtime, state, hooks)
    except anthropic.BadRequestError as exc:  # a photo or PDF the API could not open:
        if not drop_refused_media(runtime, state.conversation_id, exc):  # workers/media.py
            raise
        log.warning("turn_media_refused_retrying_without_it")
        return _sized_loop(runtime, state, hooks)


def _sized_loop(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks"
                ) -> LoopOutcome:
    try:
        return _run_loop(runtime, state, hooks, hard_cap=False)
    except ContextWindowExceeded:
        log.warning("turn_context_window_exceeded_retrying_with_safe_window")
        return _run_loop(runtime, state, hooks, hard_cap=True)


def _run_loop(runtime: Runtime, state: ConversationState, hooks: "_StoreHooks", *,
              hard_cap: bool) -> LoopOutcome:
    """The tool loop over the prepared request: the one `_place` read first, then (a refused
    photo dropped, or the hard cap forced) one read again."""
    prepared, hooks.prepared = hooks.prepared, None
    if prepared is None or hard_cap:
        prepared = prepare(runtime, state, tools=REGISTRY, force_hard_cap=hard_cap)
    outcome = run_tool_loop(functools.partial(_create, runtime, hooks.typing, state.tenant_id),
                            request_for=prepared.request_for, messages=prepared.messages,
                            execute=functools.partial(_execute, runtime, state,
                                                      hooks.source, fresh=True, hooks=hooks),
                            hooks=hooks,
                            max_rounds=runtime.settings.turn_max_rounds,
                            fatal=(JobTimeoutException, TurnFenced, *OUTAGE_ERRORS),
                            stop_after=STOPS_THE_TURN)
    hooks.offered = _calls_offer_choices(prepared.messages)  # the request's and the loop's
    return outcome


def _calls_offer_choices(messages: list[dict[str, Any]]) -> bool:
    """Whether the history sent (and grown by the loop) holds an `offer_choices` call: else
    the reply can carry no choices and workers/choices.py need not look for them (issue 43,
    round trips). A retried turn's earlier call is in it: it follows the last reply."""
    return any(isinstance(block, dict) and block.get("type") == "tool_use"
               and block.get("name") == OFFER_CHOICES.name
               for message in messages if message.get("role") == "assistant"
               and isinstance(message.get("content"), list) for block in message["content"])


def _create(runtime: Runtime, typing: TypingIndicator, tenant_id: int, **request: Any) -> Any:
    typing.keep_alive()  # again past 20 s: Meta clears it after 25 s
    crash_point("before_model_call")
    return call_model(runtime, "turn", tenant_id=tenant_id, **request)


def repair_dangling_tool_use(runtime: Runtime, state: ConversationState,
                             dangling: list[tuple[int, list[Block]]]) -> int:
    """A previous attempt died between storing a tool_use and its results, and the customer may
    have written since: run (or replay: effects are keyed on the tool_use id) the missing tools
    of each (position, tool_use blocks) of `dangling`, last first, and place their results right
    after the tool_use, so every request stays valid. Returns how many tool rounds were repaired.
    """
    if not dangling:
        return 0
    with session_scope(runtime.engine) as session:
        source = _Source(_latest_customer_message(session, state.conversation_id))
    for position, uses in dangling:
        results = [_tool_result(runtime, state, source, block) for block in uses]
        with session_scope(runtime.engine) as session:
            memory.insert_after(session, Message(
                tenant_id=state.tenant_id, conversation_id=state.conversation_id, role="user",
                direction="internal", content=results, received_at=clock.now(),
                starts_turn=False, answered_at=clock.now()), position=position)
        log.warning("tool_round_repaired", tools=len(uses))
    return len(dangling)


def _tool_result(runtime: Runtime, state: ConversationState, source: _Source, block: Block
                 ) -> Block:
    text, is_error = _execute(runtime, state, source, block)
    result = {"type": "tool_result", "tool_use_id": block["id"], "content": text}
    return {**result, "is_error": True} if is_error else result


def _execute(runtime: Runtime, state: ConversationState, source: _Source,
             block: dict[str, Any], *, fresh: bool = False,
             hooks: "_StoreHooks | None" = None) -> tuple[str, bool]:
    """Run `block` (a tool_use); `fresh`: it came in a response of this job, so no stored
    call of its id can exist (agent/tools/registry.execute_tool); a repaired round's may.
    In the transaction of `hooks`' tool round when one is open (`_StoreHooks.tool_round`):
    an error then propagates, for that round to run again the slow way."""
    ctx = ToolContext(engine=runtime.engine, tenant_id=state.tenant_id,
                      contact_id=state.contact_id, conversation_id=state.conversation_id,
                      timezone=ZoneInfo(state.tenant.timezone), now=clock.now(),
                      tool_use_id=str(block["id"]), source_message_id=source.message_id)
    session = hooks.round_session if hooks is not None else None
    if session is not None:
        text, is_error = execute_in(session, ctx, str(block.get("name")), block.get("input"),
                                    tools=REGISTRY), False
    else:
        text, is_error = execute_tool(ctx, str(block.get("name")), block.get("input"),
                                      tools=REGISTRY, fresh=fresh)
    log.info("tool_called", tool=block.get("name"), is_error=is_error)
    return text, is_error


def _waiting(runtime: Runtime, conversation_id: int) -> list[Any]:
    """The `media` of each message not yet placed in the history: a look that opens no
    transaction (`read_scope`), made only when the round's results' INSERT saw one waiting
    (storage/messages.append_seeing_waiting)."""
    with read_scope(runtime.engine) as session:
        return list(session.exec(select(Message.media).where(
            Message.conversation_id == conversation_id,
            col(Message.position).is_(None))).all())


def _pending_media(media: Any) -> bool:
    """A message's `media` still to fetch (workers/media.py resolves it)."""
    return isinstance(media, dict) and media.get("state") == "pending"


def _latest_customer_message(session: Session, conversation_id: int) -> int | None:
    """The customer's latest message placed in the history."""
    found = session.exec(select(Message.id).where(
        Message.conversation_id == conversation_id, Message.direction == "inbound",
        col(Message.position).is_not(None)).order_by(col(Message.position).desc())
        .limit(1)).first()
    return int(found) if found is not None else None


class _StoreHooks:
    """Persist each intermediate message and each call's usage as soon as it exists; the
    context size of the latest call (`context_tokens`) and its usage row (`unstored`) are
    written with the turn's next store (`scope`)."""

    def __init__(self, runtime: Runtime, state: ConversationState,
                 prepared: Prepared | None = None, source: _Source | None = None) -> None:
        self.runtime, self.state, self.prepared = runtime, state, prepared
        self.source = source or _Source(None)
        self.typing = TypingIndicator(runtime, state.tenant, state.contact, state.conversation,
                                      known_wamid=lambda: self.source.wamid)
        self.folded_up_to = 0  # history position of the last customer message folded in
        self.context_tokens: int | None = None
        self.latest_tokens: int | None = None  # the last call's context size, kept
        self.unstored: list[Usage] = []
        self.round_session: Session | None = None  # the open tool round's (`tool_round`)
        self.waiting: bool | None = None  # the last round's store saw messages waiting
        self.offered = False  # the loop's history holds an offer_choices call (`_run_loop`)

    def on_response(self, response: Any) -> None:
        """Keep the four usage counters of one call (workers/jobs.usage_row) for the turn's
        next store (`scope`); the conversation keeps the context size (input + cache creation
        + cache read) as `last_input_tokens`, written by that store too."""
        row = usage_row(tenant_id=self.state.tenant_id,
                        conversation_id=self.state.conversation_id, response=response,
                        purpose="turn")
        self.unstored.append(row)
        record_usage_metrics(self.runtime, row)
        total = row.input_tokens + row.cache_creation_input_tokens + row.cache_read_input_tokens
        self.context_tokens = self.latest_tokens = total
        log.info("claude_call", purpose="turn", request_id=row.request_id, context_tokens=total,
                 cache_read=row.cache_read_input_tokens, output_tokens=row.output_tokens)

    @contextmanager
    def scope(self) -> Iterator[Session]:
        """A transaction of the turn (`session_scope`) that stores the usage rows kept since
        the last one. A call was billed either way: when this transaction fails or is fenced
        out, they are stored alone (`settle_usage`), so none is ever lost with it."""
        rows, self.unstored = self.unstored, []
        try:
            with session_scope(self.runtime.engine) as session:
                session.add_all(rows)
                yield session
        except BaseException:
            self.unstored = rows + self.unstored
            self.settle_usage(unless_stored=bool(rows))  # its commit may have gone through
            raise

    def settle_usage(self, *, unless_stored: bool = False) -> None:
        """Store the usage rows kept and not stored yet, alone and unfenced
        (workers/jobs.store_usage, `unless_stored` too); a failure here is logged, the turn's
        own error goes on."""
        rows, self.unstored = self.unstored, []
        try:
            store_usage(self.runtime, rows, unless_stored=unless_stored)
        except Exception as exc:
            log.error("usage_not_stored", rows=len(rows), error=type(exc).__name__)
            if not isinstance(exc, OUTAGE_ERRORS):
                raise

    def on_assistant(self, content: list[dict[str, Any]]) -> None:
        self._append("assistant", content)

    def tool_round(self, run: Callable[[], list[Block]]) -> list[Block]:
        """Run the round's tools and store the user message of their results in one
        transaction (`scope`: one fence check, one commit; issue 43, round trips): each
        tool's effects and ToolCall record (agent/tools/registry.execute_in), the message,
        the usage rows kept. A failed call (its ToolError, a bug) may have written before
        failing, so that transaction is rolled back and the round runs again the slow way:
        each call in a transaction of its own (registry.execute_tool records the error),
        then the message. Their results were never seen, nor their effects kept.
        The crash point comes before: a crash leaves the tool_use without results, which a
        retried turn repairs (`repair_dangling_tool_use`)."""
        crash_point("before_tool_round")
        try:
            with self.scope() as session:
                self.round_session = session
                results = run()
                if any(result.get("is_error") for result in results):
                    raise _RoundFailed
                self._store_results(session, results)
                return results
        except _RoundFailed:
            log.info("tool_round_run_again")
        finally:
            self.round_session = None
        results = run()
        with self.scope() as session:
            self._store_results(session, results)
        return results

    def _store_results(self, session: Session, results: list[Block]) -> None:
        """The round's user message; whether messages wait to be folded in comes with it
        (`fold_new_messages`)."""
        self.waiting = message_repo.append_seeing_waiting(
            session, tenant_id=self.state.tenant_id, conversation_id=self.state.conversation_id,
            role="user", content=results, now=clock.now())
        self.write_context_tokens(session, mid_turn=True)

    def fold_new_messages(self) -> list[dict[str, Any]]:
        """The messages that arrived since the turn placed its own, placed after the results
        just stored, as blocks. Nothing is read when the results' INSERT saw none waiting
        (`tool_round`); else `_waiting` looks (their media) before placing them."""
        conversation_id = self.state.conversation_id
        seen, self.waiting = self.waiting, None
        if seen is False:  # the round's results' INSERT saw none (`tool_round`)
            return []
        waiting = _waiting(self.runtime, conversation_id)
        if not waiting:
            return []
        if any(_pending_media(media) for media in waiting):
            resolve_media(self.runtime, conversation_id, language=self.state.tenant.language)
        with session_scope(self.runtime.engine) as session:
            top, rows = message_repo.place_waiting(session, conversation_id)
            if not rows:
                return []
            blocks = [b for m in rows for b in m.content
                      if b.get("type") == "text" or is_media(b)]  # a photo sent mid-turn too
            folded = inline_in(session, [{"role": "user", "content": blocks}])[0]["content"]
        self.folded_up_to = top
        self.source.message_id = next((m.id for m in reversed(rows)
                                       if m.direction == "inbound"), self.source.message_id)
        self.source.wamid = _latest_wamid(rows) or self.source.wamid
        log.info("turn_folded_new_messages", count=len(rows))
        return list(folded)

    def write_context_tokens(self, session: Session, *, mid_turn: bool = False) -> None:
        """The latest call's context size into the conversation, in `session`'s transaction:
        one UPDATE, the row is not read. `mid_turn`: a store before the turn's last, which
        writes it (`_finish`, the held path): skipped while the stored and the new size are
        both within the sizes that decide anything (`_decides`), so a turn that dies
        before its last store leaves one that decides the same (issue 43, round trips)."""
        if self.context_tokens is None:
            return
        if mid_turn and max(self.context_tokens,
                            self.state.conversation.last_input_tokens) <= self._decides():
            return
        session.exec(update(Conversation).where(
            col(Conversation.id) == self.state.conversation_id,
        ).values(last_input_tokens=self.context_tokens))
        self.context_tokens = None

    def _decides(self) -> int:
        """The smallest context size that decides something: the next turn's hard cap
        (workers/turn_window.py) or a compaction (workers/compaction.py)."""
        return min(self.runtime.settings.context_hard_cap_tokens,
                   self.state.tenant.compaction_threshold_tokens)

    def _append(self, role: str, content: list[dict[str, Any]]) -> None:
        with self.scope() as session:
            self._store_in(session, role, content)

    def _store_in(self, session: Session, role: str, content: list[dict[str, Any]]) -> None:
        message_repo.append(session, tenant_id=self.state.tenant_id,
                            conversation_id=self.state.conversation_id, role=role,
                            direction="internal", content=content, now=clock.now())
        self.write_context_tokens(session, mid_turn=True)


class _RoundFailed(Exception):
    """A call of a tool round run in one transaction failed: roll it back, run it again
    (`_StoreHooks.tool_round`)."""


def _provider_failed(runtime: Runtime, state: ConversationState, exc: BaseException, *,
                     attempt: int, last: bool) -> str:
    """Store attempt `attempt` of a failed call (storage/failures.py) and mark the provider
    down (workers/outages.py). On the `last` attempt: "held" when the conversation already
    got the apology in this outage (within storage/failures.RECOVER_WITHIN), else "apology";
    "retrying" before."""
    now = clock.now()
    with session_scope(runtime.engine) as session:
        conversation = session.get(Conversation, state.conversation_id)
        outcome = "retrying"
        if last:
            outcome = "held" if conversation is not None and \
                failures.may_recover(conversation, now) else "apology"  # an older: again
        failures.record(session, tenant_id=state.tenant_id,
                        conversation_id=state.conversation_id, provider="anthropic",
                        purpose="turn", status=getattr(exc, "status_code", None),
                        attempt=attempt, now=now, outcome=outcome)
    outages.provider_failed(runtime)
    return outcome


def _finish(runtime: Runtime, state: ConversationState, reply: str, *, up_to_position: int,
            offers: bool = False, author: str | None = None, apology: bool = False,
            settle: bool = False, context_tokens: int | None = None,
            scope: "Callable[[], AbstractContextManager[Session]] | None" = None) -> bool:
    """Store the reply, its outbox rows and the answered marks in one transaction.

    `offers`: the reply may carry the choices of this turn's `offer_choices` (workers/choices.py).
    `settle`: a retried turn answered, its stored failures are settled (storage/failures.py).
    `context_tokens`: the latest call's context size, kept as `last_input_tokens`.
    `scope`: the transaction (default `session_scope`; the turn's `_StoreHooks.scope` stores
    the last call's usage row in it).
    Compare-and-set on the answered marks: if another worker answered these messages meanwhile
    (a lock lost to a Redis flush, then the reconciler), this reply is dropped, never sent as a
    second answer. Returns False then.
    """
    now = clock.now()
    with (scope or functools.partial(session_scope, runtime.engine))() as session:
        if settle:
            failures.settle(session, state.conversation_id, provider="anthropic",
                            purpose="turn", outcome="recovered")
        if not message_repo.mark_answered(session, state.conversation_id,
                                          up_to_position=up_to_position, now=now,
                                          reason=failures.APOLOGY_REASON if apology else None):
            log.warning("turn_reply_dropped_already_answered")
            return False
        _queue_reply(session, state, reply, offers=offers, author=author, now=now)
        values: dict[str, Any] = touch_values(now=now, inactivity_timeout=inactivity_timeout(
            state.tenant.inactivity_timeout_minutes))
        if context_tokens is not None:
            values["last_input_tokens"] = context_tokens
        # one apology per conversation per outage (storage/failures.py)
        values.update({"outage_state": failures.APOLOGIZED, "outage_at": now} if apology
                      else failures.after_reply_values(now))
        session.exec(update(Conversation).where(  # one statement: the row is not read
            col(Conversation.id) == state.conversation_id).values(values)
            .execution_options(synchronize_session=False))
    return True


def _queue_reply(session: Session, state: ConversationState, reply: str, *, offers: bool,
                 author: str | None, now: datetime) -> None:
    """The reply as the agent's message and its outbox parts (a list or buttons when it
    `offers` this turn's choices, else text split at Meta's limit)."""
    to, recipient = contact_repo.address(state.contact)
    kind, parts = reply_parts(session, state.conversation_id, reply,  # a list, buttons
                              state.tenant.language) if offers else ("text", split_text(reply))
    message = message_repo.append(
        session, tenant_id=state.tenant_id, conversation_id=state.conversation_id,
        role="assistant", direction="outbound", content=[{"type": "text", "text": reply}],
        now=now, author=author, queued=True)
    message_repo.add_outbound(session, message=message, parts=parts, to=to,
                              recipient=recipient, now=now, kind=kind)


WINDOW_CLOSED_REASON = (f"not answered: {SERVICE_WINDOW_CLOSED} "
                        "(WhatsApp customer service window)")


def _window_closed_turn(session: Session, state: ConversationState, last_position: int,
                        now: datetime) -> Outcome:
    """Too late for a free-form reply (a backlog, a retry a day later): nothing is sent to find
    out. The messages record why; the tenant's approved follow-up template goes out instead
    when it has one, else the customer is recorded as not reachable.
    """
    message_repo.mark_answered(session, state.conversation_id, up_to_position=last_position,
                               now=now, reason=WINDOW_CLOSED_REASON)
    template = state.tenant.followup_template
    if not template:
        log.warning("turn_refused_window_closed_customer_unreachable")
        return Outcome.WINDOW_CLOSED
    to, recipient = contact_repo.address(state.contact)
    note = f"[follow-up template {template}: the reply window had closed]"
    message = message_repo.append(
        session, tenant_id=state.tenant_id, conversation_id=state.conversation_id,
        role="assistant", direction="outbound", content=[{"type": "text", "text": note}],
        now=now, author=marks.product_author("template"))
    # its delivery state, not this text, says whether it went out
    message_repo.add_outbound(session, message=message, parts=[template], to=to,
                              recipient=recipient, now=now, kind="template")
    log.warning("turn_window_closed_template_queued")
    return Outcome.WINDOW_CLOSED_TEMPLATE


def _load(runtime: Runtime, conversation_id: int) -> ConversationState | None:
    """The turn's state in a transaction of its own (workers/conversation_state.py)."""
    with session_scope(runtime.engine) as session:
        return load_state(session, conversation_id)
