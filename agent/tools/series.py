"""Recurring visits (issue 46): a series (storage/models.VisitSeries) places its occurrences
ahead within the booking horizon, each a normal visit (its own booking number, reminders,
confirmation, outcome) carrying `series_id`; `extend` keeps placing them as the horizon moves
(`wagent cron`'s series pass, workers/series.py).

An occurrence that cannot be placed (the professional blocked or off, a holiday, another
booking, the customer's own visit) is not dropped: it is kept in the series' `pending` with
the reason, listed to the agent and staff as needing a new time; the customer's next booking
of the same services joins the series in its place (`pending_for`, `resolve`). A series counts
as one in the per-customer limit (agent/tools/scheduling._count_upcoming).

Each occurrence goes through `availability.place`, the one check-and-insert of every booking,
inside a savepoint, so a visit of several services is placed whole or not at all.
"""

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from agent.errors import ToolError
from agent.tools import availability
from agent.tools.slots import local_to_utc, overlaps
from core.recurrence import occurrences, total
from storage import appointments, reminders, webhooks
from storage.models import Appointment, Professional, Service, Tenant, VisitSeries

REASON_CHARS = 120  # a pending occurrence's reason, at most
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"


def first_of(series: VisitSeries) -> datetime:
    """The series' first visit, naive local (the rule's DTSTART)."""
    return datetime.strptime(series.first_local, LOCAL_FORMAT)


def horizon_day(tenant: Tenant, now: datetime) -> date:
    """The last local day the tenant takes bookings for (its `booking_horizon_days`)."""
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    return today + timedelta(days=tenant.booking_horizon_days)


def start(session: Session, tenant: Tenant, rows: list[Appointment], rule: str, *,
          professional_id: int, now: datetime) -> tuple[VisitSeries, list[list[Appointment]]]:
    """A series whose first occurrence is the visit `rows`, already placed (by the agent's
    or staff's own checks); the rows join it and the later occurrences within the horizon
    are placed (`extend`). Returns the series and every visit it placed, the first included."""
    tz = ZoneInfo(tenant.timezone)
    head = rows[0]
    local = head.start_at.astimezone(tz)
    series = VisitSeries(
        tenant_id=tenant.id or 0, contact_id=head.contact_id, professional_id=professional_id,
        services=[_code(session, r) for r in rows], rule=rule,
        first_local=local.strftime(LOCAL_FORMAT), booked_through=local.date(),
        note=head.note, for_name=head.for_name, booked_by=head.booked_by, created_at=now)
    session.add(series)
    session.flush()
    for row in rows:
        row.series_id = series.id
        session.add(row)
    return series, [rows, *extend(session, tenant, series, now=now)]


def extend(session: Session, tenant: Tenant, series: VisitSeries, *,
           now: datetime) -> list[list[Appointment]]:
    """Place the series' occurrences after its `booked_through` up to the tenant's horizon:
    each placed one gets its reminders and an `appointment.booked` event; one that cannot be
    placed goes to `pending` with the reason. Returns the visits placed."""
    if series.ended_at is not None:
        return []
    tz = ZoneInfo(tenant.timezone)
    through = horizon_day(tenant, now)
    placed: list[list[Appointment]] = []
    pending = list(series.pending)
    for n, local in occurrences(series.rule, first_of(series), after=series.booked_through,
                                through=through):
        at = local_to_utc(local.date(), local.time(), tz)
        if at <= now:
            continue
        try:
            rows = place_occurrence(session, tenant, series, at, now=now)
        except ToolError as exc:
            pending.append({"n": n, "start": local.strftime(LOCAL_FORMAT),
                            "reason": _reason(session, tenant, local.date(), exc)})
            continue
        reminders.schedule(session, tenant, rows[0], now=now)
        for row in rows:
            webhooks.emit(session, tenant.id or 0, "appointment.booked",
                          webhooks.appointment_data(session, row, by=series.booked_by),
                          now=now)
        placed.append(rows)
    # every occurrence placed or pending: the pass skips it from now on
    done = not occurrences(series.rule, first_of(series), after=through, through=date.max)
    series.booked_through = date.max if done else max(series.booked_through, through)
    series.pending = pending
    session.add(series)
    session.flush()
    return placed


def place_occurrence(session: Session, tenant: Tenant, series: VisitSeries, at: datetime, *,
                     now: datetime) -> list[Appointment]:
    """One occurrence at `at` (aware UTC): the series' services one after the other, each
    with its professional when they do it (else anyone who does), placed whole or not at all
    (a savepoint); ToolError saying why it cannot be (availability.place's reasons, or the
    customer's own booking then)."""
    services = [_service(session, series.tenant_id, code) for code in series.services]
    pro = session.get(Professional, series.professional_id)
    own = availability.own_intervals(session, series.contact_id, at - timedelta(days=1),
                                     at + availability.MAX_VISIT * len(services))
    with session.begin_nested():
        rows: list[Appointment] = []
        for service in services:
            code = pro.code if pro is not None and service.code in pro.service_codes else None
            row = availability.place(
                session, tenant, availability.candidates(session, tenant.id or 0, service, code),
                availability.Placement(
                    service=service, start=max(r.end_at for r in rows) if rows else at,
                    contact_id=series.contact_id, now=now, professional=code,
                    by=series.booked_by, grid=False,
                    visit_id=appointments.visit_of(rows[0]) if rows else None))
            if any(overlaps((row.start_at, row.end_at), o) for o in own):
                raise ToolError("the customer has another booking then")
            row.note, row.for_name, row.series_id = series.note, series.for_name, series.id
            session.add(row)
            rows.append(row)
        session.flush()
    return rows


