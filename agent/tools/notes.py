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
from agent.tools.scheduling import NOTE_PROPERTY, checked_note, describe, own_upcoming


def add_appointment_note(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    appointment = own_upcoming(session, ctx, args.get("appointment_id"))
    note = checked_note(session, ctx, args.get("note"))
    if not note:
        raise ToolError("note is required: the customer's request for the visit")
    appointment.note = note
    session.add(appointment)
    return "Note saved. " + describe(session, appointment, ctx.timezone)


ADD_APPOINTMENT_NOTE = Tool(
    name="add_appointment_note",
    description="Set an upcoming appointment's note for the professional (replaces it).",
    input_schema={"type": "object", "properties": {
        "appointment_id": {"type": "integer"}, "note": NOTE_PROPERTY},
        "required": ["appointment_id", "note"]},
    handler=add_appointment_note)
