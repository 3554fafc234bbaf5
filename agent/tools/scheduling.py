"""The scheduling tools: list_services, find_available_slots, book_appointment,
list_my_appointments, cancel_appointment, reschedule_appointment (each a `Tool` beside its
handler; `registry.REGISTRY` lists them).

Each runs in one transaction together with its ToolCall record (`registry.execute_tool`), so a
retried turn that replays a `tool_use` id gets the stored result and no second effect. Two
appointments of one professional never overlap: the check and the insert share a transaction
that cannot interleave (the professional's row is locked FOR UPDATE on PostgreSQL; SQLite
transactions are BEGIN IMMEDIATE).
"""

import re
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import false
from sqlalchemy.orm import aliased
from sqlmodel import Session, and_, col, func, or_, select
from sqlmodel.sql.expression import SelectOfScalar

from agent.errors import ToolError
from agent.tools import availability, series
from agent.tools.base import (
    NAME_CHARS,
    Tool,
    ToolContext,
    bounded,
    clip,
    echo,
    some_codes,
)
from agent.tools.days_off import closed_label
from agent.tools.facts_rules import note_problem
from agent.tools.replies import (
    NOT_SENT,
    REPLY_PROPERTY,
    VisitFacts,
    checked_reply,
    reply_note,
    sent_reply,
)
from agent.tools.slots import (
    Interval,
    Slot,
    local_exists,
    local_to_utc,
    overlaps,
    too_soon,
)
from core.recurrence import RuleError, checked_rule, starts_on_rule
from storage import appointments, deposits, job_catalogue, reminders, webhooks
from storage.models import (
    Appointment,
    Deposit,
    Professional,
    Service,
    Tenant,
    VisitSeries,
)
from storage.tenant_config import price_text

MAX_RANGE_DAYS = 14
DEFAULT_RANGE_DAYS = 7
# The bounds of the results (docs/ARCHITECTURE.md, Scheduling tools); MAX_RESULT_CHARS backs them
# all
SERVICES_CHARS = 3000  # list_services: lines until this, then "N more left out"
PROFESSIONALS_NAMED = 3  # names of who does a service in a list_services line
APPOINTMENTS_LISTED = 10  # list_my_appointments
FOR_NAME_CHARS = 100  # Appointment.for_name
MAX_ID = 2**31 - 1  # an INTEGER primary key: a larger id cannot exist (nor be queried)

# the schemas say what the model needs, once (issue 41: every token is paid on every call);
# "optional" is what `required` already says
NOTE_PROPERTY = {"type": "string",
                 "description": "Customer's request, their words, ≤200 chars"}
_OPTIONAL_NOTE = {**NOTE_PROPERTY, "description": "Optional: c" + NOTE_PROPERTY[
    "description"][1:]}
_LOCAL_TIME = {"type": "string", "description": "YYYY-MM-DDTHH:MM"}
_CODE = {"type": "string", "description": "Optional"}  # a professional's code: the name says it
_OPTIONAL = _CODE  # a property whose name says what it takes