def _reason(session: Session, tenant: Tenant, day: date, exc: ToolError) -> str:
    """Why an occurrence could not be placed, short: the holiday's name on a public holiday,
    else the refusal's own words."""
    holiday = availability.business_exceptions(session, tenant.id or 0).holiday(day)
    said = f"holiday: {holiday}" if holiday else str(exc)
    return said[:REASON_CHARS]


def _service(session: Session, tenant_id: int, code: str) -> Service:
    service = session.exec(select(Service).where(Service.tenant_id == tenant_id,
                                                 Service.code == code,
                                                 col(Service.active).is_(True))).first()
    if service is None:
        raise ToolError(f"service {code} is no longer offered")
    return service


def _code(session: Session, row: Appointment) -> str:
    service = session.get(Service, row.service_id)
    assert service is not None
    return service.code


def pending_for(session: Session, tenant_id: int, contact_id: int,
                codes: list[str]) -> VisitSeries | None:
    """The customer's running series of exactly these services with an occurrence needing a
    new time (the earliest series first); None when there is none."""
    return first_pending(session.exec(running(tenant_id, contact_id)).all(), codes)


def running(tenant_id: int, contact_id: int) -> SelectOfScalar[VisitSeries]:
    """The read of the customer's running series, the earliest first."""
    return select(VisitSeries).where(
        VisitSeries.tenant_id == tenant_id, VisitSeries.contact_id == contact_id,
        col(VisitSeries.ended_at).is_(None)).order_by(col(VisitSeries.id))


def first_pending(rows: Sequence[VisitSeries], codes: list[str]) -> VisitSeries | None:
    """The first of `rows` (running series) of exactly these services with an occurrence
    needing a new time (`pending_for`)."""
    return next((s for s in rows if s.pending and list(s.services) == codes), None)


def resolve(session: Session, series: VisitSeries, rows: list[Appointment],
            tz: ZoneInfo) -> dict[str, Any]:
    """The visit `rows`, booked for one of the series' pending occurrences, joins the series in
    place of the pending occurrence nearest to it, which is no longer pending. Returns it."""
    start_at = rows[0].start_at.astimezone(tz).replace(tzinfo=None)
    entry = min(series.pending, key=lambda e: abs(
        datetime.strptime(e["start"], LOCAL_FORMAT) - start_at))
    series.pending = [e for e in series.pending if e is not entry]
    for row in rows:
        row.series_id = series.id
        session.add(row)
    session.add(series)
    session.flush()
    return dict(entry)


def end_from(session: Session, series: VisitSeries, since: datetime, *,
             now: datetime) -> list[Appointment]:
    """Cancel the series from `since` (aware UTC) on: its booked rows starting then or later
    are cancelled (returned, by start; their reminders cancelled), the pending occurrences
    from then dropped, and no more are placed (`ended_at`)."""
    rows = list(session.exec(select(Appointment).where(
        Appointment.series_id == series.id, Appointment.status == "booked",
        col(Appointment.start_at) >= since).order_by(col(Appointment.start_at),
                                                     col(Appointment.id))
        .with_for_update()).all())
    for row in rows:
        row.status, row.cancelled_at = "cancelled", now
        session.add(row)
    for visit_id in dict.fromkeys(appointments.visit_of(r) for r in rows):
        reminders.cancel_for(session, visit_id, reason="series cancelled")
    series.ended_at = now
    series.pending = []
    session.add(series)
    session.flush()
    return rows


def summary(session: Session, series: VisitSeries, tz: ZoneInfo) -> str:
    """The series in one line for the agent and staff: "series 3 (FREQ=WEEKLY;COUNT=4): 3 of
    4 booked ahead; needs a new time: 2 Tue 2026-09-15 19:00 (holiday: X)"."""
    booked = session.exec(select(appointments.VISIT).where(
        Appointment.series_id == series.id, Appointment.status == "booked")
        .distinct()).all()
    said = (f"series {series.id} ({series.rule}): {len(booked)} of "
            f"{total(series.rule, first_of(series))} booked"
            + (", ended" if series.ended_at else ""))
    if series.pending:
        said += "; needs a new time: " + "; ".join(
            f"{datetime.strptime(e['start'], LOCAL_FORMAT):%a %Y-%m-%d %H:%M} ({e['reason']})"
            for e in series.pending)
    return said


def of_contact(session: Session, tenant_id: int, contact_id: int) -> list[VisitSeries]:
    """The customer's running series (not ended), oldest first."""
    return list(session.exec(select(VisitSeries).where(
        VisitSeries.tenant_id == tenant_id, VisitSeries.contact_id == contact_id,
        col(VisitSeries.ended_at).is_(None)).order_by(col(VisitSeries.id))).all())


def extend_all(session: Session, *, now: datetime, limit: int = 500) -> int:
    """The series pass: every running series whose `booked_through` is before its tenant's
    horizon gets its new occurrences (`extend`); at most `limit` series a call. Returns the
    visits placed."""
    placed = 0
    for series in session.exec(select(VisitSeries).where(
            col(VisitSeries.ended_at).is_(None), col(VisitSeries.booked_through) < date.max)
            .order_by(col(VisitSeries.booked_through), col(VisitSeries.id))
            .limit(limit)).all():
        tenant = session.get(Tenant, series.tenant_id)
        if tenant is not None and series.booked_through < horizon_day(tenant, now):
            placed += len(extend(session, tenant, series, now=now))
    return placed
