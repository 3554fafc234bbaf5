"""What every tool gets and may raise, and the bounds of what it returns.

Every tool result stays in the history until pruned, so each is bounded (README, Scheduling
tools): a tool states its own bound and says in the result what it left out; values the model
sent are echoed cut short; `MAX_RESULT_CHARS` is the backstop for any result.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Engine


class ToolError(Exception):
    """The model called a tool wrongly or asked for something not allowed; the message is sent
    back to the model as a `tool_result` with `is_error`.
    """


@dataclass(frozen=True)
class ToolContext:
    """Authority of a tool call: tenant and contact come from the conversation, never from the
    model's input (ARCHITECTURE.md, Authority and safety).
    """

    engine: Engine
    tenant_id: int
    contact_id: int
    conversation_id: int
    timezone: ZoneInfo
    now: datetime
    tool_use_id: str
    source_message_id: int | None = None  # the turn's latest customer message


MAX_RESULT_CHARS = 4000  # any tool result, errors included (about 1,000 tokens)
ECHO_CHARS = 40  # a value the model sent, repeated in an error
NAME_CHARS = 60  # a service's or professional's name in a result
LISTED_CODES = 20  # codes named in an error ("known service codes: ...")


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def echo(value: object) -> str:
    """A value the model sent, as it would be quoted (repr), cut to ECHO_CHARS."""
    return clip(repr(value), ECHO_CHARS)


def some_codes(codes: Sequence[str]) -> str:
    """At most LISTED_CODES codes, comma-separated, saying how many more there are."""
    shown = ", ".join(codes[:LISTED_CODES]) or "none"
    extra = len(codes) - LISTED_CODES
    return shown + (f" and {extra} more" if extra > 0 else "")


def bounded(header: str, lines: Sequence[str], *, max_chars: int, left_out: str) -> str:
    """`header` and as many of `lines` as fit in `max_chars`, then one line saying how many
    were left out and how to get them (`left_out`, e.g. "ask for a narrower range")."""
    kept, size = [header], len(header)
    for index, line in enumerate(lines):
        if size + 1 + len(line) > max_chars - 80:  # room for the "left out" line
            kept.append(f"({len(lines) - index} more left out; {left_out})")
            break
        kept.append(line)
        size += 1 + len(line)
    return "\n".join(kept)


def backstop(text: str) -> str:
    """Any result cut to MAX_RESULT_CHARS, saying so (a tool's own bound comes first)."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    note = f"\n[{len(text) - MAX_RESULT_CHARS + 60} characters left out]"
    return text[:MAX_RESULT_CHARS - 60] + note
