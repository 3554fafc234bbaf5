"""The add_appointment_note tool (`ADD_APPOINTMENT_NOTE`, one `Tool` of the registry): attach
the customer's request for the visit to one of their upcoming bookings (issue 21).

The note's rules are those of `book_appointment`'s and `reschedule_appointment`'s `note`
(`scheduling.checked_note`, whose checks live in facts_rules.note_problem): at most 200
characters, the fact value checks, health content only when the tenant sets
`appointment_notes_sensitive: true`.
"""

from typing import Any

from sqlmodel import Session

from agent.errors import ToolError
from agent.tools.base import Tool, ToolContext
from agent.tools.scheduling import NOTE_PROPERTY, checked_note, describe_visit, own_visit


def add_appointment_note(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """The note belongs to the visit: every booked service of it carries it, as
    book_appointment writes it (the history and the console read any of them)."""
    rows = own_visit(session, ctx, args.get("appointment_id"))
    note = checked_note(session, ctx, args.get("note"))
    if not note:
        raise ToolError("note is required: the customer's request for the visit")
    for row in rows:
        row.note = note
        session.add(row)
    return "Note saved. " + describe_visit(session, rows, ctx.timezone)


ADD_APPOINTMENT_NOTE = Tool(
    name="add_appointment_note",
    description="Set an appointment's note for the professional (replaces it).",
    input_schema={"type": "object", "properties": {
        "appointment_id": {"type": "integer"}, "note": NOTE_PROPERTY},
        "required": ["appointment_id", "note"]},
    handler=add_appointment_note)
