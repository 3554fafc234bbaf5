"""Who works when, and the one placement of a booking (issue 22; ARCHITECTURE.md, Hours, time
off and blocks).

A professional's day, in the tenant's zone (wall-clock "HH:MM"):
1. a day inside one of their `time_off` ranges: off;
2. else their own exception for the date, else their weekly `hours` (None: the business's);
3. the business's exception for the date applies on top: someone on the business's hours gets
   the exception's hours; someone with hours of their own works the part inside them (a
   holiday, [], closes everyone).

Busy time: booked appointments (their end plus their service's `buffer_minutes`) and
`ScheduleBlock`s. A slot's own buffer must be free too, but it may run past closing (clean-up
after the last client). A service takes `durations[code]` minutes with a professional who has
one, else its `duration_minutes`.

`place` is the one check-and-insert of an appointment, for the agent's tools and for the
business's doors (operations/agenda.py): the check and the insert share a transaction that
cannot interleave (the professional's row is locked FOR UPDATE on PostgreSQL; SQLite
transactions are BEGIN IMMEDIATE). With no professional asked for, the time goes to whoever
is free with the fewest bookings that local day, then the first in catalogue order (by code).
"""

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

from sqlalchemy import Integer, cast, literal, null, union_all
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, func, select

from agent.errors import ToolError
from agent.tools.base import echo, some_codes
from agent.tools.days_off import DaysOff, closed_label
from agent.tools.slots import (
    Interval,
    Slot,
    intersect,
    local_to_utc,
    on_wall_grid,
    overlaps,
    too_soon,
    wall_starts,
)
from storage import job_catalogue, waitlist
from storage.appointments import lock_for_booking
from storage.db import is_postgres
from storage.models import (
    Appointment,
    Professional,
    ScheduleBlock,
    Service,
    Tenant,
)
from storage.tenant_config import WEEKDAYS

MAX_BUFFER_MINUTES = 240  # storage/tenant_config.ServiceSpec.buffer_minutes, at most
MAX_VISIT = timedelta(minutes=1440 + MAX_BUFFER_MINUTES)  # a duration (ServiceSpec) + buffer
MAX_BLOCK = timedelta(days=31)  # a block, at most (longer: time off); operations/agenda.py
LocalIntervals = Sequence[tuple[str, str]]


class Taken(ToolError):
    """The time is not free (a booking, its buffer, or a block): a conflict with the state."""


@dataclass(frozen=True)
class Week:
    """One professional's week as plain values (`day_hours` is pure)."""

    professional_id: int
    code: str
    hours: Mapping[int, LocalIntervals]  # weekday (0 = Monday) -> local intervals
    own_hours: bool  # False: `hours` are the business's
    exceptions: Mapping[date, LocalIntervals] = field(default_factory=dict)
    time_off: Sequence[tuple[date, date]] = ()
    durations: Mapping[str, int] = field(default_factory=dict)


def day_hours(week: Week, day: date,
              business_exceptions: Mapping[date, LocalIntervals]) -> list[tuple[str, str]]:
    """The local intervals `week`'s professional works on `day` (module docstring, 1-3)."""
    if any(first <= day <= last for first, last in week.time_off):
        return []
    own = day in week.exceptions
    hours = list(week.exceptions[day] if own else week.hours.get(day.weekday(), ()))
    if day in business_exceptions:
        if not own and not week.own_hours:
            return list(business_exceptions[day])
        return intersect(hours, business_exceptions[day])
    return hours


def _pairs(intervals: Sequence[str]) -> list[tuple[str, str]]:
    return [(i[:5], i[6:]) for i in intervals]


def business_hours(session: Session, tenant_id: int) -> dict[int, list[tuple[str, str]]]:
    """The weekly opening hours: weekday (0 = Monday) -> local intervals by opening time."""
    hours: dict[int, list[tuple[str, str]]] = {}
    for row in job_catalogue.hours(session, tenant_id):
        hours.setdefault(row.weekday, []).append((row.opens, row.closes))
    return hours


