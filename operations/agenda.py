"""The business's own agenda (issue 22): staff book for a contact, move a booking, block a
professional's time, mark a past visit completed or no-show, and read a day. Shared by the
admin API, the console and the CLI; errors as operations/service.py says (NotFound, Invalid,
Conflict with `problems`).

Staff bookings go through `agent.tools.availability.place`, the one check-and-insert the
agent's bookings use, so the overlap guarantee is the same (one transaction; the
professional's row locked on PostgreSQL, BEGIN IMMEDIATE on SQLite). They keep the
professional's hours and the busy time (bookings, buffers, blocks); unlike the agent's they may
start off the slot grid, inside the notice, beyond the horizon, and ignore the per-customer
limit (the owner at the counter decides). A booking emits `appointment.booked` with
`by: business` (storage/webhooks.py) and gets its reminders (storage/reminders.py, issue 25);
a move `appointment.rescheduled`, the old booking's reminders cancelled, the new one's
scheduled, and a `moved` notice to the customer.

A block hides slots and is not an appointment. Over existing bookings it is refused (409,
listing them) unless `force`, which keeps the bookings and lists them in the answer.

Contacts by phone: digits only; matched with and without Brazil's ninth mobile digit
(`core.numbers.phone_variants`). An exact match is used; a match only through the ninth digit
asks staff to confirm (409 naming the contact: send `contact` with its id).

The outcome of a visit (completed, no_show) is stored apart from `status`: every query meaning
"holds the slot" or "upcoming" filters `status == "booked"` and is unchanged by it
(`HOLDS_THE_SLOT` lists them; tests/test_agenda.py checks each).
"""

import re
import uuid
from collections import Counter
from dataclasses import replace
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlmodel import Session, col, select

from agent.errors import ToolError
from agent.tools import availability, series
from agent.tools.facts_rules import note_problem
from agent.tools.slots import local_exists, local_to_utc, overlaps
from core.numbers import phone_variants
from core.recurrence import RULE_CHARS, RuleError, checked_rule, starts_on_rule
from operations import packages
from operations.errors import Conflict, Invalid, NotFound
from operations.service import appointment_view, find_contact
from storage import appointments, deposits, reminders, waitlist, webhooks
from storage.models import (
    Appointment,
    Contact,
    Professional,
    ScheduleBlock,
    Service,
    Tenant,
    VisitSeries,
    WaitlistEntry,
)

OUTCOMES = ("completed", "no_show")
# the queries that mean "holds the slot" or "upcoming": each filters status == "booked"
HOLDS_THE_SLOT = (
    "agent.tools.availability.busy_intervals (slots and bookings)",
    "agent.tools.availability._fewest_that_day (any professional)",
    "agent.tools.scheduling._upcoming (list_my_appointments, the per-customer limit)",
    "agent.history.load (upcoming)",
    "storage.catalogue._refuse_if_booked (catalogue removals)",
    "operations.service.counts (booked_appointments)",
)
_LOCAL = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$"


