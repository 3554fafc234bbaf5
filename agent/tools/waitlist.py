"""The customer's waitlist as the agent reaches it (issue 47): `find_available_slots` with
`waitlist` (its schema in agent/tools/scheduling.py, WAITLIST_PROPERTY; a property of the
search rather than a tool of its own, since every tool's tokens are paid on every call).

- join: the search's own window (one service, `date`, optional `professional`, `after`,
  `before`) goes on the waitlist, only when nothing in it is free (else the free times are
  returned, as a search would); the result says what was noted and that the product will
  message the customer when a time frees up (workers/waitlist.py keeps that promise).
- list: the customer's live entries. leave: their live entries of `date` (all without one).

The rules of entries (expiry at the window's end, at most MAX_ENTRIES) are storage/waitlist.py.
"""

from dataclasses import replace
from datetime import date
from typing import Any

from sqlmodel import Session

from agent.errors import ToolError
from agent.tools import scheduling
from agent.tools.base import Tool, ToolContext
from storage import waitlist
from storage.models import Professional, Service, Tenant, WaitlistEntry


def find_or_wait(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """find_available_slots, or its `waitlist` action (module docstring)."""
    action = args.get("waitlist")
    if action is None:
        return scheduling.find_available_slots(session, ctx, args)
    if action == "list":
        return listed(session, ctx)
    if action == "leave":
        day = scheduling.parse_date(args["date"], "date") if args.get("date") else None
        left = waitlist.leave(session, ctx.tenant_id, ctx.contact_id, day=day, now=ctx.now)
        return f"Left {left} waitlist entr{'y' if left == 1 else 'ies'}."
    if action != "join":
        raise ToolError("waitlist must be join, list or leave")
    return join(session, ctx, args)


def join(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """Put the customer on the waitlist for the search's window, when nothing in it is free."""
    if args.get("services") or not args.get("date") or args.get("date_to") not in (
            None, args.get("date")):
        raise ToolError("waitlist join takes one service and one date (with professional, "
                        "after, before as the customer asked)")
    found = scheduling.find_available_slots(session, ctx, args)
    if not found.startswith("No free slots"):
        return "Not joined: times are free in that window, offer them.\n" + found
    tenant = session.get(Tenant, ctx.tenant_id)
    assert tenant is not None
    service = scheduling.services_of(session, ctx.tenant_id, args)[0]
    pros = scheduling.candidates_of(session, ctx.tenant_id, service, args.get("professional"))
    professional_id = pros[0].id if args.get("professional") and len(pros) == 1 else None
    day = scheduling.parse_date(args["date"], "date")
    after, before = (scheduling.parse_hhmm(args.get(k), k) for k in ("after", "before"))
    try:
        entry, new = waitlist.join(
            session, tenant, contact_id=ctx.contact_id, service_id=service.id or 0,
            professional_id=professional_id, day=day,
            after=f"{after:%H:%M}" if after else "", before=f"{before:%H:%M}" if before else "",
            now=ctx.now)
    except ValueError as exc:
        raise ToolError(f"not joined: {exc}") from None
    said = "Joined the waitlist" if new else "Already on the waitlist"
    return (f"{said}: {_describe(session, entry)}. Tell the customer: if a time frees up, "
            "they get a message with buttons to take it.")


def listed(session: Session, ctx: ToolContext) -> str:
    entries = waitlist.of_contact(session, ctx.tenant_id, ctx.contact_id, now=ctx.now)
    if not entries:
        return "This customer is on no waitlist."
    return "Waitlist:\n" + "\n".join(f"- {_describe(session, e)}" for e in entries)


def _describe(session: Session, entry: WaitlistEntry) -> str:
    """"corte, Sat 2026-06-06 from 09:00 before 12:00, with julia" (what was noted)."""
    service = session.get(Service, entry.service_id)
    pro = session.get(Professional, entry.professional_id) if entry.professional_id else None
    day: date = entry.day
    return (f"{service.code if service else '?'}, {day:%a %Y-%m-%d}"
            + (f" from {entry.after}" if entry.after else "")
            + (f" before {entry.before}" if entry.before else "")
            + (f", with {pro.code}" if pro else ", anyone")
            + (" (a time is being offered)" if entry.status == "offered" else ""))


# the search tool, its handler taking the waitlist action (registry.REGISTRY lists this one)
FIND_AVAILABLE_SLOTS: Tool = replace(scheduling.FIND_AVAILABLE_SLOTS, handler=find_or_wait)