def business_exceptions(session: Session, tenant_id: int) -> DaysOff:
    """Dates whose opening hours differ from their weekday's ([] = closed): the hours
    exceptions and the public holidays the business does not open (agent/tools/days_off.py)."""
    tenant = job_catalogue.tenant(session, tenant_id)
    exceptions = {row.day: _pairs(row.hours)
                  for row in job_catalogue.hours_exceptions(session, tenant_id)}
    if tenant is None:
        return DaysOff(exceptions, calendar="none", timezone="UTC", language="en")
    return DaysOff(exceptions, calendar=tenant.holiday_calendar, timezone=tenant.timezone,
                   language=tenant.language, open_days=tenant.open_holidays)


def week_of(pro: Professional, business: Mapping[int, LocalIntervals]) -> Week:
    own = pro.hours is not None
    hours = ({WEEKDAYS.index(d): _pairs(i) for d, i in (pro.hours or {}).items()} if own
             else business)
    return Week(professional_id=pro.id or 0, code=pro.code, hours=hours, own_hours=own,
                exceptions={date.fromisoformat(e["day"]): _pairs(e.get("hours", []))
                            for e in pro.hours_exceptions},
                time_off=[(date.fromisoformat(t["from"]), date.fromisoformat(t["to"]))
                          for t in pro.time_off],
                durations=dict(pro.durations))


def duration_of(service: Service, week: Week) -> timedelta:
    return timedelta(minutes=week.durations.get(service.code, service.duration_minutes))


def held_until(session: Session, tenant: Tenant, service: Service, slot: Slot) -> datetime:
    """The end of the time `slot` keeps its professional busy: the visit's end plus the
    service's buffer (what `busy_intervals` reads of a booking; a waitlist hold keeps it)."""
    return slot.end + timedelta(minutes=service.buffer_minutes)


def busy_intervals(session: Session, professional_ids: Sequence[int], since: datetime,
                   until: datetime, *, except_id: int | None = None,
                   now: datetime | None = None,
                   contact_id: int | None = None) -> dict[int, list[Interval]]:
    """The busy time of each professional overlapping [since, until): booked appointments
    (to their end plus their service's buffer), blocks and slots held for a waitlist offer
    (storage/waitlist.holds: at `now`, a hold that ran out is not; without `now`, every
    hold not yet released is). With `contact_id`, under `OWN` too: that customer's own
    booked time overlapping the range, as `own_intervals` reads it. One statement of three
    (four) indexed range reads (UNION ALL): the cost follows the rows in the range, not the
    agenda's size."""
    busy: dict[int, list[Interval]] = {pid: [] for pid in professional_ids}
    if not professional_ids:
        return busy
    ids = list(professional_ids)
    booked = sa_select(col(Appointment.professional_id), col(Appointment.start_at),
                       col(Appointment.end_at), col(Appointment.id),
                       col(Service.buffer_minutes)).join(
        Service, col(Service.id) == col(Appointment.service_id)).where(
        col(Appointment.professional_id).in_(ids), col(Appointment.status) == "booked",
        col(Appointment.start_at) < until, col(Appointment.start_at) > since - MAX_VISIT,
        col(Appointment.end_at) > since - timedelta(minutes=MAX_BUFFER_MINUTES))
    blocks = sa_select(col(ScheduleBlock.professional_id), col(ScheduleBlock.start_at),
                       col(ScheduleBlock.end_at), _NO_ID, _NO_ID).where(
        col(ScheduleBlock.professional_id).in_(ids),
        col(ScheduleBlock.start_at) < until, col(ScheduleBlock.start_at) > since - MAX_BLOCK,
        col(ScheduleBlock.end_at) > since)
    held = waitlist.held_intervals(ids, since, until, now=now).add_columns(_NO_ID, _NO_ID)
    reads = [booked, blocks, held]
    if contact_id is not None:
        busy[OWN] = []
        reads.append(sa_select(cast(literal(OWN), Integer), col(Appointment.start_at),
                               col(Appointment.end_at), _NO_ID, _NO_ID).where(
            *_own(contact_id, since, until)))
    for pid, start, end, row_id, buffer in session.execute(union_all(*reads)):
        if start is None or end is None or (row_id is not None and row_id == except_id):
            continue  # an offer always has its interval; a move's own row is free
        end += timedelta(minutes=buffer or 0)
        if end > since:
            busy[pid].append((start, end))
    return busy


