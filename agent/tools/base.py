"""What a tool is, what every tool gets and may raise, and the bounds of what it returns.

A tool is one `Tool`: its name, description and input schema (what the model sees) and its
handler (what runs), kept together; `registry.REGISTRY` lists them. Every tool result stays in
the history until pruned, so each is bounded (docs/ARCHITECTURE.md, Scheduling tools): a tool
states its own bound and says in the result what it left out; values the model sent are echoed cut
short; `MAX_RESULT_CHARS` is the backstop for any result.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Engine
from sqlmodel import Session


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


Handler = Callable[[Session, "ToolContext", dict[str, Any]], str]
# (the call's input, its successful result) -> the reply that ends the turn, or None (issue 41)
Reply = Callable[[dict[str, Any], str], str | None]


@dataclass(frozen=True)
class Tool:
    """One tool the model can call: its definition and its handler, together.

    `input_schema` is the JSON schema of the input (Sources: Anthropic §1.2, `tools`).
    `handler(session, ctx, tool_input)` runs in the transaction of the call's ToolCall record
    and returns the result text, or raises ToolError (see `registry.execute_tool`).
    `fact_key_property` names the input property that takes one of the tenant's fact keys: its
    schema gets those keys as its `enum`, and a tenant with no fact keys is not offered the tool.
    `reply(input, result)`, when set, gives the customer's reply carried by a successful call:
    the turn then ends with it and no further model call (agent/loop.py; issue 41).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Handler
    fact_key_property: str | None = None
    reply: Reply | None = None

    def definition(self, fact_keys: Sequence[str]) -> dict[str, Any] | None:
        """The tool as the request lists it, for a tenant with `fact_keys`, or None
        when it is not offered. The same bytes every call for a tenant (a stable cached
        prefix): the schema is shared, never copied, except the property that gets the keys.
        """
        schema = self.input_schema
        if self.fact_key_property is not None:
            if not fact_keys:
                return None
            properties = schema["properties"]
            keyed = {**properties[self.fact_key_property], "enum": sorted(fact_keys)}
            schema = {**schema, "properties": {**properties, self.fact_key_property: keyed}}
        return {"name": self.name, "description": self.description, "input_schema": schema}


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
