"""What every tool gets and may raise."""

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
    model's input (DESIGN.md, Authority and safety).
    """

    engine: Engine
    tenant_id: int
    contact_id: int
    conversation_id: int
    timezone: ZoneInfo
    now: datetime
    tool_use_id: str
    source_message_id: int | None = None  # the turn's latest customer message
