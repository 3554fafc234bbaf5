"""iCalendar feeds of the agenda (issue 46): a professional's, or the business's, visits and
blocks as an RFC 5545 VCALENDAR (the `icalendar` library) that Google Calendar, Apple Calendar
and Outlook subscribe to by URL (`/calendar/{token}.ics`, bot/feeds.py; tokens in
storage/feeds.py).

- What an event says: the service and the customer's first name (for_name's, else the
  profile name's first word); never a phone number; the appointment's note only when the
  tenant's `feed_notes` is on. Blocks: "Bloqueado" / "Blocked" and their note.
- Stable UIDs: a booking moved (old row cancelled, `moved_to_id`) keeps the UID of the row
  it started as, and its SEQUENCE is the number of moves (RFC 5545 3.8.7.4), so a calendar
  updates the event in place; a cancelled one stays with STATUS:CANCELLED and SEQUENCE one
  more. A row cancelled by a move is not an event of its own.
- Window: from WINDOW_PAST_DAYS ago to the booking horizon.
- Cheap polling: `fingerprint` is one aggregate query per table and one digest of what
  changes in place (notes, names: `_content`); its hash is the ETag and its latest change the
  Last-Modified, so an unchanged feed answers 304 without being built. An in-place change
  moves the ETag only (no row has a timestamp of it): a client sending only
  If-Modified-Since sees it the next day, when the window moves.
"""

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from icalendar import Calendar, Event
from sqlmodel import Session, col, func, or_, select

from operations.errors import Invalid
from storage import feeds
from storage.models import (
    Appointment,
    CalendarFeed,
    Contact,
    Professional,
    ScheduleBlock,
    Service,
    Tenant,
)

WINDOW_PAST_DAYS = 30
PRODID = "-//wagent//agenda//PT"
BLOCKED = {"pt-BR": "Bloqueado", "en": "Blocked"}


@dataclass(frozen=True)
class Stamp:
    """What the feed's HTTP caching reads: its ETag and Last-Modified."""

    etag: str
    last_modified: datetime


def _window(tenant: Tenant, now: datetime) -> tuple[datetime, datetime]:
    return (now - timedelta(days=WINDOW_PAST_DAYS),
            now + timedelta(days=tenant.booking_horizon_days + 1))


def _of_feed(feed: CalendarFeed, column: Any) -> tuple[Any, ...]:
    return () if feed.professional_id is None else (column == feed.professional_id,)


def fingerprint(session: Session, tenant: Tenant, feed: CalendarFeed, now: datetime) -> Stamp:
    """The feed's ETag and Last-Modified without building it: counts, highest ids and latest
    changes of its appointments and blocks in the window, the tenant's `feed_notes` and the
    day (the window moves daily)."""
    since, until = _window(tenant, now)
    a = session.exec(select(func.count(), func.max(Appointment.id),
                            func.max(Appointment.created_at),
                            func.max(Appointment.cancelled_at)).where(
        Appointment.tenant_id == tenant.id, col(Appointment.start_at) >= since,
        col(Appointment.start_at) < until,
        *_of_feed(feed, Appointment.professional_id))).one()
    b = session.exec(select(func.count(), func.max(ScheduleBlock.id),
                            func.max(ScheduleBlock.created_at)).where(
        ScheduleBlock.tenant_id == tenant.id, col(ScheduleBlock.end_at) >= since,
        col(ScheduleBlock.start_at) < until,
        *_of_feed(feed, ScheduleBlock.professional_id))).one()
    seen = [t for t in (a[2], a[3], b[2], feed.created_at) if t is not None]
    changed = max(t if t.tzinfo else t.replace(tzinfo=UTC) for t in seen)
    key = repr((tuple(a), tuple(b), tenant.feed_notes, since.date(), feed.token,
                _content(session, tenant, feed, since, until)))
    return Stamp(etag='"' + hashlib.sha256(key.encode()).hexdigest()[:32] + '"',
                 last_modified=changed.replace(microsecond=0))


