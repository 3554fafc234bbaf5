"""The tool registry: every tool the model may call, and running one by its name.

A new tool is a `Tool` in its own module (or its family's) and one line in REGISTRY; the
request builder lists what REGISTRY holds (context.build_request, sorted by name) and
`execute_tool` runs what it holds, so a tool cannot be offered and not run, nor the reverse.
"""

from collections.abc import Sequence
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from agent.errors import ToolError
from agent.tools import choices, facts, handoff, notes, scheduling, waitlist
from agent.tools.base import Tool, ToolContext, backstop, echo
from storage.db import session_scope
from storage.models import ToolCall

log = structlog.get_logger(__name__)

REGISTRY: tuple[Tool, ...] = (
    notes.ADD_APPOINTMENT_NOTE,
    scheduling.BOOK_APPOINTMENT,
    scheduling.CANCEL_APPOINTMENT,
    waitlist.FIND_AVAILABLE_SLOTS,
    handoff.HANDOFF_TO_HUMAN,
    scheduling.LIST_MY_APPOINTMENTS,
    scheduling.LIST_SERVICES,
    choices.OFFER_CHOICES,
    facts.REMEMBER_FACT,
    scheduling.RESCHEDULE_APPOINTMENT,
)


def execute_tool(ctx: ToolContext, name: str, tool_input: Any, *,
                 tools: Sequence[Tool] = REGISTRY, fresh: bool = False) -> tuple[str, bool]:
    """Run tool `name` of `tools` once per `ctx.tool_use_id`; returns (result text, is_error).

    The handler runs in one transaction with the look-up of the id and the call's ToolCall
    record; a ToolError (an unknown name, an input that is not an object, or the handler's)
    is recorded as an error result. A replayed id returns the stored result without running
    anything (logged as `tool_use_id_reused` when the stored call was of another tool: an id
    minted twice). `fresh`: the tool_use comes from a response received in this job, so no
    record of its id can exist yet (the API's ids are unique): no look-up (issue 43, round
    trips); the unique index still stops a second record (IntegrityError below).
    """
    try:
        with session_scope(ctx.engine) as session:
            done = None if fresh else session.exec(select(ToolCall).where(
                ToolCall.tool_use_id == ctx.tool_use_id).limit(1)).first()
            if done is not None:
                if done.name != name[:64]:
                    log.warning("tool_use_id_reused", tool=name[:64], stored_tool=done.name,
                                conversation_id=ctx.conversation_id)
                return done.result, done.is_error
            text = backstop(_dispatch(session, ctx, tools, name, tool_input))
            _record(session, ctx, name, tool_input, text, is_error=False)
            return text, False
    except ToolError as exc:
        with session_scope(ctx.engine) as session:
            text = backstop(str(exc))
            _record(session, ctx, name, tool_input, text, is_error=True)
        return text, True
    except IntegrityError:  # the same tool_use id ran concurrently: its record wins
        with session_scope(ctx.engine) as session:
            done = session.exec(select(ToolCall).where(
                ToolCall.tool_use_id == ctx.tool_use_id)).one()
            return done.result, done.is_error


def execute_in(session: Session, ctx: ToolContext, name: str, tool_input: Any, *,
               tools: Sequence[Tool] = REGISTRY) -> str:
    """Run tool `name` of `tools` in the caller's transaction (`session`) and add the call's
    ToolCall record to it; returns the result text. For a tool_use received in this job (no
    record of its id can exist: no look-up). A ToolError (or any error) propagates with the
    tool's writes, if any, still in `session`: the caller rolls the transaction back and runs
    the call by `execute_tool`, which records the error (workers/turns.py `tool_round`)."""
    text = backstop(_dispatch(session, ctx, tools, name, tool_input))
    _record(session, ctx, name, tool_input, text, is_error=False)
    return text


def tool_reply(block: dict[str, Any], result: str, *,
               tools: Sequence[Tool] = REGISTRY) -> str | None:
    """The customer's reply a successful call of `block` (a tool_use) carries, by its tool's
    `reply` (agent/tools/base.Tool); None when it carries none."""
    tool = next((t for t in tools if t.name == block.get("name")), None)
    tool_input = block.get("input")
    if tool is None or tool.reply is None or not isinstance(tool_input, dict):
        return None
    return tool.reply(tool_input, result)


def _record(session: Session, ctx: ToolContext, name: str, tool_input: Any, text: str, *,
            is_error: bool) -> None:
    session.add(ToolCall(conversation_id=ctx.conversation_id, tool_use_id=ctx.tool_use_id,
                         name=name[:64], input=tool_input if isinstance(tool_input, dict) else {},
                         result=text, is_error=is_error, created_at=ctx.now))


def _dispatch(session: Session, ctx: ToolContext, tools: Sequence[Tool], name: str,
              tool_input: Any) -> str:
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        raise ToolError(f"unknown tool {echo(name)}; available: "
                        f"{', '.join(t.name for t in tools)}")
    if not isinstance(tool_input, dict):
        raise ToolError("tool input must be a JSON object")
    return tool.handler(session, ctx, tool_input)