class StaffBooking(BaseModel):
    """A booking by the business: `contact` (id, phone or user id of an existing contact) or
    `phone` (digits; a new contact when nobody has it)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    service: str = Field(min_length=1, max_length=64, description="service code")
    then: list[str] = Field(default_factory=list, max_length=4,
                            description="more service codes of the same visit, each "
                                        "starting when the one before ends (issue 38)")
    for_name: str = Field("", max_length=100, description="who the visit is for, when not "
                                                          "the contact")
    start: str = Field(pattern=_LOCAL, description="local YYYY-MM-DDTHH:MM")
    professional: str | None = Field(None, max_length=64,
                                     description="professional code; none: anyone free")
    contact: str | None = Field(None, max_length=160)
    phone: str | None = Field(None, max_length=40, description="the customer's phone number")
    name: str = Field("", max_length=200, description="a new contact's name")
    note: str = Field("", max_length=200)
    repeat: str | None = Field(None, max_length=RULE_CHARS,
                               description="a series (issue 46): an RFC 5545 RRULE from "
                                           "start, e.g. FREQ=WEEKLY;BYDAY=TU;COUNT=10")


class Move(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    start: str = Field(pattern=_LOCAL, description="new local start, YYYY-MM-DDTHH:MM")
    professional: str | None = Field(None, max_length=64, description="default: the same")


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    professional: str = Field(min_length=1, max_length=64)
    start: str = Field(pattern=_LOCAL, description="local YYYY-MM-DDTHH:MM")
    end: str = Field(pattern=_LOCAL, description="local YYYY-MM-DDTHH:MM, after start")
    note: str = Field("", max_length=200)
    force: bool = Field(False, description="block even over bookings (they are kept)")

    @field_validator("end")
    @classmethod
    def _after(cls, value: str, info: Any) -> str:
        start = info.data.get("start")
        if start is not None and value <= start:
            raise ValueError(f"{value} is not after start {start}")
        return value


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    outcome: str = Field(pattern="^(completed|no_show)$")
    note: str = Field(default="", max_length=200)  # what was done (issue 38)


class DepositPaid(BaseModel):
    """Staff mark a deposit paid (issue 48): the amount seen in the bank app, in cents
    (default: the amount asked)."""

    model_config = ConfigDict(extra="forbid")
    amount_cents: int | None = Field(default=None, ge=1, le=100_000_000)


def phone_digits(text: str) -> str:
    """A phone number as typed ("+55 (11) 99999-0001", "5511999990001") → digits; Invalid
    when it cannot be one (E.164: at most 15 digits; at least 8) or names no country (a
    national form, or a trunk 0)."""
    digits = re.sub(r"\D", "", text)
    if not 8 <= len(digits) <= 15:
        raise Invalid(f"phone: {text[:40]!r} is not a phone number (8 to 15 digits)",
                      [f"phone: {text[:40]!r} is not a phone number (8 to 15 digits)"])
    if digits.startswith("0") or (not text.strip().startswith("+") and len(digits) <= 11):
        # a national number ("11 99999-0001", "(11) 9999-0001") or a trunk 0 ("055 11 ..."):
        # stored as such it is no WhatsApp id (reminders would reach no one); guessing the
        # country is unsafe (55 is also an area code), so staff type it
        problem = (f"phone: {text[:40]!r} has no country code; type it in full, e.g. "
                   "+55 11 99999-0001")
        raise Invalid(problem, [problem])
    return digits


def contact_for(session: Session, tenant: Tenant, body: StaffBooking, *,
                now: datetime) -> Contact:
    """The booking's contact (module docstring); Conflict asks staff to confirm a ninth-digit
    match."""
    if body.contact and body.phone:
        raise Invalid("give contact or phone, not both",
                      ["contact: give contact or phone, not both"])
    if body.contact:
        return find_contact(session, tenant, body.contact)
    if not body.phone:
        raise Invalid("contact or phone is required", ["contact: or phone: required"])
    digits = phone_digits(body.phone)
    exact = session.exec(select(Contact).where(Contact.tenant_id == tenant.id,
                                               Contact.wa_id == digits)).first()
    if exact is not None:
        return exact
    variants = phone_variants(digits)
    similar = session.exec(select(Contact).where(
        Contact.tenant_id == tenant.id, col(Contact.wa_id).in_(variants))).first() \
        if variants else None
    if similar is not None:
        raise Conflict(f"contact #{similar.id} has {similar.wa_id}, the same number with or "
                       "without the ninth digit; confirm by sending contact "
                       f"{similar.id}, or correct the phone",
                       [f"phone: matches contact #{similar.id} ({similar.profile_name or ''})"
                        .rstrip(" ()")])
    contact = Contact(tenant_id=tenant.id or 0, wa_id=digits, profile_name=body.name or None,
                      created_at=now)
    session.add(contact)
    session.flush()
    return contact


def _local(text: str, tz: ZoneInfo, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(f"{where}: {text!r} is not a date and time",
                      [f"{where}: {text!r} is not YYYY-MM-DDTHH:MM"]) from None
    if not 2000 <= parsed.year <= 2100:
        raise Invalid(f"{where}: year must be between 2000 and 2100",
                      [f"{where}: year must be between 2000 and 2100"])
    if not local_exists(parsed.date(), parsed.time(), tz):
        raise Invalid(f"{where}: {text} does not exist in {tz.key} (clocks move forward)",
                      [f"{where}: {text} does not exist in {tz.key} (clocks move forward)"])
    return local_to_utc(parsed.date(), parsed.time(), tz)


def _service(session: Session, tenant: Tenant, code: str) -> Service:
    row = session.exec(select(Service).where(Service.tenant_id == tenant.id,
                                             Service.code == code,
                                             col(Service.active).is_(True))).first()
    if row is None:
        raise Invalid(f"unknown service {code!r}", [f"service: unknown {code!r}"])
    return row


def _placed(session: Session, tenant: Tenant, service: Service, code: str | None,
            placement: availability.Placement) -> Appointment:
    try:
        pros = availability.candidates(session, tenant.id or 0, service, code)
        return availability.place(session, tenant, pros, placement)
    except availability.Taken as exc:
        raise Conflict(str(exc), [f"start: {exc}"]) from None
    except ToolError as exc:
        raise Invalid(str(exc), [f"start: {exc}"]) from None


def _next_placed(session: Session, tenant: Tenant, service: Service, code: str | None,
                 rows: list[Appointment], placement: availability.Placement) -> Appointment:
    """A service of the tenant's `parallel_services` starts with the one before it, by
    anyone else free then (availability.visit_slots' rule, as the agent books it); when
    nobody is, and for every other service, at `placement.start`."""
    if rows and service.code in (tenant.parallel_services or []):
        try:
            return _placed(session, tenant, service, None, replace(
                placement, start=rows[-1].start_at, professional=None))
        except (Conflict, Invalid):
            pass  # nobody free at once: after the others
    return _placed(session, tenant, service, code, placement)


def _planned(session: Session, tenant: Tenant, placed: list[availability.Item],
             service: Service, code: str | None) -> availability.Item | None:
    """Where `service` goes after `placed` by the agent's rule (availability.next_in_visit);
    None when nobody who may do it is free then (`_placed` then says why)."""
    try:
        group = availability.candidates(session, tenant.id or 0, service, code)
    except ToolError:
        return None
    return availability.next_in_visit(session, tenant, placed, service, group)


def book(session: Session, tenant: Tenant, body: StaffBooking, *,
         now: datetime) -> dict[str, Any]:
    """A booking by the business (module docstring). Returns the appointment's view."""
    tz = ZoneInfo(tenant.timezone)
    service = _service(session, tenant, body.service)
    start = _local(body.start, tz, "start")
    if start + timedelta(minutes=service.duration_minutes) <= now:
        raise Invalid("start: that visit would already be over", ["start: in the past"])
    rule = _rule(body.repeat, body.start) if body.repeat else None
    note = staff_note(tenant, body.note)
    services = [service, *(_service(session, tenant, code) for code in body.then)]
    contact = contact_for(session, tenant, body, now=now)
    rows: list[Appointment] = []
    placed: list[availability.Item] = []
    for item in services:  # one visit: each service when the ones before end (issue 38)
        code = body.professional if body.professional and (
            not rows or _does(session, tenant, body.professional, item)) else None
        placement = availability.Placement(
            service=item, start=max(r.end_at for r in rows) if rows else start,
            contact_id=contact.id or 0, now=now, professional=code, by="business",
            grid=False, visit_id=appointments.visit_of(rows[0]) if rows else None)
        # who and when as the agent books a visit (availability.visit_slots' rule: the same
        # professional when they do it and are free); as before when nobody is
        planned = _planned(session, tenant, placed, item, code) if rows else None
        if planned is not None:
            pro = session.get(Professional, planned.professional_id)
            row = _placed(session, tenant, item, pro.code if pro else code, replace(
                placement, start=planned.start, professional=pro.code if pro else code))
        else:
            row = _next_placed(session, tenant, item, code, rows, placement)
        row.note, row.for_name = note, " ".join(body.for_name.split())
        session.add(row)
        rows.append(row)
        placed.append(availability.Item(item, row.professional_id, row.start_at, row.end_at))
    session.flush()
    if deposits.hold(session, tenant, rows, services, now=now) is None:  # issue 48: a
        # held visit gets its reminders and its appointment.booked when paid
        reminders.schedule(session, tenant, rows[0], now=now)  # issue 25, as the agent's
        for row in rows:
            webhooks.emit(session, tenant.id or 0, "appointment.booked",
                          webhooks.appointment_data(session, row, by="business"), now=now)
    view = appointment_view(session, rows[0], tz)
    if len(rows) > 1:
        view["visit"] = [appointment_view(session, row, tz) for row in rows]
    if rule:
        made, visits = series.start(session, tenant, rows, rule,
                                    professional_id=rows[0].professional_id, now=now)
        view["series"] = series_view(session, made, visits, tz)
    return view


def _rule(repeat: str, start: str) -> str:
    """StaffBooking.repeat → its checked RRULE (core/recurrence.py); Invalid naming why."""
    try:
        rule = checked_rule(repeat, datetime.fromisoformat(start))
    except RuleError as exc:
        raise Invalid(f"repeat: {exc}", [f"repeat: {exc}"]) from None
    if not starts_on_rule(rule, datetime.fromisoformat(start)):
        problem = f"repeat: start {start[:10]} is not a day of {rule}"
        raise Invalid(problem, [problem])
    return rule


def series_view(session: Session, made: VisitSeries, visits: list[list[Appointment]],
                tz: ZoneInfo) -> dict[str, Any]:
    """A series as the doors show it: id, rule, the first visit of each occurrence placed,
    the occurrences needing a new time (`pending`) and a one-line summary."""
    return {"id": made.id, "rule": made.rule, "pending": list(made.pending),
            "visits": [appointment_view(session, v[0], tz) for v in visits],
            "summary": series.summary(session, made, tz)}


def cancel_series(session: Session, tenant: Tenant, appointment_id: int, *,
                  now: datetime) -> dict[str, Any]:
    """Cancel the series of appointment `appointment_id` (a row id) from that visit on: it
    and every later visit of the series are cancelled, each with its `appointment.cancelled`
    event (by business) and a `cancelled` notice to the customer; no more are placed.
    Returns {"series", "cancelled": [the rows' views]}. NotFound, or Conflict when the
    appointment is no upcoming visit of a series."""
    row = _appointment(session, tenant, appointment_id)
    made = session.get(VisitSeries, row.series_id) if row.series_id else None
    if made is None or row.status != "booked" or row.start_at <= now:
        raise Conflict(f"appointment #{appointment_id} is no upcoming visit of a series")
    tz = ZoneInfo(tenant.timezone)
    cancelled = series.end_from(session, made, row.start_at, now=now)
    for item in cancelled:
        reminders.record_notice(session, item, kind="cancelled", now=now)
        webhooks.emit(session, tenant.id or 0, "appointment.cancelled",
                      webhooks.appointment_data(session, item, by="business"), now=now)
    return {"series": series_view(session, made, [], tz),
            "cancelled": [appointment_view(session, item, tz) for item in cancelled]}


def _does(session: Session, tenant: Tenant, professional: str, service: Service) -> bool:
    return any(p.code == professional or p.name == professional for p in session.exec(
        select(Professional).where(Professional.tenant_id == tenant.id))
        if service.code in p.service_codes)


def staff_note(tenant: Tenant, text: str) -> str:
    """A note staff typed for a booking, whitespace collapsed; Invalid (400 in the API, exit
    status 2 in the CLI, the form's error in the console) when the rules of every stored text
    about a customer refuse it (facts_rules.note_problem, as for the agent's notes)."""
    note = " ".join(text.split())
    problem = note_problem(note, health_allowed=tenant.appointment_notes_sensitive) \
        if note else None
    if problem is not None:
        raise Invalid(f"note not recorded: {problem}", [f"note: {problem}"])
    return note


def _appointment(session: Session, tenant: Tenant, appointment_id: int) -> Appointment:
    row = appointments.locked(session, appointment_id)
    if row is None or row.tenant_id != tenant.id:
        raise NotFound(f"no appointment with row id {appointment_id} (`id` in listings; the "
                       "customer's number is `booking_number`)")
    return row


def move(session: Session, tenant: Tenant, appointment_id: int, body: Move, *,
         now: datetime) -> dict[str, Any]:
    """Move an upcoming booking to a new start (and professional): the old one is cancelled
    and a new one booked in this transaction, as the agent's reschedule does; the webhook
    event is `appointment.rescheduled` by business. One service of a visit of several stays
    on the visit's day (storage/appointments.off_visit_day): Invalid otherwise."""
    tz = ZoneInfo(tenant.timezone)
    old = _appointment(session, tenant, appointment_id)
    if old.status != "booked" or old.end_at <= now:
        raise Conflict(f"appointment #{appointment_id} is not an upcoming booking")
    service = session.get(Service, old.service_id)
    pro = session.get(Professional, old.professional_id)
    assert service is not None and pro is not None
    start = _local(body.start, tz, "start")
    if start + (old.end_at - old.start_at) <= now:
        raise Invalid("start: that visit would already be over", ["start: in the past"])
    visit = appointments.booked(appointments.visit_rows(
        session, appointments.visit_of(old), lock=True))
    one_of_several = len(visit) > 1  # one service of a visit moves within it (issue 38)
    day = appointments.off_visit_day(visit, old, start, tz) if one_of_several else None
    if day is not None:
        problem = (f"start: appointment #{appointment_id} is one service of booking "
                   f"#{appointments.number_of(old)} on {day:%Y-%m-%d}, and a visit is one day; "
                   "move it within that day, or cancel this service and book it as a new "
                   "visit on the other day")
        raise Invalid(problem, [problem])
    old.status, old.cancelled_at = "cancelled", now
    session.add(old)
    session.flush()
    code = body.professional or pro.code
    new = _placed(session, tenant, service, code, availability.Placement(
        service=service, start=start, contact_id=old.contact_id, now=now, professional=code,
        by="business", grid=False,
        visit_id=appointments.visit_of(old) if one_of_several else None))
    new.note, new.for_name = old.note, old.for_name
    session.add(new)
    old.moved_to_id = new.id
    session.add(old)
    session.flush()
    if one_of_several:
        reminders.after_change(session, tenant, appointments.visit_of(old),
                               starts_at=visit[0].start_at, reason="moved by the business",
                               now=now)
    else:
        reminders.cancel_for(session, appointments.visit_of(old),
                             reason=f"moved by the business to #{new.id}")
        deposits.follow(session, appointments.visit_of(old), appointments.visit_of(new))
        reminders.schedule(session, tenant, new, now=now)
    reminders.record_notice(session, new, kind="moved", now=now)  # the customer is told
    webhooks.emit(session, tenant.id or 0, "appointment.rescheduled",
                  {**webhooks.appointment_data(session, new, by="business"),
                   "previous_appointment_id": old.id,
                   "previous_start_at": old.start_at.isoformat()}, now=now)
    return appointment_view(session, new, tz)


def block_view(block: ScheduleBlock, code: str, tz: ZoneInfo) -> dict[str, Any]:
    return {"id": block.id, "professional": code,
            "start": block.start_at.astimezone(tz).strftime("%Y-%m-%dT%H:%M"),
            "end": block.end_at.astimezone(tz).strftime("%Y-%m-%dT%H:%M"), "note": block.note}


def block(session: Session, tenant: Tenant, body: Block, *, now: datetime) -> dict[str, Any]:
    """Block a professional's time (module docstring). Returns {"block", "kept": [booked
    appointments inside it, kept]}."""
    tz = ZoneInfo(tenant.timezone)
    pro = session.exec(select(Professional).where(
        Professional.tenant_id == tenant.id, Professional.code == body.professional,
        col(Professional.active).is_(True))).first()
    if pro is None:
        raise Invalid(f"unknown professional {body.professional!r}",
                      [f"professional: unknown {body.professional!r}"])
    start, end = _local(body.start, tz, "start"), _local(body.end, tz, "end")
    if end - start > availability.MAX_BLOCK:
        raise Invalid(f"end: a block is at most {availability.MAX_BLOCK.days} days; use the "
                      "professional's time_off for longer", [
                          f"end: a block is at most {availability.MAX_BLOCK.days} days "
                          "(longer: time_off)"])
    availability.lock_professional(session, pro.id or 0)
    inside = [a for a in session.exec(select(Appointment).where(
        Appointment.professional_id == pro.id, Appointment.status == "booked",
        col(Appointment.start_at) < end, col(Appointment.end_at) > start)
        .order_by(col(Appointment.start_at))).all()
        if overlaps((a.start_at, a.end_at), (start, end))]
    if inside and not body.force:
        listed = [f"#{a.id} {a.start_at.astimezone(tz):%Y-%m-%d %H:%M}" for a in inside]
        raise Conflict(f"{pro.code} has {len(inside)} booking(s) in that time "
                       f"({', '.join(listed[:10])}); move or cancel them, or block with force "
                       "(the bookings are kept)", listed)
    row = ScheduleBlock(tenant_id=tenant.id or 0, professional_id=pro.id or 0, start_at=start,
                        end_at=end, note=" ".join(body.note.split()), created_at=now)
    session.add(row)
    session.flush()
    return {"block": block_view(row, pro.code, tz),
            "kept": [appointment_view(session, a, tz) for a in inside]}


def unblock(session: Session, tenant: Tenant, block_id: int) -> None:
    row = session.get(ScheduleBlock, block_id)
    if row is None or row.tenant_id != tenant.id:
        raise NotFound(f"no block #{block_id}")
    session.delete(row)
    session.flush()


def set_outcome(session: Session, tenant: Tenant, appointment_id: int, outcome: str, *,
                now: datetime, note: str = "") -> dict[str, Any]:
    """Mark a booked visit that has started completed or no_show (apart from `status`), every
    booked service of it, with the staff's `note` on what was done (at most 200 characters;
    issue 38: the history shows it)."""
    if outcome not in OUTCOMES:
        raise Invalid(f"outcome must be one of {', '.join(OUTCOMES)}",
                      [f"outcome: {outcome[:20]!r} is not one of {', '.join(OUTCOMES)}"])
    if not isinstance(note, str) or len(note) > 200:
        raise Invalid("note: at most 200 characters", ["note: at most 200 characters"])
    note = staff_note(tenant, note)  # the staff's note on what was done: the same rules
    row = _appointment(session, tenant, appointment_id)
    if row.status != "booked":
        raise Conflict(f"appointment #{appointment_id} is {row.status}")
    if row.start_at > now:
        raise Conflict(f"appointment #{appointment_id} has not started yet")
    visit = appointments.booked(appointments.visit_rows(
        session, appointments.visit_of(row), lock=True))
    first_mark = [item for item in visit if not item.outcome]  # a second mark counts nothing
    for item in visit:
        item.outcome, item.outcome_at = outcome, now
        item.outcome_note = note
        session.add(item)
    session.flush()
    packages.use_sessions(session, tenant, first_mark, outcome, now=now)  # issue 46
    return appointment_view(session, row, ZoneInfo(tenant.timezone))


def mark_paid(session: Session, tenant: Tenant, appointment_id: int, *, now: datetime,
              amount_cents: int | None = None) -> dict[str, Any]:
    """Staff saw the deposit of appointment `appointment_id`'s visit in their bank app
    (issue 48): recorded as a payment by staff (`amount_cents`, default the amount asked) and
    applied as a provider's would be (storage/deposits.confirm: held → booked; released →
    late_paid; another amount is recorded, books nothing). Returns the appointment's view
    with the confirmation's outcome as `payment`; Conflict when the visit asked no deposit."""
    row = _appointment(session, tenant, appointment_id)
    visit_id = appointments.visit_of(row)
    deposit = deposits.of_visits(session, [visit_id]).get(visit_id)
    if deposit is None:
        raise Conflict(f"appointment #{appointment_id} has no deposit")
    if amount_cents is not None and not 0 < amount_cents <= 100_000_000:
        raise Invalid("amount_cents: 1 to 100000000", ["amount_cents: out of range"])
    event = deposits.record_event(
        session, provider="staff", event_id=f"staff-{deposit.id}-{uuid.uuid4().hex}",
        reference=deposit.reference, now=now, tenant_id=tenant.id,
        amount_cents=deposit.amount_cents if amount_cents is None else amount_cents)
    assert event is not None  # a fresh id: never a replay
    outcome = deposits.confirm(session, event, now=now, by="staff")
    session.flush()
    return {**appointment_view(session, row, ZoneInfo(tenant.timezone)), "payment": outcome}


def day_view(session: Session, tenant: Tenant, day: date) -> dict[str, Any]:
    """One local day of the agenda: per professional (catalogue order) their hours that day,
    their booked appointments and their blocks, by start; each appointment says how many of
    the day's appointments its visit has (`visit_size`; issue 38)."""
    if not 2000 <= day.year <= 2100:
        raise Invalid("day: year must be between 2000 and 2100",
                      ["day: year must be between 2000 and 2100"])
    tz = ZoneInfo(tenant.timezone)
    tenant_id = tenant.id or 0
    business = availability.business_hours(session, tenant_id)
    exceptions = availability.business_exceptions(session, tenant_id)
    since, until = local_to_utc(day, time(0), tz), local_to_utc(day + timedelta(days=1),
                                                                 time(0), tz)
    pros = session.exec(select(Professional).where(
        Professional.tenant_id == tenant_id, col(Professional.active).is_(True))
        .order_by(col(Professional.code))).all()
    out: list[dict[str, Any]] = []
    for pro in pros:
        week = availability.week_of(pro, business)
        booked = session.exec(select(Appointment).where(
            Appointment.professional_id == pro.id, Appointment.status == "booked",
            col(Appointment.start_at) < until, col(Appointment.end_at) > since)
            .order_by(col(Appointment.start_at))).all()
        blocks = session.exec(select(ScheduleBlock).where(
            ScheduleBlock.professional_id == pro.id, col(ScheduleBlock.start_at) < until,
            col(ScheduleBlock.end_at) > since).order_by(col(ScheduleBlock.start_at))).all()
        out.append({"code": pro.code, "name": pro.name,
                    "hours": [f"{a}-{b}" for a, b in availability.day_hours(week, day,
                                                                             exceptions)],
                    "appointments": [appointment_view(session, a, tz) for a in booked],
                    "blocks": [block_view(b, pro.code, tz) for b in blocks]})
    sizes = Counter(a["visit_id"] for p in out for a in p["appointments"])
    for pro_view in out:  # a visit of several services: one block per professional, linked
        for entry in pro_view["appointments"]:
            entry["visit_size"] = sizes[entry["visit_id"]]
    return {"day": day.isoformat(), "timezone": tenant.timezone, "professionals": out,
            "waitlist": [waitlist_view(session, e, tz) for e in waitlist.of_day(
                session, tenant_id, day)]}


# -- the waitlist (issue 47; storage/waitlist.py, workers/waitlist.py) -------------------------

class WaitlistOffer(BaseModel):
    """A slot staff offer by hand to a waiting customer: `professional` (code) and local
    `start`; held as the pass holds one, sent by its next run (within 30 s)."""

    model_config = ConfigDict(extra="forbid")
    professional: str = Field(min_length=1, max_length=64)
    start: str = Field(pattern=_LOCAL, description="local YYYY-MM-DDTHH:MM")


def waitlist_view(session: Session, entry: WaitlistEntry, tz: ZoneInfo) -> dict[str, Any]:
    """An entry as staff read it: who, what window, its state and the slot held for it."""
    contact = session.get(Contact, entry.contact_id)
    service = session.get(Service, entry.service_id)
    pro = session.get(Professional, entry.professional_id) if entry.professional_id else None
    held = session.get(Professional, entry.offer_professional_id) \
        if entry.offer_professional_id else None
    return {"id": entry.id, "contact_id": entry.contact_id,
            "contact_name": contact.profile_name if contact else None,
            "service": service.code if service else None,
            "professional": pro.code if pro else None, "day": entry.day.isoformat(),
            "after": entry.after, "before": entry.before, "status": entry.status,
            "offered": None if entry.offer_start_at is None else {
                "professional": held.code if held else None,
                "start": f"{entry.offer_start_at.astimezone(tz):%Y-%m-%dT%H:%M}",
                "expires_at": entry.offer_expires_at.isoformat()
                if entry.offer_expires_at else None},
            "created_at": entry.created_at.isoformat()}


def offer_slot(session: Session, tenant: Tenant, entry_id: int, body: WaitlistOffer, *,
               now: datetime) -> dict[str, Any]:
    """Hold a slot for waiting entry `entry_id` by hand. NotFound for another tenant's or no
    entry; Conflict when the entry is not waiting (offered, booked, left, expired) or the
    slot is not one a customer could book now (free, the professional's, on the grid,
    outside the notice: availability.free_slots, held slots busy)."""
    entry = waitlist.locked(session, entry_id)
    if entry is None or entry.tenant_id != tenant.id:
        raise NotFound(f"no waitlist entry #{entry_id}")
    if entry.status != "waiting" or entry.ends_at <= now:
        raise Conflict(f"waitlist entry #{entry_id} is {entry.status}, not waiting")
    tz = ZoneInfo(tenant.timezone)
    start = _local(body.start, tz, "start")
    service = session.get(Service, entry.service_id)
    assert service is not None
    pros = [p for p in availability.candidates(session, tenant.id or 0, service, None)
            if p.code == body.professional]
    if not pros:
        raise Conflict(f"{body.professional} does not do {service.code}")
    local = start.astimezone(tz)
    slot = next((s for s in availability.free_slots(
        session, tenant=tenant, service=service, pros=pros, first=local.date(),
        last=local.date(), now=now) if s.start == start), None)
    if slot is None:
        raise Conflict(f"{local:%Y-%m-%d %H:%M} is not a free start of {body.professional} "
                       f"for {service.code}")
    waitlist.hold(session, tenant, entry, slot.professional_id, slot.start,
                  availability.held_until(session, tenant, service, slot), now=now)
    return waitlist_view(session, entry, tz)