def _content(session: Session, tenant: Tenant, feed: CalendarFeed, since: datetime,
             until: datetime) -> str:
    """A digest of what an event shows that changes in place, with no timestamp: a note
    edited, a name (`for_name`, the contact's after an erasure, a service's, a
    professional's), a block's note. One query per table, of the window's rows."""
    digest = hashlib.sha256()
    rows = session.exec(select(Appointment, Contact.profile_name, Service.name,
                               Professional.name)
                        .join(Contact, col(Contact.id) == Appointment.contact_id, isouter=True)
                        .join(Service, col(Service.id) == Appointment.service_id, isouter=True)
                        .join(Professional, col(Professional.id) == Appointment.professional_id,
                              isouter=True)
                        .where(Appointment.tenant_id == tenant.id,
                               col(Appointment.start_at) >= since,
                               col(Appointment.start_at) < until,
                               *_of_feed(feed, Appointment.professional_id))
                        .order_by(col(Appointment.id))).all()
    blocks = session.exec(select(ScheduleBlock.id, ScheduleBlock.note).where(
        ScheduleBlock.tenant_id == tenant.id, col(ScheduleBlock.end_at) >= since,
        col(ScheduleBlock.start_at) < until, *_of_feed(feed, ScheduleBlock.professional_id))
        .order_by(col(ScheduleBlock.id))).all()
    for row, *names in rows:
        digest.update(repr((row.id, row.status, row.note, row.for_name, row.contact_id,
                            *names)).encode())
    for block in blocks:
        digest.update(repr(tuple(block)).encode())
    return digest.hexdigest()


def build(session: Session, tenant: Tenant, feed: CalendarFeed, now: datetime) -> bytes:
    """The feed as iCalendar bytes (module docstring)."""
    since, until = _window(tenant, now)
    rows = list(session.exec(select(Appointment).where(
        Appointment.tenant_id == tenant.id, col(Appointment.start_at) >= since,
        col(Appointment.start_at) < until, *_of_feed(feed, Appointment.professional_id))
        .order_by(col(Appointment.start_at), col(Appointment.id))).all())
    origins = _origins(session, rows)
    calendar = Calendar()
    calendar.add("prodid", PRODID)
    calendar.add("version", "2.0")
    calendar.add("calscale", "GREGORIAN")
    calendar.add("x-wr-calname", _title(session, tenant, feed))
    calendar.add("x-wr-timezone", tenant.timezone)
    for row in rows:
        if row.moved_to_id is not None:
            continue  # replaced by its move: the new row carries its UID
        calendar.add_component(_event(session, tenant, row, origins.get(row.id or 0),
                                      now=now))
    blocks = session.exec(select(ScheduleBlock).where(
        ScheduleBlock.tenant_id == tenant.id, col(ScheduleBlock.end_at) >= since,
        col(ScheduleBlock.start_at) < until, *_of_feed(feed, ScheduleBlock.professional_id))
        .order_by(col(ScheduleBlock.start_at))).all()
    for block in blocks:
        calendar.add_component(_block_event(session, tenant, block, now=now))
    return bytes(calendar.to_ical())


def _origins(session: Session, rows: list[Appointment]) -> dict[int, tuple[int, int]]:
    """For each row that came from moves: (the id of the row it started as, how many moves).
    A row's predecessor is the row whose `moved_to_id` is its id, or (a whole visit moved)
    its visit's id with the same service."""
    found: dict[int, tuple[int, int]] = {}
    for row in rows:
        if row.id is None:
            continue
        current, moves = row, 0
        while moves < 100:
            before = session.exec(select(Appointment).where(
                Appointment.tenant_id == row.tenant_id, or_(
                    col(Appointment.moved_to_id) == current.id,
                    (col(Appointment.moved_to_id) == current.visit_id)
                    & (col(Appointment.service_id) == current.service_id)),
                col(Appointment.id) != current.id).order_by(col(Appointment.id))).first()
            if before is None:
                break
            current, moves = before, moves + 1
        if moves:
            found[row.id] = (current.id or 0, moves)
    return found


def _title(session: Session, tenant: Tenant, feed: CalendarFeed) -> str:
    pro = session.get(Professional, feed.professional_id) if feed.professional_id else None
    return f"{tenant.name} · {pro.name}" if pro else tenant.name


def first_name(row: Appointment, contact: Contact | None) -> str:
    """The customer's first name only: `for_name`'s, else the profile name's; "" when there is
    none (never the phone number)."""
    name = row.for_name or (contact.profile_name if contact else "") or ""
    words = [w for w in name.split() if not any(c.isdigit() for c in w)]
    return words[0] if words else ""