_NO_ID = cast(null(), Integer)  # a block's or a hold's appointment id and buffer: none
OWN = 0  # busy_intervals' key of the customer's own time (no professional's id is 0)


def free_slots(session: Session, *, tenant: Tenant, service: Service,
               pros: Sequence[Professional], first: date, last: date, now: datetime,
               after: time | None = None, before: time | None = None,
               contact_id: int | None = None) -> list[Slot]:
    """Every free (start, professional) from `first` to `last` (local days), by start then
    catalogue order: inside the professional's day (`day_hours`), on its wall-clock grid
    (`slots.wall_starts`), not at or before `now` nor inside the notice, the visit and its
    buffer overlapping nothing busy, nor the visit any booked time of customer `contact_id`
    (when given); `after`/`before` keep local starts at or after / before those times."""
    tz = ZoneInfo(tenant.timezone)
    tenant_id = tenant.id or 0
    business = business_hours(session, tenant_id)
    exceptions = business_exceptions(session, tenant_id)
    weeks = [week_of(p, business) for p in pros]
    since = local_to_utc(first, "00:00", tz) - timedelta(days=1)
    busy = busy_intervals(session, [w.professional_id for w in weeks], since,
                          local_to_utc(last + timedelta(days=2), "00:00", tz), now=now,
                          contact_id=contact_id)
    mine = _Busy(busy.pop(OWN, []))
    step = timedelta(minutes=tenant.slot_granularity_minutes)
    notice = timedelta(minutes=tenant.booking_notice_minutes)
    buffer = timedelta(minutes=service.buffer_minutes)
    order = {w.professional_id: n for n, w in enumerate(weeks)}
    taken = {pid: _Busy(intervals) for pid, intervals in busy.items()}
    slots: list[Slot] = []
    day = first
    while day <= last:
        for week in weeks:
            duration = duration_of(service, week)
            for opens, closes in day_hours(week, day, exceptions):
                for start in wall_starts(day, opens, closes, step, duration, tz):
                    local = start.astimezone(tz).time()
                    if (after and local < after) or (before and local >= before) \
                            or too_soon(start, now, notice):
                        continue
                    if not taken[week.professional_id].overlaps(start,
                                                                start + duration + buffer) \
                            and not mine.overlaps(start, start + duration):
                        slots.append(Slot(start, start + duration, week.professional_id))
        day += timedelta(days=1)
    return sorted(slots, key=lambda s: (s.start, order[s.professional_id]))


class _Busy:
    """Busy intervals sorted by start, with the running latest end: whether [start, end)
    overlaps any of them in O(log n)."""

    def __init__(self, intervals: Sequence[Interval]) -> None:
        ordered = sorted(intervals)
        self.starts = [a for a, _ in ordered]
        self.latest: list[datetime] = []
        for _, end in ordered:
            self.latest.append(max(end, self.latest[-1]) if self.latest else end)

    def overlaps(self, start: datetime, end: datetime) -> bool:
        i = bisect_left(self.starts, end)  # the intervals starting before `end`
        return i > 0 and self.latest[i - 1] > start


def working_interval(week: Week, start: datetime, duration: timedelta, tz: ZoneInfo,
                     exceptions: Mapping[date, LocalIntervals]) -> tuple[str, str] | None:
    """The local interval of the professional's day that holds [start, start + duration)."""
    day = start.astimezone(tz).date()
    for opens, closes in day_hours(week, day, exceptions):
        if local_to_utc(day, opens, tz) <= start and start + duration <= local_to_utc(
                day, closes, tz):
            return opens, closes
    return None


def lock_professional(session: Session, professional_id: int) -> None:
    if is_postgres(session.get_bind()):  # type: ignore[arg-type]
        session.exec(select(Professional).where(Professional.id == professional_id)
                     .with_for_update()).first()