def list_services(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """One line per service, at most SERVICES_CHARS in all; `query` narrows the list."""
    services = _services(session, ctx.tenant_id)
    if not services:
        return "No services are configured."
    query = args.get("query")
    if isinstance(query, str) and query.strip():
        wanted = query.strip().casefold()
        services = [s for s in services if wanted in s.code.casefold()
                    or wanted in s.name.casefold()]
        if not services:
            return f"No service matches {echo(query)}; call list_services without a query."
    pros = _professionals(session, ctx.tenant_id)
    tenant = _tenant(session, ctx.tenant_id)
    lines = [f"- {s.code}: {clip(s.name, NAME_CHARS)}, {s.duration_minutes} min"
             + (f", {price}" if (price := price_text(s.price_cents, tenant.currency,
                                                      minimum=s.price_from,
                                                      language=tenant.language)) else "")
             + f" (with {_who(s, pros)})" for s in services]
    return bounded("Services:", lines, max_chars=SERVICES_CHARS,
                   left_out="call list_services with a query to search them by name")


LIST_SERVICES = Tool(
    name="list_services",
    description="Services: codes, prices, professionals.",
    input_schema={"type": "object", "properties": {
        "query": {"type": "string", "description": "Optional: name or code part"}}},
    handler=list_services)


def _who(service: Service, pros: list[Professional]) -> str:
    names = [f"{p.code} ({clip(p.name, NAME_CHARS)})" for p in pros
             if service.code in p.service_codes]
    extra = len(names) - PROFESSIONALS_NAMED
    return (", ".join(names[:PROFESSIONALS_NAMED]) or "nobody") + (
        f" and {extra} more" if extra > 0 else "")


def find_available_slots(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    services = _services_of(session, ctx.tenant_id, args)
    today = ctx.now.astimezone(ctx.timezone).date()
    first = _parse_date(args.get("date"), "date") if args.get("date") else today
    last = _parse_date(args.get("date_to"), "date_to") if args.get("date_to") else (
        first if args.get("date") else first + timedelta(days=DEFAULT_RANGE_DAYS - 1))
    if last < first or (last - first).days >= MAX_RANGE_DAYS:
        raise ToolError(f"date_to must be on or after date and at most {MAX_RANGE_DAYS} days on")
    tenant = _tenant(session, ctx.tenant_id)
    first, last = max(first, today), min(last, _last_bookable_day(tenant, today))
    if first > last:
        raise ToolError(_too_far(tenant, today))
    groups = _visit_candidates(session, ctx.tenant_id, services, args.get("professional"))
    after, before = _parse_hhmm(args.get("after"), "after"), _parse_hhmm(args.get("before"),
                                                                         "before")
    if after is not None and before is not None and after >= before:
        raise ToolError(f"after ({after:%H:%M}) must be earlier than before ({before:%H:%M})")
    pros = {p.id: p for group in groups for p in group}
    codes = "+".join(s.code for s in services)
    if len(services) == 1:  # none overlapping the customer's own bookings (one read)
        slots = availability.free_slots(
            session, tenant=tenant, service=services[0], pros=groups[0], first=first,
            last=last, now=ctx.now, after=after, before=before, contact_id=ctx.contact_id)
        found = bool(slots)
    else:
        own = availability.own_intervals(
            session, ctx.contact_id,
            local_to_utc(first, "00:00", ctx.timezone) - timedelta(days=1),
            local_to_utc(last + timedelta(days=3), "00:00", ctx.timezone))
        visits = availability.visit_slots(session, tenant=tenant, services=services,
                                          pros=groups, first=first, last=last, now=ctx.now,
                                          after=after, before=before, own=own)
        found = bool(visits)
    closed = _holidays_said(session, tenant, first, last)
    if not found:
        return (f"No free slots for {codes} between {first.isoformat()} and "
                f"{last.isoformat()}" + (f" from {after:%H:%M}" if after else "")
                + (f" before {before:%H:%M}" if before else "") + "." + closed)
    if len(services) == 1:
        return _format_times(slots, pros, ctx.timezone, services[0]) + closed
    return _format_visits(visits, pros, ctx.timezone) + closed


def _holidays_said(session: Session, tenant: Tenant, first: date, last: date) -> str:
    """One line per public holiday the business is closed on in the range (issue 42), so the
    agent can say why: "\nMon 2026-09-07 fechado: Independência do Brasil"."""
    days_off = availability.business_exceptions(session, tenant.id or 0)
    return "".join(f"\n{day:%a %Y-%m-%d} {closed_label(tenant.language, name)}"
                   for day, name in days_off.closed_between(first, last).items())


SERVICE_PROPERTY = {"type": "string", "description": "Code, or services"}
# issue 47: the customer's waitlist, run by agent/tools/waitlist.py (this schema's one home)
WAITLIST_PROPERTY = {"enum": ["join", "list", "leave"],
                     "description": "Optional: join to wait if none fit"}
SERVICES_PROPERTY = {"type": "array", "items": {"type": "string"},
                     "description": "Or several, in order"}
FIND_AVAILABLE_SLOTS = Tool(
    name="find_available_slots",
    description="Free start times and who is free, ≤14 days.",
    input_schema={"type": "object", "properties": {
        "service": SERVICE_PROPERTY,
        "services": SERVICES_PROPERTY,
        "date": {"type": "string", "description": "YYYY-MM-DD, default today"},
        "date_to": {"type": "string", "description": "Last day, default date"},
        "professional": _CODE,
        "after": {"type": "string", "description": "Optional: from HH:MM"},
        "before": {"type": "string", "description": "Optional HH:MM"},
        "waitlist": WAITLIST_PROPERTY}},
    handler=find_available_slots)


def book_appointment(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    job_catalogue.forget(ctx.tenant_id)  # a booking decides on the catalogue as it is now
    services = _services_of(session, ctx.tenant_id, args)
    start = _parse_local(args.get("start"), ctx.timezone)
    reply = checked_reply(args.get("reply"))
    note = checked_note(session, ctx, args.get("note"))
    for_name = _for_name(args.get("for_name"))
    rule = _rrule(args.get("rrule"), start, ctx.timezone)
    # a visit for an occurrence of the customer's series that needs a new time joins it
    upcoming, own, joining = _customer_read(session, ctx, *_visit_range(start, services),
                                            None if rule else [s.code for s in services])
    rows = _place_visit(session, ctx, services, start, args.get("professional"),
                        in_series=joining is not None, customer=(upcoming, own))
    for row in rows:
        row.note, row.for_name = note, for_name
        session.add(row)
    tenant = _tenant(session, ctx.tenant_id)
    # issue 48: a visit that needs a deposit is held until paid (a series asks none: its
    # visits are booked as they are placed)
    deposit = None if rule else deposits.hold(session, tenant, rows, services, now=ctx.now)
    if deposit is not None:  # booked when paid (storage/deposits.confirm); the Pix request
        # goes out from the deposits pass (workers/deposits.py)
        # a held visit is not booked: a reply written for a booking is never sent for it
        return held_line(deposit, tenant) + _describe_visit(session, rows, ctx.timezone) + (
            "" if reply is None else f"\n{NOT_SENT}: the visit is held, not booked. Write "
            "your reply: what is held, until when, and the deposit by Pix.")
    # a visit placed just now, held for no deposit: none to look up
    reminders.schedule(session, tenant, rows[0], now=ctx.now, held=False)
    for row in rows:
        webhooks.emit(session, ctx.tenant_id, "appointment.booked",
                      webhooks.appointment_data(session, row, by="customer"), now=ctx.now)
    said = "Booked. " + _describe_visit(session, rows, ctx.timezone)
    also: list[datetime] = []
    if rule:
        made, visits = series.start(session, tenant, rows, rule,
                                    professional_id=rows[0].professional_id, now=ctx.now)
        also = [v[0].start_at for v in visits]
        said = _series_booked(session, made, visits, ctx.timezone)
    elif joining is not None:
        entry = series.resolve(session, joining, rows, ctx.timezone)
        said += f" It replaces visit {entry['n']} of series {joining.id}."
    return said + reply_note(reply, _facts(session, ctx, rows, also=also))


def _rrule(value: Any, start: datetime, tz: ZoneInfo) -> str | None:
    """book_appointment's `rrule` → the checked RRULE (None: one visit); ToolError naming
    the problem (core/recurrence.checked_rule), or a start that is not the rule's first."""
    if value is None or value == "":
        return None
    local = start.astimezone(tz).replace(tzinfo=None)
    try:
        rule = checked_rule(value, local)
    except RuleError as exc:
        raise ToolError(f"{exc}; nothing was booked") from None
    if not starts_on_rule(rule, local):
        raise ToolError(f"start {local:%a %Y-%m-%d} is not a day of the rrule {rule}; "
                        "nothing was booked")
    return rule


def _series_booked(session: Session, made: VisitSeries, visits: list[list[Appointment]],
                   tz: ZoneInfo) -> str:
    """A series booking's result: its visits one line each, then what needs a new time."""
    lines = [f"Booked {_describe_visit(session, v, tz)}" for v in visits]
    said = "\n".join([series.summary(session, made, tz) + ". One visit each:", *lines])
    if made.pending:
        said += ("\nOffer the customer another time for each that needs one "
                 "(find_available_slots); booking it joins the series.")
    return said


BOOK_APPOINTMENT = Tool(
    name="book_appointment",
    description="Book a visit for this customer.",
    input_schema={"type": "object", "properties": {
        "service": SERVICE_PROPERTY,
        "services": SERVICES_PROPERTY,
        "start": _LOCAL_TIME,
        "professional": _CODE,
        "for_name": {"type": "string", "description": "Optional: who, if someone else"},
        "note": _OPTIONAL_NOTE, "reply": REPLY_PROPERTY,
        "rrule": _OPTIONAL},  # a series (issue 46): the name says what it takes
        "required": ["start"]},
    handler=book_appointment, reply=sent_reply)


def held_line(deposit: Deposit, tenant: Tenant) -> str:
    """What the agent is told of a held visit: how much, until when (local), that the Pix
    code goes to the customer and what happens unpaid."""
    until = deposit.hold_until.astimezone(ZoneInfo(tenant.timezone))
    amount = price_text(deposit.amount_cents, deposit.currency, language=tenant.language)
    return (f"Held until {until:%H:%M} for a {amount} Pix deposit (the code is sent to the "
            "customer); unpaid by then: released. ")


def list_my_appointments(session: Session, ctx: ToolContext, _: dict[str, Any]) -> str:
    """The next APPOINTMENTS_LISTED visits, then how many more there are."""
    first_start = func.min(col(Appointment.start_at))
    visit_ids = [v for v, _ in session.exec(select(appointments.VISIT, first_start).where(
        *_upcoming(ctx)).group_by(appointments.VISIT).order_by(first_start)
        .limit(APPOINTMENTS_LISTED)).all()]
    if not visit_ids:
        return "This customer has no upcoming appointments."
    lines = ["Upcoming appointments:"]
    for visit_id in visit_ids:
        rows = appointments.booked(appointments.visit_rows(session, visit_id))
        deposit = deposits.of_visits(session, [visit_id]).get(visit_id)
        lines.append("- " + _describe_visit(session, rows, ctx.timezone) + (
            f" ({deposits.status_note(deposit, ctx.timezone)})" if deposit else ""))
    lines += [f"- {series.summary(session, s, ctx.timezone)}"
              for s in series.of_contact(session, ctx.tenant_id, ctx.contact_id)]
    total = _count_visits(session, ctx)
    if total > len(visit_ids):
        lines.append(f"({total - len(visit_ids)} more left out: the next {len(visit_ids)} "
                     "are shown)")
    return "\n".join(lines)


LIST_MY_APPOINTMENTS = Tool(
    name="list_my_appointments",
    description="This customer's upcoming appointments.",
    input_schema={"type": "object", "properties": {}},
    handler=list_my_appointments)

_ONE_SERVICE = {"type": "string", "description": "Optional: only this service"}


def cancel_appointment(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    rows = _own_visit(session, ctx, args.get("appointment_id"))
    reply = checked_reply(args.get("reply"))
    starts_at = rows[0].start_at  # the visit's start: the rules apply to it
    _check_cancellation_window(session, ctx, starts_at, _number(rows), "cancelled",
                               "cancellations")
    one = _one_service(session, rows, args.get("service"))
    cancelled = [one] if one is not None else rows
    if args.get("series"):  # this visit and the later ones of its series
        cancelled = _cancel_rest(session, ctx, rows, one)
    for row in cancelled:
        row.status, row.cancelled_at = "cancelled", ctx.now
        session.add(row)
    session.flush()
    kept = [r for r in rows if r.status == "booked"]
    tenant = _tenant(session, ctx.tenant_id)
    reminders.after_change(session, tenant, _visit(rows), starts_at=starts_at,
                           reason="appointment cancelled", now=ctx.now)
    deposits.on_cancel(session, tenant, _visit(rows), starts_at=starts_at, now=ctx.now)
    for row in cancelled:
        webhooks.emit(session, ctx.tenant_id, "appointment.cancelled",
                      webhooks.appointment_data(session, row, by="customer"), now=ctx.now)
    said = "Cancelled. " + ("\n".join(
        _describe_visit(session, v, ctx.timezone) for v in _by_visit(cancelled)))
    return said + (f" The visit keeps: {_describe_visit(session, kept, ctx.timezone)}"
                   if kept else "") + reply_note(reply, _facts(session, ctx, cancelled,
                                                               names=False))


CANCEL_APPOINTMENT = Tool(
    name="cancel_appointment",
    description="Cancel this customer's appointment.",
    input_schema={"type": "object", "properties": {
        "appointment_id": {"type": "integer"}, "service": _ONE_SERVICE,
        "reply": REPLY_PROPERTY,
        "series": {"type": "boolean", "description": "Optional"}},  # it and later ones
        "required": ["appointment_id"]},
    handler=cancel_appointment, reply=sent_reply)


def _cancel_rest(session: Session, ctx: ToolContext, rows: list[Appointment],
                 one: Appointment | None) -> list[Appointment]:
    """cancel_appointment's `series`: the visit `rows` and its series' later visits (cancelled
    by series.end_from, returned by start); ToolError when the visit is no series' or a
    single service was named."""
    made = session.get(VisitSeries, rows[0].series_id) if rows[0].series_id else None
    if made is None or one is not None:
        raise ToolError(f"appointment #{_number(rows)} is "
                        + ("one visit of no series" if made is None else
                           "a series visit: series cancels whole visits, without service")
                        + "; nothing was cancelled")
    return series.end_from(session, made, rows[0].start_at, now=ctx.now)


def _by_visit(rows: list[Appointment]) -> list[list[Appointment]]:
    visits: dict[int, list[Appointment]] = {}
    for row in rows:
        visits.setdefault(appointments.visit_of(row), []).append(row)
    return list(visits.values())


def reschedule_appointment(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    job_catalogue.forget(ctx.tenant_id)  # a move decides on the catalogue as it is now
    rows = _own_visit(session, ctx, args.get("appointment_id"))
    starts_at, visit_id = rows[0].start_at, _visit(rows)  # the visit's start and number
    # a move frees the imminent slot as a cancellation does: the same window (staff moves,
    # operations/agenda.move, are not limited)
    _check_cancellation_window(session, ctx, starts_at, _number(rows), "moved", "changes")
    start = _parse_local(args.get("start"), ctx.timezone)
    reply = checked_reply(args.get("reply"))
    note = checked_note(session, ctx, args.get("note")) if args.get("note") is not None \
        else rows[0].note  # the request follows the visit unless a new one is given
    one = _one_service(session, rows, args.get("service"))
    if one is not None and len(rows) == 1:
        one = None  # the only service: the whole visit moves
    day = appointments.off_visit_day(rows, one, start, ctx.timezone) if one else None
    if one is not None and day is not None:
        code = _service_row(session, one).code
        raise ToolError(f"not moved: appointment #{_number(rows)} is one visit on "
                        f"{day:%a %Y-%m-%d} and a visit is one day. To take {code} to another "
                        f"day, move the whole visit (no service), or cancel {code} and book it "
                        "as a new visit.")
    moving = [one] if one is not None else rows
    for row in moving:
        row.status, row.cancelled_at = "cancelled", ctx.now  # frees its slot for the check
        session.add(row)
    session.flush()
    services = [_service_row(session, r) for r in moving]
    hints = [args.get("professional") or _pro_code(session, r.professional_id) for r in moving]
    new = _place_visit(session, ctx, services, start, args.get("professional"), hints=hints,
                       visit_id=visit_id if one is not None else None,
                       in_series=rows[0].series_id is not None)
    tenant = _tenant(session, ctx.tenant_id)
    for row in new:
        row.note, row.for_name, row.series_id = note, rows[0].for_name, rows[0].series_id
        session.add(row)
    for old, row in zip(moving, new, strict=True):
        old.moved_to_id = row.id if one is not None else _visit(new)
        session.add(old)
    if one is None:
        reminders.cancel_for(session, visit_id, reason=f"appointment moved to #{_number(new)}")
        deposits.follow(session, visit_id, _visit(new))
        reminders.schedule(session, tenant, new[0], now=ctx.now)
    else:
        reminders.after_change(session, tenant, visit_id, starts_at=starts_at,
                               reason=f"{services[0].code} moved", now=ctx.now)
    for old, row in zip(moving, new, strict=True):
        webhooks.emit(session, ctx.tenant_id, "appointment.rescheduled",
                      {**webhooks.appointment_data(session, row, by="customer"),
                       "previous_appointment_id": old.id,
                       "previous_start_at": old.start_at.isoformat()}, now=ctx.now)
    if one is not None:
        kept = appointments.booked(appointments.visit_rows(session, visit_id))
        return (f"Moved {services[0].code} of appointment #{_number(rows)}. "
                + _describe_visit(session, kept, ctx.timezone)
                + reply_note(reply, _facts(session, ctx, new, also=[starts_at, *(
                    r.start_at for r in kept)])))
    return (f"Moved appointment #{_number(rows)} to a new booking. "
            + _describe_visit(session, new, ctx.timezone)
            + reply_note(reply, _facts(session, ctx, new, also=[starts_at])))


RESCHEDULE_APPOINTMENT = Tool(
    name="reschedule_appointment",
    description="Move this customer's appointment to a free start.",
    input_schema={"type": "object", "properties": {
        "appointment_id": {"type": "integer"}, "start": _LOCAL_TIME,
        "service": _ONE_SERVICE,
        "professional": _CODE,
        "note": {**NOTE_PROPERTY, "description": "Default: the old request"},
        "reply": REPLY_PROPERTY},
        "required": ["appointment_id", "start"]},
    handler=reschedule_appointment, reply=sent_reply)


def _facts(session: Session, ctx: ToolContext, rows: list[Appointment], *, names: bool = True,
           also: Sequence[datetime] = ()) -> VisitFacts:
    """What a `reply` about the visit `rows` is checked against (agent/tools/replies.py): its
    start, the clock times it may name (its rows' starts and ends, and `also`: a move's old
    start), its professionals (when `names`), in the tenant's timezone."""
    local = [t.astimezone(ctx.timezone) for r in rows for t in (r.start_at, r.end_at)]
    local += [t.astimezone(ctx.timezone) for t in also]
    pros = [job_catalogue.professional(session, ctx.tenant_id, r.professional_id)
            for r in rows] if names else []
    return VisitFacts(start=rows[0].start_at.astimezone(ctx.timezone),
                      times=frozenset((t.hour, t.minute) for t in local),
                      names=tuple(dict.fromkeys(p.name for p in pros if p is not None)),
                      today=ctx.now.astimezone(ctx.timezone).date())


def _check_cancellation_window(session: Session, ctx: ToolContext, starts_at: datetime,
                               number: int, done: str, what: str) -> None:
    """ToolError when the visit starting at `starts_at` is inside the tenant's cancellation
    window (storage/reminders.cancellation_open, the one rule): neither cancelled nor moved."""
    window = _tenant(session, ctx.tenant_id).cancellation_window_minutes
    if not reminders.cancellation_open(window, starts_at, ctx.now):
        raise ToolError(f"not {done}: the business takes {what} up to {window} minutes before "
                        f"the start, and appointment #{number} starts sooner. Explain "
                        "the policy to the customer; staff can still do it: if they insist, "
                        "handoff_to_human lets a person decide.")


def _place_visit(session: Session, ctx: ToolContext, services: list[Service], start: datetime,
                 professional: Any, *, hints: list[Any] | None = None,
                 visit_id: int | None = None, in_series: bool = False,
                 customer: tuple[int, list[Interval]] | None = None) -> list[Appointment]:
    """Check and insert the visit's rows in this transaction, one service after the other
    from `start` (a service of the tenant's `parallel_services` with the one before, as
    availability.visit_slots places it); raises ToolError when the time is not bookable:
    past, sooner than the tenant's notice, beyond its horizon (the visit's start), the
    customer already at the tenant's limit of upcoming visits (not checked when joining
    `visit_id`, nor `in_series`: a series counts one), overlapping the customer's own
    booking, or, with the professional(s) (availability.place): outside their hours, off
    the slot grid (the visit's start), or taken. `hints`: a professional per service (a
    move keeps each one's); else the one find_available_slots would have offered. Each
    message says why, so the model can explain it in the customer's words. `customer`: the
    customer's upcoming visits and own time when the caller read them (`_customer_read`)."""
    tenant = _tenant(session, ctx.tenant_id)
    _check_time(session, ctx, tenant, services[0], start)
    upcoming, own = customer or _customer_time(session, ctx, *_visit_range(start, services))
    if visit_id is None and not in_series:
        _check_upcoming(session, ctx, tenant, upcoming)
    groups = _visit_candidates(session, ctx.tenant_id, services, professional)
    starts: list[datetime] = []
    if len(services) > 1:  # as find_available_slots offered it: who, and when each starts
        if hints:
            groups = [_candidates(session, ctx.tenant_id, s, h) if h else g
                      for s, h, g in zip(services, hints, groups, strict=True)]
        local = start.astimezone(ctx.timezone)
        offered = [v for v in availability.visit_slots(
            session, tenant=tenant, services=services, pros=groups, first=local.date(),
            last=local.date(), now=ctx.now, after=local.time(), own=own)
            if v[0].start == start]
        by_id = {p.id: p.code for group in groups for p in group}
        if offered:
            hints = [by_id[i.professional_id] for i in offered[0]]
            starts = [i.start for i in offered[0]]
    rows: list[Appointment] = []
    at = start
    for n, service in enumerate(services):
        hint = hints[n] if hints else professional
        row = availability.place(
            session, tenant,
            _candidates(session, ctx.tenant_id, service, hint) if hint else groups[n],
            availability.Placement(service=service, start=starts[n] if starts else at,
                                   contact_id=ctx.contact_id,
                                   now=ctx.now, professional=hint,
                                   tool_use_id=ctx.tool_use_id if n == 0 else None,
                                   grid=n == 0, visit_id=visit_id))
        clash = next((o for o in own if overlaps((row.start_at, row.end_at), o)), None)
        if clash is not None:
            local = clash[0].astimezone(ctx.timezone)
            raise ToolError(f"this customer already has a booking at "
                            f"{local:%a %Y-%m-%d %H:%M}; call list_my_appointments, or offer "
                            "another time")
        visit_id = appointments.visit_of(row)
        rows.append(row)
        at = max(r.end_at for r in rows)
    return rows


def _check_time(session: Session, ctx: ToolContext, tenant: Tenant, service: Service,
                start: datetime) -> None:
    """The start time rules of docs/ARCHITECTURE.md "Scheduling tools": the same ones
    find_available_slots applies, so a slot it offered is never refused for its time (the
    professional's hours and the grid: availability.place)."""
    if start <= ctx.now:
        raise ToolError("that time is in the past; offer a future slot")
    notice = timedelta(minutes=tenant.booking_notice_minutes)
    if too_soon(start, ctx.now, notice):
        earliest = (ctx.now + notice).astimezone(ctx.timezone)
        raise ToolError(f"that time is too soon: the business takes bookings at least "
                        f"{tenant.booking_notice_minutes} minutes ahead (not before "
                        f"{earliest:%a %Y-%m-%d %H:%M}); offer a later slot")
    today = ctx.now.astimezone(ctx.timezone).date()
    if start.astimezone(ctx.timezone).date() > _last_bookable_day(tenant, today):
        raise ToolError(_too_far(tenant, today))


def _check_upcoming(session: Session, ctx: ToolContext, tenant: Tenant,
                    upcoming: int | None = None) -> None:
    """At most `max_upcoming_bookings` visits booked and still ahead per customer (a visit of
    several services counts one; a move cancels the old booking first, so it never counts
    twice). `upcoming`: the count when the caller read it (`_customer_time`); None reads it."""
    if upcoming is None:
        upcoming = _count_upcoming(session, ctx)
    if upcoming >= tenant.max_upcoming_bookings:
        raise ToolError(f"this customer already has {upcoming} upcoming appointments, the most "
                        f"the business allows at once ({tenant.max_upcoming_bookings}); one "
                        "must be cancelled or moved before booking another")


def _upcoming(ctx: ToolContext) -> tuple[Any, ...]:
    """The conditions of this customer's booked appointments still ahead."""
    return (Appointment.tenant_id == ctx.tenant_id, Appointment.contact_id == ctx.contact_id,
            Appointment.status == "booked", col(Appointment.start_at) > ctx.now)


def _count_upcoming(session: Session, ctx: ToolContext) -> int:
    """This customer's upcoming visits, a series counting one (issue 46; a series key is
    negative so it never equals a visit's): one query."""
    key = func.coalesce(-col(Appointment.series_id), appointments.VISIT)
    return int(session.exec(select(func.count(func.distinct(key))).where(
        *_upcoming(ctx))).one())


def _customer_rows(ctx: ToolContext, since: datetime,
                   until: datetime) -> SelectOfScalar[Appointment]:
    """The read of `_customer_time`."""
    return select(Appointment).where(
        Appointment.tenant_id == ctx.tenant_id, Appointment.contact_id == ctx.contact_id,
        Appointment.status == "booked",
        or_(col(Appointment.start_at) > ctx.now,
            and_(col(Appointment.start_at) < until, col(Appointment.end_at) > since)))


def _customer_time(session: Session, ctx: ToolContext, since: datetime, until: datetime,
                   rows: list[Appointment] | None = None) -> tuple[int, list[Interval]]:
    """This customer's upcoming visits, counted as `_count_upcoming` counts them, and their
    booked time overlapping [since, until), as availability.own_intervals reads it: one read
    of the customer's booked rows (those ahead, and those in the range), or `rows` when the
    caller read them so."""
    if rows is None:
        rows = list(session.exec(_customer_rows(ctx, since, until)).all())
    visits = {-r.series_id if r.series_id else appointments.visit_of(r) for r in rows
              if r.start_at > ctx.now}
    return len(visits), [(r.start_at, r.end_at) for r in rows
                         if r.start_at < until and r.end_at > since]


def _visit_range(start: datetime, services: list[Service]) -> tuple[datetime, datetime]:
    """Where the customer's own time can clash with a visit of `services` from `start`."""
    return start - timedelta(days=1), start + availability.MAX_VISIT * len(services)


def _customer_read(session: Session, ctx: ToolContext, since: datetime, until: datetime,
                   codes: list[str] | None) -> tuple[int, list[Interval], VisitSeries | None]:
    """`_customer_time`, and with `codes` the customer's series a visit of them joins
    (series.pending_for): one statement, both reads side by side (FULL JOIN ON false: a row
    holds one or the other)."""
    if codes is None:
        return *_customer_time(session, ctx, since, until), None
    booked = _customer_rows(ctx, since, until).subquery()
    running = series.running(ctx.tenant_id, ctx.contact_id).subquery()
    rows, serieses = [], []
    for a_series, row in session.execute(
            select(aliased(VisitSeries, running), aliased(Appointment, booked))
            .select_from(running).join(booked, false(), full=True)
            .order_by(running.c.id)):
        if a_series is not None:
            serieses.append(a_series)
        if row is not None:
            rows.append(row)
    return (*_customer_time(session, ctx, since, until, rows),
            series.first_pending(serieses, codes))


def _count_visits(session: Session, ctx: ToolContext) -> int:
    return int(session.exec(select(func.count(func.distinct(appointments.VISIT))).where(
        *_upcoming(ctx))).one())


def _last_bookable_day(tenant: Tenant, today: date) -> date:
    return today + timedelta(days=tenant.booking_horizon_days)


def _too_far(tenant: Tenant, today: date) -> str:
    return (f"that date is too far ahead: the business takes bookings at most "
            f"{tenant.booking_horizon_days} days ahead (until "
            f"{_last_bookable_day(tenant, today).isoformat()}); ask for an earlier date")


def _tenant(session: Session, tenant_id: int) -> Tenant:
    tenant = job_catalogue.tenant(session, tenant_id)
    assert tenant is not None
    return tenant


def checked_note(session: Session, ctx: ToolContext, value: Any) -> str:
    """An appointment note as the model sent it → the note to store ("" for none); ToolError
    naming why it may not be stored (facts_rules.note_problem) and how to say it instead."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ToolError("note must be a string")
    note = " ".join(value.split())
    tenant = _tenant(session, ctx.tenant_id)
    problem = note_problem(note, health_allowed=tenant.appointment_notes_sensitive)
    if problem is not None:
        raise ToolError(f"note not recorded, nothing was changed: {problem}")
    return note


def _own_visit(session: Session, ctx: ToolContext, appointment_id: Any) -> list[Appointment]:
    """The booked rows of this customer's upcoming visit `appointment_id` (the booking number
    results show: storage/appointments.number_of), locked, by start; ToolError otherwise."""
    if not isinstance(appointment_id, int) or isinstance(appointment_id, bool) \
            or not 0 < appointment_id <= MAX_ID:
        raise ToolError("appointment_id must be an integer from list_my_appointments")
    # locked, and read again: a staff move or a second turn may be changing it right now
    appointment = appointments.by_number(session, ctx.tenant_id, appointment_id)
    if (appointment is None or appointment.tenant_id != ctx.tenant_id
            or appointment.contact_id != ctx.contact_id):
        raise ToolError(f"no appointment #{appointment_id} for this customer; "
                        "call list_my_appointments")
    rows = appointments.booked(appointments.visit_rows(
        session, appointments.visit_of(appointment), lock=True))
    if not rows or rows[0].start_at <= ctx.now:
        raise ToolError(f"appointment #{appointment_id} is not an upcoming booking")
    return rows


def _own_upcoming(session: Session, ctx: ToolContext, appointment_id: Any) -> Appointment:
    return _own_visit(session, ctx, appointment_id)[0]


def _one_service(session: Session, rows: list[Appointment], code: Any) -> Appointment | None:
    """The row of service `code` in the visit (None: no code, the whole visit)."""
    if code is None or code == "":
        return None
    for row in rows:
        service = _service_row(session, row)
        if isinstance(code, str) and code.strip().lower() in (service.code.lower(),
                                                              service.name.lower()):
            return row
    raise ToolError(f"appointment #{_number(rows)} has no service {echo(code)}; its services: "
                    f"{some_codes([_service_row(session, r).code for r in rows])}")


def _service_row(session: Session, appointment: Appointment) -> Service:
    service = job_catalogue.service(session, appointment.tenant_id, appointment.service_id)
    assert service is not None
    return service


def _visit(rows: list[Appointment]) -> int:
    return appointments.visit_of(rows[0])


def _number(rows: list[Appointment]) -> int:
    """The booking number the customer is told (storage/appointments.number_of)."""
    return appointments.number_of(rows[0])


def _describe(session: Session, appointment: Appointment, tz: ZoneInfo) -> str:
    service = job_catalogue.service(session, appointment.tenant_id, appointment.service_id)
    pro = job_catalogue.professional(session, appointment.tenant_id, appointment.professional_id)
    local = appointment.start_at.astimezone(tz)
    end = appointment.end_at.astimezone(tz)
    what = clip(service.name, NAME_CHARS) if service else "?"
    who = clip(pro.name, NAME_CHARS) if pro else "?"
    return (f"Appointment #{appointments.number_of(appointment)}: {what} with {who} on "
            f"{local:%a %Y-%m-%d} {local:%H:%M}-{end:%H:%M} ({appointment.status})"
            + (f"; for: {appointment.for_name}" if appointment.for_name else "")
            + (f"; series {appointment.series_id}" if appointment.series_id else "")
            + (f"; note: {appointment.note}" if appointment.note else ""))


def _describe_visit(session: Session, rows: list[Appointment], tz: ZoneInfo) -> str:
    """A visit as results show it: one service as `_describe`; several, each with its
    professional and times, then the status, who it is for and the note."""
    if len(rows) == 1:
        return _describe(session, rows[0], tz)
    parts = []
    for row in rows:
        service = job_catalogue.service(session, row.tenant_id, row.service_id)
        pro = job_catalogue.professional(session, row.tenant_id, row.professional_id)
        start, end = row.start_at.astimezone(tz), row.end_at.astimezone(tz)
        parts.append(f"{clip(service.name, NAME_CHARS) if service else '?'} with "
                     f"{clip(pro.name, NAME_CHARS) if pro else '?'} {start:%H:%M}-{end:%H:%M}")
    head = rows[0]
    return (f"Appointment #{appointments.number_of(head)} on "
            f"{head.start_at.astimezone(tz):%a %Y-%m-%d}: {', '.join(parts)} ({head.status})"
            + (f"; for: {head.for_name}" if head.for_name else "")
            + (f"; series {head.series_id}" if head.series_id else "")
            + (f"; note: {head.note}" if head.note else ""))


def _id(appointment: Appointment) -> int:
    assert appointment.id is not None
    return appointment.id


_busy = availability.busy_intervals  # each professional's busy time (its one home: there)
own_upcoming = _own_upcoming  # this customer's upcoming booking, or ToolError
own_visit = _own_visit  # its booked rows, locked (notes.py)
describe = _describe  # an appointment as results show it
describe_visit = _describe_visit  # a visit as results show it (notes.py)


def _services_of(session: Session, tenant_id: int, args: dict[str, Any]) -> list[Service]:
    """The services of the visit: `services` (a list of codes, in order), else `service`."""
    codes, one = args.get("services"), args.get("service")
    if codes is None or codes == []:
        if one is None:
            raise ToolError("give service (one code) or services (a list of codes)")
        return [_service(session, tenant_id, one)]
    if one is not None and [one] != codes:
        raise ToolError("give service or services, not both")
    if not isinstance(codes, list) or len(codes) > availability.MAX_VISIT_SERVICES:
        raise ToolError(f"services must be a list of at most "
                        f"{availability.MAX_VISIT_SERVICES} service codes")
    services = [_service(session, tenant_id, code) for code in codes]
    if len({service.id for service in services}) < len(services):
        raise ToolError("services lists a service twice; one visit has each service once "
                        "(a second person's service is another booking, with for_name)")
    return services


def _visit_candidates(session: Session, tenant_id: int, services: list[Service],
                      code: Any) -> list[list[Professional]]:
    """Who may do each service: the professional asked for on every service they do (anyone
    on the others); ToolError when they do none of them, or nobody does one."""
    if len(services) == 1 or not code:
        return [_candidates(session, tenant_id, s, code) for s in services]
    everyone = [_candidates(session, tenant_id, s, None) for s in services]
    named = [[p for p in group if isinstance(code, str)
              and code.strip().lower() in (p.code.lower(), p.name.lower())]
             for group in everyone]
    if not any(named):
        _candidates(session, tenant_id, services[0], code)  # raises: who does it
    return [chosen or group for chosen, group in zip(named, everyone, strict=True)]


def _for_name(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > FOR_NAME_CHARS:
        raise ToolError(f"for_name must be a text of at most {FOR_NAME_CHARS} characters")
    return " ".join(value.split())


def _service(session: Session, tenant_id: int, code: Any) -> Service:
    services = _services(session, tenant_id)
    for s in services:
        if isinstance(code, str) and code.strip().lower() in (s.code.lower(), s.name.lower()):
            return s
    raise ToolError(f"unknown service {echo(code)}; known service codes: "
                    f"{some_codes([s.code for s in services])}")


def _candidates(session: Session, tenant_id: int, service: Service,
                code: Any) -> list[Professional]:
    return availability.candidates(session, tenant_id, service, code)


def _pro_code(session: Session, professional_id: int) -> str | None:
    pro = session.get(Professional, professional_id)  # an archived one too
    return pro.code if pro else None


def _services(session: Session, tenant_id: int) -> list[Service]:
    return job_catalogue.services(session, tenant_id)  # the job's rows: read once per job


def _professionals(session: Session, tenant_id: int) -> list[Professional]:
    return job_catalogue.professionals(session, tenant_id)


def _parse_date(value: Any, key: str) -> date:
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise ToolError(f"{key} must be YYYY-MM-DD, got {echo(value)}") from None


def _parse_local(value: Any, tz: ZoneInfo) -> datetime:
    """A local "YYYY-MM-DDTHH:MM" in the tenant's timezone → aware UTC; ToolError otherwise.

    Seconds are refused unless zero (":00"), in the time or in an offset: "09:00:30" is not
    the 09:00 slot, and an error naming the format is what a model corrects best (a grid
    error would name 09:00, a time it believes it sent)."""
    try:
        parsed = datetime.fromisoformat(str(value).strip().replace(" ", "T"))
    except ValueError:
        raise ToolError(f"start must be YYYY-MM-DDTHH:MM local time, got {echo(value)}") \
            from None
    offset = parsed.utcoffset()
    if parsed.second or parsed.microsecond or (offset and offset % timedelta(minutes=1)):
        raise ToolError(f"start must be YYYY-MM-DDTHH:MM local time, without seconds, got "
                        f"{echo(value)}")
    if parsed.tzinfo is None:
        if not local_exists(parsed.date(), parsed.time(), tz):
            raise ToolError(f"{parsed:%Y-%m-%dT%H:%M} does not exist in {tz.key}: the clocks "
                            "move forward over it that day; offer a time "
                            "find_available_slots returned")
        parsed = parsed.replace(tzinfo=tz)  # fold 0: an ambiguous time's first occurrence
    return parsed.astimezone(ZoneInfo("UTC"))


def _parse_hhmm(value: Any, key: str) -> time | None:
    if value is None or value == "":
        return None
    try:
        if not _HHMM.fullmatch(str(value).strip()):  # fromisoformat alone takes 09, 0900, T09:00
            raise ValueError(value)
        parsed = time.fromisoformat(str(value).strip())
    except ValueError:
        raise ToolError(f"{key} must be a local time HH:MM, got {echo(value)}") from None
    if parsed.second or parsed.microsecond or parsed.tzinfo:
        raise ToolError(f"{key} must be a local time HH:MM, got {echo(value)}")
    return parsed


_HHMM = re.compile(r"[0-2][0-9]:[0-5][0-9]")
MAX_TIMES_LISTED = 40  # find_available_slots: lines of times, then one line per other day


def _format_times(slots: list[Slot], pros: dict[int | None, Professional], tz: ZoneInfo,
                  service: Service) -> str:
    """One line per local start time with the professionals free at it (catalogue order):
    "Tue 2026-06-09 14:00 julia, marcos",
    at most MAX_TIMES_LISTED; the days past them get one line each (how many times, from
    when to when) so the model knows what to narrow to (`date`, `after`, `before`)."""
    times: dict[datetime, list[str]] = {}
    for slot in slots:
        times.setdefault(slot.start, []).append(pros[slot.professional_id].code)
    ordered = sorted(times)
    shown, rest = ordered[:MAX_TIMES_LISTED], ordered[MAX_TIMES_LISTED:]
    minutes = sorted({int((s.end - s.start).total_seconds() // 60) for s in slots})
    lines = [f"Free slots for {service.code} ({'/'.join(str(m) for m in minutes)} min"
             + (f" + {service.buffer_minutes} min after" if service.buffer_minutes else "")
             + "):"]
    lines += [f"{start.astimezone(tz):%a %Y-%m-%d %H:%M} {', '.join(times[start])}"
              for start in shown]
    left: dict[str, list[datetime]] = {}
    for start in rest:
        left.setdefault(f"{start.astimezone(tz):%a %Y-%m-%d}", []).append(start)
    for day, starts in left.items():
        lines.append(f"({day}: {len(starts)} more times from "
                     f"{starts[0].astimezone(tz):%H:%M} to {starts[-1].astimezone(tz):%H:%M}; "
                     "ask for that date, or narrow with after/before)")
    return "\n".join(lines)


MAX_VISITS_LISTED = 20  # find_available_slots for several services: lines of visits


def _at_once(items: list[availability.Item]) -> bool:
    return any(b.start != a.end for a, b in zip(items, items[1:], strict=False))


def _format_visits(visits: list[list[availability.Item]], pros: dict[int | None, Professional],
                   tz: ZoneInfo) -> str:
    """One line per local start of a visit of several services: "Tue 2026-06-09 14:00-15:30:
    corte julia, escova marcos", at most MAX_VISITS_LISTED, then one line per other day; a
    service that does not start when the one before ends gets its start ("manicure bia
    14:00": at once with the one before, `parallel_services`)."""
    first = visits[0]
    lines = [f"Free times for {'+'.join(i.service.code for i in first)}, one after the other"
             + (" unless a start is given:" if any(
                 _at_once(items) for items in visits[:MAX_VISITS_LISTED]) else ":")]
    for items in visits[:MAX_VISITS_LISTED]:
        start, end = items[0].start.astimezone(tz), max(i.end for i in items).astimezone(tz)
        lines.append(f"{start:%a %Y-%m-%d %H:%M}-{end:%H:%M}: " + ", ".join(
            f"{i.service.code} {pros[i.professional_id].code}"
            + (f" {i.start.astimezone(tz):%H:%M}" if n and i.start != items[n - 1].end else "")
            for n, i in enumerate(items)))
    left: dict[str, list[datetime]] = {}
    for items in visits[MAX_VISITS_LISTED:]:
        left.setdefault(f"{items[0].start.astimezone(tz):%a %Y-%m-%d}", []).append(
            items[0].start)
    for day, starts in left.items():
        lines.append(f"({day}: {len(starts)} more times from "
                     f"{starts[0].astimezone(tz):%H:%M} to {starts[-1].astimezone(tz):%H:%M}; "
                     "ask for that date, or narrow with after/before)")
    return "\n".join(lines)


# for agent/tools/waitlist.py: the search's own parsing of a window
parse_date = _parse_date
parse_hhmm = _parse_hhmm
services_of = _services_of
candidates_of = _candidates
# for workers/waitlist.py: a Quero on a waitlist offer books under the same house rules
place_visit = _place_visit
check_time = _check_time
check_upcoming = _check_upcoming