def _event(session: Session, tenant: Tenant, row: Appointment,
           origin: tuple[int, int] | None, *, now: datetime) -> Event:
    service = session.get(Service, row.service_id)
    pro = session.get(Professional, row.professional_id)
    contact = session.get(Contact, row.contact_id)
    first, moves = origin or (row.id or 0, 0)
    event = Event()
    event.add("uid", f"appointment-{first}@{tenant.phone_number_id}.wagent")
    event.add("sequence", moves + (1 if row.status == "cancelled" else 0))
    event.add("dtstamp", now)
    event.add("dtstart", row.start_at.astimezone(ZoneInfo(tenant.timezone)))
    event.add("dtend", row.end_at.astimezone(ZoneInfo(tenant.timezone)))
    name = first_name(row, contact)
    event.add("summary", (service.name if service else "?") + (f" · {name}" if name else ""))
    if pro is not None:
        event.add("x-wagent-professional", pro.name)
    event.add("status", "CANCELLED" if row.status == "cancelled" else "CONFIRMED")
    if tenant.feed_notes and row.note:
        event.add("description", row.note)
    last = max(t for t in (row.created_at, row.cancelled_at) if t is not None)
    event.add("last-modified", last)
    return event


def _block_event(session: Session, tenant: Tenant, block: ScheduleBlock, *,
                 now: datetime) -> Event:
    event = Event()
    event.add("uid", f"block-{block.id}@{tenant.phone_number_id}.wagent")
    event.add("sequence", 0)
    event.add("dtstamp", now)
    event.add("dtstart", block.start_at.astimezone(ZoneInfo(tenant.timezone)))
    event.add("dtend", block.end_at.astimezone(ZoneInfo(tenant.timezone)))
    label = BLOCKED.get(tenant.language, BLOCKED["pt-BR"])
    event.add("summary", label + (f" · {block.note}" if block.note else ""))
    event.add("transp", "OPAQUE")
    return event


def feed_and_tenant(session: Session, token: str) -> tuple[CalendarFeed, Tenant] | None:
    """The live feed of `token` with its tenant; None (the web's 404) otherwise."""
    feed = feeds.by_token(session, token)
    tenant = session.get(Tenant, feed.tenant_id) if feed else None
    return (feed, tenant) if feed is not None and tenant is not None else None


def _scope(session: Session, tenant: Tenant, professional: str) -> Professional | None:
    """The feed's scope: professional `professional` (a code), or the business ("");
    Invalid for an unknown code."""
    if not professional:
        return None
    pro = session.exec(select(Professional).where(Professional.tenant_id == tenant.id,
                                                  Professional.code == professional)).first()
    if pro is None:
        raise Invalid(f"unknown professional {professional[:64]!r}",
                      [f"professional: unknown {professional[:64]!r}"])
    return pro


def feed_views(session: Session, tenant: Tenant, origin: str) -> list[dict[str, Any]]:
    """The business's feed, then each active professional's: {"professional": code or "",
    "name", "url": the subscription URL at `origin` (scheme://host), or None: no live feed}."""
    live = {f.professional_id: f for f in feeds.live(session, tenant.id or 0)}
    pros = session.exec(select(Professional).where(
        Professional.tenant_id == tenant.id, col(Professional.active).is_(True))
        .order_by(col(Professional.code))).all()
    scopes: list[tuple[str, str, int | None]] = [("", tenant.name, None)]
    scopes += [(p.code, p.name, p.id) for p in pros]
    return [{"professional": code, "name": name,
             "url": f"{origin.rstrip('/')}/calendar/{live[key].token}.ics" if key in live
             else None} for code, name, key in scopes]


def reissue(session: Session, tenant: Tenant, professional: str, *, now: datetime) -> str:
    """A new token for the scope (the old URL answers 404 from now on); returns the token."""
    pro = _scope(session, tenant, professional)
    return feeds.issue(session, tenant.id or 0, pro.id if pro else None, now=now).token


def revoke(session: Session, tenant: Tenant, professional: str, *, now: datetime) -> int:
    """Revoke the scope's feed (its URL answers 404); how many were live (0 or 1)."""
    pro = _scope(session, tenant, professional)
    return feeds.revoke(session, tenant.id or 0, pro.id if pro else None, now=now)