def hours_said(week: Week, day: date, exceptions: Mapping[date, LocalIntervals]) -> str:
    hours = day_hours(week, day, exceptions)
    return ", ".join(f"{a}-{b}" for a, b in hours) if hours else "not working"


@dataclass(frozen=True)
class Placement:
    """What `place` books: the visit, for whom, by whom."""

    service: Service
    start: datetime  # aware UTC
    contact_id: int
    now: datetime
    professional: Any = None  # a code or name; None: anyone who does the service
    tool_use_id: str | None = None
    by: str = "customer"  # customer (the agent's tools) or business (staff)
    grid: bool = True  # staff may book off the slot grid
    except_id: int | None = None  # an appointment being moved (its own time is free)
    visit_id: int | None = None  # the visit it joins (None: a new visit of its own)


def place(session: Session, tenant: Tenant, candidates: Sequence[Professional],
          p: Placement) -> Appointment:
    """Check and insert in this transaction (module docstring); raises ToolError saying why
    the time is not bookable with the professional(s): not working then (their hours that
    day are named), off the wall-clock grid, or taken (by a booking, a buffer or a block)."""
    tz = ZoneInfo(tenant.timezone)
    tenant_id = tenant.id or 0
    business = business_hours(session, tenant_id)
    exceptions = business_exceptions(session, tenant_id)
    step = timedelta(minutes=tenant.slot_granularity_minutes)
    local = p.start.astimezone(tz)
    working, grid_miss = [], None
    for pro in candidates:
        week = week_of(pro, business)
        duration = duration_of(p.service, week)
        interval = working_interval(week, p.start, duration, tz, exceptions)
        if interval is None:
            continue
        if p.grid and not on_wall_grid(p.start, interval[0], step, tz):
            grid_miss = grid_miss or interval[0]
            continue
        working.append((pro, week, duration))
    if not working:
        _refuse_not_working(tenant, candidates, p, business, exceptions, grid_miss)
    buffer = timedelta(minutes=p.service.buffer_minutes)
    # the tenant's row and the professionals' locked (in that order), a new visit's number
    number, first_id = lock_for_booking(session, tenant_id,
                                        [w.professional_id for _, w, _ in working],
                                        new_visit=p.visit_id is None)
    busy = busy_intervals(session, [w.professional_id for _, w, _ in working],
                          p.start - timedelta(days=1),
                          p.start + max(d for _, _, d in working) + buffer,
                          except_id=p.except_id, now=p.now)
    free = [(pro, duration) for pro, week, duration in working
            if not any(overlaps((p.start, p.start + duration + buffer), b)
                       for b in busy[week.professional_id])]
    if not free:
        raise Taken("that time is no longer free; call find_available_slots again")
    pro, duration = free[0] if len(free) == 1 else _fewest_that_day(session, free, local, tz)
    appointment = Appointment(tenant_id=tenant_id, contact_id=p.contact_id,
                              service_id=p.service.id or 0, professional_id=pro.id or 0,
                              start_at=p.start, end_at=p.start + duration,
                              tool_use_id=p.tool_use_id, created_at=p.now, booked_by=p.by,
                              visit_id=p.visit_id)
    if p.visit_id is None:
        appointment.booking_number = number
        if first_id is not None:  # its id known before the INSERT: the visit's id with it
            appointment.id = appointment.visit_id = first_id
    else:  # a service joining a visit: the visit's number
        head = session.get(Appointment, p.visit_id)
        appointment.booking_number = head.booking_number if head else None
    session.add(appointment)
    session.flush()
    if appointment.visit_id is None:
        appointment.visit_id = appointment.id
    return appointment


def _refuse_not_working(tenant: Tenant, candidates: Sequence[Professional], p: Placement,
                        business: Any, exceptions: Any, grid_miss: Any) -> NoReturn:
    """Why no candidate works at `p.start` (a ToolError): a public holiday, off the grid,
    the asked professional's hours that day, or no one who does the service."""
    local = p.start.astimezone(ZoneInfo(tenant.timezone))
    if (holiday := exceptions.holiday(local.date())) is not None:
        raise ToolError(f"{local:%a %Y-%m-%d} {closed_label(tenant.language, holiday)} "
                        "(a public holiday); offer another day")
    if grid_miss is not None:
        raise ToolError(f"{local:%H:%M} is not a start time: appointments start every "
                        f"{tenant.slot_granularity_minutes} minutes from {grid_miss}; "
                        "offer a time find_available_slots returned")
    if p.professional and len(candidates) == 1:
        week = week_of(candidates[0], business)
        raise ToolError(f"{candidates[0].code} does not work at {local:%a %Y-%m-%d %H:%M} "
                        f"for {p.service.code} ({local:%a %Y-%m-%d}: "
                        f"{hours_said(week, local.date(), exceptions)}); use "
                        "find_available_slots")
    raise ToolError("that time is outside the opening hours of everyone who does "
                    f"{p.service.code}; use find_available_slots")


def _fewest_that_day(session: Session, free: list[tuple[Professional, timedelta]],
                     local: datetime, tz: ZoneInfo) -> tuple[Professional, timedelta]:
    """The stated rule of "any professional": fewest booked appointments that local day, then
    catalogue order (`free` is in it)."""
    day_start = local_to_utc(local.date(), time(0), tz)
    day_end = local_to_utc(local.date() + timedelta(days=1), time(0), tz)
    counts = dict(session.exec(select(Appointment.professional_id, func.count()).where(
        col(Appointment.professional_id).in_([p.id for p, _ in free]),
        Appointment.status == "booked", col(Appointment.start_at) >= day_start,
        col(Appointment.start_at) < day_end).group_by(col(Appointment.professional_id))).all())
    return min(free, key=lambda pair: counts.get(pair[0].id or 0, 0))  # the first tie wins


def candidates(session: Session, tenant_id: int, service: Service,
               code: Any) -> list[Professional]:
    """The active professionals who do `service`, in catalogue order (by code); only the one
    named by `code` (a code or a name) when given. ToolError when none."""
    pros = [p for p in job_catalogue.professionals(session, tenant_id)
            if service.code in p.service_codes]
    if code:
        chosen = [p for p in pros if isinstance(code, str)
                  and code.strip().lower() in (p.code.lower(), p.name.lower())]
        if not chosen:
            raise ToolError(f"professional {echo(code)} does not do {service.code}; who does: "
                            f"{some_codes([p.code for p in pros])}")
        return chosen
    if not pros:
        raise ToolError(f"nobody does {service.code} at the moment")
    return pros


# -- visits of several services (issue 38) -------------------------------------------------

MAX_VISIT_SERVICES = 5  # services in one visit, at most


@dataclass(frozen=True)
class Item:
    """One service of a visit found free: its professional and times (aware UTC)."""

    service: Service
    professional_id: int
    start: datetime
    end: datetime


def own_intervals(session: Session, contact_id: int, since: datetime,
                  until: datetime) -> list[Interval]:
    """The customer's own booked time overlapping [since, until) (any professional): a time
    offered to them never overlaps it. One indexed read (the contact's rows)."""
    return [(a.start_at, a.end_at) for a in session.exec(select(Appointment).where(
        *_own(contact_id, since, until)))]


def _own(contact_id: int, since: datetime, until: datetime) -> tuple[Any, ...]:
    """The conditions of the customer's booked rows overlapping [since, until)."""
    return (Appointment.contact_id == contact_id, Appointment.status == "booked",
            col(Appointment.start_at) < until, col(Appointment.end_at) > since)


def visit_slots(session: Session, *, tenant: Tenant, services: Sequence[Service],
                pros: Sequence[Sequence[Professional]], first: date, last: date,
                now: datetime, after: time | None = None, before: time | None = None,
                own: Sequence[Interval] = ()) -> list[list[Item]]:
    """Start times where the whole sequence of `services` fits, one after the other, each
    with one of its `pros` (the same index), and none overlaps `own` (the customer's own
    bookings): one visit (a list of items) per start, by start. The visit's start follows the
    rules of `free_slots` (grid, notice, `after`/`before`); each next service starts when
    every one before it has ended, with the professional of the one before when they do it
    and are free, else the first free in catalogue order (the time after a professional's own
    earlier item keeps that service's buffer). A service of the tenant's `parallel_services`
    starts with the one before it instead, by another professional, when one is free then
    (a manicure beside a haircut); otherwise it follows as the others do."""
    tz = ZoneInfo(tenant.timezone)
    business = business_hours(session, tenant.id or 0)
    exceptions = business_exceptions(session, tenant.id or 0)
    everyone = {p.id or 0: p for group in pros for p in group}
    weeks = {pid: week_of(p, business) for pid, p in everyone.items()}
    since = local_to_utc(first, "00:00", tz) - timedelta(days=1)
    until = local_to_utc(last + timedelta(days=3), "00:00", tz)
    taken = {pid: _Busy(i) for pid, i in busy_intervals(session, list(everyone), since,
                                                         until, now=now).items()}
    mine = _Busy(own)
    visits: list[list[Item]] = []
    found: set[datetime] = set()
    for slot in free_slots(session, tenant=tenant, service=services[0], pros=pros[0],
                           first=first, last=last, now=now, after=after, before=before):
        if slot.start in found or mine.overlaps(slot.start, slot.end):
            continue
        items = [Item(services[0], slot.professional_id, slot.start, slot.end)]
        for service, group in zip(services[1:], pros[1:], strict=True):
            item = _next_item(items, service, group, weeks, taken, mine, tz, exceptions,
                              parallel=service.code in (tenant.parallel_services or []))
            if item is None:
                break
            items.append(item)
        if len(items) == len(services):
            visits.append(items)
            found.add(slot.start)
    return visits


def next_in_visit(session: Session, tenant: Tenant, items: list[Item], service: Service,
                  group: Sequence[Professional]) -> Item | None:
    """Where `service` goes after `items` (a visit's services placed so far, by start), with
    one of `group`, by visit_slots' rule (`_next_item`: when every one before has ended, the
    professional of the one before first; a `parallel_services` one with the one before,
    by another professional, when one is free then); None when nobody in `group` is free
    then. For a booking whose start is given (operations/agenda.book, staff): it does not
    check the start's grid or notice."""
    tz = ZoneInfo(tenant.timezone)
    business = business_hours(session, tenant.id or 0)
    weeks = {p.id or 0: week_of(p, business) for p in group}
    first = items[0].start
    taken = {pid: _Busy(i) for pid, i in busy_intervals(
        session, list(weeks), first - timedelta(days=1), first + timedelta(days=3)).items()}
    return _next_item(items, service, group, weeks, taken, _Busy(()), tz,
                      business_exceptions(session, tenant.id or 0),
                      parallel=service.code in (tenant.parallel_services or []))


def _next_item(items: list[Item], service: Service, group: Sequence[Professional],
               weeks: Mapping[int, Week], taken: Mapping[int, "_Busy"], mine: "_Busy",
               tz: ZoneInfo, exceptions: Mapping[date, LocalIntervals], *,
               parallel: bool = False) -> Item | None:
    after = max(i.end for i in items)  # every service before it has ended
    starts = [items[-1].start, after] if parallel else [after]
    previous = items[-1].professional_id
    buffer = timedelta(minutes=service.buffer_minutes)
    for start in starts:
        ordered = sorted(group, key=lambda p: p.id != previous)  # the one before first
        for pro in ordered:
            week = weeks[pro.id or 0]
            duration = duration_of(service, week)
            end = start + duration
            if working_interval(week, start, duration, tz, exceptions) is None \
                    or taken[week.professional_id].overlaps(start, end + buffer) \
                    or mine.overlaps(start, end):
                continue
            if any(i.professional_id == week.professional_id and overlaps(
                    (start, end + buffer),
                    (i.start, i.end + timedelta(minutes=i.service.buffer_minutes)))
                   for i in items):
                continue  # one professional does one thing at a time
            return Item(service, week.professional_id, start, end)
    return None
